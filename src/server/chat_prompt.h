/* Chat messages to prompt text, through the model's chat template family
 * (chat_template.c) or the documented plain fallback, with the request's
 * tools in the family's tool format (tools.h). */
#pragma once

#include <stddef.h>

#include "server/request.h"
#include "server/tools.h"

struct tokenizer;
struct chat_render;

/* ts: the request's tools (NULL: none; tool_choice "none": not offered);
 * tool messages and tool calls in msgs are written in the model's tool
 * format either way.  *text is malloc'ed; *system_end (may be NULL): see
 * chat_template_apply. */
int chat_prompt_render(const struct tokenizer *tok, const struct api_message *msgs, size_t n,
                       const struct tool_set *ts, char **text, size_t *system_end, char *err,
                       size_t err_len);

/* SHA-256 of what a message says (role, content, name, tool_call_id, tool
 * calls): what a session's chat marks compare a re-sent message by. */
void api_message_digest(const struct api_message *m, unsigned char out[32]);

/* The model's tool format: chat_prompt_format's tools. */
enum tool_format chat_prompt_tool_format(const struct tokenizer *tok,
                                         const struct chat_render *cr);
/* The model's output format (tool calls, reasoning), from the source of
 * the template its prompts are rendered with (chat_format.h): cr's (the
 * renderer in force, model.chat_template or the GGUF's) when there is one,
 * else the GGUF's template text (NULL: the plain fallback). */
struct chat_format;
void chat_prompt_format(const struct tokenizer *tok, const struct chat_render *cr,
                        struct chat_format *out);
