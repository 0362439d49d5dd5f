/* Persistent sessions over HTTP (the streaming-input use case): create,
 * inspect, delete, and append text — revising the last tokens first — with
 * an optional generated reply streamed like /v1/completions.  The sessions
 * themselves (caches, expiry, reservations) belong to the scheduler. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"
#include "server/server_impl.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

static enum MHD_Result session_not_found(struct request *r)
{
	return http_respond_error(r, 404, "invalid_request_error", "session_id",
	                          "session_not_found", 0, "no session %s", r->session_id);
}

enum MHD_Result api_session_create(struct request *r)
{
	struct server *s = r->srv;
	struct session_create_args a;
	struct api_error e;
	if (session_create_args_parse(r->body, r->body_len, &a, &e))
		return respond_api_error(r, &e);
	/* PUT /v1/sessions/{id} names the id (routing by it), POST takes a new one. */
	struct quota_limits ql;
	char owner[QUOTA_CLIENT_NAME_LEN];
	quota_get_limits(s->quota, &ql);
	quota_client_name(&r->client, owner);
	struct session_settings set = {.window_size = a.window_size,
	                               .sink_keep_count = a.sink_keep_count,
	                               .id = r->session_id,
	                               .owner = owner,
	                               .owner_max = ql.max_sessions};
	char id[SCHED_SESSION_ID_LEN], err[SINKD_ERR_LEN];
	int rc = scheduler_session_create(s->sched, &set, id, err, sizeof(err));
	if (rc == -EDQUOT || rc == -EMFILE) { /* limits.per_key.max_sessions, limits.max_sessions */
		bool per_key = rc == -EDQUOT;
		enum quota_limit l = per_key ? QUOTA_MAX_SESSIONS : QUOTA_SESSIONS_TOTAL;
		quota_count_rejection(s->quota, l);
		int retry = scheduler_session_retry_after_s(s->sched, per_key ? owner : NULL);
		return http_respond_error(r, per_key ? 429 : 503,
		                          per_key ? "rate_limit_error" : "server_error", NULL,
		                          quota_limit_code(l), retry, "%s", err);
	}
	if (rc == -EEXIST)
		return http_respond_error(r, 409, "invalid_request_error", "session_id",
		                          "session_exists", 0, "%s", err);
	if (rc == -EINVAL)
		return http_respond_error(r, 400, "invalid_request_error",
		                          strstr(err, "sink") ? "sink_keep_count" : "window_size",
		                          "invalid_value", 0, "%s", err);
	if (rc)
		return http_respond_error(r, 503, "server_error", NULL, "overloaded",
		                          scheduler_retry_after_s(s->sched), "%s", err);
	struct sched_session_info info;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", id);
	cJSON_AddStringToObject(o, "object", "session");
	if (!scheduler_session_info(s->sched, id, &info)) {
		cJSON_AddNumberToObject(o, "window_size", info.window_size);
		cJSON_AddNumberToObject(o, "sink_keep_count", info.sink_keep_count);
		cJSON_AddNumberToObject(o, "bytes_reserved", (double)info.bytes_reserved);
	}
	return http_respond_json(r, 200, o);
}

static cJSON *session_json(const char *id, const struct sched_session_info *in)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", id);
	cJSON_AddStringToObject(o, "object", "session");
	cJSON_AddNumberToObject(o, "tokens_seen", (double)in->n_seen);
	cJSON_AddNumberToObject(o, "tokens_resident", in->n_resident);
	cJSON *t = cJSON_AddObjectToObject(o, "tiers");
	cJSON_AddNumberToObject(t, "sink", in->n_sink);
	cJSON_AddNumberToObject(t, "compressed", in->n_compressed);
	cJSON_AddNumberToObject(t, "hot", in->n_hot);
	cJSON_AddNumberToObject(o, "bytes_resident", (double)in->bytes_resident);
	cJSON_AddNumberToObject(o, "bytes_reserved", (double)in->bytes_reserved);
	cJSON_AddNumberToObject(o, "age_s", in->age_s);
	cJSON_AddNumberToObject(o, "idle_s", in->idle_s);
	cJSON_AddBoolToObject(o, "busy", in->busy);
	cJSON_AddBoolToObject(o, "offloaded", in->offloaded);
	cJSON_AddNumberToObject(o, "window_size", in->window_size);
	cJSON_AddNumberToObject(o, "sink_keep_count", in->sink_keep_count);
	return o;
}

enum MHD_Result api_session(struct request *r)
{
	struct server *s = r->srv;
	if (!strcmp(r->method, "DELETE")) {
		if (scheduler_session_delete(s->sched, r->session_id))
			return session_not_found(r);
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", r->session_id);
		cJSON_AddStringToObject(o, "object", "session.deleted");
		cJSON_AddBoolToObject(o, "deleted", true);
		return http_respond_json(r, 200, o);
	}
	struct sched_session_info info;
	if (scheduler_session_info(s->sched, r->session_id, &info))
		return session_not_found(r);
	return http_respond_json(r, 200, session_json(r->session_id, &info));
}

enum MHD_Result api_session_append(struct request *r)
{
	struct server *s = r->srv;
	int64_t limit = 0;
	server_settings_get(s, &limit, NULL);
	struct append_args a;
	struct api_error e;
	if (append_args_parse(r->body, r->body_len, limit, &a, &e))
		return respond_api_error(r, &e);
	enum MHD_Result ret;
	bool empty = false;
	if (api_session_is_empty(s, r->session_id, &empty)) {
		ret = session_not_found(r);
		goto out;
	}
	int32_t *ids = NULL;
	size_t n_ids = 0;
	char err[SINKD_ERR_LEN];
	/* The first input of a session starts with BOS, later ones continue it. */
	if (tokenizer_encode(s->tok, a.text, a.text_len, empty, false, &ids, &n_ids, err,
	                     sizeof(err))) {
		ret = http_respond_error(r, 400, "invalid_request_error", "text", "invalid_value",
		                         0, "%s", err);
		goto out;
	}
	ret = api_submit(r, &a.gen, ids, n_ids, r->session_id, a.revise_last_tokens, !a.generate);
out:
	append_args_deinit(&a);
	return ret;
}
