/* Kernel-level numbers for the quantized dot kernels (engine/qdot.h; run by
 * hand, not a test): for each weight type and each variant this CPU runs,
 * y(B, rows) = W(rows, cols) . xq(B)^T through qdot_rows on one thread over
 * a matrix larger than L2, at several batch sizes.  Each of 5 trials times
 * the kernel and then a plain read of the same weight bytes (the memory
 * probe), so both see the same machine state; it prints the weight bytes
 * read per second (min-time and median trial), the probe's median, their
 * ratio (median / median), and one JSON line at the end.
 * usage: qdot-bench [rows] [cols] [batch sizes, e.g. 1,8,32] [types, e.g. Q4_K,Q6_K] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/qdot.h"
#include "model/dequant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define TRIALS 5
/* Each trial repeats its pass until it has run this long. */
#define TRIAL_MIN_S 0.05
#define MAX_BATCHES 8

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Random codes; every fp16 scale field set to a sane value. */
static void fill_weights(enum ggml_type type, uint8_t *w, size_t bytes, size_t block_bytes)
{
	for (size_t i = 0; i < bytes; i++)
		w[i] = (uint8_t)rnd();
	uint16_t d = f32_to_fp16(0.01f);
	for (size_t b = 0; b < bytes; b += block_bytes) {
		if (type == GGML_TYPE_Q6_K) {
			memcpy(w + b + 208, &d, 2);
		} else if (type == GGML_TYPE_MXFP4) {
			w[b] = 120; /* E8M0: 2^-8 */
		} else {
			memcpy(w + b, &d, 2);
			if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K)
				memcpy(w + b + 2, &d, 2);
		}
	}
}

/* The memory probe: sums the bytes as fast as plain loads go. */
#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t probe_avx2(const uint8_t *p, size_t n)
{
	__m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
	                  _mm256_setzero_si256()};
	size_t i = 0;
	for (; i + 128 <= n; i += 128)
		for (int j = 0; j < 4; j++)
			acc[j] = _mm256_add_epi64(
			    acc[j], _mm256_loadu_si256((const __m256i *)(p + i + 32 * j)));
	__m256i s =
	    _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]), _mm256_add_epi64(acc[2], acc[3]));
	uint64_t lanes[4];
	_mm256_storeu_si256((__m256i *)lanes, s);
	uint64_t t = lanes[0] + lanes[1] + lanes[2] + lanes[3];
	for (; i < n; i++)
		t += p[i];
	return t;
}
#endif

static uint64_t probe(const uint8_t *p, size_t n)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2"))
		return probe_avx2(p, n);
#endif
	uint64_t t = 0;
	for (size_t i = 0; i < n; i++)
		t += p[i];
	return t;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return v[n / 2];
}

/* One type's matrix and activations. */
struct bench_case {
	enum ggml_type type;
	int rows, cols;
	size_t row_bytes, w_bytes, act_bytes;
	uint8_t *w, *xq;
	float *y;
};

struct result {
	double best, med, probe_med; /* GB/s of weight bytes */
};

static volatile uint64_t probe_sink;

/* Seconds per pass of the kernel (k) or of the probe (k NULL), one trial. */
static double trial(const struct bench_case *c, const struct qdot_kernels *k, int B)
{
	int reps = 0;
	double t0 = now_s(), t;
	do {
		if (k)
			qdot_rows(k, c->w, c->row_bytes, c->rows, c->xq, c->act_bytes, B, c->cols,
			          c->y, (size_t)c->rows);
		else
			probe_sink += probe(c->w, c->w_bytes);
		reps++;
		t = now_s() - t0;
	} while (t < TRIAL_MIN_S);
	return t / reps;
}

static struct result run(const struct bench_case *c, const struct qdot_kernels *k, int B)
{
	double kt[TRIALS], pt[TRIALS];
	trial(c, k, B); /* warm up */
	for (int i = 0; i < TRIALS; i++) {
		kt[i] = c->w_bytes / trial(c, k, B) * 1e-9;
		pt[i] = c->w_bytes / trial(c, NULL, B) * 1e-9;
	}
	struct result r = {kt[0], 0, median(pt, TRIALS)};
	for (int i = 1; i < TRIALS; i++)
		r.best = kt[i] > r.best ? kt[i] : r.best;
	r.med = median(kt, TRIALS);
	return r;
}

