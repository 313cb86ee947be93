//go:build mpi

// shim.c: the MPI transport's C side (mpi.go, coll.go): thin
// wrappers of MPI calls on the transport's communicator, declared in
// shim.h.

#include <stdlib.h>
#include <string.h>
#include <mpi.h>

#include "shim.h"

// ppg_comm is the transport's own communicator: a duplicate of
// MPI_COMM_WORLD whose errors are returned, not fatal, so that a failed
// call becomes a Go error naming the rank and the operation.
static MPI_Comm ppg_comm;

int ppg_thread_multiple(void) { return MPI_THREAD_MULTIPLE; }

// ppg_parent_comm gives coll.go's C code the transport's communicator,
// the parent of the collectives' group communicators.
MPI_Comm ppg_parent_comm(void) { return ppg_comm; }

int ppg_init(int *provided, int *rank, int *size, int *already) {
	int flag = 0, err;
	MPI_Initialized(&flag);
	*already = flag;
	if (flag) {
		err = MPI_Query_thread(provided);
	} else {
		err = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
	}
	if (err != MPI_SUCCESS || *provided < MPI_THREAD_MULTIPLE) {
		return err;
	}
	// Errors MPI reports outside the transport's communicator (Open MPI
	// reports a failed non-blocking collective's MPI_Test on
	// MPI_COMM_WORLD) are returned too, not fatal.
	if ((err = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS ||
	    (err = MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
		return err;
	}
	if ((err = MPI_Comm_dup(MPI_COMM_WORLD, &ppg_comm)) != MPI_SUCCESS) {
		return err;
	}
	if ((err = MPI_Comm_set_errhandler(ppg_comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
		return err;
	}
	MPI_Comm_rank(ppg_comm, rank);
	MPI_Comm_size(ppg_comm, size);
	return MPI_SUCCESS;
}

int ppg_isend(void *buf, int n, int peer, int tag, int sync, MPI_Request *req) {
	if (sync) {
		return MPI_Issend(buf, n, MPI_BYTE, peer, tag, ppg_comm, req);
	}
	return MPI_Isend(buf, n, MPI_BYTE, peer, tag, ppg_comm, req);
}

int ppg_irecv(void *buf, int n, int peer, int tag, MPI_Request *req) {
	return MPI_Irecv(buf, n, MPI_BYTE, peer < 0 ? MPI_ANY_SOURCE : peer, tag, ppg_comm, req);
}

// ppg_test tests req; when it is complete, *done is 1 and *count and
// *source are the received byte count and source rank (receives only).
int ppg_test(MPI_Request *req, int *done, int *count, int *source) {
	MPI_Status st;
	int err = MPI_Test(req, done, &st);
	if (err != MPI_SUCCESS || !*done) {
		return err;
	}
	*source = st.MPI_SOURCE;
	return MPI_Get_count(&st, MPI_BYTE, count);
}

// ppg_recv_init makes req a persistent receive of up to n bytes from peer
// on tag (a channel's header): MPI_Start posts it again after each message.
int ppg_recv_init(void *buf, int n, int peer, int tag, MPI_Request *req) {
	return MPI_Recv_init(buf, n, MPI_BYTE, peer, tag, ppg_comm, req);
}

int ppg_start(MPI_Request *req) { return MPI_Start(req); }

// ppg_testsome tests the n requests reqs (null and inactive ones are
// skipped) in one call: *out is how many completed (0 when none, or none
// active), their indices in idx and their received byte counts in counts.
// statuses has room for n.
int ppg_testsome(int n, MPI_Request *reqs, int *out, int *idx, int *counts, MPI_Status *statuses) {
	int err = MPI_Testsome(n, reqs, out, idx, statuses);
	if (err != MPI_SUCCESS) {
		return err;
	}
	if (*out == MPI_UNDEFINED) {
		*out = 0;
	}
	for (int i = 0; i < *out; i++) {
		if ((err = MPI_Get_count(&statuses[i], MPI_BYTE, &counts[i])) != MPI_SUCCESS) {
			return err;
		}
	}
	return MPI_SUCCESS;
}

// ppg_requests returns n request handles in C memory, each
// MPI_REQUEST_NULL, and room for n statuses in *statuses.
MPI_Request *ppg_requests(int n, MPI_Status **statuses) {
	MPI_Request *r = malloc(sizeof(MPI_Request) * (n > 0 ? n : 1));
	for (int i = 0; i < n; i++) {
		r[i] = MPI_REQUEST_NULL;
	}
	*statuses = malloc(sizeof(MPI_Status) * (n > 0 ? n : 1));
	return r;
}

// ppg_request_free cancels req if it is active (a posted receive) and
// frees it (persistent requests stay allocated until freed).
int ppg_request_free(MPI_Request *req, int active) {
	int err;
	if (*req == MPI_REQUEST_NULL) {
		return MPI_SUCCESS;
	}
	if (active) {
		if ((err = MPI_Cancel(req)) != MPI_SUCCESS || (err = MPI_Wait(req, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
			return err;
		}
	}
	if (*req == MPI_REQUEST_NULL) {
		return MPI_SUCCESS;
	}
	return MPI_Request_free(req);
}

int ppg_cancel(MPI_Request *req) {
	int err = MPI_Cancel(req);
	if (err != MPI_SUCCESS) {
		return err;
	}
	return MPI_Wait(req, MPI_STATUS_IGNORE);
}

int ppg_ibarrier(MPI_Request *req) { return MPI_Ibarrier(ppg_comm, req); }

int ppg_iallgather(void *send, int n, void *recv, MPI_Request *req) {
	return MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, ppg_comm, req);
}

int ppg_abort(int code) { return MPI_Abort(ppg_comm, code); }

int ppg_finalize(int already) {
	MPI_Comm_free(&ppg_comm);
	if (already) {
		return MPI_SUCCESS;
	}
	return MPI_Finalize();
}

void ppg_error_string(int code, char *buf, int *len) {
	if (MPI_Error_string(code, buf, len) != MPI_SUCCESS) {
		*len = 0;
	}
}

int ppg_max_error_string(void) { return MPI_MAX_ERROR_STRING; }

int ppg_error_class(int code) {
	int class;
	if (MPI_Error_class(code, &class) != MPI_SUCCESS) {
		return code;
	}
	return class;
}

int ppg_err_truncate(void) { return MPI_ERR_TRUNCATE; }

// ppg_new_request returns a request handle in C memory, so that Go objects
// holding Go pointers never reach a cgo call.
MPI_Request *ppg_new_request(void) { return malloc(sizeof(MPI_Request)); }
