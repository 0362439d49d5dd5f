/* The reasoning splitter: one byte at a time through a small state
 * machine, so what comes out does not depend on how the text was cut
 * (only where the pieces end does).
 *
 * Block syntaxes (<think>, Command-R): a block counts only at the start of
 * the reply (blanks before it allowed), as the templates put it there and
 * llama.cpp reads it; "<think>" later in the text is content.  Blanks just
 * inside the block and just after it are dropped (the templates write
 * "<think>\n" and "</think>\n\n" around the text).  A block that never
 * closes is reasoning to the end.  Text that starts like the opening
 * marker but is not is content, byte for byte.
 *
 * Harmony: each message is a header ("<|start|>assistant<|channel|>analysis",
 * maybe " to=functions.NAME <|constrain|>json") up to "<|message|>", then
 * a body up to "<|end|>", "<|call|>" or "<|return|>" (or the next
 * "<|start|>"/"<|channel|>" when the model leaves the end out).  A reply
 * that starts with anything but '<' has no header: it is content. */
#include "server/reasoning.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/tool_json.h"

#define HEAD_MAX 512 /* a harmony header longer than this is not one */

enum rstate {
	R_START,   /* block syntaxes: before anything but blanks */
	R_IN,      /* inside the reasoning block */
	R_AFTER,   /* after the block: blanks are dropped */
	R_CONTENT, /* the rest is content */
	H_HEAD,    /* harmony: a message header */
	H_BODY,    /* harmony: a message body */
};

enum route { ROUTE_CONTENT, ROUTE_REASONING, ROUTE_CALL };

struct reasoning_splitter {
	enum reasoning_syntax syn;
	const char *open, *close; /* block syntaxes */
	enum rstate st;
	struct tbuf held; /* blanks and a partial marker, not yet known */
	size_t match;     /* bytes of open (R_START) or close (R_IN) at held's end */
	bool lead;        /* R_IN: no reasoning text yet */
	enum route route; /* harmony: where the body goes */
	struct tbuf head; /* harmony: the header so far */
	bool saw;
	/* output */
	reasoning_cb cb;
	void *user;
	struct tbuf batch;
	enum reasoning_piece batch_kind;
};

static void flush(struct reasoning_splitter *r)
{
	if (r->batch.len && !r->batch.oom)
		r->cb(r->user, r->batch_kind, r->batch.p, r->batch.len);
	tbuf_reset(&r->batch);
}

static void emit(struct reasoning_splitter *r, enum reasoning_piece kind, const char *s, size_t n)
{
	if (!n)
		return;
	if (r->batch.len && r->batch_kind != kind)
		flush(r);
	r->batch_kind = kind;
	r->saw |= kind == REASONING_PIECE_REASONING;
	tbuf_putn(&r->batch, s, n);
}

static bool blank(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* ---------------------------------------------------------------- blocks */

/* Held reasoning text goes out, its leading blanks dropped while the block
 * has no text yet. */
static void release_reasoning(struct reasoning_splitter *r)
{
	size_t i = 0;
	while (r->lead && i < r->held.len && blank((unsigned char)r->held.p[i]))
		i++;
	if (i < r->held.len) {
		emit(r, REASONING_PIECE_REASONING, r->held.p + i, r->held.len - i);
		r->lead = false;
	}
	tbuf_reset(&r->held);
	r->match = 0;
}

static void start_byte(struct reasoning_splitter *r, unsigned char c)
{
	if (c == (unsigned char)r->open[r->match]) {
		tbuf_putc(&r->held, (char)c);
		if (r->open[++r->match] == '\0') {
			tbuf_reset(&r->held);
			r->match = 0;
			r->st = R_IN;
			r->lead = true;
		}
		return;
	}
	if (blank(c) && r->match == 0) {
		tbuf_putc(&r->held, (char)c);
		return;
	}
	emit(r, REASONING_PIECE_CONTENT, r->held.p, r->held.len);
	tbuf_reset(&r->held);
	r->match = 0;
	r->st = R_CONTENT;
	emit(r, REASONING_PIECE_CONTENT, (const char *)&c, 1);
}

static void in_byte(struct reasoning_splitter *r, unsigned char c)
{
	if (c == (unsigned char)r->close[r->match]) {
		tbuf_putc(&r->held, (char)c);
		if (r->close[++r->match] == '\0') {
			tbuf_reset(&r->held); /* the blanks before the close go too */
			r->match = 0;
			r->st = R_AFTER;
		}
		return;
	}
	if (r->match) {
		/* The close's first byte occurs in it only once: nothing held
		 * can start another close, but c may. */
		release_reasoning(r);
		in_byte(r, c);
		return;
	}
	tbuf_putc(&r->held, (char)c);
	if (!blank(c))
		release_reasoning(r);
}

/* ---------------------------------------------------------------- harmony */

static const char *const body_ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>",
                                        "<|channel|>"};
#define N_BODY_ENDS (sizeof(body_ends) / sizeof(body_ends[0]))

static bool ends_with(const struct tbuf *b, const char *lit)
{
	size_t k = strlen(lit);
	return b->len >= k && !memcmp(b->p + b->len - k, lit, k);
}

/* The header is complete: where its body goes. */
static void head_done(struct reasoning_splitter *r)
{
	const char *h = r->head.p, *ch = strstr(h, "<|channel|>"), *to = strstr(h, "to=");
	r->route = ROUTE_CONTENT;
	if (to && !strncmp(to + 3, "functions.", 10)) {
		size_t n = strcspn(to, " \t\n<");
		r->route = ROUTE_CALL;
		emit(r, REASONING_PIECE_CONTENT, to, n);
		emit(r, REASONING_PIECE_CONTENT, "<|message|>", 11);
	} else if (ch && !strncmp(ch + 11, "analysis", 8)) {
		r->route = ROUTE_REASONING;
	}
	tbuf_reset(&r->head);
	r->st = H_BODY;
}

