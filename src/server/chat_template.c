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
 * Tools (chat_template_apply_tools): the messages first become "turns" in
 * which the tools' text, the calls and the results are already written in
 * the family's tool format (tools.c writes the text); the family renderers
 * then see only system, user, assistant and verbatim turns.
 *
 * It does not tokenize, know special-token ids, or support images. */
#include "server/chat_template.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/tools.h"
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

enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };

static bool has_calls(const struct chat_message *m)
{
	return m->tool_calls && cJSON_GetArraySize(m->tool_calls) > 0;
}

/* tools: chat_template_apply_tools, which also takes "developer" (as
 * system) and "tool". */
static int role_of(const struct chat_message *m, size_t i, bool tools, enum role *r, char *err,
		   size_t err_len)
{
	const char *role = m->role ? m->role : "";
	if (!strcmp(role, "system") || (tools && !strcmp(role, "developer")))
		*r = ROLE_SYSTEM;
	else if (!strcmp(role, "user"))
		*r = ROLE_USER;
	else if (!strcmp(role, "assistant"))
		*r = ROLE_ASSISTANT;
	else if (tools && !strcmp(role, "tool"))
		*r = ROLE_TOOL;
	else
		return err_set(err, err_len, -EINVAL, "message %zu: unknown role '%s' (expected %s)", i,
			       m->role ? m->role : "(null)",
			       tools ? "system, developer, user, assistant or tool"
				     : "system, user or assistant");
	if (m->content == NULL && !(*r == ROLE_ASSISTANT && has_calls(m)))
		return err_set(err, err_len, -EINVAL, "message %zu: no content", i);
	return 0;
}

/* ---------------------------------------------------------------- turns */

/* A message as the family renderers see it, once tools are worked in: tool
 * results become the turns their format puts them in, calls the text the
 * model wrote them as, and the tools' text joins the turn it belongs to. */
struct turn {
	enum role role;	       /* ROLE_TOOL: llama-3's ipython turns, mistral's results and tools */
	const char *role_name; /* as the tagged and llama-3 templates write it */
	const char *content;
	size_t src;	/* the message it comes from, for errors */
	bool raw;	/* llama-3: written untrimmed (its template trims neither) */
	bool tool_part; /* mistral: outside the user/assistant alternation */
	bool results;	/* hermes, generic: a user turn of tool results */
	char *own;	/* content, when built here */
};

struct turns {
	struct turn *v; /* room for the messages and two more turns */
	size_t n;
};

static void turns_free(struct turns *t)
{
	for (size_t i = 0; t->v && i < t->n; i++)
		free(t->v[i].own);
	free(t->v);
	t->v = NULL;
	t->n = 0;
}

static struct turn *turn_insert(struct turns *t, size_t at, enum role role, const char *name,
				size_t src)
{
	memmove(&t->v[at + 1], &t->v[at], (t->n - at) * sizeof(t->v[0]));
	t->n++;
	t->v[at] = (struct turn){.role = role, .role_name = name, .src = src};
	return &t->v[at];
}

/* The turn takes text (malloc'ed; NULL: out of memory) as its content. */
static int turn_own(struct turn *tu, char *text, char *err, size_t err_len)
{
	if (!text)
		return err_set(err, err_len, -ENOMEM, "out of memory rendering the chat prompt");
	free(tu->own);
	tu->own = text;
	tu->content = text;
	return 0;
}

static char *concat3(const char *a, const char *b, const char *c)
{
	size_t na = strlen(a), nb = strlen(b), nc = strlen(c);
	char *s = malloc(na + nb + nc + 1);
	if (s) {
		memcpy(s, a, na);
		memcpy(s + na, b, nb);
		memcpy(s + na + nb, c, nc + 1);
	}
	return s;
}

