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
 * the sink tokens.  --probe scores only each line's answer (the text after
 * a TAB): a retrieval probe asks for something the window has moved past.
 * It does not generate, batch several streams or serve. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/cli_common.h"
#include "cli/eval_trace.h"
#include "config/config.h"
#include "engine/backend.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "util/monotime.h"

struct eval_args {
	const char *config_path;
	const char *text_path;
	const char *model_path;
	const char **sets; /* (argc) */
	size_t n_sets;
	bool json;
	bool recompute;
	bool probe;    /* lines are CONTEXT<TAB>ANSWER; only answers scored */
	long chunk;    /* tokens per forward call */
	long every;    /* score every K-th token */
	long pin;      /* the stream's first N tokens pinned (0: none) */
	struct eval_trace_opts trace; /* --trace, --heatmap */
	int n_threads; /* -1: from the config */
};

/* Everything one run owns; eval_state_free() releases what was made. */
struct eval_state {
	struct cli_engine eng; /* config, model, tokenizer, backend */
	struct cache_geometry geom;
	int32_t *ids; /* (n_ids) the whole stream */
	size_t n_ids;
	size_t n_docs;
	float *logits;               /* (chunk, n_vocab) */
	struct backend_token *batch; /* (chunk) */
	/* (2, n_layers, n_heads) one forward's sink mass, then its learned sink
	 * logits' mass (gpt-oss) */
	float *mass;
	double *mass_sum;            /* (2, n_layers) summed head-mean shares */
	bool learned_sinks;          /* the model has learned sink logits */
	size_t n_mass;               /* queries summed into mass_sum */
	double nll_sum;
	size_t n_scored;
	/* --probe: which tokens are scored, and each answer's token range */
	bool *scored;         /* (n_ids) */
	double *token_nll;    /* (n_ids) NLL of each scored token */
	bool *token_top;      /* (n_ids) scored token is the argmax */
	size_t (*answers)[2]; /* (n_answers) [begin, end) in ids */
	size_t n_answers;
	struct sinkcache_stats stats; /* the stream session's, at its end */
	struct eval_trace *trace;     /* --trace / --heatmap, else NULL */
};

