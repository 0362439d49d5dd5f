/* Machine probe for the engine benchmark.
 * Read bandwidth: streams a 1 GiB buffer (summing it, so nothing is
 * optimised away) with 1 and with 2 threads, best GB/s of several passes:
 * the memory roof that decode (read every weight once per token) is
 * measured against.  Each thread reads its half both as one sequential
 * stream and as 4 streams side by side with software prefetch (as the
 * decode kernels read 4 weight panels); the roof is the faster of the two
 * (on the Zen 5 test machine 4 streams read ~40% faster than 1).  All of
 * it runs twice: on small pages and on a buffer advised for transparent
 * huge pages (as the engine's weight panels are); the roof is the faster.
 * FMA peak: 12 independent chains of fp32 fused multiply-adds per thread
 * (AVX-512 where the CPU has it, else AVX2), best of several passes: the
 * compute roof of batched decode, whose matmuls are fp32 FMAs.
 * Prints {"bw1_gbs":X,"bw2_gbs":Y,...,"fma1_gflops":A,"fma2_gflops":B}.  Not a test. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <sys/mman.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/pages.h"

#define BUF_BYTES ((size_t)1 << 30)
#define PASSES 5

struct part {
	const float *p;
	size_t n;
	int streams; /* 1, or 4 sub-ranges read side by side */
	float sum;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sums the part with explicit AVX loads into 8 accumulators: as fast a
 * sequential read as the CPU does, so the roof is not the compiler's. */
__attribute__((target("avx2"))) static void *sum_part(void *arg)
{
	struct part *pt = arg;
	__m256 acc[8];
	for (int j = 0; j < 8; j++)
		acc[j] = _mm256_setzero_ps();
	if (pt->streams == 4) {
		size_t q = pt->n / 4 / 16 * 16;
		for (size_t i = 0; i + 16 <= q; i += 16)
			for (int s = 0; s < 4; s++) {
				const float *p = pt->p + s * q + i;
				_mm_prefetch((const char *)p + 1024, _MM_HINT_T0);
				acc[2 * s] = _mm256_add_ps(acc[2 * s], _mm256_load_ps(p));
				acc[2 * s + 1] = _mm256_add_ps(acc[2 * s + 1], _mm256_load_ps(p + 8));
			}
	} else {
		for (size_t i = 0; i + 64 <= pt->n; i += 64)
			for (int j = 0; j < 8; j++)
				acc[j] = _mm256_add_ps(acc[j], _mm256_load_ps(pt->p + i + 8 * j));
	}
	float lanes[8], s = 0;
	for (int j = 1; j < 8; j++)
		acc[0] = _mm256_add_ps(acc[0], acc[j]);
	_mm256_storeu_ps(lanes, acc[0]);
	for (int j = 0; j < 8; j++)
		s += lanes[j];
	pt->sum = s;
	return NULL;
}

static double measure(const float *buf, size_t n, int n_threads, int streams)
{
	double best = 0;
	for (int pass = 0; pass < PASSES; pass++) {
		struct part parts[2];
		pthread_t th[2];
		double t0 = now_s();
		for (int t = 0; t < n_threads; t++) {
			parts[t] = (struct part){
			    .p = buf + n / n_threads * t, .n = n / n_threads, .streams = streams};
			pthread_create(&th[t], NULL, sum_part, &parts[t]);
		}
		for (int t = 0; t < n_threads; t++)
			pthread_join(th[t], NULL);
		double gbs = (double)n * sizeof(float) / (now_s() - t0) / 1e9;
		if (parts[0].sum == 12345.0f)
			fprintf(stderr, "(unlikely sum)\n");
		best = gbs > best ? gbs : best;
	}
	return best;
}

#define FMA_CHAINS 12
#define FMA_ITERS 20000000L

struct fma_part {
	float out;
	bool avx512;
};

__attribute__((target("avx512f"))) static float fma_chains512(void)
{
	__m512 acc[FMA_CHAINS];
	__m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
	for (int j = 0; j < FMA_CHAINS; j++)
		acc[j] = _mm512_set1_ps((float)j);
	for (long i = 0; i < FMA_ITERS; i++)
		for (int j = 0; j < FMA_CHAINS; j++)
			acc[j] = _mm512_fmadd_ps(acc[j], m, a);
	float s = 0;
	for (int j = 0; j < FMA_CHAINS; j++)
		s += _mm512_reduce_add_ps(acc[j]);
	return s;
}

