/* The endpoints (api.c) and the persistent-session endpoints
 * (api_sessions.c), for the listener that routes to them (http.c). */
#pragma once

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/server_impl.h"
#include "session/session_key.h"

/* api.c: handles a complete request (body received) or a resumed one. */
enum MHD_Result api_handle(struct request *r);
/* api_sessions.c: makes a persistent session ready for a request: here, or
 * brought back from the session store; the requester must be its owner when
 * an API key created it.  *empty: it has no tokens yet (its first input
 * starts with BOS).  -ENOENT unknown, -EBUSY held by another instance, else
 * the store's error; api_session_unavailable() answers those. */
int api_session_prepare(struct request *r, const char *id, char key[SCHED_SESSION_ID_LEN],
                        bool *empty, char *err, size_t err_len);
/* The same for a request that will change the session (its lease is
 * marked first: scheduler_session_will_change). */
int api_session_prepare_change(struct request *r, const char *id, char key[SCHED_SESSION_ID_LEN],
                               bool *empty, char *err, size_t err_len);
/* api_sessions.c: the key (session/session_key.h) of the caller's session
 * id: -EINVAL when id is not 1..32 hex digits. */
int api_session_key(const struct request *r, const char *id, char key[SCHED_SESSION_ID_LEN]);
enum MHD_Result api_session_unavailable(struct request *r, int rc, const char *id, const char *err);
/* api_sessions.c: answers a failed session create or restore:
 * SDERR_OWNER_SESSIONS (limits.per_key.max_sessions) and SDERR_MAX_SESSIONS
 * (limits.max_sessions) count
 * against the limits with the Retry-After of the first idle session to
 * expire; a busy budget waits like a queued request. */
struct respond_fault;
enum MHD_Result api_session_fault(struct request *r, struct respond_fault *f, const char *owner);
/* api_sessions.c: the persistent-session endpoints. */
enum MHD_Result api_session_create(struct request *r);
enum MHD_Result api_session(struct request *r);          /* GET, DELETE /v1/sessions/{id} */
enum MHD_Result api_session_append(struct request *r);   /* POST /v1/sessions/{id}/append */
enum MHD_Result api_session_snapshot(struct request *r); /* GET /v1/sessions/{id}/snapshot */
enum MHD_Result api_session_restore(struct request *r);  /* POST /v1/sessions/restore */
/* api_sessions.c: whether the caller may see a session (or stream) of that
 * owner, and the JSON of GET /v1/sessions/{id}. */
bool api_session_owner_allows(const struct request *r, const char *owner);
struct sched_session_info;
cJSON *api_session_json(const char *key, const struct sched_session_info *in);
/* api_views.c: GET /v1/sessions, GET /v1/streams, and the cache traces. */
enum MHD_Result api_session_list(struct request *r);
enum MHD_Result api_streams(struct request *r);
enum MHD_Result api_cache_trace(struct request *r);
