/* Persistent sessions over HTTP (the streaming-input use case): create,
 * inspect, delete, and append text — revising the last tokens first — with
 * an optional generated reply streamed like /v1/completions.  The sessions
 * themselves (caches, expiry, reservations) belong to the scheduler. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "server/gen_prepare.h"
#include "server/genstream.h"
#include "server/quota.h"
#include "server/request.h"
#include "server/respond.h"
#include "server/server_impl.h"
#include "session/snapshot.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "util/sderr.h"

int api_session_key(const struct request *r, const char *id, char key[SCHED_SESSION_ID_LEN])
{
	char owner[QUOTA_CLIENT_NAME_LEN];
	quota_client_name(&r->client, owner);
	return session_key_make(owner, id, key);
}

static enum MHD_Result session_not_found(struct request *r)
{
	return respond_error(r, 404, "session_id", "session_not_found", 0, "no session %s",
	                     r->session_id);
}

/* The error of a session create or restore:
 * SDERR_OWNER_SESSIONS (limits.per_key.max_sessions) and SDERR_MAX_SESSIONS
 * (limits.max_sessions) count
 * against the limits and wait for the first idle session to expire; a
 * busy budget (-EAGAIN, -ENOSPC) waits like a queued request. */
enum MHD_Result api_session_fault(struct request *r, struct respond_fault *f, const char *owner)
{
	struct server *s = r->srv;
	if (f->rc == SDERR_OWNER_SESSIONS || f->rc == SDERR_MAX_SESSIONS) {
		bool per_key = f->rc == SDERR_OWNER_SESSIONS;
		enum quota_limit l = per_key ? QUOTA_MAX_SESSIONS : QUOTA_SESSIONS_TOTAL;
		quota_count_rejection(s->quota, l);
		f->code = quota_limit_code(l);
		f->retry_after_s =
		    scheduler_session_retry_after_s(s->sched, per_key ? owner : NULL);
	} else if (respond_kind_of(f->rc)->retry) {
		f->retry_after_s = scheduler_retry_after_s(s->sched);
	} else if (f->rc == -EIO && !f->code) {
		f->code = "session_store_error"; /* the scheduler logged the detail */
	}
	return respond_fault(r, f);
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
	char owner[QUOTA_CLIENT_NAME_LEN], want[SCHED_SESSION_ID_LEN] = "";
	quota_get_limits(s->quota, &ql);
	quota_client_name(&r->client, owner);
	if (r->session_id[0] && session_key_make(owner, r->session_id, want))
		return respond_error(r, 400, "session_id", "invalid_value",
		                     0, "session id: 1..32 hex digits");
	struct session_settings set = {.window_size = a.window_size,
	                               .sink_keep_count = a.sink_keep_count,
	                               .id = want,
	                               .owner = owner,
	                               .owner_max = ql.max_sessions};
	char id[SCHED_SESSION_ID_LEN];
	struct respond_fault f = {0};
	enum sched_field field;
	f.rc = scheduler_session_create(s->sched, &set, id, &field, f.msg, sizeof(f.msg));
	f.param = request_field_name(&(struct request_field_names){0}, field);
	if (f.rc)
		return api_session_fault(r, &f, owner);
	struct sched_session_info info;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", session_key_id(id));
	cJSON_AddStringToObject(o, "object", "session");
	if (!scheduler_session_info(s->sched, id, &info)) {
		cJSON_AddNumberToObject(o, "window_size", info.window_size);
		cJSON_AddNumberToObject(o, "sink_keep_count", info.sink_keep_count);
		cJSON_AddNumberToObject(o, "pinned_tokens", info.pinned_tokens);
		cJSON_AddNumberToObject(o, "bytes_reserved", (double)info.bytes_reserved);
	}
	return respond_json(r, 200, o);
}

/* exp of a mean NLL, or null before any token was scored */
static void add_ppl(cJSON *o, const char *name, double nll_sum, uint64_t n)
{
	if (n)
		cJSON_AddNumberToObject(o, name, exp(nll_sum / (double)n));
	else
		cJSON_AddNullToObject(o, name);
}

