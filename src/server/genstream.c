/* Generations bound to connections.  The engine thread only appends a copy
 * of each event under the generation's mutex and resumes the connection if
 * it was suspended; all JSON is built on the connection's thread.  A
 * generation has two references, the connection's and the scheduler's (until
 * DONE), so that either side may go first.  Errors, at submit or at DONE,
 * are answered through respond.h's one mapping.  What the answer looks like
 * is one formatter per API (completions, chat, Responses: struct gs_format),
 * fed the generated text, through the tool-call parser when the request
 * offers tools; the mechanics (suspend/resume, flow control, keep-alive)
 * do not know which API they serve.  It does not parse requests (api.c) and
 * does not own the listener (http.c). */
#include "session/session_key.h"
#include "server/genstream.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "server/chat_prompt.h"
#include "server/chat_render.h"
#include "server/gen_prepare.h"
#include "server/quota.h"
#include "server/reasoning.h"
#include "server/request.h"
#include "server/respond.h"
#include "server/responses.h"
#include "server/tools.h"
#include "util/errbuf.h"
#include "util/log.h"

/* What the client asked a generation's answer to look like. */
struct gen_shape {
	enum gen_api api;
	bool chat;
	bool stream;
	bool include_usage;
	bool logprobs;
	bool timing;            /* X-Sinkd-Timing: chunks carry "sinkd_emit_us" (benchmarks) */
	bool append_only;       /* session append without generation */
	const char *session_id; /* NULL for one-shot requests */
	const char *id;
	const char *model;
	struct request_field_names names; /* the client's names of its fields */
	/* Taken by gs_new, whether it succeeds or not: */
	struct tool_set *tools; /* the request's tools, NULL when none */
	struct sched_chat_mark *chat_marks; /* gen_args' (chat with session_id) */
	size_t n_chat_marks;
	uint64_t chat_group_pos;
	uint32_t chat_group;
	cJSON *response;        /* Responses: responses_object_new's */
	int reasoning_start;       /* gen_args' (enum reasoning_start) */
	bool reasoning_in_content; /* reasoning_format "none" */
};

struct genstream;
struct tool_event;

/* One API's answer: the generated text in, its stream events (into
 * gs->out) or its whole object out.  Runs on the connection's thread. */
struct gs_format {
	/* stream: the events before the first token (NULL: none) */
	void (*open)(struct genstream *gs);
	/* text outside tool calls (NULL when held back); lp: its token's
	 * logprobs in a stream (taken; may be NULL) */
	void (*content)(struct genstream *gs, const char *text, size_t len, cJSON *lp);
	/* a tool call's begin, arguments piece or end (NULL: no tools) */
	void (*call)(struct genstream *gs, const struct tool_event *ev);
	/* a generation that finished (stop, length, none): stream: the closing
	 * events, NULL; !stream: the whole object (NULL: out of memory) */
	cJSON *(*close)(struct genstream *gs, enum gen_finish fin, int n_prompt, int n_cached,
	                int n_gen);
	/* stream: an error that ends it */
	void (*fail)(struct genstream *gs, const char *msg, const char *type, const char *param,
	             const char *code);
	/* reasoning text (reasoning.h; NULL: no reasoning is split off); lp as
	 * content's */
	void (*reasoning)(struct genstream *gs, const char *text, size_t len, cJSON *lp);
};

/* Events queued for a connection that does not read them stop the stream
 * (bounded memory for a stalled client); the generation is then cancelled. */
#ifndef GS_MAX_PENDING_EVENTS
#define GS_MAX_PENDING_EVENTS 65536
#endif

struct gs_event {
	char *text;
	size_t len;
	bool has_lp;
	struct sampler_result lp;
	double t_emit;
};

struct genstream {
	pthread_mutex_t mu;
	int refs;
	struct server *srv;
	struct MHD_Connection *conn; /* NULL once the connection is gone */
	bool suspended;
	bool submitted;
	bool cancel_sent; /* the peer hung up while we were suspended */
	int fd;           /* the connection's socket, to notice a hang-up while suspended */
	uint64_t handle;
	struct oa_ctx oa;
	char id[REQUEST_ID_LEN + 16];
	char model[128];
	bool stream, logprobs, timing, append_only;
	struct request_field_names names; /* gen_shape's */
	char session_id[SCHED_SESSION_ID_LEN];
	/* Counted by quota_begin (genstream_submit) before the submit; this
	 * generation ends it at DONE.  started: [engine] left the queue. */
	struct quota_client client;
	bool started;

	/* Written by the engine thread, under mu. */
	struct gs_event *ev;
	size_t n_ev, cap_ev;
	bool done;
	enum gen_finish finish;
	int err_rc;            /* GEN_FINISH_ERROR: why (respond_kind_of) */
	const char *err_param; /* the client's name of the field at fault; NULL: none */
	int retry_after_s;
	char err_msg[256];
	int n_prompt, n_gen;
	int n_cached; /* of n_prompt, from the prefix cache */
	double t_submit, t_first, t_last;
	bool keepalive_due;
	bool overflow; /* the client fell GS_MAX_PENDING_EVENTS behind */
	bool lost;     /* a token could not be queued (out of memory) */
	double last_write;

