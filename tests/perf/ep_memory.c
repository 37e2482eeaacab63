/* Memory an RDM endpoint costs through libfabric: one process opens N endpoints, each with its
 * own AV and CQ, enabled and used once (a tagged 8-byte message to itself, so that whatever a
 * provider sets up at first use is counted), and prints after each the process's private
 * resident memory (RssAnon) and what /dev/shm holds (its used blocks, whoever maps them: a
 * region's pages count once there, where RssShmem counts only the pages this process touched).
 * Then each endpoint sends itself a 2 KiB and a 6 KiB message (through whatever buffers a
 * provider keeps for them, set up on first use or not) and it prints the totals again. Then it
 * closes everything and prints /dev/shm again, so that a provider that leaves files behind
 * shows it.
 *
 *   cc -O2 -o ep_memory ep_memory.c -lfabric
 *   FI_PROVIDER_PATH=... ./ep_memory rshm 4 [MAX_KIB [MAX_SMALL_KIB]]
 *
 * With MAX_KIB, it exits 1 when an endpoint with every pool in use costs more than that (private
 * and /dev/shm together, averaged over the endpoints) or when closing left anything in /dev/shm;
 * with MAX_SMALL_KIB too, when one that has sent only its 8-byte message costs more than that
 * (pools that should not be there before they are used).
 *
 * Run nothing else that uses /dev/shm meanwhile: its figure is the whole file system's. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "../include/fi_check.h"

#define CHECK(call) FI_CHECK_OR_EXIT(call, "", 1)

#define MAX_EPS 64
/* Sizes sent once each: inline, through an inject buffer, through SAR buffers. */
static const size_t POOL_SIZES[] = {2048, 6144};
#define MAX_MSG 6144

static long status_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n)) v = atol(line + n);
    if (f) fclose(f);
    return v;
}

static long shm_used_kib(void) {
    struct statvfs s;
    if (statvfs("/dev/shm", &s)) return -1;
    return (long)((s.f_blocks - s.f_bfree) * s.f_frsize / 1024);
}

static void report(const char *what, long anon0, long shm0) {
    printf("%-24s private %7ld KiB  /dev/shm %7ld KiB\n", what, status_kib("RssAnon:") - anon0,
           shm_used_kib() - shm0);
}

/* The endpoint's fi_addr for itself (inserted into its AV once). */
static fi_addr_t self_addr(struct fid_ep *ep, struct fid_av *av) {
    char name[256];
    size_t len = sizeof name;
    fi_addr_t self;
    CHECK(fi_getname(&ep->fid, name, &len));
    if (fi_av_insert(av, name, 1, &self, 0, NULL) != 1) {
        fprintf(stderr, "fi_av_insert of the endpoint's own name failed\n");
        exit(1);
    }
    return self;
}

