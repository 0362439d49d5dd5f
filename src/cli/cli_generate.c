/* `sinkd generate`: runs the model once on a prompt on the CPU backend and
 * streams the continuation to stdout as it is generated (streaming
 * detokenizer, stops on end-of-generation or --max-tokens), with throughput
 * on stderr.  The cache geometry comes from the configuration (--config and
 * --set, as for the daemon), so the sink/window settings can be tried from
 * the command line.  It does not batch several prompts or serve anything. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/cli_common.h"
#include "config/config.h"
#include "engine/backend.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "util/monotime.h"

struct generate_args {
	const char *model_path;
	const char *prompt;
	const char *config_path;
	const char **sets; /* (argc) */
	size_t n_sets;
	long max_tokens;
	int n_threads; /* -1: from the config */
	bool stats_json;
	struct sampler_params sp;
};

static void generate_usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: sinkd generate --model FILE --prompt TEXT [--config FILE] [--max-tokens N]\n"
	    "                      [--temperature T] [--seed S] [--top-k K] [--top-p P]\n"
	    "                      [--set key=value ...] [--stats-json] [--threads N]\n"
	    "Streams the continuation to stdout; tokens/s to stderr.  --stats-json ends\n"
	    "stderr with one JSON line of prompt and decode throughput.\n");
}

static int parse_number(const char *opt, const char *s, double lo, double hi, double *out)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "sinkd generate: %s needs a number in [%g, %g], got '%s'\n", opt,
		        lo, hi, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* One option with a value; returns 1 when consumed, 0 when not this option, <0 on error. */
static int parse_valued(struct generate_args *a, const char *opt, const char *val)
{
	double v = 0;
	int rc = 0;
	if (!strcmp(opt, "--model"))
		a->model_path = val;
	else if (!strcmp(opt, "--prompt"))
		a->prompt = val;
	else if (!strcmp(opt, "--config"))
		a->config_path = val;
	else if (!strcmp(opt, "--set"))
		a->sets[a->n_sets++] = val;
	else if (!strcmp(opt, "--max-tokens") && !(rc = parse_number(opt, val, 0, 1e9, &v)))
		a->max_tokens = (long)v;
	else if (!strcmp(opt, "--temperature") && !(rc = parse_number(opt, val, 0, 100, &v)))
		a->sp.temperature = (float)v;
	else if (!strcmp(opt, "--seed") && !(rc = parse_number(opt, val, 0, 1.8e19, &v)))
		a->sp.seed = (uint64_t)v;
	else if (!strcmp(opt, "--top-k") && !(rc = parse_number(opt, val, 0, 1e9, &v)))
		a->sp.top_k = (int)v;
	else if (!strcmp(opt, "--top-p") && !(rc = parse_number(opt, val, 0, 1, &v)))
		a->sp.top_p = (float)v;
	else if (!strcmp(opt, "--threads") && !(rc = parse_number(opt, val, 0, 1024, &v)))
		a->n_threads = (int)v;
	else
		return rc ? rc : 0;
	return rc ? rc : 1;
}

static int parse_flag(void *args, const char *opt)
{
	struct generate_args *a = args;
	if (strcmp(opt, "--stats-json") != 0)
		return 0;
	a->stats_json = true;
	return 1;
}

static int parse_value(void *args, const char *opt, const char *val)
{
	return parse_valued(args, opt, val);
}

static int parse_generate_args(int argc, char **argv, struct generate_args *a)
{
	sampler_params_default(&a->sp);
	a->sp.temperature = 0.8f;
	a->max_tokens = 128;
	a->n_threads = -1;
	a->sets = calloc((size_t)argc + 1, sizeof(char *));
	if (!a->sets)
		return -ENOMEM;
	int rc = cli_parse_args(argc, argv, "generate", a, parse_flag, parse_value, generate_usage);
	if (rc)
		return rc;
	if (!a->prompt) {
		fprintf(stderr, "sinkd generate: --prompt TEXT is required\n");
		return -EINVAL;
	}
	return 0;
}

