/* `sinkd chat-template`: renders a Jinja chat template (a file, or a GGUF's
 * tokenizer.chat_template) with a JSON context through the interpreter the
 * server uses (chat/jinja.h) and prints the text exactly, with no newline
 * added.  It is how a user checks what a model's template makes of a
 * conversation, how the test against Hugging Face's renderer drives our side
 * (--batch: one context per line in, one JSON result per line out) and how
 * the render-cost benchmark times a render (--repeat).  It loads no weights:
 * a GGUF is read for its template and the texts of its BOS and EOS tokens.
 * --request renders an OpenAI chat request body through the server's own
 * path instead (server/chat_render.h with the server's request parser), so
 * that what a request costs and makes can be checked without a daemon. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja.h"
#include "cli/cli.h"
#include "cli/cli_common.h"
#include "model/gguf.h"
#include "server/chat_render.h"
#include "server/request.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "util/monotime.h"

/* Exit codes beyond cli.h's 0/1/2, one per way a template can fail. */
enum {
	CT_EXIT_SYNTAX = 3, /* the template does not parse */
	CT_EXIT_RAISED = 4, /* the template called raise_exception */
	CT_EXIT_RENDER = 5, /* a type error, unknown filter, ... or a budget ran out */
};

struct ct_args {
	const char *template_path;
	const char *model_path;
	const char *context_path;
	const char *batch_path;
	const char *request_path;
	time_t now;
	long repeat;
	bool pin;
	long next_turn; /* -1: a whole request */
};

/* What a GGUF gives: the template and the special-token texts. */
struct ct_model {
	char *chat_template;
	char *bos_token; /* NULL when the model has none */
	char *eos_token;
};

static void ct_usage(FILE *out)
{
	fprintf(out,
		"usage: sinkd chat-template (--template FILE | --model GGUF) (--context FILE | --batch FILE)\n"
		"                           [--now EPOCH] [--repeat N]\n"
		"       sinkd chat-template --model GGUF [--template FILE] --request FILE\n"
		"                           [--pin | --next-turn K] [--repeat N]\n"
		"Renders a Jinja chat template with a JSON context and prints the text exactly.\n"
		"  --template FILE   the template (Jinja source)\n"
		"  --model GGUF      the template in the GGUF's tokenizer.chat_template (unless --template\n"
		"                    is given too); bos_token and eos_token (the texts of its BOS and EOS\n"
		"                    tokens) go into the context unless the context sets them\n"
		"  --context FILE    the context, a JSON object (\"-\": stdin): messages, tools,\n"
		"                    add_generation_prompt, bos_token, enable_thinking, ...\n"
		"  --batch FILE      one context per line (\"-\": stdin); prints one JSON line per context:\n"
		"                    {\"ok\":true,\"text\":...} or {\"ok\":false,\"kind\":K,\"error\":...}\n"
		"                    with K raised, runtime, budget or context\n"
		"  --now EPOCH       the time strftime_now() formats, seconds since 1970 UTC (default: now)\n"
		"  --repeat N        render N times; prints the min and median microseconds per render\n"
		"                    to stderr\n"
		"  --request FILE    an OpenAI chat request body (\"-\": stdin; messages, tools, tool_choice,\n"
		"                    chat_template_kwargs) rendered as the server renders it: the GGUF's\n"
		"                    template (--template FILE: as model.chat_template), its vocabulary's\n"
		"                    BOS/EOS, the fill-ins for what the template lacks; a BOS the tokenizer\n"
		"                    adds itself is left out of the text, as the server leaves it\n"
		"  --pin             with --request: also find the pinned part (what comes before the first\n"
		"                    user message); its length in bytes goes to stderr\n"
		"  --next-turn K     with --request: the prompt of a session's next turn that holds the\n"
		"                    first K messages already (only what the others add)\n"
		"Exit status: 0 rendered (--batch: every line answered), 1 a file cannot be read or the\n"
		"GGUF has no template, 2 usage error or a context that is not a JSON object, 3 the\n"
		"template does not parse (LINE:COL and the construct on stderr), 4 the template called\n"
		"raise_exception (its message on stderr), 5 any other render error (a type error, an\n"
		"unknown filter, a step or output budget that ran out).\n");
}