/* trim(s) as a malloc'ed string. */
static char *trimmed(const char *s)
{
	struct sbuf b = {0};
	sb_put_trimmed(&b, s);
	sb_put(&b, "");
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

/* An assistant message with tool calls: its content, then the calls as
 * the model writes them (llama-3's template writes the call alone). */
static int assistant_calls(enum tool_format f, const struct chat_message *m, struct turn *tu,
			   char *err, size_t err_len)
{
	char *calls = NULL;
	int rc = tool_calls_text(f, m->tool_calls, &calls, err, err_len);
	if (rc)
		return rc;
	const char *content = m->content ? m->content : "";
	if (f == TOOL_FORMAT_LLAMA3 || !content[0])
		return turn_own(tu, calls, err, err_len);
	const char *sep = f == TOOL_FORMAT_MISTRAL ? "" : "\n";
	rc = turn_own(tu, concat3(content, sep, calls), err, err_len);
	free(calls);
	return rc;
}

/* A tool message: hermes and generic gather consecutive results into one
 * user turn (Qwen2.5's template), llama-3 gives each an ipython turn,
 * mistral writes each as is. */
static int tool_result(enum tool_format f, const struct chat_message *m, size_t i,
		       struct turns *t, char *err, size_t err_len)
{
	char *res = NULL;
	int rc = tool_result_text(f, m->content, &res, err, err_len);
	if (rc)
		return rc;
	struct turn *prev = t->n ? &t->v[t->n - 1] : NULL;
	if ((f == TOOL_FORMAT_HERMES || f == TOOL_FORMAT_GENERIC) && prev && prev->results) {
		rc = turn_own(prev, concat3(prev->content, "\n", res), err, err_len);
		free(res);
		return rc;
	}
	struct turn *tu = turn_insert(t, t->n, ROLE_TOOL, NULL, i);
	if (f == TOOL_FORMAT_HERMES || f == TOOL_FORMAT_GENERIC) {
		tu->role = ROLE_USER;
		tu->role_name = "user";
		tu->results = true;
	} else if (f == TOOL_FORMAT_LLAMA3) {
		tu->role_name = "ipython";
		tu->raw = true;
	} else {
		tu->tool_part = true;
	}
	return turn_own(tu, res, err, err_len);
}

static int add_message(enum tool_format f, const struct chat_message *m, size_t i, enum role r,
		       struct turns *t, char *err, size_t err_len)
{
	static const char *const names[] = {"system", "user", "assistant"};
	if (r == ROLE_TOOL)
		return tool_result(f, m, i, t, err, err_len);
	struct turn *tu = turn_insert(t, t->n, r, names[r], i);
	tu->content = m->content;
	if (r != ROLE_ASSISTANT || !has_calls(m))
		return 0;
	tu->tool_part = f == TOOL_FORMAT_MISTRAL;
	return assistant_calls(f, m, tu, err, err_len);
}

/* The llama-3.1 template's system turn when tools are offered (its
 * defaults: no builtin tools, date_string "26 Jul 2024"). */
#define LLAMA3_TOOLS_SYSTEM                                                                        \
	"Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"

/* llama-3: the system turn above, the tools in front of the first user
 * message. */
static int offer_llama3(struct turns *t, const char *tools, char *err, size_t err_len)
{
	int rc;
	if (t->n && t->v[0].role == ROLE_SYSTEM) {
		char *sys = trimmed(t->v[0].content);
		rc = turn_own(&t->v[0], sys ? concat3(LLAMA3_TOOLS_SYSTEM, sys, "") : NULL, err,
			      err_len);
		free(sys);
	} else {
		rc = turn_own(turn_insert(t, 0, ROLE_SYSTEM, "system", 0),
			      strdup(LLAMA3_TOOLS_SYSTEM), err, err_len);
	}
	if (rc)
		return rc;
	t->v[0].raw = true;
	for (size_t i = 1; i < t->n; i++) {
		if (t->v[i].role != ROLE_USER)
			continue;
		char *user = trimmed(t->v[i].content);
		t->v[i].raw = true;
		rc = turn_own(&t->v[i], user ? concat3(tools, user, "") : NULL, err, err_len);
		free(user);
		return rc;
	}
	return err_set(err, err_len, -EINVAL,
		       "the llama-3 chat template offers tools in the first user message, and "
		       "there is none");
}

/* The tools' text into the turns, where the family's template puts it. */
static int offer_tools(enum tool_format f, const char *tools, struct turns *t, char *err,
		       size_t err_len)
{
	if (f == TOOL_FORMAT_LLAMA3)
		return offer_llama3(t, tools, err, err_len);
	if (f == TOOL_FORMAT_MISTRAL) {
		for (size_t i = t->n; i-- > 0;) {
			if (t->v[i].role == ROLE_USER) {
				struct turn *tu = turn_insert(t, i, ROLE_TOOL, NULL, t->v[i].src);
				tu->tool_part = true;
				return turn_own(tu, strdup(tools), err, err_len);
			}
		}
		return 0; /* no user message: the alternation check says so */
	}
	/* hermes, generic: the system text, then "\n\n" and the tools */
	if (t->n && t->v[0].role == ROLE_SYSTEM)
		return turn_own(&t->v[0], concat3(t->v[0].content, "\n\n", tools), err, err_len);
	return turn_own(turn_insert(t, 0, ROLE_SYSTEM, "system", 0), strdup(tools), err, err_len);
}

static int build_turns(enum chat_family fam, const struct tool_set *ts, bool tools,
		       const struct chat_message *msgs, size_t n, struct turns *t, char *err,
		       size_t err_len)
{
	enum tool_format f = tool_format_of(fam);
	t->n = 0;
	t->v = calloc(n + 2, sizeof(t->v[0]));
	if (!t->v)
		return err_set(err, err_len, -ENOMEM, "out of memory rendering the chat prompt");
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		enum role r = ROLE_USER;
		rc = role_of(&msgs[i], i, tools, &r, err, err_len);
		if (!rc)
			rc = add_message(f, &msgs[i], i, r, t, err, err_len);
	}
	char *text = NULL;
	if (!rc)
		rc = tool_prompt_text(f, ts, &text, err, err_len);
	if (!rc && text)
		rc = offer_tools(f, text, t, err, err_len);
	free(text);
	return rc;
}

