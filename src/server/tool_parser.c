/* The streaming tool-call parser: generated text in, content and tool-call
 * events out, as the text arrives in pieces of any size.
 *
 * Every byte goes through one state machine, so the events do not depend on
 * how the text was split (only how text is cut into CONTENT and ARGS pieces
 * does).  Text that may open an envelope ("<tool_call>", "[TOOL_CALLS]",
 * "<|python_tag|>", "<|START_ACTION|>", DeepSeek's "<｜tool▁call▁begin｜>",
 * harmony's "to=functions.", and for llama-3 a '{' that starts the reply or
 * follows a call) is held, as is the whole envelope until its call object
 * has shown both a known tool name and the start of its arguments object:
 * then CALL_BEGIN goes out, the arguments stream as ARGS exactly as
 * written, and CALL_END follows when the call object closes.
 *
 * Two shapes of envelope: a JSON call object ({"name", "arguments"}, or
 * Command-R's {"tool_name", "parameters"}), alone or in a list; and a name
 * written outside the JSON (DeepSeek, harmony, Mistral's newer
 * [TOOL_CALLS]NAME[ARGS]), followed by the format's separators (only
 * those, and blanks) and the arguments object.  A format's wrapper texts
 * (DeepSeek's "<｜tool▁calls▁begin｜>", "```" fences and end markers,
 * "<|END_ACTION|>", "<|call|>") next to a call are dropped like the blanks
 * around it; elsewhere they are content.  An envelope that turns out
 * not to be a call (malformed JSON, an unknown name, no arguments, the text
 * ending first) comes out as CONTENT, byte for byte, and scanning goes on
 * after it.  A call whose JSON breaks after CALL_BEGIN, or that the text
 * ends inside, gets CALL_END but does not count as complete; scanning goes
 * on from the offending byte.
 *
 * Whitespace next to a call (between content and a call, between calls,
 * after the last) is not content.  Without parallel_tool_calls, calls after
 * the first are read and dropped.
 *
 * It does not check the arguments against the tool's schema (constrained
 * decoding does that for forced calls) and does not parse them into cJSON. */
#include "server/tools.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

#include "server/tool_json.h"
#include "util/digest.h"

#define CALL_ID_HEX 24  /* "call_" + 24 hex digits */
#define KEY_MAX 16      /* longer keys are none of ours */
#define NAME_MAX_LEN 64 /* tool names (tools.c checks them) */

enum pstate {
	P_TEXT,   /* content */
	P_MARKER, /* part of an envelope marker or wrapper matched (in env) */
	P_OPEN,   /* after the marker: the call object (mistral: or '['), or a name */
	P_OBJECT, /* inside a call object */
	P_CLOSE,  /* hermes: after the object, "</tool_call>" is expected */
	P_LIST,   /* mistral, command-r: after an object in [...], ',' or ']' */
	P_NAME,   /* a name outside the JSON */
	P_GAP,    /* between that name and the arguments: separators and blanks */
	P_NARGS,  /* that call's arguments object */
};

/* The texts that open an envelope (OPEN) or sit around calls (WRAP). */
enum marker_kind { MARK_OPEN, MARK_WRAP };
struct marker {
	const char *text;
	enum marker_kind kind;
};

enum ostate {
	O_FIRST,     /* after '{': a key or '}' */
	O_KEY_START, /* after ',': a key */
	O_KEY,       /* inside a key */
	O_COLON,
	O_VALUE, /* a member's value is expected */
	O_NAME,  /* inside the name string */
	O_ARGS,  /* inside the arguments object */
	O_SKIP,  /* inside a value we ignore */
	O_AFTER, /* after a member: ',' or '}' */
};

enum key_kind { KEY_OTHER, KEY_NAME, KEY_ARGS };

