/* The endpoints: health, readiness, metrics, models, tokenize, detokenize,
 * completions and chat completions.  Turns a parsed request into the
 * checked generation request (gen_prepare.h) and hands it to
 * genstream_submit; answers every error through respond.h.  It does not
 * touch sockets (http.c) or stream events (genstream.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"

#include "grammar/grammar.h"
#include "server/chat_prompt.h"
#include "server/gen_prepare.h"
#include "server/genstream.h"
#include "server/openai.h"
#include "server/request.h"
#include "server/respond.h"
#include "server/responses.h"
#include "server/server_impl.h"
#include "server/tools.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

static enum MHD_Result api_status(struct request *r, int status, const char *state)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "status", state);
	return respond_json(r, status, o);
}

static enum MHD_Result api_ready(struct request *r)
{
	struct server *s = r->srv;
	if (atomic_load(&s->draining))
		return api_status(r, 503, "draining");
	if (!atomic_load(&s->ready))
		return api_status(r, 503, "loading");
	return api_status(r, 200, "ready");
}

void server_set_config_status(struct server *s, const struct server_config_status *st)
{
	pthread_mutex_lock(&s->cfg_mu);
	s->cfg_status = *st;
	pthread_mutex_unlock(&s->cfg_mu);
}

static void write_config_metrics(struct server *s, FILE *f)
{
	pthread_mutex_lock(&s->cfg_mu);
	struct server_config_status st = s->cfg_status;
	pthread_mutex_unlock(&s->cfg_mu);
	fprintf(
	    f,
	    "# HELP sinkd_config_generation Configurations applied: 1 at start, +1 per reload\n"
	    "# TYPE sinkd_config_generation gauge\nsinkd_config_generation %" PRIu64 "\n"
	    "# HELP sinkd_config_reload_failures_total Reloads refused (the old config stayed)\n"
	    "# TYPE sinkd_config_reload_failures_total counter\n"
	    "sinkd_config_reload_failures_total %" PRIu64 "\n"
	    "# HELP sinkd_config_info The configuration file in force, by SHA-256\n"
	    "# TYPE sinkd_config_info gauge\nsinkd_config_info{sha256=\"%s\"} 1\n"
	    "# HELP sinkd_config_last_reload_success_timestamp_seconds When the config in "
	    "force was applied (Unix time)\n"
	    "# TYPE sinkd_config_last_reload_success_timestamp_seconds gauge\n"
	    "sinkd_config_last_reload_success_timestamp_seconds %.3f\n"
	    "# HELP sinkd_config_restart_pending 1 when the file changes keys that need a "
	    "restart\n"
	    "# TYPE sinkd_config_restart_pending gauge\nsinkd_config_restart_pending %d\n",
	    st.generation, st.reload_failures, st.sha256, st.last_success_unix,
	    st.restart_pending ? 1 : 0);
}

static enum MHD_Result api_metrics(struct request *r)
{
	struct server *s = r->srv;
	int ready = atomic_load(&s->ready) && !atomic_load(&s->draining);
	size_t len = 0;
	char *text = metrics_render(s->metrics, ready, &len);
	if (!text)
		return MHD_NO;
	char *sched_text = NULL;
	size_t sched_len = 0;
	FILE *f = open_memstream(&sched_text, &sched_len);
	if (f) {
		write_config_metrics(s, f);
		quota_write_metrics(s->quota, f);
		if (atomic_load(&s->ready))
			scheduler_write_metrics(s->sched, f);
		fclose(f);
		char *all = realloc(text, len + sched_len + 1);
		if (all) {
			memcpy(all + len, sched_text, sched_len + 1);
			text = all;
			len += sched_len;
		}
		free(sched_text);
	}
	enum MHD_Result ret =
	    respond_body(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
	free(text);
	return ret;
}

static enum MHD_Result api_models(struct request *r)
{
	struct server *s = r->srv;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "object", "list");
	cJSON *data = cJSON_AddArrayToObject(o, "data");
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "id", s->model_name);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", 0);
	cJSON_AddStringToObject(m, "owned_by", "sinkd");
	cJSON_AddItemToArray(data, m);
	return respond_json(r, 200, o);
}

static enum MHD_Result api_tokenize(struct request *r)
{
	struct tokenize_args a;
	struct api_error e;
	if (tokenize_args_parse(r->body, r->body_len, &a, &e))
		return respond_api_error(r, &e);
	int32_t *ids = NULL;
	size_t n = 0;
	char err[SINKD_ERR_LEN];
	int rc = tokenizer_encode(r->srv->tok, a.content, a.content_len, a.add_special,
	                          a.parse_special, &ids, &n, err, sizeof(err));
	free(a.content);
	if (rc)
		return respond_error(r, 400, "content", "invalid_value", 0, "%s", err);
	cJSON *o = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(o, "tokens");
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
	free(ids);
	return respond_json(r, 200, o);
}

static enum MHD_Result api_detokenize(struct request *r)
{
	int32_t *ids = NULL;
	size_t n = 0;
	struct api_error e;
	if (detokenize_args_parse(r->body, r->body_len, &ids, &n, &e))
		return respond_api_error(r, &e);
	int64_t limit = scheduler_max_prompt_tokens(r->srv->sched);
	if (n > (uint64_t)limit) {
		free(ids);
		return respond_error(r, 400, "tokens", "context_length_exceeded", 0,
		                     "'tokens' has %zu ids; at most %" PRId64
		                     " are taken from one request "
		                     "(limits.max_prompt_tokens)",
		                     n, limit);
	}
	long bad = gen_prepare_bad_token(r->srv->tok, ids, n);
	if (bad >= 0) {
		int32_t id = ids[bad];
		free(ids);
		return respond_error(r, 400, "tokens", "invalid_value", 0,
		                     "'tokens[%ld]' = %d is not in the vocabulary (0..%d)", bad, id,
		                     tokenizer_n_vocab(r->srv->tok) - 1);
	}
	char *text = NULL;
	size_t len = 0;
	char err[SINKD_ERR_LEN];
	int rc = tokenizer_decode(r->srv->tok, ids, n, &text, &len, err, sizeof(err));
	free(ids);
	if (rc)
		return respond_error(r, 400, "tokens", "invalid_value", 0, "%s", err);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddItemToObject(o, "content", oa_string_n(text, len));
	free(text);
	return respond_json(r, 200, o);
}

/* Chat with session_id where the session knows the messages it holds:
 * those a client sends again (OpenAI clients re-send the whole
 * conversation every turn) are left out, so each message is in the stream
 * once.  Where the messages sent diverge from the held ones after a common
 * start, the stream is revised back to the request that sent the first
 * differing one, when it can still be; else 409 naming the message.  A
 * request whose first message is not the session's first is new messages
 * only (as before).  *first_new: the first message to render;
 * a->chat_marks: the marks to keep once they are in. */