/* One message of `size` bytes from the endpoint to itself, checked. */
static void to_self(struct fid_ep *ep, fi_addr_t self, struct fid_cq *cq, size_t size) {
    static char out[MAX_MSG], in[MAX_MSG];
    struct fi_cq_tagged_entry e;
    int sent = 0, received = 0;
    for (size_t i = 0; i < size; i++) out[i] = (char)(i * 7 + size);
    memset(in, 0, size);
    CHECK(fi_trecv(ep, in, size, NULL, self, 1, 0, &received));
    ssize_t rc;
    while ((rc = fi_tsend(ep, out, size, NULL, self, 1, &sent)) == -FI_EAGAIN) fi_cq_read(cq, &e, 1);
    CHECK(rc);
    for (int done = 0; done < 2;) {
        rc = fi_cq_read(cq, &e, 1);
        if (rc == 1) done++;
        else if (rc != -FI_EAGAIN) CHECK(rc);
    }
    if (memcmp(in, out, size)) {
        fprintf(stderr, "a %zu-byte message to itself arrived wrong\n", size);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROVIDER [ENDPOINTS (default 4)] [MAX_KIB [MAX_SMALL_KIB]]\n", argv[0]);
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 4;
    long max_kib = argc > 3 ? atol(argv[3]) : 0, max_small_kib = argc > 4 ? atol(argv[4]) : 0;
    if (n < 1 || n > MAX_EPS) {
        fprintf(stderr, "ENDPOINTS must be 1..%d\n", MAX_EPS);
        return 2;
    }
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED;
    hints->mode = ~0ULL;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup(argv[1]);
    CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));

    long anon0 = status_kib("RssAnon:"), shm0 = shm_used_kib();
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
    CHECK(fi_domain(fabric, info, &domain, NULL));
    printf("%s: %s, memory added since before fi_fabric\n", argv[1], info->fabric_attr->prov_name);
    report("fabric and domain", anon0, shm0);

    struct fid_av *avs[MAX_EPS];
    struct fid_cq *cqs[MAX_EPS];
    struct fid_ep *eps[MAX_EPS];
    fi_addr_t selves[MAX_EPS];
    for (int i = 0; i < n; i++) {
        struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
        struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
        CHECK(fi_av_open(domain, &av_attr, &avs[i], NULL));
        CHECK(fi_cq_open(domain, &cq_attr, &cqs[i], NULL));
        CHECK(fi_endpoint(domain, info, &eps[i], NULL));
        CHECK(fi_ep_bind(eps[i], &avs[i]->fid, 0));
        CHECK(fi_ep_bind(eps[i], &cqs[i]->fid, FI_TRANSMIT | FI_RECV));
        CHECK(fi_enable(eps[i]));
        selves[i] = self_addr(eps[i], avs[i]);
        to_self(eps[i], selves[i], cqs[i], 8);
        char what[32];
        snprintf(what, sizeof what, "%d endpoint%s", i + 1, i ? "s" : "");
        report(what, anon0, shm0);
    }
    long anon_n = status_kib("RssAnon:") - anon0, shm_n = shm_used_kib() - shm0;
    long small_kib = (anon_n + shm_n) / n;
    printf("%-24s private %7ld KiB  /dev/shm %7ld KiB  (per endpoint, all %d)\n", "per endpoint",
           anon_n / n, shm_n / n, n);
    /* Then a message through each pool (inject and SAR buffers, which a provider may set up
     * only when first used): the budget holds with all of an endpoint in use. */
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof POOL_SIZES / sizeof POOL_SIZES[0]; k++)
            to_self(eps[i], selves[i], cqs[i], POOL_SIZES[k]);
    anon_n = status_kib("RssAnon:") - anon0;
    shm_n = shm_used_kib() - shm0;
    printf("%-24s private %7ld KiB  /dev/shm %7ld KiB  (per endpoint, all %d)\n", "... every pool used",
           anon_n / n, shm_n / n, n);
    for (int i = n - 1; i >= 0; i--) {
        CHECK(fi_close(&eps[i]->fid));
        CHECK(fi_close(&cqs[i]->fid));
        CHECK(fi_close(&avs[i]->fid));
    }
    CHECK(fi_close(&domain->fid));
    CHECK(fi_close(&fabric->fid));
    report("all closed", anon0, shm0);
    long left = shm_used_kib() - shm0;
    fi_freeinfo(info);
    fi_freeinfo(hints);
    if (max_kib > 0 && (anon_n + shm_n) / n > max_kib) {
        printf("FAIL: %ld KiB per endpoint, more than %ld\n", (anon_n + shm_n) / n, max_kib);
        return 1;
    }
    if (max_small_kib > 0 && small_kib > max_small_kib) {
        printf("FAIL: %ld KiB per endpoint after an 8-byte message, more than %ld\n", small_kib, max_small_kib);
        return 1;
    }
    if (max_kib > 0 && left > 0) {
        printf("FAIL: %ld KiB left in /dev/shm after every endpoint was closed\n", left);
        return 1;
    }
    return 0;
}