struct tool_parser {
	enum tool_format fmt;
	const struct tool_set *ts;    /* borrowed; may be NULL (no call is a call) */
	const struct marker *markers; /* {NULL}-terminated */
	const char *const *gap;       /* P_GAP: the separators allowed; NULL-terminated */
	const char *gap_needed;       /* one of them that must be seen, or NULL */
	enum pstate st;
	/* text */
	struct tbuf held; /* whitespace (llama-3 after a call: and ';') not yet content */
	bool after_call;  /* held text follows a call: dropped, never content */
	bool at_start;    /* llama-3: a '{' here opens a call (reply start, after a call) */
	struct tbuf env;  /* the envelope so far: content again if it is not a call */
	struct tbuf tail; /* hermes: text after the object, matched against the close */
	bool list;        /* mistral, command-r: the calls are in [...] */
	size_t gap_tok;   /* P_GAP: where in env the separator being read starts */
	bool gap_ok;      /* P_GAP: gap_needed was seen */
	bool gap_any;     /* P_GAP: a separator was seen */
	/* the call object */
	enum ostate ost;
	enum key_kind key;
	char keybuf[KEY_MAX + 1];
	size_t key_len;
	char name[NAME_MAX_LEN + 1];
	size_t name_len;
	const struct tool_def *tool; /* the named tool, once the name is read */
	bool args_seen, args_done;
	size_t args_start, args_end; /* the arguments' bytes in env */
	struct jscan js;
	bool begun;  /* CALL_BEGIN is out (or, muted, would be) */
	bool muted;  /* a call past the first without parallel_tool_calls */
	int index;   /* the open call's index */
	int n_calls; /* calls begun (and reported) */
	int n_complete;
	char id[5 + CALL_ID_HEX + 1];
	/* output */
	tool_event_cb cb;
	void *user;
	struct tbuf batch; /* CONTENT or ARGS bytes not yet handed out */
	enum tool_event_kind batch_kind;
	int batch_index;
	int err; /* -EIO: no random bytes for an id */
};

static void text_byte(struct tool_parser *p, unsigned char c);
static void parser_byte(struct tool_parser *p, unsigned char c);
static void object_byte(struct tool_parser *p, unsigned char c);
static void gap_byte(struct tool_parser *p, unsigned char c);
static void nname_byte(struct tool_parser *p, unsigned char c);

/* ---------------------------------------------------------------- events */

static void flush(struct tool_parser *p)
{
	if (p->batch.len == 0 || p->batch.oom)
		return;
	struct tool_event ev = {.kind = p->batch_kind,
	                        .index = p->batch_index,
	                        .text = p->batch.p,
	                        .len = p->batch.len};
	p->cb(p->user, &ev);
	tbuf_reset(&p->batch);
}

static void emit_text(struct tool_parser *p, enum tool_event_kind kind, const char *s, size_t n)
{
	int index = kind == TOOL_EV_ARGS ? p->index : -1;
	if (n == 0)
		return;
	if (p->batch.len && (p->batch_kind != kind || p->batch_index != index))
		flush(p);
	p->batch_kind = kind;
	p->batch_index = index;
	tbuf_putn(&p->batch, s, n);
}

static void emit_args(struct tool_parser *p, const char *s, size_t n)
{
	if (!p->muted)
		emit_text(p, TOOL_EV_ARGS, s, n);
}

/* Text that is content: the held whitespace first, unless it follows a
 * call. */
static void content(struct tool_parser *p, const char *s, size_t n)
{
	if (!p->after_call)
		emit_text(p, TOOL_EV_CONTENT, p->held.p, p->held.len);
	tbuf_reset(&p->held);
	p->after_call = false;
	p->at_start = false;
	emit_text(p, TOOL_EV_CONTENT, s, n);
}

static void make_id(struct tool_parser *p)
{
	unsigned char r[CALL_ID_HEX / 2];
	if (RAND_bytes(r, sizeof(r)) != 1) {
		p->err = -EIO;
		memset(r, 0, sizeof(r));
	}
	memcpy(p->id, "call_", 5);
	digest_hex(r, sizeof(r), p->id + 5);
}