/* Everything one run owns; generate_state_free() releases what was made. */
struct generate_state {
	struct cli_engine eng; /* config, model, tokenizer, backend */
	struct backend_session *session;
	struct sampler *sampler;
	int32_t *prompt_ids;
	size_t n_prompt;
	float *logits;               /* (n_vocab) */
	struct backend_token *batch; /* (chunk) */
	int chunk;                   /* prefill tokens per forward */
	int max_context;             /* strategy full: the most tokens a session holds */
};

static void generate_state_free(struct generate_state *st)
{
	if (st->session)
		st->eng.be->ops->session_free(st->eng.be, st->session);
	sampler_free(st->sampler);
	free(st->prompt_ids);
	free(st->logits);
	free(st->batch);
	cli_engine_close(&st->eng);
}

static int setup_engine(struct generate_state *st, const struct generate_args *a, char *err,
                        size_t err_len)
{
	int rc = cli_engine_open(&st->eng, a->config_path, a->sets, a->n_sets, a->model_path,
	                         a->n_threads, err, err_len);
	if (rc)
		return rc;
	struct cache_geometry g;
	config_cache_geometry(&st->eng.cfg, &st->eng.model->hp, &g);
	if ((rc = st->eng.be->ops->session_new(st->eng.be, &g, &st->session, err, err_len)))
		return rc;
	st->max_context = g.max_context_length;
	/* Prompts longer than the window stream through it in chunks. */
	long chunk = st->eng.cfg.scheduler.max_batch_tokens;
	if (g.strategy == CACHE_STRATEGY_SLIDING_WINDOW && g.window_size < chunk)
		chunk = g.window_size;
	st->chunk = chunk < 1 ? 1 : (int)chunk;
	int n_vocab = st->eng.model->hp.n_vocab;
	st->logits = malloc((size_t)n_vocab * sizeof(float));
	st->batch = calloc((size_t)st->chunk, sizeof(*st->batch));
	if (!st->logits || !st->batch)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	return sampler_new(&a->sp, n_vocab, &st->sampler, err, err_len);
}

/* Feeds n tokens through the session in chunks; logits of the last one. */
static int feed_tokens(struct generate_state *st, const int32_t *ids, size_t n, char *err,
                       size_t err_len)
{
	for (size_t i = 0; i < n; i += (size_t)st->chunk) {
		size_t m = n - i < (size_t)st->chunk ? n - i : (size_t)st->chunk;
		if (!st->eng.be->ops->session_can_append(st->eng.be, st->session, m))
			return err_set(err, err_len, -ENOSPC,
			               "the context is full: strategy full holds at most %d tokens "
			               "(inference.max_context_length)",
			               st->max_context);
		for (size_t j = 0; j < m; j++)
			st->batch[j] = (struct backend_token){.session = st->session,
			                                      .token = ids[i + j],
			                                      .want_logits = i + j == n - 1};
		int rc = st->eng.be->ops->forward(st->eng.be, st->batch, m, st->logits, err, err_len);
		if (rc)
			return rc;
	}
	return 0;
}

struct generate_counts {
	size_t n_generated;
	size_t n_steps; /* decode forwards (a generated token fed back) */
	double prompt_s;
	double decode_s;
};

