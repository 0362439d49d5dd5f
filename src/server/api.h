/* The endpoints (api.c) and the persistent-session endpoints
 * (api_sessions.c), for the listener that routes to them (http.c). */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/server_impl.h"

/* api.c: handles a complete request (body received) or a resumed one. */
enum MHD_Result api_handle(struct request *r);
/* api_sessions.c: makes a persistent session ready for a request: here, or
 * brought back from the session store; the requester must be its owner when
 * an API key created it.  *empty: it has no tokens yet (its first input
 * starts with BOS).  -ENOENT unknown, -EBUSY held by another instance, else
 * the store's error; api_session_unavailable() answers those. */
int api_session_prepare(struct request *r, const char *id, bool *empty, char *err, size_t err_len);
enum MHD_Result api_session_unavailable(struct request *r, int rc, const char *id, const char *err);
/* api_sessions.c: the persistent-session endpoints. */
enum MHD_Result api_session_create(struct request *r);
enum MHD_Result api_session(struct request *r);          /* GET, DELETE /v1/sessions/{id} */
enum MHD_Result api_session_append(struct request *r);   /* POST /v1/sessions/{id}/append */
enum MHD_Result api_session_snapshot(struct request *r); /* GET /v1/sessions/{id}/snapshot */
enum MHD_Result api_session_restore(struct request *r);  /* POST /v1/sessions/restore */
