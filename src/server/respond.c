/* Responses: common headers, JSON bodies, OpenAI error objects, and the
 * table that turns an error code into a status, an OpenAI type and a code.
 * It knows nothing of routing (http.c), endpoints (api.c) or streams
 * (genstream.c); they all call it, it calls none of them. */
#include "server/respond.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"
#include "server/request.h"
#include "server/server_impl.h"
#include "util/sderr.h"

/* ---- the mapping --------------------------------------------------------- */

struct respond_entry {
	int rc;
	struct respond_kind kind;
};

#define BAD_REQUEST "invalid_request_error"
#define SERVER "server_error"

/* The scheduler's and the store's codes (scheduler.h) as an OpenAI client
 * expects them: the request's fault 4xx, the server's state 5xx. */
static const struct respond_entry table[] = {
    {-EINVAL, {400, BAD_REQUEST, "invalid_value", false}},
    {-E2BIG, {400, BAD_REQUEST, "context_length_exceeded", false}},
    {-EBADMSG, {400, BAD_REQUEST, "invalid_snapshot", false}},
    /* the scheduler looks up nothing by name but sessions */
    {-ENOENT, {404, BAD_REQUEST, "session_not_found", false}},
    {-EBUSY, {409, BAD_REQUEST, "conflict", false}},
    {-EEXIST, {409, BAD_REQUEST, "session_exists", false}},
    /* a stored session older than a state that was never written */
    {-ESTALE, {409, BAD_REQUEST, "session_stale", false}},
    {-ENOMEM, {500, SERVER, "out_of_memory", false}},
    {-ENOTSUP, {501, SERVER, "not_supported", false}},
    {-EAGAIN, {503, SERVER, "overloaded", true}},
    {-ENOSPC, {503, SERVER, "overloaded", true}},
    /* sinkd's own codes (util/sderr.h) */
    {SDERR_MODEL_MISMATCH, {400, BAD_REQUEST, "snapshot_model_mismatch", false}},
    {SDERR_OUT_OF_RANGE, {400, BAD_REQUEST, "invalid_value", false}},
    {SDERR_CONFLICT, {409, BAD_REQUEST, "conflict", false}},
    {SDERR_OWNER_SESSIONS, {429, "rate_limit_error", "per_key_max_sessions", true}},
    {SDERR_MAX_SESSIONS, {503, SERVER, "max_sessions", true}},
    {SDERR_UNCHECKED, {500, SERVER, "internal_error", false}},
};

static const struct respond_kind internal = {500, SERVER, "internal_error", false};

const struct respond_kind *respond_kind_of(int rc)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (table[i].rc == rc)
			return &table[i].kind;
	return &internal;
}

const char *respond_type_of(int status)
{
	if (status == 401)
		return "authentication_error";
	if (status == 429)
		return "rate_limit_error";
	return status >= 500 ? SERVER : BAD_REQUEST;
}

/* ---- responses ----------------------------------------------------------- */

enum MHD_Result respond_queue(struct request *r, int status, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "X-Request-Id", r->id);
	/* A draining instance closes each connection after its answer, so a
	 * balancer's kept-alive connection moves to another instance. */
	if (atomic_load(&r->srv->draining) || r->close_after)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	if (status == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
	enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
	r->status = status;
	r->responded = true;
	return ret;
}

enum MHD_Result respond_body(struct request *r, int status, const char *content_type,
                             const char *body, size_t len)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", content_type);
	return respond_queue(r, status, resp);
}

enum MHD_Result respond_json(struct request *r, int status, cJSON *obj)
{
	char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
	cJSON_Delete(obj);
	if (!s)
		return MHD_NO;
	enum MHD_Result ret = respond_body(r, status, "application/json", s, strlen(s));
	free(s);
	return ret;
}

struct MHD_Response *respond_error_response(const char *type, const char *param, const char *code,
                                            int retry_after_s, const char *msg)
{
	char text[512]; /* every error message is cut to the same length */
	snprintf(text, sizeof(text), "%s", msg);
	cJSON *o = oa_error(text, type, param, code);
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!s)
		return NULL;
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(s);
		return NULL;
	}
	MHD_add_response_header(resp, "Content-Type", "application/json");
	if (retry_after_s > 0) {
		char ra[16];
		snprintf(ra, sizeof(ra), "%d", retry_after_s);
		MHD_add_response_header(resp, "Retry-After", ra);
	}
	return resp;
}

static enum MHD_Result error_body(struct request *r, int status, const char *type,
                                  const char *param, const char *code, int retry_after_s,
                                  const char *msg)
{
	struct MHD_Response *resp = respond_error_response(type, param, code, retry_after_s, msg);
	return resp ? respond_queue(r, status, resp) : MHD_NO;
}

enum MHD_Result respond_error(struct request *r, int status, const char *param, const char *code,
                              int retry_after_s, const char *fmt, ...)
{
	char msg[SINKD_ERR_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return error_body(r, status, respond_type_of(status), param, code, retry_after_s, msg);
}

enum MHD_Result respond_fault(struct request *r, const struct respond_fault *f)
{
	const struct respond_kind *k = respond_kind_of(f->rc);
	return error_body(r, k->status, k->type, f->param, f->code ? f->code : k->code,
	                  f->retry_after_s, f->msg);
}

enum MHD_Result respond_api_error(struct request *r, const struct api_error *e)
{
	return error_body(r, e->status, respond_type_of(e->status), e->param[0] ? e->param : NULL,
	                  e->code, e->retry_after_s > 0 ? e->retry_after_s : 0, e->message);
}
