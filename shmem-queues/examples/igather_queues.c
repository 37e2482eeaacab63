/* Index-gather through a communication queue: the gets are aggregated per target PE and
 * answered in batches. Usage: igather_queues [gets per PE] [array entries per PE] */
#include "common.h"
#include <shmem_queues.h>

int main(int argc, char **argv) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    long n = arg_long(argc, argv, 1, 1L << 19), tsize = arg_long(argc, argv, 2, 1L << 16);
    long *table = shmem_malloc(tsize * sizeof(long));
    uint64_t *idx = igather_setup(table, tsize, n);
    long *out = malloc(n * sizeof(long)), errors = 0;
    shmem_queue_config_t cfg = {.qtype = SHMEM_QUEUE_COMM, .sharing_model = SHMEM_QUEUE_EXCLUSIVE,
                                .timeout_flush = SHMEM_QUEUE_MAX_TIMEOUT, .op_type = SHMEM_OP_GET};
    shmem_queue_t q;
    if (shmem_queue_comm_create(&q, &cfg)) { fprintf(stderr, "create failed\n"); shmem_global_exit(1); }
    shmem_barrier_all();
    double t0 = wall();
    for (long i = 0; i < n; i++)
        if (shmem_queue_comm_push(q, &out[i], &table[idx[i] % tsize], 1, (int)(idx[i] / tsize), SHMEM_OP_GET)) {
            fprintf(stderr, "push failed\n");
            shmem_global_exit(1);
        }
    shmem_queue_local_flush(q);
    shmem_barrier_all();
    double t = slowest(wall() - t0);
    for (long i = 0; i < n; i++) errors += out[i] != igather_value(idx[i]);
    if (me == 0)
        printf("igather queues npes=%d gets_per_pe=%ld seconds=%.4f rate_per_pe=%.6f Mget/s\n", npes, n, t, n / t / 1e6);
    verdict("igather_queues", errors);
    shmem_queue_comm_destroy(q);
    shmem_free(table);
    shmem_finalize();
    return errors != 0;
}