static void eval_usage(FILE *out)
{
	fprintf(out,
	        "usage: sinkd eval --config FILE --text FILE [--set key=value ...] [--json]\n"
	        "                  [--chunk N] [--baseline recompute] [--every K] [--model FILE]\n"
	        "                  [--threads N] [--pin-prefix-tokens N] [--probe]\n"
	        "                  [--trace FILE.jsonl [--trace-every K]]\n"
	        "                  [--heatmap DIR [--heatmap-every N] [--heatmap-layer L]]\n"
	        "Streaming perplexity: each non-empty line of the text is one document\n"
	        "(BOS + space prefix); the stream of all documents flows through one\n"
	        "session with the configured cache geometry; every token after the first\n"
	        "(or every K-th) is scored.  --chunk N feeds N tokens per forward call;\n"
	        "--baseline recompute predicts each scored token from scratch over the last\n"
	        "sink_keep_count + window_size tokens.  --pin-prefix-tokens N keeps the\n"
	        "stream's first N tokens in the sink tier, as a pinned system prompt\n"
	        "(inference.cache.max_pinned_tokens at most).  --probe: each line is\n"
	        "CONTEXT<TAB>ANSWER and only the answer's tokens are scored; reports the\n"
	        "mean probability of the whole answer and how many greedy decoding would\n"
	        "give.  --json ends stdout with one JSON line.\n"
	        "--trace writes the cache trace of every scored step (every K-th) as a JSON\n"
	        "line: per layer each slot's stream index, tier, RoPE position and the\n"
	        "attention it received.  --heatmap writes PNG heatmaps to DIR: a step image\n"
	        "every N-th scored step (default 256), lifecycle.png (tiers over the steps;\n"
	        "layer L, default all) and summary.png (the moving-average attention at the\n"
	        "end).  Both need the cpu backend and score one token per forward pass.\n");
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
	else if (!strcmp(opt, "--trace"))
		a->trace.jsonl_path = val;
	else if (!strcmp(opt, "--trace-every") && !(rc = parse_count(opt, val, 1, 1L << 30, &v)))
		a->trace.trace_every = v;
	else if (!strcmp(opt, "--heatmap"))
		a->trace.heatmap_dir = val;
	else if (!strcmp(opt, "--heatmap-every") &&
	         !(rc = parse_count(opt, val, 1, 1L << 30, &v)))
		a->trace.heatmap_every = v;
	else if (!strcmp(opt, "--heatmap-layer") && !(rc = parse_count(opt, val, -1, 4095, &v)))
		a->trace.heatmap_layer = (int)v;
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
	if (!strcmp(opt, "--json"))
		a->json = true;
	else if (!strcmp(opt, "--probe"))
		a->probe = true;
	else
		return 0;
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
	a->trace.trace_every = 1;
	a->trace.heatmap_every = 256;
	a->trace.heatmap_layer = -1;
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
	if ((a->trace.jsonl_path || a->trace.heatmap_dir) && a->recompute) {
		fprintf(stderr, "sinkd eval: --trace and --heatmap trace the stream's cache; "
		                "--baseline recompute has none\n");
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
	free(st->scored);
	free(st->token_nll);
	free(st->token_top);
	free(st->answers);
	eval_trace_free(st->trace);
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
	cache_geometry_pin(&st->geom, (int)a->pin);
	if ((rc = cache_geometry_check(&st->geom, err, err_len)))
		return rc;
	const struct model_hparams *hp = &st->eng.model->hp;
	st->logits = malloc((size_t)a->chunk * (size_t)hp->n_vocab * sizeof(float));
	st->batch = calloc((size_t)a->chunk, sizeof(*st->batch));
	st->mass = calloc(2 * (size_t)hp->n_layers * (size_t)hp->n_heads, sizeof(float));
	st->mass_sum = calloc(2 * (size_t)hp->n_layers, sizeof(double));
	for (int l = 0; l < hp->n_layers; l++)
		st->learned_sinks = st->learned_sinks || st->eng.model->layers[l].attn_sinks;
	if (!st->logits || !st->batch || !st->mass || !st->mass_sum)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	if (a->trace.heatmap_layer >= hp->n_layers)
		return err_set(err, err_len, -EINVAL, "--heatmap-layer %d: the model has layers 0..%d",
		               a->trace.heatmap_layer, hp->n_layers - 1);
	if (a->trace.jsonl_path || a->trace.heatmap_dir)
		return eval_trace_new(&a->trace, st->eng.be, &st->geom, &st->trace, err, err_len);
	return 0;
}

/* Marks ids[begin, end) as one answer to score (--probe). */
static int add_answer(struct eval_state *st, size_t begin, size_t end, char *err, size_t err_len)
{
	bool *scored = realloc(st->scored, st->n_ids * sizeof(bool));
	if (scored)
		st->scored = scored;
	size_t(*answers)[2] = realloc(st->answers, (st->n_answers + 1) * sizeof(*answers));
	if (answers)
		st->answers = answers;
	if (!scored || !answers)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	for (size_t t = st->n_answers ? st->answers[st->n_answers - 1][1] : 0; t < begin; t++)
		scored[t] = false;
	for (size_t t = begin; t < end; t++)
		scored[t] = true;
	answers[st->n_answers][0] = begin;
	answers[st->n_answers][1] = end;
	st->n_answers++;
	return 0;
}

/* Appends the tokens of one document (BOS + text) to the stream.  With
 * --probe the line is CONTEXT<TAB>ANSWER: the document is both joined, and
 * the answer is the tokens past those of the context alone (which must be
 * a prefix of the whole; an answer starting with a space ensures that). */
static int add_document(struct eval_state *st, const struct eval_args *a, size_t line_no,
                        const char *line, size_t len, char *err, size_t err_len)
{
	int32_t *ids = NULL, *ctx = NULL;
	size_t n = 0, n_ctx = 0;
	char *joined = NULL;
	const char *tab = a->probe ? memchr(line, '\t', len) : NULL;
	int rc = 0;
	if (a->probe && (!tab || tab + 1 == line + len || tab == line)) {
		rc = err_set(err, err_len, -EINVAL,
		             "line %zu: --probe needs CONTEXT<TAB>ANSWER, both non-empty", line_no);
		goto out;
	}
	if (tab) {
		size_t n_head = (size_t)(tab - line);
		if (!(joined = malloc(len))) {
			rc = err_set(err, err_len, -ENOMEM, "out of memory");
			goto out;
		}
		memcpy(joined, line, n_head);
		memcpy(joined + n_head, tab + 1, len - n_head - 1);
		if ((rc = tokenizer_encode(st->eng.tok, line, n_head, true, false, &ctx, &n_ctx,
		                           err, err_len)) ||
		    (rc = tokenizer_encode(st->eng.tok, joined, len - 1, true, false, &ids, &n, err,
		                           err_len)))
			goto out;
		if (n <= n_ctx || memcmp(ids, ctx, n_ctx * sizeof(int32_t))) {
			rc = err_set(err, err_len, -EINVAL,
			             "line %zu: the context's tokens are not a prefix of the whole "
			             "line's (start the answer with a space)",
			             line_no);
			goto out;
		}
	} else if ((rc = tokenizer_encode(st->eng.tok, line, len, true, false, &ids, &n, err,
	                                  err_len)))
		goto out;
	int32_t *grown = realloc(st->ids, (st->n_ids + n) * sizeof(int32_t));
	if (!grown) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	memcpy(grown + st->n_ids, ids, n * sizeof(int32_t));
	st->ids = grown;
	st->n_ids += n;
	st->n_docs++;
	if (tab)
		rc = add_answer(st, st->n_ids - n + n_ctx, st->n_ids, err, err_len);
out:
	free(ids);
	free(ctx);
	free(joined);
	return rc;
}

static int read_stream(struct eval_state *st, const struct eval_args *a, const char *path,
                       char *err, size_t err_len)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return err_set(err, err_len, -errno, "%s: %s", path, strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	size_t line_no = 0;
	int rc = 0;
	while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
		line_no++;
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (len > 0)
			rc = add_document(st, a, line_no, line, (size_t)len, err, err_len);
	}
	free(line);
	fclose(f);
	if (rc) {
		err_prefix(err, err_len, path);
		return rc;
	}
	if (st->n_ids < 2)
		return err_set(err, err_len, -EINVAL, "%s: fewer than two tokens to score", path);
	if (a->probe) {
		st->token_nll = calloc(st->n_ids, sizeof(double));
		st->token_top = calloc(st->n_ids, sizeof(bool));
		/* every line ends with its answer, so add_answer() sized scored */
		if (!st->token_nll || !st->token_top)
			return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	return 0;
}

/* NLL of `target` under one row of logits (log-sum-exp in double); *top:
 * whether no other token scores higher. */
static double token_nll(const float *logits, int n_vocab, int32_t target, bool *top)
{
	float mx = logits[0];
	for (int i = 1; i < n_vocab; i++)
		mx = logits[i] > mx ? logits[i] : mx;
	double sum = 0.0;
	for (int i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - mx);
	*top = logits[target] >= mx;
	return log(sum) + mx - (double)logits[target];
}

static bool eval_scored(const struct eval_state *st, const struct eval_args *a, size_t t)
{
	if (st->scored)
		return st->scored[t] && t % (size_t)a->every == 0;
	return t >= 1 && t % (size_t)a->every == 0;
}

/* Adds one forward's sink mass (summed over n_queries queries) to the
 * per-layer sums, and clears it. */
static void take_mass(struct eval_state *st, size_t n_queries)
{
	const struct model_hparams *hp = &st->eng.model->hp;
	for (int l = 0; l < 2 * hp->n_layers; l++) {
		double s = 0.0;
		for (int h = 0; h < hp->n_heads; h++)
			s += st->mass[(size_t)l * hp->n_heads + h];
		st->mass_sum[l] += s / hp->n_heads;
	}
	st->n_mass += n_queries;
	memset(st->mass, 0, 2 * (size_t)hp->n_layers * (size_t)hp->n_heads * sizeof(float));
}

/* Feeds ids[begin, end) through session s in chunks.  stream: scores every
 * scored token predicted inside the range and takes every query's sink
 * mass; else (recompute) only the last position's prediction of ids[end]. */
static int feed_range(struct eval_state *st, const struct eval_args *a, struct backend_session *s,
                      size_t begin, size_t end, bool stream, char *err, size_t err_len)
{
	int n_vocab = st->eng.model->hp.n_vocab;
	size_t chunk = (size_t)a->chunk;
	for (size_t i = begin, m = 0; i < end; i += m) {
		size_t limit = end - i < chunk ? end - i : chunk, wants = 0;
		bool traced = false;
		for (m = 0; m < limit && !traced; m++) {
			size_t next = i + m + 1; /* the token this position predicts */
			bool want =
			    stream ? next < st->n_ids && eval_scored(st, a, next) : next == end;
			bool mass = stream || next == end;
			st->batch[m] = (struct backend_token){.session = s,
			                                      .token = st->ids[i + m],
			                                      .want_logits = want,
			                                      .sink_mass = mass ? st->mass : NULL};
			if (mass && st->learned_sinks)
				st->batch[m].learned_sink_mass = st->mass + st->eng.model->hp.n_layers *
				                                                st->eng.model->hp.n_heads;
			/* a traced step ends its forward pass, so the trace is its own */
			traced = want && st->trace && eval_trace_wants(st->trace, st->n_scored + wants);
			wants += want;
		}
		int rc =
		    st->eng.be->ops->forward(st->eng.be, st->batch, m, st->logits, err, err_len);
		if (rc)
			return rc;
		take_mass(st, stream ? m : (i + m == end));
		for (size_t j = 0, row = 0; j < m; j++) {
			if (!st->batch[j].want_logits)
				continue;
			const float *lg = st->logits + row++ * (size_t)n_vocab;
			bool top = false;
			double nll = token_nll(lg, n_vocab, st->ids[i + j + 1], &top);
			st->nll_sum += nll;
			st->n_scored++;
			if (st->token_nll) {
				st->token_nll[i + j + 1] = nll;
				st->token_top[i + j + 1] = top;
			}
			if (traced && j == m - 1 &&
			    (rc = eval_trace_step(st->trace, s, st->n_scored - 1, (int64_t)(i + j), nll,
			                          err, err_len)))
				return rc;
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
	if (st->trace && (rc = eval_trace_start(st->trace, s, err, err_len)))
		goto out;
	if (st->geom.strategy == CACHE_STRATEGY_FULL &&
	    st->n_ids > (size_t)st->geom.max_context_length)
		rc = err_set(
		    err, err_len, -ENOSPC,
		    "the text has %zu tokens, more than max_context_length %d (strategy full)",
		    st->n_ids, st->geom.max_context_length);
	else
		rc = feed_range(st, a, s, 0, st->n_ids - 1, true, err, err_len);
	if (!rc && st->trace)
		rc = eval_trace_finish(st->trace, s, err, err_len);
out:
	st->eng.be->ops->session_stats(st->eng.be, s, &st->stats);
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
		if (!eval_scored(st, a, t))
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

static void print_config_json(const struct cache_geometry *g, const struct eval_args *a,
                              FILE *out)
{
	fprintf(out,
	        "{\"strategy\":\"%s\",\"sink_keep_count\":%d,\"window_size\":%d,"
	        "\"max_context_length\":%d,\"rope_positions\":\"%s\",\"dtype\":\"%s\","
	        "\"quantization\":{\"enabled\":%s,\"bits\":%d,\"protect_sinks\":%s,"
	        "\"full_precision_recent\":%d},\"anchors\":{\"max_tokens\":%d,"
	        "\"promote_threshold\":%g,\"demote_after_steps\":%d},\"bound_bytes\":%zu,"
	        "\"baseline\":\"%s\",\"chunk\":%ld,\"every\":%ld,\"pinned_tokens\":%ld}",
	        strategy_text[g->strategy], g->sink_keep_count, g->window_size,
	        g->max_context_length, positions_text[g->rope_positions], dtype_text[g->dtype],
	        g->quant_enabled ? "true" : "false", g->quant_bits,
	        g->protect_sinks ? "true" : "false", g->full_precision_recent, g->anchor_max,
	        (double)g->anchor_promote, g->anchor_demote_steps, cache_geometry_bound_bytes(g),
	        a->recompute ? "recompute" : "stream", a->chunk, a->every, a->pin);
}

static void print_report(const struct eval_state *st, const struct eval_args *a, double secs)
{
	const struct cache_geometry *g = &st->geom;
	int n_layers = st->eng.model->hp.n_layers;
	double mean = st->n_scored ? st->nll_sum / (double)st->n_scored : 0.0;
	double answer_p = 0.0;
	size_t answer_top = 0;
	for (size_t i = 0; i < st->n_answers; i++) {
		double nll = 0.0;
		bool top = true;
		for (size_t t = st->answers[i][0]; t < st->answers[i][1]; t++) {
			nll += st->token_nll[t];
			top = top && st->token_top[t];
		}
		answer_p += exp(-nll) / (double)st->n_answers;
		answer_top += top;
	}
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
	if (g->anchor_max > 0)
		printf(", up to %d anchors (threshold %g, demoted after %d steps)", g->anchor_max,
		       (double)g->anchor_promote, g->anchor_demote_steps);
	printf("\nmean NLL     %.5f\nperplexity   %.5f\n", mean, exp(mean));
	if (a->probe)
		printf("answers      %zu, mean probability %.5f, greedy %zu (%.1f%%)\n",
		       st->n_answers, answer_p, answer_top,
		       100.0 * (double)answer_top / (double)st->n_answers);
	if (g->anchor_max > 0 && !a->recompute)
		printf("anchors      %d at the end (layer 0), %llu promoted, %llu demoted (all "
		       "layers)\n",
		       st->stats.n_anchor, (unsigned long long)st->stats.anchors_promoted,
		       (unsigned long long)st->stats.anchors_demoted);
	printf("sink share  ");
	for (int l = 0; l < n_layers; l++)
		printf(" L%d %.4f", l, st->n_mass ? st->mass_sum[l] / (double)st->n_mass : 0.0);
	if (st->learned_sinks) { /* the model's learned sink logits, beside the kept sinks */
		printf("\nlearned sink");
		for (int l = n_layers; l < 2 * n_layers; l++)
			printf(" L%d %.4f", l - n_layers,
			       st->n_mass ? st->mass_sum[l] / (double)st->n_mass : 0.0);
	}
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
	printf("]");
	for (int l = n_layers; st->learned_sinks && l < 2 * n_layers; l++)
		printf("%s%.6f", l == n_layers ? ",\"learned_sink_attention_share\":[" : ",",
		       st->n_mass ? st->mass_sum[l] / (double)st->n_mass : 0.0);
	if (st->learned_sinks)
		printf("]");
	if (a->probe)
		printf(",\"answers\":%zu,\"answer_probability\":%.8f,\"answer_greedy\":%zu",
		       st->n_answers, answer_p, answer_top);
	if (g->anchor_max > 0 && !a->recompute)
		printf(",\"anchors_promoted\":%llu,\"anchors_demoted\":%llu",
		       (unsigned long long)st->stats.anchors_promoted,
		       (unsigned long long)st->stats.anchors_demoted);
	printf(",\"seconds\":%.3f,\"config\":", secs);
	print_config_json(g, a, stdout);
	printf("}\n");
}

static int run_eval(struct eval_state *st, const struct eval_args *a, char *err, size_t err_len)
{
	int rc = setup_engine(st, a, err, err_len);
	if (rc)
		return rc;
	if ((rc = read_stream(st, a, a->text_path, err, err_len)))
		return rc;
	double t0 = monotime_s();
	rc = a->recompute ? run_recompute(st, a, err, err_len) : run_stream(st, a, err, err_len);
	if (rc)
		return rc;
	print_report(st, a, monotime_s() - t0);
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
