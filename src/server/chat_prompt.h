/* Chat messages to prompt text, through the model's chat template family
 * (chat_template.c) or the documented plain fallback. */
#pragma once

#include <stddef.h>

#include "server/request.h"

struct tokenizer;

/* *text is malloc'ed; *system_end (may be NULL): see chat_template_apply. */
int chat_prompt_render(const struct tokenizer *tok, const struct api_message *msgs, size_t n,
                       char **text, size_t *system_end, char *err, size_t err_len);
