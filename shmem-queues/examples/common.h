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

/* The histogram's target of update `g`: entry g % tsize of PE g / tsize. Every PE's stream of
 * updates is seeded 1000 + its number. */
static inline uint64_t histogram_update(uint64_t *s, long tsize, int npes) {
    return rng_next(s) % (uint64_t)(tsize * npes);
}

/* Serial check of a histogram: replay every PE's stream, count what lands on this PE, and return
 * how many of its `tsize` entries differ. */
static inline long histogram_errors(const long *table, long tsize, long nup) {
    int me = shmem_my_pe(), npes = shmem_n_pes();
    long *expect = calloc(tsize, sizeof(long)), errors = 0;
    for (int p = 0; p < npes; p++) {
        uint64_t r = 1000 + p;
        for (long i = 0; i < nup; i++) {
            uint64_t g = histogram_update(&r, tsize, npes);
            if ((int)(g / tsize) == me) expect[g % tsize]++;
        }
    }
    for (long i = 0; i < tsize; i++) errors += table[i] != expect[i];
    free(expect);
    return errors;
}

/* Index-gather: the value held at global index g, and a PE's `n` random indices (seeded 2000 +
 * its number) into an array of `tsize` entries per PE, whose own part it fills. */
static inline long igather_value(uint64_t g) { return (long)(g * 2654435761ULL ^ 0x5bd1e995ULL); }

static inline uint64_t *igather_setup(long *table, long tsize, long n) {
    int me = shmem_my_pe(), npes = shmem_n_pes();
    for (long i = 0; i < tsize; i++) table[i] = igather_value((uint64_t)me * tsize + i);
    uint64_t *idx = malloc(n * sizeof(uint64_t)), s = 2000 + me;
    for (long i = 0; i < n; i++) idx[i] = rng_next(&s) % (uint64_t)(tsize * npes);
    return idx;
}

/* Prints the verdict of this PE (before shmem_finalize: runners look for "RESULT OK"). */
static inline void verdict(const char *name, long errors) {
    printf("RESULT %s pe=%d %s (%ld errors)\n", errors ? "FAIL" : "OK", shmem_my_pe(), name, errors);
    fflush(stdout);
}
#endif
