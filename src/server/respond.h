/* Responses of the server: the common headers, JSON bodies and OpenAI
 * error objects, and the one mapping from an errno-style code (of the
 * scheduler, the session store or this server) to an HTTP status and an
 * OpenAI error type.  Every endpoint, the listener and the generation
 * streams answer through it, so that one error means one answer. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "util/errbuf.h"

struct request;
struct api_error;

/* What an error code means to an OpenAI client. */
struct respond_kind {
	int status;       /* HTTP status */
	const char *type; /* OpenAI error type (respond_type_of(status)) */
	const char *code; /* the error's "code" unless the caller knows a sharper one */
	bool retry;       /* worth a Retry-After (the caller knows how long) */
};

/* The kind of rc (< 0).  Codes not in the table are the server's fault:
 * 500 server_error "internal_error". */
const struct respond_kind *respond_kind_of(int rc);
/* The OpenAI error type of an HTTP status: 401 authentication_error, 429
 * rate_limit_error, other 4xx invalid_request_error, 5xx server_error. */
const char *respond_type_of(int status);

/* An error on its way to a client, carried from where it was found. */
struct respond_fault {
	int rc;            /* errno-style, < 0 */
	const char *param; /* the request field at fault; NULL: none */
	const char *code;  /* NULL: the kind's */
	int retry_after_s; /* > 0: Retry-After */
	char msg[SINKD_ERR_LEN + 64];
};

/* Attaches the common headers (X-Request-Id, Connection: close while
 * draining, WWW-Authenticate on 401) to resp, queues it and frees it. */
enum MHD_Result respond_queue(struct request *r, int status, struct MHD_Response *resp);
/* A body copied into a response of that content type. */
enum MHD_Result respond_body(struct request *r, int status, const char *content_type,
                             const char *body, size_t len);
enum MHD_Result respond_json(struct request *r, int status, cJSON *obj); /* frees obj */
/* {"error":{"message","type","param","code"}}, the type from the status;
 * param NULL: none; retry_after_s > 0 adds Retry-After. */
enum MHD_Result respond_error(struct request *r, int status, const char *param, const char *code,
                              int retry_after_s, const char *fmt, ...) SINKD_PRINTF(6, 7);
/* The body and headers of such an error, not queued yet (for a caller
 * that adds a header of its own); NULL when out of memory. */
struct MHD_Response *respond_error_response(const char *type, const char *param, const char *code,
                                            int retry_after_s, const char *msg);
/* The error of a code: status, type and code from respond_kind_of(). */
enum MHD_Result respond_fault(struct request *r, const struct respond_fault *f);
/* A request body's error (request.h). */
enum MHD_Result respond_api_error(struct request *r, const struct api_error *e);
