/* Adapter between the API's parsed messages and the chat template module:
 * the model's template family comes from tokenizer.chat_template; OpenAI's
 * "developer" role reads as "system", and "tool" results and assistant
 * tool_calls go through in the family's tool format.  It does not render
 * anything itself (chat_template.c and tools.c do). */
#include "server/chat_prompt.h"

#include <errno.h>
#include <stdlib.h>

#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

/* The one place that picks the family, so the prompt and the tool format
 * (the parser, the forced call's envelope) always agree. */
static enum chat_family prompt_family(const struct tokenizer *tok)
{
	return chat_template_detect(tokenizer_chat_template(tok));
}

enum tool_format chat_prompt_tool_format(const struct tokenizer *tok)
{
	return tool_format_of(prompt_family(tok));
}

int chat_prompt_render(const struct tokenizer *tok, const struct api_message *msgs, size_t n,
                       const struct tool_set *ts, char **text, size_t *system_end, char *err,
                       size_t err_len)
{
	struct chat_message *cm = calloc(n ? n : 1, sizeof(*cm));
	if (!cm)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		cm[i] = (struct chat_message){.role = msgs[i].role,
		                              .content = msgs[i].content,
		                              .tool_calls = msgs[i].tool_calls};
	int rc = chat_template_apply_tools(prompt_family(tok), ts, cm, n, text, system_end, err,
	                                   err_len);
	free(cm);
	return rc;
}