static int ct_flag(void *args, const char *opt)
{
	struct ct_args *a = args;
	if (strcmp(opt, "--pin"))
		return 0;
	a->pin = true;
	return 1;
}

static int ct_parse_count(const char *opt, const char *value, long min, long *out)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(value, &end, 10);
	if (errno || end == value || *end || v < min) {
		fprintf(stderr, "sinkd chat-template: %s wants an integer >= %ld, got '%s'\n", opt,
			min, value);
		return -EINVAL;
	}
	*out = v;
	return 1;
}

static int ct_valued(void *args, const char *opt, const char *value)
{
	struct ct_args *a = args;
	long n = 0;
	int rc;
	if (!strcmp(opt, "--template"))
		a->template_path = value;
	else if (!strcmp(opt, "--model"))
		a->model_path = value;
	else if (!strcmp(opt, "--context"))
		a->context_path = value;
	else if (!strcmp(opt, "--batch"))
		a->batch_path = value;
	else if (!strcmp(opt, "--request"))
		a->request_path = value;
	else if (!strcmp(opt, "--next-turn"))
		return ct_parse_count(opt, value, 0, &a->next_turn);
	else if (!strcmp(opt, "--now")) {
		if ((rc = ct_parse_count(opt, value, 1, &n)) < 0)
			return rc;
		a->now = (time_t)n;
	} else if (!strcmp(opt, "--repeat")) {
		return ct_parse_count(opt, value, 1, &a->repeat);
	} else
		return 0;
	return 1;
}

static int ct_check_args(const struct ct_args *a)
{
	const char *what = NULL;
	if (!a->template_path && !a->model_path)
		what = "--template FILE or --model GGUF is required";
	else if (a->request_path && (!a->model_path || a->context_path || a->batch_path))
		what = "--request FILE wants --model GGUF (its vocabulary) and no --context or --batch";
	else if (!a->request_path && (a->pin || a->next_turn >= 0))
		what = "--pin and --next-turn go with --request FILE";
	else if (a->pin && a->next_turn >= 0)
		what = "--pin is for a whole request: it does not go with --next-turn";
	else if (a->request_path)
		what = NULL;
	else if (!a->context_path == !a->batch_path)
		what = "give one of --context FILE and --batch FILE";
	else if (a->batch_path && a->repeat > 1)
		what = "--repeat times one context: it does not go with --batch";
	if (what) {
		fprintf(stderr, "sinkd chat-template: %s\n", what);
		ct_usage(stderr);
		return -EINVAL;
	}
	return 0;
}

static void ct_model_free(struct ct_model *m)
{
	free(m->chat_template);
	free(m->bos_token);
	free(m->eos_token);
	memset(m, 0, sizeof(*m));
}

/* The text of the token whose id is under id_key; NULL (no error) when the
 * model names none. */
static int ct_token_text(struct gguf_file *f, const char *id_key, char **out, char *err,
			 size_t err_len)
{
	int64_t id = -1;
	const char *s = NULL;
	size_t len = 0;
	*out = NULL;
	if (gguf_get_int(f, id_key, &id) || id < 0)
		return 0;
	if (gguf_get_array_string(f, "tokenizer.ggml.tokens", (uint64_t)id, &s, &len))
		return err_set(err, err_len, -EINVAL, "%s: %s %lld is not a token of "
			       "tokenizer.ggml.tokens", gguf_path(f), id_key, (long long)id);
	*out = strndup(s, len);
	return *out ? 0 : err_set(err, err_len, -ENOMEM, "out of memory");
}

static int ct_model_load(const char *path, bool want_template, struct ct_model *m, char *err,
			 size_t err_len)
{
	struct gguf_file *f = NULL;
	const char *s = NULL;
	size_t len = 0;
	int rc = gguf_open(path, &f, err, err_len);
	if (rc)
		return rc;
	if (want_template) {
		if (gguf_get_string(f, "tokenizer.chat_template", &s, &len)) {
			rc = err_set(err, err_len, -ENOENT, "%s has no tokenizer.chat_template", path);
			goto out;
		}
		if (!(m->chat_template = strndup(s, len))) {
			rc = err_set(err, err_len, -ENOMEM, "out of memory");
			goto out;
		}
	}
	if ((rc = ct_token_text(f, "tokenizer.ggml.bos_token_id", &m->bos_token, err, err_len)))
		goto out;
	rc = ct_token_text(f, "tokenizer.ggml.eos_token_id", &m->eos_token, err, err_len);
out:
	gguf_close(f);
	return rc;
}

