/* Memory an RDM endpoint costs through libfabric: one process opens N endpoints, each with its
 * own AV and CQ, enabled and used once (a tagged 8-byte message to itself, so that whatever a
 * provider sets up at first use is counted), and prints after each the process's private
 * resident memory (RssAnon) and what /dev/shm holds (its used blocks, whoever maps them: a
 * region's pages count once there, where RssShmem counts only the pages this process touched).
 * Then it closes everything and prints /dev/shm again, so that a provider that leaves files
 * behind shows it.
 *
 *   cc -O2 -o ep_memory ep_memory.c -lfabric
 *   FI_PROVIDER_PATH=... ./ep_memory rshm 4 [MAX_KIB]
 *
 * With MAX_KIB, it exits 1 when an endpoint costs more than that (private and /dev/shm together,
 * averaged over the endpoints) or when closing left anything in /dev/shm.
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

#define CHECK(call)                                                                          \
    do {                                                                                     \
        int _rc = (int)(call);                                                               \
        if (_rc) {                                                                           \
            fprintf(stderr, "%s = %d (%s)\n", #call, _rc, fi_strerror(-_rc));                \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#define MAX_EPS 64

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

/* One message from the endpoint to itself, so that its first use is behind us. */
static void use_once(struct fid_ep *ep, struct fid_av *av, struct fid_cq *cq) {
    char name[256], out[8] = "ep_mem", in[8];
    size_t len = sizeof name;
    fi_addr_t self;
    struct fi_cq_tagged_entry e;
    int done = 0;
    CHECK(fi_getname(&ep->fid, name, &len));
    if (fi_av_insert(av, name, 1, &self, 0, NULL) != 1) {
        fprintf(stderr, "fi_av_insert of the endpoint's own name failed\n");
        exit(1);
    }
    CHECK(fi_trecv(ep, in, sizeof in, NULL, self, 1, 0, NULL));
    ssize_t rc;
    while ((rc = fi_tinject(ep, out, sizeof out, self, 1)) == -FI_EAGAIN) fi_cq_read(cq, &e, 1);
    CHECK(rc);
    while (!done) {
        rc = fi_cq_read(cq, &e, 1);
        if (rc == 1) done = 1;
        else if (rc != -FI_EAGAIN) CHECK(rc);
    }
    if (memcmp(in, out, sizeof out)) {
        fprintf(stderr, "the message to itself arrived wrong\n");
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROVIDER [ENDPOINTS (default 4)] [MAX_KIB]\n", argv[0]);
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 4;
    long max_kib = argc > 3 ? atol(argv[3]) : 0;
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
    for (int i = 0; i < n; i++) {
        struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
        struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
        CHECK(fi_av_open(domain, &av_attr, &avs[i], NULL));
        CHECK(fi_cq_open(domain, &cq_attr, &cqs[i], NULL));
        CHECK(fi_endpoint(domain, info, &eps[i], NULL));
        CHECK(fi_ep_bind(eps[i], &avs[i]->fid, 0));
        CHECK(fi_ep_bind(eps[i], &cqs[i]->fid, FI_TRANSMIT | FI_RECV));
        CHECK(fi_enable(eps[i]));
        use_once(eps[i], avs[i], cqs[i]);
        char what[32];
        snprintf(what, sizeof what, "%d endpoint%s", i + 1, i ? "s" : "");
        report(what, anon0, shm0);
    }
    long anon_n = status_kib("RssAnon:") - anon0, shm_n = shm_used_kib() - shm0;
    printf("%-24s private %7ld KiB  /dev/shm %7ld KiB  (per endpoint, all %d)\n", "per endpoint",
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
    if (max_kib > 0 && left > 0) {
        printf("FAIL: %ld KiB left in /dev/shm after every endpoint was closed\n", left);
        return 1;
    }
    return 0;
}
