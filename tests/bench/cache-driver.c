/* Benchmark driver for tests/bench/cache-flat.sh: per-token decode time at
 * several stream positions, to show that a sliding-window sink cache costs
 * the same at token 100,000 as at token 1,000.
 *   model MODEL.gguf WINDOW SINKS THREADS POS...   whole forward on the CPU
 *       backend: streams synthetic token ids (chunks of 64) up to each
 *       position, then times 256 single-token decode steps there.
 *   cache N_HEADS N_KV HEAD_DIM WINDOW SINKS DTYPE BITS POS...   one layer of
 *       sinkcache_append + sinkcache_attend (DTYPE 0 f32, 1 f16, 2 bf16;
 *       BITS 0 = no quantization, else 128 recent full precision); the stream
 *       index jumps (test hook) to POS - WINDOW, then WINDOW tokens fill the
 *       window and 256 more are timed.
 * Prints one line per position: "POS WALL_S_PER_TOKEN CPU_S_PER_TOKEN". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/sinkcache.h"
#include "engine/backend.h"
#include "model/model.h"
#include "util/errbuf.h"

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall and process CPU seconds: on a shared machine the CPU time is what
 * shows whether the work per token stays flat. */
struct stamp {
	double wall, cpu;
};

static struct stamp stamp_now(void)
{
	return (struct stamp){clock_s(CLOCK_MONOTONIC), clock_s(CLOCK_PROCESS_CPUTIME_ID)};
}

static void print_per_token(uint64_t pos, struct stamp t0, int n, size_t resident, size_t bound)
{
	struct stamp t1 = stamp_now();
	printf("%llu %.9f %.9f %zu %zu\n", (unsigned long long)pos, (t1.wall - t0.wall) / n,
	       (t1.cpu - t0.cpu) / n, resident, bound);
}

static int feed(struct backend *be, struct backend_session *s, struct backend_token *batch,
                size_t n, uint64_t *pos, float *logits, char *err)
{
	int n_vocab = be->model->hp.n_vocab;
	for (size_t j = 0; j < n; j++)
		batch[j] = (struct backend_token){
		    .session = s,
		    .token = (int32_t)((*pos + j) * 7919 % (uint64_t)n_vocab),
		    .want_logits = j == n - 1};
	*pos += n;
	return be->ops->forward(be, batch, n, logits, err, SINKD_ERR_LEN);
}

static int run_model(int argc, char **argv)
{
	char err[SINKD_ERR_LEN] = "";
	struct model *m = NULL;
	struct backend *be = NULL;
	struct backend_session *s = NULL;
	struct backend_token batch[64];
	int rc = model_load(argv[2], NULL, &m, err, sizeof(err));
	struct backend_options opt = {.n_threads = atoi(argv[5])};
	if (!rc)
		rc = backend_cpu_new(m, &opt, &be, err, sizeof(err));
	struct cache_geometry g = {.n_layers = m ? m->hp.n_layers : 0,
	                               .n_kv_heads = m ? m->hp.n_kv_heads : 0,
	                               .head_dim = m ? m->hp.head_dim : 0,
	                               .rope_dim = m ? m->hp.rope_dim : 0,
	                               .rope_theta = m ? m->hp.rope_theta : 0,
	                               .window_size = atoi(argv[3]),
	                               .sink_keep_count = atoi(argv[4]),
	                               .quant_bits = 8,
	                               .dtype = KV_DTYPE_BF16};
	if (!rc)
		rc = be->ops->session_new(be, &g, &s, err, sizeof(err));
	float *logits = m ? malloc(sizeof(float) * (size_t)m->hp.n_vocab) : NULL;
	uint64_t pos = 0;
	for (int a = 6; !rc && a < argc; a++) {
		uint64_t target = strtoull(argv[a], NULL, 10);
		while (!rc && pos < target)
			rc = feed(be, s, batch, target - pos < 64 ? target - pos : 64, &pos, logits,
			          err);
		struct stamp t0 = stamp_now();
		for (int i = 0; !rc && i < 256; i++)
			rc = feed(be, s, batch, 1, &pos, logits, err);
		if (!rc) {
			/* resident bytes beside the bound: a full cache sits at it */
			struct sinkcache_stats st;
			be->ops->session_stats(be, s, &st);
			print_per_token(target, t0, 256, st.bytes_resident, st.bytes_bound);
		}
	}
	if (rc)
		fprintf(stderr, "cache-driver: %s\n", err);
	if (s)
		be->ops->session_free(be, s);
	backend_free(be);
	model_free(m);
	free(logits);
	return rc ? 1 : 0;
}

