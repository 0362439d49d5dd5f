/* What an operator (and the console) can see of the running daemon beyond
 * /metrics: the caller's persistent sessions (GET /v1/sessions), the
 * streams that run or wait (GET /v1/streams), and the cache trace of a
 * session or a running stream (GET /v1/sessions/{id}/cache,
 * GET /v1/streams/{request_id}/cache, ?layers=0,2-3).  Each shows only
 * what the caller's key owns, as the sessions API does. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/api.h"
#include "server/quota.h"
#include "server/respond.h"
#include "server/server_impl.h"
#include "util/errbuf.h"

enum MHD_Result api_session_list(struct request *r)
{
	struct scheduler *sc = r->srv->sched;
	struct sched_session_ref *refs = NULL;
	size_t n = 0;
	if (scheduler_list_sessions(sc, &refs, &n))
		return respond_error(r, 500, NULL, "out_of_memory", 0, "out of memory");
	cJSON *o = cJSON_CreateObject();
	cJSON *data = o ? cJSON_AddArrayToObject(o, "data") : NULL;
	bool ok = data && cJSON_AddStringToObject(o, "object", "list");
	for (size_t i = 0; ok && i < n; i++) {
		struct sched_session_info info;
		/* gone since the list was taken: not listed */
		if (!api_session_owner_allows(r, refs[i].owner) ||
		    scheduler_session_info(sc, refs[i].id, &info))
			continue;
		cJSON *so = api_session_json(refs[i].id, &info);
		ok = so && cJSON_AddItemToArray(data, so);
		if (!ok)
			cJSON_Delete(so);
	}
	free(refs);
	if (!ok) {
		cJSON_Delete(o);
		return respond_error(r, 500, NULL, "out_of_memory", 0, "out of memory");
	}
	return respond_json(r, 200, o);
}

static cJSON *stream_json(const struct sched_stream_info *in)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "id", in->id);
	cJSON_AddStringToObject(o, "object", "stream");
	if (in->session_id[0])
		cJSON_AddStringToObject(o, "session_id", in->session_id);
	else
		cJSON_AddNullToObject(o, "session_id");
	cJSON_AddStringToObject(o, "state", in->state);
	cJSON_AddNumberToObject(o, "prompt_tokens", in->prompt_tokens);
	cJSON_AddNumberToObject(o, "generated_tokens", in->generated_tokens);
	cJSON_AddNumberToObject(o, "tokens_seen", (double)in->cache.n_seen);
	cJSON_AddNumberToObject(o, "tokens_resident", in->cache.n_resident);
	cJSON *t = cJSON_AddObjectToObject(o, "tiers");
	if (t) {
		cJSON_AddNumberToObject(t, "sink", in->cache.n_sink);
		cJSON_AddNumberToObject(t, "compressed", in->cache.n_compressed);
		cJSON_AddNumberToObject(t, "hot", in->cache.n_hot);
	}
	cJSON_AddNumberToObject(o, "bytes_resident", (double)in->cache.bytes_resident);
	cJSON_AddNumberToObject(o, "bytes_reserved", (double)in->cache.bytes_reserved);
	cJSON_AddNumberToObject(o, "age_s", in->age_s);
	return o;
}

enum MHD_Result api_streams(struct request *r)
{
	struct sched_stream_info *st = NULL;
	size_t n = 0;
	if (scheduler_list_streams(r->srv->sched, &st, &n))
		return respond_error(r, 500, NULL, "out_of_memory", 0, "out of memory");
	cJSON *o = cJSON_CreateObject();
	cJSON *data = o ? cJSON_AddArrayToObject(o, "data") : NULL;
	bool ok = data && cJSON_AddStringToObject(o, "object", "list");
	for (size_t i = 0; ok && i < n; i++) {
		if (!api_session_owner_allows(r, st[i].owner))
			continue;
		cJSON *so = stream_json(&st[i]);
		ok = so && cJSON_AddItemToArray(data, so);
		if (!ok)
			cJSON_Delete(so);
	}
	free(st);
	if (!ok) {
		cJSON_Delete(o);
		return respond_error(r, 500, NULL, "out_of_memory", 0, "out of memory");
	}
	return respond_json(r, 200, o);
}

