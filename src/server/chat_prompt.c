/* Adapter between the API's parsed messages and the chat template module.
 * Until a template family is known for the model, the plain fallback is:
 * each message's content on its own line, then the model continues. */
#include "server/chat_prompt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

int chat_prompt_render(const struct tokenizer *tok, const struct api_message *msgs, size_t n,
		       char **text, char *err, size_t err_len)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += strlen(msgs[i].content) + 1;
	char *s = malloc(len + 1);
	if (!s)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(msgs[i].content);
		memcpy(s + at, msgs[i].content, l);
		at += l;
		if (i + 1 < n)
			s[at++] = '\n';
	}
	s[at] = '\0';
	*text = s;
	return 0;
}
