/* An MPI one-sided (RMA) program that checks every value it moves: MPI_Put and MPI_Get from 1 B
 * to 1 MiB (and strided datatypes), MPI_Accumulate (MPI_SUM, MPI_REPLACE, MPI_MAX on int, long
 * and double), MPI_Get_accumulate, MPI_Fetch_and_op and MPI_Compare_and_swap, with concurrent
 * atomics from all ranks into one location checked for the exact result. Each test runs under
 * every synchronisation mode (MPI_Win_fence; post/start/complete/wait; MPI_Win_lock exclusive
 * and shared with MPI_Win_flush; MPI_Win_lock_all with MPI_Win_flush) on a window from
 * MPI_Win_create (malloc'd memory, disp_unit 1) and on one from MPI_Win_allocate (disp_unit 8).
 * Prints "osc_check: N checks passed on R ranks" on rank 0 and exits non-zero (MPI_Abort) on the
 * first mismatch. Runs at 2 and 4 ranks (any number >= 2). OSC_CHECK_VERBOSE=1 names each phase.
 *
 *   mpicc -O2 -o osc_check tests/mpi/osc_check.c && mpiexec -n 4 ./osc_check */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;
static long checks;
static int verbose;
static double t_start;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        checks++;                                                                            \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "rank %d: osc_check failed at line %d [%s, %s, %s]: ", rank, __LINE__, \
                    cur_win ? cur_win->name : "-", mode_names[cur_mode], cur_phase);          \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
            fflush(stderr);                                                                  \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                    \
        }                                                                                    \
    } while (0)

enum tkind { T_INT, T_LONG, T_DOUBLE, NTYPES };

/* Window layout (bytes): a data area for put/get (every transfer size at its own offset, 1 MiB
 * the largest), then per type an area for vector accumulates (ACC_ELEMS elements of up to 8 B)
 * and NSLOTS 8-byte scalar slots. Every offset is a multiple of 8. */
#define MAX_XFER (1 << 20)
#define OFF_DATA 0
#define DATA_BYTES (1536 * 1024)
#define ACC_ELEMS 1000
#define NSLOTS 4
#define OFF_ACC(t) (DATA_BYTES + (size_t)(t) * ACC_ELEMS * 8)
#define OFF_SLOT(t, j) (OFF_ACC(NTYPES) + ((size_t)(t) * NSLOTS + (j)) * 8)
#define WIN_BYTES OFF_SLOT(NTYPES, 0)
#define GUARD 0xA5
#define ROOT (size - 1)

enum mode { FENCE, PSCW, LOCK_EXCL, LOCK_SHARED, LOCK_ALL, NMODES };
static const char *mode_names[] = {"fence", "pscw", "lock-exclusive", "lock-shared", "lock_all+flush"};

typedef struct {
    const char *name;
    MPI_Win win;
    unsigned char *base;
    int disp_unit;
} win_t;

static win_t *cur_win;
static enum mode cur_mode;
static const char *cur_phase = "-";

static int passive(void) { return cur_mode == LOCK_EXCL || cur_mode == LOCK_SHARED || cur_mode == LOCK_ALL; }

static MPI_Aint disp(size_t byte_off) {
    if (byte_off % (size_t)cur_win->disp_unit) {
        fprintf(stderr, "osc_check: offset %zu not a multiple of disp_unit\n", byte_off);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return (MPI_Aint)(byte_off / (size_t)cur_win->disp_unit);
}

/* ---- sets of ranks, epochs ---- */

#define MAXR 64
typedef struct {
    int n;
    int r[MAXR];
} rset;

static void rs_add(rset *s, int r) {
    for (int i = 0; i < s->n; i++)
        if (s->r[i] == r) return;
    s->r[s->n++] = r;
}

static MPI_Group group_of(const rset *s) {
    MPI_Group world, g;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, s->n, s->r, &g);
    MPI_Group_free(&world);
    return g;
}

/* An access epoch to `targets` (and, for PSCW, an exposure epoch to `origins`) in cur_mode. */
static void ep_begin(const rset *targets, const rset *origins) {
    MPI_Win win = cur_win->win;
    switch (cur_mode) {
    case FENCE: MPI_Win_fence(MPI_MODE_NOPRECEDE, win); break;
    case PSCW:
        if (origins->n) {
            MPI_Group g = group_of(origins);
            MPI_Win_post(g, 0, win);
            MPI_Group_free(&g);
        }
        if (targets->n) {
            MPI_Group g = group_of(targets);
            MPI_Win_start(g, 0, win);
            MPI_Group_free(&g);
        }
        break;
    case LOCK_EXCL:
    case LOCK_SHARED:
        for (int i = 0; i < targets->n; i++)
            MPI_Win_lock(cur_mode == LOCK_EXCL ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED, targets->r[i], 0, win);
        break;
    case LOCK_ALL: MPI_Win_lock_all(0, win); break;
    default: break;
    }
}

