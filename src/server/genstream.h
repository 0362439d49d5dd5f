/* One generation bound to one HTTP connection: receives the scheduler's
 * events on the engine thread (copy, wake, return), and turns them into SSE
 * events or one final JSON on the connection's thread, with suspend/resume so
 * that no thread waits for tokens.  Also the keep-alive timer. */
#pragma once

#include <stdbool.h>

#include "server/openai.h"
#include "server/server_impl.h"

struct gen_shape {
	bool chat;
	bool stream;
	bool include_usage;
	bool logprobs;
	bool timing;            /* X-Sinkd-Timing: chunks carry "sinkd_emit_us" (benchmarks) */
	bool append_only;       /* session append without generation */
	const char *session_id; /* NULL for one-shot requests */
	const char *id;
	const char *model;
};

/* Creates the generation for request r (r->gs) and submits `req` (its
 * callback is set here).  On error (status in *http_status, Retry-After in
 * *retry_after_s) r->gs stays NULL and the caller keeps req's buffers. */
int genstream_start(struct request *r, const struct gen_shape *shape, struct gen_request *req,
                    int *http_status, int *retry_after_s, char *err, size_t err_len);
/* stream: queues the SSE response.  !stream: answers when done, else suspends. */
enum MHD_Result genstream_respond(struct request *r);
/* The connection is gone: cancels a running generation and drops the
 * connection's reference.  Reports what the log line needs. */
void genstream_detach(struct genstream *gs, int *tokens_in, int *tokens_out, double *ttft_s);

/* Resumes every suspended connection (stop) or only idle streams due for a
 * keep-alive comment. */
void genstream_wake_all(struct server *s, bool keepalive_only);
/* Cancels every generation still running (shutdown). */
void genstream_cancel_all(struct server *s);
int genstream_keepalive_start(struct server *s, char *err, size_t err_len);
void genstream_keepalive_stop(struct server *s);