/* The streaming-perplexity monitor's view of the session (scheduler.h). */
static void add_perplexity(cJSON *o, const struct sched_perplexity *p)
{
	cJSON *m = cJSON_AddObjectToObject(o, "perplexity");
	if (!m)
		return;
	cJSON_AddNumberToObject(m, "input_tokens", (double)p->input_tokens);
	add_ppl(m, "input", p->input_nll, p->input_tokens);
	cJSON_AddNumberToObject(m, "generated_tokens", (double)p->generated_tokens);
	add_ppl(m, "generated", p->generated_nll, p->generated_tokens);
	add_ppl(m, "first_window", p->first_nll, p->first_tokens);
	add_ppl(m, "running", p->running_nll, p->running_tokens);
	if (p->ratio > 0)
		cJSON_AddNumberToObject(m, "ratio", p->ratio);
	else
		cJSON_AddNullToObject(m, "ratio");
	cJSON_AddNumberToObject(m, "alerts", (double)p->alerts);
}

cJSON *api_session_json(const char *key, const struct sched_session_info *in)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", session_key_id(key));
	cJSON_AddStringToObject(o, "object", "session");
	cJSON_AddStringToObject(o, "location", "resident");
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
	cJSON_AddBoolToObject(o, "offloaded", false);
	cJSON_AddBoolToObject(o, "restored", in->restored);
	cJSON_AddNumberToObject(o, "window_size", in->window_size);
	cJSON_AddNumberToObject(o, "sink_keep_count", in->sink_keep_count);
	cJSON_AddNumberToObject(o, "pinned_tokens", in->pinned_tokens);
	/* of the sink tier, the tokens read from a prefix other sessions share */
	cJSON_AddNumberToObject(o, "shared_prefix_tokens", in->shared_prefix_tokens);
	if (in->sliding_layers > 0) { /* only for a model with sliding-window layers */
		cJSON *sl = cJSON_AddObjectToObject(o, "sliding_layers");
		cJSON_AddNumberToObject(sl, "count", in->sliding_layers);
		cJSON_AddNumberToObject(sl, "window_size", in->sliding_window);
		cJSON_AddNumberToObject(sl, "tokens_resident", in->sliding_resident);
	}
	add_perplexity(o, &in->perplexity);
	return o;
}

/* A session an API key created is that key's: another key is told it does
 * not exist (so ids cannot be probed).  Sessions made without keys (named
 * by client address) are open to every client, as before. */
bool api_session_owner_allows(const struct request *r, const char *owner)
{
	char me[QUOTA_CLIENT_NAME_LEN];
	if (strncmp(owner, "key:", 4))
		return true;
	quota_client_name(&r->client, me);
	return !strcmp(owner, me);
}

int api_session_prepare(struct request *r, const char *id, char key[SCHED_SESSION_ID_LEN],
                        bool *empty, char *err, size_t err_len)
{
	struct sched_session_info info;
	struct scheduler *sc = r->srv->sched;
	/* the caller's namespace only: another key's session is never looked at */
	if (api_session_key(r, id, key))
		return err_set(err, err_len, -ENOENT, "no session %.40s", id);
	int rc = scheduler_session_info(sc, key, &info);
	if (rc == -ENOENT) {
		rc = scheduler_session_fetch(sc, key, err, err_len);
		if (!rc)
			rc = scheduler_session_info(sc, key, &info);
	}
	if (rc == -ENOENT || (!rc && !api_session_owner_allows(r, info.owner)))
		return err_set(err, err_len, -ENOENT, "no session %.40s", id);
	if (!rc && empty)
		*empty = info.n_seen == 0;
	return rc;
}

int api_session_prepare_change(struct request *r, const char *id, char key[SCHED_SESSION_ID_LEN],
                               bool *empty, char *err, size_t err_len)
{
	int rc = api_session_prepare(r, id, key, empty, err, err_len);
	return rc ? rc : scheduler_session_will_change(r->srv->sched, key, err, err_len);
}

