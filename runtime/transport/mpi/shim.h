// shim.h: the C functions of shim.c, called from the MPI
// transport's Go files (build tag mpi).
#ifndef PPGEN_MPI_SHIM_H
#define PPGEN_MPI_SHIM_H

#include <mpi.h>

int ppg_thread_multiple(void);
MPI_Comm ppg_parent_comm(void);
int ppg_init(int *provided, int *rank, int *size, int *already);
int ppg_isend(void *buf, int n, int peer, int tag, int sync, MPI_Request *req);
int ppg_irecv(void *buf, int n, int peer, int tag, MPI_Request *req);
int ppg_test(MPI_Request *req, int *done, int *count, int *source);
int ppg_recv_init(void *buf, int n, int peer, int tag, MPI_Request *req);
int ppg_start(MPI_Request *req);
int ppg_testsome(int n, MPI_Request *reqs, int *out, int *idx, int *counts, MPI_Status *statuses);
MPI_Request *ppg_requests(int n, MPI_Status **statuses);
int ppg_request_free(MPI_Request *req, int active);
int ppg_cancel(MPI_Request *req);
int ppg_ibarrier(MPI_Request *req);
int ppg_iallgather(void *send, int n, void *recv, MPI_Request *req);
int ppg_abort(int code);
int ppg_finalize(int already);
void ppg_error_string(int code, char *buf, int *len);
int ppg_max_error_string(void);
int ppg_error_class(int code);
int ppg_err_truncate(void);
MPI_Request *ppg_new_request(void);

#endif