static int chat_session_plan(struct request *r, struct gen_args *a, const char *key,
                             size_t *first_new, size_t *revise, struct api_error *e)
{
	size_t n = a->n_messages, nm = 0, revisable = 0;
	uint64_t seen = 0;
	struct sched_chat_mark *m = NULL;
	*first_new = 0;
	*revise = 0;
	if (scheduler_chat_marks(r->srv->sched, key, &m, &nm, &seen, &revisable))
		return 0; /* gone since prepared: the submit says so */
	while (nm && m[nm - 1].pos > seen) /* revised by an append since */
		nm--;
	unsigned char(*d)[32] = malloc((n ? n : 1) * sizeof(*d));
	if (!d) {
		free(m);
		return request_fail_oom(e, "messages");
	}
	for (size_t i = 0; i < n; i++)
		api_message_digest(&a->messages[i], d[i]);
	size_t k = 0;
	while (k < nm && k < n && !memcmp(m[k].digest, d[k], 32))
		k++;
	/* kept: the held messages that stay; f: the first message of the
	 * request to render (the conversation's message `kept`) */
	size_t kept = k, f = k;
	uint64_t pos = seen;
	int rc = 0;
	if (nm > 0 && k == 0) {
		kept = nm; /* not the conversation from its start: new messages only */
		f = 0;
	} else if (k < nm) { /* diverged: back to the start of that message's request */
		kept = f = m[k].group;
		pos = m[k].pos;
		if (seen - pos > revisable) {
			rc = request_fail(e, "messages", "conflict",
			                  k < n ? "messages[%zu] (%s) differs from the message this "
			                          "session holds there, and the session can no longer "
			                          "go back to it (%llu tokens since; it can revise its "
			                          "last %zu): send only the new messages, or start a "
			                          "new session"
			                        : "%zu messages were sent but this session holds more "
			                          "(%s; %llu tokens, it can revise its last %zu): send "
			                          "the whole conversation or only the new messages",
			                  k, k < n ? a->messages[k].role : "and cannot drop them",
			                  (unsigned long long)(seen - pos), revisable);
			e->status = 409;
			goto out;
		}
		*revise = (size_t)(seen - pos);
	}
	if (f >= n) {
		rc = request_fail(e, "messages", "invalid_value",
		                  "all %zu messages are already in session %s: send at least one "
		                  "new message",
		                  n, a->session_id);
		goto out;
	}
	size_t total = kept + (n - f);
	a->chat_marks = malloc(total * sizeof(*a->chat_marks));
	if (!a->chat_marks) {
		rc = request_fail_oom(e, "messages");
		goto out;
	}
	if (kept) /* m is NULL when the session held none */
		memcpy(a->chat_marks, m, kept * sizeof(*m));
	for (size_t i = f; i < n; i++) {
		struct sched_chat_mark *c = &a->chat_marks[kept + (i - f)];
		memcpy(c->digest, d[i], 32);
		c->pos = pos;
		c->group = (uint32_t)kept;
	}
	a->n_chat_marks = total;
	a->chat_group_pos = pos;
	a->chat_group = (uint32_t)kept;
	*first_new = f;
out:
	free(d);
	free(m);
	return rc;
}

