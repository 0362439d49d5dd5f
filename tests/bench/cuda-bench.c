/* Benchmark driver for the CUDA backend (run by cuda-bench.sh on a GPU
 * machine; not a test).  Measures, for one model:
 *   - device copy bandwidth (copy-kernel probe), against --peak-gbps;
 *   - decode tokens/s vs batch size: B sessions (sink 4, window 1024, bf16
 *     cache) each with a --prompt-token prompt, then --steps timed forwards
 *     of one token per session, logits of every token back to the host;
 *     batch 1's weight bandwidth = weight bytes / step time;
 *   - attention kernel time vs window size (one launch, one layer, batch 1
 *     and 64, bf16 and int8 compressed tier), with the KV bytes it reads;
 *   - device bytes per session for a few geometries;
 *   - the L2 access-policy window over the sink tiers, off vs on, at batch 64;
 *   - decode again with captured CUDA graphs (launch overheads at small batch).
 * Prints a table, then one JSON line starting with {"bench":"cuda". */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_cuda.h"
#include "cuda_device.h"
#include "cuda_kernels.h"
#include "cuda_kvplan.h"
#include "util/errbuf.h"

#define MAX_POINTS 16

struct opts {
	const char *model;
	int batches[MAX_POINTS], n_batches;
	int windows[MAX_POINTS], n_windows;
	int steps, prompt, probe_mib;
	double peak_gbps;
};

struct decode_point {
	int batch;
	double tok_s, step_ms;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_list(const char *s, int *out)
{
	int n = 0;
	while (*s && n < MAX_POINTS) {
		out[n++] = atoi(s);
		const char *c = strchr(s, ',');
		if (!c)
			break;
		s = c + 1;
	}
	return n;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.steps = 8, .prompt = 64, .probe_mib = 2048, .peak_gbps = 4800.0};
	o->n_batches = parse_list("1,2,4,8,16,32,64,128,256", o->batches);
	o->n_windows = parse_list("512,2048,8192,32768", o->windows);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--model"))
			o->model = argv[i + 1];
		else if (!strcmp(argv[i], "--batches"))
			o->n_batches = parse_list(argv[i + 1], o->batches);
		else if (!strcmp(argv[i], "--windows"))
			o->n_windows = parse_list(argv[i + 1], o->windows);
		else if (!strcmp(argv[i], "--steps"))
			o->steps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--prompt"))
			o->prompt = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--probe-mib"))
			o->probe_mib = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--peak-gbps"))
			o->peak_gbps = atof(argv[i + 1]);
		else
			return -1;
	}
	return o->model && o->steps > 0 && o->prompt > 0 ? 0 : -1;
}

static struct cache_geometry bench_geometry(const struct model_hparams *hp, int window,
                                                bool quant, int n_layers)
{
	return (struct cache_geometry){.n_layers = n_layers,
	                                   .n_kv_heads = hp->n_kv_heads,
	                                   .head_dim = hp->head_dim,
	                                   .rope_dim = hp->rope_dim,
	                                   .rope_theta = hp->rope_theta,
	                                   .rope_neox = hp->arch == MODEL_ARCH_QWEN2,
	                                   .strategy = CACHE_STRATEGY_SLIDING_WINDOW,
	                                   .sink_keep_count = 4,
	                                   .window_size = window,
	                                   .quant_enabled = quant,
	                                   .quant_bits = 8,
	                                   .protect_sinks = true,
	                                   .full_precision_recent = quant ? 128 : window,
	                                   .rope_positions = ROPE_POSITIONS_CACHE,
	                                   .dtype = KV_DTYPE_BF16};
}

/* ------------------------------------------------------------- decode */

static int run_forward(struct backend *be, struct backend_token *t, size_t n, float *logits)
{
	char err[SINKD_ERR_LEN];
	int rc = be->ops->forward(be, t, n, logits, err, sizeof(err));
	if (rc)
		fprintf(stderr, "cuda-bench: forward: %s\n", err);
	return rc;
}

/* Prompts of all sessions, at most ~2048 tokens per forward. */
static int prefill(struct backend *be, struct backend_session **s, int B, int prompt,
                   struct backend_token *t, float *logits)
{
	int per = 2048 / prompt > 0 ? 2048 / prompt : 1;
	for (int s0 = 0; s0 < B; s0 += per) {
		int n = 0;
		for (int j = s0; j < B && j < s0 + per; j++)
			for (int i = 0; i < prompt; i++)
				t[n++] = (struct backend_token){
				    .session = s[j],
				    .token = (int32_t)((i * 7919 + j * 104729 + 3) %
				                       be->model->hp.n_vocab),
				    .want_logits = i == prompt - 1};
		if (run_forward(be, t, (size_t)n, logits))
			return -1;
	}
	return 0;
}

