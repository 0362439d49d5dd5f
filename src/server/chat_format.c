/* A chat template's output format, from markers in its source: the text
 * a template shows the model for a tool call or a reasoning block is the
 * text the model writes back, so a marker the template mentions (in a
 * string literal, whatever the code around it) names the format.  The
 * markers were read off the families' published templates and llama.cpp's
 * template tests.  Checked in order, most specific first; a template with
 * none keeps the tool format of its family (so prompts and forced calls
 * of the families sinkd rendered before stay as they were). */
#include "server/chat_format.h"

#include <string.h>

#include "server/chat_template.h"

static bool has(const char *s, const char *needle)
{
	return strstr(s, needle) != NULL;
}

static enum tool_format detect_tools(const char *t)
{
	if (has(t, "<|channel|>") && has(t, "<|message|>"))
		return TOOL_FORMAT_HARMONY;
	if (has(t, "tool\u2581call\u2581begin") || has(t, "tool_call_begin"))
		return has(t, "```json") ? TOOL_FORMAT_DEEPSEEK : TOOL_FORMAT_DEEPSEEK_V3_1;
	if (has(t, "<|START_ACTION|>"))
		return TOOL_FORMAT_COMMAND_R;
	if (has(t, "[TOOL_CALLS]"))
		return has(t, "[ARGS]") ? TOOL_FORMAT_MISTRAL_ARGS : TOOL_FORMAT_MISTRAL;
	if (has(t, "<tool_call>"))
		return TOOL_FORMAT_HERMES;
	if (has(t, "<|python_tag|>"))
		return TOOL_FORMAT_LLAMA3;
	return tool_format_of(chat_template_detect(t));
}

static enum reasoning_syntax detect_reasoning(const char *t)
{
	if (has(t, "<|channel|>") && has(t, "<|message|>"))
		return REASONING_SYNTAX_HARMONY;
	if (has(t, "<|START_THINKING|>"))
		return REASONING_SYNTAX_COMMAND_R;
	if (has(t, "[THINK]"))
		return REASONING_SYNTAX_MISTRAL;
	if (has(t, "<think>") || has(t, "</think>"))
		return REASONING_SYNTAX_THINK;
	return REASONING_SYNTAX_NONE;
}

void chat_format_detect(const char *tmpl, struct chat_format *out)
{
	if (!tmpl || !tmpl[0]) {
		*out = (struct chat_format){.tools = TOOL_FORMAT_GENERIC,
		                            .reasoning = REASONING_SYNTAX_NONE};
		return;
	}
	out->tools = detect_tools(tmpl);
	out->reasoning = detect_reasoning(tmpl);
}

/* Whether s[0..n) ends with lit, blanks after it allowed. */
static bool ends_with(const char *s, size_t n, const char *lit)
{
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t'))
		n--;
	size_t k = strlen(lit);
	return n >= k && !memcmp(s + n - k, lit, k);
}

enum reasoning_start chat_format_prompt_start(const struct chat_format *f, const char *prompt,
                                              size_t len)
{
	const char *open = NULL, *close = NULL;
	if (!reasoning_block_markers(f->reasoning, &open, &close) || !prompt)
		return REASONING_START_BEFORE;
	if (ends_with(prompt, len, open))
		return REASONING_START_INSIDE;
	if (ends_with(prompt, len, close))
		return REASONING_START_OFF;
	return REASONING_START_BEFORE;
}

bool reasoning_block_markers(enum reasoning_syntax s, const char **open, const char **close)
{
	static const struct {
		enum reasoning_syntax s;
		const char *open, *close;
	} blocks[] = {{REASONING_SYNTAX_THINK, "<think>", "</think>"},
	              {REASONING_SYNTAX_COMMAND_R, "<|START_THINKING|>", "<|END_THINKING|>"},
	              {REASONING_SYNTAX_MISTRAL, "[THINK]", "[/THINK]"}};
	for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
		if (blocks[i].s == s) {
			*open = blocks[i].open;
			*close = blocks[i].close;
			return true;
		}
	}
	return false;
}

const char *reasoning_syntax_name(enum reasoning_syntax s)
{
	switch (s) {
	case REASONING_SYNTAX_THINK:
		return "think";
	case REASONING_SYNTAX_COMMAND_R:
		return "command-r";
	case REASONING_SYNTAX_HARMONY:
		return "harmony";
	case REASONING_SYNTAX_MISTRAL:
		return "mistral";
	default:
		return "none";
	}
}