enum MHD_Result api_session_unavailable(struct request *r, int rc, const char *id, const char *err)
{
	struct respond_fault f = {.rc = rc, .param = "session_id", .code = "session_elsewhere"};
	snprintf(f.msg, sizeof(f.msg), "%s", err);
	if (rc == -ENOENT) {
		f.code = "session_not_found";
		snprintf(f.msg, sizeof(f.msg), "no session %.40s", id);
	} else if (rc == -EBUSY) {
		f.retry_after_s = 1; /* the other instance lets go when its request ends */
	} else if (rc == -ESTALE) {
		f.code = "session_stale"; /* the message says which generations: no path in it */
	} else {
		/* whatever the store's code, reading our own store failed: the
		 * server's fault.  The store's message names its folder (a path
		 * of this host), so it goes to the log and the client gets the
		 * request id to find it there. */
		struct log_field lf[] = {LOG_STR("request_id", r->id), LOG_STR("session_id", id),
		                         LOG_STR("detail", err), LOG_END};
		log_event(r->srv->log, LOG_ERROR, "http", "session store failed", lf);
		f = (struct respond_fault){.rc = -EIO, .code = "session_store_error"};
		snprintf(f.msg, sizeof(f.msg), "the session store failed (see the server log)");
	}
	return respond_fault(r, &f);
}

enum MHD_Result api_session(struct request *r)
{
	struct server *s = r->srv;
	struct sched_session_info info;
	char key[SCHED_SESSION_ID_LEN];
	if (api_session_key(r, r->session_id, key))
		return session_not_found(r);
	int rc = scheduler_session_info(s->sched, key, &info);
	bool mine = rc == 0 && api_session_owner_allows(r, info.owner);
	if (!strcmp(r->method, "DELETE")) {
		rc = rc == 0 && !mine ? -ENOENT : scheduler_session_delete(s->sched, key);
		if (rc == -EBUSY)
			return respond_error(r, 409, "session_id", "session_elsewhere", 1,
			                     "session %s is held by another instance",
			                     r->session_id);
		if (rc)
			return session_not_found(r);
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", r->session_id);
		cJSON_AddStringToObject(o, "object", "session.deleted");
		cJSON_AddBoolToObject(o, "deleted", true);
		return respond_json(r, 200, o);
	}
	if (mine)
		return respond_json(r, 200, api_session_json(key, &info));
	/* Not here: inspecting does not bring it back, it says where it is. */
	if (rc == -ENOENT && scheduler_session_stored(s->sched, key)) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", r->session_id);
		cJSON_AddStringToObject(o, "object", "session");
		cJSON_AddStringToObject(o, "location", "store");
		cJSON_AddBoolToObject(o, "offloaded", true);
		/* as it left, when it left from here (its next request brings it back) */
		struct sched_left_info li;
		if (!scheduler_session_left_info(s->sched, key, &li)) {
			cJSON_AddBoolToObject(o, "parked", li.parked);
			cJSON_AddNumberToObject(o, "tokens_seen", (double)li.n_seen);
			cJSON_AddNumberToObject(o, "tokens_resident", li.n_resident);
			cJSON_AddNumberToObject(o, "bytes_stored", (double)li.bytes);
			cJSON_AddNumberToObject(o, "window_size", li.window_size);
			cJSON_AddNumberToObject(o, "sink_keep_count", li.sink_keep_count);
			cJSON_AddNumberToObject(o, "pinned_tokens", li.pinned_tokens);
		}
		return respond_json(r, 200, o);
	}
	return session_not_found(r);
}

