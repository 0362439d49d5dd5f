/* POST /v1/responses: a parsed Responses request becomes a generation.  A
 * stored response (store:true, the default) lives in a persistent session
 * owned by the caller's key, and its id names that session
 * (responses_id_new), so a later request with previous_response_id
 * continues the session with only its new input items: the earlier turns
 * are neither sent again nor prefilled again.  store:false is a one-shot
 * generation whose id names nothing.  Prompt rendering, the constraint and
 * the checked request are gen_prepare.c's, the answer genstream's; this
 * file only decides which session a response runs in.
 *
 * Not done: continuing from a response that is not the session's latest
 * continues from the latest (the session holds one line of turns). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "server/gen_prepare.h"
#include "server/genstream.h"
#include "server/quota.h"
#include "server/request.h"
#include "server/respond.h"
#include "server/responses.h"
#include "server/server_impl.h"
#include "util/errbuf.h"

/* The session a response runs in. */
struct resp_session {
	char id[SCHED_SESSION_ID_LEN]; /* the client's id */
	char key[SCHED_SESSION_ID_LEN];
	bool used;    /* in a session at all (else one-shot) */
	bool created; /* by this request: deleted again if it never generates */
	bool empty;   /* no tokens yet: the prompt starts with BOS */
};

static enum MHD_Result resp_not_found(struct request *r, const char *response_id)
{
	return respond_error(r, 404, "previous_response_id", "previous_response_not_found", 0,
	                     "Previous response with id '%.100s' not found.", response_id);
}

/* previous_response_id: its session, here or brought back from the store;
 * an id that is not ours, or names another key's session, is not found. */
static int resp_session_continue(struct request *r, const char *prev, struct resp_session *ss,
                                 enum MHD_Result *ret)
{
	char why[SINKD_ERR_LEN];
	int rc = responses_id_session(prev, ss->id);
	if (!rc)
		rc = api_session_prepare_change(r, ss->id, ss->key, &ss->empty, why, sizeof(why));
	if (rc == -ENOENT)
		*ret = resp_not_found(r, prev);
	else if (rc)
		*ret = api_session_unavailable(r, rc, ss->id, why);
	ss->used = !rc;
	if (!rc) { /* brought back from the park or the store: it leaves again once idle */
		scheduler_session_park_when_idle(r->srv->sched, ss->key, true);
		scheduler_chat_marks_set(r->srv->sched, ss->key, NULL, 0);
	}
	return rc;
}

/* A stored response's new session, owned by the caller (its limits count:
 * limits.per_key.max_sessions, limits.max_sessions). */
static int resp_session_create(struct request *r, struct resp_session *ss, enum MHD_Result *ret)
{
	struct server *s = r->srv;
	struct quota_limits ql;
	char owner[QUOTA_CLIENT_NAME_LEN];
	quota_get_limits(s->quota, &ql);
	quota_client_name(&r->client, owner);
	struct session_settings set = {.window_size = 0,
	                               .sink_keep_count = -1,
	                               .owner = owner,
	                               .owner_max = ql.max_sessions,
	                               .park_when_idle = true};
	struct respond_fault f = {0};
	char why[SINKD_ERR_LEN];
	f.rc = scheduler_session_create(s->sched, &set, ss->key, NULL, why, sizeof(why));
	if (!f.rc) {
		snprintf(ss->id, sizeof(ss->id), "%s", session_key_id(ss->key));
		ss->used = ss->created = ss->empty = true;
		return 0;
	}
	/* no setting of the request's is at fault: f.param stays NULL */
	snprintf(f.msg, sizeof(f.msg),
	         "store: true keeps the response in a persistent session, and none can be made "
	         "now (send store: false for a one-shot response): %.300s",
	         why);
	*ret = api_session_fault(r, &f, owner);
	return f.rc;
}

/* The prompt, then the session, then the generation: a request that fails
 * before it generates leaves no session behind. */
static enum MHD_Result resp_generate(struct request *r, struct gen_args *a)
{
	struct server *s = r->srv;
	struct resp_session ss = {.empty = true};
	struct api_error e;
	enum MHD_Result ret = MHD_NO;
	if (a->previous_response_id && resp_session_continue(r, a->previous_response_id, &ss, &ret))
		return ret;
	int32_t *ids = NULL;
	size_t n_ids = 0;
	if (gen_prepare_prompt(r, a, ss.empty, &ids, &n_ids, &e)) {
		if (ss.used) /* brought back, and no request of ours will run */
			scheduler_session_park_when_idle(s->sched, ss.key, false);
		return respond_api_error(r, &e);
	}
	if (!ss.used && a->store && resp_session_create(r, &ss, &ret)) {
		free(ids);
		return ret;
	}
	char id[RESPONSES_ID_LEN];
	struct gen_target t = {.session_key = ss.used ? ss.key : NULL};
	struct gen_request req;
	if (responses_id_new(ss.used ? ss.id : NULL, id)) {
		free(ids);
		ret = respond_error(r, 500, NULL, "internal_error", 0, "no random bytes for an id");
	} else if (gen_prepare(r, a, ids, n_ids, &t, &req, &e)) {
		ret = respond_api_error(r, &e);
	} else {
		ret = genstream_submit_response(r, a, &req, id);
	}
	if (!r->gs && ss.created)
		scheduler_session_delete(s->sched, ss.key);
	else if (!r->gs && ss.used) /* brought back, and no request of ours will run */
		scheduler_session_park_when_idle(s->sched, ss.key, false);
	return ret;
}

enum MHD_Result api_responses(struct request *r)
{
	struct server *s = r->srv;
	int64_t limit = 0;
	server_settings_get(s, &limit, NULL);
	struct gen_args a;
	struct api_error e;
	if (responses_args_parse(r->body, r->body_len, limit, &a, &e))
		return respond_api_error(r, &e);
	enum MHD_Result ret;
	if (a.model && strcmp(a.model, s->model_name)) {
		ret = respond_error(r, 404, "model", "model_not_found", 0,
		                    "the model '%s' does not exist (this server serves '%s')",
		                    a.model, s->model_name);
	} else if (gen_prepare_constraint(r, &a, &e)) {
		ret = respond_api_error(r, &e);
	} else {
		ret = resp_generate(r, &a);
	}
	gen_args_deinit(&a);
	return ret;
}
