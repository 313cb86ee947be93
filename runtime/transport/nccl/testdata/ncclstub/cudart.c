/* The CUDA runtime part of the test double (see stub.h). */
#include <stdlib.h>
#include <string.h>
#include "stub.h"

typedef int cudaError_t;
enum {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorNotReady = 600,
};

static int devices(void) {
	const char *v = getenv("NCCLSTUB_DEVICES");
	return v ? atoi(v) : 1;
}

cudaError_t cudaGetDeviceCount(int *count) {
	*count = devices();
	return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int dev) {
	return dev >= 0 && dev < devices() ? cudaSuccess : cudaErrorInvalidDevice;
}

static void *worker(void *arg) {
	stub_stream *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->quit)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!s->head)
			break;
		stub_work *w = s->head;
		s->busy = 1;
		pthread_mutex_unlock(&s->mu);
		stub_run_work(w);
		free(w->ops);
		free(w->arg);
		pthread_mutex_lock(&s->mu);
		s->head = w->next;
		if (!s->head)
			s->tail = NULL;
		s->busy = 0;
		free(w);
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

cudaError_t cudaStreamCreate(stub_stream **out) {
	stub_stream *s = calloc(1, sizeof *s);
	if (!s)
		return cudaErrorMemoryAllocation;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->th, NULL, worker, s) != 0) {
		free(s);
		return cudaErrorMemoryAllocation;
	}
	*out = s;
	return cudaSuccess;
}

void stub_enqueue(stub_stream *s, stub_work *w) {
	pthread_mutex_lock(&s->mu);
	if (s->tail)
		s->tail->next = w;
	else
		s->head = w;
	s->tail = w;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void idle(stub_stream *s) {
	pthread_mutex_lock(&s->mu);
	while (s->head)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

cudaError_t cudaStreamQuery(stub_stream *s) {
	pthread_mutex_lock(&s->mu);
	int busy = s->head != NULL;
	pthread_mutex_unlock(&s->mu);
	return busy ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaStreamSynchronize(stub_stream *s) {
	idle(s);
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(stub_stream *s) {
	idle(s);
	pthread_mutex_lock(&s->mu);
	s->quit = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->th, NULL);
	free(s);
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
	if (posix_memalign(p, 256, n ? n : 1) != 0)
		return cudaErrorMemoryAllocation;
	/* Garbage, not zeros: a receive that is not written is seen. */
	memset(*p, 0xA5, n);
	return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
	free(p);
	return cudaSuccess;
}

/* Like a copy to or from pageable host memory: it waits for the stream's
 * earlier work, then copies. */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, stub_stream *s) {
	if (kind != 1 && kind != 2)
		return cudaErrorInvalidValue;
	idle(s);
	memcpy(dst, src, n);
	return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e) {
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorNotReady: return "device not ready";
	}
	return "unknown error";
}
