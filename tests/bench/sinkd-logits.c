/* sinkd's logits for a GGUF file and a list of token ids: the sinkd side of
 * tests/bench/arch-logits.sh (against llama.cpp's llamacpp-logits.c, same
 * arguments, same output) and of the arch-logits test (against logits that
 * script stored).
 *
 *   sinkd-logits -m FILE --tokens 1,2,3,... [--greedy N] [--threads T]
 *
 * Evaluates the ids as one batch with strategy full (every token resident),
 * F32 K/V, no quantized tier, no anchors, then prints one JSON line:
 * {"n_vocab":V,"logits":[the last position's V logits],"greedy":[N tokens,
 * each the argmax (lowest id on ties) fed back one at a time]}.  Built twice
 * by meson: on the CPU backend, and with -DSINKD_CUDA_EMU on the CUDA
 * backend over its host emulation (cuda/emu), F32 weights and activations. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "engine/backend.h"
#include "util/errbuf.h"
#ifdef SINKD_CUDA_EMU
#include "backend_cuda.h"
#endif

static int parse_tokens(const char *s, int32_t **out, int *n_out)
{
	int cap = 64, n = 0;
	int32_t *t = malloc(sizeof(*t) * (size_t)cap);
	while (t && *s) {
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s || v < 0 || v > INT32_MAX || (*end && *end != ','))
			break;
		if (n == cap) {
			int32_t *g = realloc(t, sizeof(*t) * (size_t)(cap *= 2));
			if (!g)
				break;
			t = g;
		}
		t[n++] = (int32_t)v;
		s = *end ? end + 1 : end;
	}
	if (!t || *s || n == 0) {
		free(t);
		return -EINVAL;
	}
	*out = t;
	*n_out = n;
	return 0;
}

static int32_t argmax(const float *x, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

static int new_backend(const struct model *m, int threads, size_t cache_bytes, struct backend **be,
                       char *err, size_t err_len)
{
	struct backend_options bo = {.n_threads = threads};
#ifdef SINKD_CUDA_EMU
	struct backend_cuda_options co = {
	    .device = 0, .dtype = KV_DTYPE_F32, .cache_bytes = cache_bytes, .auto_fraction = 0.3};
	return backend_cuda_new(m, &bo, &co, be, err, err_len);
#else
	(void)cache_bytes;
	return backend_cpu_new(m, &bo, be, err, err_len);
#endif
}

int main(int argc, char **argv)
{
	const char *path = NULL, *tokens_arg = NULL;
	int greedy = 0, threads = 1, n = 0, rc = 1;
	int32_t *ids = NULL;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-m"))
			path = argv[i + 1];
		else if (!strcmp(argv[i], "--tokens"))
			tokens_arg = argv[i + 1];
		else if (!strcmp(argv[i], "--greedy"))
			greedy = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads"))
			threads = atoi(argv[i + 1]);
		else
			path = NULL, i = argc;
	}
	if (argc % 2 == 0 || !path || !tokens_arg || parse_tokens(tokens_arg, &ids, &n) ||
	    greedy < 0 || threads < 1) {
		fprintf(stderr, "usage: sinkd-logits -m FILE --tokens 1,2,3 [--greedy N] [--threads T]\n");
		return 2;
	}

	char err[SINKD_ERR_LEN] = "";
	struct model *m = NULL;
	struct backend *be = NULL;
	struct backend_session *s = NULL;
	struct backend_token *batch = NULL;
	float *logits = NULL;
	struct sinkd_config cfg;
	struct config_errors errs;
	struct cache_settings cs;
	if (config_load(&cfg, NULL, NULL, 0, &errs)) {
		config_errors_print(&errs, stderr);
		config_errors_deinit(&errs);
		goto cleanup;
	}
	config_cache_settings(&cfg, &cs); /* the defaults, changed below */
	config_deinit(&cfg);
	if (model_load(path, NULL, &m, err, sizeof(err)))
		goto fail;
	int n_vocab = m->hp.n_vocab;
	for (int i = 0; i < n; i++)
		if (ids[i] >= n_vocab) {
			err_set(err, sizeof(err), -EINVAL, "token %d out of the vocabulary (%d)",
			        ids[i], n_vocab);
			goto fail;
		}
	cs.strategy = CACHE_STRATEGY_FULL;
	cs.max_context_length = n + greedy + 16;
	cs.quant_enabled = false;
	cs.dtype = KV_DTYPE_F32;
	cs.anchors_enabled = false;
	struct cache_geometry g;
	cache_geometry_build(&cs, &m->hp, &g);
	if (new_backend(m, threads, 2 * cache_geometry_bound_bytes(&g) + ((size_t)16 << 20), &be,
	                err, sizeof(err)) ||
	    be->ops->session_new(be, &g, &s, err, sizeof(err)))
		goto fail;

	batch = calloc((size_t)n, sizeof(*batch));
	logits = malloc(sizeof(*logits) * (size_t)n_vocab);
	if (!batch || !logits) {
		err_set(err, sizeof(err), -ENOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < n; i++)
		batch[i] = (struct backend_token){
		    .session = s, .token = ids[i], .want_logits = i == n - 1};
	if (be->ops->forward(be, batch, (size_t)n, logits, err, sizeof(err)))
		goto fail;
	printf("{\"n_vocab\":%d,\"logits\":[", n_vocab);
	for (int i = 0; i < n_vocab; i++)
		printf("%s%.9g", i ? "," : "", logits[i]);
	printf("],\"greedy\":[");
	for (int k = 0; k < greedy; k++) {
		int32_t next = argmax(logits, n_vocab);
		printf("%s%d", k ? "," : "", next);
		if (k + 1 == greedy)
			break;
		batch[0] = (struct backend_token){.session = s, .token = next, .want_logits = true};
		if (be->ops->forward(be, batch, 1, logits, err, sizeof(err))) {
			printf("\n");
			goto fail;
		}
	}
	printf("]}\n");
	rc = 0;
	goto cleanup;
fail:
	fprintf(stderr, "sinkd-logits: %s\n", err);
cleanup:
	if (s)
		be->ops->session_free(be, s);
	if (be)
		backend_free(be);
	if (m)
		model_free(m);
	free(batch);
	free(logits);
	free(ids);
	return rc;
}