/* bos_token / eos_token from the model, where the context leaves them out. */
static int ct_context_defaults(cJSON *ctx, const struct ct_model *m)
{
	const char *keys[] = {"bos_token", "eos_token"};
	const char *vals[] = {m->bos_token, m->eos_token};
	for (int i = 0; i < 2; i++) {
		if (!vals[i] || cJSON_GetObjectItemCaseSensitive(ctx, keys[i]))
			continue;
		if (!cJSON_AddStringToObject(ctx, keys[i], vals[i]))
			return -ENOMEM;
	}
	return 0;
}

static const char *ct_kind(int rc)
{
	switch (rc) {
	case JINJA_E_RAISED:
		return "raised";
	case JINJA_E_BUDGET:
		return "budget";
	case JINJA_E_NOMEM:
		return "nomem";
	default:
		return "runtime";
	}
}

static int ct_exit_code(int rc)
{
	if (rc == JINJA_E_RAISED)
		return CT_EXIT_RAISED;
	return rc == JINJA_E_NOMEM ? 1 : CT_EXIT_RENDER;
}

static int ct_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Renders n times (the output of the last kept) and reports the timings. */
static int ct_render_timed(const struct jinja_template *t, const cJSON *ctx,
			   const struct jinja_env *env, long n, char **out, size_t *out_len,
			   char *err, size_t err_len)
{
	double *us = n > 1 ? calloc((size_t)n, sizeof(*us)) : NULL;
	if (n > 1 && !us)
		return err_set(err, err_len, JINJA_E_NOMEM, "out of memory");
	int rc = 0;
	for (long i = 0; i < n && rc == 0; i++) {
		free(*out);
		*out = NULL;
		double t0 = monotime_s();
		rc = jinja_render(t, ctx, env, out, out_len, err, err_len);
		if (us)
			us[i] = (monotime_s() - t0) * 1e6;
	}
	if (rc == 0 && us) {
		qsort(us, (size_t)n, sizeof(*us), ct_cmp_double);
		fprintf(stderr, "chat-template: %ld renders, %zu bytes, min %.2f us, median %.2f us\n",
			n, *out_len, us[0], us[n / 2]);
	}
	free(us);
	return rc;
}

static int ct_run_one(const struct jinja_template *t, const struct ct_args *a,
		      const struct ct_model *m, const struct jinja_env *env)
{
	char err[SINKD_ERR_LEN] = "";
	char *src = NULL, *out = NULL;
	size_t len = 0, out_len = 0;
	cJSON *ctx = NULL;
	int code = 1;
	int rc = cli_read_path(a->context_path, &src, &len, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "sinkd chat-template: %s\n", err);
		goto out;
	}
	ctx = cJSON_ParseWithLength(src, len);
	if (!cJSON_IsObject(ctx)) {
		fprintf(stderr, "sinkd chat-template: %s: the context must be a JSON object\n",
			a->context_path);
		code = 2;
		goto out;
	}
	if (ct_context_defaults(ctx, m)) {
		fprintf(stderr, "sinkd chat-template: out of memory\n");
		goto out;
	}
	rc = ct_render_timed(t, ctx, env, a->repeat, &out, &out_len, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "sinkd chat-template: %s%s\n",
			rc == JINJA_E_RAISED ? "raise_exception: " : "", err);
		code = ct_exit_code(rc);
		goto out;
	}
	code = fwrite(out, 1, out_len, stdout) == out_len && fflush(stdout) == 0 ? 0 : 1;
out:
	free(out);
	cJSON_Delete(ctx);
	free(src);
	return code;
}

