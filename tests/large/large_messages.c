/* Messages, writes and reads longer than 4 GiB through libfabric, every byte checked: rshm says
 * max_msg_size SIZE_MAX (as the C shm does), and Open MPI's cm/mtl-ofi refuses any message above
 * what the provider says. Two endpoints of one process (CMA to itself is CMA all the same):
 *
 *   cc -O2 -o large_messages large_messages.c -lfabric
 *   FI_PROVIDER_PATH=target/rshm ./large_messages [MIB]               # CMA where allowed
 *   FI_RSHM_CMA=0 FI_PROVIDER_PATH=target/rshm ./large_messages [MIB] # SAR bounce buffers
 *
 * The length is MIB MiB plus 4,099 bytes (default 4096 MiB: past 2^32, and not a multiple of a
 * page or a word). In order: a tagged message received into a posted receive, one that arrives
 * before its receive (held by the receiver until it is posted), fi_write into a registered
 * buffer, fi_read out of it. Needs twice the length in memory, three times without CMA (the early
 * message is held). Exits 0 when every byte of all four arrived; 1 (saying what) otherwise; 70
 * when the setup failed, 2 on a usage error. */
#include <rdma/fi_rma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/rdm_pair.h"

#define SETUP RDM_PAIR_SETUP
#define TAG 7
#define TIMEOUT_S 120

static struct rdm_pair pair;

/* The byte at offset `i` of the message: a word of a multiplicative hash of the word's index,
 * so that bytes copied to the wrong place (4 GiB off included) do not match. */
static uint64_t word_at(uint64_t k) { return (k + 1) * 0x9E3779B97F4A7C15ull ^ (k >> 29); }

static void fill(unsigned char *buf, size_t len) {
    size_t words = len / 8;
    for (size_t k = 0; k < words; k++) {
        uint64_t w = word_at(k);
        memcpy(buf + 8 * k, &w, 8);
    }
    uint64_t last = word_at(words);
    memcpy(buf + 8 * words, &last, len % 8);
}

/* The first offset where `buf` is not the message, or `len` when all of it is. */
static size_t first_wrong(const unsigned char *buf, size_t len) {
    size_t words = len / 8;
    for (size_t k = 0; k < words; k++) {
        uint64_t w = word_at(k), got;
        memcpy(&got, buf + 8 * k, 8);
        if (got != w) return 8 * k;
    }
    uint64_t last = word_at(words);
    return memcmp(buf + 8 * words, &last, len % 8) ? 8 * words : len;
}

/* `cq` completes the operation `want` (with `len` bytes, for a receive); else exits 1. */
static void expect_completion(struct fid_cq *cq, void *want, size_t len, const char *what) {
    void *ctx = NULL;
    size_t got = 0;
    int rc = rdm_pair_completion(&pair, cq, TIMEOUT_S, &ctx, &got);
    if (rc != 1 || ctx != want || (len && got != len)) {
        printf("FAIL: %s: completion %d (%s), context %s, %zu bytes\n", what, rc, rc < 0 ? fi_strerror(-rc) : "ok",
               ctx == want ? "right" : "wrong", got);
        exit(1);
    }
}

/* Every byte of `buf` is the message; else exits 1. Then clears it for the next step. */
static void expect_message(unsigned char *buf, size_t len, const char *what, double started) {
    size_t at = first_wrong(buf, len);
    if (at != len) {
        printf("FAIL: %s: byte %zu of %zu differs\n", what, at, len);
        exit(1);
    }
    printf("  %s: %zu bytes intact (%.2f s)\n", what, len, rdm_pair_now() - started);
    memset(buf, 0, len);
}

/* Post `call` again while it answers -FI_EAGAIN, progressing both endpoints. */
#define POST(call)                                                                             \
    do {                                                                                       \
        ssize_t _rc;                                                                           \
        while ((_rc = (call)) == -FI_EAGAIN) {                                                 \
            fi_cq_read(pair.cq_a, NULL, 0);                                                    \
            fi_cq_read(pair.cq_b, NULL, 0);                                                    \
        }                                                                                      \
        SETUP(_rc);                                                                            \
    } while (0)