/* A stream by the id the client knows: its X-Request-Id, or the response's
 * id ("chatcmpl-" or "cmpl-" before the request id); "" when none of the
 * caller's runs. */
static void stream_resolve(struct request *r, const char *asked, char out[REQUEST_ID_LEN])
{
	static const char *const prefixes[] = {"", "chatcmpl-", "cmpl-"};
	struct sched_stream_info info;
	char owner[QUOTA_CLIENT_NAME_LEN];
	quota_client_name(&r->client, owner);
	out[0] = '\0';
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t n = strlen(prefixes[i]);
		if (strncmp(asked, prefixes[i], n) ||
		    scheduler_stream_info(r->srv->sched, owner, asked + n, &info) ||
		    !api_session_owner_allows(r, info.owner))
			continue;
		snprintf(out, REQUEST_ID_LEN, "%s", asked + n);
		return;
	}
}

/* GET /v1/sessions/{id}/cache and /v1/streams/{request_id}/cache. */
enum MHD_Result api_cache_trace(struct request *r)
{
	struct scheduler *sc = r->srv->sched;
	bool stream = r->ep == EP_STREAM_CACHE;
	const char *name = stream ? r->stream_id : r->session_id;
	char rid[REQUEST_ID_LEN], err[SINKD_ERR_LEN], key[SCHED_SESSION_ID_LEN] = "";
	char owner[QUOTA_CLIENT_NAME_LEN];
	quota_client_name(&r->client, owner);
	if (stream) {
		stream_resolve(r, r->stream_id, rid);
		if (!rid[0])
			return respond_error(r, 404, "request_id", "stream_not_found", 0,
			                     "no running stream %s", r->stream_id);
	} else {
		struct sched_session_info info;
		int rc = api_session_key(r, r->session_id, key) ? -ENOENT
		                                                : scheduler_session_info(sc, key, &info);
		if (rc == -ENOENT && key[0] && scheduler_session_stored(sc, key))
			return respond_error(r, 409, "session_id", "session_offloaded", 0,
			                     "session %s is in the session store; its cache is "
			                     "loaded again by its next request",
			                     r->session_id);
		if (rc || !api_session_owner_allows(r, info.owner))
			return respond_error(r, 404, "session_id", "session_not_found", 0,
			                     "no session %s", r->session_id);
	}
	struct cache_trace_step *t = NULL;
	int rc = scheduler_cache_trace(sc, stream ? NULL : key, owner, stream ? rid : NULL, &t, err,
	                               sizeof(err));
	if (rc == -ENOENT)
		return stream ? respond_error(r, 404, "request_id", "stream_not_found", 0,
		                              "no running stream %s", name)
		              : respond_error(r, 404, "session_id", "session_not_found", 0,
		                              "no session %s", name);
	if (rc == -ENOTSUP)
		return respond_error(r, 501, NULL, "not_implemented", 0, "%s", err);
	if (rc)
		return respond_error(r, 500, NULL, "cache_trace_failed", 0, "%s", err);
	bool *wanted = NULL;
	const char *spec = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "layers");
	enum MHD_Result ret;
	if (spec) {
		wanted = calloc((size_t)t->n_layers, sizeof(*wanted));
		if (!wanted) {
			ret = respond_error(r, 500, NULL, "out_of_memory", 0, "out of memory");
			goto out;
		}
		if (cache_trace_parse_layers(spec, t->n_layers, wanted, err, sizeof(err))) {
			ret = respond_error(r, 400, "layers", "invalid_value", 0, "%s", err);
			goto out;
		}
	}
	cJSON *o = cache_trace_json(t, wanted);
	if (!o || !cJSON_AddStringToObject(o, "object", "session.cache") ||
	    !cJSON_AddStringToObject(o, "id", stream ? rid : r->session_id)) {
		cJSON_Delete(o);
		ret = respond_error(r, 500, NULL, "out_of_memory", 0, "out of memory");
		goto out;
	}
	ret = respond_json(r, 200, o);
out:
	free(wanted);
	scheduler_cache_trace_free(t);
	return ret;
}