/* For templates that accept a system message only first and then strictly
 * alternating user/assistant turns starting with user (mistral's v3
 * template leaves calls and results out of the count). */
static int check_alternating(enum chat_family fam, const struct turn *v, size_t n, char *err,
			     size_t err_len)
{
	size_t first = n && v[0].role == ROLE_SYSTEM ? 1 : 0, k = 0;
	for (size_t i = first; i < n; i++) {
		if (v[i].tool_part)
			continue;
		enum role want = k++ % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
		if (v[i].role == ROLE_SYSTEM)
			return err_set(err, err_len, -EINVAL,
				       "message %zu: the %s chat template accepts a system message "
				       "only as the first message",
				       v[i].src, chat_family_name(fam));
		if (v[i].role != want)
			return err_set(err, err_len, -EINVAL,
				       "message %zu: the %s chat template needs user and assistant "
				       "messages to alternate, starting with user",
				       v[i].src, chat_family_name(fam));
	}
	if (k == 0)
		return err_set(err, err_len, -EINVAL,
			       "the %s chat template needs a user message after the system message",
			       chat_family_name(fam));
	return 0;
}

/* ---------------------------------------------------------------- renderers */

/* The system content folded into the first user turn ("S\n\nU"), for
 * templates without a system role; *skip is how many turns it used. */
static const char *leading_system(const struct turn *v, size_t *skip)
{
	if (v[0].role == ROLE_SYSTEM) {
		*skip = 1;
		return v[0].content;
	}
	*skip = 0;
	return NULL;
}

