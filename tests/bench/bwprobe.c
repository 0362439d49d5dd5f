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
 * Int8 dot rate (--int8): 12 independent chains per thread of AVX-512 VNNI
 * vpdpbusd (64 u8 x s8 multiply-adds each) and of the AVX2 sequence
 * vpmaddubsw + vpmaddwd + vpaddd (32 each), best of several passes: the
 * compute roof of prefill, whose quantized matmuls are int8 dots.
 * Prints {"bw1_gbs":X,"bw2_gbs":Y,...,"fma1_gflops":A,"fma2_gflops":B}, and
 * with --int8 {"vnni1_gmacs":..,"vnni2_gmacs":..,"maddubs1_gmacs":..,
 * "maddubs2_gmacs":..} (giga multiply-adds per second; 0 where the CPU lacks
 * the instructions).  Not a test. */
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
	float (*chains)(void); /* one thread's chains */
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

/* vpdpbusd chains: 64 u8 x s8 multiply-adds per instruction. */
__attribute__((target("avx512f,avx512vnni"))) static float vnni_chains512(void)
{
	__m512i acc[FMA_CHAINS];
	__m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
	for (int j = 0; j < FMA_CHAINS; j++)
		acc[j] = _mm512_set1_epi32(j);
	for (long i = 0; i < FMA_ITERS; i++)
		for (int j = 0; j < FMA_CHAINS; j++)
			acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
	int s = 0;
	for (int j = 0; j < FMA_CHAINS; j++)
		s += _mm512_reduce_add_epi32(acc[j]);
	return (float)s;
}

/* The AVX2 int8 dot without VNNI: u8 x s8 pairs to i16, pairs of i16 to
 * i32, added: 32 multiply-adds per three instructions.  Each of 4 chains
 * has its own operand, hidden from the compiler every pass so that the
 * products are neither hoisted nor shared; named variables (not arrays)
 * keep all of it in the 16 AVX2 registers. */
#define MADDUBS_CHAINS 4
#define MADDUBS_STEP(a, c)                                                                 \
	do {                                                                               \
		__asm__ volatile("" : "+x"(a));                                            \
		c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones)); \
	} while (0)
__attribute__((target("avx2"))) static float maddubs_chains256(void)
{
	__m256i b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
	__m256i a0 = _mm256_set1_epi8(1), a1 = _mm256_set1_epi8(2), a2 = _mm256_set1_epi8(3);
	__m256i a3 = _mm256_set1_epi8(4);
	__m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
	for (long i = 0; i < FMA_ITERS * FMA_CHAINS / MADDUBS_CHAINS; i++) {
		MADDUBS_STEP(a0, c0);
		MADDUBS_STEP(a1, c1);
		MADDUBS_STEP(a2, c2);
		MADDUBS_STEP(a3, c3);
	}
	c0 = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
	int lanes[8], s = 0;
	_mm256_storeu_si256((__m256i *)lanes, c0);
	for (int j = 0; j < 8; j++)
		s += lanes[j];
	return (float)s;
}

static void *fma_part_run(void *arg)
{
	struct fma_part *fp = arg;
	fp->out = fp->chains();
	return NULL;
}

/* Giga-operations per second of n_threads threads each running chains(),
 * which does FMA_ITERS x FMA_CHAINS instructions of ops_per_instr each. */
static double measure_chains(int n_threads, float (*chains)(void), double ops_per_instr)
{
	double best = 0;
	for (int pass = 0; pass < 3; pass++) {
		struct fma_part parts[2] = {{.chains = chains}, {.chains = chains}};
		pthread_t th[2];
		double t0 = now_s();
		for (int t = 0; t < n_threads; t++)
			pthread_create(&th[t], NULL, fma_part_run, &parts[t]);
		for (int t = 0; t < n_threads; t++)
			pthread_join(th[t], NULL);
		double g = n_threads * (double)FMA_ITERS * FMA_CHAINS * ops_per_instr /
		           (now_s() - t0) / 1e9;
		if (parts[0].out == 12345.0f)
			fprintf(stderr, "(unlikely sum)\n");
		best = g > best ? g : best;
	}
	return best;
}

/* GFLOP/s of n_threads threads running FMA chains (2 flops per lane). */
static double measure_fma(int n_threads, bool avx512)
{
	return avx512 ? measure_chains(n_threads, fma_chains512, 16 * 2)
	              : measure_chains(n_threads, fma_chains256, 8 * 2);
}

/* The int8 dot probe: prints its JSON line. */
static void print_int8(void)
{
	double v1 = 0, v2 = 0, m1 = 0, m2 = 0;
	if (__builtin_cpu_supports("avx512vnni")) {
		v1 = measure_chains(1, vnni_chains512, 64);
		v2 = measure_chains(2, vnni_chains512, 64);
	}
	if (__builtin_cpu_supports("avx2")) {
		m1 = measure_chains(1, maddubs_chains256, 32);
		m2 = measure_chains(2, maddubs_chains256, 32);
	}
	printf("{\"vnni1_gmacs\":%.1f,\"vnni2_gmacs\":%.1f,\"maddubs1_gmacs\":%.1f,"
	       "\"maddubs2_gmacs\":%.1f}\n",
	       v1, v2, m1, m2);
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
 * fields are printed as 0); --int8: the int8 dot probe alone. */
int main(int argc, char **argv)
{
	__builtin_cpu_init();
	if (argc >= 2 && strcmp(argv[1], "--int8") == 0) {
		print_int8();
		return 0;
	}
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
