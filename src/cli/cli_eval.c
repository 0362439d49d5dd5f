/* `sinkd eval`: streaming perplexity of a model on a text under a cache
 * geometry.  Each non-empty line of the text is one document, tokenized on
 * its own as a prompt (BOS + SentencePiece space prefix); the stream is the
 * documents concatenated and flows through ONE session whose tiered sink
 * cache evicts as it goes, exactly as a long-running daemon stream would.
 * Every token after the first (or every K-th with --every) is scored: its
 * negative log-likelihood under the logits of the previous position.
 * --baseline recompute instead predicts each scored token from scratch over
 * the last sink_keep_count + window_size tokens (a fresh cache per
 * prediction: dense attention, positions 0.., slow and exact).  It also
 * reports, per layer, the mean share of attention mass that queries give to
 * the sink tokens.  It does not generate, batch several streams or serve. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/cli_common.h"
#include "config/config.h"
#include "engine/backend.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

struct eval_args {
	const char *config_path;
	const char *text_path;
	const char *model_path;
	const char **sets; /* (argc) */
	size_t n_sets;
	bool json;
	bool recompute;
	long chunk;    /* tokens per forward call */
	long every;    /* score every K-th token */
	long pin;      /* the stream's first N tokens pinned (0: none) */
	int n_threads; /* -1: from the config */
};

/* Everything one run owns; eval_state_free() releases what was made. */
struct eval_state {
	struct cli_engine eng; /* config, model, tokenizer, backend */
	struct sinkcache_geometry geom;
	int32_t *ids; /* (n_ids) the whole stream */
	size_t n_ids;
	size_t n_docs;
	float *logits;               /* (chunk, n_vocab) */
	struct backend_token *batch; /* (chunk) */
	float *mass;                 /* (n_layers, n_heads) one forward's sink mass */
	double *mass_sum;            /* (n_layers) summed head-mean shares */
	size_t n_mass;               /* queries summed into mass_sum */
	double nll_sum;
	size_t n_scored;
};