	/* The connection's thread only. */
	char *out;
	size_t out_len, out_pos, out_cap;
	bool sent_role, ended;
	size_t text_offset;
	char *text; /* stream:false accumulation (and a tracked chat's reply when streamed) */
	size_t text_len, text_cap;
	/* chat with session_id: the session's chat marks, set when it ends */
	struct sched_chat_mark *chat_marks;
	size_t n_chat_marks;
	uint64_t chat_group_pos;
	uint32_t chat_group;
	cJSON *lp_acc;
	const struct gs_format *fmt;
	bool opened;               /* stream: fmt's opening events are out */
	double t_emit;             /* stream: the engine's emit time of the token formatted */
	struct tool_set *tool_set; /* the request's tools (owned); NULL when none */
	struct tool_parser *tools; /* finds calls in the text; NULL when none are offered */
	bool tools_ended;          /* tool_parser_finish ran */
	int n_calls;               /* complete calls found: finish_reason "tool_calls" */
	cJSON *pending_lp;         /* stream: the logprobs of the token being parsed */
	cJSON *calls;              /* chat, !stream: message.tool_calls so far */
	bool call_open;            /* chat, !stream: the last call's arguments still come */
	char *call_args;           /* its arguments so far */
	size_t call_args_len, call_args_cap;
	struct resp_stream *resp; /* Responses: its items and events */
	struct reasoning_splitter *reasoning; /* NULL when the reply's reasoning is not split */
	bool reasoning_ended;                 /* reasoning_splitter_finish ran */
	char *reasoning_text;                 /* chat, !stream: message.reasoning_content */
	size_t reasoning_len, reasoning_cap;

	struct genstream *prev, *next; /* server.gens, while the connection lives */
	bool linked;
};

static void gs_unref(struct genstream *gs)
{
	pthread_mutex_lock(&gs->mu);
	int left = --gs->refs;
	pthread_mutex_unlock(&gs->mu);
	if (left)
		return;
	for (size_t i = 0; i < gs->n_ev; i++)
		free(gs->ev[i].text);
	free(gs->ev);
	free(gs->out);
	free(gs->text);
	free(gs->chat_marks);
	cJSON_Delete(gs->lp_acc);
	tool_parser_free(gs->tools);
	if (gs->tool_set)
		tool_set_deinit(gs->tool_set);
	free(gs->tool_set);
	cJSON_Delete(gs->pending_lp);
	cJSON_Delete(gs->calls);
	free(gs->call_args);
	resp_stream_free(gs->resp);
	reasoning_splitter_free(gs->reasoning);
	free(gs->reasoning_text);
	pthread_mutex_destroy(&gs->mu);
	free(gs);
}

/* Must hold gs->mu. */
static void gs_wake(struct genstream *gs)
{
	if (gs->conn && gs->suspended) {
		gs->suspended = false;
		MHD_resume_connection(gs->conn);
	}
}

/* Whether the test hook fails this token's queueing. */
static bool gs_fail_injected(struct server *s)
{
	uint64_t at = atomic_load_explicit(&s->fail_token_at, memory_order_relaxed);
	return at && (atomic_fetch_add(&s->tokens_queued, 1) + 1) % at == 0;
}

/* Queues a token for the connection.  Without memory for it the stream
 * ends with an error (lost): a reply must never silently miss a token, and
 * the engine thread must not block. */
static void gs_push(struct genstream *gs, const struct gen_event *e, double now)
{
	if (gs->n_ev >= GS_MAX_PENDING_EVENTS) {
		gs->overflow = true;
		return;
	}
	if (gs->lost || gs_fail_injected(gs->srv)) {
		gs->lost = true;
		return;
	}
	if (gs->n_ev == gs->cap_ev) {
		size_t cap = gs->cap_ev ? gs->cap_ev * 2 : 16;
		struct gs_event *ev = realloc(gs->ev, cap * sizeof(*ev));
		if (!ev) {
			gs->lost = true;
			return;
		}
		gs->ev = ev;
		gs->cap_ev = cap;
	}
	struct gs_event *q = &gs->ev[gs->n_ev];
	memset(q, 0, sizeof(*q));
	if (e->text_len) {
		q->text = malloc(e->text_len);
		if (!q->text) {
			gs->lost = true;
			return;
		}
		memcpy(q->text, e->text, e->text_len);
		q->len = e->text_len;
	}
	if (gs->logprobs && e->logprobs) {
		q->has_lp = true;
		q->lp = *e->logprobs;
	}
	q->t_emit = now;
	gs->n_ev++;
}

/* The scheduler's callback, on the engine thread: copy, wake, return. */
static void gs_on_event(void *user, const struct gen_event *e)
{
	struct genstream *gs = user;
	struct metrics *m = gs->srv->metrics;
	double now = server_now();
	pthread_mutex_lock(&gs->mu);
	if (e->kind == GEN_EVENT_TOKEN) {
		if (gs->t_first == 0) {
			gs->t_first = now;
			metrics_ttft(m, now - gs->t_submit);
		} else {
			metrics_inter_token(m, now - gs->t_last);
		}
		gs->t_last = now;
		gs->n_gen = e->n_generated_tokens;
		gs_push(gs, e, now);
	} else if (e->kind == GEN_EVENT_PROMPT_DONE) {
		gs->n_prompt = e->n_prompt_tokens;
		gs->n_cached = e->n_cached_tokens;
	} else {
		gs->done = true;
		gs->finish = e->finish;
		gs->n_prompt = e->n_prompt_tokens ? e->n_prompt_tokens : gs->n_prompt;
		gs->n_cached = e->n_prompt_tokens ? e->n_cached_tokens : gs->n_cached;
		gs->n_gen = e->n_generated_tokens;
		gs->err_rc = e->error_rc;
		gs->err_param = request_field_name(&gs->names, e->error_field);
		gs->retry_after_s = e->retry_after_s;
		if (e->error)
			snprintf(gs->err_msg, sizeof(gs->err_msg), "%s", e->error);
	}
	/* A stream wants every token now; a whole response only its end (and a
	 * batch now and then, to keep the queue short). */
	if (gs->stream || e->kind == GEN_EVENT_DONE || gs->n_ev >= 256 || gs->lost)
		gs_wake(gs);
	pthread_mutex_unlock(&gs->mu);
	if (e->kind == GEN_EVENT_DONE) {
		metrics_tokens(m, (uint64_t)e->n_prompt_tokens, (uint64_t)e->n_generated_tokens);
		quota_end(gs->srv->quota, &gs->client, gs->started);
		gs_unref(gs);
	}
}

