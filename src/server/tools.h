/* Tool calling (OpenAI `tools` / `tool_choice`): the function definitions
 * of a request, how the model's chat family writes a tool call (the text
 * put in the prompt that lists the tools, and the envelope a call is
 * written in), and a streaming parser that finds tool calls in generated
 * text.  Formats: llama-3.x (JSON {"name", "parameters"} after
 * <|python_tag|> or alone), chatml / Qwen2.x / Hermes (<tool_call>JSON
 * </tool_call>), mistral ([TOOL_CALLS][JSON, ...]), and for every other
 * family the generic format documented in the README (the Hermes envelope,
 * with the tool list in plain words in the system text). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "server/chat_family.h"
#include "server/request_fields.h"

enum tool_choice_kind {
	TOOL_CHOICE_AUTO = 0, /* the model decides; calls are parsed from the text */
	TOOL_CHOICE_NONE,     /* no calls: the tools are not offered */
	TOOL_CHOICE_REQUIRED, /* exactly one call to one of the tools, constrained */
	TOOL_CHOICE_NAMED,    /* exactly one call to the named tool, constrained */
};

struct tool_def {
	char *name;
	char *description; /* NULL when none */
	cJSON *parameters; /* JSON Schema of the arguments (an object schema); never NULL */
	bool strict;
};

struct tool_set {
	struct tool_def *tools;
	size_t n_tools;
	enum tool_choice_kind choice;
	size_t named;  /* TOOL_CHOICE_NAMED: index into tools */
	bool parallel; /* parallel_tool_calls (default true): auto may parse several calls */
};

/* Parses `tools`, `tool_choice` and `parallel_tool_calls` of a request
 * object (any of them may be absent: then *out has n_tools 0 and choice
 * NONE).  responses_api: the Responses API's flat form
 * {"type":"function","name",...} instead of chat's
 * {"type":"function","function":{"name",...}}.  Errors name the field
 * ("tools[2].function.name", "tool_choice") in e.  Returns 0, -EINVAL,
 * -ENOMEM. */
int tool_set_parse(const cJSON *request, bool responses_api, struct tool_set *out,
                   struct api_error *e);
void tool_set_deinit(struct tool_set *ts);

/* The family's tool-calling format (CHAT_FAMILY_NONE / _UNKNOWN / families
 * without one: the generic format).  The formats after MISTRAL are found
 * only in a template's source (chat_format.h); the prompt texts below
 * write them as generic, the parser and the forced call know them. */
enum tool_format {
	TOOL_FORMAT_GENERIC = 0,
	TOOL_FORMAT_LLAMA3,
	TOOL_FORMAT_HERMES,
	TOOL_FORMAT_MISTRAL, /* [TOOL_CALLS][{...}] and the newer [TOOL_CALLS]NAME[ARGS]{...} */
	/* DeepSeek: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
	 * <｜tool▁call▁end｜> (R1, V3) or <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
	 * <｜tool▁call▁end｜> (V3.1), inside <｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜> */
	TOOL_FORMAT_DEEPSEEK,
	/* Command-R7B: <|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, ...]
	 * <|END_ACTION|> */
	TOOL_FORMAT_COMMAND_R,
	/* gpt-oss harmony: to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
	 * (reasoning.c hands the tool parser a commentary message's recipient and
	 * body in this shape) */
	TOOL_FORMAT_HARMONY,
	/* as MISTRAL, for templates that write [TOOL_CALLS]NAME[ARGS]{...}: a
	 * forced call is written so */
	TOOL_FORMAT_MISTRAL_ARGS,
	/* as DEEPSEEK, for templates without the ```json fence (V3.1): a forced
	 * call is <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜> */
	TOOL_FORMAT_DEEPSEEK_V3_1,
};
enum tool_format tool_format_of(enum chat_family fam);
/* "generic", "llama-3", "hermes", "mistral", "deepseek", "command-r", "harmony",
 * "mistral-args", "deepseek-v3.1" */
const char *tool_format_name(enum tool_format f);

/* Whether the prompt offers ts's tools: ts not NULL, with tools, and
 * tool_choice not "none". */
bool tool_set_offered(const struct tool_set *ts);

/* The text that offers the tools to the model, placed as that family's
 * template places it (system message for hermes and generic, a user-turn
 * preamble for llama-3 and mistral: see chat_template_apply_tools).  NULL
 * tools or none offered (tool_set_offered false): *out is NULL.  Else *out
 * is malloc'ed.  Returns 0 or -ENOMEM. */
int tool_prompt_text(enum tool_format f, const struct tool_set *ts, char **out, char *err,
                     size_t err_len);

