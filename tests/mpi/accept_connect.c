/* MPI_Comm_accept / MPI_Comm_connect between the ranks of one job: rank 0 opens a port and
 * accepts, every other rank connects (as mpi4py's test_dynproc does). MPICH's ch4:ofi inserts
 * the accepting peer's address into the AV again (the peer is already in MPI_COMM_WORLD), posts
 * receives directed at the fi_addr it gets back and removes that fi_addr afterwards. Until the
 * fifty-first session rshm gave the second insert a new fi_addr while reporting the peer's
 * messages as coming from the first, so the directed receives never matched: MPI_Comm_accept
 * hung. Over the intercommunicator, messages of 8 B, 64 KiB and 1 MiB go both ways, every byte
 * checked; then MPI_Comm_disconnect, and MPI_COMM_WORLD must still work (the AV entry the
 * removal touched is the one the world uses).
 * Prints "accept_connect: N ranks connected, intact" on rank 0; exits non-zero on any error. */
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
    if (size < 2) {
        fprintf(stderr, "accept_connect: needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Every rank but 0 connects, together, through a communicator of their own. */
    MPI_Comm others;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, rank, &others);
    char port[MPI_MAX_PORT_NAME] = {0};
    MPI_Comm inter;
    if (rank == 0) {
        MPI_Open_port(MPI_INFO_NULL, port);
        MPI_Send(port, MPI_MAX_PORT_NAME, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
    } else {
        if (rank == 1) MPI_Recv(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, others, &inter);
    }
    int remote, bad = 0;
    MPI_Comm_remote_size(inter, &remote);
    if (remote != (rank == 0 ? size - 1 : 1)) {
        fprintf(stderr, "rank %d: intercommunicator's remote size %d\n", rank, remote);
        bad = 1;
    }
    const size_t sizes[] = {8, 64 << 10, 1 << 20};
    unsigned char *buf = malloc(1 << 20);
    for (int s = 0; s < 3 && buf; s++) {
        size_t n = sizes[s];
        if (rank == 0) {
            /* To every connected rank, then from every one of them. */
            for (int peer = 0; peer < remote; peer++) {
                pattern_fill(buf, n, peer + 1);
                MPI_Send(buf, (int)n, MPI_BYTE, peer, s, inter);
            }
            for (int peer = 0; peer < remote; peer++) {
                memset(buf, 0, n);
                MPI_Recv(buf, (int)n, MPI_BYTE, peer, 100 + s, inter, MPI_STATUS_IGNORE);
                bad |= pattern_check(buf, n, 1000 + peer, "rank 0: reply");
            }
        } else {
            int me = rank - 1;
            memset(buf, 0, n);
            MPI_Recv(buf, (int)n, MPI_BYTE, 0, s, inter, MPI_STATUS_IGNORE);
            bad |= pattern_check(buf, n, me + 1, "message to a connected rank");
            pattern_fill(buf, n, 1000 + me);
            MPI_Send(buf, (int)n, MPI_BYTE, 0, 100 + s, inter);
        }
    }
    MPI_Comm_disconnect(&inter);
    if (others != MPI_COMM_NULL) MPI_Comm_free(&others);
    if (rank == 0) MPI_Close_port(port);
    /* The world still works after the disconnect removed the second AV entry. */
    int all_bad = 0, sum = 0, one = 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size) {
        fprintf(stderr, "rank %d: allreduce after disconnect gave %d, want %d\n", rank, sum, size);
        bad = 1;
    }
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !all_bad) printf("accept_connect: %d ranks connected, intact\n", size - 1);
    free(buf);
    MPI_Finalize();
    return all_bad || !buf;
}