static int decode_point(struct backend *be, const struct opts *o, int B, struct decode_point *p)
{
	const struct model_hparams *hp = &be->model->hp;
	struct cache_geometry g = bench_geometry(hp, 1024, false, hp->n_layers);
	struct backend_session **s = calloc((size_t)B, sizeof(*s));
	size_t max_tok = (size_t)(2048 > B ? 2048 + o->prompt : B + o->prompt);
	struct backend_token *t = calloc(max_tok, sizeof(*t));
	float *logits = malloc(max_tok * (size_t)hp->n_vocab * sizeof(float));
	char err[SINKD_ERR_LEN];
	int rc = 0, n_open = 0;
	for (; n_open < B && !rc; n_open++)
		if ((rc = be->ops->session_new(be, &g, &s[n_open], err, sizeof(err))))
			fprintf(stderr, "cuda-bench: session %d: %s\n", n_open, err);
	if (!rc)
		rc = prefill(be, s, B, o->prompt, t, logits);
	double t0 = 0.0;
	for (int step = -2; step < o->steps && !rc; step++) { /* two warm-up steps */
		if (step == 0)
			t0 = now_s();
		for (int j = 0; j < B; j++)
			t[j] = (struct backend_token){
			    .session = s[j],
			    .token = (int32_t)(((step + 2) * 31 + j) % hp->n_vocab),
			    .want_logits = true};
		rc = run_forward(be, t, (size_t)B, logits);
	}
	double dt = now_s() - t0;
	p->batch = B;
	p->step_ms = 1e3 * dt / o->steps;
	p->tok_s = rc ? 0.0 : (double)B * o->steps / dt;
	for (int j = 0; j < B; j++)
		if (s[j])
			be->ops->session_free(be, s[j]);
	free(s), free(t), free(logits);
	return rc;
}

/* ---------------------------------------------------------- attention */

struct attn_point {
	int window, batch, quant;
	double us, gbps;
};

/* One launch over B sessions whose window is full; returns 0 or -1. */
static int attention_point(const struct model_hparams *hp, int W, int B, bool quant,
                           struct attn_point *p)
{
	struct cache_geometry g = bench_geometry(hp, W, quant, 1);
	struct cuda_kv_shape sh;
	struct cuda_kv_state st;
	struct cuda_kv_step step;
	if (cuda_kv_shape_init(&g, &sh, NULL, 0))
		return -1;
	size_t bytes = cuda_kv_session_bytes(&sh), qn = (size_t)B * hp->n_heads * hp->head_dim;
	unsigned char *mem = NULL;
	float *qw = NULL, *qs = NULL, *part = NULL;
	void *out = NULL, *djobs = NULL;
	struct cuda_kv_attn_job *jobs = calloc((size_t)B, sizeof(*jobs));
	size_t pf = cuda_attention_partial_floats(B, hp->n_heads, hp->head_dim, W + 4,
	                                          CUDA_ATTN_DEFAULT_SPLIT);
	int rc = -1;
	if (cudaMalloc((void **)&mem, bytes * B) || cudaMemset(mem, 0, bytes * B) ||
	    cudaMalloc((void **)&qw, qn * 4) || cudaMalloc((void **)&qs, qn * 4) ||
	    cudaMemset(qw, 0, qn * 4) || cudaMemset(qs, 0, qn * 4) || cudaMalloc(&out, qn * 2) ||
	    cudaMalloc((void **)&part, pf * 4) || cudaMalloc(&djobs, (size_t)B * sizeof(*jobs)))
		goto out;
	cuda_kv_state_init(&st);
	struct cuda_kv_view v = sh.layout;
	for (int i = 0; i < W + 4 + 64; i++) /* host plan only: the window fills */
		cuda_kv_plan_step(&sh, &st, &v, &step);
	for (int j = 0; j < B; j++) {
		jobs[j] = step.attn;
		jobs[j].token = j;
		jobs[j].kv.sink_base = (uint64_t)(uintptr_t)(mem + bytes * j);
		jobs[j].kv.win_base = (uint64_t)(uintptr_t)(mem + bytes * j + sh.sink_layer_bytes);
	}
	if (cudaMemcpy(djobs, jobs, (size_t)B * sizeof(*jobs), cudaMemcpyHostToDevice))
		goto out;
	int res = step.attn.n_sink + step.attn.n_comp + step.attn.n_fp, iters = 20;
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0), cudaEventCreate(&e1);
	for (int it = -3; it < iters; it++) {
		if (it == 0)
			cudaEventRecord(e0, NULL);
		if (cuda_attention(djobs, B, res, 0, hp->n_heads, qw, qs, CUDA_ATTN_DEFAULT_SPLIT,
		                   part, out, CUDA_DT_BF16, NULL, NULL, 0, NULL))
			goto out;
	}
	cudaEventRecord(e1, NULL);
	float ms = 0.0f;
	if (cudaEventSynchronize(e1) || cudaEventElapsedTime(&ms, e0, e1))
		goto out;
	cudaEventDestroy(e0), cudaEventDestroy(e1);
	struct sinkcache_stats stats;
	cuda_kv_plan_stats(&sh, &st, &stats);
	*p = (struct attn_point){.window = W, .batch = B, .quant = quant, .us = 1e3 * ms / iters};
	p->gbps = (double)stats.bytes_resident * B / (p->us * 1e-6) / 1e9;
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "cuda-bench: attention W=%d B=%d: %s\n", W, B,
		        cudaGetErrorString(cudaGetLastError()));
	cudaFree(mem), cudaFree(qw), cudaFree(qs), cudaFree(out), cudaFree(part), cudaFree(djobs);
	free(jobs);
	return rc;
}