/* After this, results of gets and fetching atomics are in their buffers: passive modes flush
 * each target (the epoch stays open), active modes close the epoch. */
static void ep_flush(const rset *targets, const rset *origins) {
    MPI_Win win = cur_win->win;
    switch (cur_mode) {
    case FENCE: MPI_Win_fence(MPI_MODE_NOSUCCEED, win); break;
    case PSCW:
        if (targets->n) MPI_Win_complete(win);
        if (origins->n) MPI_Win_wait(win);
        break;
    default:
        for (int i = 0; i < targets->n; i++) MPI_Win_flush(targets->r[i], win);
        break;
    }
}

static void ep_end(const rset *targets) {
    MPI_Win win = cur_win->win;
    if (cur_mode == LOCK_EXCL || cur_mode == LOCK_SHARED)
        for (int i = 0; i < targets->n; i++) MPI_Win_unlock(targets->r[i], win);
    else if (cur_mode == LOCK_ALL)
        MPI_Win_unlock_all(win);
    /* Remote completion is known to every target only after this barrier. */
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Local access to the own window, outside any other epoch. */
static void local_begin(int exclusive) {
    MPI_Win_lock(exclusive ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED, rank, 0, cur_win->win);
}
static void local_end(void) { MPI_Win_unlock(rank, cur_win->win); }

/* Initialise the own window: everything GUARD, then `fn`. Ends with a barrier. */
static void prepare(void (*fn)(unsigned char *base, void *arg), void *arg) {
    local_begin(1);
    memset(cur_win->base, GUARD, WIN_BYTES);
    if (fn) fn(cur_win->base, arg);
    local_end();
    MPI_Barrier(MPI_COMM_WORLD);
}

static void phase(const char *name) {
    cur_phase = name;
    if (verbose && rank == 0)
        fprintf(stderr, "osc_check: %8.3f s %s %s %s\n", MPI_Wtime() - t_start, cur_win->name, mode_names[cur_mode],
                name);
}

/* ---- typed values ---- */

static const char *type_names[] = {"int", "long", "double"};
static MPI_Datatype mpi_type(enum tkind t) { return t == T_INT ? MPI_INT : t == T_LONG ? MPI_LONG : MPI_DOUBLE; }
static size_t tsize(enum tkind t) { return t == T_INT ? sizeof(int) : t == T_LONG ? sizeof(long) : sizeof(double); }
static void tset(void *p, enum tkind t, size_t i, long v) {
    if (t == T_INT) ((int *)p)[i] = (int)v;
    else if (t == T_LONG) ((long *)p)[i] = v;
    else ((double *)p)[i] = (double)v;
}
/* The value as a long; LONG_MIN for a double that is not an exact integer. */
static long tget(const void *p, enum tkind t, size_t i) {
    if (t == T_INT) return ((const int *)p)[i];
    if (t == T_LONG) return ((const long *)p)[i];
    double d = ((const double *)p)[i];
    long l = (long)d;
    return (double)l == d ? l : LONG_MIN;
}
/* A scalar slot of the own window, read under a shared lock on oneself. */
static long own_slot(enum tkind t, int j) {
    local_begin(0);
    long v = tget(cur_win->base + OFF_SLOT(t, j), t, 0);
    local_end();
    return v;
}

/* ---- put / get ---- */

static unsigned char pattern(int owner, size_t len, size_t i) {
    return (unsigned char)(i * 131 + (size_t)owner * 29 + len * 7 + 1);
}

/* Every size goes to its own offset, 8-aligned with at least 8 guard bytes after it. */
static const size_t xfer_sizes[] = {1, 7, 8, 64, 1000, 4096, 4097, 65536, 65537, 262144, MAX_XFER};
#define NXFER (sizeof(xfer_sizes) / sizeof(xfer_sizes[0]))
static size_t xfer_off[NXFER];

static void layout_xfers(void) {
    size_t off = OFF_DATA;
    for (size_t s = 0; s < NXFER; s++) {
        xfer_off[s] = off;
        off = (off + xfer_sizes[s] + 7) / 8 * 8 + 8;
    }
    if (off > OFF_DATA + DATA_BYTES) {
        fprintf(stderr, "osc_check: data area too small\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static void fill_sizes(unsigned char *buf, int owner) {
    for (size_t s = 0; s < NXFER; s++)
        for (size_t i = 0; i < xfer_sizes[s]; i++) buf[xfer_off[s] + i] = pattern(owner, xfer_sizes[s], i);
}

/* Every size holds owner's pattern followed by `guard`. */
static void verify_sizes(const unsigned char *buf, int owner, unsigned char guard, const char *what) {
    for (size_t s = 0; s < NXFER; s++) {
        size_t len = xfer_sizes[s];
        const unsigned char *d = buf + xfer_off[s];
        size_t bad = len;
        for (size_t i = 0; i < len && bad == len; i++)
            if (d[i] != pattern(owner, len, i)) bad = i;
        CHECK(bad == len, "%s of %zu B (rank %d's data): byte %zu is %#x, want %#x", what, len, owner, bad, d[bad],
              pattern(owner, len, bad));
        CHECK(d[len] == guard, "%s of %zu B wrote past its end", what, len);
    }
}

static int right(void) { return (rank + 1) % size; }
static int left(void) { return (rank + size - 1) % size; }

static void ring_sets(rset *t, rset *o) {
    t->n = o->n = 0;
    rs_add(t, right());
    rs_add(o, left());
}

static void fill_own_sizes(unsigned char *base, void *arg) {
    (void)arg;
    fill_sizes(base, rank);
}

/* Every size in one epoch to my right neighbour: puts of my pattern, then gets of its own. */
static void put_get_sizes(void) {
    rset t, o;
    ring_sets(&t, &o);
    unsigned char *buf = malloc(DATA_BYTES);
    phase("put-sizes");
    prepare(NULL, NULL);
    fill_sizes(buf, rank);
    ep_begin(&t, &o);
    for (size_t s = NXFER; s-- > 0;)
        MPI_Put(buf + xfer_off[s], (int)xfer_sizes[s], MPI_BYTE, right(), disp(xfer_off[s]), (int)xfer_sizes[s],
                MPI_BYTE, cur_win->win);
    ep_flush(&t, &o);
    ep_end(&t);
    local_begin(0);
    verify_sizes(cur_win->base + OFF_DATA, left(), GUARD, "put");
    local_end();

    phase("get-sizes");
    prepare(fill_own_sizes, NULL);
    memset(buf, 0x5A, DATA_BYTES);
    ep_begin(&t, &o);
    for (size_t s = 0; s < NXFER; s++)
        MPI_Get(buf + xfer_off[s], (int)xfer_sizes[s], MPI_BYTE, right(), disp(xfer_off[s]), (int)xfer_sizes[s],
                MPI_BYTE, cur_win->win);
    ep_flush(&t, &o);
    verify_sizes(buf, right(), 0x5A, "get");
    ep_end(&t);
    free(buf);
}

/* Many small puts to every other rank in one epoch; each lands in the slot of its origin. */
#define A2A_LEN 200
static void put_all_to_all(void) {
    phase("put-all-to-all");
    rset t = {0}, o = {0};
    for (int p = 0; p < size; p++)
        if (p != rank) {
            rs_add(&t, p);
            rs_add(&o, p);
        }
    prepare(NULL, NULL);
    unsigned char *buf = malloc((size_t)A2A_LEN * size);
    ep_begin(&t, &o);
    for (int p = 0; p < size; p++) {
        if (p == rank) continue;
        unsigned char *b = buf + (size_t)p * A2A_LEN;
        for (size_t i = 0; i < A2A_LEN; i++) b[i] = pattern(rank * 100 + p, A2A_LEN, i);
        MPI_Put(b, A2A_LEN, MPI_BYTE, p, disp(OFF_DATA + (size_t)rank * 256), A2A_LEN, MPI_BYTE, cur_win->win);
    }
    ep_flush(&t, &o);
    ep_end(&t);
    local_begin(0);
    for (int p = 0; p < size; p++) {
        const unsigned char *d = cur_win->base + OFF_DATA + (size_t)p * 256;
        for (size_t i = 0; i < 256; i++) {
            unsigned char want = (p == rank || i >= A2A_LEN) ? GUARD : pattern(p * 100 + rank, A2A_LEN, i);
            if (d[i] != want) CHECK(0, "all-to-all slot of %d byte %zu is %#x, want %#x", p, i, d[i], want);
        }
        checks++;
    }
    local_end();
    free(buf);
}

/* A contiguous origin buffer into a strided target type, then a strided get of the same. */
#define STR_COUNT 500
#define STR_BLOCK 3
#define STR_STRIDE 7
static void strided(void) {
    rset t, o;
    ring_sets(&t, &o);
    MPI_Datatype vec;
    MPI_Type_vector(STR_COUNT, STR_BLOCK, STR_STRIDE, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    const int n = STR_COUNT * STR_BLOCK, span = STR_COUNT * STR_STRIDE;
    int *src = malloc(sizeof(int) * n), *back = malloc(sizeof(int) * span);
    for (int i = 0; i < n; i++) src[i] = rank * 100000 + i;

    phase("put-strided");
    prepare(NULL, NULL);
    ep_begin(&t, &o);
    MPI_Put(src, n, MPI_INT, right(), disp(OFF_DATA), 1, vec, cur_win->win);
    ep_flush(&t, &o);
    ep_end(&t);
    local_begin(0);
    const int *d = (const int *)(cur_win->base + OFF_DATA);
    int guard;
    memset(&guard, GUARD, sizeof(guard));
    for (int i = 0, k = 0; i < span; i++) {
        int want = i % STR_STRIDE < STR_BLOCK ? left() * 100000 + k++ : guard;
        if (d[i] != want) CHECK(0, "strided put: int %d is %d, want %d", i, d[i], want);
    }
    checks++;
    local_end();

    phase("get-strided");
    for (int i = 0; i < span; i++) back[i] = -7;
    ep_begin(&t, &o);
    MPI_Get(back, 1, vec, right(), disp(OFF_DATA), 1, vec, cur_win->win);
    ep_flush(&t, &o);
    /* The right neighbour's window holds my own values (I put them there). */
    for (int i = 0, k = 0; i < span; i++) {
        int want = i % STR_STRIDE < STR_BLOCK ? rank * 100000 + k++ : -7;
        if (back[i] != want) CHECK(0, "strided get: int %d is %d, want %d", i, back[i], want);
    }
    checks++;
    ep_end(&t);
    MPI_Type_free(&vec);
    free(src);
    free(back);
}

/* ---- accumulate: all ranks, all types, into the root ---- */

static void root_sets(rset *t, rset *o) {
    t->n = o->n = 0;
    rs_add(t, ROOT);
    if (rank == ROOT)
        for (int p = 0; p < size; p++) rs_add(o, p);
}

#define ACC_REPS 4     /* vector accumulates per rank, type and epoch */
#define SCALAR_REPS 32 /* single-element accumulates into one slot per rank, type and epoch */

static long acc_init(MPI_Op op, size_t i) {
    if (op == MPI_MAX) return i % 3 == 0 ? 1000000 : (long)(i % 11);
    return (long)(i % 11) - 5;
}

static void init_acc_areas(unsigned char *base, void *a) {
    MPI_Op op = *(MPI_Op *)a;
    for (int t = 0; t < NTYPES; t++) {
        for (size_t i = 0; i < ACC_ELEMS; i++) tset(base + OFF_ACC(t), (enum tkind)t, i, acc_init(op, i));
        tset(base + OFF_SLOT(t, 0), (enum tkind)t, 0, 3);
    }
}

/* Value rank r adds at repetition k to element i. */
static long acc_val(MPI_Op op, int r, int k, size_t i) {
    if (op == MPI_SUM) return r + 1 + (long)(i % 7) + k;
    if (op == MPI_MAX) return (long)r * 1000 + k * 10 + (long)(i % 13);
    return ((long)r * ACC_REPS + k) * 1000 + (long)(i % 997); /* MPI_REPLACE */
}

static long scalar_val(MPI_Op op, int r, int k) { return op == MPI_SUM ? r + 1 : (long)r * 100 + k; }

static void verify_acc(enum tkind t, MPI_Op op) {
    const unsigned char *a = cur_win->base + OFF_ACC(t);
    const char *tn = type_names[t];
    for (size_t i = 0; i < ACC_ELEMS; i++) {
        long got = tget(a, t, i), init = acc_init(op, i);
        if (op == MPI_SUM) {
            long want = init;
            for (int r = 0; r < size; r++)
                for (int k = 0; k < ACC_REPS; k++) want += acc_val(op, r, k, i);
            if (got != want) CHECK(0, "%s element %zu is %ld, want %ld", tn, i, got, want);
        } else if (op == MPI_MAX) {
            long want = acc_val(op, size - 1, ACC_REPS - 1, i);
            if (init > want) want = init;
            if (got != want) CHECK(0, "%s element %zu is %ld, want %ld", tn, i, got, want);
        } else if (got < 0 || got % 1000 != (long)(i % 997) || got / 1000 >= (long)size * ACC_REPS) {
            CHECK(0, "%s element %zu is %ld, not a value any rank wrote", tn, i, got);
        }
    }
    checks++;
    long got = tget(cur_win->base + OFF_SLOT(t, 0), t, 0);
    if (op == MPI_SUM) {
        long want = 3 + (long)SCALAR_REPS * size * (size + 1) / 2;
        CHECK(got == want, "%s concurrent sum is %ld, want %ld", tn, got, want);
    } else if (op == MPI_MAX) {
        CHECK(got == scalar_val(op, size - 1, SCALAR_REPS - 1), "%s concurrent max is %ld", tn, got);
    } else {
        CHECK(got >= 0 && got / 100 < size && got % 100 < SCALAR_REPS, "%s concurrent replace left %ld", tn, got);
    }
}

static void accumulate(MPI_Op op, const char *name) {
    phase(name);
    rset ts, os;
    root_sets(&ts, &os);
    prepare(init_acc_areas, &op);
    unsigned char *vec[NTYPES], *one[NTYPES];
    for (int t = 0; t < NTYPES; t++) {
        size_t es = tsize((enum tkind)t);
        vec[t] = malloc(ACC_REPS * ACC_ELEMS * es);
        one[t] = malloc(SCALAR_REPS * es);
        for (int k = 0; k < ACC_REPS; k++)
            for (size_t i = 0; i < ACC_ELEMS; i++)
                tset(vec[t] + k * ACC_ELEMS * es, (enum tkind)t, i, acc_val(op, rank, k, i));
        for (int k = 0; k < SCALAR_REPS; k++) tset(one[t], (enum tkind)t, k, scalar_val(op, rank, k));
    }
    ep_begin(&ts, &os);
    for (int k = 0; k < SCALAR_REPS; k++)
        for (int t = 0; t < NTYPES; t++) {
            size_t es = tsize((enum tkind)t);
            MPI_Datatype dt = mpi_type((enum tkind)t);
            if (k < ACC_REPS)
                MPI_Accumulate(vec[t] + k * ACC_ELEMS * es, ACC_ELEMS, dt, ROOT, disp(OFF_ACC(t)), ACC_ELEMS, dt, op,
                               cur_win->win);
            MPI_Accumulate(one[t] + k * es, 1, dt, ROOT, disp(OFF_SLOT(t, 0)), 1, dt, op, cur_win->win);
        }
    ep_flush(&ts, &os);
    ep_end(&ts);
    if (rank == ROOT) {
        local_begin(0);
        for (int t = 0; t < NTYPES; t++) verify_acc((enum tkind)t, op);
        local_end();
    }
    for (int t = 0; t < NTYPES; t++) {
        free(vec[t]);
        free(one[t]);
    }
}

/* ---- fetching atomics ---- */

/* Slot 0: a counter from 0; slot 1: a swap/CAS target holding -1. */
static void init_slots(unsigned char *base, void *a) {
    (void)a;
    for (int t = 0; t < NTYPES; t++) {
        tset(base + OFF_SLOT(t, 0), (enum tkind)t, 0, 0);
        tset(base + OFF_SLOT(t, 1), (enum tkind)t, 0, -1);
    }
}

/* Gathers `n` longs from every rank to the root; returns the array there (size * n), else NULL. */
static long *gather_longs(const long *mine, int n) {
    long *all = rank == ROOT ? malloc(sizeof(long) * n * size) : NULL;
    MPI_Gather(mine, n, MPI_LONG, all, n, MPI_LONG, ROOT, MPI_COMM_WORLD);
    return all;
}

/* The fetched previous values of `total` increments by 1 are exactly 0 .. total-1. */
static void check_permutation(const long *v, int total, const char *what) {
    char *seen = calloc(total, 1);
    for (int i = 0; i < total; i++) {
        CHECK(v[i] >= 0 && v[i] < total && !seen[v[i]], "%s fetched %ld (twice, or outside 0..%d)", what, v[i],
              total - 1);
        seen[v[i]] = 1;
    }
    free(seen);
}

#define FETCH_REPS 16

/* On the root, after FETCH_REPS fetch-and-adds of 1 and one swap per rank and type: the values
 * fetched by the adds are a permutation of 0..total-1 and the counter is total; the swaps form
 * one chain (the old values and the final value are -1 and each rank's 100+r, each once). */
static void check_fetch_round(long fetched[NTYPES][FETCH_REPS], const long swapped[NTYPES], const char *what) {
    for (int t = 0; t < NTYPES; t++) {
        long *all = gather_longs(fetched[t], FETCH_REPS);
        long *swaps = gather_longs(&swapped[t], 1);
        if (rank == ROOT) {
            check_permutation(all, FETCH_REPS * size, what);
            long ctr = own_slot((enum tkind)t, 0), last = own_slot((enum tkind)t, 1);
            CHECK(ctr == (long)FETCH_REPS * size, "%s %s: counter is %ld, want %d", what, type_names[t], ctr,
                  FETCH_REPS * size);
            char *seen = calloc(size + 1, 1);
            for (int p = 0; p <= size; p++) {
                long v = p < size ? swaps[p] : last;
                int idx = v == -1 ? size : (int)(v - 100);
                CHECK(idx >= 0 && idx <= size && !seen[idx], "%s %s: swap chain value %ld twice or foreign", what,
                      type_names[t], v);
                seen[idx] = 1;
            }
            free(seen);
        }
        free(all);
        free(swaps);
    }
}

/* Reads every type's counter with MPI_NO_OP (get_acc != 0: MPI_Get_accumulate, else
 * MPI_Fetch_and_op) and checks it is FETCH_REPS * size. */
static void read_counters(int get_acc) {
    phase(get_acc ? "get_accumulate-no_op" : "fetch_and_op-no_op");
    rset ts, os;
    root_sets(&ts, &os);
    _Alignas(8) unsigned char cur[NTYPES][8];
    ep_begin(&ts, &os);
    for (int t = 0; t < NTYPES; t++) {
        MPI_Datatype dt = mpi_type((enum tkind)t);
        if (get_acc)
            MPI_Get_accumulate(NULL, 0, dt, cur[t], 1, dt, ROOT, disp(OFF_SLOT(t, 0)), 1, dt, MPI_NO_OP, cur_win->win);
        else
            MPI_Fetch_and_op(NULL, cur[t], dt, ROOT, disp(OFF_SLOT(t, 0)), MPI_NO_OP, cur_win->win);
    }
    ep_flush(&ts, &os);
    for (int t = 0; t < NTYPES; t++)
        CHECK(tget(cur[t], (enum tkind)t, 0) == (long)FETCH_REPS * size, "%s MPI_NO_OP read %ld, want %d",
              type_names[t], tget(cur[t], (enum tkind)t, 0), FETCH_REPS * size);
    ep_end(&ts);
}

/* Concurrent fetch-and-adds and swaps from all ranks, through MPI_Get_accumulate (get_acc != 0)
 * or MPI_Fetch_and_op. */
static void fetch_ops(int get_acc) {
    const char *name = get_acc ? "get_accumulate" : "fetch_and_op";
    phase(name);
    rset ts, os;
    root_sets(&ts, &os);
    prepare(init_slots, NULL);
    _Alignas(8) unsigned char one[NTYPES][8], res[NTYPES][FETCH_REPS * 8], mine[NTYPES][8], old[NTYPES][8];
    for (int t = 0; t < NTYPES; t++) {
        tset(one[t], (enum tkind)t, 0, 1);
        tset(mine[t], (enum tkind)t, 0, 100 + rank);
    }
    ep_begin(&ts, &os);
    for (int k = 0; k < FETCH_REPS; k++)
        for (int t = 0; t < NTYPES; t++) {
            MPI_Datatype dt = mpi_type((enum tkind)t);
            void *r = res[t] + k * tsize((enum tkind)t);
            if (get_acc)
                MPI_Get_accumulate(one[t], 1, dt, r, 1, dt, ROOT, disp(OFF_SLOT(t, 0)), 1, dt, MPI_SUM, cur_win->win);
            else
                MPI_Fetch_and_op(one[t], r, dt, ROOT, disp(OFF_SLOT(t, 0)), MPI_SUM, cur_win->win);
        }
    for (int t = 0; t < NTYPES; t++) {
        MPI_Datatype dt = mpi_type((enum tkind)t);
        if (get_acc)
            MPI_Get_accumulate(mine[t], 1, dt, old[t], 1, dt, ROOT, disp(OFF_SLOT(t, 1)), 1, dt, MPI_REPLACE,
                               cur_win->win);
        else
            MPI_Fetch_and_op(mine[t], old[t], dt, ROOT, disp(OFF_SLOT(t, 1)), MPI_REPLACE, cur_win->win);
    }
    ep_flush(&ts, &os);
    long fetched[NTYPES][FETCH_REPS], swapped[NTYPES];
    for (int t = 0; t < NTYPES; t++) {
        for (int k = 0; k < FETCH_REPS; k++) fetched[t][k] = tget(res[t], (enum tkind)t, k);
        swapped[t] = tget(old[t], (enum tkind)t, 0);
    }
    ep_end(&ts);
    check_fetch_round(fetched, swapped, name);
    read_counters(get_acc);
}

/* Vector MPI_Get_accumulate (MPI_SUM) of ACC_ELEMS elements from every rank at once. */
static void get_accumulate_vector(void) {
    phase("get_accumulate-vector");
    rset ts, os;
    root_sets(&ts, &os);
    MPI_Op op = MPI_SUM;
    prepare(init_acc_areas, &op);
    unsigned char *add[NTYPES], *res[NTYPES];
    for (int t = 0; t < NTYPES; t++) {
        add[t] = malloc(ACC_ELEMS * 8);
        res[t] = malloc(ACC_ELEMS * 8);
        for (size_t i = 0; i < ACC_ELEMS; i++) tset(add[t], (enum tkind)t, i, (long)(rank + 1) << 10);
    }
    ep_begin(&ts, &os);
    for (int t = 0; t < NTYPES; t++) {
        MPI_Datatype dt = mpi_type((enum tkind)t);
        MPI_Get_accumulate(add[t], ACC_ELEMS, dt, res[t], ACC_ELEMS, dt, ROOT, disp(OFF_ACC(t)), ACC_ELEMS, dt,
                           MPI_SUM, cur_win->win);
    }
    ep_flush(&ts, &os);
    /* Each element fetched is its initial value plus the additions of some of the other ranks. */
    const long others = (long)size * (size + 1) / 2 - (rank + 1);
    for (int t = 0; t < NTYPES; t++) {
        for (size_t i = 0; i < ACC_ELEMS; i++) {
            long got = tget(res[t], (enum tkind)t, i), extra = got - acc_init(MPI_SUM, i);
            if (got == LONG_MIN || (extra & 1023) != 0 || (extra >> 10) < 0 || (extra >> 10) > others)
                CHECK(0, "vector get_accumulate %s element %zu fetched %ld", type_names[t], i, got);
        }
        checks++;
    }
    ep_end(&ts);
    if (rank == ROOT) {
        local_begin(0);
        const long want_add = ((long)size * (size + 1) / 2) << 10;
        for (int t = 0; t < NTYPES; t++) {
            for (size_t i = 0; i < ACC_ELEMS; i++) {
                long want = acc_init(MPI_SUM, i) + want_add, got = tget(cur_win->base + OFF_ACC(t), (enum tkind)t, i);
                if (got != want)
                    CHECK(0, "vector get_accumulate %s element %zu is %ld, want %ld", type_names[t], i, got, want);
            }
            checks++;
        }
        local_end();
    }
    for (int t = 0; t < NTYPES; t++) {
        free(add[t]);
        free(res[t]);
    }
}

/* MPI_Compare_and_swap on int and long (it takes no floating types). */
#define CAS_TYPES 2
#define CAS_REPS 8

static void compare_and_swap(void) {
    phase("compare_and_swap");
    rset ts, os;
    root_sets(&ts, &os);
    prepare(init_slots, NULL);
    /* Everyone tries to replace -1 by its rank: exactly one wins, everyone else sees the winner. */
    _Alignas(8) unsigned char cmp[CAS_TYPES][8], val[CAS_TYPES][8], old[CAS_TYPES][8];
    ep_begin(&ts, &os);
    for (int t = 0; t < CAS_TYPES; t++) {
        tset(cmp[t], (enum tkind)t, 0, -1);
        tset(val[t], (enum tkind)t, 0, rank);
        MPI_Compare_and_swap(val[t], cmp[t], old[t], mpi_type((enum tkind)t), ROOT, disp(OFF_SLOT(t, 1)),
                             cur_win->win);
    }
    ep_flush(&ts, &os);
    long mine[CAS_TYPES];
    for (int t = 0; t < CAS_TYPES; t++) mine[t] = tget(old[t], (enum tkind)t, 0);
    ep_end(&ts);
    long *all = gather_longs(mine, CAS_TYPES);
    if (rank == ROOT) {
        for (int t = 0; t < CAS_TYPES; t++) {
            long final = own_slot((enum tkind)t, 1);
            int winners = 0;
            for (int p = 0; p < size; p++) {
                long o = all[p * CAS_TYPES + t];
                if (o == -1) {
                    winners++;
                    CHECK(final == p, "%s CAS winner %d but the slot holds %ld", type_names[t], p, final);
                } else {
                    CHECK(o == final, "%s: rank %d's CAS saw %ld, the slot holds %ld", type_names[t], p, o, final);
                }
            }
            CHECK(winners == 1, "%s: %d CAS winners", type_names[t], winners);
        }
    }
    free(all);

    /* A mismatching compare must not write, and fetches the value. */
    phase("compare_and_swap-mismatch");
    ep_begin(&ts, &os);
    for (int t = 0; t < CAS_TYPES; t++) {
        tset(cmp[t], (enum tkind)t, 0, -12345);
        tset(val[t], (enum tkind)t, 0, 777);
        MPI_Compare_and_swap(val[t], cmp[t], old[t], mpi_type((enum tkind)t), ROOT, disp(OFF_SLOT(t, 0)),
                             cur_win->win);
    }
    ep_flush(&ts, &os);
    for (int t = 0; t < CAS_TYPES; t++)
        CHECK(tget(old[t], (enum tkind)t, 0) == 0, "%s mismatching CAS fetched %ld, want 0", type_names[t],
              tget(old[t], (enum tkind)t, 0));
    ep_end(&ts);
    if (rank == ROOT)
        for (int t = 0; t < CAS_TYPES; t++)
            CHECK(own_slot((enum tkind)t, 0) == 0, "%s mismatching CAS wrote %ld", type_names[t],
                  own_slot((enum tkind)t, 0));
    MPI_Barrier(MPI_COMM_WORLD); /* the root has read the slots before anyone changes them */

    if (!passive()) return;
    /* Passive target: a CAS retry loop (flush after each CAS) increments each counter; the
     * values the ranks' successful CASes replaced are, together, exactly 0 .. size*CAS_REPS-1. */
    phase("compare_and_swap-counter");
    long wins[CAS_TYPES][CAS_REPS];
    ep_begin(&ts, &os);
    for (int t = 0; t < CAS_TYPES; t++) {
        MPI_Datatype dt = mpi_type((enum tkind)t);
        _Alignas(8) unsigned char cur[8];
        MPI_Fetch_and_op(NULL, cur, dt, ROOT, disp(OFF_SLOT(t, 0)), MPI_NO_OP, cur_win->win);
        MPI_Win_flush(ROOT, cur_win->win);
        long c = tget(cur, (enum tkind)t, 0);
        for (int k = 0; k < CAS_REPS; k++) {
            for (;;) {
                tset(cmp[t], (enum tkind)t, 0, c);
                tset(val[t], (enum tkind)t, 0, c + 1);
                MPI_Compare_and_swap(val[t], cmp[t], old[t], dt, ROOT, disp(OFF_SLOT(t, 0)), cur_win->win);
                MPI_Win_flush(ROOT, cur_win->win);
                long o = tget(old[t], (enum tkind)t, 0);
                if (o == c) break;
                CHECK(o > c, "%s CAS counter went back from %ld to %ld", type_names[t], c, o);
                c = o;
            }
            wins[t][k] = c++;
        }
    }
    ep_end(&ts);
    for (int t = 0; t < CAS_TYPES; t++) {
        all = gather_longs(wins[t], CAS_REPS);
        if (rank == ROOT) {
            check_permutation(all, CAS_REPS * size, "CAS counter");
            long final = own_slot((enum tkind)t, 0);
            CHECK(final == (long)CAS_REPS * size, "%s CAS counter is %ld, want %d", type_names[t], final,
                  CAS_REPS * size);
        }
        free(all);
    }
}

/* ---- driver ---- */

static void run_all(win_t *w) {
    cur_win = w;
    for (int m = 0; m < NMODES; m++) {
        cur_mode = (enum mode)m;
        put_get_sizes();
        put_all_to_all();
        strided();
        accumulate(MPI_SUM, "accumulate-sum");
        accumulate(MPI_REPLACE, "accumulate-replace");
        accumulate(MPI_MAX, "accumulate-max");
        fetch_ops(1);
        get_accumulate_vector();
        fetch_ops(0);
        compare_and_swap();
        MPI_Barrier(MPI_COMM_WORLD);
    }
    cur_win = NULL;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    verbose = getenv("OSC_CHECK_VERBOSE") != NULL;
    t_start = MPI_Wtime();
    layout_xfers();
    if (size < 2 || size > MAXR) {
        if (rank == 0) fprintf(stderr, "osc_check: needs 2 to %d ranks\n", MAXR);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    win_t created = {"win_create", MPI_WIN_NULL, NULL, 1};
    created.base = malloc(WIN_BYTES);
    MPI_Win_create(created.base, WIN_BYTES, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &created.win);
    run_all(&created);
    MPI_Win_free(&created.win);
    free(created.base);

    win_t allocated = {"win_allocate", MPI_WIN_NULL, NULL, 8};
    MPI_Win_allocate(WIN_BYTES, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &allocated.base, &allocated.win);
    run_all(&allocated);
    MPI_Win_free(&allocated.win);

    long total = 0;
    MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("osc_check: %ld checks passed on %d ranks\n", total, size);
    MPI_Finalize();
    return 0;
}