/* The scheduler's on_start, on the engine thread: no longer waiting. */
static void gs_on_start(void *user)
{
	struct genstream *gs = user;
	gs->started = true;
	quota_started(gs->srv->quota, &gs->client);
}

/* Tokens queued for the connection (flow control counts only streams: a
 * whole response is taken at its end). */
static size_t gs_unsent_tokens(void *user)
{
	struct genstream *gs = user;
	if (!gs->stream)
		return 0;
	pthread_mutex_lock(&gs->mu);
	size_t n = gs->n_ev;
	pthread_mutex_unlock(&gs->mu);
	return n;
}

static void gs_link(struct server *s, struct genstream *gs)
{
	pthread_mutex_lock(&s->gen_mu);
	gs->next = s->gens;
	if (s->gens)
		s->gens->prev = gs;
	s->gens = gs;
	s->n_gens++;
	gs->linked = true;
	pthread_mutex_unlock(&s->gen_mu);
}

static void gs_unlink(struct server *s, struct genstream *gs)
{
	pthread_mutex_lock(&s->gen_mu);
	if (gs->linked) {
		if (gs->prev)
			gs->prev->next = gs->next;
		else
			s->gens = gs->next;
		if (gs->next)
			gs->next->prev = gs->prev;
		gs->linked = false;
		s->n_gens--;
		pthread_cond_broadcast(&s->gen_cond);
	}
	pthread_mutex_unlock(&s->gen_mu);
}

/* ---- formats: one per API ------------------------------------------------- */

static void gs_emit_chunk(struct genstream *gs, cJSON *chunk)
{
	if (gs->timing) /* the engine's emit time, CLOCK_MONOTONIC µs */
		cJSON_AddNumberToObject(chunk, "sinkd_emit_us", floor(gs->t_emit * 1e6));
	sse_append(&gs->out, &gs->out_len, &gs->out_cap, chunk);
}

/* Completions and chat: a chunk per piece, or the text added up. */
static void oa_content(struct genstream *gs, const char *text, size_t len, cJSON *lp)
{
	if (gs->stream && gs->chat_marks && len) /* the reply's mark needs its text */
		sse_append_raw(&gs->text, &gs->text_len, &gs->text_cap, text, len);
	if (!gs->stream) {
		if (len)
			sse_append_raw(&gs->text, &gs->text_len, &gs->text_cap, text, len);
		cJSON_Delete(lp);
		return;
	}
	if (!len && !lp)
		return; /* held back (stop-string prefix, partial UTF-8, a possible call) */
	bool role = gs->oa.chat && !gs->sent_role;
	gs->sent_role = true;
	gs_emit_chunk(gs, oa_chunk(&gs->oa, text, len, role, lp, NULL));
}

/* Chat reasoning: delta.reasoning_content chunks, or message.reasoning_content. */
static void oa_reasoning(struct genstream *gs, const char *text, size_t len, cJSON *lp)
{
	if (!gs->stream) {
		sse_append_raw(&gs->reasoning_text, &gs->reasoning_len, &gs->reasoning_cap, text,
		               len);
		cJSON_Delete(lp);
		return;
	}
	bool role = !gs->sent_role;
	gs->sent_role = true;
	gs_emit_chunk(gs, oa_reasoning_chunk(&gs->oa, text, len, role, lp));
}

/* chat, !stream: the open call's arguments are complete. */
static void chat_call_done(struct genstream *gs)
{
	cJSON *last =
	    gs->calls ? cJSON_GetArrayItem(gs->calls, cJSON_GetArraySize(gs->calls) - 1) : NULL;
	cJSON *fn = last ? cJSON_GetObjectItem(last, "function") : NULL;
	if (gs->call_open && fn)
		cJSON_ReplaceItemInObject(
		    fn, "arguments",
		    oa_string_n(gs->call_args ? gs->call_args : "", gs->call_args_len));
	gs->call_open = false;
	gs->call_args_len = 0;
}

/* Chat tool calls: delta.tool_calls chunks, or message.tool_calls. */
static void chat_call(struct genstream *gs, const struct tool_event *ev)
{
	bool begin = ev->kind == TOOL_EV_CALL_BEGIN;
	if (gs->stream) {
		if (!begin && (ev->kind != TOOL_EV_ARGS || !ev->len))
			return;
		bool role = !gs->sent_role;
		gs->sent_role = true;
		gs_emit_chunk(gs, oa_tool_call_chunk(&gs->oa, role, ev->index,
		                                     begin ? ev->id : NULL, begin ? ev->name : NULL,
		                                     begin ? NULL : ev->text, begin ? 0 : ev->len));
		return;
	}
	if (begin) {
		chat_call_done(gs);
		if (!gs->calls)
			gs->calls = cJSON_CreateArray();
		cJSON_AddItemToArray(gs->calls, oa_tool_call(ev->id, ev->name, "", 0));
		gs->call_open = true;
	} else if (ev->kind == TOOL_EV_ARGS && gs->call_open) {
		sse_append_raw(&gs->call_args, &gs->call_args_len, &gs->call_args_cap, ev->text,
		               ev->len);
	} else if (ev->kind == TOOL_EV_CALL_END) {
		chat_call_done(gs);
	}
}

static const char *gs_finish_reason(const struct genstream *gs, enum gen_finish fin)
{
	return gs->n_calls > 0 ? "tool_calls" : oa_finish_reason(fin);
}

