/* The OpenAI Responses API (POST /v1/responses): the request body parsed
 * into gen_args (input items become chat messages), response ids that name
 * the persistent session a stored response lives in, the response object,
 * and the stream of typed events (response.created ... response.completed)
 * built from generated text and tool calls, the same events whether they
 * go out as SSE or only add up to the whole object of stream:false.  It
 * does not tokenize, render templates or touch connections (api_responses.c
 * and genstream.c do).
 *
 * Bodies are strict JSON as request.h describes (the same rules, checked
 * here by a local scanner: request.c keeps its own private). */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "sched/scheduler.h"
#include "server/request.h"
#include "server/tools.h"

/* max_tokens_limit: limits.max_tokens (also max_output_tokens' default).
 * Sets a->api GEN_API_RESPONSES, a->chat, a->messages (instructions first,
 * as a system message), a->store (default true).  Errors name the field
 * path ("input[2].content[0].type"); fields OpenAI has and sinkd does not
 * implement (background, include, reasoning, prompt, conversation, built-in
 * tools) are a 400 naming them; unknown fields are ignored.  Returns 0 or
 * -EINVAL with *e set (500 for out of memory); on error out holds nothing. */
int responses_args_parse(const char *body, size_t len, int64_t max_tokens_limit,
                         struct gen_args *out, struct api_error *e);

/* ---- ids ---------------------------------------------------------------- */

#define RESPONSES_ID_LEN 80 /* "resp_" + session id + "_" + 24 hex digits + NUL */

/* A new response id: "resp_<session id>_<24 random hex>" for a response
 * kept in a persistent session (session_id not NULL), else
 * "resp_<24 random hex>", which names no session.  -EIO when no random
 * bytes could be had. */
int responses_id_new(const char *session_id, char out[RESPONSES_ID_LEN]);
/* The session a response id names: 0, or -ENOENT for an id that names
 * none (not one of ours, or a store:false one). */
int responses_id_session(const char *response_id, char session_id[SCHED_SESSION_ID_LEN]);

/* ---- the response object ------------------------------------------------- */

/* The response as it starts: {"id","object":"response","created_at",
 * "status":"in_progress","model","output":[],"usage":null, ...} with the
 * request's settings echoed as OpenAI does (instructions, max_output_tokens,
 * temperature, top_p, text, tools, tool_choice, parallel_tool_calls,
 * previous_response_id, store, metadata {}).  NULL when out of memory. */
cJSON *responses_object_new(const struct gen_args *a, const char *id, const char *model,
                            long created_at);

/* ---- events ----------------------------------------------------------------- */

/* Receives each event: type ("response.output_text.delta", "error", ...)
 * and the object (taken), which carries "type" and "sequence_number". */
typedef void (*resp_emit_fn)(void *user, const char *type, cJSON *event);

/* One response being generated: its output items (a message for text, a
 * function_call per tool call, in the order they came), their text so far
 * and the events' sequence numbers. */
struct resp_stream;

/* response: responses_object_new's (taken).  emit NULL: no events (the
 * whole object of stream:false is built all the same).  -ENOMEM. */
int resp_stream_new(cJSON *response, resp_emit_fn emit, void *user, struct resp_stream **out);
void resp_stream_free(struct resp_stream *rs); /* NULL: no-op */
/* response.created, response.in_progress. */
int resp_stream_open(struct resp_stream *rs);
/* Output text (len bytes, may hold NUL): opens a message item when none is
 * open (output_item.added, content_part.added), then output_text.delta. */
int resp_stream_text(struct resp_stream *rs, const char *text, size_t len);
/* Reasoning text (reasoning.h): a reasoning item's
 * response.reasoning_text.delta, the item opened (output_item.added,
 * content_part.added with a reasoning_text part) when none is, and closed
 * (reasoning_text.done, content_part.done, output_item.done) when text or
 * a call follows. */
int resp_stream_reasoning(struct resp_stream *rs, const char *text, size_t len);
/* A tool parser's call event: CALL_BEGIN closes an open message and adds a
 * function_call item, ARGS is function_call_arguments.delta, CALL_END
 * function_call_arguments.done and output_item.done.  CONTENT is text. */
int resp_stream_call(struct resp_stream *rs, const struct tool_event *ev);
/* The end of a generation that finished (fin STOP or NONE: completed;
 * LENGTH: incomplete, reason max_output_tokens): closes what is open and
 * emits response.completed or response.incomplete.  Returns the whole
 * response (caller deletes), with usage {input_tokens, output_tokens,
 * total_tokens, input_tokens_details.cached_tokens (n_cached: of the input,
 * the tokens the prefix cache supplied), ...}; NULL when out of memory.  A
 * response without any item gets an empty message, so that output_text is
 * always there. */
cJSON *resp_stream_finish(struct resp_stream *rs, enum gen_finish fin, int n_input, int n_cached,
                          int n_output);
/* A generation that failed: an "error" event {code, message, param}, then
 * response.failed with the response's "error" set. */
int resp_stream_fail(struct resp_stream *rs, const char *message, const char *code,
                     const char *param);

/* ---- the endpoint (api_responses.c) -------------------------------------------- */

struct request;
/* POST /v1/responses: parse, the session (previous_response_id continues
 * one, store:true creates one), prompt, then the generation (genstream). */
enum MHD_Result api_responses(struct request *r);
