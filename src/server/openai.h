/* OpenAI response objects: completion and chat completion, whole or as
 * stream chunks (tool calls included), usage, logprobs (both formats), SSE
 * framing (data-only, and with an event type for the Responses API). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "engine/sampler.h"
#include "sched/scheduler.h"

struct tokenizer;

struct oa_ctx {
	bool chat;
	const char *id; /* "cmpl-..." / "chatcmpl-..." */
	const char *model;
	long created;       /* unix seconds */
	bool include_usage; /* stream_options.include_usage */
};

/* "stop" | "length" | NULL (not finished / cancelled). */
const char *oa_finish_reason(enum gen_finish f);

/* One stream chunk.  text may be NULL.  chat + role: the first delta carries
 * "role":"assistant".  logprobs (taken) may be NULL. */
cJSON *oa_chunk(const struct oa_ctx *c, const char *text, size_t len, bool role, cJSON *logprobs,
                const char *finish_reason);
/* A chat chunk of reasoning text: "delta": {"reasoning_content": text}
 * (llama.cpp's and vLLM's field), with "role" and "content": null when
 * role.  logprobs (taken) may be NULL. */
cJSON *oa_reasoning_chunk(const struct oa_ctx *c, const char *text, size_t len, bool role,
                          cJSON *logprobs);
/* Gives the whole chat object (oa_final) message.reasoning_content. */
void oa_final_set_reasoning(cJSON *final, const char *text, size_t len);
/* The last chunk when include_usage: "choices":[] and "usage". */
cJSON *oa_usage_chunk(const struct oa_ctx *c, int n_prompt, int n_cached, int n_generated);
/* The whole object of stream:false. */
cJSON *oa_final(const struct oa_ctx *c, const char *text, size_t len, cJSON *logprobs,
                const char *finish_reason, int n_prompt, int n_cached, int n_generated);
/* {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details:
 * {cached_tokens}}: n_cached of the prompt's tokens came from the prefix
 * cache (always there, 0 when none, as OpenAI writes it). */
cJSON *oa_usage(int n_prompt, int n_cached, int n_generated);

/* Chat tool calls.  A stream chunk of one call: its start (id and name
 * set) {"index","id","type":"function","function":{"name","arguments":""}},
 * or a piece of its arguments (id NULL) {"index","function":{"arguments"}},
 * in "delta":{"tool_calls":[...]}.  role: the first delta of the stream,
 * which also says "role":"assistant" and "content":null. */
cJSON *oa_tool_call_chunk(const struct oa_ctx *c, bool role, int index, const char *id,
                          const char *name, const char *args, size_t args_len);
/* One entry of message.tool_calls:
 * {"id","type":"function","function":{"name","arguments"}}. */
cJSON *oa_tool_call(const char *id, const char *name, const char *args, size_t args_len);
/* Gives the whole chat object (oa_final) its message.tool_calls (taken);
 * a message without text then has "content": null, as OpenAI's. */
void oa_final_set_tool_calls(cJSON *final, cJSON *tool_calls);

/* Logprobs containers: completions {"tokens","token_logprobs","top_logprobs",
 * "text_offset"}, chat {"content":[...]}. */
cJSON *oa_logprobs_new(bool chat);
void oa_logprobs_add(cJSON *lp, bool chat, const struct tokenizer *tok,
                     const struct sampler_result *res, size_t text_offset);

cJSON *oa_error(const char *message, const char *type, const char *param, const char *code);

/* A JSON string of exactly len bytes: a NUL in it comes out as \u0000
 * (cJSON's own strings end at the first NUL). */
cJSON *oa_string_n(const char *s, size_t len);

/* Appends "data: <json>\n\n" (frees obj) or "data: [DONE]\n\n" (obj NULL) to
 * a growing buffer; returns 0 or -ENOMEM. */
int sse_append(char **buf, size_t *len, size_t *cap, cJSON *obj);
int sse_append_raw(char **buf, size_t *len, size_t *cap, const char *s, size_t n);
/* "event: <event>\ndata: <json>\n\n" (frees obj): the Responses API's
 * typed events. */
int sse_append_event(char **buf, size_t *len, size_t *cap, const char *event, cJSON *obj);