static int run_cache(int argc, char **argv)
{
	int n_heads = atoi(argv[2]), bits = atoi(argv[8]);
	struct cache_geometry g = {.n_layers = 1,
	                               .n_kv_heads = atoi(argv[3]),
	                               .head_dim = atoi(argv[4]),
	                               .rope_dim = atoi(argv[4]),
	                               .rope_theta = 500000.0,
	                               .window_size = atoi(argv[5]),
	                               .sink_keep_count = atoi(argv[6]),
	                               .dtype = (enum kv_dtype)atoi(argv[7]),
	                               .quant_enabled = bits != 0,
	                               .quant_bits = bits ? bits : 8,
	                               .protect_sinks = true,
	                               .full_precision_recent = 128};
	char err[SINKD_ERR_LEN] = "";
	size_t kvd = (size_t)g.n_kv_heads * (size_t)g.head_dim, qd = (size_t)n_heads * g.head_dim;
	float *k = malloc(kvd * sizeof(float)), *q = malloc(qd * sizeof(float));
	float *out = malloc(qd * sizeof(float));
	float *scratch = malloc(sinkcache_scratch_floats(&g) * sizeof(float) + 64);
	for (size_t i = 0; i < qd; i++)
		q[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
	for (size_t i = 0; i < kvd; i++)
		k[i] = (float)((i * 53) % 97) / 97.0f - 0.5f;
	for (int a = 9; a < argc; a++) {
		struct sinkcache *c;
		uint64_t target = strtoull(argv[a], NULL, 10);
		if (sinkcache_new(&g, &c, err, sizeof(err))) {
			fprintf(stderr, "cache-driver: %s\n", err);
			return 1;
		}
		for (int i = 0; i < g.sink_keep_count; i++)
			sinkcache_append(c, 0, k, k, NULL, 0);
		uint64_t start = target > (uint64_t)(g.window_size + g.sink_keep_count)
		                     ? target - (uint64_t)g.window_size
		                     : (uint64_t)g.sink_keep_count;
		sinkcache_debug_set_stream_index(c, start, NULL, 0);
		for (uint64_t p = start; p < target; p++)
			sinkcache_append(c, 0, k, k, NULL, 0);
		struct stamp t0 = stamp_now();
		for (int i = 0; i < 256; i++) {
			sinkcache_append(c, 0, k, k, NULL, 0);
			sinkcache_attend(c, 0, q, n_heads, 0, n_heads, out, scratch, NULL, NULL,
			                 NULL, true);
		}
		struct sinkcache_stats st;
		sinkcache_get_stats(c, &st);
		print_per_token(target, t0, 256, st.bytes_resident, st.bytes_bound);
		sinkcache_free(c);
	}
	free(k);
	free(q);
	free(out);
	free(scratch);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 6 && !strcmp(argv[1], "model"))
		return run_model(argc, argv);
	if (argc > 9 && !strcmp(argv[1], "cache"))
		return run_cache(argc, argv);
	fprintf(stderr,
	        "usage: cache-driver model MODEL WINDOW SINKS THREADS POS...\n"
	        "       cache-driver cache N_HEADS N_KV HEAD_DIM WINDOW SINKS DTYPE BITS POS...\n");
	return 2;
}
