/* Adapter between the API's parsed messages and the chat template module:
 * the model's template family comes from tokenizer.chat_template; OpenAI's
 * "developer" role reads as "system", and "tool" results and assistant
 * tool_calls go through in the family's tool format.  It does not render
 * anything itself (chat_template.c and tools.c do). */
#include "server/chat_prompt.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "server/chat_format.h"
#include "server/chat_render.h"
#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

/* The one place that picks the family, so the prompt and the tool format
 * (the parser, the forced call's envelope) always agree. */
static enum chat_family prompt_family(const struct tokenizer *tok)
{
	return chat_template_detect(tokenizer_chat_template(tok));
}

enum tool_format chat_prompt_tool_format(const struct tokenizer *tok,
                                         const struct chat_render *cr)
{
	struct chat_format f;
	chat_prompt_format(tok, cr, &f);
	return f.tools;
}

void chat_prompt_format(const struct tokenizer *tok, const struct chat_render *cr,
                        struct chat_format *out)
{
	if (cr)
		*out = *chat_render_format(cr);
	else
		chat_format_detect(tokenizer_chat_template(tok), out);
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

/* Each part with its length first, so that no two messages hash alike by
 * moving bytes between fields; "developer" hashes as "system" (it renders
 * as one). */
static void digest_part(EVP_MD_CTX *ctx, const char *s, size_t n)
{
	uint64_t len = s ? (uint64_t)n : UINT64_MAX;
	EVP_DigestUpdate(ctx, &len, sizeof(len));
	if (s && n)
		EVP_DigestUpdate(ctx, s, n);
}

void api_message_digest(const struct api_message *m, unsigned char out[32])
{
	memset(out, 0, 32);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return;
	}
	const char *role = m->role && !strcmp(m->role, "developer") ? "system" : m->role;
	digest_part(ctx, role, role ? strlen(role) : 0);
	digest_part(ctx, m->content, m->content ? m->content_len : 0);
	digest_part(ctx, m->name, m->name ? strlen(m->name) : 0);
	digest_part(ctx, m->tool_call_id, m->tool_call_id ? strlen(m->tool_call_id) : 0);
	char *calls = m->tool_calls ? cJSON_PrintUnformatted(m->tool_calls) : NULL;
	digest_part(ctx, calls, calls ? strlen(calls) : 0);
	free(calls);
	unsigned int n = 0;
	EVP_DigestFinal_ex(ctx, out, &n);
	EVP_MD_CTX_free(ctx);
}
