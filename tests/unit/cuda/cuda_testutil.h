/* What the CUDA unit tests share: their sizes on a GPU and on the host
 * emulation, device buffers from host data and back, the llm.c-style
 * error measure of a kernel's output against its twin's, and the greedy
 * token of a row of logits. */
#pragma once

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>

#include "cuda_kernels.h"
#include "model/dequant.h"
#include "model/model.h"

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

/* w's rows widened in memory to F32 by dequant.c (the host's reading of
 * its blocks); returns the buffer, the caller's to free after w. */
static inline float *widen_matrix(struct weight_matrix *w)
{
	float *f = malloc((size_t)w->rows * w->cols * sizeof(float));
	for (int r = 0; r < w->rows; r++)
		ck_assert_int_eq(dequantize_row(w->type,
		                                (const uint8_t *)w->data + r * w->row_bytes,
		                                f + (size_t)r * w->cols, (uint64_t)w->cols),
		                 0);
	w->type = GGML_TYPE_F32;
	w->data = f;
	w->row_bytes = (size_t)w->cols * sizeof(float);
	return f;
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
