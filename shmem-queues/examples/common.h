/* Shared by the examples: a seeded generator, a wall clock, the slowest PE's time, checks. */
#ifndef QUEUES_EXAMPLES_COMMON_H
#define QUEUES_EXAMPLES_COMMON_H
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline long arg_long(int argc, char **argv, int i, long dflt) {
    return argc > i ? atol(argv[i]) : dflt;
}

static double times_on_0[4096];

/* The slowest PE's time (known to PE 0 only; other PEs get their own). */
static inline double slowest(double t) {
    int me = shmem_my_pe(), n = shmem_n_pes();
    shmem_double_p(&times_on_0[me], t, 0);
    shmem_barrier_all();
    double m = t;
    if (me == 0)
        for (int i = 0; i < n; i++) m = times_on_0[i] > m ? times_on_0[i] : m;
    return m;
}

/* Prints the verdict of this PE (before shmem_finalize: runners look for "RESULT OK"). */
static inline void verdict(const char *name, long errors) {
    printf("RESULT %s pe=%d %s (%ld errors)\n", errors ? "FAIL" : "OK", shmem_my_pe(), name, errors);
    fflush(stdout);
}
#endif