static cJSON *oa_close(struct genstream *gs, enum gen_finish fin, int np, int nc, int ng)
{
	if (!gs->stream) {
		cJSON *lp = gs->lp_acc;
		gs->lp_acc = NULL;
		cJSON *o = oa_final(&gs->oa, gs->text ? gs->text : "", gs->text_len, lp,
		                    gs_finish_reason(gs, fin), np, nc, ng);
		if (o && gs->reasoning_text)
			oa_final_set_reasoning(o, gs->reasoning_text, gs->reasoning_len);
		if (o && gs->calls) {
			chat_call_done(gs);
			oa_final_set_tool_calls(o, gs->calls);
			gs->calls = NULL;
		}
		return o;
	}
	char **b = &gs->out;
	size_t *l = &gs->out_len, *c = &gs->out_cap;
	bool role = gs->oa.chat && !gs->sent_role;
	sse_append(b, l, c, oa_chunk(&gs->oa, NULL, 0, role, NULL, gs_finish_reason(gs, fin)));
	if (gs->oa.include_usage)
		sse_append(b, l, c, oa_usage_chunk(&gs->oa, np, nc, ng));
	sse_append(b, l, c, NULL);
	return NULL;
}

static void oa_fail(struct genstream *gs, const char *msg, const char *type, const char *param,
                    const char *code)
{
	sse_append(&gs->out, &gs->out_len, &gs->out_cap, oa_error(msg, type, param, code));
	sse_append(&gs->out, &gs->out_len, &gs->out_cap, NULL);
}

/* The Responses API: responses.c's typed events (no [DONE]). */
static void rs_emit(void *user, const char *type, cJSON *ev)
{
	struct genstream *gs = user;
	sse_append_event(&gs->out, &gs->out_len, &gs->out_cap, type, ev);
}

static void rs_open(struct genstream *gs)
{
	resp_stream_open(gs->resp);
}

static void rs_content(struct genstream *gs, const char *text, size_t len, cJSON *lp)
{
	cJSON_Delete(lp); /* the Responses API here has no logprobs */
	if (len)
		resp_stream_text(gs->resp, text, len);
}

static void rs_reasoning(struct genstream *gs, const char *text, size_t len, cJSON *lp)
{
	cJSON_Delete(lp);
	resp_stream_reasoning(gs->resp, text, len);
}

static void rs_call(struct genstream *gs, const struct tool_event *ev)
{
	resp_stream_call(gs->resp, ev);
}

static cJSON *rs_close(struct genstream *gs, enum gen_finish fin, int np, int nc, int ng)
{
	cJSON *o = resp_stream_finish(gs->resp, fin, np, nc, ng);
	if (!gs->stream)
		return o;
	cJSON_Delete(o); /* response.completed carried it */
	return NULL;
}

static void rs_fail(struct genstream *gs, const char *msg, const char *type, const char *param,
                    const char *code)
{
	(void)type;
	resp_stream_fail(gs->resp, msg, code, param);
}

static const struct gs_format gs_format_completions = {NULL, oa_content, NULL, oa_close, oa_fail};
static const struct gs_format gs_format_chat = {NULL,     oa_content, chat_call,
                                                oa_close, oa_fail,    oa_reasoning};
static const struct gs_format gs_format_responses = {rs_open,  rs_content, rs_call,
                                                     rs_close, rs_fail,    rs_reasoning};

/* The parser's events: text to content, calls to the format's call. */
static void gs_on_tool_event(void *user, const struct tool_event *ev)
{
	struct genstream *gs = user;
	if (ev->kind != TOOL_EV_CONTENT) {
		if (gs->fmt->call)
			gs->fmt->call(gs, ev);
		return;
	}
	cJSON *lp = gs->pending_lp; /* the first text of the token carries them */
	gs->pending_lp = NULL;
	gs->fmt->content(gs, ev->text, ev->len, lp);
}

/* The reasoning splitter's pieces: reasoning to the format, the content
 * on to the tool-call parser (or to the format). */
static void gs_on_piece(void *user, enum reasoning_piece kind, const char *text, size_t len)
{
	struct genstream *gs = user;
	if (kind == REASONING_PIECE_CONTENT && gs->tools) {
		tool_parser_feed(gs->tools, text, len, gs_on_tool_event, gs);
		return;
	}
	cJSON *lp = gs->pending_lp;
	gs->pending_lp = NULL;
	if (kind == REASONING_PIECE_REASONING)
		gs->fmt->reasoning(gs, text, len, lp);
	else
		gs->fmt->content(gs, text, len, lp);
}

/* A piece of generated text (NULL when held back) and its token's
 * logprobs (taken, may be NULL), through the reasoning splitter and the
 * tool-call parser when the request has them. */
static void gs_feed(struct genstream *gs, const char *text, size_t len, cJSON *lp)
{
	if (!gs->tools && !gs->reasoning) {
		gs->fmt->content(gs, text, len, lp);
		return;
	}
	gs->pending_lp = lp;
	if (len && gs->reasoning)
		reasoning_splitter_feed(gs->reasoning, text, len, gs_on_piece, gs);
	else if (len)
		tool_parser_feed(gs->tools, text, len, gs_on_tool_event, gs);
	lp = gs->pending_lp;
	gs->pending_lp = NULL;
	if (lp) /* the token's text went into a call, or is held */
		gs->fmt->content(gs, NULL, 0, lp);
}

/* The text has ended: what the parser held comes out, and the count of
 * complete calls decides finish_reason. */
static void gs_feed_end(struct genstream *gs)
{
	if (gs->reasoning && !gs->reasoning_ended) {
		gs->reasoning_ended = true;
		reasoning_splitter_finish(gs->reasoning, gs_on_piece, gs);
	}
	if (!gs->tools || gs->tools_ended)
		return;
	gs->tools_ended = true;
	int n = tool_parser_finish(gs->tools, gs_on_tool_event, gs);
	gs->n_calls = n > 0 ? n : 0;
}

static void gs_shape_drop(const struct gen_shape *shape)
{
	if (shape->tools)
		tool_set_deinit(shape->tools);
	free(shape->tools);
	cJSON_Delete(shape->response);
}

