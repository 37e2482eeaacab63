/* Messages to a receiver whose pools find no room in /dev/shm: a region's inject and SAR pools
 * are reserved on first use, not when the endpoint is created, so a full /dev/shm must surface
 * there as -FI_ENOSPC for the send that needed the pool (returned by the call or as its error
 * completion), never as a SIGBUS or a hang, and the endpoints must go on carrying small
 * messages. Run in a tmpfs with room for two endpoints and then, for `sar`, for an inject pool
 * but not a SAR pool (scripts/test.sh: 4 MiB), or, for `inject`, for neither (2900 KiB):
 *
 *   cc -O2 -o pool_no_room pool_no_room.c -lfabric
 *   unshare -m sh -c "mount -t tmpfs -o size=4m tmpfs /dev/shm && \
 *       FI_PROVIDER_PATH=target/rshm ./pool_no_room sar"
 *
 * `sar`: a 2 KiB message (inject pool) arrives, a 64 KiB one (SAR) fails with -FI_ENOSPC.
 * `inject`: the 2 KiB message fails with -FI_ENOSPC. Then an 8-byte message must arrive intact.
 * Exits 0 when all of that held; 1 (with what happened) otherwise; 70 when the setup failed,
 * 2 on a usage error. */
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

#define SETUP(call) FI_CHECK_OR_EXIT(call, "setup: ", 70)

#define LARGE (64 * 1024)
#define MEDIUM 2048
#define SMALL 8
#define TAG_LARGE 1
#define TAG_SMALL 2
#define TAG_MEDIUM 3

static char large_out[LARGE], large_in[LARGE], small_out[SMALL] = "no room", small_in[SMALL];
static char medium_out[MEDIUM], medium_in[MEDIUM];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One completion from `cq` within 10 s: 1 for a success, or the error's -FI_E* code. */
static int next_completion(struct fid_cq *cq, struct fid_cq *other, void **ctx) {
    double end = now() + 10;
    struct fi_cq_tagged_entry e;
    while (now() < end) {
        ssize_t rc = fi_cq_read(cq, &e, 1);
        fi_cq_read(other, NULL, 0); /* the other endpoint progresses too */
        if (rc == 1) {
            *ctx = e.op_context;
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
    fprintf(stderr, "no completion within 10 s\n");
    return -FI_ETIMEDOUT;
}

/* The receive `recv_ctx` on `cq` completes with `size` bytes equal to `out`; else exits 1. */
static void expect_delivered(struct fid_cq *cq, struct fid_cq *other, void *recv_ctx, const char *in,
                             const char *out, int size, const char *what) {
    void *ctx = NULL;
    int rc = next_completion(cq, other, &ctx);
    if (rc != 1 || ctx != recv_ctx || memcmp(in, out, size)) {
        printf("FAIL: the %d-byte message%s: completion %d, bytes %s\n", size, what, rc,
               memcmp(in, out, size) ? "wrong" : "right");
        exit(1);
    }
    printf("a %d-byte message%s arrived intact\n", size, what);
}

/* A send of `size` bytes gave `rc`: -FI_ENOSPC is expected; else exits 1. */
static void expect_enospc(int rc, int size, const char *how) {
    if (rc != -FI_ENOSPC) {
        printf("FAIL: the %d-byte send gave %d (%s), expected -FI_ENOSPC\n", size, rc,
               rc < 0 ? fi_strerror(-rc) : "success");
        exit(1);
    }
    printf("the %d-byte send failed with -FI_ENOSPC (%s)\n", size, how);
}

int main(int argc, char **argv) {
    int sar = argc == 2 && !strcmp(argv[1], "sar"), inject = argc == 2 && !strcmp(argv[1], "inject");
    if (!sar && !inject) {
        fprintf(stderr, "usage: %s sar|inject\n", argv[0]);
        return 2;
    }
    /* SAR, not CMA, for every message above the inject size. */
    setenv("FI_RSHM_CMA", "0", 1);
    struct fi_info *hints = fi_allocinfo(), *info;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED;
    hints->mode = ~0ULL;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup("rshm");
    SETUP(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq_a, *cq_b;
    struct fid_ep *a, *b;
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
    SETUP(fi_fabric(info->fabric_attr, &fabric, NULL));
    SETUP(fi_domain(fabric, info, &domain, NULL));
    SETUP(fi_av_open(domain, &av_attr, &av, NULL));
    SETUP(fi_cq_open(domain, &cq_attr, &cq_a, NULL));
    SETUP(fi_cq_open(domain, &cq_attr, &cq_b, NULL));
    SETUP(fi_endpoint(domain, info, &a, NULL));
    SETUP(fi_endpoint(domain, info, &b, NULL));
    SETUP(fi_ep_bind(a, &av->fid, 0));
    SETUP(fi_ep_bind(b, &av->fid, 0));
    SETUP(fi_ep_bind(a, &cq_a->fid, FI_TRANSMIT | FI_RECV));
    SETUP(fi_ep_bind(b, &cq_b->fid, FI_TRANSMIT | FI_RECV));
    SETUP(fi_enable(a));
    SETUP(fi_enable(b));
    char name[256];
    size_t len = sizeof name;
    fi_addr_t to_b;
    SETUP(fi_getname(&b->fid, name, &len));
    SETUP(fi_av_insert(av, name, 1, &to_b, 0, NULL) != 1);

    memset(large_out, 0x5a, sizeof large_out);
    memset(medium_out, 0x3c, sizeof medium_out);
    static int large_send, medium_send, medium_recv, small_send, small_recv;
    void *ctx = NULL;
    int rc;
    SETUP(fi_trecv(b, medium_in, MEDIUM, NULL, FI_ADDR_UNSPEC, TAG_MEDIUM, 0, &medium_recv));
    ssize_t posted = fi_tsend(a, medium_out, MEDIUM, NULL, to_b, TAG_MEDIUM, &medium_send);
    if (inject) {
        expect_enospc(posted ? (int)posted : next_completion(cq_a, cq_b, &ctx), MEDIUM,
                      posted ? "returned" : "completion");
    } else {
        SETUP(posted);
        expect_delivered(cq_b, cq_a, &medium_recv, medium_in, medium_out, MEDIUM, "");
        SETUP(fi_trecv(b, large_in, LARGE, NULL, FI_ADDR_UNSPEC, TAG_LARGE, 0, NULL));
        SETUP(fi_tsend(a, large_out, LARGE, NULL, to_b, TAG_LARGE, &large_send));
        /* The sender's completion of the medium message may come first. */
        do {
            rc = next_completion(cq_a, cq_b, &ctx);
        } while (rc == 1 && ctx == &medium_send);
        expect_enospc(ctx == &large_send ? rc : 1, LARGE, "completion");
    }

    SETUP(fi_trecv(b, small_in, SMALL, NULL, FI_ADDR_UNSPEC, TAG_SMALL, 0, &small_recv));
    SETUP(fi_tsend(a, small_out, SMALL, NULL, to_b, TAG_SMALL, &small_send));
    expect_delivered(cq_b, cq_a, &small_recv, small_in, small_out, SMALL, " after it");
    SETUP(fi_close(&a->fid));
    SETUP(fi_close(&b->fid));
    SETUP(fi_close(&cq_a->fid));
    SETUP(fi_close(&cq_b->fid));
    SETUP(fi_close(&av->fid));
    SETUP(fi_close(&domain->fid));
    SETUP(fi_close(&fabric->fid));
    fi_freeinfo(info);
    fi_freeinfo(hints);
    return 0;
}