int main(int argc, char **argv) {
    char *end = NULL;
    long mib = argc > 1 ? strtol(argv[1], &end, 10) : 4096;
    if (argc > 2 || mib < 0 || (end && *end)) {
        fprintf(stderr, "usage: %s [MIB]\n", argv[0]);
        return 2;
    }
    size_t len = ((size_t)mib << 20) + 4099;
    unsigned char *out = malloc(len), *in = calloc(len, 1);
    if (!out || !in) {
        fprintf(stderr, "setup: cannot allocate twice %zu bytes\n", len);
        return 70;
    }
    fill(out, len);

    struct fi_info *hints = fi_allocinfo(), *info;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | FI_RMA;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    /* A completion means the bytes are at the target: a write is checked right after it. */
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    hints->fabric_attr->prov_name = strdup("rshm");
    SETUP(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    if (info->ep_attr->max_msg_size < len) {
        printf("FAIL: max_msg_size %zu is below %zu\n", info->ep_attr->max_msg_size, len);
        return 1;
    }
    rdm_pair_open(info, &pair);
    struct fid_ep *a = pair.a, *b = pair.b;
    struct fid_cq *cq_a = pair.cq_a, *cq_b = pair.cq_b;
    fi_addr_t to_b = pair.to_b;
    struct fid_mr *mr;
    SETUP(fi_mr_reg(pair.domain, in, len, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 0, 0, &mr, NULL));
    uint64_t key = fi_mr_key(mr);
    /* The target's address: its own where the domain addresses by it, else an offset. */
    uint64_t at = info->domain_attr->mr_mode & FI_MR_VIRT_ADDR ? (uint64_t)(uintptr_t)in : 0;
    printf("%zu-byte messages, writes and reads (max_msg_size %zu):\n", len, info->ep_attr->max_msg_size);

    static int send_ctx, recv_ctx, write_ctx, read_ctx;
    double t = rdm_pair_now();
    POST(fi_trecv(b, in, len, NULL, FI_ADDR_UNSPEC, TAG, 0, &recv_ctx));
    POST(fi_tsend(a, out, len, NULL, to_b, TAG, &send_ctx));
    expect_completion(cq_b, &recv_ctx, len, "the tagged message's receive");
    expect_completion(cq_a, &send_ctx, 0, "the tagged message's send");
    expect_message(in, len, "a message into a posted receive", t);

    t = rdm_pair_now();
    POST(fi_tsend(a, out, len, NULL, to_b, TAG + 1, &send_ctx));
    /* Let it arrive before its receive: the sender completes once the receiver has it all. */
    for (double until = rdm_pair_now() + 0.2; rdm_pair_now() < until;) {
        fi_cq_read(cq_b, NULL, 0);
        fi_cq_read(cq_a, NULL, 0);
    }
    POST(fi_trecv(b, in, len, NULL, FI_ADDR_UNSPEC, TAG + 1, 0, &recv_ctx));
    expect_completion(cq_b, &recv_ctx, len, "the early message's receive");
    expect_completion(cq_a, &send_ctx, 0, "the early message's send");
    expect_message(in, len, "a message that arrived before its receive", t);

    t = rdm_pair_now();
    POST(fi_write(a, out, len, NULL, to_b, at, key, &write_ctx));
    expect_completion(cq_a, &write_ctx, 0, "fi_write");
    expect_message(in, len, "fi_write", t);

    memcpy(in, out, len);
    memset(out, 0, len);
    t = rdm_pair_now();
    POST(fi_read(a, out, len, NULL, to_b, at, key, &read_ctx));
    expect_completion(cq_a, &read_ctx, 0, "fi_read");
    expect_message(out, len, "fi_read", t);

    SETUP(fi_close(&mr->fid));
    rdm_pair_close(&pair);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    free(out);
    free(in);
    return 0;
}
