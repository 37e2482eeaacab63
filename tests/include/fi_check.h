/* The check the standalone C programs under tests/ make of a libfabric call they cannot go on
 * without: a nonzero return prints `prefix`, the call, its code and libfabric's text for it on
 * stderr, and exits with `status`. Each program names its own use of it (CHECK, SETUP), and
 * includes this file by a path relative to its own, so that a bare `cc file.c -lfabric` builds
 * it from any directory. */
#ifndef RSHM_TESTS_FI_CHECK_H
#define RSHM_TESTS_FI_CHECK_H

#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>

#define FI_CHECK_OR_EXIT(call, prefix, status)                                                 \
    do {                                                                                       \
        int _rc = (int)(call);                                                                 \
        if (_rc) {                                                                             \
            fprintf(stderr, "%s%s = %d (%s)\n", prefix, #call, _rc, fi_strerror(-_rc));       \
            exit(status);                                                                      \
        }                                                                                      \
    } while (0)

#endif
