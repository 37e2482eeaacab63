/* One MPI message longer than 1 GiB (default 1536 MiB, or argv[1] MiB) from rank 0 to rank 1,
 * every byte checked. Open MPI's cm/mtl-ofi refuses a message longer than the provider's
 * max_msg_size ("Message size ... bigger than supported by selected transport"), which rshm put
 * at 1 GiB until the fiftieth session; MPICH splits such messages itself, below that size.
 * Prints "large_message: N MiB intact" on rank 1 and exits non-zero on any mismatch or error. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/byte_pattern.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long mib = argc > 1 ? atol(argv[1]) : 1536;
    size_t n = (size_t)mib << 20;
    /* A count of 1 MiB elements: an int count of bytes stops at 2 GiB. */
    MPI_Datatype one_mib;
    MPI_Type_contiguous(1 << 20, MPI_BYTE, &one_mib);
    MPI_Type_commit(&one_mib);
    if (rank < 2) {
        unsigned char *buf = malloc(n);
        if (!buf) {
            fprintf(stderr, "rank %d: cannot allocate %zu bytes\n", rank, n);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (rank == 0) {
            pattern_fill(buf, n, 0);
            MPI_Send(buf, (int)mib, one_mib, 1, 5, MPI_COMM_WORLD);
        } else {
            memset(buf, 0, n);
            MPI_Status st;
            MPI_Recv(buf, (int)mib, one_mib, 0, 5, MPI_COMM_WORLD, &st);
            int count = 0;
            MPI_Get_count(&st, one_mib, &count);
            for (size_t i = 0; i < n; i++) {
                if (buf[i] != pattern_byte(i, 0)) {
                    fprintf(stderr, "rank 1: byte %zu of %zu differs\n", i, n);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            }
            if (count != mib) {
                fprintf(stderr, "rank 1: received %d MiB of %ld\n", count, mib);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            printf("large_message: %ld MiB intact\n", mib);
        }
        free(buf);
    }
    MPI_Type_free(&one_mib);
    MPI_Finalize();
    return 0;
}