static void body_byte(struct reasoning_splitter *r, unsigned char c);

static void head_byte(struct reasoning_splitter *r, unsigned char c)
{
	if (r->head.len == 0 && c != '<') {
		r->route = ROUTE_CONTENT; /* no header: plain text */
		r->st = H_BODY;
		body_byte(r, c);
		return;
	}
	tbuf_putc(&r->head, (char)c);
	if (ends_with(&r->head, "<|message|>")) {
		head_done(r);
	} else if (r->head.len > HEAD_MAX) {
		emit(r, REASONING_PIECE_CONTENT, r->head.p, r->head.len);
		tbuf_reset(&r->head);
		r->route = ROUTE_CONTENT;
		r->st = H_BODY;
	}
}

static void body_out(struct reasoning_splitter *r, const char *s, size_t n)
{
	emit(r, r->route == ROUTE_REASONING ? REASONING_PIECE_REASONING : REASONING_PIECE_CONTENT,
	     s, n);
}

/* A marker ended the body. */
static void body_end(struct reasoning_splitter *r, const char *marker)
{
	if (r->route == ROUTE_CALL)
		emit(r, REASONING_PIECE_CONTENT, "<|call|>", 8);
	tbuf_reset(&r->held);
	r->st = H_HEAD;
	if (!strcmp(marker, "<|start|>") || !strcmp(marker, "<|channel|>"))
		tbuf_put(&r->head, marker); /* a new header without an end before it */
}

static void body_byte(struct reasoning_splitter *r, unsigned char c)
{
	if (r->held.len == 0 && c != '<') {
		body_out(r, (const char *)&c, 1);
		return;
	}
	tbuf_putc(&r->held, (char)c);
	bool prefix = false;
	for (size_t i = 0; i < N_BODY_ENDS && !r->held.oom; i++) {
		size_t k = strlen(body_ends[i]);
		if (r->held.len <= k && !memcmp(body_ends[i], r->held.p, r->held.len)) {
			if (r->held.len == k) {
				body_end(r, body_ends[i]);
				return;
			}
			prefix = true;
		}
	}
	if (prefix)
		return;
	/* '<' occurs only first in the markers: c alone may start one */
	body_out(r, r->held.p, r->held.len - 1);
	tbuf_reset(&r->held);
	body_byte(r, c);
}

/* ---------------------------------------------------------------- api */

static void splitter_byte(struct reasoning_splitter *r, unsigned char c)
{
	switch (r->st) {
	case R_START:
		start_byte(r, c);
		break;
	case R_IN:
		in_byte(r, c);
		break;
	case R_AFTER:
		if (!blank(c)) {
			r->st = R_CONTENT;
			emit(r, REASONING_PIECE_CONTENT, (const char *)&c, 1);
		}
		break;
	case R_CONTENT:
		emit(r, REASONING_PIECE_CONTENT, (const char *)&c, 1);
		break;
	case H_HEAD:
		head_byte(r, c);
		break;
	case H_BODY:
		body_byte(r, c);
		break;
	}
}

int reasoning_splitter_new(enum reasoning_syntax syntax, enum reasoning_start start,
                           struct reasoning_splitter **out)
{
	struct reasoning_splitter *r = calloc(1, sizeof(*r));
	*out = r;
	if (!r)
		return -ENOMEM;
	r->syn = syntax;
	bool block = reasoning_block_markers(syntax, &r->open, &r->close);
	if (syntax == REASONING_SYNTAX_HARMONY)
		r->st = H_HEAD;
	else if (!block || start == REASONING_START_OFF)
		r->st = R_CONTENT;
	else if (start == REASONING_START_INSIDE)
		r->st = R_IN;
	else
		r->st = R_START;
	r->lead = true;
	return 0;
}

void reasoning_splitter_free(struct reasoning_splitter *r)
{
	if (!r)
		return;
	tbuf_deinit(&r->held);
	tbuf_deinit(&r->head);
	tbuf_deinit(&r->batch);
	free(r);
}

static int splitter_status(const struct reasoning_splitter *r)
{
	return r->held.oom || r->head.oom || r->batch.oom ? -ENOMEM : 0;
}

int reasoning_splitter_feed(struct reasoning_splitter *r, const char *text, size_t len,
                            reasoning_cb cb, void *user)
{
	r->cb = cb;
	r->user = user;
	for (size_t i = 0; i < len; i++)
		splitter_byte(r, (unsigned char)text[i]);
	flush(r);
	return splitter_status(r);
}

int reasoning_splitter_finish(struct reasoning_splitter *r, reasoning_cb cb, void *user)
{
	r->cb = cb;
	r->user = user;
	if (r->st == R_START) {
		emit(r, REASONING_PIECE_CONTENT, r->held.p, r->held.len);
	} else if (r->st == R_IN && r->match) {
		release_reasoning(r); /* a partial close is text; trailing blanks are not */
	} else if (r->st == H_HEAD) {
		emit(r, REASONING_PIECE_CONTENT, r->head.p, r->head.len);
	} else if (r->st == H_BODY) {
		body_out(r, r->held.p, r->held.len);
	}
	tbuf_reset(&r->held);
	tbuf_reset(&r->head);
	r->match = 0;
	r->st = R_CONTENT;
	flush(r);
	return splitter_status(r);
}

bool reasoning_splitter_saw_reasoning(const struct reasoning_splitter *r)
{
	return r->saw;
}
