/* One generation bound to one HTTP connection: receives the scheduler's
 * events on the engine thread (copy, wake, return), and turns them into SSE
 * events or one final JSON on the connection's thread, with suspend/resume so
 * that no thread waits for tokens.  Also the keep-alive timer. */
#pragma once

#include <stdbool.h>

#include "server/openai.h"
#include "server/server_impl.h"

struct gen_args;
struct gen_request;
/* Submits req (gen_prepare's, owned by the callee from here on) for
 * request r (r->gs) under the per-key limits and answers: the stream, the
 * whole reply when done, or the error.  a->tools moves to the generation
 * (the field is left NULL); a chat request whose tools are offered gets its calls parsed out
 * of the text (delta.tool_calls / message.tool_calls, finish_reason
 * "tool_calls"). */
enum MHD_Result genstream_submit(struct request *r, struct gen_args *a, struct gen_request *req,
                                 bool append_only);
/* genstream_submit for the Responses API: the answer is the response
 * response_id (responses.h), as typed events or the whole object.  Takes
 * req and a->tools like genstream_submit. */
enum MHD_Result genstream_submit_response(struct request *r, struct gen_args *a,
                                          struct gen_request *req, const char *response_id);
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