/* The answer's format and its state (takes shape's tools and response). */
static int gs_format_init(struct genstream *gs, struct request *r, const struct gen_shape *shape)
{
	gs->tool_set = shape->tools;
	gs->chat_marks = shape->chat_marks;
	gs->n_chat_marks = shape->n_chat_marks;
	gs->chat_group_pos = shape->chat_group_pos;
	gs->chat_group = shape->chat_group;
	gs->fmt = shape->api == GEN_API_RESPONSES ? &gs_format_responses
	          : shape->chat                   ? &gs_format_chat
	                                          : &gs_format_completions;
	if (shape->api == GEN_API_RESPONSES &&
	    (!shape->response ||
	     resp_stream_new(shape->response, shape->stream ? rs_emit : NULL, gs, &gs->resp)))
		return -ENOMEM;
	struct chat_format cf;
	struct chat_render *cr = server_chat_render(r->srv);
	chat_prompt_format(r->srv->tok, cr, &cf);
	chat_render_unref(cr);
	/* A forced call's grammar writes the call from the first byte, even
	 * where the prompt opened a reasoning block. */
	enum reasoning_start start = (enum reasoning_start)shape->reasoning_start;
	const struct tool_set *ts = gs->tool_set;
	if (ts && (ts->choice == TOOL_CHOICE_REQUIRED || ts->choice == TOOL_CHOICE_NAMED) &&
	    start == REASONING_START_INSIDE)
		start = REASONING_START_BEFORE;
	if (shape->chat && cf.reasoning != REASONING_SYNTAX_NONE && !shape->reasoning_in_content &&
	    reasoning_splitter_new(cf.reasoning, start, &gs->reasoning))
		return -ENOMEM;
	if (shape->chat && gs->tool_set && gs->tool_set->n_tools &&
	    gs->tool_set->choice != TOOL_CHOICE_NONE)
		return tool_parser_new(cf.tools, gs->tool_set, &gs->tools);
	return 0;
}

static struct genstream *gs_new(struct request *r, const struct gen_shape *shape)
{
	struct genstream *gs = calloc(1, sizeof(*gs));
	if (!gs) {
		gs_shape_drop(shape);
		free(shape->chat_marks);
		return NULL;
	}
	pthread_mutex_init(&gs->mu, NULL);
	gs->refs = 2; /* the connection's and the scheduler's */
	gs->srv = r->srv;
	gs->conn = r->conn;
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	gs->fd = ci ? ci->connect_fd : -1;
	gs->stream = shape->stream;
	gs->logprobs = shape->logprobs;
	gs->timing = shape->timing;
	gs->append_only = shape->append_only;
	gs->names = shape->names;
	gs->client = r->client;
	snprintf(gs->session_id, sizeof(gs->session_id), "%s",
	         shape->session_id ? shape->session_id : "");
	snprintf(gs->id, sizeof(gs->id), "%s", shape->id);
	snprintf(gs->model, sizeof(gs->model), "%s", shape->model);
	gs->oa = (struct oa_ctx){.chat = shape->chat,
	                         .id = gs->id,
	                         .model = gs->model,
	                         .created = (long)time(NULL),
	                         .include_usage = shape->include_usage};
	if (gs->logprobs && !gs->stream)
		gs->lp_acc = oa_logprobs_new(shape->chat);
	if (gs_format_init(gs, r, shape)) {
		gs->refs = 1;
		gs_unref(gs);
		return NULL;
	}
	return gs;
}

/* Creates the generation for request r (r->gs) and submits `req` (its
 * callbacks are set here).  On error r->gs stays NULL, the caller keeps
 * req's buffers and *f says why. */
static int gs_start(struct request *r, const struct gen_shape *shape, struct gen_request *req,
                    struct respond_fault *f)
{
	struct server *s = r->srv;
	struct genstream *gs = gs_new(r, shape);
	if (!gs)
		return f->rc = err_set(f->msg, sizeof(f->msg), -ENOMEM, "out of memory");
	char owner[QUOTA_CLIENT_NAME_LEN];
	quota_client_name(&r->client, owner);
	req->request_id = r->id; /* both copied by the scheduler */
	req->owner = owner;
	req->on_event = gs_on_event;
	req->unsent_tokens = gs_unsent_tokens;
	req->on_start = gs_on_start;
	req->user = gs;
	gs->t_submit = server_now();
	gs->last_write = gs->t_submit;
	gs_link(s, gs);
	int rc = scheduler_submit(s->sched, req, &gs->handle, f->msg, sizeof(f->msg));
	if (rc) {
		gs_unlink(s, gs);
		gs->refs = 1;
		gs_unref(gs);
		f->rc = rc;
		f->param = request_field_name(&shape->names, req->err_field);
		if (respond_kind_of(rc)->retry)
			f->retry_after_s = scheduler_retry_after_s(s->sched);
		return rc;
	}
	pthread_mutex_lock(&gs->mu);
	gs->submitted = true;
	pthread_mutex_unlock(&gs->mu);
	r->gs = gs;
	if (gs->stream)
		metrics_streams_add(s->metrics, 1);
	return 0;
}

/* 429 (per key) or 503 (every client busy) from the per-key limits. */
static enum MHD_Result gs_respond_quota(struct request *r, const struct quota_verdict *v)
{
	return respond_error(r, v->status, NULL, quota_limit_code(v->limit), v->retry_after_s, "%s",
	                     v->message);
}

/* response_id: the Responses API's answer is that response; NULL: a
 * completion or chat completion named after the request. */
