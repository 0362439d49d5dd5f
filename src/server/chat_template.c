/* Chat templates without a Jinja engine.
 *
 * A GGUF model carries its chat format as a Jinja program in
 * tokenizer.chat_template.  Instead of interpreting it, we recognise the few
 * families that matter by substrings that only they contain, and render each
 * family in C exactly as its reference template renders with
 * add_generation_prompt=true (the reference templates: Llama-2-chat,
 * Meta-Llama-3-Instruct, ChatML (OpenHermes/Qwen without a default system
 * prompt), Mistral-7B-Instruct-v0.2, zephyr-7b-beta, gemma-7b-it and
 * Phi-3-mini-instruct).  The one deliberate difference: the leading BOS is
 * not written, because the tokenizer adds the BOS token itself.
 *
 * Where a template raises an error (mistral and gemma reject a system role;
 * llama-2, mistral and gemma want user/assistant to alternate), we fold a
 * leading system message into the first user turn instead, and reject the
 * orderings the template cannot express, with a message that says why.
 *
 * Without a template (a plain language model such as stories260K), the
 * prompt is the messages' contents joined by newlines, system first.
 *
 * It does not tokenize, know special-token ids, or support tools/images. */
#include "server/chat_template.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

/* ---------------------------------------------------------------- families */

struct family_info {
	enum chat_family fam;
	const char *name;
	const char *end_of_turn;
};

static const struct family_info families[] = {
	{CHAT_FAMILY_NONE, "none", NULL},
	{CHAT_FAMILY_LLAMA2, "llama-2", "</s>"},
	{CHAT_FAMILY_LLAMA3, "llama-3", "<|eot_id|>"},
	{CHAT_FAMILY_CHATML, "chatml", "<|im_end|>"},
	{CHAT_FAMILY_MISTRAL, "mistral", "</s>"},
	{CHAT_FAMILY_ZEPHYR, "zephyr", "</s>"},
	{CHAT_FAMILY_GEMMA, "gemma", "<end_of_turn>"},
	{CHAT_FAMILY_PHI3, "phi-3", "<|end|>"},
	{CHAT_FAMILY_UNKNOWN, "unknown", NULL},
};

static const struct family_info *family_find(enum chat_family fam)
{
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		if (families[i].fam == fam)
			return &families[i];
	return &families[0];
}

const char *chat_family_name(enum chat_family fam)
{
	return family_find(fam)->name;
}

const char *chat_family_end_of_turn(enum chat_family fam)
{
	return family_find(fam)->end_of_turn;
}

int chat_family_parse(const char *name, enum chat_family *out, char *err, size_t err_len)
{
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		if (families[i].fam != CHAT_FAMILY_UNKNOWN && name &&
		    strcmp(name, families[i].name) == 0) {
			*out = families[i].fam;
			return 0;
		}
	}
	return err_set(err, err_len, -EINVAL,
		       "unknown chat template '%s' (expected none, llama-2, llama-3, chatml, "
		       "mistral, zephyr, gemma or phi-3)",
		       name ? name : "(null)");
}

static bool has(const char *tmpl, const char *needle)
{
	return strstr(tmpl, needle) != NULL;
}

enum chat_family chat_template_detect(const char *tmpl)
{
	if (tmpl == NULL || tmpl[0] == '\0')
		return CHAT_FAMILY_NONE;
	if (has(tmpl, "<|im_start|>")) /* phi-4 looks like ChatML but is not */
		return has(tmpl, "<|im_sep|>") ? CHAT_FAMILY_UNKNOWN : CHAT_FAMILY_CHATML;
	if (has(tmpl, "<|start_header_id|>") && has(tmpl, "<|end_header_id|>"))
		return CHAT_FAMILY_LLAMA3;
	if (has(tmpl, "<start_of_turn>"))
		return CHAT_FAMILY_GEMMA;
	if (has(tmpl, "[INST]"))
		return has(tmpl, "<<SYS>>") ? CHAT_FAMILY_LLAMA2 : CHAT_FAMILY_MISTRAL;
	if (has(tmpl, "<|user|>") && has(tmpl, "<|end|>"))
		return CHAT_FAMILY_PHI3;
	if (has(tmpl, "<|user|>") && (has(tmpl, "</s>") || has(tmpl, "eos_token")))
		return CHAT_FAMILY_ZEPHYR;
	return CHAT_FAMILY_UNKNOWN;
}

