/*
 * llama.cpp's logits for a GGUF file and a list of token ids, for comparing
 * sinkd's forward pass with an independent one (tests/bench/arch-logits.sh).
 * Built against libllama by tests/bench/llamacpp-build.sh, never by meson.
 *
 *   llamacpp-logits -m FILE --tokens 1,2,3,... [--greedy N] [--threads T]
 *
 * Evaluates the ids as one batch in a context large enough for them and the
 * greedy continuation (F32 K/V, no flash attention, CPU), then prints one JSON
 * line: {"n_vocab":V,"logits":[the last position's V logits],"greedy":[N
 * tokens, each the argmax (lowest id on ties) fed back one at a time]}.
 * Token ids, not text, so no tokenizer enters the comparison.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet_log(enum ggml_log_level level, const char *text, void *user)
{
	(void)user;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static int parse_tokens(const char *s, llama_token **out, int *n_out)
{
	int cap = 64, n = 0;
	llama_token *t = malloc(sizeof(*t) * (size_t)cap);
	if (!t)
		return -1;
	while (*s) {
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s || v < 0) {
			free(t);
			return -1;
		}
		if (n == cap) {
			cap *= 2;
			llama_token *g = realloc(t, sizeof(*t) * (size_t)cap);
			if (!g) {
				free(t);
				return -1;
			}
			t = g;
		}
		t[n++] = (llama_token)v;
		s = end;
		if (*s == ',')
			s++;
		else if (*s) {
			free(t);
			return -1;
		}
	}
	*out = t;
	*n_out = n;
	return n > 0 ? 0 : -1;
}

static llama_token argmax(const float *x, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

int main(int argc, char **argv)
{
	const char *model_path = NULL, *tokens_arg = NULL;
	int greedy = 0, threads = 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-m") && i + 1 < argc)
			model_path = argv[++i];
		else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
			tokens_arg = argv[++i];
		else if (!strcmp(argv[i], "--greedy") && i + 1 < argc)
			greedy = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else {
			fprintf(stderr,
			        "usage: %s -m FILE --tokens 1,2,3 [--greedy N] [--threads T]\n",
			        argv[0]);
			return 2;
		}
	}
	llama_token *toks = NULL;
	int n_toks = 0;
	if (!model_path || !tokens_arg || parse_tokens(tokens_arg, &toks, &n_toks) < 0 ||
	    greedy < 0 || threads < 1) {
		fprintf(stderr, "usage: %s -m FILE --tokens 1,2,3 [--greedy N] [--threads T]\n",
		        argv[0]);
		return 2;
	}

	int rc = 1;
	struct llama_model *model = NULL;
	struct llama_context *ctx = NULL;
	struct llama_batch batch = {0};
	int have_batch = 0;
	float *last = NULL;

	llama_log_set(quiet_log, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	mp.use_extra_bufts = 0; /* plain CPU buffers: no repacked weight layouts */
	model = llama_model_load_from_file(model_path, mp);
	if (!model) {
		fprintf(stderr, "llamacpp-logits: cannot load %s\n", model_path);
		goto cleanup;
	}
	const struct llama_vocab *vocab = llama_model_get_vocab(model);
	int n_vocab = llama_vocab_n_tokens(vocab);
	for (int i = 0; i < n_toks; i++)
		if (toks[i] >= n_vocab) {
			fprintf(stderr, "llamacpp-logits: token %d out of the vocabulary (%d)\n",
			        toks[i], n_vocab);
			goto cleanup;
		}

	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = (uint32_t)(n_toks + greedy + 256);
	cp.n_batch = (uint32_t)n_toks;
	cp.n_ubatch = (uint32_t)n_toks;
	cp.n_seq_max = 1;
	cp.n_threads = threads;
	cp.n_threads_batch = threads;
	cp.type_k = GGML_TYPE_F32;
	cp.type_v = GGML_TYPE_F32;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.offload_kqv = 0;
	cp.op_offload = 0;
	cp.no_perf = 1;
	ctx = llama_init_from_model(model, cp);
	if (!ctx) {
		fprintf(stderr, "llamacpp-logits: cannot make a context for %s\n", model_path);
		goto cleanup;
	}

	batch = llama_batch_init(n_toks, 0, 1);
	have_batch = 1;
	for (int i = 0; i < n_toks; i++) {
		batch.token[i] = toks[i];
		batch.pos[i] = i;
		batch.n_seq_id[i] = 1;
		batch.seq_id[i][0] = 0;
		batch.logits[i] = i == n_toks - 1;
	}
	batch.n_tokens = n_toks;
	if (llama_decode(ctx, batch) != 0) {
		fprintf(stderr, "llamacpp-logits: decode of the prompt failed\n");
		goto cleanup;
	}
	last = malloc(sizeof(*last) * (size_t)n_vocab);
	if (!last)
		goto cleanup;
	memcpy(last, llama_get_logits_ith(ctx, -1), sizeof(*last) * (size_t)n_vocab);

	printf("{\"n_vocab\":%d,\"logits\":[", n_vocab);
	for (int i = 0; i < n_vocab; i++)
		printf("%s%.9g", i ? "," : "", last[i]);
	printf("],\"greedy\":[");
	llama_token next = argmax(last, n_vocab);
	for (int g = 0; g < greedy; g++) {
		printf("%s%d", g ? "," : "", next);
		if (g + 1 == greedy)
			break;
		batch.n_tokens = 1;
		batch.token[0] = next;
		batch.pos[0] = n_toks + g;
		batch.n_seq_id[0] = 1;
		batch.seq_id[0][0] = 0;
		batch.logits[0] = 1;
		if (llama_decode(ctx, batch) != 0) {
			fprintf(stderr, "llamacpp-logits: decode of greedy token %d failed\n", g);
			goto cleanup;
		}
		next = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
	}
	printf("]}\n");
	rc = 0;

cleanup:
	free(last);
	if (have_batch)
		llama_batch_free(batch);
	if (ctx)
		llama_free(ctx);
	if (model)
		llama_model_free(model);
	free(toks);
	llama_backend_free();
	return rc;
}