/* One --batch line: its result as a JSON line on stdout. */
static int ct_batch_line(const struct jinja_template *t, const struct ct_model *m,
			 const struct jinja_env *env, const char *line, size_t len)
{
	char err[SINKD_ERR_LEN] = "";
	char *out = NULL;
	size_t out_len = 0;
	cJSON *res = cJSON_CreateObject();
	cJSON *ctx = cJSON_ParseWithLength(line, len);
	int rc = 0;
	if (!cJSON_IsObject(ctx)) {
		snprintf(err, sizeof(err), "the line is not a JSON object");
		rc = -EINVAL;
	} else if (ct_context_defaults(ctx, m)) {
		rc = JINJA_E_NOMEM;
	} else {
		rc = jinja_render(t, ctx, env, &out, &out_len, err, sizeof(err));
	}
	cJSON_AddBoolToObject(res, "ok", rc == 0);
	if (rc == 0) {
		cJSON_AddStringToObject(res, "text", out);
	} else {
		cJSON_AddStringToObject(res, "kind", rc == -EINVAL ? "context" : ct_kind(rc));
		cJSON_AddStringToObject(res, "error", err);
	}
	char *json = cJSON_PrintUnformatted(res);
	int code = json && printf("%s\n", json) > 0 ? 0 : 1;
	free(json);
	free(out);
	cJSON_Delete(ctx);
	cJSON_Delete(res);
	return code;
}

static int ct_run_batch(const struct jinja_template *t, const struct ct_args *a,
			const struct ct_model *m, const struct jinja_env *env)
{
	char err[SINKD_ERR_LEN] = "";
	char *src = NULL;
	size_t len = 0;
	if (cli_read_path(a->batch_path, &src, &len, err, sizeof(err))) {
		fprintf(stderr, "sinkd chat-template: %s\n", err);
		return 1;
	}
	int code = 0;
	for (char *line = src; code == 0 && line < src + len;) {
		char *nl = memchr(line, '\n', (size_t)(src + len - line));
		size_t n = nl ? (size_t)(nl - line) : (size_t)(src + len - line);
		if (n > 0)
			code = ct_batch_line(t, m, env, line, n);
		line += n + 1;
	}
	free(src);
	return code || fflush(stdout) ? 1 : 0;
}

static int ct_load_template(const struct ct_args *a, const struct ct_model *m,
			    struct jinja_template **t)
{
	char err[SINKD_ERR_LEN] = "";
	char *src = NULL;
	size_t len = 0;
	const char *what = a->template_path ? a->template_path : "tokenizer.chat_template";
	if (a->template_path) {
		if (cli_read_path(a->template_path, &src, &len, err, sizeof(err))) {
			fprintf(stderr, "sinkd chat-template: %s\n", err);
			return 1;
		}
	}
	int rc = jinja_parse(src ? src : m->chat_template, src ? len : strlen(m->chat_template), t,
			     err, sizeof(err));
	free(src);
	if (rc == 0)
		return 0;
	/* "FILE:LINE:COL: construct: message", as a compiler writes it */
	fprintf(stderr, "sinkd chat-template: %s%s%s\n", what, rc == JINJA_E_SYNTAX ? ":" : ": ", err);
	return rc == JINJA_E_SYNTAX ? CT_EXIT_SYNTAX : 1;
}

/* ---------------------------------------------------------- --request */

/* What a request needs: its parsed body and the model's renderer. */
struct ct_request {
	struct gen_args ga;
	struct chat_render *cr;
};

static int ct_request_load(const struct ct_args *a, struct ct_request *r)
{
	char err[SINKD_ERR_LEN] = "";
	char *body = NULL;
	size_t len = 0;
	struct gguf_file *f = NULL;
	struct tokenizer *tok = NULL;
	struct api_error e;
	int code = 1;
	if (cli_read_path(a->request_path, &body, &len, err, sizeof(err)) ||
	    gguf_open(a->model_path, &f, err, sizeof(err)) ||
	    tokenizer_new_from_gguf(f, &tok, err, sizeof(err)))
		goto fail;
	int rc = chat_render_load(a->template_path, tok, a->model_path, &r->cr, err, sizeof(err));
	if (rc == 0 && !r->cr)
		snprintf(err, sizeof(err), "%s has no tokenizer.chat_template", a->model_path);
	if (rc || !r->cr) {
		code = rc == -EINVAL ? CT_EXIT_SYNTAX : 1;
		goto fail;
	}
	if (gen_args_parse(body, len, true, INT32_MAX, &r->ga, &e)) {
		fprintf(stderr, "sinkd chat-template: %s: %s\n", a->request_path, e.message);
		code = 2;
		goto out;
	}
	code = a->next_turn > (long)r->ga.n_messages ? 2 : 0;
	if (code)
		snprintf(err, sizeof(err), "--next-turn %ld: the request has %zu messages",
		         a->next_turn, r->ga.n_messages);
fail:
	if (code)
		fprintf(stderr, "sinkd chat-template: %s\n", err);
out:
	tokenizer_free(tok);
	gguf_close(f);
	free(body);
	return code;
}

