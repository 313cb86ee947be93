/*
 * A test double of the CUDA runtime and NCCL: the calls ppgen's NCCL
 * transport makes, with their C ABI, and nothing else. "Device memory" is
 * host memory; a stream is a worker thread that runs NCCL groups in order;
 * ncclSend and ncclRecv move bytes between processes over Unix sockets
 * (one per ordered pair of ranks, a socketpair for a rank to itself) in a
 * directory named by the unique id. The tests compile it with the system C
 * compiler (cc -shared -fPIC).
 *
 * Environment:
 *   NCCLSTUB_DIR=dir          where ncclGetUniqueId makes the socket directory
 *                             (default $TMPDIR, else /tmp; keep it short: a
 *                             Unix socket path has at most 107 bytes)
 *   NCCLSTUB_DEVICES=n        cudaGetDeviceCount reports n devices (default 1)
 *   NCCLSTUB_FAIL_RANK=r      rank r's communicator fails at its group number
 *   NCCLSTUB_FAIL_GROUP=g     g (0-based): asynchronous error ncclSystemError,
 *                             and the group hangs until ncclCommAbort
 *   NCCLSTUB_LOG=path         append one line per group: rank, ops
 *
 * Collectives (ncclAllReduce, ncclAllGather, ncclReduceScatter,
 * ncclBroadcast; sums only, float32 and float64) are groups of sends and
 * receives over the same sockets (every member sends its contribution to
 * every member that needs it), then a step on the stream worker that sums in
 * rank order, (...((x[0] + x[1]) + x[2]) + ...) + x[n-1], so tests can check
 * the values bit for bit. Each counts as one group for NCCLSTUB_FAIL_GROUP.
 * They are refused inside ncclGroupStart/ncclGroupEnd (the transport issues
 * them one at a time).
 */
#ifndef NCCLSTUB_H
#define NCCLSTUB_H

#include <pthread.h>
#include <stddef.h>

typedef struct stub_comm stub_comm;

typedef struct stub_op {
	int send;
	int peer;
	char *buf;
	size_t n;
	size_t done;           /* payload bytes moved */
	unsigned char pre[8];  /* the length prefix of the message */
	size_t predone;
} stub_op;

typedef struct stub_work {
	struct stub_work *next;
	stub_comm *comm;
	int nops;
	stub_op *ops;
	const char *name;                 /* the collective, for the log; NULL: a group */
	void (*post)(struct stub_work *); /* after the ops (a collective's sums), or NULL */
	void *arg;                        /* post's state, freed after it */
} stub_work;

typedef struct stub_stream {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	stub_work *head, *tail;
	int busy; /* the worker runs a group */
	int quit;
	pthread_t th;
} stub_stream;

/* Runs a queued group or collective: defined by the NCCL part, called by
 * the stream worker. */
void stub_run_work(stub_work *w);
/* Queues work on a stream (the stream owns it from then on): defined by
 * the CUDA part. */
void stub_enqueue(stub_stream *s, stub_work *w);

#endif
