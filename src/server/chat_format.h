/* What a chat template's model writes back, read from the template's
 * source text: the tool-call syntax (tools.h's enum tool_format) and the
 * reasoning syntax (<think>, gpt-oss harmony channels, Command-R's
 * thinking block), and, from a rendered prompt, whether the generation
 * prompt leaves the model inside a reasoning block, before one, or with
 * reasoning switched off (Qwen3's enable_thinking=false closes an empty
 * block).  It renders nothing and parses no output (reasoning.c and
 * tool_parser.c do). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "server/tools.h"

enum reasoning_syntax {
	REASONING_SYNTAX_NONE = 0,  /* the model does not reason in a block of its own */
	REASONING_SYNTAX_THINK,     /* <think>...</think> (Qwen3, DeepSeek R1, ...) */
	REASONING_SYNTAX_COMMAND_R, /* <|START_THINKING|>...<|END_THINKING|> */
	REASONING_SYNTAX_HARMONY,   /* gpt-oss: the analysis channel */
	REASONING_SYNTAX_MISTRAL,   /* Magistral: [THINK]...[/THINK] */
};

/* Where the generation prompt leaves the model. */
enum reasoning_start {
	REASONING_START_BEFORE = 0, /* the reply may open a reasoning block */
	REASONING_START_INSIDE,     /* the prompt opened one ("<think>\n") */
	REASONING_START_OFF,        /* the prompt closed an empty one: no reasoning */
};

struct chat_format {
	enum tool_format tools;
	enum reasoning_syntax reasoning;
};

/* The output format of template source tmpl (NULL or "": none; the
 * generic tool format, no reasoning).  Families sinkd knew before keep
 * their tool format (tool_format_of of chat_template_detect); the
 * markers of newer formats in the source take precedence. */
void chat_format_detect(const char *tmpl, struct chat_format *out);

/* Where the rendered prompt (its last bytes) leaves the model, for f's
 * reasoning syntax. */
enum reasoning_start chat_format_prompt_start(const struct chat_format *f, const char *prompt,
                                              size_t len);

const char *reasoning_syntax_name(enum reasoning_syntax s); /* "none", "think", ... */
/* A block syntax's opening and closing markers ("<think>", "</think>");
 * false for none and harmony (not a block). */
bool reasoning_block_markers(enum reasoning_syntax s, const char **open, const char **close);
