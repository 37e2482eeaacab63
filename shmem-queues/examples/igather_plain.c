/* Index-gather with one shmem_long_g per element: random reads from an array distributed over
 * all PEs. Usage: igather_plain [gets per PE] [array entries per PE] */
#include "common.h"

int main(int argc, char **argv) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    long n = arg_long(argc, argv, 1, 1L << 19), tsize = arg_long(argc, argv, 2, 1L << 16);
    long *table = shmem_malloc(tsize * sizeof(long));
    uint64_t *idx = igather_setup(table, tsize, n);
    long *out = malloc(n * sizeof(long)), errors = 0;
    shmem_barrier_all();
    double t0 = wall();
    for (long i = 0; i < n; i++) out[i] = shmem_long_g(&table[idx[i] % tsize], (int)(idx[i] / tsize));
    shmem_barrier_all();
    double t = slowest(wall() - t0);
    for (long i = 0; i < n; i++) errors += out[i] != igather_value(idx[i]);
    if (me == 0)
        printf("igather plain npes=%d gets_per_pe=%ld seconds=%.4f rate_per_pe=%.6f Mget/s\n", npes, n, t, n / t / 1e6);
    verdict("igather_plain", errors);
    shmem_barrier_all();
    shmem_free(table);
    shmem_finalize();
    return errors != 0;
}