/* The name is known and the arguments have started: the call is on. */
static void call_begin(struct tool_parser *p)
{
	p->begun = true;
	p->muted = !p->ts->parallel && p->n_calls > 0;
	tbuf_reset(&p->held); /* whitespace before a call is not content */
	p->after_call = false;
	if (p->muted)
		return;
	flush(p);
	make_id(p);
	p->index = p->n_calls++;
	struct tool_event ev = {
	    .kind = TOOL_EV_CALL_BEGIN, .index = p->index, .id = p->id, .name = p->tool->name};
	p->cb(p->user, &ev);
}

static void call_end(struct tool_parser *p, bool complete)
{
	if (!p->muted) {
		flush(p);
		struct tool_event ev = {.kind = TOOL_EV_CALL_END, .index = p->index};
		p->cb(p->user, &ev);
		p->n_complete += complete;
	}
	p->begun = p->muted = false;
	p->after_call = true;
	p->at_start = true;
	tbuf_reset(&p->env);
}

/* ---------------------------------------------------------------- envelope */

static void object_init(struct tool_parser *p, enum ostate ost)
{
	p->st = P_OBJECT;
	p->ost = ost;
	p->tool = NULL;
	p->name_len = 0;
	p->args_seen = p->args_done = false;
	p->begun = p->muted = false;
}

/* Not a call after all: env[0..keep) is content, scanning goes on in text. */
static void give_up(struct tool_parser *p, size_t keep)
{
	p->st = P_TEXT;
	content(p, p->env.p, keep);
	tbuf_reset(&p->env);
}

/* Byte c (the last byte of env) breaks the envelope: what came before it is
 * content, or ends the begun call, and c is read again as text. */
static void broken(struct tool_parser *p, unsigned char c)
{
	if (p->begun) {
		call_end(p, false);
		p->st = P_TEXT;
	} else {
		give_up(p, p->env.len - 1);
	}
	text_byte(p, c);
}

static const struct tool_def *tool_find(const struct tool_set *ts, const char *name)
{
	for (size_t i = 0; ts && i < ts->n_tools; i++)
		if (!strcmp(ts->tools[i].name, name))
			return &ts->tools[i];
	return NULL;
}

/* The name string closed. */
static void name_done(struct tool_parser *p)
{
	p->name[p->name_len <= NAME_MAX_LEN ? p->name_len : 0] = '\0';
	p->tool = p->name_len <= NAME_MAX_LEN ? tool_find(p->ts, p->name) : NULL;
	if (!p->tool) {
		give_up(p, p->env.len); /* an unknown tool: the text is content */
		return;
	}
	p->ost = O_AFTER;
	if (p->args_seen) {
		/* the arguments came first: out in one piece (or, if still open,
		 * the rest streams) */
		call_begin(p);
		size_t end = p->args_done ? p->args_end : p->env.len;
		emit_args(p, p->env.p + p->args_start, end - p->args_start);
	}
}

/* The call object closed. */
static void object_done(struct tool_parser *p)
{
	if (!p->begun) {
		give_up(p, p->env.len); /* no name or no arguments */
		return;
	}
	call_end(p, true);
	if (p->fmt == TOOL_FORMAT_HERMES || p->fmt == TOOL_FORMAT_GENERIC) {
		p->st = P_CLOSE;
		tbuf_reset(&p->tail);
	} else {
		p->st = p->list ? P_LIST : P_TEXT;
	}
}

static void key_done(struct tool_parser *p)
{
	p->keybuf[p->key_len <= KEY_MAX ? p->key_len : 0] = '\0';
	p->key = KEY_OTHER;
	const char *name_key = p->fmt == TOOL_FORMAT_COMMAND_R ? "tool_name" : "name";
	if (p->key_len <= KEY_MAX && !strcmp(p->keybuf, name_key) && !p->tool && p->name_len == 0)
		p->key = KEY_NAME;
	else if (p->key_len <= KEY_MAX && !p->args_seen &&
	         (!strcmp(p->keybuf, "arguments") || !strcmp(p->keybuf, "parameters")))
		p->key = KEY_ARGS;
	p->ost = O_COLON;
}

