/* The packed Q8_0/Q4_0/MXFP4 kernels (engine/qpack.h) against the stored
 * layout's qdot kernels of the same variant (run by hand, not a test): on
 * one thread, y(B, rows) = W(rows, cols) . xq(B)^T (the stored side as
 * matmul.c's QDOT family runs it: row dots at B = 1), the two timed in
 * alternating pairs (each trial repeats its pass for 50 ms), so both see
 * the same machine state; prints each pair's ratio (stored time / packed
 * time: above 1 the packed kernel is faster), min and median, and one JSON
 * line at the end.
 * usage: qpack-pairs [rows] [cols] [batches, e.g. 1,512] [pairs] [variant, e.g. avx2] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/qdot.h"
#include "engine/qpack.h"
#include "model/dequant.h"
#include "util/monotime.h"

#define TRIAL_MIN_S 0.05
#define MAX_PAIRS 64
#define MAX_BATCHES 8

/* Random bytes for the codes and activations: any will do. */
static uint8_t rand_u8(void)
{
	return (uint8_t)(rand() >> 7);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* One type's stored matrix, its packed copy and B activation vectors. */
struct pair_case {
	struct weight_matrix w;
	uint8_t *xq;
	size_t act_bytes;
	float *y;
};

static void case_make(struct pair_case *c, enum ggml_type t, int rows, int cols, int max_b)
{
	struct weight_matrix *w = &c->w;
	*w = (struct weight_matrix){.type = t, .rows = rows, .cols = cols};
	w->row_bytes = ggml_row_bytes(t, (uint64_t)cols);
	size_t bytes = w->row_bytes * (size_t)rows, block = ggml_row_bytes(t, 32);
	uint8_t *d = aligned_alloc(64, (bytes + 63) / 64 * 64);
	for (size_t i = 0; i < bytes; i++)
		d[i] = rand_u8();
	uint16_t scale = f32_to_fp16(0.01f);
	uint8_t e8m0 = 120; /* MXFP4's scale byte: 2^-8 */
	for (size_t b = 0; b < bytes; b += block)
		memcpy(d + b, t == GGML_TYPE_MXFP4 ? (const void *)&e8m0 : &scale,
		       t == GGML_TYPE_MXFP4 ? 1 : 2);
	w->data = d;
	void *p = aligned_alloc(64, (qpack_bytes(w) + 63) / 64 * 64);
	qpack_pack(NULL, w, p);
	w->panels = p;
	c->act_bytes = qdot_act_bytes(t, cols);
	c->xq = malloc(c->act_bytes * (size_t)max_b);
	c->y = malloc(sizeof(float) * (size_t)rows * (size_t)max_b);
	float *x = malloc(sizeof(float) * (size_t)cols);
	for (int b = 0; b < max_b; b++) {
		for (int i = 0; i < cols; i++)
			x[i] = (float)rand_u8() / 127.5f - 1.0f;
		qdot_act_quantize(t, x, cols, c->xq + (size_t)b * c->act_bytes);
	}
	free(x);
}

static void case_free(struct pair_case *c)
{
	free((void *)c->w.data);
	free((void *)c->w.panels);
	free(c->xq);
	free(c->y);
}

/* Seconds per pass: the stored kernels k, or the packed kernel pk. */
static double trial(const struct pair_case *c, const struct qdot_kernels *k, qpack_rows_fn pk,
                    int B)
{
	int reps = 0;
	double t0 = monotime_s(), t;
	do {
		if (k && B == 1) /* as matmul.c's QDOT family runs decode */
			for (int r = 0; r < c->w.rows; r++)
				c->y[r] = k->dot_row((const uint8_t *)c->w.data +
				                         (size_t)r * c->w.row_bytes,
				                     c->xq, c->w.cols);
		else if (k)
			qdot_rows(k, c->w.data, c->w.row_bytes, c->w.rows, c->xq, c->act_bytes, B,
			          c->w.cols, c->y, (size_t)c->w.rows);
		else
			pk(&c->w, c->xq, c->act_bytes, B, c->y, (size_t)c->w.rows, 0, c->w.rows);
		reps++;
		t = monotime_s() - t0;
	} while (t < TRIAL_MIN_S);
	return t / reps;
}

/* n alternating pairs at batch B; prints them, returns min and median. */
static void run_pairs(const struct pair_case *c, enum qdot_variant v, int B, int n, double *min,
                      double *med)
{
	const struct qdot_kernels *k = qdot_kernels_get(c->w.type, v);
	qpack_rows_fn pk = qpack_rows_get(c->w.type, v);
	double ratio[MAX_PAIRS];
	trial(c, k, NULL, B), trial(c, NULL, pk, B); /* warm up */
	printf("%-5s %-11s B %3d:", ggml_type_name(c->w.type), qdot_variant_name(v), B);
	for (int i = 0; i < n; i++) {
		double ts = trial(c, k, NULL, B), tp = trial(c, NULL, pk, B);
		ratio[i] = ts / tp;
		printf(" %.2f", ratio[i]);
	}
	qsort(ratio, (size_t)n, sizeof(double), cmp_double);
	*min = ratio[0], *med = ratio[n / 2];
	printf("  min %.2f median %.2f\n", *min, *med);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	int rows = argc > 1 ? atoi(argv[1]) : 2048, cols = argc > 2 ? atoi(argv[2]) : 768;
	int batches[MAX_BATCHES], nb = 0, n = argc > 4 ? atoi(argv[4]) : 8;
	for (const char *s = argc > 3 ? argv[3] : "1,512"; s && nb < MAX_BATCHES;
	     s = strchr(s, ','), s = s ? s + 1 : NULL)
		batches[nb++] = atoi(s);
	const char *vname = argc > 5 ? argv[5] : "avx2";
	int v = 0, max_b = 1;
	while (v < QDOT_VARIANT_COUNT && strcmp(qdot_variant_name((enum qdot_variant)v), vname))
		v++;
	for (int i = 0; i < nb; i++)
		max_b = batches[i] > max_b ? batches[i] : max_b;
	if (rows <= 0 || cols <= 0 || cols % 64 || n < 1 || n > MAX_PAIRS ||
	    v == QDOT_VARIANT_COUNT || !qdot_variant_runs((enum qdot_variant)v)) {
		fprintf(stderr,
		        "usage: qpack-pairs [rows] [cols, a multiple of 64] [batches] "
		        "[pairs, 1..%d] [variant this CPU runs: scalar, avx2, ...]\n",
		        MAX_PAIRS);
		return 2;
	}
	const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_MXFP4};
	char json[4096];
	int jn = snprintf(json, sizeof(json),
	                  "{\"bench\":\"qpack-pairs\",\"rows\":%d,\"cols\":%d,\"variant\":\"%s\","
	                  "\"pairs\":%d,\"results\":[",
	                  rows, cols, vname, n);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		struct pair_case c;
		case_make(&c, types[t], rows, cols, max_b);
		for (int i = 0; i < nb; i++) {
			double min, med;
			run_pairs(&c, (enum qdot_variant)v, batches[i], n, &min, &med);
			if (jn < (int)sizeof(json) - 128)
				jn += snprintf(
				    json + jn, sizeof(json) - (size_t)jn,
				    "%s{\"type\":\"%s\",\"B\":%d,\"min\":%.3f,\"median\":%.3f}",
				    t || i ? "," : "", ggml_type_name(types[t]), batches[i], min,
				    med);
		}
		case_free(&c);
	}
	printf("%s]}\n", json);
	return 0;
}
