/* Two RDM endpoints of one domain in one process, each with a CQ of its own, b's address in an
 * AV both share (`to_b`): what the standalone programs under tests/ that need no second process
 * send between. Included by a path relative to the including file, as fi_check.h is. */
#ifndef RSHM_TESTS_RDM_PAIR_H
#define RSHM_TESTS_RDM_PAIR_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <time.h>

#include "fi_check.h"

struct rdm_pair {
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq_a, *cq_b;
    struct fid_ep *a, *b;
    fi_addr_t to_b;
};

#define RDM_PAIR_SETUP(call) FI_CHECK_OR_EXIT(call, "setup: ", 70)

/* Open both endpoints of `info` (tagged CQs, FI_AV_TABLE); a failure exits 70. */
static void rdm_pair_open(struct fi_info *info, struct rdm_pair *p) {
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
    RDM_PAIR_SETUP(fi_fabric(info->fabric_attr, &p->fabric, NULL));
    RDM_PAIR_SETUP(fi_domain(p->fabric, info, &p->domain, NULL));
    RDM_PAIR_SETUP(fi_av_open(p->domain, &av_attr, &p->av, NULL));
    RDM_PAIR_SETUP(fi_cq_open(p->domain, &cq_attr, &p->cq_a, NULL));
    RDM_PAIR_SETUP(fi_cq_open(p->domain, &cq_attr, &p->cq_b, NULL));
    RDM_PAIR_SETUP(fi_endpoint(p->domain, info, &p->a, NULL));
    RDM_PAIR_SETUP(fi_endpoint(p->domain, info, &p->b, NULL));
    RDM_PAIR_SETUP(fi_ep_bind(p->a, &p->av->fid, 0));
    RDM_PAIR_SETUP(fi_ep_bind(p->b, &p->av->fid, 0));
    RDM_PAIR_SETUP(fi_ep_bind(p->a, &p->cq_a->fid, FI_TRANSMIT | FI_RECV));
    RDM_PAIR_SETUP(fi_ep_bind(p->b, &p->cq_b->fid, FI_TRANSMIT | FI_RECV));
    RDM_PAIR_SETUP(fi_enable(p->a));
    RDM_PAIR_SETUP(fi_enable(p->b));
    char name[256];
    size_t len = sizeof name;
    RDM_PAIR_SETUP(fi_getname(&p->b->fid, name, &len));
    RDM_PAIR_SETUP(fi_av_insert(p->av, name, 1, &p->to_b, 0, NULL) != 1);
}

/* Close what rdm_pair_open opened; a failure exits 70. */
static void rdm_pair_close(struct rdm_pair *p) {
    RDM_PAIR_SETUP(fi_close(&p->a->fid));
    RDM_PAIR_SETUP(fi_close(&p->b->fid));
    RDM_PAIR_SETUP(fi_close(&p->cq_a->fid));
    RDM_PAIR_SETUP(fi_close(&p->cq_b->fid));
    RDM_PAIR_SETUP(fi_close(&p->av->fid));
    RDM_PAIR_SETUP(fi_close(&p->domain->fid));
    RDM_PAIR_SETUP(fi_close(&p->fabric->fid));
}

static double rdm_pair_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Progress both endpoints until `cq` (one of the pair's) gives one completion, for at most
 * `timeout_s`: 1 for a success (its context in *ctx and, if `len` is not NULL, its length in
 * *len), the error's -FI_E* code, or -FI_ETIMEDOUT. */
static int rdm_pair_completion(struct rdm_pair *p, struct fid_cq *cq, double timeout_s, void **ctx, size_t *len) {
    struct fid_cq *other = cq == p->cq_a ? p->cq_b : p->cq_a;
    double end = rdm_pair_now() + timeout_s;
    struct fi_cq_tagged_entry e;
    while (rdm_pair_now() < end) {
        ssize_t rc = fi_cq_read(cq, &e, 1);
        fi_cq_read(other, NULL, 0);
        if (rc == 1) {
            *ctx = e.op_context;
            if (len) *len = e.len;
            return 1;
        }
        if (rc == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            if (fi_cq_readerr(cq, &err, 0) != 1) return -FI_EOTHER;
            *ctx = err.op_context;
            return -err.err;
        }
        if (rc != -FI_EAGAIN) return (int)rc;
    }
    return -FI_ETIMEDOUT;
}

#endif
