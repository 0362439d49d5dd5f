/* What the CUDA unit tests share: their sizes on a GPU and on the host
 * emulation, device buffers from host data and back, the llm.c-style
 * error measure of a kernel's output against its twin's, and the greedy
 * token of a row of logits. */
#pragma once

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>

#include "cuda_kernels.h"

/* Sizes: full on a GPU, smaller on the host emulation (cuda/emu/). */
#ifdef SINKD_CUDA_EMU
#define SIZE(gpu, emu) (emu)
#else
#define SIZE(gpu, emu) (gpu)
#endif

/* A device copy of bytes of host (NULL: zeros). */
static inline void *dev_from(const void *host, size_t bytes)
{
	void *d = NULL;
	ck_assert_int_eq(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
	if (host)
		ck_assert_int_eq(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
	else
		ck_assert_int_eq(cudaMemset(d, 0, bytes ? bytes : 1), cudaSuccess);
	return d;
}

/* bytes of dev into host, after everything launched is done. */
static inline void to_host(void *host, const void *dev, size_t bytes)
{
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
	ck_assert_int_eq(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

/* Largest |a - b| / (tol + eps*|b|) over n values of dtype (b: reference). */
static inline double worst_err(const void *a, const void *b, int dtype, size_t n, double tol,
                               double eps)
{
	double w = 0.0;
	for (size_t i = 0; i < n; i++) {
		double x = twin_dt_load(a, dtype, i), r = twin_dt_load(b, dtype, i);
		double e = fabs(x - r) / (tol + eps * fabs(r));
		if (!(e <= w))
			w = isnan(e) ? INFINITY : e;
	}
	return w;
}

/* The index of the largest of v[0 .. n) (the first on ties). */
static inline int argmax(const float *v, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}