static int parse_batches(const char *s, int *out)
{
	int n = 0;
	while (s && *s && n < MAX_BATCHES) {
		out[n++] = atoi(s);
		s = strchr(s, ',');
		s = s ? s + 1 : NULL;
	}
	return n;
}

int main(int argc, char **argv)
{
	int rows = argc > 1 ? atoi(argv[1]) : 4096, cols = argc > 2 ? atoi(argv[2]) : 4096;
	int batches[MAX_BATCHES], nb = parse_batches(argc > 3 ? argv[3] : "1,8,32", batches);
	const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K,
	                                GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_MXFP4};
	int max_b = 0;
	for (int i = 0; i < nb; i++)
		max_b = batches[i] > max_b ? batches[i] : max_b;
	if (cols % 256 || rows <= 0 || max_b <= 0) {
		fprintf(stderr, "usage: qdot-bench [rows] [cols, a multiple of 256] [batches]\n");
		return 2;
	}
	float *x = malloc((size_t)cols * sizeof(float));
	char json[16384];
	int jn = snprintf(json, sizeof(json),
	                  "{\"bench\":\"qdot\",\"rows\":%d,\"cols\":%d,\"results\":[", rows, cols);
	printf("%-5s %-11s %3s %9s %9s %9s %6s\n", "type", "variant", "B", "GB/s best", "GB/s med",
	       "probe med", "ratio");
	bool first = true;
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		if (argc > 4 && !strstr(argv[4], ggml_type_name(types[t])))
			continue;
		struct bench_case c = {.type = types[t], .rows = rows, .cols = cols};
		c.row_bytes = ggml_row_bytes(c.type, (uint64_t)cols);
		c.w_bytes = c.row_bytes * (size_t)rows;
		c.act_bytes = qdot_act_bytes(c.type, cols);
		c.w = aligned_alloc(64, (c.w_bytes + 63) / 64 * 64);
		c.xq = malloc(c.act_bytes * (size_t)max_b);
		c.y = malloc((size_t)rows * max_b * sizeof(float));
		size_t block_bytes = ggml_row_bytes(c.type, (uint64_t)qdot_block_values(c.type));
		fill_weights(c.type, c.w, c.w_bytes, block_bytes);
		for (int b = 0; b < max_b; b++) {
			for (int i = 0; i < cols; i++)
				x[i] = (float)((rnd() >> 40) % 2001) / 1000.0f - 1.0f;
			qdot_act_quantize(c.type, x, cols, c.xq + (size_t)b * c.act_bytes);
		}
		for (int v = 0; v < QDOT_VARIANT_COUNT; v++) {
			const struct qdot_kernels *k =
			    qdot_kernels_get(c.type, (enum qdot_variant)v);
			if (!k)
				continue;
			for (int i = 0; i < nb; i++) {
				struct result r = run(&c, k, batches[i]);
				const char *name = qdot_variant_name((enum qdot_variant)v);
				printf("%-5s %-11s %3d %9.2f %9.2f %9.2f %6.2f\n",
				       ggml_type_name(c.type), name, batches[i], r.best, r.med,
				       r.probe_med, r.med / r.probe_med);
				fflush(stdout);
				if (jn < (int)sizeof(json) - 256)
					jn += snprintf(
					    json + jn, sizeof(json) - (size_t)jn,
					    "%s{\"type\":\"%s\",\"variant\":\"%s\",\"B\":%d,"
					    "\"gbs_best\":%.3f,\"gbs_median\":%.3f,"
					    "\"probe_gbs_median\":%.3f,\"ratio\":%.3f}",
					    first ? "" : ",", ggml_type_name(c.type), name,
					    batches[i], r.best, r.med, r.probe_med,
					    r.med / r.probe_med);
				first = false;
			}
		}
		free(c.w);
		free(c.xq);
		free(c.y);
	}
	printf("%s]}\n", json);
	free(x);
	return 0;
}
