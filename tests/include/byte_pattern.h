/* Bytes a test program can tell apart: the byte at offset i of pattern `seed` is a hash of the
 * 8-byte word it is in and the seed, so a misplaced, repeated or foreign copy differs. */
#ifndef RSHM_TESTS_BYTE_PATTERN_H
#define RSHM_TESTS_BYTE_PATTERN_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static inline unsigned char pattern_byte(size_t i, int seed) {
    uint64_t w = ((uint64_t)(i / 8) + 1 + (uint64_t)seed * 1000003u) * 0x9E3779B97F4A7C15ull;
    return (unsigned char)(w >> (8 * (i % 8)));
}

static inline void pattern_fill(unsigned char *buf, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) buf[i] = pattern_byte(i, seed);
}

/* 0 if `buf` holds pattern `seed`; else 1, and a line naming `who` and the first wrong byte. */
static inline int pattern_check(const unsigned char *buf, size_t n, int seed, const char *who) {
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != pattern_byte(i, seed)) {
            fprintf(stderr, "%s: %zu-byte message, byte %zu is %u, want %u\n", who, n, i, buf[i],
                    pattern_byte(i, seed));
            return 1;
        }
    }
    return 0;
}
#endif
