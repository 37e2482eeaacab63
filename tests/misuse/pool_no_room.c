/* Messages to a receiver whose pools find no room in /dev/shm: a region's inject and SAR pools
 * are reserved on first use, not when the endpoint is created, so a full /dev/shm must surface
 * there as -FI_ENOSPC for the send that needed the pool (returned by the call or as its error
 * completion), never as a SIGBUS or a hang, and the endpoints must go on carrying small
 * messages. Run in a tmpfs with room for two endpoints and then, for `sar`, for an inject pool
 * but not a SAR pool (scripts/test.sh: 4 MiB), or, for `inject`, for neither (3100 KiB):
 *
 *   cc -O2 -o pool_no_room pool_no_room.c -lfabric
 *   unshare -m sh -c "mount -t tmpfs -o size=4m tmpfs /dev/shm && \
 *       FI_PROVIDER_PATH=target/rshm ./pool_no_room sar"
 *
 * `sar`: a 2 KiB message (inject pool) arrives, a 64 KiB one (SAR) fails with -FI_ENOSPC.
 * `inject`: the 2 KiB message fails with -FI_ENOSPC. Then an 8-byte message must arrive intact.
 * Exits 0 when all of that held; 1 (with what happened) otherwise; 70 when the setup failed,
 * 2 on a usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/rdm_pair.h"

#define SETUP RDM_PAIR_SETUP

#define LARGE (64 * 1024)
#define MEDIUM 2048
#define SMALL 8
#define TAG_LARGE 1
#define TAG_SMALL 2
#define TAG_MEDIUM 3

static char large_out[LARGE], large_in[LARGE], small_out[SMALL] = "no room", small_in[SMALL];
static char medium_out[MEDIUM], medium_in[MEDIUM];

static struct rdm_pair pair;

/* One completion from `cq` within 10 s: 1 for a success, or the error's -FI_E* code. */
static int next_completion(struct fid_cq *cq, void **ctx) {
    int rc = rdm_pair_completion(&pair, cq, 10, ctx, NULL);
    if (rc == -FI_ETIMEDOUT) fprintf(stderr, "no completion within 10 s\n");
    return rc;
}

/* The receive `recv_ctx` on `cq` completes with `size` bytes equal to `out`; else exits 1. */
static void expect_delivered(struct fid_cq *cq, void *recv_ctx, const char *in, const char *out, int size,
                             const char *what) {
    void *ctx = NULL;
    int rc = next_completion(cq, &ctx);
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
    rdm_pair_open(info, &pair);
    struct fid_ep *a = pair.a, *b = pair.b;
    struct fid_cq *cq_a = pair.cq_a, *cq_b = pair.cq_b;
    fi_addr_t to_b = pair.to_b;

    memset(large_out, 0x5a, sizeof large_out);
    memset(medium_out, 0x3c, sizeof medium_out);
    static int large_send, medium_send, medium_recv, small_send, small_recv;
    void *ctx = NULL;
    int rc;
    SETUP(fi_trecv(b, medium_in, MEDIUM, NULL, FI_ADDR_UNSPEC, TAG_MEDIUM, 0, &medium_recv));
    ssize_t posted = fi_tsend(a, medium_out, MEDIUM, NULL, to_b, TAG_MEDIUM, &medium_send);
    if (inject) {
        expect_enospc(posted ? (int)posted : next_completion(cq_a, &ctx), MEDIUM,
                      posted ? "returned" : "completion");
    } else {
        SETUP(posted);
        expect_delivered(cq_b, &medium_recv, medium_in, medium_out, MEDIUM, "");
        SETUP(fi_trecv(b, large_in, LARGE, NULL, FI_ADDR_UNSPEC, TAG_LARGE, 0, NULL));
        SETUP(fi_tsend(a, large_out, LARGE, NULL, to_b, TAG_LARGE, &large_send));
        /* The sender's completion of the medium message may come first. */
        do {
            rc = next_completion(cq_a, &ctx);
        } while (rc == 1 && ctx == &medium_send);
        expect_enospc(ctx == &large_send ? rc : 1, LARGE, "completion");
    }

    SETUP(fi_trecv(b, small_in, SMALL, NULL, FI_ADDR_UNSPEC, TAG_SMALL, 0, &small_recv));
    SETUP(fi_tsend(a, small_out, SMALL, NULL, to_b, TAG_SMALL, &small_send));
    expect_delivered(cq_b, &small_recv, small_in, small_out, SMALL, " after it");
    rdm_pair_close(&pair);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    return 0;
}