/* The request's prompt as the server renders it, n times (the last kept). */
static int ct_request_render(const struct ct_args *a, const struct ct_request *r, char **out,
                             size_t *out_len, size_t *system_end, double *us, char *err,
                             size_t err_len)
{
	struct chat_render_input in = {.msgs = r->ga.messages,
	                               .n = r->ga.n_messages,
	                               .continuation = a->next_turn >= 0,
	                               .first_new = a->next_turn >= 0 ? (size_t)a->next_turn : 0,
	                               .tools = r->ga.tools,
	                               .reasoning_effort = r->ga.reasoning_effort,
	                               .kwargs = r->ga.chat_template_kwargs};
	int rc = 0;
	for (long i = 0; i < a->repeat && rc == 0; i++) {
		free(*out);
		*out = NULL;
		double t0 = monotime_s();
		rc = chat_render_prompt(r->cr, &in, out, out_len, a->pin ? system_end : NULL, err,
		                        err_len);
		us[i] = (monotime_s() - t0) * 1e6;
	}
	return rc;
}

static int ct_run_request(const struct ct_args *a)
{
	char err[SINKD_ERR_LEN] = "";
	struct ct_request r = {0};
	char *out = NULL;
	size_t out_len = 0, system_end = 0;
	double *us = calloc((size_t)a->repeat, sizeof(*us));
	int code = us ? ct_request_load(a, &r) : 1;
	if (code)
		goto out;
	int rc = ct_request_render(a, &r, &out, &out_len, &system_end, us, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "sinkd chat-template: %s%s\n",
		        rc == JINJA_E_RAISED ? "raise_exception: " : "", err);
		code = ct_exit_code(rc);
		goto out;
	}
	if (a->pin)
		fprintf(stderr, "chat-template: pinned part %zu bytes\n", system_end);
	if (a->repeat > 1) {
		qsort(us, (size_t)a->repeat, sizeof(*us), ct_cmp_double);
		fprintf(stderr, "chat-template: %ld renders, %zu bytes, min %.2f us, median %.2f us\n",
		        a->repeat, out_len, us[0], us[a->repeat / 2]);
	}
	code = fwrite(out, 1, out_len, stdout) == out_len && fflush(stdout) == 0 ? 0 : 1;
out:
	free(out);
	free(us);
	chat_render_unref(r.cr);
	gen_args_deinit(&r.ga);
	return code;
}

int cli_chat_template(int argc, char **argv)
{
	struct ct_args a = {.repeat = 1, .next_turn = -1};
	int rc = cli_parse_args(argc, argv, "chat-template", &a, ct_flag, ct_valued, ct_usage);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (ct_check_args(&a))
		return 2;
	if (a.request_path)
		return ct_run_request(&a);
	struct ct_model m = {0};
	struct jinja_template *t = NULL;
	char err[SINKD_ERR_LEN] = "";
	if (a.model_path && ct_model_load(a.model_path, !a.template_path, &m, err, sizeof(err))) {
		fprintf(stderr, "sinkd chat-template: %s\n", err);
		return 1;
	}
	int code = ct_load_template(&a, &m, &t);
	if (code == 0) {
		struct jinja_env env = {.now = a.now};
		code = a.batch_path ? ct_run_batch(t, &a, &m, &env) : ct_run_one(t, &a, &m, &env);
	}
	jinja_template_free(t);
	ct_model_free(&m);
	return code;
}
