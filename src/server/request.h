/* Parsing and validation of OpenAI request bodies (completions, chat
 * completions, tokenize, detokenize) into plain structs, with errors that
 * name the offending field.  Needs no model: ranges that depend on the
 * vocabulary are checked by the caller.
 *
 * Bodies are strict JSON (RFC 8259: no leading zeros, nothing after the
 * value, no raw control characters, valid UTF-8, at most REQUEST_MAX_DEPTH
 * levels, numbers of at most 63 characters, a known field at most once),
 * checked in one linear pass.  A number outside its field's range (1e400
 * included) is a 400 naming the field; -0 reads as 0.  Text fields carry a
 * length: a "\u0000" in them is a NUL byte of the text.  Name-like fields
 * (model, role, session_id, stop strings) refuse it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "engine/sampler.h"
#include "server/request_fields.h"
#include "util/errbuf.h"

#define REQUEST_MAX_DEPTH 64 /* nesting levels of a request body */

struct api_message {
	char *role;    /* "system", "developer" (as system), "user", "assistant", "tool" */
	char *content; /* content_len bytes (may hold NUL) + a NUL; "" for null content */
	size_t content_len;
	char *name;         /* optional "name"; NULL when absent */
	char *tool_call_id; /* role "tool": the call this is the result of; else NULL */
	/* role "assistant": the calls it made, normalised to
	 * [{"id","type":"function","function":{"name","arguments"}}]; NULL when none */
	cJSON *tool_calls;
	/* role "assistant": the reasoning of an earlier turn as the client sent
	 * it back (what a chat template may render); NULL when absent */
	char *reasoning_content;
};

/* Which API a generation answers in. */
enum gen_api { GEN_API_COMPLETIONS = 0, GEN_API_CHAT, GEN_API_RESPONSES };

enum response_format_kind {
	RESPONSE_FORMAT_TEXT = 0,
	RESPONSE_FORMAT_JSON_OBJECT, /* any JSON object */
	RESPONSE_FORMAT_JSON_SCHEMA, /* a value of response_schema */
};

struct tool_set;
struct grammar;
struct sched_chat_mark;

struct gen_args {
	bool chat; /* chat completions or the Responses API: messages, not a prompt */
	enum gen_api api;
	bool stream;
	bool include_usage;
	bool logprobs;
	char *model; /* requested model, NULL when omitted */
	int max_tokens;
	struct sampler_params sampling;
	bool seed_given;
	bool ignore_eos;  /* llama.cpp extension: generate past end-of-text */
	char *session_id; /* continue a persistent session, NULL when none */
	/* completions: the prompt's first N tokens stay in the sink tier (chat:
	 * set by api.c from inference.cache.pin_system_prompt); 0: none */
	int pin_prefix_tokens;
	char **stops;
	size_t n_stops;
	/* completions: text, or token ids when the prompt was given as ids */
	char *prompt; /* prompt_len bytes (may hold NUL) + a NUL */
	size_t prompt_len;
	int32_t *prompt_ids;
	size_t n_prompt_ids;
	/* chat */
	struct api_message *messages;
	size_t n_messages;
	/* response_format (chat, completions) or text.format (Responses) */
	enum response_format_kind response_format;
	cJSON *response_schema;     /* JSON_SCHEMA: json_schema.schema (owned) */
	char *response_schema_name; /* json_schema.name, NULL when absent */
	bool response_strict;       /* json_schema.strict */
	/* tools, tool_choice, parallel_tool_calls; NULL when no tools were sent */
	struct tool_set *tools;
	/* logit_bias: token ids checked against the vocabulary by api.c */
	struct sampler_bias *logit_bias;
	size_t n_logit_bias;
	/* Set by api.c from response_format / tool_choice: the constraint the
	 * generation decodes under (a reference, handed to the scheduler). */
	struct grammar *grammar;
	/* Chat with session_id (api.c): the session's chat marks once this
	 * request's messages are in; its reply's mark (group chat_group, at
	 * chat_group_pos) is added when it ends (genstream).  NULL: untracked. */
	struct sched_chat_mark *chat_marks;
	size_t n_chat_marks;
	uint64_t chat_group_pos;
	uint32_t chat_group;
	/* reasoning_format (chat): "none" keeps a reply's reasoning in its
	 * content; else (default) it goes to reasoning_content */
	bool reasoning_in_content;
	/* Set by gen_prepare_prompt: where the rendered chat prompt leaves the
	 * model (enum reasoning_start, chat_format.h) */
	int reasoning_start;
	/* structured_outputs.regex (or .choice, as a regex) or guided_regex:
	 * the whole output matches it; NULL when absent.  regex_param: the
	 * client's name of the field */
	char *regex;
	const char *regex_param;
	/* Responses API */
	char *instructions;         /* NULL when absent */
	char *previous_response_id; /* NULL when absent */
	bool store;                 /* default true */
	/* Chat, for the model's own chat template (chat_render.h): the
	 * request's chat_template_kwargs (an object; owned) and
	 * reasoning_effort; NULL when absent */
	cJSON *chat_template_kwargs;
	char *reasoning_effort;
	/* Chat on a session: messages before it are held by the stream already
	 * (api.c's plan); only the ones from it on are added */
	size_t chat_first_new;
};