/* ---------------------------------------------------------------- output */

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
	size_t mark; /* where the system part ends (0: no system part) */
};

static void sb_putn(struct sbuf *sb, const char *s, size_t n)
{
	if (sb->oom)
		return;
	if (sb->len + n + 1 > sb->cap) {
		size_t cap = sb->cap ? sb->cap : 256;
		while (cap < sb->len + n + 1)
			cap *= 2;
		char *p = realloc(sb->p, cap);
		if (!p) {
			sb->oom = true;
			return;
		}
		sb->p = p;
		sb->cap = cap;
	}
	memcpy(sb->p + sb->len, s, n);
	sb->len += n;
	sb->p[sb->len] = '\0';
}

static void sb_put(struct sbuf *sb, const char *s)
{
	sb_putn(sb, s, strlen(s));
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Appends s without leading and trailing whitespace (Jinja's trim,
 * Python's strip(), for ASCII whitespace). */
static void sb_put_trimmed(struct sbuf *sb, const char *s)
{
	size_t n = strlen(s);
	while (n > 0 && is_space(s[n - 1]))
		n--;
	while (n > 0 && is_space(*s))
		s++, n--;
	sb_putn(sb, s, n);
}

/* Appends trim(pre + sys + post + content): a system text folded into the
 * first user turn, trimmed as one string; the mark goes after post. */
static void sb_put_trimmed_sys(struct sbuf *sb, const char *pre, const char *sys,
			       const char *post, const char *content)
{
	struct sbuf tmp = {0};
	sb_put(&tmp, pre);
	sb_put(&tmp, sys);
	sb_put(&tmp, post);
	size_t sys_end = tmp.len;
	sb_put(&tmp, content);
	const char *t = tmp.oom ? "" : tmp.p;
	size_t lead = 0;
	while (t[lead] && is_space(t[lead]))
		lead++;
	size_t start = sb->len;
	sb_put_trimmed(sb, t);
	size_t at = start + (sys_end > lead ? sys_end - lead : 0);
	sb->mark = at < sb->len ? at : sb->len;
	sb->oom |= tmp.oom;
	free(tmp.p);
}

/* ---------------------------------------------------------------- checks */

enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT };

static int role_of(const struct chat_message *m, size_t i, enum role *r, char *err,
		   size_t err_len)
{
	if (m->role && strcmp(m->role, "system") == 0)
		*r = ROLE_SYSTEM;
	else if (m->role && strcmp(m->role, "user") == 0)
		*r = ROLE_USER;
	else if (m->role && strcmp(m->role, "assistant") == 0)
		*r = ROLE_ASSISTANT;
	else
		return err_set(err, err_len, -EINVAL,
			       "message %zu: unknown role '%s' (expected system, user or assistant)",
			       i, m->role ? m->role : "(null)");
	if (m->content == NULL)
		return err_set(err, err_len, -EINVAL, "message %zu: no content", i);
	return 0;
}

/* For templates that accept a system message only first and then strictly
 * alternating user/assistant turns starting with user. */
static int check_alternating(enum chat_family fam, const struct chat_message *msgs, size_t n,
			     char *err, size_t err_len)
{
	size_t first = 0;
	enum role r;
	role_of(&msgs[0], 0, &r, NULL, 0);
	if (r == ROLE_SYSTEM)
		first = 1;
	if (first == n)
		return err_set(err, err_len, -EINVAL,
			       "the %s chat template needs a user message after the system message",
			       chat_family_name(fam));
	for (size_t i = first; i < n; i++) {
		role_of(&msgs[i], i, &r, NULL, 0);
		enum role want = (i - first) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
		if (r == ROLE_SYSTEM)
			return err_set(err, err_len, -EINVAL,
				       "message %zu: the %s chat template accepts a system message "
				       "only as the first message",
				       i, chat_family_name(fam));
		if (r != want)
			return err_set(err, err_len, -EINVAL,
				       "message %zu: the %s chat template needs user and assistant "
				       "messages to alternate, starting with user",
				       i, chat_family_name(fam));
	}
	return 0;
}

/* ---------------------------------------------------------------- renderers */

/* The system content folded into the first user turn ("S\n\nU"), for
 * templates without a system role; *skip is how many messages it used. */
static const char *leading_system(const struct chat_message *msgs, size_t *skip)
{
	if (strcmp(msgs[0].role, "system") == 0) {
		*skip = 1;
		return msgs[0].content;
	}
	*skip = 0;
	return NULL;
}

/* Llama-2-chat: BOS + "[INST] " + strip(content) + " [/INST]" per user turn
 * (the first one's content prefixed by the <<SYS>> block), " " +
 * strip(content) + " </s>" per assistant turn. */
static void render_llama2(struct sbuf *sb, const struct chat_message *msgs, size_t n)
{
	size_t first;
	const char *sys = leading_system(msgs, &first);
	for (size_t i = first; i < n; i++) {
		if (strcmp(msgs[i].role, "user") == 0) {
			sb_put(sb, i == first ? "[INST] " : "<s>[INST] ");
			if (i == first && sys) {
				sb_put_trimmed_sys(sb, "<<SYS>>\n", sys, "\n<</SYS>>\n\n", msgs[i].content);
			} else {
				sb_put_trimmed(sb, msgs[i].content);
			}
			sb_put(sb, " [/INST]");
		} else {
			sb_put(sb, " ");
			sb_put_trimmed(sb, msgs[i].content);
			sb_put(sb, " </s>");
		}
	}
}

/* Mistral-7B-Instruct-v0.2: "[INST] " + content + " [/INST]" per user turn,
 * content + "</s>" per assistant turn. */
static void render_mistral(struct sbuf *sb, const struct chat_message *msgs, size_t n)
{
	size_t first;
	const char *sys = leading_system(msgs, &first);
	for (size_t i = first; i < n; i++) {
		if (strcmp(msgs[i].role, "user") == 0) {
			sb_put(sb, "[INST] ");
			if (i == first && sys) {
				sb_put(sb, sys);
				sb_put(sb, "\n\n");
				sb->mark = sb->len;
			}
			sb_put(sb, msgs[i].content);
			sb_put(sb, " [/INST]");
		} else {
			sb_put(sb, msgs[i].content);
			sb_put(sb, "</s>");
		}
	}
}

/* gemma-7b-it: "<start_of_turn>" + (user|model) + "\n" + trim(content) +
 * "<end_of_turn>\n", then "<start_of_turn>model\n". */
static void render_gemma(struct sbuf *sb, const struct chat_message *msgs, size_t n)
{
	size_t first;
	const char *sys = leading_system(msgs, &first);
	for (size_t i = first; i < n; i++) {
		bool user = strcmp(msgs[i].role, "user") == 0;
		sb_put(sb, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
		if (i == first && sys) {
			sb_put_trimmed_sys(sb, "", sys, "\n\n", msgs[i].content);
		} else {
			sb_put_trimmed(sb, msgs[i].content);
		}
		sb_put(sb, "<end_of_turn>\n");
	}
	sb_put(sb, "<start_of_turn>model\n");
}

/* After message i of a template with a system role: the mark follows each
 * system message that only system messages precede. */
static void mark_leading_system(struct sbuf *sb, const struct chat_message *msgs, size_t i)
{
	for (size_t j = 0; j <= i; j++)
		if (strcmp(msgs[j].role, "system"))
			return;
	sb->mark = sb->len;
}

/* Meta-Llama-3-Instruct: "<|start_header_id|>" + role +
 * "<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>" per message. */
static void render_llama3(struct sbuf *sb, const struct chat_message *msgs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		sb_put(sb, "<|start_header_id|>");
		sb_put(sb, msgs[i].role);
		sb_put(sb, "<|end_header_id|>\n\n");
		sb_put_trimmed(sb, msgs[i].content);
		sb_put(sb, "<|eot_id|>");
		mark_leading_system(sb, msgs, i);
	}
	sb_put(sb, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* ChatML, zephyr and phi-3 share one shape: open + role + mid + content +
 * close per message, then open + "assistant" + mid. */
static void render_tagged(struct sbuf *sb, const struct chat_message *msgs, size_t n,
			  const char *open, const char *mid, const char *close)
{
	for (size_t i = 0; i < n; i++) {
		sb_put(sb, open);
		sb_put(sb, msgs[i].role);
		sb_put(sb, mid);
		sb_put(sb, msgs[i].content);
		sb_put(sb, close);
		mark_leading_system(sb, msgs, i);
	}
	sb_put(sb, open);
	sb_put(sb, "assistant");
	sb_put(sb, mid);
}

/* No template: contents only, system messages first, joined by "\n". */
static void render_plain(struct sbuf *sb, const struct chat_message *msgs, size_t n)
{
	bool any = false, has_sys = false;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < n; i++) {
			bool sys = strcmp(msgs[i].role, "system") == 0;
			if (sys != (pass == 0))
				continue;
			if (any)
				sb_put(sb, "\n");
			if (pass == 1 && has_sys && !sb->mark)
				sb->mark = sb->len; /* after the system texts and their "\n" */
			sb_put(sb, msgs[i].content);
			any = true;
		}
		has_sys = has_sys || (pass == 0 && any);
	}
	if (has_sys && !sb->mark)
		sb->mark = sb->len;
	sb_put(sb, ""); /* an empty result is still a string */
}

/* ---------------------------------------------------------------- apply */

static void render(enum chat_family fam, struct sbuf *sb, const struct chat_message *msgs,
		   size_t n)
{
	switch (fam) {
	case CHAT_FAMILY_LLAMA2:
		render_llama2(sb, msgs, n);
		break;
	case CHAT_FAMILY_MISTRAL:
		render_mistral(sb, msgs, n);
		break;
	case CHAT_FAMILY_GEMMA:
		render_gemma(sb, msgs, n);
		break;
	case CHAT_FAMILY_LLAMA3:
		render_llama3(sb, msgs, n);
		break;
	case CHAT_FAMILY_CHATML:
		render_tagged(sb, msgs, n, "<|im_start|>", "\n", "<|im_end|>\n");
		break;
	case CHAT_FAMILY_ZEPHYR:
		render_tagged(sb, msgs, n, "<|", "|>\n", "</s>\n");
		break;
	case CHAT_FAMILY_PHI3:
		render_tagged(sb, msgs, n, "<|", "|>\n", "<|end|>\n");
		break;
	case CHAT_FAMILY_NONE:
	case CHAT_FAMILY_UNKNOWN:
	default:
		render_plain(sb, msgs, n);
		break;
	}
}

int chat_template_apply(enum chat_family fam, const struct chat_message *msgs, size_t n,
			char **out, size_t *system_end, char *err, size_t err_len)
{
	*out = NULL;
	if (system_end)
		*system_end = 0;
	if (n == 0)
		return err_set(err, err_len, -EINVAL, "the messages list is empty");
	for (size_t i = 0; i < n; i++) {
		enum role r;
		int rc = role_of(&msgs[i], i, &r, err, err_len);
		if (rc)
			return rc;
	}
	if (fam == CHAT_FAMILY_LLAMA2 || fam == CHAT_FAMILY_MISTRAL || fam == CHAT_FAMILY_GEMMA) {
		int rc = check_alternating(fam, msgs, n, err, err_len);
		if (rc)
			return rc;
	}
	struct sbuf sb = {0};
	render(fam, &sb, msgs, n);
	if (sb.oom) {
		free(sb.p);
		return err_set(err, err_len, -ENOMEM, "out of memory rendering the chat prompt");
	}
	*out = sb.p;
	if (system_end)
		*system_end = sb.mark;
	return 0;
}
