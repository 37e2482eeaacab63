/* An MPI program that checks what it receives: point-to-point (blocking, nonblocking,
 * any-source/any-tag, probe), collectives, and message sizes from 0 B to 16 MiB.
 * Prints "mpi_check: N checks passed" on rank 0 and exits non-zero on the first mismatch. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;
static long checks;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        checks++;                                                               \
        if (!(cond)) {                                                          \
            fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
            MPI_Abort(MPI_COMM_WORLD, 1);                                       \
        }                                                                       \
    } while (0)

static unsigned char pattern(int src, int dst, size_t len, size_t i) {
    return (unsigned char)(i * 131 + (size_t)src * 17 + (size_t)dst * 7 + len);
}

static void fill(unsigned char *buf, int src, int dst, size_t len) {
    for (size_t i = 0; i < len; i++) buf[i] = pattern(src, dst, len, i);
}

static void verify(const unsigned char *buf, int src, int dst, size_t len) {
    for (size_t i = 0; i < len; i++)
        CHECK(buf[i] == pattern(src, dst, len, i), "byte %zu of %zu from %d differs", i, len, src);
}

static const size_t sizes[] = {0, 1, 8, 208, 209, 1024, 4096, 4097, 65536, 65537, 1 << 20, 16 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Ring exchange with blocking sendrecv at every size. */
static void ring(void) {
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (size_t s = 0; s < NSIZES; s++) {
        size_t len = sizes[s];
        if (getenv("MPI_CHECK_VERBOSE") && rank == 0) fprintf(stderr, "  ring %zu\n", len);
        unsigned char *out = malloc(len + 1), *in = malloc(len + 1);
        fill(out, rank, right, len);
        MPI_Status st;
        MPI_Sendrecv(out, (int)len, MPI_BYTE, right, 100 + (int)s, in, (int)len, MPI_BYTE, left, 100 + (int)s,
                     MPI_COMM_WORLD, &st);
        int count;
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK((size_t)count == len, "ring: got %d bytes, want %zu", count, len);
        verify(in, left, rank, len);
        free(out);
        free(in);
    }
}

/* Everyone sends to rank 0, which receives with MPI_ANY_SOURCE / MPI_ANY_TAG after a probe. */
static void any_source_probe(void) {
    const size_t len = 3000;
    unsigned char *buf = malloc(len);
    if (rank != 0) {
        fill(buf, rank, 0, len);
        MPI_Send(buf, (int)len, MPI_BYTE, 0, 7000 + rank, MPI_COMM_WORLD);
    } else {
        int seen = 0;
        for (int i = 1; i < size; i++) {
            MPI_Status st;
            MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int count;
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK((size_t)count == len, "probe: count %d from %d tag %d", count, st.MPI_SOURCE, st.MPI_TAG);
            CHECK(st.MPI_TAG == 7000 + st.MPI_SOURCE, "probe: tag %d from %d", st.MPI_TAG, st.MPI_SOURCE);
            MPI_Recv(buf, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
            verify(buf, st.MPI_SOURCE, 0, len);
            CHECK(!(seen & (1 << st.MPI_SOURCE)), "duplicate message from %d", st.MPI_SOURCE);
            seen |= 1 << st.MPI_SOURCE;
        }
    }
    free(buf);
}

/* Nonblocking all-to-all of every size with Isend/Irecv posted in reverse order. */
static void nonblocking_alltoall(void) {
    for (size_t s = 0; s < NSIZES; s++) {
        size_t len = sizes[s];
        if (len > (1 << 20) && size > 2) len = 1 << 20;
        unsigned char **out = calloc(size, sizeof(*out)), **in = calloc(size, sizeof(*in));
        MPI_Request *req = calloc(2 * size, sizeof(*req));
        int n = 0;
        for (int p = size - 1; p >= 0; p--) {
            if (p == rank) continue;
            in[p] = malloc(len + 1);
            MPI_Irecv(in[p], (int)len, MPI_BYTE, p, 9, MPI_COMM_WORLD, &req[n++]);
        }
        for (int p = 0; p < size; p++) {
            if (p == rank) continue;
            out[p] = malloc(len + 1);
            fill(out[p], rank, p, len);
            MPI_Isend(out[p], (int)len, MPI_BYTE, p, 9, MPI_COMM_WORLD, &req[n++]);
        }
        MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
        for (int p = 0; p < size; p++) {
            if (p == rank) continue;
            verify(in[p], p, rank, len);
            free(in[p]);
            free(out[p]);
        }
        free(in);
        free(out);
        free(req);
    }
}

/* Unexpected messages: rank 1 starts many sends before rank 0 posts any receive, and rank 0
 * receives them in reverse order. (Isend: a blocking send of a large message may wait for the
 * matching receive, which would deadlock against the barrier.) */
static void unexpected(void) {
    const int count = 200;
    if (size < 2) return;
    unsigned char **bufs = calloc(count, sizeof(*bufs));
    MPI_Request *req = calloc(count, sizeof(*req));
    if (rank == 1) {
        for (int i = 0; i < count; i++) {
            size_t len = (size_t)(i % 7) * 1500;
            bufs[i] = malloc(len + 1);
            fill(bufs[i], 1, 0, len);
            MPI_Isend(bufs[i], (int)len, MPI_BYTE, 0, i, MPI_COMM_WORLD, &req[i]);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        for (int i = count - 1; i >= 0; i--) {
            size_t len = (size_t)(i % 7) * 1500;
            unsigned char *buf = malloc(len + 1);
            MPI_Recv(buf, (int)len, MPI_BYTE, 1, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            verify(buf, 1, 0, len);
            free(buf);
        }
    }
    if (rank == 1) {
        MPI_Waitall(count, req, MPI_STATUSES_IGNORE);
        for (int i = 0; i < count; i++) free(bufs[i]);
    }
    free(bufs);
    free(req);
}

static void collectives(void) {
    long v = rank + 1, sum = 0;
    MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == (long)size * (size + 1) / 2, "allreduce %ld", sum);
    const size_t len = 1 << 20;
    unsigned char *buf = malloc(len);
    if (rank == 0) fill(buf, 0, 0, len);
    MPI_Bcast(buf, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD);
    verify(buf, 0, 0, len);
    free(buf);
    int *all = malloc(sizeof(int) * size), mine = rank * 3;
    MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < size; p++) CHECK(all[p] == p * 3, "allgather[%d] = %d", p, all[p]);
    free(all);
    const int per = 4096;
    int *sendb = malloc(sizeof(int) * per * size), *recvb = malloc(sizeof(int) * per * size);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < per; i++) sendb[p * per + i] = rank * 1000000 + p * 10000 + i;
    MPI_Alltoall(sendb, per, MPI_INT, recvb, per, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < per; i++)
            CHECK(recvb[p * per + i] == p * 1000000 + rank * 10000 + i, "alltoall from %d", p);
    free(sendb);
    free(recvb);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int verbose = getenv("MPI_CHECK_VERBOSE") != NULL;
#define PHASE(f)                                                          \
    do {                                                                  \
        if (verbose && rank == 0) fprintf(stderr, "mpi_check: " #f "\n"); \
        f();                                                              \
        /* Phases must not overlap: any-tag probes would see the next. */ \
        MPI_Barrier(MPI_COMM_WORLD);                                      \
    } while (0)
    PHASE(ring);
    PHASE(any_source_probe);
    PHASE(nonblocking_alltoall);
    PHASE(unexpected);
    PHASE(collectives);
    long total = 0;
    MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("mpi_check: %ld checks passed on %d ranks\n", total, size);
    MPI_Finalize();
    return 0;
}