/* --------------------------------------------------------------- main */

static struct backend *open_backend(const struct model *m, bool l2, bool graphs)
{
	struct backend_cuda_options co = {.dtype = KV_DTYPE_BF16,
	                                  .auto_fraction = 0.4,
	                                  .l2_sink_window = l2,
	                                  .cuda_graphs = graphs};
	struct backend *be = NULL;
	char err[SINKD_ERR_LEN];
	if (backend_cuda_new(m, NULL, &co, &be, err, sizeof(err))) {
		fprintf(stderr, "cuda-bench: %s\n", err);
		return NULL;
	}
	return be;
}

int main(int argc, char **argv)
{
	struct opts o;
	char err[SINKD_ERR_LEN], name[256] = "?";
	if (parse_opts(argc, argv, &o)) {
		fprintf(stderr,
		        "usage: cuda-bench --model M.gguf [--batches 1,2,..] [--windows 512,..] "
		        "[--steps N] [--prompt N] [--probe-mib M] [--peak-gbps G]\n");
		return 2;
	}
	size_t total = 0, free_b = 0;
	if (cuda_device_count() == 0 ||
	    cuda_device_describe(0, name, sizeof(name), &total, &free_b, err, sizeof(err))) {
		fprintf(stderr, "cuda-bench: no CUDA device\n");
		return 77;
	}
	double probe = 0.0;
	if (cuda_bandwidth_probe((size_t)o.probe_mib << 20, 10, &probe, err, sizeof(err)))
		fprintf(stderr, "cuda-bench: %s\n", err);
	struct model *m = NULL;
	if (model_load(o.model, NULL, &m, err, sizeof(err))) {
		fprintf(stderr, "cuda-bench: %s\n", err);
		return 1;
	}
	struct backend *be = open_backend(m, false, false);
	if (!be)
		return 1;
	size_t wbytes = backend_cuda_weight_bytes(be);
	struct decode_point dp[MAX_POINTS];
	int n_dp = 0;
	printf("device %s, copy probe %.0f GB/s (peak %.0f), weights %.2f GB, KV arena %.1f GB\n",
	       name, probe / 1e9, o.peak_gbps, wbytes / 1e9, backend_cuda_cache_bytes(be) / 1e9);
	printf("%8s %12s %10s\n", "batch", "tok/s", "step ms");
	for (int i = 0; i < o.n_batches; i++) {
		if (decode_point(be, &o, o.batches[i], &dp[n_dp]))
			break;
		printf("%8d %12.1f %10.3f\n", dp[n_dp].batch, dp[n_dp].tok_s, dp[n_dp].step_ms);
		fflush(stdout);
		n_dp++;
	}
	/* L2 sink window at batch 64 (or the largest measured): off vs on */
	struct decode_point l2_off = {0}, l2_on = {0};
	int l2_batch = 64;
	decode_point(be, &o, l2_batch, &l2_off);
	backend_free(be);
	be = open_backend(m, true, false);
	if (be) {
		decode_point(be, &o, l2_batch, &l2_on);
		backend_free(be);
	}
	/* decode again with captured CUDA graphs */
	struct decode_point gp[MAX_POINTS];
	int n_gp = 0;
	be = open_backend(m, false, true);
	printf("with CUDA graphs:\n%8s %12s %10s\n", "batch", "tok/s", "step ms");
	for (int i = 0; be && i < o.n_batches; i++) {
		if (decode_point(be, &o, o.batches[i], &gp[n_gp]))
			break;
		printf("%8d %12.1f %10.3f\n", gp[n_gp].batch, gp[n_gp].tok_s, gp[n_gp].step_ms);
		fflush(stdout);
		n_gp++;
	}
	backend_free(be);
	printf("L2 sink window at batch %d: off %.1f tok/s, on %.1f tok/s\n", l2_batch,
	       l2_off.tok_s, l2_on.tok_s);
	struct attn_point ap[4 * MAX_POINTS];
	int n_ap = 0;
	printf("%8s %6s %6s %10s %10s\n", "window", "batch", "int8", "attn us", "KV GB/s");
	for (int i = 0; i < o.n_windows; i++)
		for (int b = 0; b < 2; b++)
			for (int q = 0; q < 2; q++)
				if (!attention_point(&m->hp, o.windows[i], b ? 64 : 1, q,
				                     &ap[n_ap])) {
					printf("%8d %6d %6d %10.1f %10.1f\n", ap[n_ap].window,
					       ap[n_ap].batch, ap[n_ap].quant, ap[n_ap].us,
					       ap[n_ap].gbps);
					n_ap++;
				}
	int sess_windows[] = {1024, 4096, 32768};
	size_t sess_bytes[3][2];
	for (int i = 0; i < 3; i++)
		for (int q = 0; q < 2; q++) {
			struct cache_geometry g =
			    bench_geometry(&m->hp, sess_windows[i], q, m->hp.n_layers);
			sess_bytes[i][q] = backend_cuda_session_bytes(&g);
			printf("session window %d %s: %.1f MiB\n", sess_windows[i],
			       q ? "int8" : "bf16", sess_bytes[i][q] / 1048576.0);
		}
	double bw1 = n_dp > 0 && dp[0].batch == 1 ? wbytes * dp[0].tok_s : 0.0;
	double tok1 = n_dp > 0 ? dp[0].tok_s : 0.0, tok64 = 0.0;
	for (int i = 0; i < n_dp; i++)
		if (dp[i].batch == 64)
			tok64 = dp[i].tok_s;
	printf("batch 1: %.0f GB/s of weights = %.0f%% of peak, %.0f%% of the copy probe; "
	       "batch 64 / batch 1 = %.1fx\n",
	       bw1 / 1e9, 100.0 * bw1 / (o.peak_gbps * 1e9), probe > 0 ? 100.0 * bw1 / probe : 0.0,
	       tok1 > 0 ? tok64 / tok1 : 0.0);
	printf("{\"bench\":\"cuda\",\"device\":\"%s\",\"model\":\"%s\",\"weight_bytes\":%zu,"
	       "\"probe_gbps\":%.1f,\"peak_gbps\":%.1f,\"batch1_weight_gbps\":%.1f,"
	       "\"batch1_frac_peak\":%.3f,\"speedup_b64_vs_b1\":%.2f,\"decode\":[",
	       name, m->name, wbytes, probe / 1e9, o.peak_gbps, bw1 / 1e9,
	       bw1 / (o.peak_gbps * 1e9), tok1 > 0 ? tok64 / tok1 : 0.0);
	for (int i = 0; i < n_dp; i++)
		printf("%s{\"batch\":%d,\"tok_s\":%.1f,\"step_ms\":%.3f}", i ? "," : "",
		       dp[i].batch, dp[i].tok_s, dp[i].step_ms);
	double bwg = n_gp > 0 && gp[0].batch == 1 ? wbytes * gp[0].tok_s : 0.0;
	printf("],\"batch1_graph_weight_gbps\":%.1f,\"batch1_graph_frac_peak\":%.3f,\"decode_"
	       "graphs\":[",
	       bwg / 1e9, bwg / (o.peak_gbps * 1e9));
	for (int i = 0; i < n_gp; i++)
		printf("%s{\"batch\":%d,\"tok_s\":%.1f,\"step_ms\":%.3f}", i ? "," : "",
		       gp[i].batch, gp[i].tok_s, gp[i].step_ms);
	printf("],\"l2_sink_window\":{\"batch\":%d,\"off_tok_s\":%.1f,\"on_tok_s\":%.1f},"
	       "\"attention\":[",
	       l2_batch, l2_off.tok_s, l2_on.tok_s);
	for (int i = 0; i < n_ap; i++)
		printf("%s{\"window\":%d,\"batch\":%d,\"int8\":%d,\"us\":%.1f,\"kv_gbps\":%.1f}",
		       i ? "," : "", ap[i].window, ap[i].batch, ap[i].quant, ap[i].us, ap[i].gbps);
	printf("],\"session_bytes\":[");
	for (int i = 0; i < 3; i++)
		printf("%s{\"window\":%d,\"bf16\":%zu,\"int8\":%zu}", i ? "," : "", sess_windows[i],
		       sess_bytes[i][0], sess_bytes[i][1]);
	printf("]}\n");
	model_free(m);
	return 0;
}
