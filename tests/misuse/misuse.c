/* Misuse through libfabric's public API: every case calls an entry point of the provider with
 * NULL pointers, foreign fids, unknown flags, zero or huge lengths, wrong addresses or an
 * unsupported operation, in a forked child (so that a crash is a result, not the end of the
 * run). A case passes when the call returns a negative FI_E* code (or, where the API allows a
 * post to be accepted, the failure arrives as an error completion), the process does not crash,
 * and the provider wrote a log line about it (children run with FI_LOG_LEVEL=info; the line
 * is looked for in the child's stderr, as "libfabric:...:<prov>:"; -FI_ENOENT and -FI_EAGAIN,
 * answers of normal operation, need none). A few cases may also succeed (K_OK: NULL meaning
 * "defaults" or "no output wanted").
 *
 *   cc -O2 -o misuse misuse.c -lfabric
 *   FI_PROVIDER_PATH=target/rshm ./misuse rshm        # or shm, to compare
 *
 * Prints one line per case ("PASS|FAIL name: what happened") and a summary; exits 0 when every
 * case passed, 1 otherwise. `./misuse rshm CASE` runs one case in the foreground. */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../include/fi_check.h"

static const char *prov;

struct env {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep, *ep2;
    struct fid_cq *cq2;
    fi_addr_t self, peer;
    char buf[8192];
};

#define SETUP(call) FI_CHECK_OR_EXIT(call, "setup: ", 70)

static struct fid_ep *open_ep(struct env *e, struct fid_cq **cq) {
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED, .size = 64};
    struct fid_ep *ep;
    SETUP(fi_cq_open(e->domain, &cqa, cq, NULL));
    SETUP(fi_endpoint(e->domain, e->info, &ep, NULL));
    SETUP(fi_ep_bind(ep, &e->av->fid, 0));
    SETUP(fi_ep_bind(ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
    SETUP(fi_enable(ep));
    return ep;
}

static fi_addr_t insert(struct env *e, struct fid_ep *ep) {
    char name[256];
    size_t len = sizeof(name);
    fi_addr_t a;
    SETUP(fi_getname(&ep->fid, name, &len));
    if (fi_av_insert(e->av, name, 1, &a, 0, NULL) != 1)
        exit(71);
    return a;
}

static void setup(struct env *e) {
    struct fi_info *hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup(prov);
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    SETUP(fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints, &e->info));
    fi_freeinfo(hints);
    SETUP(fi_fabric(e->info->fabric_attr, &e->fabric, NULL));
    SETUP(fi_domain(e->fabric, e->info, &e->domain, NULL));
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    SETUP(fi_av_open(e->domain, &ava, &e->av, NULL));
    e->ep = open_ep(e, &e->cq);
    e->ep2 = open_ep(e, &e->cq2);
    e->self = insert(e, e->ep);
    e->peer = insert(e, e->ep2);
}

/* Progress both endpoints for up to `ms`, returning the first completion or error on `cq`:
 * 1 = a successful completion, -FI_Exxx = an error completion, 0 = nothing. */
static int reap(struct env *e, struct fid_cq *cq, int ms) {
    struct fi_cq_tagged_entry c;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ssize_t n = fi_cq_read(cq, &c, 1);
        if (n == 1)
            return 1;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(cq, &err, 0);
            return -(int)err.err;
        }
        fi_cq_read(cq == e->cq ? e->cq2 : e->cq, &c, 0);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
            return 0;
    }
}

/* A post that must be refused, or else fail through its completion. */
static long posted(struct env *e, struct fid_cq *cq, long rc) {
    if (rc != 0)
        return rc;
    int r = reap(e, cq, 2000);
    return r < 0 ? r : 0; /* 0: accepted and completed (or nothing): the misuse went through */
}

typedef long (*case_fn)(struct env *);

static long send_null_buf(struct env *e) { return posted(e, e->cq, fi_send(e->ep, NULL, 100, NULL, e->peer, NULL)); }
/* Lengths no buffer can have: past the end of every user address space (2^57 and beyond), and
 * one that wraps around it. (max_msg_size is SIZE_MAX, as the C shm's.) */