/* Llama-2-chat: BOS + "[INST] " + strip(content) + " [/INST]" per user turn
 * (the first one's content prefixed by the <<SYS>> block), " " +
 * strip(content) + " </s>" per assistant turn. */
static void render_llama2(struct sbuf *sb, const struct turn *v, size_t n)
{
	size_t first;
	const char *sys = leading_system(v, &first);
	for (size_t i = first; i < n; i++) {
		if (v[i].role == ROLE_USER) {
			sb_put(sb, i == first ? "[INST] " : "<s>[INST] ");
			if (i == first && sys) {
				sb_put_trimmed_sys(sb, "<<SYS>>\n", sys, "\n<</SYS>>\n\n", v[i].content);
			} else {
				sb_put_trimmed(sb, v[i].content);
			}
			sb_put(sb, " [/INST]");
		} else {
			sb_put(sb, " ");
			sb_put_trimmed(sb, v[i].content);
			sb_put(sb, " </s>");
		}
	}
}

/* Mistral-7B-Instruct-v0.2: "[INST] " + content + " [/INST]" per user turn,
 * content + "</s>" per assistant turn; the system text goes in front of the
 * first user turn.  With tools (v3): the tools, results written as they
 * are. */
static void render_mistral(struct sbuf *sb, const struct turn *v, size_t n)
{
	size_t first;
	const char *sys = leading_system(v, &first);
	for (size_t i = first; i < n; i++) {
		if (v[i].role == ROLE_TOOL) {
			sb_put(sb, v[i].content);
		} else if (v[i].role == ROLE_USER) {
			sb_put(sb, "[INST] ");
			if (sys) {
				sb_put(sb, sys);
				sb_put(sb, "\n\n");
				sb->mark = sb->len;
				sys = NULL;
			}
			sb_put(sb, v[i].content);
			sb_put(sb, " [/INST]");
		} else {
			sb_put(sb, v[i].content);
			sb_put(sb, "</s>");
		}
	}
}

/* gemma-7b-it: "<start_of_turn>" + (user|model) + "\n" + trim(content) +
 * "<end_of_turn>\n", then "<start_of_turn>model\n". */
static void render_gemma(struct sbuf *sb, const struct turn *v, size_t n)
{
	size_t first;
	const char *sys = leading_system(v, &first);
	for (size_t i = first; i < n; i++) {
		bool user = v[i].role == ROLE_USER;
		sb_put(sb, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
		if (i == first && sys) {
			sb_put_trimmed_sys(sb, "", sys, "\n\n", v[i].content);
		} else {
			sb_put_trimmed(sb, v[i].content);
		}
		sb_put(sb, "<end_of_turn>\n");
	}
	sb_put(sb, "<start_of_turn>model\n");
}

/* After turn i of a template with a system role: the mark follows each
 * system turn that only system turns precede. */
static void mark_leading_system(struct sbuf *sb, const struct turn *v, size_t i)
{
	for (size_t j = 0; j <= i; j++)
		if (v[j].role != ROLE_SYSTEM)
			return;
	sb->mark = sb->len;
}

/* Meta-Llama-3-Instruct: "<|start_header_id|>" + role +
 * "<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>" per message. */
static void render_llama3(struct sbuf *sb, const struct turn *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		sb_put(sb, "<|start_header_id|>");
		sb_put(sb, v[i].role_name);
		sb_put(sb, "<|end_header_id|>\n\n");
		if (v[i].raw)
			sb_put(sb, v[i].content);
		else
			sb_put_trimmed(sb, v[i].content);
		sb_put(sb, "<|eot_id|>");
		mark_leading_system(sb, v, i);
	}
	sb_put(sb, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* ChatML, zephyr and phi-3 share one shape: open + role + mid + content +
 * close per message, then open + "assistant" + mid. */
static void render_tagged(struct sbuf *sb, const struct turn *v, size_t n, const char *open,
			  const char *mid, const char *close)
{
	for (size_t i = 0; i < n; i++) {
		sb_put(sb, open);
		sb_put(sb, v[i].role_name);
		sb_put(sb, mid);
		sb_put(sb, v[i].content);
		sb_put(sb, close);
		mark_leading_system(sb, v, i);
	}
	sb_put(sb, open);
	sb_put(sb, "assistant");
	sb_put(sb, mid);
}

/* No template: contents only, system messages first, joined by "\n". */
static void render_plain(struct sbuf *sb, const struct turn *v, size_t n)
{
	bool any = false, has_sys = false;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < n; i++) {
			bool sys = v[i].role == ROLE_SYSTEM;
			if (sys != (pass == 0))
				continue;
			if (any)
				sb_put(sb, "\n");
			if (pass == 1 && has_sys && !sb->mark)
				sb->mark = sb->len; /* after the system texts and their "\n" */
			sb_put(sb, v[i].content);
			any = true;
		}
		has_sys = has_sys || (pass == 0 && any);
	}
	if (has_sys && !sb->mark)
		sb->mark = sb->len;
	sb_put(sb, ""); /* an empty result is still a string */
}