static bool blank(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void value_start(struct tool_parser *p, unsigned char c)
{
	jscan_init(&p->js);
	if (p->key == KEY_NAME) {
		if (c != '"')
			broken(p, c);
		else
			p->ost = O_NAME;
		return;
	}
	if (p->key == KEY_ARGS) {
		if (c != '{') {
			broken(p, c); /* arguments must be an object */
			return;
		}
		p->args_seen = true;
		p->args_start = p->env.len - 1;
		p->ost = O_ARGS;
		jscan_byte(&p->js, c);
		if (p->tool)
			call_begin(p);
		if (p->begun)
			emit_args(p, "{", 1);
		return;
	}
	p->ost = O_SKIP;
	if (jscan_byte(&p->js, c) == JSCAN_ERROR)
		broken(p, c);
}

static void args_byte(struct tool_parser *p, unsigned char c)
{
	enum jscan_rc rc = jscan_byte(&p->js, c);
	if (rc == JSCAN_ERROR) {
		broken(p, c);
		return;
	}
	if (p->begun)
		emit_args(p, (const char *)&c, 1);
	if (rc == JSCAN_DONE) {
		p->args_done = true;
		p->args_end = p->env.len;
		p->ost = O_AFTER;
	}
}

static void skip_byte(struct tool_parser *p, unsigned char c)
{
	enum jscan_rc rc = jscan_byte(&p->js, c);
	if (rc == JSCAN_ERROR) {
		broken(p, c);
	} else if (rc == JSCAN_DONE) {
		p->ost = O_AFTER;
	} else if (rc == JSCAN_DONE_UNREAD) {
		p->ost = O_AFTER; /* a number ended at c, which is the object's */
		object_byte(p, c);
	}
}

/* A byte of a string: key or name.  Escapes never occur in the names we
 * look for, so a backslash (or a control byte) makes the envelope not a
 * call. */
static void string_byte(struct tool_parser *p, unsigned char c, char *buf, size_t cap, size_t *len)
{
	if (c == '\\' || c < 0x20) {
		broken(p, c);
		return;
	}
	if (c == '"') {
		if (p->ost == O_KEY)
			key_done(p);
		else
			name_done(p);
		return;
	}
	if (*len < cap)
		buf[*len] = (char)c;
	(*len)++;
}

static void object_byte(struct tool_parser *p, unsigned char c)
{
	switch (p->ost) {
	case O_FIRST:
	case O_KEY_START:
		if (blank(c))
			return;
		if (p->ost == O_FIRST && c == '}') {
			object_done(p);
		} else if (c == '"') {
			p->ost = O_KEY;
			p->key_len = 0;
		} else {
			broken(p, c);
		}
		return;
	case O_KEY:
		string_byte(p, c, p->keybuf, KEY_MAX, &p->key_len);
		return;
	case O_NAME:
		string_byte(p, c, p->name, NAME_MAX_LEN, &p->name_len);
		return;
	case O_COLON:
		if (c == ':')
			p->ost = O_VALUE;
		else if (!blank(c))
			broken(p, c);
		return;
	case O_VALUE:
		if (!blank(c))
			value_start(p, c);
		return;
	case O_ARGS:
		args_byte(p, c);
		return;
	case O_SKIP:
		skip_byte(p, c);
		return;
	case O_AFTER:
		if (c == ',')
			p->ost = O_KEY_START;
		else if (c == '}')
			object_done(p);
		else if (!blank(c))
			broken(p, c);
		return;
	}
}

/* ---------------------------------------------------------------- states */

/* A marker that env (the bytes matched so far) is a prefix of, or NULL;
 * *whole: env is all of it.  No marker is a prefix of another. */
static const struct marker *marker_match(const struct tool_parser *p, bool *whole)
{
	for (const struct marker *m = p->markers; m->text; m++) {
		size_t k = strlen(m->text);
		if (p->env.len <= k && !memcmp(m->text, p->env.p, p->env.len)) {
			*whole = p->env.len == k;
			return m;
		}
	}
	return NULL;
}

static void marker_byte(struct tool_parser *p, unsigned char c)
{
	bool whole = false;
	const struct marker *m = marker_match(p, &whole);
	if (!m) {
		/* A marker's first byte does not come again inside it (but in
		 * harmony's "to=functions."), so no later start overlaps this
		 * one: the bytes before c are content. */
		give_up(p, p->env.len - 1);
		text_byte(p, c);
		return;
	}
	if (!whole)
		return;
	if (m->kind == MARK_WRAP) {
		/* held like blanks: dropped next to a call, else content */
		tbuf_putn(&p->held, p->env.p, p->env.len);
		tbuf_reset(&p->env);
		p->st = P_TEXT;
		return;
	}
	p->st = P_OPEN;
	p->list = false;
}

static bool name_byte_ok(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-';
}

/* A name outside the JSON starts with c. */
static void name_start(struct tool_parser *p, unsigned char c)
{
	object_init(p, O_FIRST);
	p->st = P_NAME;
	p->name[0] = (char)c;
	p->name_len = 1;
}

static void open_byte(struct tool_parser *p, unsigned char c)
{
	if (blank(c))
		return;
	bool lists = p->fmt == TOOL_FORMAT_MISTRAL || p->fmt == TOOL_FORMAT_MISTRAL_ARGS ||
	             p->fmt == TOOL_FORMAT_COMMAND_R;
	if (c == '[' && lists && !p->list) {
		p->list = true;
		return;
	}
	if (c == '{') {
		object_init(p, O_FIRST);
		return;
	}
	if (p->gap && !p->list && name_byte_ok(c)) {
		name_start(p, c);
		return;
	}
	broken(p, c);
}

/* The name outside the JSON ended at c (env's last byte). */
static void nname_done(struct tool_parser *p, unsigned char c)
{
	p->name[p->name_len <= NAME_MAX_LEN ? p->name_len : 0] = '\0';
	p->tool = p->name_len <= NAME_MAX_LEN ? tool_find(p->ts, p->name) : NULL;
	/* DeepSeek R1/V3 write the call's type first: "function<｜tool▁sep｜>NAME" */
	bool type_first = (p->fmt == TOOL_FORMAT_DEEPSEEK || p->fmt == TOOL_FORMAT_DEEPSEEK_V3_1) &&
	                  !strcmp(p->name, "function");
	if (!p->tool && !type_first) {
		broken(p, c);
		return;
	}
	p->st = P_GAP;
	p->gap_tok = p->env.len - 1;
	p->gap_ok = p->gap_needed == NULL;
	p->gap_any = false;
	gap_byte(p, c);
}

static void nname_byte(struct tool_parser *p, unsigned char c)
{
	if (!name_byte_ok(c)) {
		nname_done(p, c);
		return;
	}
	if (p->name_len < NAME_MAX_LEN + 1)
		p->name[p->name_len] = (char)c;
	p->name_len++;
}

static void nargs_start(struct tool_parser *p)
{
	if (!p->tool || !p->gap_ok) {
		broken(p, '{');
		return;
	}
	jscan_init(&p->js);
	jscan_byte(&p->js, '{');
	p->st = P_NARGS;
	call_begin(p);
	emit_args(p, "{", 1);
}

static void nargs_byte(struct tool_parser *p, unsigned char c)
{
	enum jscan_rc rc = jscan_byte(&p->js, c);
	if (rc == JSCAN_ERROR) {
		broken(p, c);
		return;
	}
	emit_args(p, (const char *)&c, 1);
	if (rc == JSCAN_DONE) {
		call_end(p, true);
		p->st = P_TEXT;
	}
}

/* Between a name outside the JSON and its arguments: blanks and the
 * format's separators, then '{'. */
static void gap_byte(struct tool_parser *p, unsigned char c)
{
	size_t n = p->env.len - p->gap_tok; /* the separator being read, c included */
	if (n == 1 && blank(c)) {
		p->gap_tok = p->env.len;
		return;
	}
	if (n == 1 && c == '{') {
		nargs_start(p);
		return;
	}
	if (n == 1 && !p->tool && p->gap_any && name_byte_ok(c)) {
		p->st = P_NAME; /* DeepSeek: the name after the type */
		p->name_len = 0;
		nname_byte(p, c);
		return;
	}
	bool prefix = false;
	for (const char *const *g = p->gap; *g; g++) {
		size_t k = strlen(*g);
		if (n > k || memcmp(*g, p->env.p + p->gap_tok, n))
			continue;
		if (n == k) {
			p->gap_any = true;
			p->gap_ok |= p->gap_needed && !strcmp(*g, p->gap_needed);
			p->gap_tok = p->env.len;
			return;
		}
		prefix = true;
	}
	if (!prefix)
		broken(p, c);
}

/* hermes: "</tool_call>" after the object; anything else is text. */
static void close_byte(struct tool_parser *p, unsigned char c)
{
	static const char close[] = "</tool_call>";
	tbuf_putc(&p->tail, (char)c);
	size_t lead = 0;
	while (lead < p->tail.len && blank((unsigned char)p->tail.p[lead]))
		lead++;
	size_t k = p->tail.len - lead; /* bytes of the close matched, c included */
	if (k == 0)
		return;
	if (k <= sizeof(close) - 1 && !memcmp(p->tail.p + lead, close, k)) {
		if (k == sizeof(close) - 1)
			p->st = P_TEXT; /* after_call: the blanks are dropped */
		return;
	}
	/* Not the close: read the held bytes again as text. */
	struct tbuf again = p->tail;
	p->tail = (struct tbuf){0};
	p->st = P_TEXT;
	for (size_t i = 0; i < again.len; i++)
		parser_byte(p, (unsigned char)again.p[i]);
	tbuf_deinit(&again);
}

/* mistral: after a call in [...]. */
static void list_byte(struct tool_parser *p, unsigned char c)
{
	if (blank(c))
		return;
	if (c == ',') {
		p->st = P_OPEN; /* list is set: '{' expected */
		tbuf_reset(&p->env);
		return;
	}
	p->st = P_TEXT;
	if (c != ']')
		text_byte(p, c);
}

static void text_byte(struct tool_parser *p, unsigned char c)
{
	bool starts = false;
	for (const struct marker *m = p->markers; m->text; m++)
		starts |= c == (unsigned char)m->text[0];
	if (starts) {
		tbuf_reset(&p->env);
		tbuf_putc(&p->env, (char)c);
		p->st = P_MARKER;
		return;
	}
	bool llama3 = p->fmt == TOOL_FORMAT_LLAMA3;
	if (blank(c) || (llama3 && p->after_call && c == ';')) {
		tbuf_putc(&p->held, (char)c);
		return;
	}
	if (llama3 && p->at_start && c == '{') {
		tbuf_reset(&p->env);
		tbuf_putc(&p->env, (char)c);
		object_init(p, O_FIRST);
		return;
	}
	content(p, (const char *)&c, 1);
}

static void parser_byte(struct tool_parser *p, unsigned char c)
{
	if (p->st == P_TEXT) {
		text_byte(p, c);
		return;
	}
	if (p->st == P_CLOSE) {
		close_byte(p, c);
		return;
	}
	if (p->st == P_LIST) {
		list_byte(p, c);
		return;
	}
	tbuf_putc(&p->env, (char)c);
	if (p->st == P_MARKER)
		marker_byte(p, c);
	else if (p->st == P_OPEN)
		open_byte(p, c);
	else if (p->st == P_NAME)
		nname_byte(p, c);
	else if (p->st == P_GAP)
		gap_byte(p, c);
	else if (p->st == P_NARGS)
		nargs_byte(p, c);
	else
		object_byte(p, c);
}

/* ---------------------------------------------------------------- api */

static const struct marker markers_hermes[] = {{"<tool_call>", MARK_OPEN}, {NULL, 0}};
static const struct marker markers_llama3[] = {{"<|python_tag|>", MARK_OPEN}, {NULL, 0}};
static const struct marker markers_mistral[] = {{"[TOOL_CALLS]", MARK_OPEN}, {NULL, 0}};
static const struct marker markers_deepseek[] = {
    {"<\uff5ctool\u2581call\u2581begin\uff5c>", MARK_OPEN},
    {"<\uff5ctool\u2581calls\u2581begin\uff5c>", MARK_WRAP},
    {"<\uff5ctool\u2581call\u2581end\uff5c>", MARK_WRAP},
    {"<\uff5ctool\u2581calls\u2581end\uff5c>", MARK_WRAP},
    {"```", MARK_WRAP},
    {NULL, 0}};
static const struct marker markers_command_r[] = {
    {"<|START_ACTION|>", MARK_OPEN}, {"<|END_ACTION|>", MARK_WRAP}, {NULL, 0}};
static const struct marker markers_harmony[] = {
    {"to=functions.", MARK_OPEN}, {"<|call|>", MARK_WRAP}, {NULL, 0}};

static const char *const gap_mistral[] = {"[ARGS]", NULL};
static const char *const gap_deepseek[] = {"<\uff5ctool\u2581sep\uff5c>", "```json", NULL};
static const char *const gap_harmony[] = {"<|constrain|>", "json", "<|message|>", NULL};

/* The format's markers, and for names outside the JSON its separators. */
static void markers_of(struct tool_parser *p)
{
	switch (p->fmt) {
	case TOOL_FORMAT_LLAMA3:
		p->markers = markers_llama3;
		break;
	case TOOL_FORMAT_MISTRAL:
	case TOOL_FORMAT_MISTRAL_ARGS:
		p->markers = markers_mistral;
		p->gap = gap_mistral;
		p->gap_needed = "[ARGS]";
		break;
	case TOOL_FORMAT_DEEPSEEK:
	case TOOL_FORMAT_DEEPSEEK_V3_1:
		p->markers = markers_deepseek;
		p->gap = gap_deepseek;
		break;
	case TOOL_FORMAT_COMMAND_R:
		p->markers = markers_command_r;
		break;
	case TOOL_FORMAT_HARMONY:
		p->markers = markers_harmony;
		p->gap = gap_harmony;
		p->gap_needed = "<|message|>";
		break;
	default:
		p->markers = markers_hermes;
		break;
	}
}

int tool_parser_new(enum tool_format f, const struct tool_set *ts, struct tool_parser **out)
{
	struct tool_parser *p = calloc(1, sizeof(*p));
	*out = p;
	if (!p)
		return -ENOMEM;
	p->fmt = f;
	p->ts = ts;
	markers_of(p);
	p->st = P_TEXT;
	p->at_start = true;
	return 0;
}

void tool_parser_free(struct tool_parser *p)
{
	if (!p)
		return;
	tbuf_deinit(&p->held);
	tbuf_deinit(&p->env);
	tbuf_deinit(&p->tail);
	tbuf_deinit(&p->batch);
	free(p);
}

static int parser_status(const struct tool_parser *p)
{
	if (p->held.oom || p->env.oom || p->tail.oom || p->batch.oom)
		return -ENOMEM;
	return p->err;
}

int tool_parser_feed(struct tool_parser *p, const char *text, size_t len, tool_event_cb cb,
                     void *user)
{
	p->cb = cb;
	p->user = user;
	for (size_t i = 0; i < len; i++)
		parser_byte(p, (unsigned char)text[i]);
	flush(p);
	return parser_status(p);
}

int tool_parser_finish(struct tool_parser *p, tool_event_cb cb, void *user)
{
	p->cb = cb;
	p->user = user;
	bool unbegun = p->st == P_OBJECT || p->st == P_NAME || p->st == P_GAP;
	if (p->st == P_MARKER || p->st == P_OPEN || (unbegun && !p->begun))
		give_up(p, p->env.len); /* a partial envelope is content */
	else if (p->st == P_OBJECT || p->st == P_NARGS)
		call_end(p, false); /* the text ended inside the call */
	if (!p->after_call)
		emit_text(p, TOOL_EV_CONTENT, p->held.p, p->held.len);
	tbuf_reset(&p->held);
	p->st = P_TEXT;
	flush(p);
	int rc = parser_status(p);
	return rc ? rc : p->n_complete;
}