static void eval_usage(FILE *out)
{
	fprintf(out,
	        "usage: sinkd eval --config FILE --text FILE [--set key=value ...] [--json]\n"
	        "                  [--chunk N] [--baseline recompute] [--every K] [--model FILE]\n"
	        "                  [--threads N] [--pin-prefix-tokens N]\n"
	        "Streaming perplexity: each non-empty line of the text is one document\n"
	        "(BOS + space prefix); the stream of all documents flows through one\n"
	        "session with the configured cache geometry; every token after the first\n"
	        "(or every K-th) is scored.  --chunk N feeds N tokens per forward call;\n"
	        "--baseline recompute predicts each scored token from scratch over the last\n"
	        "sink_keep_count + window_size tokens.  --pin-prefix-tokens N keeps the\n"
	        "stream's first N tokens in the sink tier, as a pinned system prompt\n"
	        "(inference.cache.max_pinned_tokens at most).  --json ends stdout with one\n"
	        "JSON line.\n");
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_count(const char *opt, const char *s, long lo, long hi, long *out)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "sinkd eval: %s needs an integer in [%ld, %ld], got '%s'\n", opt,
		        lo, hi, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* One option with a value; 1 when consumed, 0 when not this option, <0 on error. */
static int parse_valued(struct eval_args *a, const char *opt, const char *val)
{
	long v = 0;
	int rc = 0;
	if (!strcmp(opt, "--config"))
		a->config_path = val;
	else if (!strcmp(opt, "--text"))
		a->text_path = val;
	else if (!strcmp(opt, "--model"))
		a->model_path = val;
	else if (!strcmp(opt, "--set"))
		a->sets[a->n_sets++] = val;
	else if (!strcmp(opt, "--chunk") && !(rc = parse_count(opt, val, 1, 65536, &v)))
		a->chunk = v;
	else if (!strcmp(opt, "--every") && !(rc = parse_count(opt, val, 1, 1L << 30, &v)))
		a->every = v;
	else if (!strcmp(opt, "--pin-prefix-tokens") &&
	         !(rc = parse_count(opt, val, 0, 1L << 20, &v)))
		a->pin = v;
	else if (!strcmp(opt, "--threads") && !(rc = parse_count(opt, val, 0, 1024, &v)))
		a->n_threads = (int)v;
	else if (!strcmp(opt, "--baseline")) {
		if (strcmp(val, "recompute")) {
			fprintf(stderr, "sinkd eval: --baseline: '%s' (allowed: recompute)\n", val);
			return -EINVAL;
		}
		a->recompute = true;
	} else
		return rc ? rc : 0;
	return rc ? rc : 1;
}

static int parse_flag(void *args, const char *opt)
{
	struct eval_args *a = args;
	if (strcmp(opt, "--json") != 0)
		return 0;
	a->json = true;
	return 1;
}

static int parse_value(void *args, const char *opt, const char *val)
{
	return parse_valued(args, opt, val);
}

static int parse_eval_args(int argc, char **argv, struct eval_args *a)
{
	a->chunk = 1;
	a->every = 1;
	a->n_threads = -1;
	a->sets = calloc((size_t)argc + 1, sizeof(char *));
	if (!a->sets)
		return -ENOMEM;
	int rc = cli_parse_args(argc, argv, "eval", a, parse_flag, parse_value, eval_usage);
	if (rc)
		return rc;
	if (!a->text_path) {
		fprintf(stderr, "sinkd eval: --text FILE is required\n");
		return -EINVAL;
	}
	return 0;
}

static void eval_state_free(struct eval_state *st)
{
	free(st->ids);
	free(st->logits);
	free(st->batch);
	free(st->mass);
	free(st->mass_sum);
	cli_engine_close(&st->eng);
}

static int setup_engine(struct eval_state *st, const struct eval_args *a, char *err, size_t err_len)
{
	int rc = cli_engine_open(&st->eng, a->config_path, a->sets, a->n_sets, a->model_path,
	                         a->n_threads, err, err_len);
	if (rc)
		return rc;
	config_cache_geometry(&st->eng.cfg, &st->eng.model->hp, &st->geom);
	if (a->pin > st->eng.cfg.inference.cache.max_pinned_tokens)
		return err_set(err, err_len, -EINVAL,
		               "--pin-prefix-tokens %ld: inference.cache.max_pinned_tokens is %lld",
		               a->pin, (long long)st->eng.cfg.inference.cache.max_pinned_tokens);
	sinkcache_geometry_pin(&st->geom, (int)a->pin);
	if ((rc = sinkcache_geometry_check(&st->geom, err, err_len)))
		return rc;
	const struct model_hparams *hp = &st->eng.model->hp;
	st->logits = malloc((size_t)a->chunk * (size_t)hp->n_vocab * sizeof(float));
	st->batch = calloc((size_t)a->chunk, sizeof(*st->batch));
	st->mass = calloc((size_t)hp->n_layers * (size_t)hp->n_heads, sizeof(float));
	st->mass_sum = calloc((size_t)hp->n_layers, sizeof(double));
	if (!st->logits || !st->batch || !st->mass || !st->mass_sum)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	return 0;
}

/* Appends the tokens of one document (BOS + text) to the stream. */
static int add_document(struct eval_state *st, const char *line, size_t len, char *err,
                        size_t err_len)
{
	int32_t *ids = NULL;
	size_t n = 0;
	int rc = tokenizer_encode(st->eng.tok, line, len, true, false, &ids, &n, err, err_len);
	if (rc)
		return rc;
	int32_t *grown = realloc(st->ids, (st->n_ids + n) * sizeof(int32_t));
	if (!grown) {
		free(ids);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	memcpy(grown + st->n_ids, ids, n * sizeof(int32_t));
	st->ids = grown;
	st->n_ids += n;
	st->n_docs++;
	free(ids);
	return 0;
}

static int read_stream(struct eval_state *st, const char *path, char *err, size_t err_len)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return err_set(err, err_len, -errno, "%s: %s", path, strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int rc = 0;
	while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (len > 0)
			rc = add_document(st, line, (size_t)len, err, err_len);
	}
	free(line);
	fclose(f);
	if (rc == 0 && st->n_ids < 2)
		rc = err_set(err, err_len, -EINVAL, "%s: fewer than two tokens to score", path);
	return rc;
}

/* NLL of `target` under one row of logits (log-sum-exp in double). */
static double token_nll(const float *logits, int n_vocab, int32_t target)
{
	float mx = logits[0];
	for (int i = 1; i < n_vocab; i++)
		mx = logits[i] > mx ? logits[i] : mx;
	double sum = 0.0;
	for (int i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - mx);
	return log(sum) + mx - (double)logits[target];
}

static bool eval_scored(const struct eval_args *a, size_t t)
{
	return t >= 1 && t % (size_t)a->every == 0;
}

/* Adds one forward's sink mass (summed over n_queries queries) to the
 * per-layer sums, and clears it. */
static void take_mass(struct eval_state *st, size_t n_queries)
{
	const struct model_hparams *hp = &st->eng.model->hp;
	for (int l = 0; l < hp->n_layers; l++) {
		double s = 0.0;
		for (int h = 0; h < hp->n_heads; h++)
			s += st->mass[(size_t)l * hp->n_heads + h];
		st->mass_sum[l] += s / hp->n_heads;
	}
	st->n_mass += n_queries;
	memset(st->mass, 0, (size_t)hp->n_layers * (size_t)hp->n_heads * sizeof(float));
}

/* Feeds ids[begin, end) through session s in chunks.  stream: scores every
 * scored token predicted inside the range and takes every query's sink
 * mass; else (recompute) only the last position's prediction of ids[end]. */
static int feed_range(struct eval_state *st, const struct eval_args *a, struct backend_session *s,
                      size_t begin, size_t end, bool stream, char *err, size_t err_len)
{
	int n_vocab = st->eng.model->hp.n_vocab;
	size_t chunk = (size_t)a->chunk;
	for (size_t i = begin; i < end; i += chunk) {
		size_t m = end - i < chunk ? end - i : chunk;
		for (size_t j = 0; j < m; j++) {
			size_t next = i + j + 1; /* the token this position predicts */
			bool want = stream ? next < st->n_ids && eval_scored(a, next) : next == end;
			bool mass = stream || next == end;
			st->batch[j] = (struct backend_token){.session = s,
			                                      .token = st->ids[i + j],
			                                      .want_logits = want,
			                                      .sink_mass = mass ? st->mass : NULL};
		}
		int rc = st->eng.be->ops->forward(st->eng.be, st->batch, m, st->logits, err, err_len);
		if (rc)
			return rc;
		take_mass(st, stream ? m : (i + m == end));
		for (size_t j = 0, row = 0; j < m; j++) {
			if (!st->batch[j].want_logits)
				continue;
			const float *lg = st->logits + row++ * (size_t)n_vocab;
			st->nll_sum += token_nll(lg, n_vocab, st->ids[i + j + 1]);
			st->n_scored++;
		}
	}
	return 0;
}

static int run_stream(struct eval_state *st, const struct eval_args *a, char *err, size_t err_len)
{
	struct backend_session *s = NULL;
	int rc = st->eng.be->ops->session_new(st->eng.be, &st->geom, &s, err, err_len);
	if (rc)
		return rc;
	if (st->geom.strategy == CACHE_STRATEGY_FULL &&
	    st->n_ids > (size_t)st->geom.max_context_length)
		rc = err_set(
		    err, err_len, -ENOSPC,
		    "the text has %zu tokens, more than max_context_length %d (strategy full)",
		    st->n_ids, st->geom.max_context_length);
	else
		rc = feed_range(st, a, s, 0, st->n_ids - 1, true, err, err_len);
	st->eng.be->ops->session_free(st->eng.be, s);
	return rc;
}

/* Each scored token from a fresh session over the previous S + W tokens. */
static int run_recompute(struct eval_state *st, const struct eval_args *a, char *err,
                         size_t err_len)
{
	size_t span = st->geom.strategy == CACHE_STRATEGY_FULL
	                  ? (size_t)st->geom.max_context_length
	                  : (size_t)st->geom.sink_keep_count + (size_t)st->geom.window_size;
	for (size_t t = 1; t < st->n_ids; t++) {
		if (!eval_scored(a, t))
			continue;
		struct backend_session *s = NULL;
		int rc = st->eng.be->ops->session_new(st->eng.be, &st->geom, &s, err, err_len);
		if (rc)
			return rc;
		size_t begin = t > span ? t - span : 0;
		rc = feed_range(st, a, s, begin, t, false, err, err_len);
		st->eng.be->ops->session_free(st->eng.be, s);
		if (rc)
			return rc;
	}
	return 0;
}

static const char *const strategy_text[] = {"sliding_window", "full"};
static const char *const positions_text[] = {"cache", "original"};
static const char *const dtype_text[] = {"float32", "float16", "bfloat16"};

static void print_config_json(const struct sinkcache_geometry *g, const struct eval_args *a,
                              FILE *out)
{
	fprintf(out,
	        "{\"strategy\":\"%s\",\"sink_keep_count\":%d,\"window_size\":%d,"
	        "\"max_context_length\":%d,\"rope_positions\":\"%s\",\"dtype\":\"%s\","
	        "\"quantization\":{\"enabled\":%s,\"bits\":%d,\"protect_sinks\":%s,"
	        "\"full_precision_recent\":%d},\"bound_bytes\":%zu,"
	        "\"baseline\":\"%s\",\"chunk\":%ld,\"every\":%ld,\"pinned_tokens\":%ld}",
	        strategy_text[g->strategy], g->sink_keep_count, g->window_size,
	        g->max_context_length, positions_text[g->rope_positions], dtype_text[g->dtype],
	        g->quant_enabled ? "true" : "false", g->quant_bits,
	        g->protect_sinks ? "true" : "false", g->full_precision_recent,
	        sinkcache_bound_bytes(g), a->recompute ? "recompute" : "stream", a->chunk,
	        a->every, a->pin);
}

static void print_report(const struct eval_state *st, const struct eval_args *a, double secs)
{
	const struct sinkcache_geometry *g = &st->geom;
	int n_layers = st->eng.model->hp.n_layers;
	double mean = st->n_scored ? st->nll_sum / (double)st->n_scored : 0.0;
	printf("model        %s\n", st->eng.model->name);
	printf("stream       %zu documents, %zu tokens, %zu scored%s\n", st->n_docs, st->n_ids,
	       st->n_scored, a->recompute ? " (recompute baseline)" : "");
	printf("cache        %s, %d sinks, window %d, positions %s, %s", strategy_text[g->strategy],
	       g->sink_keep_count, g->window_size, positions_text[g->rope_positions],
	       dtype_text[g->dtype]);
	if (a->pin > 0)
		printf(", first %ld tokens pinned", a->pin);
	if (g->quant_enabled)
		printf(", int%d (%d recent full, sinks %s)", g->quant_bits,
		       g->full_precision_recent, g->protect_sinks ? "protected" : "quantized");
	printf("\nmean NLL     %.5f\nperplexity   %.5f\n", mean, exp(mean));
	printf("sink share  ");
	for (int l = 0; l < n_layers; l++)
		printf(" L%d %.4f", l, st->n_mass ? st->mass_sum[l] / (double)st->n_mass : 0.0);
	printf("\ntime         %.2f s (%.1f scored tokens/s)\n", secs,
	       secs > 0 ? (double)st->n_scored / secs : 0.0);
	if (!a->json)
		return;
	printf("{\"tokens\":%zu,\"scored\":%zu,\"mean_nll\":%.8f,\"perplexity\":%.8f,"
	       "\"sink_attention_share\":[",
	       st->n_ids, st->n_scored, mean, exp(mean));
	for (int l = 0; l < n_layers; l++)
		printf("%s%.6f", l ? "," : "",
		       st->n_mass ? st->mass_sum[l] / (double)st->n_mass : 0.0);
	printf("],\"seconds\":%.3f,\"config\":", secs);
	print_config_json(g, a, stdout);
	printf("}\n");
}

static int run_eval(struct eval_state *st, const struct eval_args *a, char *err, size_t err_len)
{
	int rc = setup_engine(st, a, err, err_len);
	if (rc)
		return rc;
	if ((rc = read_stream(st, a->text_path, err, err_len)))
		return rc;
	double t0 = now_s();
	rc = a->recompute ? run_recompute(st, a, err, err_len) : run_stream(st, a, err, err_len);
	if (rc)
		return rc;
	print_report(st, a, now_s() - t0);
	return 0;
}

int cli_eval(int argc, char **argv)
{
	struct eval_args a = {0};
	int rc = parse_eval_args(argc, argv, &a);
	if (rc) {
		free(a.sets);
		return rc > 0 ? 0 : 2;
	}
	struct eval_state st = {0};
	char err[SINKD_ERR_LEN] = "";
	rc = run_eval(&st, &a, err, sizeof(err));
	if (rc)
		fprintf(stderr, "sinkd eval: %s\n", err);
	eval_state_free(&st);
	free(a.sets);
	return rc == 0 ? 0 : rc == -EINVAL ? 2 : 1;
}
