/* The NCCL part of the test double (see stub.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "stub.h"

typedef int ncclResult_t;
enum {
	ncclSuccess = 0,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
};

#define ID_BYTES 128
#define ID_MAGIC "NCCLSTUB"
typedef struct { char internal[ID_BYTES]; } ncclUniqueId;

struct stub_comm {
	int rank, nranks;
	int *sendfd, *recvfd; /* per peer: this rank's sending and receiving ends */
	int lfd;
	char dir[ID_BYTES];
	int async_err; /* atomic */
	int aborted;   /* atomic */
	int groups;
	int fail_group; /* -1: none */
	FILE *log;
};

static void sleep_ms(int ms) {
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static uint64_t fnv(const unsigned char *p, size_t n) {
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* The id: magic, the directory (NUL-terminated), a pattern in the unused
 * bytes, and a checksum of the first 120 bytes in the last 8, so an id
 * passed by value wrongly (truncated, shifted, by pointer) is refused. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
	const char *base = getenv("NCCLSTUB_DIR");
	if (!base || !*base)
		base = getenv("TMPDIR");
	char tmpl[96];
	snprintf(tmpl, sizeof tmpl, "%s/ncclstub.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmpl))
		return ncclSystemError;
	unsigned char *b = (unsigned char *)id->internal;
	for (int i = 0; i < ID_BYTES; i++)
		b[i] = (unsigned char)(i * 7 + 3);
	memcpy(b, ID_MAGIC, 8);
	size_t n = strlen(tmpl);
	memcpy(b + 8, tmpl, n + 1);
	uint64_t h = fnv(b, 120);
	memcpy(b + 120, &h, 8);
	return ncclSuccess;
}

static int sockaddr_of(struct sockaddr_un *a, const char *dir, int rank) {
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path, sizeof a->sun_path, "%s/r%d", dir, rank);
	return n > 0 && (size_t)n < sizeof a->sun_path;
}

static int write_all(int fd, const void *p, size_t n) {
	const char *c = p;
	while (n > 0) {
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n) {
	char *c = p;
	while (n > 0) {
		ssize_t k = read(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

static int env_int(const char *k, int def) {
	const char *v = getenv(k);
	return v && *v ? atoi(v) : def;
}

ncclResult_t ncclCommInitRank(stub_comm **out, int nranks, ncclUniqueId id, int rank) {
	unsigned char *b = (unsigned char *)id.internal;
	uint64_t h;
	memcpy(&h, b + 120, 8);
	if (memcmp(b, ID_MAGIC, 8) != 0 || h != fnv(b, 120)) {
		fprintf(stderr, "ncclstub: rank %d: ncclCommInitRank got a corrupted unique id (not passed by value correctly?)\n", rank);
		return ncclInvalidArgument;
	}
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	stub_comm *c = calloc(1, sizeof *c);
	c->rank = rank;
	c->nranks = nranks;
	c->sendfd = calloc((size_t)nranks, sizeof(int));
	c->recvfd = calloc((size_t)nranks, sizeof(int));
	memcpy(c->dir, b + 8, 112);
	c->dir[111] = 0;
	c->fail_group = env_int("NCCLSTUB_FAIL_RANK", -1) == rank ? env_int("NCCLSTUB_FAIL_GROUP", -1) : -1;
	const char *logp = getenv("NCCLSTUB_LOG");
	if (logp && *logp)
		c->log = fopen(logp, "a");

	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return ncclSystemError;
	c->sendfd[rank] = sv[0];
	c->recvfd[rank] = sv[1];
	if (nranks > 1) {
		struct sockaddr_un a;
		if (!sockaddr_of(&a, c->dir, rank))
			return ncclInvalidArgument;
		c->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (bind(c->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(c->lfd, nranks) != 0) {
			fprintf(stderr, "ncclstub: rank %d: listen at %s: %s\n", rank, a.sun_path, strerror(errno));
			return ncclSystemError;
		}
		for (int p = 0; p < nranks; p++) {
			if (p == rank)
				continue;
			struct sockaddr_un pa;
			sockaddr_of(&pa, c->dir, p);
			int fd = -1;
			for (int tries = 0; tries < 6000; tries++) {
				fd = socket(AF_UNIX, SOCK_STREAM, 0);
				if (connect(fd, (struct sockaddr *)&pa, sizeof pa) == 0)
					break;
				close(fd);
				fd = -1;
				sleep_ms(10);
			}
			if (fd < 0 || write_all(fd, &rank, sizeof rank) != 0) {
				fprintf(stderr, "ncclstub: rank %d: cannot connect to rank %d at %s\n", rank, p, pa.sun_path);
				return ncclSystemError;
			}
			c->sendfd[p] = fd;
		}
		for (int k = 0; k < nranks - 1; k++) {
			struct pollfd pf = {c->lfd, POLLIN, 0};
			if (poll(&pf, 1, 60000) != 1)
				return ncclSystemError;
			int fd = accept(c->lfd, NULL, NULL);
			int from = -1;
			if (fd < 0 || read_all(fd, &from, sizeof from) != 0 || from < 0 || from >= nranks || from == rank)
				return ncclSystemError;
			c->recvfd[from] = fd;
		}
		close(c->lfd);
		unlink(a.sun_path);
	}
	for (int p = 0; p < nranks; p++) {
		fcntl(c->sendfd[p], F_SETFL, O_NONBLOCK);
		fcntl(c->recvfd[p], F_SETFL, O_NONBLOCK);
	}
	*out = c;
	return ncclSuccess;
}

/* The group being built by this thread (ncclGroupStart to ncclGroupEnd):
 * thread-local, as NCCL's, so a caller must issue a group from one thread.
 * Sockets are written with MSG_NOSIGNAL: a SIGPIPE on this non-Go thread
 * would kill a Go process. */
static __thread int depth;
static __thread stub_op *gops;
static __thread int gn, gcap;
static __thread stub_comm *gcomm;
static __thread stub_stream *gstream;
static __thread ncclResult_t gerr;

static void flush(void) {
	if (gn > 0 && gerr == ncclSuccess) {
		stub_work *w = calloc(1, sizeof *w);
		w->comm = gcomm;
		w->ops = gops;
		w->nops = gn;
		stub_enqueue(gstream, w);
	} else
		free(gops);
	gops = NULL;
	gn = gcap = 0;
	gcomm = NULL;
	gstream = NULL;
}

ncclResult_t ncclGroupStart(void) {
	if (depth++ == 0)
		gerr = ncclSuccess;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
	if (depth <= 0)
		return ncclInvalidUsage;
	if (--depth > 0)
		return ncclSuccess;
	ncclResult_t r = gerr;
	flush();
	return r;
}

/* The size of an element of NCCL data type dt, 0 if unknown. */
static size_t elem_size(int dt) {
	switch (dt) {
	case 0: case 1: return 1;         /* ncclInt8, ncclUint8 */
	case 6: case 9: return 2;         /* ncclFloat16, ncclBfloat16 */
	case 2: case 3: case 7: return 4; /* ncclInt32, ncclUint32, ncclFloat32 */
	case 4: case 5: case 8: return 8; /* ncclInt64, ncclUint64, ncclFloat64 */
	}
	return 0;
}

static ncclResult_t add(int send, void *buf, size_t count, int dt, int peer, stub_comm *c, stub_stream *s) {
	size_t es = elem_size(dt);
	if (es == 0)
		return ncclInvalidArgument;
	if (!c || peer < 0 || peer >= c->nranks || (count > 0 && !buf))
		return ncclInvalidArgument;
	if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
		return ncclInvalidUsage;
	int implicit = depth == 0;
	if (implicit)
		ncclGroupStart();
	if ((gcomm && gcomm != c) || (gstream && gstream != s)) {
		gerr = ncclInvalidUsage; /* one communicator and stream per group here */
	} else {
		gcomm = c;
		gstream = s;
		if (gn == gcap) {
			gcap = gcap ? 2 * gcap : 8;
			gops = realloc(gops, (size_t)gcap * sizeof *gops);
		}
		stub_op *o = &gops[gn++];
		memset(o, 0, sizeof *o);
		o->send = send;
		o->peer = peer;
		o->buf = buf;
		o->n = count * es;
		uint64_t n = o->n;
		memcpy(o->pre, &n, 8);
	}
	if (implicit)
		return ncclGroupEnd();
	return gerr;
}

ncclResult_t ncclSend(const void *buf, size_t count, int dt, int peer, stub_comm *c, stub_stream *s) {
	return add(1, (void *)buf, count, dt, peer, c, s);
}

ncclResult_t ncclRecv(void *buf, size_t count, int dt, int peer, stub_comm *c, stub_stream *s) {
	return add(0, buf, count, dt, peer, c, s);
}

static int aborted(stub_comm *c) { return __atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST); }

/* fail records an asynchronous error and leaves the group hanging until
 * the communicator is aborted, as a real failed NCCL kernel does. */
static void fail(stub_comm *c, ncclResult_t e) {
	int zero = 0;
	__atomic_compare_exchange_n(&c->async_err, &zero, e, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	while (!aborted(c))
		sleep_ms(2);
}

/* Runs a group: every op progresses at once (nonblocking sockets, poll),
 * each message a length prefix then the payload; per peer and direction
 * the ops go in issue order. */
static void run_group(stub_comm *c, stub_op *ops, int nops, const char *name) {
	if (c->log) {
		fprintf(c->log, "rank %d group %d:", c->rank, c->groups);
		if (name)
			fprintf(c->log, " %s", name);
		for (int i = 0; i < nops; i++)
			fprintf(c->log, " %s%d:%zu", ops[i].send ? "send" : "recv", ops[i].peer, ops[i].n);
		fprintf(c->log, "\n");
		fflush(c->log);
	}
	if (c->groups++ == c->fail_group) {
		fprintf(stderr, "ncclstub: rank %d: injected failure at group %d\n", c->rank, c->groups - 1);
		fail(c, ncclSystemError);
		return;
	}
	struct pollfd *pf = calloc((size_t)nops, sizeof *pf);
	int *which = calloc((size_t)nops, sizeof *which);
	for (;;) {
		if (aborted(c))
			break;
		int np = 0, left = 0;
		for (int i = 0; i < nops; i++) {
			stub_op *o = &ops[i];
			if (o->predone == 8 && o->done == o->n)
				continue;
			left++;
			int first = 1; /* the first unfinished op of its peer and direction */
			for (int j = 0; j < i; j++) {
				stub_op *q = &ops[j];
				if (q->send == o->send && q->peer == o->peer && !(q->predone == 8 && q->done == q->n))
					first = 0;
			}
			if (!first)
				continue;
			pf[np].fd = o->send ? c->sendfd[o->peer] : c->recvfd[o->peer];
			pf[np].events = o->send ? POLLOUT : POLLIN;
			pf[np].revents = 0;
			which[np++] = i;
		}
		if (left == 0)
			break;
		if (poll(pf, (nfds_t)np, 50) < 0 && errno != EINTR) {
			fail(c, ncclSystemError);
			break;
		}
		for (int k = 0; k < np; k++) {
			if (!pf[k].revents)
				continue;
			stub_op *o = &ops[which[k]];
			int fd = pf[k].fd;
			ssize_t r;
			if (o->predone < 8) {
				r = o->send ? send(fd, o->pre + o->predone, 8 - o->predone, MSG_NOSIGNAL) : recv(fd, o->pre + o->predone, 8 - o->predone, 0);
				if (r > 0) {
					o->predone += (size_t)r;
					if (!o->send && o->predone == 8) {
						uint64_t n;
						memcpy(&n, o->pre, 8);
						if (n != o->n) {
							fprintf(stderr, "ncclstub: rank %d: a receive of %zu bytes from rank %d matched a send of %llu bytes\n",
								c->rank, o->n, o->peer, (unsigned long long)n);
							fail(c, ncclInvalidUsage);
							goto out;
						}
					}
				}
			} else {
				r = o->send ? send(fd, o->buf + o->done, o->n - o->done, MSG_NOSIGNAL) : recv(fd, o->buf + o->done, o->n - o->done, 0);
				if (r > 0)
					o->done += (size_t)r;
			}
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
				if (!aborted(c))
					fprintf(stderr, "ncclstub: rank %d: connection %s rank %d failed\n", c->rank, o->send ? "to" : "from", o->peer);
				fail(c, ncclRemoteError);
				goto out;
			}
		}
	}
out:
	free(pf);
	free(which);
}

void stub_run_work(stub_work *w) {
	run_group(w->comm, w->ops, w->nops, w->name);
	if (w->post && !aborted(w->comm))
		w->post(w);
}

/* ---- Collectives ---- */

/* coll is a collective's state on the stream worker. */
typedef struct coll {
	int kind; /* 0 all-reduce, 1 all-gather, 2 reduce-scatter, 3 broadcast */
	const char *send;
	char *recv;
	size_t count; /* elements of the result (all-reduce, broadcast, reduce-scatter) or of a contribution (all-gather) */
	int dt;
	int root;
	char *tmp; /* nranks * count elements: what the peers sent */
} coll;

/* sum sets out[i] to the sum over the ranks m of src(m)[i], in rank order,
 * src(r) being this rank's own part mine, src(m) tmp's chunk m. */
#define SUM(T)                                                                  \
	static void sum_##T(stub_comm *c, coll *k, const char *mine) {           \
		const T *own = (const T *)mine;                                   \
		T *out = (T *)k->recv;                                            \
		for (size_t i = 0; i < k->count; i++) {                           \
			T v = c->rank == 0 ? own[i] : ((const T *)k->tmp)[i];     \
			for (int m = 1; m < c->nranks; m++)                       \
				v += m == c->rank ? own[i] : ((const T *)k->tmp)[(size_t)m * k->count + i]; \
			out[i] = v;                                               \
		}                                                                 \
	}
SUM(float)
SUM(double)

static void post_coll(stub_work *w) {
	stub_comm *c = w->comm;
	coll *k = w->arg;
	size_t es = elem_size(k->dt), b = k->count * es;
	const char *mine = k->send;
	switch (k->kind) {
	case 2:
		mine = k->send + (size_t)c->rank * b; /* this rank's chunk of its input */
		/* fall through */
	case 0:
		if (k->dt == 7)
			sum_float(c, k, mine);
		else
			sum_double(c, k, mine);
		break;
	case 1:
		memmove(k->recv + (size_t)c->rank * b, k->send, b);
		break;
	case 3:
		if (c->rank == k->root && k->recv != k->send)
			memmove(k->recv, k->send, b);
		break;
	}
	free(k->tmp);
}

static const char *coll_names[] = {"allreduce", "allgather", "reducescatter", "broadcast"};

/* enqueue_coll builds the sends and receives of a collective and queues
 * them with its post step. */
static ncclResult_t enqueue_coll(int kind, const void *send, void *recv, size_t count, int dt, int root, stub_comm *c, stub_stream *s) {
	size_t es = elem_size(dt);
	if (!c || !s || es == 0 || (kind != 1 && kind != 3 && dt != 7 && dt != 8))
		return ncclInvalidArgument; /* sums of float32 and float64 only */
	if (kind == 3 && (root < 0 || root >= c->nranks))
		return ncclInvalidArgument;
	if (count > 0 && (!recv || (!send && !(kind == 3 && c->rank != root))))
		return ncclInvalidArgument;
	if (depth > 0)
		return ncclInvalidUsage; /* not inside a group here (see stub.h) */
	if (aborted(c))
		return ncclInvalidUsage;
	int n = c->nranks;
	size_t b = count * es;
	coll *k = calloc(1, sizeof *k);
	k->kind = kind;
	k->send = send;
	k->recv = recv;
	k->count = count;
	k->dt = dt;
	k->root = root;
	stub_op *ops = calloc((size_t)(2 * n), sizeof *ops);
	int no = 0;
	if (kind == 0 || kind == 2)
		k->tmp = malloc((size_t)n * b + 1);
	for (int p = 0; p < n; p++) {
		if (p == c->rank)
			continue;
		const char *out = NULL; /* what goes to p */
		char *in = NULL;        /* where p's goes */
		switch (kind) {
		case 0: out = send; in = k->tmp + (size_t)p * b; break;
		case 1: out = send; in = (char *)recv + (size_t)p * b; break;
		case 2: out = (const char *)send + (size_t)p * b; in = k->tmp + (size_t)p * b; break;
		case 3:
			if (c->rank == root)
				out = send;
			else if (p == root)
				in = recv;
			break;
		}
		if (out) {
			stub_op *o = &ops[no++];
			o->send = 1;
			o->peer = p;
			o->buf = (char *)out;
			o->n = b;
			uint64_t m = b;
			memcpy(o->pre, &m, 8);
		}
		if (in) {
			stub_op *o = &ops[no++];
			o->peer = p;
			o->buf = in;
			o->n = b;
			uint64_t m = b;
			memcpy(o->pre, &m, 8);
		}
	}
	stub_work *w = calloc(1, sizeof *w);
	w->comm = c;
	w->ops = ops;
	w->nops = no;
	w->name = coll_names[kind];
	w->post = post_coll;
	w->arg = k;
	stub_enqueue(s, w);
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int dt, int op, stub_comm *c, stub_stream *s) {
	if (op != 0)
		return ncclInvalidArgument; /* ncclSum only */
	return enqueue_coll(0, send, recv, count, dt, 0, c, s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, int dt, stub_comm *c, stub_stream *s) {
	return enqueue_coll(1, send, recv, sendcount, dt, 0, c, s);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, int dt, int op, stub_comm *c, stub_stream *s) {
	if (op != 0)
		return ncclInvalidArgument;
	return enqueue_coll(2, send, recv, recvcount, dt, 0, c, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, int dt, int root, stub_comm *c, stub_stream *s) {
	return enqueue_coll(3, send, recv, count, dt, root, c, s);
}

ncclResult_t ncclCommGetAsyncError(stub_comm *c, ncclResult_t *res) {
	if (!c || !res)
		return ncclInvalidArgument;
	*res = __atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST);
	return ncclSuccess;
}

static void close_all(stub_comm *c, int how) {
	for (int p = 0; p < c->nranks; p++) {
		if (how) {
			shutdown(c->sendfd[p], SHUT_RDWR);
			shutdown(c->recvfd[p], SHUT_RDWR);
		} else {
			close(c->sendfd[p]);
			close(c->recvfd[p]);
		}
	}
}

/* Ends the communicator's pending groups (they fail) and breaks its
 * connections, so peers see the failure. The memory is not freed: a stream
 * worker may still be in a group of this communicator. */
ncclResult_t ncclCommAbort(stub_comm *c) {
	if (!c)
		return ncclInvalidArgument;
	__atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
	close_all(c, 1);
	rmdir(c->dir);
	return ncclSuccess;
}

ncclResult_t ncclCommDestroy(stub_comm *c) {
	if (!c)
		return ncclInvalidArgument;
	__atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
	close_all(c, 0);
	rmdir(c->dir);
	if (c->log)
		fclose(c->log);
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	}
	return "unknown result code";
}
