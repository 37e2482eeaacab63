/* Histogram with one shmem_atomic_inc per update: random increments into a table distributed
 * over all PEs. Usage: histogram_plain [updates per PE] [table entries per PE] */
#include "common.h"

int main(int argc, char **argv) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    long nup = arg_long(argc, argv, 1, 1L << 20), tsize = arg_long(argc, argv, 2, 1L << 16);
    long *table = shmem_calloc(tsize, sizeof(long));
    uint64_t s = 1000 + me;
    shmem_barrier_all();
    double t0 = wall();
    for (long i = 0; i < nup; i++) {
        uint64_t g = histogram_update(&s, tsize, npes);
        shmem_long_atomic_inc(&table[g % tsize], (int)(g / tsize));
    }
    shmem_quiet();
    shmem_barrier_all();
    double t = slowest(wall() - t0);
    long errors = histogram_errors(table, tsize, nup);
    if (me == 0)
        printf("histogram plain npes=%d updates_per_pe=%ld seconds=%.4f rate_per_pe=%.6f Mupd/s\n", npes, nup, t,
               nup / t / 1e6);
    verdict("histogram_plain", errors);
    shmem_barrier_all();
    shmem_free(table);
    shmem_finalize();
    return errors != 0;
}
