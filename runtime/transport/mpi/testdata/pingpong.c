/* The raw MPI baseline of BenchmarkMPIThroughput: a 2-rank ping-pong of
   N-byte messages with blocking MPI_Send and MPI_Recv on one reused
   buffer, compiled by the benchmark with mpicc. Usage: pingpong BYTES ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
	int rank, provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	long n = argc > 1 ? atol(argv[1]) : 4 << 20;
	int rounds = argc > 2 ? atoi(argv[2]) : 200;
	if (n < 1 || n > (1L << 30) || rounds < 1) {
		fprintf(stderr, "pingpong: want BYTES in 1..2^30 and ROUNDS >= 1\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	char *buf = calloc(n, 1);
	for (int pass = 0; pass < 2; pass++) { /* the first pass warms up */
		int k = pass ? rounds : 10;
		double t0 = MPI_Wtime();
		for (int i = 0; i < k; i++) {
			if (rank == 0) {
				MPI_Send(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
				MPI_Recv(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
			}
		}
		double el = MPI_Wtime() - t0;
		if (pass && rank == 0) {
			printf("ping-pong: %.2f GB/s (raw MPI, %d rounds of 2 x %ld bytes in %.3fs)\n", 2.0 * k * n / el / 1e9, k, n, el);
		}
	}
	free(buf);
	MPI_Finalize();
	return 0;
}