static long send_huge_len(struct env *e) {
    return posted(e, e->cq, fi_send(e->ep, e->buf, (size_t)1 << 60, NULL, e->peer, NULL));
}
static long send_size_max(struct env *e) { return posted(e, e->cq, fi_send(e->ep, e->buf, SIZE_MAX, NULL, e->peer, NULL)); }
static long send_bad_addr(struct env *e) { return posted(e, e->cq, fi_send(e->ep, e->buf, 8, NULL, 123456, NULL)); }
static long send_addr_unspec(struct env *e) {
    return posted(e, e->cq, fi_send(e->ep, e->buf, 8, NULL, FI_ADDR_UNSPEC, NULL));
}
static long sendv_null_iov(struct env *e) { return posted(e, e->cq, fi_sendv(e->ep, NULL, NULL, 1, e->peer, NULL)); }
static long sendv_too_many(struct env *e) {
    struct iovec iov[1024];
    for (int i = 0; i < 1024; i++)
        iov[i] = (struct iovec){e->buf, 1};
    return posted(e, e->cq, fi_sendv(e->ep, iov, NULL, 1024, e->peer, NULL));
}
static long sendmsg_null_msg(struct env *e) { return posted(e, e->cq, fi_sendmsg(e->ep, NULL, 0)); }
static long sendmsg_unknown_flag(struct env *e) {
    struct iovec iov = {e->buf, 8};
    struct fi_msg m = {.msg_iov = &iov, .iov_count = 1, .addr = e->peer};
    return posted(e, e->cq, fi_sendmsg(e->ep, &m, 1ULL << 61));
}
static long inject_null_buf(struct env *e) { return fi_inject(e->ep, NULL, 16, e->peer); }
static long inject_too_big(struct env *e) { return fi_inject(e->ep, e->buf, 1 << 20, e->peer); }
static long recv_null_buf(struct env *e) { return posted(e, e->cq2, fi_recv(e->ep2, NULL, 100, NULL, FI_ADDR_UNSPEC, NULL)); }
static long recvmsg_null_msg(struct env *e) { return posted(e, e->cq2, fi_recvmsg(e->ep2, NULL, 0)); }
static long tsend_null_buf(struct env *e) { return posted(e, e->cq, fi_tsend(e->ep, NULL, 64, NULL, e->peer, 7, NULL)); }
static long cq_read_null_buf(struct env *e) {
    fi_inject(e->ep, e->buf, 8, e->peer); /* make sure an entry could be there */
    char b[8];
    fi_recv(e->ep2, b, 8, NULL, FI_ADDR_UNSPEC, NULL);
    reap(e, e->cq, 50);
    return fi_cq_read(e->cq2, NULL, 1);
}
static long cq_readerr_null_buf(struct env *e) { return fi_cq_readerr(e->cq, NULL, 0); }
static long cq_sread_null_buf(struct env *e) { return fi_cq_sread(e->cq, NULL, 1, NULL, 10); }
static long av_insert_null_addr(struct env *e) {
    fi_addr_t a;
    return fi_av_insert(e->av, NULL, 1, &a, 0, NULL);
}
static long av_insert_garbage(struct env *e) {
    char junk[64];
    memset(junk, 0xff, sizeof(junk));
    fi_addr_t a = 0;
    long rc = fi_av_insert(e->av, junk, 1, &a, 0, NULL);
    return rc == 1 ? (a == FI_ADDR_NOTAVAIL ? -FI_EINVAL : 0) : (rc < 0 ? rc : -FI_EINVAL);
}
static long av_insert_unknown_flag(struct env *e) {
    char name[256];
    size_t len = sizeof(name);
    fi_getname(&e->ep->fid, name, &len);
    fi_addr_t a;
    return fi_av_insert(e->av, name, 1, &a, 1ULL << 60, NULL);
}
static long av_lookup_null_len(struct env *e) {
    char name[256];
    return fi_av_lookup(e->av, e->peer, name, NULL);
}
static long av_lookup_bad_addr(struct env *e) {
    char name[256];
    size_t len = sizeof(name);
    return fi_av_lookup(e->av, 99999, name, &len);
}
static long av_remove_bad_addr(struct env *e) {
    fi_addr_t a = 99999;
    return fi_av_remove(e->av, &a, 1, 0);
}
static long getname_null_len(struct env *e) {
    char name[256];
    return fi_getname(&e->ep->fid, name, NULL);
}
static long getname_too_small(struct env *e) {
    char name[2];
    size_t len = sizeof(name);
    return fi_getname(&e->ep->fid, name, &len);
}
static long ep_bind_null(struct env *e) { return fi_ep_bind(e->ep, NULL, FI_TRANSMIT); }
static long ep_bind_foreign(struct env *e) { return fi_ep_bind(e->ep, &e->domain->fid, FI_TRANSMIT); }
static long ep_bind_unknown_flags(struct env *e) {
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED};
    struct fid_cq *cq;
    SETUP(fi_cq_open(e->domain, &cqa, &cq, NULL));
    struct fid_ep *ep;
    SETUP(fi_endpoint(e->domain, e->info, &ep, NULL));
    return fi_ep_bind(ep, &cq->fid, 1ULL << 50);
}
static long enable_without_cq(struct env *e) {
    struct fid_ep *ep;
    SETUP(fi_endpoint(e->domain, e->info, &ep, NULL));
    SETUP(fi_ep_bind(ep, &e->av->fid, 0));
    return fi_enable(ep);
}
static long endpoint_null_info(struct env *e) {
    struct fid_ep *ep;
    return fi_endpoint(e->domain, NULL, &ep, NULL);
}
static long cq_open_null_attr(struct env *e) {
    struct fid_cq *cq;
    return fi_cq_open(e->domain, NULL, &cq, NULL);
}
static long cq_open_bad_format(struct env *e) {
    struct fi_cq_attr cqa = {.format = 77};
    struct fid_cq *cq;
    return fi_cq_open(e->domain, &cqa, &cq, NULL);
}
static long mr_reg_null_buf(struct env *e) {
    struct fid_mr *mr;
    return fi_mr_reg(e->domain, NULL, 4096, FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL);
}
static long mr_reg_unknown_access(struct env *e) {
    struct fid_mr *mr;
    return fi_mr_reg(e->domain, e->buf, 64, 1ULL << 55, 0, 0, 0, &mr, NULL);
}
static long control_unknown(struct env *e) { return fi_control(&e->ep->fid, 987654, NULL); }
static long setopt_unknown(struct env *e) {
    int v = 1;
    return fi_setopt(&e->ep->fid, FI_OPT_ENDPOINT, 98765, &v, sizeof(v));
}
static long getopt_null_len(struct env *e) {
    size_t v;
    return fi_getopt(&e->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, NULL);
}
static long atomic_bad_op(struct env *e) {
    uint64_t v = 1;
    return posted(e, e->cq, fi_atomic(e->ep, &v, 1, NULL, e->peer, 0, 0, FI_UINT64, (enum fi_op)999, NULL));
}
static long atomic_bad_datatype(struct env *e) {
    uint64_t v = 1;
    return posted(e, e->cq, fi_atomic(e->ep, &v, 1, NULL, e->peer, 0, 0, (enum fi_datatype)999, FI_SUM, NULL));
}
static long atomicvalid_null_count(struct env *e) {
    return fi_atomicvalid(e->ep, FI_UINT64, FI_SUM, NULL);
}
static long read_null_buf(struct env *e) { return posted(e, e->cq, fi_read(e->ep, NULL, 64, NULL, e->peer, 0, 1, NULL)); }
static long write_no_mr(struct env *e) {
    return posted(e, e->cq, fi_write(e->ep, e->buf, 64, NULL, e->peer, 0x1000, 0xdead, NULL));
}
/* More remote ranges than rma_iov_limit (4), none, and ranges that do not add up to the local
 * bytes: refused by the call, never sent. */