static enum MHD_Result gs_submit(struct request *r, struct gen_args *a, struct gen_request *req,
                                 bool append_only, const char *response_id)
{
	struct server *s = r->srv;
	struct quota_verdict verdict;
	if (!quota_begin(s->quota, &r->client, req->n_prompt, &verdict)) {
		gen_prepare_drop(req);
		return gs_respond_quota(r, &verdict);
	}
	char id[REQUEST_ID_LEN + 16];
	if (response_id)
		snprintf(id, sizeof(id), "%s", response_id);
	else
		snprintf(id, sizeof(id), "%s-%s", a->chat ? "chatcmpl" : "cmpl", r->id);
	bool responses = a->api == GEN_API_RESPONSES && response_id;
	struct gen_shape shape = {
	    .api = responses ? GEN_API_RESPONSES
	           : a->chat ? GEN_API_CHAT
	                     : GEN_API_COMPLETIONS,
	    .chat = a->chat,
	    .stream = a->stream && !append_only,
	    .include_usage = a->include_usage,
	    .logprobs = a->logprobs,
	    .append_only = append_only,
	    .session_id = req->session_id,
	    .id = id,
	    .model = s->model_name,
	    .names = gen_prepare_names(a, r->ep == EP_SESSION_APPEND),
	    .timing =
	        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Sinkd-Timing") != NULL,
	    .tools = a->tools,
	    .chat_marks = a->chat_marks,
	    .n_chat_marks = a->n_chat_marks,
	    .chat_group_pos = a->chat_group_pos,
	    .chat_group = a->chat_group,
	    .response =
	        responses ? responses_object_new(a, id, s->model_name, (long)time(NULL)) : NULL,
	    .reasoning_start = a->reasoning_start,
	    .reasoning_in_content = a->reasoning_in_content};
	a->tools = NULL; /* the generation's from here (its parser reads them) */
	a->chat_marks = NULL;
	a->n_chat_marks = 0;
	struct respond_fault f = {0};
	if (!gs_start(r, &shape, req, &f))
		return genstream_respond(r);
	quota_end(s->quota, &r->client, false);
	gen_prepare_drop(req);
	if (req->err_field == SCHED_FIELD_PIN_PREFIX_TOKENS && a->chat) {
		char why[sizeof(f.msg)];
		snprintf(why, sizeof(why), "%s", f.msg);
		snprintf(f.msg, sizeof(f.msg),
		         "the system prompt (with the chat template's header) cannot be pinned "
		         "(inference.cache.pin_system_prompt): %.300s",
		         why);
	}
	return respond_fault(r, &f);
}

enum MHD_Result genstream_submit(struct request *r, struct gen_args *a, struct gen_request *req,
                                 bool append_only)
{
	return gs_submit(r, a, req, append_only, NULL);
}

enum MHD_Result genstream_submit_response(struct request *r, struct gen_args *a,
                                          struct gen_request *req, const char *response_id)
{
	return gs_submit(r, a, req, false, response_id);
}

/* Takes the queued events out from under the lock. */
static struct gs_event *gs_take(struct genstream *gs, size_t *n, bool *done, bool *ka)
{
	struct gs_event *ev = gs->ev;
	*n = gs->n_ev;
	*done = gs->done;
	*ka = gs->keepalive_due;
	gs->keepalive_due = false;
	gs->ev = NULL;
	gs->n_ev = gs->cap_ev = 0;
	return ev;
}

static void gs_free_events(struct gs_event *ev, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(ev[i].text);
	free(ev);
}

static const struct tokenizer *gs_tok(struct genstream *gs)
{
	return gs->srv->tok;
}

/* Formats events as stream events into gs->out. */
static void gs_format_events(struct genstream *gs, struct gs_event *ev, size_t n)
{
	double now = server_now();
	for (size_t i = 0; i < n; i++) {
		cJSON *lp = NULL;
		if (ev[i].has_lp) {
			lp = oa_logprobs_new(gs->oa.chat);
			oa_logprobs_add(lp, gs->oa.chat, gs_tok(gs), &ev[i].lp, gs->text_offset);
		}
		if (!ev[i].len && !lp)
			continue; /* held back (stop-string prefix, partial UTF-8) */
		gs->t_emit = ev[i].t_emit;
		gs_feed(gs, ev[i].text, ev[i].len, lp);
		gs->text_offset += ev[i].len;
		metrics_sse_write_delay(gs->srv->metrics, now - ev[i].t_emit);
	}
}

/* A generation that failed on the server's side says so; one that failed
 * on the request's (or the server's load) says what a submit would have. */
static const char *gs_error_code(const struct respond_kind *k)
{
	return k->status == 500 ? "generation_failed" : k->code;
}

/* A tracked chat's end: the session now holds the request's messages (when
 * its prompt went in) and, after a reply of plain text, that reply as the
 * assistant message a client will send back. */
static void gs_chat_marks_commit(struct genstream *gs, enum gen_finish fin, int np, int ng)
{
	if (!gs->chat_marks || np <= 0)
		return;
	size_t n = gs->n_chat_marks;
	struct sched_chat_mark *m = realloc(gs->chat_marks, (n + 1) * sizeof(*m));
	if (!m)
		return;
	gs->chat_marks = m;
	bool ok = fin == GEN_FINISH_STOP || fin == GEN_FINISH_LENGTH;
	if (ok && ng > 0 && gs->n_calls == 0) {
		struct api_message reply = {.role = "assistant",
		                            .content = gs->text ? gs->text : "",
		                            .content_len = gs->text_len};
		api_message_digest(&reply, m[n].digest);
		m[n].pos = gs->chat_group_pos;
		m[n].group = gs->chat_group;
		n++;
	}
	scheduler_chat_marks_set(gs->srv->sched, gs->session_id, m, n);
}

