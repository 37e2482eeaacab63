/* MPI_Comm_spawn from every rank at once (each from MPI_COMM_SELF, as mpi4py's test_spawn does):
 * each parent starts two children; over each intercommunicator the parent sends every child 8 B
 * and 64 KiB, the children answer, every byte checked, then a barrier and MPI_Comm_disconnect.
 * A child's parent sends before the child has inserted the parent's address: until the
 * fifty-first session rshm held such a message with no source address, the child's receive
 * directed at its parent never matched it, and Open MPI's cm/mtl-ofi children hung in their
 * first barrier. Prints "spawn: N parents x 2 children, intact" on rank 0; exits non-zero on any
 * error. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/byte_pattern.h"

#define CHILDREN 2

static const size_t sizes[] = {8, 64 << 10};

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    unsigned char *buf = malloc(64 << 10);
    int bad = buf == NULL;
    if (parent != MPI_COMM_NULL) {
        /* A child: the seed names its parent's rank (argv[1]) and its own. */
        int me, from = argc > 1 ? atoi(argv[1]) : -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        char who[64];
        snprintf(who, sizeof who, "child %d of parent %d", me, from);
        for (int s = 0; s < 2 && buf; s++) {
            memset(buf, 0, sizes[s]);
            MPI_Recv(buf, (int)sizes[s], MPI_BYTE, 0, s, parent, MPI_STATUS_IGNORE);
            bad |= pattern_check(buf, sizes[s], from * 100 + me, who);
            pattern_fill(buf, sizes[s], 10000 + from * 100 + me);
            MPI_Send(buf, (int)sizes[s], MPI_BYTE, 0, 10 + s, parent);
        }
        MPI_Send(&bad, 1, MPI_INT, 0, 20, parent);
        MPI_Barrier(parent);
        MPI_Comm_disconnect(&parent);
        free(buf);
        MPI_Finalize();
        return 0;
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char arg[16];
    snprintf(arg, sizeof arg, "%d", rank);
    char *child_argv[] = {arg, NULL};
    MPI_Comm children;
    int errs[CHILDREN];
    MPI_Comm_spawn(argv[0], child_argv, CHILDREN, MPI_INFO_NULL, 0, MPI_COMM_SELF, &children, errs);
    int remote;
    MPI_Comm_remote_size(children, &remote);
    if (remote != CHILDREN) {
        fprintf(stderr, "parent %d: %d children, want %d\n", rank, remote, CHILDREN);
        bad = 1;
    }
    char who[64];
    snprintf(who, sizeof who, "parent %d", rank);
    for (int s = 0; s < 2 && buf; s++) {
        for (int c = 0; c < remote; c++) {
            pattern_fill(buf, sizes[s], rank * 100 + c);
            MPI_Send(buf, (int)sizes[s], MPI_BYTE, c, s, children);
        }
        for (int c = 0; c < remote; c++) {
            memset(buf, 0, sizes[s]);
            MPI_Recv(buf, (int)sizes[s], MPI_BYTE, c, 10 + s, children, MPI_STATUS_IGNORE);
            bad |= pattern_check(buf, sizes[s], 10000 + rank * 100 + c, who);
        }
    }
    for (int c = 0; c < remote; c++) {
        int child_bad = 1;
        MPI_Recv(&child_bad, 1, MPI_INT, c, 20, children, MPI_STATUS_IGNORE);
        bad |= child_bad;
    }
    MPI_Barrier(children);
    MPI_Comm_disconnect(&children);
    int all_bad = 1;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !all_bad) printf("spawn: %d parents x %d children, intact\n", size, CHILDREN);
    free(buf);
    MPI_Finalize();
    return all_bad;
}
