/* Benchmark driver for constrained decoding: the cost per generated token of
 * grammar_matcher_apply (the mask on a full row of logits) plus
 * grammar_matcher_accept_token, for N independent streams that share one
 * compiled grammar, the way the scheduler runs them (each step: every
 * stream's mask, one after another).  Tokens are picked from random logits
 * over the allowed ones, pulled more and more towards tokens that start
 * with a quote, so strings and documents end; picking is not timed.  A
 * stream whose document is complete starts a new one (matcher reset; the grammar and its
 * mask caches stay, as they do in the daemon's grammar cache).  The first
 * document of stream 0 is reported apart ("cold": every state's walk is new).
 * Prints one JSON line:
 *   {"streams":N,"tokens":K,"docs":D,"us_per_token":X,"ms_per_step":Y,
 *    "cold_us_per_token":C,"p99_us":P,"max_us":M,"compile_ms":G,"trie_ms":T}
 * us_per_token and ms_per_step are over the tokens after the cold document;
 * ms_per_step = N x us_per_token / 1000.  Run by grammar-mask.sh.  Not a test. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

/* objects in arrays in objects, enums, strings, integers, numbers, a date */
static const char default_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"customer\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},\"tier\":{\"enum\":[\"free\",\"pro\","
    "\"enterprise\"]}},\"required\":[\"name\",\"tier\"]},"
    "\"orders\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\"},\"status\":{\"enum\":[\"open\",\"shipped\",\"returned\"]},"
    "\"lines\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\"},\"price\":{\"type\":\"number\"}},"
    "\"required\":[\"sku\",\"qty\"]},\"maxItems\":4},"
    "\"placed\":{\"type\":\"string\",\"format\":\"date\"},\"note\":{\"type\":[\"string\",\"null\"]}"
    "},"
    "\"required\":[\"id\",\"status\",\"lines\"]},\"maxItems\":4},"
    "\"summary\":{\"type\":\"string\"}},\"required\":[\"customer\",\"orders\",\"summary\"]}";

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static double rnd01(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct stream {
	struct grammar_matcher *m;
	float *logits; /* (n_vocab) */
	int step;      /* tokens into the current document */
};

/* The allowed token with the best random score (Gumbel-max); tokens that
 * start with a closing byte (or '@', for emails) gain as the document grows,
 * so documents end, after a few hundred tokens. */
static int32_t pick(const float *logits, const float *bonus, int n, int step, uint64_t *r)
{
	int32_t best = -1;
	double best_w = -1e30, pull = 0.3 + step * 0.02;
	for (int32_t id = 0; id < n; id++) {
		if (isinf(logits[id]))
			continue;
		double w = -log(-log(rnd01(r) + 1e-12) + 1e-12) + pull * bonus[id];
		if (w > best_w) {
			best_w = w;
			best = id;
		}
	}
	return best;
}

int main(int argc, char **argv)
{
	const char *vocab = NULL, *schema_file = NULL;
	int n_streams = 1, n_tokens = 2000;
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--vocab"))
			vocab = argv[i + 1];
		else if (!strcmp(argv[i], "--schema"))
			schema_file = argv[i + 1];
		else if (!strcmp(argv[i], "--streams"))
			n_streams = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--tokens"))
			n_tokens = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			rng = strtoull(argv[i + 1], NULL, 0) | 1;
	}
	if (!vocab || n_streams < 1 || n_tokens < 1) {
		fprintf(stderr, "usage: grammar-mask --vocab GGUF [--schema FILE] [--streams N] "
		                "[--tokens K per stream] [--seed S]\n");
		return 2;
	}
	char err[SINKD_ERR_LEN] = "", path[256] = "";
	struct gguf_file *f = NULL;
	struct tokenizer *tok = NULL;
	struct vocab_trie *trie = NULL;
	struct grammar *g = NULL;
	if (gguf_open(vocab, &f, err, sizeof(err)) ||
	    tokenizer_new_from_gguf(f, &tok, err, sizeof(err)))
		goto fail;
	gguf_close(f);
	double t0 = now_us();
	if (vocab_trie_new(tok, &trie, err, sizeof(err)))
		goto fail;
	double trie_ms = (now_us() - t0) / 1e3;
	char *text = NULL;
	if (schema_file) {
		FILE *sf = fopen(schema_file, "rb");
		if (!sf) {
			snprintf(err, sizeof(err), "cannot open %s", schema_file);
			goto fail;
		}
		fseek(sf, 0, SEEK_END);
		long len = ftell(sf);
		fseek(sf, 0, SEEK_SET);
		text = calloc(1, (size_t)len + 1);
		if (fread(text, 1, (size_t)len, sf) != (size_t)len)
			len = 0;
		fclose(sf);
	}
	cJSON *schema = cJSON_Parse(text ? text : default_schema);
	free(text);
	t0 = now_us();
	if (!schema || grammar_from_json_schema(schema, &g, path, sizeof(path), err, sizeof(err)))
		goto fail;
	double compile_ms = (now_us() - t0) / 1e3;
	cJSON_Delete(schema);

	int n = tokenizer_n_vocab(tok);
	float *bonus = calloc((size_t)n, sizeof(*bonus));
	for (int32_t id = 0; id < n; id++) {
		char piece[256];
		size_t len = tokenizer_token_piece(tok, id, piece, sizeof(piece));
		/* by the first byte only: quotes end strings (and inside a string "}" is just a
		 * character, so brackets get nothing: where they are allowed, few tokens are) */
		bonus[id] = len && strchr("\"@", piece[0]) ? 1.0f : 0.0f;
		if (tokenizer_is_eog(tok, id))
			bonus[id] = 3;
	}
	struct stream *ss = calloc((size_t)n_streams, sizeof(*ss));
	for (int s = 0; s < n_streams; s++) {
		ss[s].logits = malloc((size_t)n * sizeof(float));
		if (grammar_matcher_new(g, trie, &ss[s].m)) {
			snprintf(err, sizeof(err), "out of memory");
			goto fail;
		}
	}
	size_t total = (size_t)n_tokens * (size_t)n_streams, n_warm = 0, n_cold = 0;
	double *warm = malloc(total * sizeof(double)), cold_sum = 0;
	bool cold = true;
	long docs = 0;
	for (int k = 0; k < n_tokens; k++) {
		for (int s = 0; s < n_streams; s++) {
			struct stream *st = &ss[s];
			for (int i = 0; i < n; i++)
				st->logits[i] = 0.0f;
			double a = now_us();
			if (grammar_matcher_apply(st->m, st->logits)) {
				snprintf(err, sizeof(err), "apply failed");
				goto fail;
			}
			double b = now_us();
			int32_t id = pick(st->logits, bonus, n, st->step, &rng);
			bool end = tokenizer_is_eog(tok, id);
			double c = now_us();
			if (!end && grammar_matcher_accept_token(st->m, id)) {
				snprintf(err, sizeof(err), "accept failed");
				goto fail;
			}
			double cost = (b - a) + (now_us() - c);
			st->step++;
			if (cold && s == 0) {
				cold_sum += cost;
				n_cold++;
			} else {
				warm[n_warm++] = cost;
			}
			if (end || grammar_matcher_done(st->m)) {
				grammar_matcher_reset(st->m);
				st->step = 0;
				docs++;
				if (s == 0)
					cold = false;
			}
		}
	}
	double sum = 0;
	for (size_t i = 0; i < n_warm; i++)
		sum += warm[i];
	qsort(warm, n_warm, sizeof(double), cmp_double);
	double mean = n_warm ? sum / (double)n_warm : 0;
	printf(
	    "{\"streams\":%d,\"tokens\":%zu,\"docs\":%ld,\"us_per_token\":%.2f,"
	    "\"ms_per_step\":%.4f,\"cold_us_per_token\":%.2f,\"cold_tokens\":%zu,\"p99_us\":%.1f,"
	    "\"max_us\":%.1f,\"compile_ms\":%.2f,\"trie_ms\":%.2f}\n",
	    n_streams, total, docs, mean, mean * n_streams / 1e3,
	    n_cold ? cold_sum / (double)n_cold : 0, n_cold,
	    n_warm ? warm[(size_t)(0.99 * (double)(n_warm - 1))] : 0, n_warm ? warm[n_warm - 1] : 0,
	    compile_ms, trie_ms);
	return 0;
fail:
	fprintf(stderr, "grammar-mask: %s%s%s\n", err, path[0] ? " at " : "", path);
	return 1;
}