static void gs_format_end(struct genstream *gs)
{
	pthread_mutex_lock(&gs->mu);
	enum gen_finish fin = gs->finish;
	int rc = gs->err_rc, np = gs->n_prompt, nc = gs->n_cached, ng = gs->n_gen;
	const char *param = gs->err_param;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", gs->err_msg[0] ? gs->err_msg : "generation cancelled");
	pthread_mutex_unlock(&gs->mu);
	if (fin == GEN_FINISH_STOP || fin == GEN_FINISH_LENGTH || fin == GEN_FINISH_NONE)
		gs_feed_end(gs); /* the whole reply, for its mark */
	gs_chat_marks_commit(gs, fin, np, ng);
	if (fin == GEN_FINISH_STOP || fin == GEN_FINISH_LENGTH || fin == GEN_FINISH_NONE) {
		gs->fmt->close(gs, fin, np, nc, ng);
	} else if (fin == GEN_FINISH_CANCELLED && atomic_load(&gs->srv->shutting_down)) {
		gs->fmt->fail(
		    gs,
		    "the server is shutting down; send the rest of this request to another "
		    "instance",
		    "server_shutdown", NULL, "server_shutdown");
	} else if (fin == GEN_FINISH_CANCELLED) {
		gs->fmt->fail(gs, msg, respond_type_of(500), NULL, "cancelled");
	} else {
		const struct respond_kind *k = respond_kind_of(rc);
		gs->fmt->fail(gs, msg, k->type, param, gs_error_code(k));
	}
	gs->ended = true;
}

/* Produces more SSE bytes into gs->out; suspends the connection when there
 * is nothing to send.  Returns false when it suspended. */
static bool gs_fill(struct genstream *gs)
{
	if (!gs->opened) { /* the format's first events go out before any token */
		gs->opened = true;
		if (gs->fmt->open)
			gs->fmt->open(gs);
		if (gs->out_len > gs->out_pos)
			return true;
	}
	for (;;) {
		size_t n;
		bool done, ka;
		pthread_mutex_lock(&gs->mu);
		struct gs_event *ev = gs_take(gs, &n, &done, &ka);
		bool stopping = atomic_load(&gs->srv->stopping);
		/* A lost token ends the stream after the tokens queued before it,
		 * even when the generation ended meanwhile: never a short reply. */
		if (gs->lost) {
			gs->finish = GEN_FINISH_ERROR;
			gs->err_rc = -ENOMEM;
			gs->err_param = NULL;
			snprintf(
			    gs->err_msg, sizeof(gs->err_msg),
			    "out of memory queuing a token for the client; generation stopped");
			done = true;
		} else if (gs->overflow && !done) {
			gs->finish = GEN_FINISH_ERROR;
			gs->err_rc = -ENOBUFS;
			gs->err_param = NULL;
			snprintf(gs->err_msg, sizeof(gs->err_msg),
			         "the client read too slowly; generation stopped");
			done = true;
			gs_free_events(ev, n);
			ev = NULL;
			n = 0;
		}
		if (!n && !done && !ka && !stopping) {
			gs->suspended = true;
			MHD_suspend_connection(gs->conn);
			pthread_mutex_unlock(&gs->mu);
			return false;
		}
		gs->last_write = server_now();
		pthread_mutex_unlock(&gs->mu);
		if (n)
			scheduler_kick(gs->srv->sched);
		gs_format_events(gs, ev, n);
		gs_free_events(ev, n);
		if (done || stopping) {
			if (!done) {
				pthread_mutex_lock(&gs->mu);
				gs->finish = GEN_FINISH_CANCELLED;
				snprintf(gs->err_msg, sizeof(gs->err_msg), "server shutting down");
				pthread_mutex_unlock(&gs->mu);
			}
			gs_format_end(gs);
		} else if (ka && gs->out_len == gs->out_pos) {
			sse_append_raw(&gs->out, &gs->out_len, &gs->out_cap, ": keep-alive\n\n",
			               14);
		}
		if (gs->out_len > gs->out_pos)
			return true;
	}
}

static ssize_t gs_sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct genstream *gs = cls;
	if (gs->out_pos == gs->out_len) {
		gs->out_pos = gs->out_len = 0;
		if (gs->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (!gs_fill(gs))
			return 0; /* suspended; the engine or the timer resumes us */
	}
	size_t n = gs->out_len - gs->out_pos;
	if (n > max)
		n = max;
	memcpy(buf, gs->out + gs->out_pos, n);
	gs->out_pos += n;
	return (ssize_t)n;
}

static void gs_sse_free(void *cls)
{
	/* The connection's reference is dropped by genstream_detach. */
}

static enum MHD_Result gs_respond_stream(struct request *r)
{
	struct genstream *gs = r->gs;
	struct MHD_Response *resp = MHD_create_response_from_callback(
	    MHD_SIZE_UNKNOWN, 16 * 1024, gs_sse_reader, gs, gs_sse_free);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	return respond_queue(r, 200, resp);
}

static void gs_accumulate(struct genstream *gs, struct gs_event *ev, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (ev[i].has_lp && gs->lp_acc)
			oa_logprobs_add(gs->lp_acc, gs->oa.chat, gs_tok(gs), &ev[i].lp,
			                gs->text_len);
		if (ev[i].len)
			gs_feed(gs, ev[i].text, ev[i].len, NULL);
	}
}