enum MHD_Result api_session_snapshot(struct request *r)
{
	struct server *s = r->srv;
	char err[SINKD_ERR_LEN], key[SCHED_SESSION_ID_LEN];
	int rc = api_session_prepare(r, r->session_id, key, NULL, err, sizeof(err));
	if (rc)
		return api_session_unavailable(r, rc, r->session_id, err);
	unsigned char *bytes = NULL;
	size_t len = 0;
	rc = scheduler_session_snapshot(s->sched, key, &bytes, &len, err, sizeof(err));
	if (rc == -ENOENT)
		return session_not_found(r);
	if (rc) {
		/* busy or unsupported say so; any other failure to export is ours */
		struct respond_fault f = {.rc = rc == -EBUSY || rc == -ENOTSUP ? rc : -EIO,
		                          .param = rc == -EBUSY ? "session_id" : NULL,
		                          .code = rc == -EBUSY     ? "session_busy"
		                                  : rc == -ENOTSUP ? NULL
		                                                   : "snapshot_failed",
		                          .retry_after_s = rc == -EBUSY};
		snprintf(f.msg, sizeof(f.msg), "%s", err);
		return respond_fault(r, &f);
	}
	char sha[65], size[32];
	snapshot_sha256_hex(bytes, len, sha);
	snprintf(size, sizeof(size), "%zu", len);
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(len, bytes, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(bytes);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	MHD_add_response_header(resp, "X-Sinkd-Snapshot-Sha256", sha);
	MHD_add_response_header(resp, "X-Sinkd-Snapshot-Bytes", size);
	char disp[80];
	snprintf(disp, sizeof(disp), "attachment; filename=\"%s.snap\"", r->session_id);
	MHD_add_response_header(resp, "Content-Disposition", disp);
	return respond_queue(r, 200, resp);
}

/* POST /v1/sessions/restore[?id=HEX]: the body is a snapshot. */
enum MHD_Result api_session_restore(struct request *r)
{
	struct server *s = r->srv;
	const char *want = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "id");
	struct quota_limits ql;
	char owner[QUOTA_CLIENT_NAME_LEN], id[SCHED_SESSION_ID_LEN];
	quota_get_limits(s->quota, &ql);
	quota_client_name(&r->client, owner);
	struct session_restore_opts o = {.id = want, .owner = owner, .owner_max = ql.max_sessions};
	struct respond_fault f = {0};
	f.rc = scheduler_session_restore(s->sched, (const unsigned char *)r->body, r->body_len, &o,
	                                 id, f.msg, sizeof(f.msg));
	if (f.rc == -EEXIST)
		f.param = "id";                     /* the query's, or the snapshot's own */
	else if (f.rc == -EINVAL || f.rc == -E2BIG) /* of the snapshot, not of a prompt */
		f.code = f.rc == -E2BIG ? "snapshot_too_large" : "invalid_snapshot";
	if (f.rc)
		return api_session_fault(r, &f, owner);
	struct sched_session_info info;
	if (scheduler_session_info(s->sched, id, &info))
		return respond_error(r, 404, "session_id", "session_not_found", 0, "no session %s",
		                     session_key_id(id));
	return respond_json(r, 200, api_session_json(id, &info));
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
	char why[SINKD_ERR_LEN], key[SCHED_SESSION_ID_LEN];
	int found = api_session_prepare_change(r, r->session_id, key, &empty, why, sizeof(why));
	if (found) {
		ret = api_session_unavailable(r, found, r->session_id, why);
		goto out;
	}
	if (a.generate && gen_prepare_constraint(r, &a.gen, &e)) {
		char p[sizeof(e.param)];
		snprintf(p, sizeof(p), "%s", e.param);
		snprintf(e.param, sizeof(e.param), "generate.%.48s", p);
		ret = respond_api_error(r, &e);
		goto out;
	}
	int32_t *ids = NULL;
	size_t n_ids = 0;
	char err[SINKD_ERR_LEN];
	/* The first input of a session starts with BOS, later ones continue it. */
	if (tokenizer_encode(s->tok, a.text, a.text_len, empty, false, &ids, &n_ids, err,
	                     sizeof(err))) {
		ret = respond_error(r, 400, "text", "invalid_value", 0, "%s", err);
		goto out;
	}
	/* appended text is no chat message: the session's conversation ends here */
	scheduler_chat_marks_set(s->sched, key, NULL, 0);
	struct gen_target t = {.session_key = key,
	                       .revise_last_tokens = a.revise_last_tokens,
	                       .append_only = !a.generate};
	struct gen_request req;
	if (gen_prepare(r, &a.gen, ids, n_ids, &t, &req, &e)) {
		ret = respond_api_error(r, &e);
		goto out;
	}
	ret = genstream_submit(r, &a.gen, &req, !a.generate);
out:
	append_args_deinit(&a);
	return ret;
}