/* Shared with the Responses API parser (responses.c): a response_format
 * object at `param` (chat and completions: {"type", "json_schema": {"name",
 * "schema", "strict"}}; responses_api: text.format's flat {"type", "name",
 * "schema", "strict"}) into a's response_format fields; and `tools`,
 * `tool_choice`, `parallel_tool_calls` of root into a->tools. */
int request_response_format(const cJSON *fmt, const char *param, bool responses_api,
                            struct gen_args *a, struct api_error *e);
int request_parse_tools(const cJSON *root, bool responses_api, struct gen_args *a,
                        struct api_error *e);
/* chat_template_kwargs of root (an object whose keys become the chat
 * template's variables; those the server sets are refused) and, with
 * effort, reasoning_effort (chat completions) into a. */
int request_parse_template_args(const cJSON *root, bool effort, struct gen_args *a,
                                struct api_error *e);
/* reasoning_format (llama.cpp's names: "none", "auto", "deepseek") and
 * vLLM's structured_outputs {"regex"} or {"choice": [strings]} (as a
 * regex) / guided_regex of root into a's reasoning_in_content, regex and
 * regex_param.  The regex is compiled
 * with the constraint (gen_prepare.c), where a bad one is refused with its
 * position. */
int request_output_fields(const cJSON *root, struct gen_args *a, struct api_error *e);

/* The parsing rules above, for the Responses API parser (responses.c; the
 * field readers, refusals and the duplicate-key check are
 * request_fields.h's): the body checked and parsed into an object; 0 or
 * -EINVAL / -ENOMEM with e set. */
int request_parse_body(const char *body, size_t len, cJSON **root, struct api_error *e);
/* Appends n bytes of a parsed text to a growing buffer (NUL-terminated),
 * stand-ins back as NUL; 0 or -ENOMEM. */
int request_text_append(char **s, size_t *len, size_t *cap, const char *t, size_t n);

/* max_tokens_limit: limits.max_tokens.  Returns 0 or -EINVAL with *e set. */
int gen_args_parse(const char *body, size_t len, bool chat, int64_t max_tokens_limit,
                   struct gen_args *out, struct api_error *e);
void gen_args_deinit(struct gen_args *a);

/* POST /v1/sessions: {"window_size": N, "sink_keep_count": M}, both optional
 * (an empty body is fine). */
struct session_create_args {
	int window_size;     /* 0: configured */
	int sink_keep_count; /* -1: configured */
};
int session_create_args_parse(const char *body, size_t len, struct session_create_args *out,
                              struct api_error *e);

/* POST /v1/sessions/{id}/append: {"text", "revise_last_tokens",
 * "pin_prefix_tokens" (into gen), "generate":
 * {completion fields; "stream" defaults to true}}. */
struct append_args {
	char *text; /* text_len bytes (may hold NUL) + a NUL */
	size_t text_len;
	size_t revise_last_tokens;
	bool generate;
	struct gen_args gen; /* when generate: sampling, max_tokens, stream, ... */
};
int append_args_parse(const char *body, size_t len, int64_t max_tokens_limit,
                      struct append_args *out, struct api_error *e);
void append_args_deinit(struct append_args *a);

struct tokenize_args {
	char *content; /* content_len bytes (may hold NUL) + a NUL */
	size_t content_len;
	bool add_special;
	bool parse_special;
};
int tokenize_args_parse(const char *body, size_t len, struct tokenize_args *out,
                        struct api_error *e);

/* tokens: malloc'ed ids (may be empty). */
int detokenize_args_parse(const char *body, size_t len, int32_t **tokens, size_t *n_tokens,
                          struct api_error *e);
