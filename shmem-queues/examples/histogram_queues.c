/* Histogram through a communication queue: the increments are aggregated per target PE and
 * applied there in batches. Usage: histogram_queues [updates per PE] [table entries per PE] */
#include "common.h"
#include <shmem_queues.h>

int main(int argc, char **argv) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    long nup = arg_long(argc, argv, 1, 1L << 20), tsize = arg_long(argc, argv, 2, 1L << 16);
    long *table = shmem_calloc(tsize, sizeof(long));
    shmem_queue_config_t cfg = {.qtype = SHMEM_QUEUE_COMM, .sharing_model = SHMEM_QUEUE_EXCLUSIVE,
                                .timeout_flush = SHMEM_QUEUE_MAX_TIMEOUT, .op_type = SHMEM_OP_ATOMIC_INC};
    shmem_queue_t q;
    if (shmem_queue_comm_create(&q, &cfg)) { fprintf(stderr, "create failed\n"); shmem_global_exit(1); }
    uint64_t s = 1000 + me;
    shmem_barrier_all();
    double t0 = wall();
    for (long i = 0; i < nup; i++) {
        uint64_t g = histogram_update(&s, tsize, npes);
        if (shmem_queue_comm_push(q, &table[g % tsize], (long *)NULL, 1, (int)(g / tsize), SHMEM_OP_ATOMIC_INC)) {
            fprintf(stderr, "push failed\n");
            shmem_global_exit(1);
        }
    }
    shmem_queue_local_flush(q);
    shmem_barrier_all();
    double t = slowest(wall() - t0);
    long errors = histogram_errors(table, tsize, nup);
    if (me == 0)
        printf("histogram queues npes=%d updates_per_pe=%ld seconds=%.4f rate_per_pe=%.6f Mupd/s\n", npes, nup, t,
               nup / t / 1e6);
    verdict("histogram_queues", errors);
    shmem_queue_comm_destroy(q);
    shmem_free(table);
    shmem_finalize();
    return errors != 0;
}