/* Samples, prints and feeds back tokens until end-of-generation or the limit. */
static int decode_loop(struct generate_state *st, long max_tokens, struct generate_counts *cnt,
                       char *err, size_t err_len)
{
	struct detok_stream ds;
	detok_stream_init(&ds, st->eng.tok, false);
	char text[256];
	int rc = 0;
	for (long i = 0; i < max_tokens; i++) {
		struct sampler_result res;
		if ((rc = sampler_sample(st->sampler, st->logits, &res)))
			break;
		if (tokenizer_is_eog(st->eng.tok, res.token))
			break;
		cnt->n_generated++;
		sampler_accept(st->sampler, res.token);
		size_t len = detok_stream_push(&ds, res.token, text, sizeof(text));
		fwrite(text, 1, len, stdout);
		fflush(stdout);
		if (i + 1 == max_tokens)
			break;
		if ((rc = feed_tokens(st, &res.token, 1, err, err_len)))
			break;
		cnt->n_steps++;
	}
	size_t len = detok_stream_flush(&ds, text, sizeof(text));
	fwrite(text, 1, len, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	if (rc && !err[0])
		err_set(err, err_len, rc, "sampling failed");
	return rc;
}

static void print_stats(const struct generate_state *st, const struct generate_counts *cnt,
                        bool json)
{
	double prompt_tok_s = cnt->prompt_s > 0 ? (double)st->n_prompt / cnt->prompt_s : 0.0;
	/* The first token comes from the prompt's logits: decode throughput is
	 * the steps that fed a token back (forward + sampling each). */
	double decode_tok_s =
	    cnt->n_steps > 0 && cnt->decode_s > 0 ? (double)cnt->n_steps / cnt->decode_s : 0.0;
	fprintf(stderr, "prompt: %zu tokens, %.1f tok/s; generated: %zu tokens, %.1f tok/s\n",
	        st->n_prompt, prompt_tok_s, cnt->n_generated, decode_tok_s);
	if (!json)
		return;
	/* the session's KV bytes, as GET /v1/sessions/{id} shows them */
	struct sinkcache_stats kv = {0};
	st->eng.be->ops->session_stats(st->eng.be, st->session, &kv);
	fprintf(stderr,
	        "{\"prompt_tokens\":%zu,\"prompt_tok_s\":%.3f,\"generated_tokens\":%zu,"
	        "\"decode_tok_s\":%.3f,\"kv_bytes_resident\":%zu,\"kv_bytes_bound\":%zu}\n",
	        st->n_prompt, prompt_tok_s, cnt->n_generated, decode_tok_s, kv.bytes_resident,
	        kv.bytes_bound);
}

static int run_generate(struct generate_state *st, const struct generate_args *a, char *err,
                        size_t err_len)
{
	int rc = setup_engine(st, a, err, err_len);
	if (rc)
		return rc;
	rc = tokenizer_encode(st->eng.tok, a->prompt, strlen(a->prompt), true, false, &st->prompt_ids,
	                      &st->n_prompt, err, err_len);
	if (rc)
		return rc;
	if (st->n_prompt == 0)
		return err_set(err, err_len, -EINVAL, "the prompt has no tokens");
	for (size_t i = 0; i < st->n_prompt; i++)
		sampler_accept(st->sampler, st->prompt_ids[i]);
	struct generate_counts cnt = {0};
	double t0 = monotime_s();
	if ((rc = feed_tokens(st, st->prompt_ids, st->n_prompt, err, err_len)))
		return rc;
	double t1 = monotime_s();
	cnt.prompt_s = t1 - t0;
	rc = decode_loop(st, a->max_tokens, &cnt, err, err_len);
	cnt.decode_s = monotime_s() - t1;
	print_stats(st, &cnt, a->stats_json);
	return rc;
}

int cli_generate(int argc, char **argv)
{
	struct generate_args a = {0};
	int rc = parse_generate_args(argc, argv, &a);
	if (rc) {
		free(a.sets);
		return rc > 0 ? 0 : 2;
	}
	struct generate_state st = {0};
	char err[SINKD_ERR_LEN] = "";
	rc = run_generate(&st, &a, err, sizeof(err));
	if (rc)
		fprintf(stderr, "sinkd generate: %s\n", err);
	generate_state_free(&st);
	free(a.sets);
	return rc == 0 ? 0 : rc == -EINVAL ? 2 : 1;
}
