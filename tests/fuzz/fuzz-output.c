/* Fuzz target: a reply's parsers (server/reasoning.c, then
 * server/tool_parser.c), which read what a model writes, and a model can
 * be talked into writing anything.  Input: byte 0 picks the tool format
 * (mod 9) and the reasoning syntax (/9 mod 5), byte 1 the prompt's start
 * (mod 3) and parallel_tool_calls (bit 2); the rest is the reply, fed
 * once whole and once in pieces whose sizes come from its own bytes
 * (mod 7, plus 1).  Checks: both feeds give the same events (the parsers
 * do not depend on how the text is cut), calls begin with index 0, 1, ...
 * and each ends before the next begins, and arguments come only inside a
 * call. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/reasoning.h"
#include "server/tool_json.h"
#include "server/tools.h"

/* Events as text: kind byte, index, then the bytes; adjacent text of one
 * kind merged so that any cut gives the same record. */
struct rec {
	struct tbuf all;
	char last; /* the kind of the open text run, 0 when none */
	int open;  /* the open call's index, -1 when none */
	int next;  /* the index the next call must have */
	bool bad;
};

static void rec_text(struct rec *r, char kind, const char *s, size_t n)
{
	if (!n)
		return;
	if (r->last != kind) {
		tbuf_putc(&r->all, '\n');
		tbuf_putc(&r->all, kind);
	}
	r->last = kind;
	tbuf_putn(&r->all, s, n);
}

static void on_tool(void *user, const struct tool_event *ev)
{
	struct rec *r = user;
	char head[32];
	switch (ev->kind) {
	case TOOL_EV_CONTENT:
		rec_text(r, 'C', ev->text, ev->len);
		return;
	case TOOL_EV_ARGS:
		r->bad |= r->open != ev->index;
		rec_text(r, 'A', ev->text, ev->len);
		return;
	case TOOL_EV_CALL_BEGIN:
		r->bad |= r->open >= 0 || ev->index != r->next || !ev->name || !ev->id;
		r->open = ev->index;
		r->next++;
		snprintf(head, sizeof(head), "\nB%d:", ev->index);
		tbuf_put(&r->all, head);
		tbuf_put(&r->all, ev->name ? ev->name : "");
		r->last = 0;
		return;
	case TOOL_EV_CALL_END:
		r->bad |= r->open != ev->index;
		r->open = -1;
		snprintf(head, sizeof(head), "\nE%d", ev->index);
		tbuf_put(&r->all, head);
		r->last = 0;
		return;
	}
}

struct chain {
	struct rec *r;
	struct tool_parser *tp;
};

static void on_piece(void *user, enum reasoning_piece kind, const char *s, size_t n)
{
	struct chain *c = user;
	if (kind == REASONING_PIECE_REASONING)
		rec_text(c->r, 'R', s, n);
	else if (tool_parser_feed(c->tp, s, n, on_tool, c->r))
		abort(); /* out of memory, or no random bytes: not the input's doing */
}

static const struct tool_set *tools(bool parallel)
{
	static struct tool_def defs[2];
	static struct tool_set ts;
	static cJSON *params;
	if (!params) {
		params = cJSON_Parse("{\"type\":\"object\"}");
		defs[0] = (struct tool_def){.name = "get_weather", .parameters = params};
		defs[1] = (struct tool_def){.name = "ping", .parameters = params};
	}
	ts = (struct tool_set){.tools = defs, .n_tools = 2, .choice = TOOL_CHOICE_AUTO,
	                       .parallel = parallel};
	return &ts;
}

/* The reply through both parsers, in pieces (step 0: whole). */
static void run(const uint8_t *cfg, const uint8_t *text, size_t len, bool pieces, struct rec *r)
{
	enum tool_format f = (enum tool_format)(cfg[0] % 9);
	enum reasoning_syntax syn = (enum reasoning_syntax)(cfg[0] / 9 % 5);
	struct reasoning_splitter *rs = NULL;
	struct chain c = {.r = r};
	*r = (struct rec){.open = -1};
	if (reasoning_splitter_new(syn, (enum reasoning_start)(cfg[1] % 3), &rs) ||
	    tool_parser_new(f, tools(cfg[1] & 4), &c.tp))
		abort();
	for (size_t at = 0; at < len;) {
		size_t n = pieces ? (size_t)text[at] % 7 + 1 : len;
		if (n > len - at)
			n = len - at;
		if (reasoning_splitter_feed(rs, (const char *)text + at, n, on_piece, &c))
			abort();
		at += n;
	}
	if (reasoning_splitter_finish(rs, on_piece, &c) < 0 ||
	    tool_parser_finish(c.tp, on_tool, r) < 0)
		abort();
	tool_parser_free(c.tp);
	reasoning_splitter_free(rs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	struct rec whole, cut;
	run(data, data + 2, size - 2, false, &whole);
	run(data, data + 2, size - 2, true, &cut);
	if (whole.bad || cut.bad || whole.open >= 0 || cut.open >= 0)
		abort(); /* events out of order */
	if (whole.all.len != cut.all.len ||
	    (whole.all.len && memcmp(whole.all.p, cut.all.p, whole.all.len)))
		abort(); /* the cut changed what came out */
	tbuf_deinit(&whole.all);
	tbuf_deinit(&cut.all);
	return 0;
}