__attribute__((target("avx2,fma"))) static float fma_chains256(void)
{
	__m256 acc[FMA_CHAINS];
	__m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
	for (int j = 0; j < FMA_CHAINS; j++)
		acc[j] = _mm256_set1_ps((float)j);
	for (long i = 0; i < FMA_ITERS; i++)
		for (int j = 0; j < FMA_CHAINS; j++)
			acc[j] = _mm256_fmadd_ps(acc[j], m, a);
	float lanes[8], s = 0;
	for (int j = 1; j < FMA_CHAINS; j++)
		acc[0] = _mm256_add_ps(acc[0], acc[j]);
	_mm256_storeu_ps(lanes, acc[0]);
	for (int j = 0; j < 8; j++)
		s += lanes[j];
	return s;
}

static void *fma_part_run(void *arg)
{
	struct fma_part *fp = arg;
	fp->out = fp->avx512 ? fma_chains512() : fma_chains256();
	return NULL;
}

/* GFLOP/s of n_threads threads running FMA chains (2 flops per lane). */
static double measure_fma(int n_threads, bool avx512)
{
	double best = 0, lanes = avx512 ? 16 : 8;
	for (int pass = 0; pass < 3; pass++) {
		struct fma_part parts[2] = {{.avx512 = avx512}, {.avx512 = avx512}};
		pthread_t th[2];
		double t0 = now_s();
		for (int t = 0; t < n_threads; t++)
			pthread_create(&th[t], NULL, fma_part_run, &parts[t]);
		for (int t = 0; t < n_threads; t++)
			pthread_join(th[t], NULL);
		double gf = n_threads * (double)FMA_ITERS * FMA_CHAINS * lanes * 2 /
		            (now_s() - t0) / 1e9;
		if (parts[0].out == 12345.0f)
			fprintf(stderr, "(unlikely sum)\n");
		best = gf > best ? gf : best;
	}
	return best;
}

/* The four read rates (1 and 2 threads x 1 and 4 streams) on a fresh
 * buffer, on huge pages when huge (util/pages.h; advised for small pages
 * otherwise, which a system with transparent huge pages "always" would not
 * give).  Returns -1 without memory. */
static int measure_buffer(bool huge, double rates[4])
{
	size_t n = BUF_BYTES / sizeof(float);
	float *buf = pages_map(BUF_BYTES, huge);
	if (!buf)
		return -1;
	if (!huge)
		madvise(buf, BUF_BYTES, MADV_NOHUGEPAGE);
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)(i & 1023) * 1e-3f;
	rates[0] = measure(buf, n, 1, 1);
	rates[1] = measure(buf, n, 2, 1);
	rates[2] = measure(buf, n, 1, 4);
	rates[3] = measure(buf, n, 2, 4);
	pages_unmap(buf, BUF_BYTES);
	return 0;
}

static double max2(double a, double b)
{
	return a > b ? a : b;
}

/* No argument: both probes; --bandwidth or --fma: that one alone (the other
 * fields are printed as 0). */
int main(int argc, char **argv)
{
	bool want_bw = argc < 2 || strcmp(argv[1], "--fma") != 0;
	bool want_fma = argc < 2 || strcmp(argv[1], "--bandwidth") != 0;
	double small[4] = {0}, huge[4] = {0}, f1 = 0, f2 = 0;
	if (want_bw && (measure_buffer(false, small) || measure_buffer(true, huge))) {
		fprintf(stderr, "bwprobe: cannot allocate 1 GiB\n");
		return 1;
	}
	/* best of small and huge pages, per thread count and stream count */
	double bw1_one = max2(small[0], huge[0]), bw2_one = max2(small[1], huge[1]);
	double bw1_four = max2(small[2], huge[2]), bw2_four = max2(small[3], huge[3]);
	double bw1 = max2(bw1_one, bw1_four), bw2 = max2(bw2_one, bw2_four);
	double bw2_small = max2(small[1], small[3]), bw2_huge = max2(huge[1], huge[3]);
	__builtin_cpu_init();
	bool avx512 = __builtin_cpu_supports("avx512f");
	if (want_fma) {
		f1 = measure_fma(1, avx512);
		f2 = measure_fma(2, avx512);
	}
	printf("{\"bw1_gbs\":%.2f,\"bw2_gbs\":%.2f,\"bw2_one_stream_gbs\":%.2f,"
	       "\"bw2_four_streams_gbs\":%.2f,\"bw2_small_pages_gbs\":%.2f,"
	       "\"bw2_huge_pages_gbs\":%.2f,\"fma1_gflops\":%.1f,\"fma2_gflops\":%.1f}\n",
	       bw1, bw2, bw2_one, bw2_four, bw2_small, bw2_huge, f1, f2);
	return 0;
}
