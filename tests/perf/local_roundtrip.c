/* Software cost of a message through a provider, without a second core: one process, two RDM
 * endpoints, one thread. Each iteration posts a tagged receive on B, sends SIZE bytes from A to
 * B, reads both completions. Run under `valgrind --tool=callgrind` to count instructions per
 * message (repeatable, unaffected by other load), or plainly for ns per message.
 *
 *   cc -O2 -o local_roundtrip local_roundtrip.c -lfabric
 *   FI_PROVIDER_PATH=... ./local_roundtrip rshm 8 100000 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../include/fi_check.h"

#define CHECK(call) FI_CHECK_OR_EXIT(call, "", 1)

static void wait_one(struct fid_cq *cq) {
    struct fi_cq_tagged_entry e;
    ssize_t n;
    while ((n = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN) {
    }
    if (n != 1) {
        fprintf(stderr, "fi_cq_read = %zd\n", n);
        exit(1);
    }
}

int main(int argc, char **argv) {
    /* A provider that does not progress two endpoints of one process (the C shm 1.17 does
     * not) must not keep this spinning for ever: SIGALRM ends it. */
    alarm(60);
    const char *prov = argc > 1 ? argv[1] : "rshm";
    size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 8;
    long iters = argc > 3 ? atol(argv[3]) : 100000;
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->caps = FI_TAGGED;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup(prov);
    CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_ep *ep[2];
    struct fid_cq *cq[2];
    CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
    CHECK(fi_domain(fabric, info, &domain, NULL));
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    CHECK(fi_av_open(domain, &av_attr, &av, NULL));
    for (int i = 0; i < 2; i++) {
        struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .size = 64};
        CHECK(fi_cq_open(domain, &cq_attr, &cq[i], NULL));
        CHECK(fi_endpoint(domain, info, &ep[i], NULL));
        CHECK(fi_ep_bind(ep[i], &av->fid, 0));
        CHECK(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV));
        CHECK(fi_enable(ep[i]));
    }
    char name[256];
    size_t len = sizeof(name);
    fi_addr_t b;
    CHECK(fi_getname(&ep[1]->fid, name, &len));
    if (fi_av_insert(av, name, 1, &b, 0, NULL) != 1) return 1;
    char *src = calloc(1, size + 1), *dst = calloc(1, size + 1);
    struct fi_context sctx, rctx;
    struct timespec t0, t1;
    for (long i = -1000; i < iters; i++) {
        if (i == 0) clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK(fi_trecv(ep[1], dst, size, NULL, FI_ADDR_UNSPEC, 7, 0, &rctx));
        ssize_t rc;
        while ((rc = fi_tsend(ep[0], src, size, NULL, b, 7, &sctx)) == -FI_EAGAIN) fi_cq_read(cq[0], NULL, 0);
        CHECK(rc);
        wait_one(cq[0]);
        wait_one(cq[1]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / iters;
    printf("%s %zu B: %.1f ns per message (send + receive + both completions)\n", prov, size, ns);
    for (int i = 0; i < 2; i++) {
        fi_close(&ep[i]->fid);
        fi_close(&cq[i]->fid);
    }
    fi_close(&av->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    return 0;
}