static long writemsg_rma_iov_count(struct env *e, size_t count, size_t len) {
    struct iovec iov = {.iov_base = e->buf, .iov_len = 64};
    struct fi_rma_iov rma[5];
    for (size_t i = 0; i < 5; i++)
        rma[i] = (struct fi_rma_iov){.addr = 0x1000 + 64 * i, .len = len, .key = 0xdead};
    struct fi_msg_rma m = {.msg_iov = &iov, .iov_count = 1, .addr = e->peer, .rma_iov = rma, .rma_iov_count = count};
    return posted(e, e->cq, fi_writemsg(e->ep, &m, 0));
}
static long writemsg_too_many_ranges(struct env *e) { return writemsg_rma_iov_count(e, 5, 64 / 5); }
static long writemsg_no_range(struct env *e) { return writemsg_rma_iov_count(e, 0, 64); }
static long writemsg_ranges_short(struct env *e) { return writemsg_rma_iov_count(e, 3, 16); }
static long atomicmsg_too_many_ranges(struct env *e) {
    struct fi_ioc ioc = {.addr = e->buf, .count = 5};
    struct fi_rma_ioc rma[5];
    for (size_t i = 0; i < 5; i++)
        rma[i] = (struct fi_rma_ioc){.addr = 0x1000 + 8 * i, .count = 1, .key = 0xdead};
    struct fi_msg_atomic m = {.msg_iov = &ioc, .iov_count = 1, .addr = e->peer, .rma_iov = rma, .rma_iov_count = 5,
                              .datatype = FI_UINT64, .op = FI_SUM};
    return posted(e, e->cq, fi_atomicmsg(e->ep, &m, 0));
}
static long cntr_open_null_attr(struct env *e) {
    struct fid_cntr *c;
    return fi_cntr_open(e->domain, NULL, &c, NULL);
}
static long cancel_unknown_ctx(struct env *e) {
    char ctx[64];
    return fi_cancel(&e->ep->fid, ctx);
}
static long cancel_null_ctx(struct env *e) { return fi_cancel(&e->ep->fid, NULL); }
static long getwait_null_arg(struct env *e) {
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
    struct fid_cq *cq;
    SETUP(fi_cq_open(e->domain, &cqa, &cq, NULL));
    return fi_control(&cq->fid, FI_GETWAIT, NULL);
}
static long getwait_without_fd(struct env *e) {
    int fd = -1;
    return fi_control(&e->cq->fid, FI_GETWAIT, &fd);
}
static long trywait_null_fids(struct env *e) { return fi_trywait(e->fabric, NULL, 1); }
static long wait_open_null_attr(struct env *e) {
    struct fid_wait *w;
    return fi_wait_open(e->fabric, NULL, &w);
}
static long cq_open_set_without_set(struct env *e) {
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_SET, .wait_set = NULL};
    struct fid_cq *cq;
    return fi_cq_open(e->domain, &cqa, &cq, NULL);
}
static long wait_close_with_member(struct env *e) {
    struct fi_wait_attr wa = {.wait_obj = FI_WAIT_UNSPEC};
    struct fid_wait *w;
    SETUP(fi_wait_open(e->fabric, &wa, &w));
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_SET, .wait_set = w};
    struct fid_cq *cq;
    SETUP(fi_cq_open(e->domain, &cqa, &cq, NULL));
    return fi_close(&w->fid);
}