/* An assistant message's tool_calls (request.h's normalised array) as the
 * model writes them in format f: hermes and generic one
 * "<tool_call>\n{\"name\": N, \"arguments\": A}\n</tool_call>" per call,
 * joined by "\n"; llama-3 {"name": N, "parameters": A} per call, joined by
 * "\n"; mistral "[TOOL_CALLS][{\"name\": N, \"arguments\": A}, ...]".  A is
 * the call's arguments re-spaced as json.dumps writes them, or a JSON
 * string of them when they are not JSON.  *out malloc'ed.  Returns 0,
 * -EINVAL (a call without a function name), -ENOMEM. */
int tool_calls_text(enum tool_format f, const cJSON *tool_calls, char **out, char *err,
                    size_t err_len);

/* A tool message's content as format f hands it back: hermes and generic
 * "<tool_response>\n" + content + "\n</tool_response>"; llama-3 the content
 * itself (the body of an "ipython" turn); mistral
 * "[TOOL_RESULTS]{\"content\": C}[/TOOL_RESULTS]", C the content as JSON
 * when it is JSON, else as a JSON string.  *out malloc'ed.  Returns 0 or
 * -ENOMEM. */
int tool_result_text(enum tool_format f, const char *content, char **out, char *err,
                     size_t err_len);

/* For TOOL_CHOICE_REQUIRED / NAMED: the forced output as literal prefix +
 * JSON Schema of the call object + literal suffix, for
 * grammar_from_json_schema_wrapped.  The schema (caller deletes) is
 * {"type": "object", "properties": {"name": {"const": NAME}, KEY:
 * parameters}, "required": ["name", KEY], "additionalProperties": false}
 * for the named tool (or the only one), an {"anyOf": [...]} of one such
 * object per tool for required, so each name goes with its own arguments.
 * hermes, generic: "<tool_call>\n" + schema + "\n</tool_call>", KEY
 * "arguments"; llama-3: "" + schema + "", KEY "parameters"; mistral:
 * "[TOOL_CALLS][" + schema + "]", KEY "arguments".  *prefix and *suffix
 * malloc'ed.  Returns 0, -EINVAL (no tools, or a choice that forces no
 * call), -ENOMEM. */
int tool_call_constraint(enum tool_format f, const struct tool_set *ts, char **prefix,
                         cJSON **schema, char **suffix, char *err, size_t err_len);

/* A forced call's constraint in any format: alternatives of prefix +
 * schema + suffix (grammar.h's grammar_alt).  Formats that write the name
 * outside the JSON (deepseek, harmony) get one alternative per tool (the
 * named one only, for NAMED), its schema the tool's parameters: deepseek
 * "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>" NAME
 * "\n```json\n" ... "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", harmony
 * "<|channel|>commentary to=functions." NAME " <|constrain|>json<|message|>"
 * ... "<|call|>".  Every other format: tool_call_constraint's one
 * (command-r: "<|START_ACTION|>[" {"tool_call_id": "0", "tool_name",
 * "parameters"} "]<|END_ACTION|>").  Returns 0, -EINVAL, -ENOMEM. */
struct tool_constraint {
	size_t n;
	char **prefix, **suffix;
	cJSON **schema;
};
int tool_constraint_build(enum tool_format f, const struct tool_set *ts,
                          struct tool_constraint *out, char *err, size_t err_len);
void tool_constraint_deinit(struct tool_constraint *c);

/* Streaming tool-call parser over generated text (already stop-string
 * filtered).  Text that is not part of a call comes out as content; text
 * that may be the start of an envelope is held until it is known. */
enum tool_event_kind {
	TOOL_EV_CONTENT = 0, /* plain text for message.content */
	TOOL_EV_CALL_BEGIN,  /* a call starts: index, id, name */
	TOOL_EV_ARGS,        /* a piece of the arguments' JSON text */
	TOOL_EV_CALL_END,    /* the call's arguments are complete */
};
/* The pointers are valid during the callback only. */
struct tool_event {
	enum tool_event_kind kind;
	int index;        /* the call's position in tool_calls; -1 for CONTENT */
	const char *id;   /* CALL_BEGIN: "call_..." (24 random hex chars) */
	const char *name; /* CALL_BEGIN */
	const char *text; /* CONTENT, ARGS (not NUL-terminated) */
	size_t len;
};
typedef void (*tool_event_cb)(void *user, const struct tool_event *ev);

/* ts (may be NULL: nothing is a call) is borrowed and must outlive the
 * parser.  Returns 0 or -ENOMEM.  Feed and finish return -ENOMEM, or -EIO
 * when no random bytes were to be had for an id. */
struct tool_parser;
int tool_parser_new(enum tool_format f, const struct tool_set *ts, struct tool_parser **out);
void tool_parser_free(struct tool_parser *p);
/* Feeds generated text; events come out through cb, in order. */
int tool_parser_feed(struct tool_parser *p, const char *text, size_t len, tool_event_cb cb,
                     void *user);
/* End of generation: releases held text (a partial envelope that never
 * became a call comes out as content) and ends an open call.  Returns the
 * number of complete calls seen (finish_reason "tool_calls" when > 0). */
int tool_parser_finish(struct tool_parser *p, tool_event_cb cb, void *user);