/* ---------------------------------------------------------------- apply */

static void render(enum chat_family fam, struct sbuf *sb, const struct turn *v, size_t n)
{
	switch (fam) {
	case CHAT_FAMILY_LLAMA2:
		render_llama2(sb, v, n);
		break;
	case CHAT_FAMILY_MISTRAL:
		render_mistral(sb, v, n);
		break;
	case CHAT_FAMILY_GEMMA:
		render_gemma(sb, v, n);
		break;
	case CHAT_FAMILY_LLAMA3:
		render_llama3(sb, v, n);
		break;
	case CHAT_FAMILY_CHATML:
		render_tagged(sb, v, n, "<|im_start|>", "\n", "<|im_end|>\n");
		break;
	case CHAT_FAMILY_ZEPHYR:
		render_tagged(sb, v, n, "<|", "|>\n", "</s>\n");
		break;
	case CHAT_FAMILY_PHI3:
		render_tagged(sb, v, n, "<|", "|>\n", "<|end|>\n");
		break;
	case CHAT_FAMILY_NONE:
	case CHAT_FAMILY_UNKNOWN:
	default:
		render_plain(sb, v, n);
		break;
	}
}

static int apply(enum chat_family fam, const struct tool_set *ts, bool tools,
		 const struct chat_message *msgs, size_t n, char **out, size_t *system_end,
		 char *err, size_t err_len)
{
	*out = NULL;
	if (system_end)
		*system_end = 0;
	if (n == 0)
		return err_set(err, err_len, -EINVAL, "the messages list is empty");
	struct turns t = {0};
	struct sbuf sb = {0};
	int rc = build_turns(fam, ts, tools, msgs, n, &t, err, err_len);
	if (rc)
		goto out;
	if (fam == CHAT_FAMILY_LLAMA2 || fam == CHAT_FAMILY_MISTRAL || fam == CHAT_FAMILY_GEMMA) {
		rc = check_alternating(fam, t.v, t.n, err, err_len);
		if (rc)
			goto out;
	}
	render(fam, &sb, t.v, t.n);
	if (sb.oom) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory rendering the chat prompt");
		goto out;
	}
	*out = sb.p;
	sb.p = NULL;
	if (system_end)
		*system_end = sb.mark;
out:
	free(sb.p);
	turns_free(&t);
	return rc;
}

int chat_template_apply(enum chat_family fam, const struct chat_message *msgs, size_t n,
			char **out, size_t *system_end, char *err, size_t err_len)
{
	return apply(fam, NULL, false, msgs, n, out, system_end, err, err_len);
}

int chat_template_apply_tools(enum chat_family fam, const struct tool_set *ts,
			      const struct chat_message *msgs, size_t n, char **out,
			      size_t *system_end, char *err, size_t err_len)
{
	return apply(fam, ts, true, msgs, n, out, system_end, err, err_len);
}
