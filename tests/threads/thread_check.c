/* FI_THREAD_SAFE: several threads use one endpoint at once.
 *
 * One process, one domain (FI_THREAD_SAFE), two RDM endpoints. SENDERS threads send tagged
 * messages from endpoint A to endpoint B at the same time, each reading A's CQ for its own
 * completions; RECEIVERS threads post receives on B and read B's CQ at the same time. Every
 * (thread, sequence) must arrive exactly once with the right payload. Prints
 * "thread_check: N messages from T threads passed" and exits 0, or exits 1 on a mismatch.
 *
 *   cc -O2 -pthread -o thread_check thread_check.c -lfabric
 *   FI_PROVIDER_PATH=... ./thread_check rshm */
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SENDERS 4
#define RECEIVERS 2
#define PER_SENDER 5000
#define MAXLEN 6000 /* crosses the inline, inject and CMA/SAR boundaries */

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_ep *ep[2];
static struct fid_cq *cq[2];
static fi_addr_t addr_b;
static atomic_int seen[SENDERS][PER_SENDER];
static atomic_long received, posted;
static atomic_int failed;

#define CHECK(call)                                                                       \
    do {                                                                                  \
        int _rc = (int)(call);                                                            \
        if (_rc) {                                                                        \
            fprintf(stderr, "%s:%d %s = %d (%s)\n", __FILE__, __LINE__, #call, _rc,       \
                    fi_strerror(-_rc));                                                   \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static size_t len_of(int t, int s) { return (size_t)((t * 7919 + s * 104729) % MAXLEN); }
static unsigned char byte_of(int t, int s, size_t i) { return (unsigned char)(t * 31 + s * 7 + i); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sends of one thread use 16 buffers; a buffer is reused only after its own send completed
 * (completions come in any order: a large CMA send finishes after later small ones). */
#define SLOTS 16
struct sslot {
    struct fi_context ctx;
    int busy;
    unsigned char data[MAXLEN];
};

static int reap(struct sslot *slots) {
    struct fi_cq_tagged_entry e;
    ssize_t n = fi_cq_read(cq[0], &e, 1);
    if (n == 1) {
        /* Another sender thread may read our completion and we theirs: slots are shared state
         * of the thread that owns them, so mark through the context pointer. */
        ((struct sslot *)e.op_context)->busy = 0;
        return 1;
    }
    if (n != -FI_EAGAIN) {
        fprintf(stderr, "tx cq: %zd\n", n);
        exit(1);
    }
    (void)slots;
    return 0;
}

static void *sender(void *arg) {
    int t = (int)(long)arg;
    struct sslot *slots = calloc(SLOTS, sizeof(*slots));
    double deadline = now() + 60;
    for (int s = 0; s < PER_SENDER; s++) {
        struct sslot *slot = NULL;
        while (!slot) {
            for (int i = 0; i < SLOTS && !slot; i++)
                if (!__atomic_load_n(&slots[i].busy, __ATOMIC_ACQUIRE)) slot = &slots[i];
            if (!slot) reap(slots);
            if (now() > deadline) { fprintf(stderr, "sender %d: no send completes\n", t); exit(1); }
        }
        size_t len = len_of(t, s);
        for (size_t i = 0; i < len; i++) slot->data[i] = byte_of(t, s, i);
        __atomic_store_n(&slot->busy, 1, __ATOMIC_RELEASE);
        uint64_t tag = ((uint64_t)t << 32) | (uint64_t)s;
        ssize_t rc;
        while ((rc = fi_tsend(ep[0], slot->data, len, NULL, addr_b, tag, &slot->ctx)) == -FI_EAGAIN) reap(slots);
        CHECK(rc);
    }
    for (int i = 0; i < SLOTS; i++)
        while (__atomic_load_n(&slots[i].busy, __ATOMIC_ACQUIRE) && now() < deadline) reap(slots);
    /* Other threads may still read completions of our slots: leak them rather than free early. */
    return NULL;
}

struct rbuf {
    struct fi_context ctx;
    unsigned char data[MAXLEN];
};

static void *receiver(void *arg) {
    (void)arg;
    const int depth = 32;
    struct rbuf *bufs = calloc(depth, sizeof(*bufs));
    for (int i = 0; i < depth; i++) {
        CHECK(fi_trecv(ep[1], bufs[i].data, MAXLEN, NULL, FI_ADDR_UNSPEC, 0, ~0ULL, &bufs[i].ctx));
        atomic_fetch_add(&posted, 1);
    }
    double deadline = now() + 60;
    while (atomic_load(&received) < (long)SENDERS * PER_SENDER && now() < deadline) {
        struct fi_cq_tagged_entry e;
        ssize_t n = fi_cq_read(cq[1], &e, 1);
        if (n == -FI_EAGAIN) continue;
        if (n != 1) { fprintf(stderr, "rx cq: %zd\n", n); atomic_store(&failed, 1); break; }
        /* A completion may belong to a buffer another receiver thread posted: that is fine,
         * every buffer is checked and reposted by whoever reads its completion. */
        struct rbuf *rb = (struct rbuf *)e.op_context;
        int t = (int)(e.tag >> 32), s = (int)(e.tag & 0xffffffff);
        if (t >= SENDERS || s >= PER_SENDER || e.len != len_of(t, s)) {
            fprintf(stderr, "bad completion tag %llx len %zu\n", (unsigned long long)e.tag, e.len);
            atomic_store(&failed, 1);
            break;
        }
        for (size_t i = 0; i < e.len; i++)
            if (rb->data[i] != byte_of(t, s, i)) {
                if (atomic_fetch_add(&failed, 1) < 5) fprintf(stderr, "payload of (%d,%d) differs at %zu\n", t, s, i);
                break;
            }
        if (atomic_fetch_add(&seen[t][s], 1) != 0) {
            fprintf(stderr, "(%d,%d) received twice\n", t, s);
            atomic_store(&failed, 1);
        }
        atomic_fetch_add(&received, 1);
        if (atomic_load(&posted) < (long)SENDERS * PER_SENDER) {
            atomic_fetch_add(&posted, 1);
            CHECK(fi_trecv(ep[1], rb->data, MAXLEN, NULL, FI_ADDR_UNSPEC, 0, ~0ULL, &rb->ctx));
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *prov = argc > 1 ? argv[1] : "rshm";
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->caps = FI_TAGGED;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->fabric_attr->prov_name = strdup(prov);
    CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
    CHECK(fi_domain(fabric, info, &domain, NULL));
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    CHECK(fi_av_open(domain, &av_attr, &av, NULL));
    for (int i = 0; i < 2; i++) {
        struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .size = 1024};
        CHECK(fi_cq_open(domain, &cq_attr, &cq[i], NULL));
        CHECK(fi_endpoint(domain, info, &ep[i], NULL));
        CHECK(fi_ep_bind(ep[i], &av->fid, 0));
        CHECK(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV));
        CHECK(fi_enable(ep[i]));
    }
    char name[256];
    size_t len = sizeof(name);
    CHECK(fi_getname(&ep[1]->fid, name, &len));
    if (fi_av_insert(av, name, 1, &addr_b, 0, NULL) != 1) { fprintf(stderr, "av insert\n"); return 1; }

    pthread_t th[SENDERS + RECEIVERS];
    for (long i = 0; i < RECEIVERS; i++) pthread_create(&th[SENDERS + i], NULL, receiver, (void *)i);
    for (long i = 0; i < SENDERS; i++) pthread_create(&th[i], NULL, sender, (void *)i);
    for (int i = 0; i < SENDERS + RECEIVERS; i++) pthread_join(th[i], NULL);

    long total = atomic_load(&received);
    for (int t = 0; t < SENDERS; t++)
        for (int s = 0; s < PER_SENDER; s++)
            if (atomic_load(&seen[t][s]) != 1) {
                if (atomic_fetch_add(&failed, 1) < 5) fprintf(stderr, "(%d,%d) seen %d times\n", t, s, seen[t][s]);
            }
    for (int i = 0; i < 2; i++) {
        fi_close(&ep[i]->fid);
        fi_close(&cq[i]->fid);
    }
    fi_close(&av->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    if (atomic_load(&failed)) return 1;
    printf("thread_check: %ld messages from %d threads passed\n", total, SENDERS);
    return 0;
}