static enum MHD_Result gs_respond_whole(struct request *r)
{
	struct genstream *gs = r->gs;
	size_t n;
	bool done, ka;
	pthread_mutex_lock(&gs->mu);
	struct gs_event *ev = gs_take(gs, &n, &done, &ka);
	bool stopping = atomic_load(&gs->srv->stopping);
	bool lost = gs->lost || gs->overflow;
	if (!done && !stopping && !lost) {
		gs->suspended = true;
		MHD_suspend_connection(gs->conn);
	}
	enum gen_finish fin = gs->finish;
	int rc = gs->err_rc, retry = gs->retry_after_s, np = gs->n_prompt, ng = gs->n_gen;
	int nc = gs->n_cached;
	const char *param = gs->err_param;
	bool peer_gone = gs->cancel_sent;
	pthread_mutex_unlock(&gs->mu);
	gs_accumulate(gs, ev, n);
	gs_free_events(ev, n);
	if (lost)
		return respond_error(r, 500, NULL, "generation_failed", 0, "%s",
		                     gs->overflow ? "the reply outgrew its queue; generation "
		                                    "stopped"
		                                  : "out of memory queuing a token; generation "
		                                    "stopped");
	if (!done && !stopping)
		return MHD_YES;
	if (done && fin != GEN_FINISH_ERROR && fin != GEN_FINISH_CANCELLED && !gs->append_only)
		gs_feed_end(gs); /* the whole reply (and so its mark) */
	gs_chat_marks_commit(gs, done ? fin : GEN_FINISH_CANCELLED, np, ng);
	/* Cancelled because the client hung up: no answer (a 503 written into
	 * its half-closed socket would count as a server error); closing the
	 * connection makes it a 499. */
	if (fin == GEN_FINISH_CANCELLED && peer_gone && !atomic_load(&gs->srv->shutting_down))
		return MHD_NO;
	if (!done || fin == GEN_FINISH_CANCELLED)
		return respond_error(r, 503, NULL, "cancelled", 1, "server shutting down");
	if (fin == GEN_FINISH_ERROR) {
		const struct respond_kind *k = respond_kind_of(rc);
		return respond_error(r, k->status, param, gs_error_code(k), k->retry ? retry : 0,
		                     "%s", gs->err_msg[0] ? gs->err_msg : "generation failed");
	}
	if (gs->append_only) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", session_key_id(gs->session_id));
		cJSON_AddStringToObject(o, "object", "session.append");
		cJSON_AddNumberToObject(o, "tokens_appended", np);
		return respond_json(r, 200, o);
	}
	cJSON *o = gs->fmt->close(gs, fin, np, nc, ng);
	if (!o)
		return respond_error(r, 500, NULL, "out_of_memory", 0,
		                     "out of memory building the reply");
	return respond_json(r, 200, o);
}

enum MHD_Result genstream_respond(struct request *r)
{
	return r->gs->stream ? gs_respond_stream(r) : gs_respond_whole(r);
}

void genstream_detach(struct genstream *gs, int *tokens_in, int *tokens_out, double *ttft_s)
{
	struct server *s = gs->srv;
	gs_unlink(s, gs);
	pthread_mutex_lock(&gs->mu);
	gs->conn = NULL;
	gs->suspended = false;
	bool cancel = gs->submitted && !gs->done;
	*tokens_in = gs->n_prompt;
	*tokens_out = gs->n_gen;
	*ttft_s = gs->t_first > 0 ? gs->t_first - gs->t_submit : -1;
	pthread_mutex_unlock(&gs->mu);
	if (cancel)
		scheduler_cancel(s->sched, gs->handle);
	if (gs->stream)
		metrics_streams_add(s->metrics, -1);
	gs_unref(gs);
}

/* libmicrohttpd does not watch a suspended connection's socket: a client
 * that hangs up while its request waits in the queue (or runs without
 * output) is noticed here.  Must hold gs->mu. */
static bool gs_peer_gone(struct genstream *gs)
{
	if (gs->fd < 0 || gs->cancel_sent || gs->done || !gs->suspended)
		return false;
	struct pollfd p = {.fd = gs->fd, .events = POLLRDHUP};
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

void genstream_wake_all(struct server *s, bool keepalive_only)
{
	int64_t ka_s = 0;
	server_settings_get(s, NULL, &ka_s);
	double now = server_now();
	pthread_mutex_lock(&s->gen_mu);
	for (struct genstream *gs = s->gens; gs; gs = gs->next) {
		pthread_mutex_lock(&gs->mu);
		bool cancel = false;
		if (!keepalive_only) {
			gs_wake(gs);
		} else if (gs->submitted && gs_peer_gone(gs)) {
			cancel = true;
			gs->cancel_sent = true;
		} else if (gs->stream && gs->suspended && ka_s > 0 &&
		           now - gs->last_write >= (double)ka_s) {
			gs->keepalive_due = true;
			gs_wake(gs);
		}
		pthread_mutex_unlock(&gs->mu);
		/* Outside gs->mu: the engine may hold its lock while it calls us. */
		if (cancel)
			scheduler_cancel(s->sched, gs->handle);
	}
	pthread_mutex_unlock(&s->gen_mu);
}

void genstream_cancel_all(struct server *s)
{
	pthread_mutex_lock(&s->gen_mu);
	for (struct genstream *gs = s->gens; gs; gs = gs->next) {
		pthread_mutex_lock(&gs->mu);
		bool cancel = gs->submitted && !gs->done;
		pthread_mutex_unlock(&gs->mu);
		if (cancel)
			scheduler_cancel(s->sched, gs->handle);
	}
	pthread_mutex_unlock(&s->gen_mu);
}

static void *keepalive_main(void *arg)
{
	struct server *s = arg;
	pthread_mutex_lock(&s->gen_mu);
	while (!s->ka_quit) {
		server_cond_wait_ms(&s->gen_cond, &s->gen_mu, 250);
		if (s->ka_quit)
			break;
		pthread_mutex_unlock(&s->gen_mu);
		genstream_wake_all(s, true);
		pthread_mutex_lock(&s->gen_mu);
	}
	pthread_mutex_unlock(&s->gen_mu);
	return NULL;
}

int genstream_keepalive_start(struct server *s, char *err, size_t err_len)
{
	s->ka_quit = false;
	int rc = pthread_create(&s->ka_thread, NULL, keepalive_main, s);
	if (rc)
		return err_set(err, err_len, -rc, "keep-alive timer: %s", strerror(rc));
	s->ka_started = true;
	return 0;
}

void genstream_keepalive_stop(struct server *s)
{
	if (!s->ka_started)
		return;
	pthread_mutex_lock(&s->gen_mu);
	s->ka_quit = true;
	pthread_cond_broadcast(&s->gen_cond);
	pthread_mutex_unlock(&s->gen_mu);
	pthread_join(s->ka_thread, NULL);
	s->ka_started = false;
}
