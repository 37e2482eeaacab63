/* Semantics of libshmem_queues on a real OpenSHMEM, at any number of PEs (run at 2 and 4 by
 * scripts/queues-tests.sh). Every PE prints "RESULT OK pe=N ..." before shmem_finalize when all
 * checks passed (some OpenSHMEMs crash inside shmem_finalize: the runner looks for that line
 * from every PE, not at the exit status), or "RESULT FAIL" lines naming what failed.
 *
 * Checks: mixed comm-queue operations to every PE; operations on a global symmetric array; flush ordering and visibility (a flag sent
 * after local_flush finds the data applied); max_elems; error codes; data-queue contents after
 * global flush (per source and ANY_PE, FIFO), max_bytes and the partial flush; timeout_flush;
 * a SHMEM_QUEUE_SHARED queue pushed from 4 threads (if the library gives THREAD_MULTIPLE). */
#include <pthread.h>
#include <shmem.h>
#include <shmem_queues.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int me, npes;
static long failures, checks;

#define CHECK(cond, ...)                                               \
    do {                                                               \
        checks++;                                                      \
        if (!(cond)) {                                                 \
            failures++;                                                \
            printf("RESULT FAIL pe=%d line %d: %s: ", me, __LINE__, #cond); \
            printf(__VA_ARGS__);                                       \
            printf("\n");                                              \
            fflush(stdout);                                            \
        }                                                              \
    } while (0)

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static shmem_queue_t comm_queue(shmem_queue_sharing_t sharing, uint64_t max_elems, double timeout) {
    shmem_queue_config_t c = {.qtype = SHMEM_QUEUE_COMM, .sharing_model = sharing, .max_elems = max_elems,
                              .timeout_flush = timeout};
    shmem_queue_t q = NULL;
    int rc = shmem_queue_comm_create(&q, &c);
    CHECK(rc == 0 && q != NULL, "comm create rc %d", rc);
    if (rc) shmem_global_exit(2);
    return q;
}

#define T 64
#define N_MIXED 5000

/* Increments to random (PE, entry), one ADD per PE, one PUT per PE, one GET per PE. */
static void mixed(void) {
    long *table = shmem_calloc(T, sizeof(long));
    long *sum = shmem_calloc(1, sizeof(long));
    long *slots = shmem_calloc(npes, sizeof(long));
    long *ident = shmem_malloc(sizeof(long));
    *ident = 7L * me + 1;
    long *got = calloc(npes, sizeof(long));
    shmem_queue_t q = comm_queue(SHMEM_QUEUE_EXCLUSIVE, 0, SHMEM_QUEUE_MAX_TIMEOUT);
    shmem_barrier_all();
    uint64_t s = 77 + me;
    for (int k = 0; k < N_MIXED; k++) {
        uint64_t r = rng(&s);
        CHECK(shmem_queue_comm_push(q, &table[r % T], (long *)NULL, 1, (int)((r >> 32) % npes), SHMEM_OP_ATOMIC_INC) == 0,
              "inc");
        if (k % 97 == 0) CHECK(shmem_queue_progress(q) >= 0, "progress");
    }
    long mine = me + 1, val = 1000 + me;
    for (int p = 0; p < npes; p++) {
        CHECK(shmem_queue_comm_push(q, sum, &mine, 1, p, SHMEM_OP_ATOMIC_ADD) == 0, "add");
        CHECK(shmem_queue_comm_push(q, &slots[me], &val, 1, p, SHMEM_OP_PUT) == 0, "put");
        CHECK(shmem_queue_comm_push(q, &got[p], ident, 1, p, SHMEM_OP_GET) == 0, "get");
    }
    CHECK(shmem_queue_local_flush(q) == 0, "flush");
    size_t sz = 99;
    CHECK(shmem_query_size(q, &sz) == 0 && sz == 0, "size after flush %zu", sz);
    for (int p = 0; p < npes; p++) CHECK(got[p] == 7L * p + 1, "get from %d: %ld", p, got[p]);
    shmem_barrier_all();
    long expect[T] = {0}, want_sum = 0;
    for (int p = 0; p < npes; p++) {
        uint64_t r0 = 77 + p;
        for (int k = 0; k < N_MIXED; k++) {
            uint64_t r = rng(&r0);
            if ((int)((r >> 32) % npes) == me) expect[r % T]++;
        }
        want_sum += p + 1;
        CHECK(slots[p] == 1000 + p, "slot %d: %ld", p, slots[p]);
    }
    long bad = 0;
    for (int i = 0; i < T; i++) bad += table[i] != expect[i];
    CHECK(bad == 0, "%ld histogram entries differ", bad);
    CHECK(*sum == want_sum, "sum %ld want %ld", *sum, want_sum);
    CHECK(shmem_queue_comm_destroy(q) == 0, "destroy");
    shmem_free(table);
    shmem_free(sum);
    shmem_free(slots);
    shmem_free(ident);
    free(got);
}

/* PE 0 puts 1 then 2 into x on the last PE with a flush between, increments a counter 1000
 * times, flushes, then sets a flag with a plain put: the last PE, seeing the flag, must see
 * x == 2 and the 1000 increments (no barrier in between). */
static void ordering(void) {
    long *x = shmem_calloc(1, sizeof(long)), *cnt = shmem_calloc(1, sizeof(long)), *flag = shmem_calloc(1, sizeof(long));
    shmem_queue_t q = comm_queue(SHMEM_QUEUE_EXCLUSIVE, 0, SHMEM_QUEUE_MAX_TIMEOUT);
    int last = npes - 1;
    if (me == 0 && last != 0) {
        long one = 1, two = 2;
        CHECK(shmem_queue_comm_push(q, x, &one, 1, last, SHMEM_OP_PUT) == 0, "put 1");
        CHECK(shmem_queue_local_flush(q) == 0, "flush 1");
        CHECK(shmem_queue_comm_push(q, x, &two, 1, last, SHMEM_OP_PUT) == 0, "put 2");
        for (int i = 0; i < 1000; i++)
            CHECK(shmem_queue_comm_push(q, cnt, (long *)NULL, 1, last, SHMEM_OP_ATOMIC_INC) == 0, "inc");
        CHECK(shmem_queue_local_flush(q) == 0, "flush 2");
        shmem_long_p(flag, 1, last);
        shmem_quiet();
    }
    if (me == last && last != 0) {
        shmem_long_wait_until(flag, SHMEM_CMP_EQ, 1);
        CHECK(*x == 2, "x %ld after the flag", *x);
        CHECK(*cnt == 1000, "counter %ld after the flag", *cnt);
    }
    shmem_barrier_all();
    CHECK(shmem_queue_comm_destroy(q) == 0, "destroy");
    shmem_free(x);
    shmem_free(cnt);
    shmem_free(flag);
}

/* max_elems = 4: the fifth outstanding push fails with EFULL and queues nothing. */
static void limits(void) {
    long *cnt = shmem_calloc(1, sizeof(long));
    shmem_queue_t q = comm_queue(SHMEM_QUEUE_EXCLUSIVE, 4, SHMEM_QUEUE_MAX_TIMEOUT);
    int to = (me + 1) % npes;
    if (to == me) goto out; /* one PE: self pushes complete at once */
    for (int i = 0; i < 4; i++) CHECK(shmem_queue_comm_push(q, cnt, (long *)NULL, 1, to, SHMEM_OP_ATOMIC_INC) == 0, "inc %d", i);
    int rc = shmem_queue_comm_push(q, cnt, (long *)NULL, 1, to, SHMEM_OP_ATOMIC_INC);
    CHECK(rc == SHMEM_QUEUE_EFULL, "fifth push rc %d", rc);
    size_t sz = 0;
    shmem_queue_attrib_t a;
    CHECK(shmem_query_size(q, &sz) == 0 && sz == 4, "size %zu", sz);
    CHECK(shmem_query_attr(q, &a) == 0 && a.outstanding_elems == 4 && a.available_elems == 0, "attr %llu %llu",
          (unsigned long long)a.outstanding_elems, (unsigned long long)a.available_elems);
    CHECK(shmem_queue_local_flush(q) == 0, "flush");
    CHECK(shmem_query_size(q, &sz) == 0 && sz == 0, "size after flush %zu", sz);
    CHECK(shmem_queue_comm_push(q, cnt, (long *)NULL, 1, to, SHMEM_OP_ATOMIC_INC) == 0, "push after flush");
    CHECK(shmem_queue_local_flush(q) == 0, "flush");
out:
    shmem_barrier_all();
    if (npes > 1) CHECK(*cnt == 5, "counter %ld", *cnt);
    CHECK(shmem_queue_comm_destroy(q) == 0, "destroy");
    shmem_free(cnt);
}

static void errors(void) {
    long *w = shmem_calloc(2, sizeof(long));
    long v = 1;
    shmem_queue_t q = comm_queue(SHMEM_QUEUE_EXCLUSIVE, 0, SHMEM_QUEUE_MAX_TIMEOUT), bad = NULL;
    CHECK(shmem_queue_comm_push(q, w, &v, 1, npes, SHMEM_OP_PUT) == SHMEM_QUEUE_EINVAL, "pe npes");
    CHECK(shmem_queue_comm_push(q, w, &v, 1, -1, SHMEM_OP_PUT) == SHMEM_QUEUE_EINVAL, "pe -1");
    CHECK(shmem_queue_comm_push(q, w, &v, 1, 0, 9) == SHMEM_QUEUE_ENOTSUP, "op 9");
    CHECK(shmem_queue_comm_push_mem(q, (char *)w + 4, NULL, 8, 1, 0, SHMEM_OP_ATOMIC_INC) == SHMEM_QUEUE_EINVAL, "misaligned");
    CHECK(shmem_queue_comm_push_mem(q, w, &v, 2, 1, 0, SHMEM_OP_ATOMIC_ADD) == SHMEM_QUEUE_ENOTSUP, "16-bit add");
    CHECK(shmem_queue_comm_push_mem(NULL, w, &v, 8, 1, 0, SHMEM_OP_PUT) == SHMEM_QUEUE_EINVAL, "null queue");
    CHECK(shmem_queue_data_push(q, &v, 1, 0) == SHMEM_QUEUE_ENOTSUP, "data push on comm queue");
    CHECK(shmem_queue_global_flush(q) == SHMEM_QUEUE_ENOTSUP, "global flush on comm queue");
    CHECK(shmem_queue_local_flush(NULL) == SHMEM_QUEUE_EINVAL, "flush null");
    shmem_queue_config_t c = {.qtype = SHMEM_QUEUE_COMM, .sharing_model = 5};
    CHECK(shmem_queue_comm_create(&bad, &c) == SHMEM_QUEUE_EINVAL && bad == NULL, "bad sharing model");
    c.sharing_model = SHMEM_QUEUE_EXCLUSIVE;
    c.qtype = SHMEM_QUEUE_DATA;
    CHECK(shmem_queue_comm_create(&bad, &c) == SHMEM_QUEUE_EINVAL, "data config to comm create");
    CHECK(shmem_queue_comm_destroy(q) == 0, "destroy");
    shmem_free(w);
}

/* A global (data segment) symmetric array: its address differs between PEs by the program's
 * load address, not by the heap's; the queue translates it. */
static long gtable[4];

static void globals(void) {
    shmem_queue_t q = comm_queue(SHMEM_QUEUE_EXCLUSIVE, 0, SHMEM_QUEUE_MAX_TIMEOUT);
    long v = 100 + me;
    shmem_barrier_all();
    for (int p = 0; p < npes; p++) {
        for (int i = 0; i < 10; i++)
            CHECK(shmem_queue_comm_push(q, &gtable[me % 3], (long *)NULL, 1, p, SHMEM_OP_ATOMIC_INC) == 0, "inc");
        if (me == 0) CHECK(shmem_queue_comm_push(q, &gtable[3], &v, 1, p, SHMEM_OP_PUT) == 0, "put");
    }
    CHECK(shmem_queue_local_flush(q) == 0, "flush");
    shmem_barrier_all();
    long want[4] = {0, 0, 0, 100};
    for (int p = 0; p < npes; p++) want[p % 3] += 10;
    for (int i = 0; i < 4; i++) CHECK(gtable[i] == want[i], "gtable[%d] %ld want %ld", i, gtable[i], want[i]);
    CHECK(shmem_queue_comm_destroy(q) == 0, "destroy");
}

static long dval(int src, int dst, long i) { return ((long)src << 32) | ((long)dst << 16) | i; }

/* Per-pair element counts, FIFO contents per source and for ANY_PE, then max_bytes. */
static void data_queue(void) {
    shmem_queue_config_t c = {.qtype = SHMEM_QUEUE_DATA, .max_bytes = 1024, .data_elem_size = sizeof(long)};
    shmem_queue_t q = NULL;
    CHECK(shmem_queue_data_create(&q, &c, SHMEM_TEAM_WORLD) == 0 && q, "data create");
    long buf[256];
    for (int p = 0; p < npes; p++) {
        int n = (me * 3 + p) % 5 + 1;
        for (int i = 0; i < n; i++) buf[i] = dval(me, p, i);
        CHECK(shmem_queue_data_push(q, buf, n, p) == 0, "push to %d", p);
    }
    size_t in = 1, out = 0;
    CHECK(shmem_query_data_size(q, &in, &out, SHMEM_QUEUE_ANY_PE) == 0 && in == 0 && out > 0, "sizes before flush");
    CHECK(shmem_queue_global_flush(q) == 0, "global flush");
    for (int p = 0; p < npes; p++) {
        int n = (p * 3 + me) % 5 + 1;
        CHECK(shmem_query_data_size(q, &in, &out, p) == 0 && in == n * sizeof(long) && out == 0, "sizes from %d: %zu %zu", p,
              in, out);
        if (p % 2 == 0) { /* even sources popped one by one, odd ones below through ANY_PE */
            CHECK(shmem_queue_data_pop(q, buf, n + 1, p) == SHMEM_QUEUE_EAGAIN, "pop too many");
            CHECK(shmem_queue_data_pop(q, buf, n, p) == 0, "pop from %d", p);
            for (int i = 0; i < n; i++) CHECK(buf[i] == dval(p, me, i), "from %d [%d] %lx", p, i, buf[i]);
        }
    }
    size_t total = 0;
    CHECK(shmem_query_data_size(q, &total, NULL, SHMEM_QUEUE_ANY_PE) == 0, "any size");
    CHECK(shmem_queue_data_pop(q, buf, total / sizeof(long), SHMEM_QUEUE_ANY_PE) == 0, "pop any");
    long at = 0;
    for (int p = 1; p < npes; p += 2)
        for (int i = 0; i < (p * 3 + me) % 5 + 1; i++, at++) CHECK(buf[at] == dval(p, me, i), "any [%ld] %lx", at, buf[at]);
    CHECK(at * sizeof(long) == total, "any total %zu", total);

    /* max_bytes 1024 = 128 elements per (source, target). */
    int to = (me + 1) % npes, from = (me + npes - 1) % npes;
    for (int i = 0; i < 140; i++) buf[i] = dval(me, to, i);
    CHECK(shmem_queue_data_push(q, buf, 40, to) == 0, "push 40");
    CHECK(shmem_queue_global_flush(q) == 0, "flush 40");
    CHECK(shmem_queue_data_push(q, buf + 40, 100, to) == 0, "push 100");
    CHECK(shmem_queue_data_push(q, buf, 29, to) == SHMEM_QUEUE_EFULL, "outgoing 100 + 29 > 128 elements");
    /* The 40 not yet popped leave room for 88 of the 100: every PE reports the partial flush. */
    CHECK(shmem_queue_global_flush(q) == SHMEM_QUEUE_EPARTIAL, "partial flush");
    CHECK(shmem_query_data_size(q, &in, &out, from) == 0 && in == 128 * sizeof(long), "incoming after partial %zu", in);
    CHECK(shmem_query_data_size(q, &in, &out, to) == 0 && out == 12 * sizeof(long), "outgoing kept %zu", out);
    CHECK(shmem_queue_data_pop(q, buf, 128, from) == 0, "pop 128");
    for (int i = 0; i < 128; i++) CHECK(buf[i] == dval(from, me, i), "[%d] %lx", i, buf[i]);
    CHECK(shmem_queue_global_flush(q) == 0, "flush the rest");
    CHECK(shmem_queue_data_pop(q, buf, 12, from) == 0, "pop 12");
    for (int i = 0; i < 12; i++) CHECK(buf[i] == dval(from, me, 128 + i), "[%d] %lx", 128 + i, buf[i]);
    CHECK(shmem_queue_data_destroy(&q, SHMEM_TEAM_WORLD) == 0 && q == NULL, "data destroy");
}

/* A partial batch ships by itself after timeout_flush (on progress calls); without a timeout
 * it stays queued. */
static void timeout(void) {
    long *cnt = shmem_calloc(2, sizeof(long));
    shmem_queue_t q = comm_queue(SHMEM_QUEUE_EXCLUSIVE, 0, 0.001);
    shmem_queue_t q2 = comm_queue(SHMEM_QUEUE_EXCLUSIVE, 0, SHMEM_QUEUE_MAX_TIMEOUT);
    int to = (me + 1) % npes;
    if (to != me) {
        CHECK(shmem_queue_comm_push(q, &cnt[0], (long *)NULL, 1, to, SHMEM_OP_ATOMIC_INC) == 0, "push");
        CHECK(shmem_queue_comm_push(q2, &cnt[1], (long *)NULL, 1, to, SHMEM_OP_ATOMIC_INC) == 0, "push");
        double t0 = now();
        while (shmem_queue_progress(q) > 0 && now() - t0 < 5) shmem_queue_progress(q2);
        size_t sz = 9;
        CHECK(shmem_query_size(q, &sz) == 0 && sz == 0, "timed queue still has %zu after %.3f s", sz, now() - t0);
        CHECK(shmem_query_size(q2, &sz) == 0 && sz == 1, "untimed queue has %zu", sz);
    }
    shmem_barrier_all();
    if (npes > 1) CHECK(cnt[0] == 1 && cnt[1] == 0, "counters %ld %ld before the flush", cnt[0], cnt[1]);
    shmem_barrier_all();
    CHECK(shmem_queue_local_flush(q2) == 0, "flush");
    shmem_barrier_all();
    if (npes > 1) CHECK(cnt[1] == 1, "counter %ld after the flush", cnt[1]);
    CHECK(shmem_queue_comm_destroy(q) == 0 && shmem_queue_comm_destroy(q2) == 0, "destroy");
    shmem_free(cnt);
}

#define THREADS 4
#define N_THREAD 3000
static shmem_queue_t shared_q;
static long *shared_table;

static void *pusher(void *arg) {
    long k = (long)arg;
    uint64_t s = 1000 * (me + 1) + k;
    for (int i = 0; i < N_THREAD; i++) {
        uint64_t r = rng(&s);
        if (shmem_queue_comm_push(shared_q, &shared_table[r % T], (long *)NULL, 1, (int)((r >> 32) % npes),
                                  SHMEM_OP_ATOMIC_INC))
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
        if (i % 50 == 0 && shmem_queue_progress(shared_q) < 0) __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
    }
    if (shmem_queue_local_flush(shared_q)) __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
    return NULL;
}

static void threads(void) {
    shared_table = shmem_calloc(T, sizeof(long));
    shared_q = comm_queue(SHMEM_QUEUE_SHARED, 0, SHMEM_QUEUE_MAX_TIMEOUT);
    pthread_t th[THREADS];
    for (long k = 0; k < THREADS; k++) pthread_create(&th[k], NULL, pusher, (void *)k);
    for (int k = 0; k < THREADS; k++) pthread_join(th[k], NULL);
    shmem_barrier_all();
    long expect[T] = {0}, bad = 0;
    for (int p = 0; p < npes; p++)
        for (long k = 0; k < THREADS; k++) {
            uint64_t s = 1000 * (p + 1) + k;
            for (int i = 0; i < N_THREAD; i++) {
                uint64_t r = rng(&s);
                if ((int)((r >> 32) % npes) == me) expect[r % T]++;
            }
        }
    for (int i = 0; i < T; i++) bad += shared_table[i] != expect[i];
    CHECK(bad == 0, "%ld entries differ after %d threads", bad, THREADS);
    CHECK(shmem_queue_comm_destroy(shared_q) == 0, "destroy");
    shmem_free(shared_table);
}

int main(void) {
    int provided = -1;
    shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided);
    me = shmem_my_pe();
    npes = shmem_n_pes();
    mixed();
    globals();
    ordering();
    limits();
    errors();
    data_queue();
    timeout();
    if (provided == SHMEM_THREAD_MULTIPLE)
        threads();
    else if (me == 0)
        printf("note: no SHMEM_THREAD_MULTIPLE (provided %d): shared-queue threads not run\n", provided);
    shmem_barrier_all();
    printf("RESULT %s pe=%d npes=%d checks=%ld failures=%ld threads=%s\n", failures ? "FAIL" : "OK", me, npes, checks,
           failures, provided == SHMEM_THREAD_MULTIPLE ? "yes" : "no");
    fflush(stdout);
    shmem_barrier_all();
    shmem_finalize();
    return failures != 0;
}
