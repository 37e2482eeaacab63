/*
 * OpenSHMEM queues for communication and data aggregation (the proposal in
 * openshmem-org/specification issue #483), as a library over any OpenSHMEM 1.4/1.5.
 *
 *   oshcc app.c -I<rshm>/shmem-queues/include -L<rshm>/target/release -lshmem_queues \
 *         -Wl,-rpath,<rshm>/target/release
 *
 * Include after <shmem.h>. All functions return 0 on success and a negative
 * SHMEM_QUEUE_E* code on error, unless stated otherwise. See shmem-queues/README.md for the
 * semantics and the choices made where the proposal leaves points open.
 */
#ifndef SHMEM_QUEUES_H
#define SHMEM_QUEUES_H

#include <stddef.h>
#include <stdint.h>
#include <shmem.h>

#ifdef __cplusplus
extern "C" {
#endif

/* OpenSHMEM 1.4 (Open MPI 4.1's oshmem) has no teams: the team arguments are accepted and
 * ignored (every queue spans all PEs), so a stand-in type is enough there. */
#if !defined(SHMEM_MAJOR_VERSION) || (SHMEM_MAJOR_VERSION == 1 && SHMEM_MINOR_VERSION < 5)
typedef void *shmem_team_t;
#ifndef SHMEM_TEAM_WORLD
#define SHMEM_TEAM_WORLD ((shmem_team_t)0)
#endif
#endif

typedef struct shmem_queue_s *shmem_queue_t;

typedef enum { SHMEM_QUEUE_EXCLUSIVE = 0, SHMEM_QUEUE_SHARED = 1 } shmem_queue_thread_t;
typedef shmem_queue_thread_t shmem_queue_sharing_t;
typedef enum { SHMEM_QUEUE_COMM = 0, SHMEM_QUEUE_DATA = 1 } shmem_queue_type_t;
typedef enum { SHMEM_PE_SAME = 0, SHMEM_PE_ALL = 1 } shmem_pe_type_t;
typedef enum {
    SHMEM_OP_PUT = 0,
    SHMEM_OP_GET = 1,
    SHMEM_OP_ATOMIC_ADD = 2,
    SHMEM_OP_ATOMIC_INC = 3
} shmem_op_type_t;

/* No timed flush (the default; so is any value <= 0). */
#define SHMEM_QUEUE_MAX_TIMEOUT (-1.0)
/* "Every PE" in shmem_query_data_size and shmem_queue_data_pop. */
#define SHMEM_QUEUE_ANY_PE (-1)

#define SHMEM_QUEUE_SUCCESS 0
#define SHMEM_QUEUE_EINVAL (-1)    /* bad argument */
#define SHMEM_QUEUE_EFULL (-2)     /* max_elems / max_bytes reached; nothing queued */
#define SHMEM_QUEUE_ENOMEM (-3)    /* allocation failed */
#define SHMEM_QUEUE_EAGAIN (-4)    /* pop: fewer elements available than asked; nothing popped */
#define SHMEM_QUEUE_ENOTSUP (-5)   /* not for this queue kind, op or element size */
#define SHMEM_QUEUE_EPARTIAL (-6)  /* global flush: some PE kept data back (still queued) */
#define SHMEM_QUEUE_EINTERNAL (-7) /* internal error; destroy the queue */

typedef struct shmem_queue_config {
    shmem_queue_type_t qtype;
    shmem_queue_sharing_t sharing_model;
    uint64_t max_elems;      /* comm: most outstanding operations (0: no limit) */
    uint64_t max_bytes;      /* data: bytes per PE, outgoing and incoming (0: 64 KiB) */
    double timeout_flush;    /* comm: seconds before a partial batch ships (<= 0: never) */
    shmem_op_type_t op_type; /* hint, not enforced */
    shmem_pe_type_t pe_type; /* hint, not enforced */
    uint64_t data_elem_size; /* data: element size in bytes (0: 1) */
} shmem_queue_config_t;

typedef struct shmem_queue_attrib {
    uint64_t queue_id;
    uint64_t outstanding_elems;
    uint64_t available_elems;
} shmem_queue_attrib_t;

/* Communication queues. create and destroy are collective over all PEs. */
int shmem_queue_comm_create(shmem_queue_t *queue, const shmem_queue_config_t *qconfig);
int shmem_queue_comm_destroy(shmem_queue_t queue);
int shmem_queue_comm_push_mem(shmem_queue_t queue, void *dest, const void *src, size_t elem_size,
                              size_t nelems, int pe, uint64_t op);
/* TYPE-generic push, as in the proposal: the element size is sizeof(*dest). */
#define shmem_queue_comm_push(queue, dest, src, nelems, pe, op) \
    shmem_queue_comm_push_mem((queue), (dest), (src), sizeof(*(dest)), (nelems), (pe), (op))
/* Returns the number of outstanding operations (>= 0), or an error (< 0). */
int shmem_queue_progress(shmem_queue_t queue);
int shmem_queue_local_flush(shmem_queue_t queue);
int shmem_query_attr(shmem_queue_t queue, shmem_queue_attrib_t *attr);
int shmem_query_attrib(shmem_queue_t queue, shmem_queue_attrib_t *attr); /* same */
int shmem_query_size(shmem_queue_t queue, size_t *size);

/* Data queues. create, global_flush and destroy are collective over all PEs. */
int shmem_queue_data_create(shmem_queue_t *queue, const shmem_queue_config_t *qconfig,
                            shmem_team_t team);
int shmem_queue_data_push_mem(shmem_queue_t queue, const void *src, size_t elem_size,
                              size_t nelems, int pe);
int shmem_queue_data_pop_mem(shmem_queue_t queue, void *dest, size_t elem_size, size_t nelems,
                             int pe);
#define shmem_queue_data_push(queue, src, nelems, pe) \
    shmem_queue_data_push_mem((queue), (src), sizeof(*(src)), (nelems), (pe))
#define shmem_queue_data_pop(queue, dest, nelems, pe) \
    shmem_queue_data_pop_mem((queue), (dest), sizeof(*(dest)), (nelems), (pe))
int shmem_queue_global_flush(shmem_queue_t queue);
int shmem_queue_data_global_flush(shmem_queue_t queue); /* same */
int shmem_query_data_size(shmem_queue_t queue, size_t *incoming, size_t *outgoing, int pe);
int shmem_queue_data_progress(shmem_queue_t queue, shmem_team_t team);
int shmem_queue_data_destroy(shmem_queue_t *queue, shmem_team_t team);

#ifdef __cplusplus
}
#endif
#endif /* SHMEM_QUEUES_H */
