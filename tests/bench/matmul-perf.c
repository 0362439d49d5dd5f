/* Kernel-level numbers for the CPU matmuls (run by hand, not a test): for
 * each weight type and batch size, y(B, rows) = x(B, cols) . W^T on a matrix
 * much larger than the caches, timed over ~1 s of wall clock.  Prints one
 * line per case with the weight bandwidth (GB/s, what decode is bound by)
 * and GFLOP/s (what batches are bound by), then a JSON line.  With
 * MATMUL_PANELS=1 in the environment the weights get panels (as the CPU
 * backend makes them) where the CPU and type have them.  With
 * MATMUL_FAMILY=<name> (matmul_family_name: dot_avx2, gemm_avx512, ...)
 * every product runs that family instead of the table's pick; types it
 * does not run are skipped.
 * usage: matmul-perf [threads (0 = cores)] [rows] [cols] [batch sizes, e.g. 1,8,32] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/matmul.h"
#include "engine/panels.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t row_bytes(int type, int cols)
{
	return type == GGML_TYPE_F32    ? (size_t)cols * 4
	       : type == GGML_TYPE_Q8_0 ? (size_t)cols / 32 * 34
	                                : (size_t)cols * 2;
}

/* The family named by MATMUL_FAMILY, or -1 (the table's pick). */
static int forced_family(void)
{
	const char *name = getenv("MATMUL_FAMILY");
	for (int f = 0; name && f < MATMUL_FAMILY_COUNT; f++)
		if (!strcmp(name, matmul_family_name(f)))
			return f;
	if (name)
		fprintf(stderr, "MATMUL_FAMILY=%s: no such family, the table picks\n", name);
	return -1;
}

/* One product, by the table or by the forced family. */
static void product(struct threadpool *pool, int family, const float *x, int B,
                    const struct weight_matrix *m, float *y)
{
	struct matmul_job job = {.w = m, .y = y};
	if (family < 0)
		matmul(pool, x, B, m, y);
	else
		matmul_many_family(pool, family, x, B, &job, 1);
}

int main(int argc, char **argv)
{
	int family = forced_family();
	int n_threads = argc > 1 ? atoi(argv[1]) : 0;
	int rows = argc > 2 ? atoi(argv[2]) : 32768, cols = argc > 3 ? atoi(argv[3]) : 2048;
	struct threadpool *pool = NULL;
	if (threadpool_new(n_threads, &pool, NULL, 0))
		return 1;
	int types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0};
	const char *names[] = {"f32", "f16", "bf16", "q8_0"};
	int bs[16] = {1, 4, 8, 32, 64}, n_bs = 5;
	if (argc > 4) {
		n_bs = 0;
		for (char *p = argv[4]; *p && n_bs < 16; p++) {
			bs[n_bs++] = (int)strtol(p, &p, 10);
			if (*p != ',')
				break;
		}
	}
	printf("{\"threads\":%d,\"rows\":%d,\"cols\":%d,\"cases\":[", threadpool_size(pool), rows,
	       cols);
	int first = 1;
	for (int t = 0; t < 4; t++) {
		size_t rb = row_bytes(types[t], cols);
		unsigned char *w = malloc(rb * rows);
		for (size_t i = 0; i < rb * rows; i++)
			w[i] =
			    (unsigned char)(i * 2654435761u >> 24) & 0x3f; /* small finite values */
		struct weight_matrix m = {
		    .type = types[t], .rows = rows, .cols = cols, .data = w, .row_bytes = rb};
		void *panels = NULL;
		const char *want_panels = getenv("MATMUL_PANELS");
		if (want_panels && !strcmp(want_panels, "1") && panels_supported(m.type) &&
		    (panels = aligned_alloc(64, (panels_bytes(&m) + 63) & ~(size_t)63))) {
			panels_pack(pool, &m, panels);
			m.panels = panels;
		}
		if (family >= 0 && !matmul_family_runs(family, &m)) {
			free(w);
			free(panels);
			continue;
		}
		for (int bi = 0; bi < n_bs; bi++) {
			int B = bs[bi];
			float *x = calloc((size_t)B * cols, sizeof(float));
			float *y = malloc((size_t)B * rows * sizeof(float));
			product(pool, family, x, B, &m, y);
			int it = 0;
			double t0 = now_s(), el;
			do {
				product(pool, family, x, B, &m, y);
				it++;
			} while ((el = now_s() - t0) < 1.0);
			el /= it;
			fprintf(stderr, "%-5s B=%-3d %8.2f ms  %6.1f GB/s  %6.1f GFLOP/s\n",
			        names[t], B, el * 1e3, (double)rb * rows / el / 1e9,
			        2.0 * rows * cols * B / el / 1e9);
			printf(
			    "%s{\"type\":\"%s\",\"B\":%d,\"ms\":%.3f,\"gbs\":%.2f,\"gflops\":%.2f}",
			    first ? "" : ",", names[t], B, el * 1e3, (double)rb * rows / el / 1e9,
			    2.0 * rows * cols * B / el / 1e9);
			first = 0;
			free(x);
			free(y);
		}
		free(w);
		free(panels);
	}
	printf("]}\n");
	threadpool_free(pool);
	return 0;
}
