/* JSON text for tool calling (tools.c, tool_parser.c): a growable text
 * buffer, an incremental JSON syntax scanner that takes one byte at a time
 * (the streaming tool-call parser cannot wait for a whole document), and
 * the spacing that Python's json.dumps writes, which is what the chat
 * templates' `tojson` puts in front of a model.  Internal to src/server. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* ---------------------------------------------------------------- buffer */

/* A NUL-terminated growable string; after a failed allocation it stops
 * growing and oom stays set, so a writer checks once at the end. */
struct tbuf {
	char *p; /* NULL until the first byte */
	size_t len, cap;
	bool oom;
};

void tbuf_putn(struct tbuf *b, const char *s, size_t n);
void tbuf_put(struct tbuf *b, const char *s);
void tbuf_putc(struct tbuf *b, char c);
void tbuf_reset(struct tbuf *b); /* empty, keeps the memory */
void tbuf_deinit(struct tbuf *b);
/* The text (malloc'ed, "" when empty) handed to the caller; the buffer is
 * left empty.  NULL on OOM (the buffer is freed either way). */
char *tbuf_take(struct tbuf *b);

/* ---------------------------------------------------------------- scanner */

#define JSCAN_MAX_DEPTH 64 /* nested containers, as REQUEST_MAX_DEPTH */

enum jscan_rc {
	JSCAN_MORE = 0,    /* the byte belongs to the value, which goes on */
	JSCAN_DONE,        /* the byte ended the value */
	JSCAN_DONE_UNREAD, /* a number ended just before this byte, which is not its */
	JSCAN_ERROR,       /* not JSON */
};

/* One JSON value (RFC 8259 syntax; UTF-8 is not checked). */
struct jscan {
	int st;                     /* enum jstate (tool_json.c) */
	int sub;                    /* number part, hex digits left, or literal position */
	const char *literal;        /* "true", "false" or "null" while one is read */
	bool key;                   /* the string being read is an object key */
	int depth;                  /* open containers */
	char open[JSCAN_MAX_DEPTH]; /* '{' or '[' of each open container */
};

void jscan_init(struct jscan *s);
enum jscan_rc jscan_byte(struct jscan *s, unsigned char c);
/* The input ended: true when the value is complete (a number at the top
 * level ends only here). */
bool jscan_end(const struct jscan *s);
/* The whole of s[0..n) is one JSON value, whitespace around it allowed. */
bool json_text_valid(const char *s, size_t n);

/* ---------------------------------------------------------------- writing */

/* Appends the valid JSON text s[0..n) as Python's json.dumps spaces it:
 * indent 0 gives ", " and ": " on one line; indent > 0 one member per line,
 * indent spaces per level, "," and ": ", empty containers as {} and [].
 * Strings and numbers are copied as written. */
void json_respace(struct tbuf *b, const char *s, size_t n, int indent);
/* Appends s as a JSON string literal, escaped as json.dumps(ensure_ascii=False)
 * does (", \, \b \f \n \r \t, other control bytes as \u00XX). */
void json_put_string(struct tbuf *b, const char *s);
