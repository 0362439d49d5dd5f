/* Adapter between the API's parsed messages and the chat template module:
 * the model's template family comes from tokenizer.chat_template; OpenAI's
 * "developer" role reads as "system" and "tool" results as "user" turns.
 * It does not render anything itself (chat_template.c does). */
#include "server/chat_prompt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

static const char *template_role(const char *role)
{
	if (!strcmp(role, "developer"))
		return "system";
	if (!strcmp(role, "tool"))
		return "user";
	return role;
}

int chat_prompt_render(const struct tokenizer *tok, const struct api_message *msgs, size_t n,
                       char **text, size_t *system_end, char *err, size_t err_len)
{
	enum chat_family fam = chat_template_detect(tokenizer_chat_template(tok));
	struct chat_message *cm = calloc(n ? n : 1, sizeof(*cm));
	if (!cm)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		cm[i] = (struct chat_message){.role = template_role(msgs[i].role),
		                              .content = msgs[i].content};
	int rc = chat_template_apply(fam, cm, n, text, system_end, err, err_len);
	free(cm);
	return rc;
}