/* The prompt of the messages from `first` on (a session's new ones; the
 * held ones before them are what a chat template renders them after). */
static int prompt_ids_from(struct request *r, struct gen_args *a, size_t first, bool add_bos,
                           int32_t **ids, size_t *n, struct api_error *e)
{
	a->chat_first_new = first;
	return gen_prepare_prompt(r, a, add_bos, ids, n, e);
}

static enum MHD_Result api_generate(struct request *r, bool chat)
{
	struct server *s = r->srv;
	int64_t limit = 0;
	server_settings_get(s, &limit, NULL);
	struct gen_args a;
	struct api_error e;
	if (gen_args_parse(r->body, r->body_len, chat, limit, &a, &e))
		return respond_api_error(r, &e);
	enum MHD_Result ret;
	bool add_bos = true;
	if (a.model && strcmp(a.model, s->model_name)) {
		ret = respond_error(r, 404, "model", "model_not_found", 0,
		                    "the model '%s' does not exist (this server serves '%s')",
		                    a.model, s->model_name);
		goto out;
	}
	char why[SINKD_ERR_LEN], key[SCHED_SESSION_ID_LEN] = "";
	int found = a.session_id
	                ? api_session_prepare_change(r, a.session_id, key, &add_bos, why,
	                                             sizeof(why))
	                : 0;
	if (found) {
		ret = api_session_unavailable(r, found, a.session_id, why);
		goto out;
	}
	int32_t *ids = NULL;
	size_t n_ids = 0, first_new = 0, revise = 0;
	/* a completion's text is no chat message: what the session held as a
	 * conversation ends there (its next chat appends all it is sent) */
	if (!a.chat && a.session_id)
		scheduler_chat_marks_set(s->sched, key, NULL, 0);
	if ((a.chat && a.session_id && chat_session_plan(r, &a, key, &first_new, &revise, &e)) ||
	    gen_prepare_constraint(r, &a, &e) ||
	    prompt_ids_from(r, &a, first_new, add_bos, &ids, &n_ids, &e)) {
		ret = respond_api_error(r, &e);
		goto out;
	}
	struct gen_target t = {.session_key = a.session_id ? key : NULL,
	                       .revise_last_tokens = revise};
	struct gen_request req;
	if (gen_prepare(r, &a, ids, n_ids, &t, &req, &e)) {
		ret = respond_api_error(r, &e);
		goto out;
	}
	ret = genstream_submit(r, &a, &req, false);
out:
	gen_args_deinit(&a);
	return ret;
}

enum MHD_Result api_handle(struct request *r)
{
	struct server *s = r->srv;
	switch (r->ep) {
	case EP_HEALTH:
		return api_status(r, 200, "ok");
	case EP_READY:
		return api_ready(r);
	case EP_METRICS:
		return api_metrics(r);
	default:
		break;
	}
	if (!atomic_load(&s->ready))
		return respond_error(r, 503, NULL, "loading", 1, "the model is still loading");
	/* Before any other work: a balancer retries a 503 that sent nothing. */
	if (atomic_load(&s->draining))
		return respond_error(r, 503, NULL, "draining", 5,
		                     "the server is shutting down; retry on another instance");
	if (r->ep == EP_MODELS)
		return api_models(r);
	if (r->ep == EP_TOKENIZE)
		return api_tokenize(r);
	if (r->ep == EP_DETOKENIZE)
		return api_detokenize(r);
	if (r->ep == EP_SESSION)
		return api_session(r);
	if (r->ep == EP_SESSIONS)
		return strcmp(r->method, "GET") && strcmp(r->method, "HEAD") ? api_session_create(r)
		                                                             : api_session_list(r);
	if (r->ep == EP_STREAMS)
		return api_streams(r);
	if (r->ep == EP_SESSION_CACHE || r->ep == EP_STREAM_CACHE)
		return api_cache_trace(r);
	if (r->ep == EP_SESSION_APPEND)
		return api_session_append(r);
	if (r->ep == EP_SESSION_SNAPSHOT)
		return api_session_snapshot(r);
	if (r->ep == EP_SESSION_RESTORE)
		return api_session_restore(r);
	if (r->ep == EP_RESPONSES)
		return api_responses(r);
	return api_generate(r, r->ep == EP_CHAT);
}
