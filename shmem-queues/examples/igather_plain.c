/* Index-gather with one shmem_long_g per element: random reads from an array distributed over
 * all PEs. Usage: igather_plain [gets per PE] [array entries per PE] */
#include "common.h"

static long value_of(uint64_t g) { return (long)(g * 2654435761ULL ^ 0x5bd1e995ULL); }

int main(int argc, char **argv) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    long n = arg_long(argc, argv, 1, 1L << 19), tsize = arg_long(argc, argv, 2, 1L << 16);
    long *table = shmem_malloc(tsize * sizeof(long));
    for (long i = 0; i < tsize; i++) table[i] = value_of((uint64_t)me * tsize + i);
    uint64_t *idx = malloc(n * sizeof(uint64_t));
    long *out = malloc(n * sizeof(long)), errors = 0;
    uint64_t s = 2000 + me;
    for (long i = 0; i < n; i++) idx[i] = rng_next(&s) % (uint64_t)(tsize * npes);
    shmem_barrier_all();
    double t0 = wall();
    for (long i = 0; i < n; i++) out[i] = shmem_long_g(&table[idx[i] % tsize], (int)(idx[i] / tsize));
    shmem_barrier_all();
    double t = slowest(wall() - t0);
    for (long i = 0; i < n; i++) errors += out[i] != value_of(idx[i]);
    if (me == 0)
        printf("igather plain npes=%d gets_per_pe=%ld seconds=%.4f rate_per_pe=%.6f Mget/s\n", npes, n, t, n / t / 1e6);
    verdict("igather_plain", errors);
    shmem_barrier_all();
    shmem_free(table);
    shmem_finalize();
    return errors != 0;
}
