/* Splits a reply's reasoning from its content as the text streams in
 * (chat_format.h's reasoning syntaxes): <think>...</think> or Command-R's
 * thinking block at the start of the reply (or from the start, when the
 * prompt opened it), gpt-oss harmony's channels (analysis is reasoning,
 * final and commentary are content; a commentary message to a function
 * goes on as "to=functions.NAME<|message|>BODY<|call|>" for the tool
 * parser's harmony format).  It runs before the tool-call parser; what it
 * calls content is what the tool parser reads. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "server/chat_format.h"

enum reasoning_piece {
	REASONING_PIECE_CONTENT = 0,
	REASONING_PIECE_REASONING,
};
/* text is valid during the callback only (not NUL-terminated). */
typedef void (*reasoning_cb)(void *user, enum reasoning_piece kind, const char *text, size_t len);

struct reasoning_splitter;
/* Returns 0 or -ENOMEM.  REASONING_SYNTAX_NONE: everything is content. */
int reasoning_splitter_new(enum reasoning_syntax syntax, enum reasoning_start start,
                           struct reasoning_splitter **out);
void reasoning_splitter_free(struct reasoning_splitter *r);
/* Feeds generated text; pieces come out through cb, in order, whatever the
 * split of the text.  Returns 0 or -ENOMEM. */
int reasoning_splitter_feed(struct reasoning_splitter *r, const char *text, size_t len,
                            reasoning_cb cb, void *user);
/* End of generation: what was held comes out (an unfinished reasoning
 * block stays reasoning; a partial marker is text of its part). */
int reasoning_splitter_finish(struct reasoning_splitter *r, reasoning_cb cb, void *user);
/* Reasoning text came out. */
bool reasoning_splitter_saw_reasoning(const struct reasoning_splitter *r);
