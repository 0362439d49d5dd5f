/* Chat templates: an OpenAI `messages` list to one prompt string, in the
 * format of the model's `tokenizer.chat_template` when that template is one
 * of the known families (recognised by characteristic substrings, no Jinja
 * engine), else a plain fallback for models without a chat format. */
#pragma once

#include <stddef.h>

#include "server/chat_family.h"

struct cJSON;
struct tool_set;

struct chat_message {
	/* "system", "user" or "assistant"; chat_template_apply_tools also takes
	 * "developer" (as "system") and "tool" (a tool's result) */
	const char *role;
	const char *content; /* UTF-8; may be NULL for an assistant message with tool_calls */
	/* role "assistant": the calls it made, request.h's normalised
	 * [{"id","type","function":{"name","arguments"}}] array; NULL or empty:
	 * none */
	const struct cJSON *tool_calls;
};

/* The family of a tokenizer.chat_template string; NULL or "" gives
 * CHAT_FAMILY_NONE, an unrecognised template CHAT_FAMILY_UNKNOWN. */
enum chat_family chat_template_detect(const char *tmpl);

/* "none", "llama-2", "llama-3", "chatml", "mistral", "zephyr", "gemma",
 * "phi-3", "unknown". */
const char *chat_family_name(enum chat_family fam);

/* The inverse of chat_family_name (for a configured override); returns 0 or
 * -EINVAL with a message listing the names. */
int chat_family_parse(const char *name, enum chat_family *out, char *err, size_t err_len);

/* The text of the token that ends an assistant turn in this family
 * ("<|eot_id|>", "<|im_end|>", "</s>", "<end_of_turn>", "<|end|>"), to stop
 * on (as a stop string, or via tokenizer_find_token); NULL for the plain
 * fallback. */
const char *chat_family_end_of_turn(enum chat_family fam);

/* Renders msgs[0..n) as the family's template does with
 * add_generation_prompt=true, minus the leading BOS text (the tokenizer adds
 * BOS itself; a BOS inside the history, as llama-2's "<s>", is kept as text
 * for parse_special).  Families whose template has no system role (mistral,
 * gemma) get the system content put in front of the first user message,
 * followed by "\n\n"; those templates also need user/assistant turns to
 * alternate, starting with user, with a system message only first.
 * CHAT_FAMILY_NONE and _UNKNOWN: the contents of the system messages, then
 * of the others, in order, joined by "\n", with no role markers and no
 * trailing newline, so a plain language model continues the user's text.
 * *out is malloc'ed.  *system_end (may be NULL) is the length of the
 * prefix that holds the leading system message(s) and the template text
 * before the first user turn (folded families: the system text and its
 * "\n\n"; plain: every system text and the "\n" after them); 0 when there
 * is no system message.  Returns 0, -EINVAL (empty list, unknown role,
 * missing content, turns the family cannot express) with a message, or
 * -ENOMEM.  Assistant tool_calls are written as chat_template_apply_tools
 * writes them; roles "developer" and "tool" are refused here. */
int chat_template_apply(enum chat_family fam, const struct chat_message *msgs, size_t n,
			char **out, size_t *system_end, char *err, size_t err_len);

/* chat_template_apply with tools: ts's tools offered in the family's tool
 * format (tool_format_of(fam), tools.h) where its template offers them
 * (ts NULL or not offered: none), role "tool" messages and assistant
 * tool_calls written in that format, "developer" read as "system".
 *   hermes (chatml): the tools' text after the first system message's
 *     content and "\n\n" (a system message of its own when there is none
 *     first); the calls after the assistant's content and "\n"; a run of
 *     tool messages is one user turn of results joined by "\n".
 *   generic (every other family): the same, through that family's turns.
 *   llama-3: a system turn starting "Environment: ipython\nCutting
 *     Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" (the
 *     3.1 template's), the tools' text in front of the first user message,
 *     the calls alone as the assistant's turn, each result an "ipython"
 *     turn.
 *   mistral: the tools' text right before the last user turn's "[INST]",
 *     the calls after the assistant's content, each result as is; calls and
 *     results stay out of the user/assistant alternation.
 * *system_end also covers a system turn that the tools added.  Errors as
 * chat_template_apply's, and llama-3 with tools needs a user message. */
int chat_template_apply_tools(enum chat_family fam, const struct tool_set *ts,
			      const struct chat_message *msgs, size_t n, char **out,
			      size_t *system_end, char *err, size_t err_len);