struct kase {
    const char *name;
    case_fn fn;
    /* Success is a correct answer too: NULL meaning "defaults" or "no output wanted", and
     * unknown operation flags, which rshm (like the C shm and libfabric's util code) ignores
     * so that flags of newer API versions do not break callers. */
    int ok_allowed;
};

#define K(f) {#f, f, 0}
#define K_OK(f) {#f, f, 1}
static const struct kase cases[] = {
    K(send_null_buf), K(send_huge_len), K(send_size_max), K(send_bad_addr), K(send_addr_unspec),
    K(sendv_null_iov), K(sendv_too_many), K(sendmsg_null_msg), K_OK(sendmsg_unknown_flag),
    K(inject_null_buf), K(inject_too_big), K(recv_null_buf), K(recvmsg_null_msg),
    K(tsend_null_buf), K(cq_read_null_buf), K(cq_readerr_null_buf), K(cq_sread_null_buf),
    K(av_insert_null_addr), K(av_insert_garbage), K(av_insert_unknown_flag), K(av_lookup_null_len),
    K(av_lookup_bad_addr), K(av_remove_bad_addr), K(getname_null_len), K(getname_too_small),
    K(ep_bind_null), K(ep_bind_foreign), K(ep_bind_unknown_flags), K(enable_without_cq),
    K(endpoint_null_info), K(cq_open_null_attr), K(cq_open_bad_format), K(mr_reg_null_buf),
    K(mr_reg_unknown_access), K(control_unknown), K(setopt_unknown), K(getopt_null_len),
    K(atomic_bad_op), K(atomic_bad_datatype), K_OK(atomicvalid_null_count), K(read_null_buf),
    K(write_no_mr), K(writemsg_too_many_ranges), K(writemsg_no_range), K(writemsg_ranges_short),
    K(atomicmsg_too_many_ranges), K_OK(cntr_open_null_attr), K(cancel_unknown_ctx), K(cancel_null_ctx),
    K(getwait_null_arg), K(getwait_without_fd), K(trywait_null_fids), K(wait_open_null_attr),
    K(cq_open_set_without_set), K(wait_close_with_member),
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static int run_case(const struct kase *k) {
    struct env e;
    memset(&e, 0, sizeof(e));
    setup(&e);
    long rc = k->fn(&e);
    printf("rc=%ld\n", rc);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: misuse PROVIDER [CASE]\n");
        return 2;
    }
    prov = argv[1];
    if (argc == 3) {
        for (size_t i = 0; i < NCASES; i++)
            if (!strcmp(cases[i].name, argv[2]))
                return run_case(&cases[i]);
        return 2;
    }
    setenv("FI_LOG_LEVEL", "info", 0);
    setenv("FI_PROVIDER", prov, 0);
    int failed = 0;
    for (size_t i = 0; i < NCASES; i++) {
        int out[2], err[2];
        if (pipe(out) || pipe(err))
            return 2;
        pid_t pid = fork();
        if (pid == 0) {
            dup2(out[1], 1);
            dup2(err[1], 2);
            close(out[0]);
            close(err[0]);
            alarm(20);
            exit(run_case(&cases[i]));
        }
        close(out[1]);
        close(err[1]);
        static char obuf[4096], ebuf[65536];
        ssize_t on = 0, en = 0, n;
        /* stderr may be large: drain both (stdout is tiny). */
        while (en < (ssize_t)sizeof(ebuf) - 1 && (n = read(err[0], ebuf + en, sizeof(ebuf) - 1 - en)) > 0)
            en += n;
        while ((n = read(out[0], obuf + on, sizeof(obuf) - 1 - on)) > 0)
            on += n;
        obuf[on] = ebuf[en] = 0;
        close(out[0]);
        close(err[0]);
        int status;
        waitpid(pid, &status, 0);
        char what[512];
        int pass = 0;
        char tag[64];
        snprintf(tag, sizeof(tag), ":%s:", prov);
        int logged = strstr(ebuf, tag) != NULL;
        const char *sig = strstr(ebuf, "terminated with signal");
        if (sig) {
            /* libfabric's own SIGSEGV/SIGBUS handler prints a backtrace and exits 1. */
            snprintf(what, sizeof(what), "crashed (%.40s)", sig);
        } else if (WIFSIGNALED(status)) {
            snprintf(what, sizeof(what), "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
        } else if (WEXITSTATUS(status) == 70 || WEXITSTATUS(status) == 71) {
            snprintf(what, sizeof(what), "setup failed: %.200s", ebuf);
        } else {
            long rc = 0;
            if (sscanf(obuf, "rc=%ld", &rc) != 1) {
                snprintf(what, sizeof(what), "exit %d without a result", WEXITSTATUS(status));
            } else if (rc >= 0) {
                pass = cases[i].ok_allowed;
                snprintf(what, sizeof(what), "accepted (rc=%ld)%s", rc, pass ? ", which is allowed" : "");
            } else {
                /* Answers that are part of normal operation need no log line. */
                pass = logged || rc == -FI_ENOENT || rc == -FI_EAGAIN;
                snprintf(what, sizeof(what), "%ld (%s)%s", rc, fi_strerror((int)-rc), logged ? ", logged" : ", NO log line");
            }
        }
        printf("%s %s: %s\n", pass ? "PASS" : "FAIL", cases[i].name, what);
        fflush(stdout);
        failed += !pass;
    }
    printf("misuse %s: %zu cases, %d failed\n", prov, NCASES, failed);
    return failed ? 1 : 0;
}
