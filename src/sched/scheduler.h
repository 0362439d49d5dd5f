/* The scheduler: one engine thread per device owns every running session.
 * HTTP threads only submit requests and receive events through a callback;
 * each tick the engine thread admits waiting requests under the global KV
 * budget, builds one batch (one decode token per running session plus
 * prefill chunks up to max_batch_tokens), runs one forward pass, samples,
 * and emits events.  It never blocks on a client. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "engine/backend.h"
#include "engine/sampler.h"
#include "sched/sched_types.h"
#include "tokenizer/tokenizer.h"

struct grammar;

enum gen_finish {
	GEN_FINISH_NONE = 0,
	GEN_FINISH_STOP,
	GEN_FINISH_LENGTH,
	GEN_FINISH_CANCELLED,
	GEN_FINISH_ERROR
};

enum gen_event_kind {
	GEN_EVENT_PROMPT_DONE = 0, /* prompt fully in the cache */
	GEN_EVENT_TOKEN,           /* one sampled token; text may be empty (held back) */
	GEN_EVENT_DONE,            /* last event of a request */
};

struct gen_event {
	enum gen_event_kind kind;
	int32_t token;
	const char *text; /* UTF-8, complete characters, stop strings removed */
	size_t text_len;
	const struct sampler_result *logprobs; /* when the request asked for them */
	enum gen_finish finish;
	int n_prompt_tokens;
	int n_generated_tokens;
	/* Of n_prompt_tokens, those the prefix cache supplied (shared or
	 * copied, not computed): OpenAI's usage.prompt_tokens_details.
	 * cached_tokens.  Set on PROMPT_DONE and every later event. */
	int n_cached_tokens;
	/* DONE with GEN_FINISH_ERROR: why, in the codes of scheduler_submit()
	 * (-EIO: the engine failed), the request field at fault (or
	 * SCHED_FIELD_NONE) and a message. */
	int error_rc;
	enum sched_field error_field;
	const char *error;
	int retry_after_s; /* DONE with -EAGAIN: the Retry-After hint (seconds) */
};

/* Called on the engine thread: must not block (copy, wake the connection, return). */
typedef void (*gen_event_cb)(void *user, const struct gen_event *ev);

struct gen_request {
	int32_t *prompt_ids; /* malloc'ed; ownership passes to the scheduler on submit */
	size_t n_prompt;
	struct sampler_params sampling;
	int max_tokens; /* 0: prefill only (session append without generate) */
	char **stops;   /* owned copies, passed to the scheduler on submit */
	size_t n_stops;
	bool want_logprobs;
	bool ignore_eos;
	/* logit_bias (owned copy; passed to the scheduler on submit like stops):
	 * added to the logits before penalties and the grammar mask. */
	struct sampler_bias *logit_bias;
	size_t n_logit_bias;
	/* Constrained decoding, or NULL: every sampled token keeps the generated
	 * text a prefix of the grammar, end-of-generation is allowed only where
	 * it is complete, and the request ends (GEN_FINISH_STOP) when nothing
	 * may follow.  A reference passes to the scheduler on submit. */
	struct grammar *grammar;
	/* Persistent session to continue, or NULL (a one-shot session).  With a
	 * session: its last revise_last_tokens tokens are dropped first (exact;
	 * SDERR_CONFLICT / 409 when they are no longer all in the window), then
	 * prompt_ids are appended (may be empty if the session has tokens),
	 * then max_tokens are generated (0: append only; DONE has
	 * GEN_FINISH_NONE).  Generated tokens stay in the session's stream. */
	const char *session_id;
	size_t revise_last_tokens;
	/* The first pin_prefix_tokens tokens of the stream stay in the sink tier
	 * (full precision, never evicted), up to inference.cache.max_pinned_tokens;
	 * only on a stream's first request, and at most its prompt.  0: none.
	 * Out of range: SDERR_OUT_OF_RANGE (400) with a message. */
	int pin_prefix_tokens;
	gen_event_cb on_event;
	void *user;
	/* Optional: how many tokens emitted to `user` its client has not taken
	 * yet.  A request at scheduler.max_unsent_tokens or more sits out decode
	 * steps (flow control) until the consumer takes them and calls
	 * scheduler_kick().  Called on the engine thread; must not block. */
	size_t (*unsent_tokens)(void *user);
	/* Optional: the request left the queue and the engine starts it (not
	 * called for one that leaves it by timeout or cancel).  Engine thread;
	 * must not block. */
	void (*on_start)(void *user);
	/* Optional, copied at submit: the API's request id (X-Request-Id), by
	 * which scheduler_list_streams() and scheduler_cache_trace() name a
	 * running stream, and who submitted it (as a session owner). */
	const char *request_id;
	const char *owner;
	/* Out: after an error of scheduler_submit, the field at fault or
	 * SCHED_FIELD_NONE. */
	enum sched_field err_field;
};

struct scheduler;

int scheduler_new(const struct sinkd_config *cfg, struct backend *be, const struct tokenizer *tok,
                  struct sinkd_log *log, struct scheduler **out, char *err, size_t err_len);
/* Stops the engine thread; pending requests get DONE with GEN_FINISH_CANCELLED. */
void scheduler_free(struct scheduler *s);

/* Queues a request.  Returns 0 and a handle, or: -EAGAIN queue full
 * (Retry-After: scheduler_retry_after_s()), -ENOENT unknown session,
 * -EBUSY session in use, SDERR_CONFLICT revise_last_tokens reaches past
 * what the session can still roll back, -E2BIG prompt too long for the strategy,
 * -EINVAL bad sampling values, SDERR_OUT_OF_RANGE a pin out of range,
 * -ENOSPC one session's cache bound exceeds the whole KV budget, -ENOMEM,
 * each with a message and, where one field is at fault, req->err_field
 * (the server's respond.h says what each means to a client).  What the
 * server checks before it submits (server/gen_prepare.h: max_tokens >= 0
 * and within limits.max_tokens, a prompt unless on a session, token ids in
 * the vocabulary) is not checked again: a request that breaks it is its
 * caller's bug, SDERR_UNCHECKED.  On success req->prompt_ids and req->stops are set to NULL (the
 * scheduler owns them); on error the caller keeps ownership.  *handle is
 * set before any event can be delivered; events may arrive on the engine
 * thread before scheduler_submit returns. */
int scheduler_submit(struct scheduler *s, struct gen_request *req, uint64_t *handle, char *err,
                     size_t err_len);
/* A consumer took tokens: a request held by flow control may go on.  Cheap
 * (an atomic add) unless the engine thread waits for it. */
void scheduler_kick(struct scheduler *s);

/* Cancels a request (client gone): it leaves the batch at the next tick and
 * frees its cache; a DONE event with GEN_FINISH_CANCELLED follows. */
void scheduler_cancel(struct scheduler *s, uint64_t handle);

/* A reload in two steps.  prepare computes and checks the limits of a new
 * config (geometry of new sessions against the model and backend, the KV
 * budget, queue sizes) and may fail with a message, changing nothing; commit
 * installs them and cannot fail.  Running sessions keep their geometry; a
 * smaller budget admits nothing new until use falls under it. */
struct sched_prepared;
int scheduler_prepare(struct scheduler *s, const struct sinkd_config *cfg,
                      struct sched_prepared **out, char *err, size_t err_len);
void scheduler_commit(struct scheduler *s, struct sched_prepared *p); /* frees p */
void scheduler_prepared_free(struct sched_prepared *p);

/* Turns of the engine loop: it advances at least once a second while the
 * engine thread is healthy (idle or working), so a caller can tell a stuck
 * engine (the systemd watchdog). */
uint64_t scheduler_heartbeat(struct scheduler *s);
/* Test hook: while a file exists at `path`, the engine thread makes no
 * progress (heartbeat stops); NULL or "" turns it off. */
void scheduler_set_stall_file(struct scheduler *s, const char *path);

struct scheduler_stats {
	size_t queue_depth;
	size_t running;
	size_t kv_bytes_reserved;
	size_t kv_bytes_resident;
	size_t kv_bytes_budget;
	uint64_t admitted;
	uint64_t rejected_queue_full;
	uint64_t rejected_timeout;
	uint64_t ticks;
	uint64_t tokens_in;
	uint64_t tokens_out;
	/* added after the first version */
	uint64_t rejected_budget; /* -ENOSPC at submit */
	uint64_t rejected_busy;   /* -EBUSY at submit */
	uint64_t completed;       /* DONE with STOP, LENGTH or NONE */
	uint64_t cancelled;
	uint64_t errors;
	size_t sessions; /* persistent sessions alive */
	uint64_t sessions_created;
	uint64_t sessions_expired;
	uint64_t evicted_window;      /* tokens dropped from sliding windows (all sessions) */
	uint64_t moved_to_compressed; /* tokens quantized out of hot tiers */
	uint64_t flow_held; /* decode steps a stream sat out: its client had not taken its tokens */
	uint64_t rejected_sessions;       /* SDERR_MAX_SESSIONS: limits.max_sessions reached */
	uint64_t rejected_owner_sessions; /* SDERR_OWNER_SESSIONS: the owner's limit reached */
	uint64_t sessions_expired_empty;  /* of sessions_expired: never used */
	/* snapshots and the session store */
	uint64_t snapshots;         /* GET .../snapshot answered */
	uint64_t restores_api;      /* POST /v1/sessions/restore */
	uint64_t restores_store;    /* sessions brought back from the store */
	uint64_t offloads;          /* sessions written to the store and freed here */
	uint64_t offload_failures;  /* writes that failed (the session stayed resident) */
	uint64_t snapshot_bytes;    /* bytes of every snapshot made (API and store) */
	size_t sessions_offloading; /* being written now */
	uint64_t perplexity_alerts; /* sessions whose running perplexity rose past the alert ratio */
	/* the prefix cache (inference.prefix_cache) */
	uint64_t prefix_hits;          /* new streams that took a prefix from it (shared or copied) */
	uint64_t prefix_misses;        /* new streams that could have and found none */
	uint64_t prefix_tokens_reused; /* prompt tokens those hits did not compute */
	size_t prefix_bytes;           /* bytes its entries hold now */
	size_t prefix_shared_sessions; /* sessions whose sink tier is an entry's rows now */
	size_t prefix_entries;
};
void scheduler_get_stats(struct scheduler *s, struct scheduler_stats *out);

/* Retry-After hint (seconds) for a 503 from -EAGAIN / -ENOSPC. */
int scheduler_retry_after_s(struct scheduler *s);

/* Most prompt tokens one request may send (limits.max_prompt_tokens, 0 in
 * the config resolved to inference.max_context_length); a longer prompt gets
 * -E2BIG from scheduler_submit under every cache strategy. */
int64_t scheduler_max_prompt_tokens(struct scheduler *s);

/* Histograms kept by the engine thread.  count[i] is the number of
 * observations <= upper[i] (cumulative, Prometheus style); the last bucket is
 * +Inf and equals `total`. */
#define SCHED_HIST_BUCKETS 14
enum sched_hist_id {
	SCHED_HIST_BATCH_SEQUENCES = 0, /* sessions in one forward pass */
	SCHED_HIST_BATCH_TOKENS,        /* tokens in one forward pass */
	SCHED_HIST_TICK_SECONDS,        /* wall time of one batch build + forward pass */
	SCHED_HIST_QUEUE_WAIT_SECONDS,  /* submit to admission */
	SCHED_HIST_OFFLOAD_SECONDS,     /* an idle session's export and write to the store */
	SCHED_HIST_RESTORE_SECONDS,     /* a snapshot's read, checks and import */
	SCHED_HIST_INPUT_NLL,           /* NLL of a scored input token (monitoring.input_perplexity) */
	SCHED_HIST_GENERATED_NLL,       /* NLL of a generated token under the model's distribution */
	SCHED_HIST_COUNT
};
struct sched_histogram {
	const char *name; /* e.g. "sinkd_scheduler_batch_tokens" */
	const char *help;
	int n_buckets;
	double upper[SCHED_HIST_BUCKETS];
	uint64_t count[SCHED_HIST_BUCKETS];
	uint64_t total;
	double sum;
};
void scheduler_get_histogram(struct scheduler *s, enum sched_hist_id id,
                             struct sched_histogram *out);
/* Writes every scheduler metric (gauges, counters, histograms) in the
 * Prometheus text format, HELP and TYPE lines included. */
void scheduler_write_metrics(struct scheduler *s, FILE *out);
/* Its lines of the prefix cache (sinkd_prefix_cache_*), from st. */
void scheduler_write_prefix_metrics(const struct scheduler_stats *st, FILE *out);

/* ---- Persistent sessions ----------------------------------------------- */

/* Sessions are named by their keys here (session/session_key.h: the
 * owner's tag and the client's id), never by the client's id alone: the
 * same id under two API keys is two sessions (SCHED_SESSION_ID_LEN:
 * sched_types.h). */
#define SCHED_OWNER_LEN 64 /* a session owner's name, NUL included */

/* Cache settings a client may choose at creation, within the configured
 * limits (each at most the configured value, so the bound never grows). */
struct session_settings {
	int window_size;     /* 0: configured; else 1..inference.cache.window_size */
	int sink_keep_count; /* -1: configured; else 0..inference.cache.sink_keep_count */
	/* NULL or "": a random id in owner's namespace; else the session's key
	 * (session_key_make of the owner and the client's id, so a balancer
	 * can route by the id), -EEXIST (409) when it is taken. */
	const char *id;
	/* Who creates it (an API key or client address, by name; NULL or "":
	 * nobody named) and how many live sessions that owner may hold
	 * (limits.per_key.max_sessions; 0 = any number). */
	const char *owner;
	int64_t owner_max;
	/* A stored response's session: once a request on it ends it leaves
	 * (holding no KV reservation) for the session store, or without one for
	 * the in-memory park (responses.store_ttl_s, responses.store_max_bytes),
	 * and is brought back by its next request. */
	bool park_when_idle;
};

/* Creates a session and reserves its cache bound at once (it stays reserved
 * while the session exists).  -EINVAL settings out of range, -EEXIST the id
 * is taken, -EAGAIN the budget has no room now, -ENOSPC the bound exceeds
 * the budget, SDERR_MAX_SESSIONS limits.max_sessions sessions exist,
 * SDERR_OWNER_SESSIONS the owner holds owner_max sessions, each with a
 * message; *err_field (err_field may be NULL) the setting at fault
 * (SCHED_FIELD_WINDOW_SIZE, _SINK_KEEP_COUNT, _SESSION_ID) or
 * SCHED_FIELD_NONE.
 *
 * Idle reservations are reclaimed by expiry: a session expires
 * scheduler.session_ttl_s after its last request ended, and one that no
 * request was ever submitted on expires scheduler.session_empty_ttl_s after
 * its creation (the smaller of the two), so that empty creates cannot hold
 * the KV budget for long. */
int scheduler_session_create(struct scheduler *s, const struct session_settings *opt,
                             char id_out[SCHED_SESSION_ID_LEN], enum sched_field *err_field,
                             char *err, size_t err_len);
/* Retry-After hint (seconds, 1..3600) for SDERR_MAX_SESSIONS /
 * SDERR_OWNER_SESSIONS: when the first idle session (of `owner`, or of
 * anyone when owner is NULL) expires. */
int scheduler_session_retry_after_s(struct scheduler *s, const char *owner);

struct sched_session_info {
	uint64_t n_seen; /* tokens of the stream so far (prompt + generated - revised) */
	int n_resident;  /* tokens in the cache */
	int n_sink;
	int n_compressed;
	int n_hot;
	size_t bytes_resident;
	size_t bytes_reserved; /* the bound held for this session */
	double age_s;
	double idle_s; /* 0 while a request runs */
	bool busy;
	bool restored;  /* came from a snapshot and is not yet imported (no request since) */
	char owner[SCHED_OWNER_LEN];
	int window_size;
	int sink_keep_count; /* the sink tier's size (pinned tokens included) */
	int pinned_tokens;   /* of them, the pinned prefix */
	int shared_prefix_tokens; /* of the sink tier, tokens read from a shared prefix (0: none) */
	/* The model's sliding-window layers (0 when none): how many, their
	 * window and the tokens each holds; the figures above are the global
	 * layers' (bytes: every layer's). */
	int sliding_layers, sliding_window, sliding_resident;
	struct sched_perplexity perplexity;
};
/* -ENOENT when unknown (or expired/deleted). */
int scheduler_session_info(struct scheduler *s, const char *id, struct sched_session_info *out);
/* A session that left this instance for the store (or the park of stored
 * responses), as it was when it left (struct sched_left_info:
 * sched_types.h).  -ENOENT when it did not leave from here or is no longer
 * stored. */
int scheduler_session_left_info(struct scheduler *s, const char *id, struct sched_left_info *out);
/* A chat message a session holds (chat completions with session_id): its
 * digest (api_message_digest), the stream position where the request that
 * sent it began, and that request's first message (its group). */
struct sched_chat_mark {
	unsigned char digest[32];
	uint64_t pos;
	uint32_t group;
};
/* A copy of the session's chat marks (*out malloc'd, NULL when none), its
 * stream position (tokens seen, the pending one included) and how many of
 * its last tokens can still be revised.  -ENOENT unknown. */
int scheduler_chat_marks(struct scheduler *s, const char *id, struct sched_chat_mark **out,
                         size_t *n, uint64_t *n_seen, size_t *revisable);
/* Replaces the session's chat marks (copied).  -ENOENT unknown, -ENOMEM. */
int scheduler_chat_marks_set(struct scheduler *s, const char *id, const struct sched_chat_mark *m,
                             size_t n);
/* Makes a session a stored response's (session_settings.park_when_idle):
 * one brought back from the store by previous_response_id leaves again
 * once its request ends.  held: not before the caller's next request on it
 * has run (it is about to submit one; without the hold the idle session
 * could leave between the bringing back and the submit); a caller that
 * then does not submit calls again with held false.  Unknown ids are
 * ignored. */
void scheduler_session_park_when_idle(struct scheduler *s, const char *id, bool held);
/* Deletes a session: a request running on it is cancelled (DONE with
 * GEN_FINISH_CANCELLED), its reservation is released when the engine has
 * freed the cache (next tick).  -ENOENT when unknown. */
int scheduler_session_delete(struct scheduler *s, const char *id);

/* ---- Views for the API and the console (sched_views.c) ------------------ */

#define SCHED_REQUEST_ID_LEN 80 /* the server's request ids, NUL included */

/* The persistent sessions here (ids and owners), for GET /v1/sessions: a
 * malloc'd array the caller frees.  -ENOMEM. */
struct sched_session_ref {
	char id[SCHED_SESSION_ID_LEN];
	char owner[SCHED_OWNER_LEN];
};
int scheduler_list_sessions(struct scheduler *s, struct sched_session_ref **out, size_t *n);

/* A stream (a request queued or running), for GET /v1/streams. */
struct sched_stream_info {
	char id[SCHED_REQUEST_ID_LEN];          /* "" when submitted without one */
	char session_id[SCHED_SESSION_ID_LEN]; /* "" for a one-shot request */
	char owner[SCHED_OWNER_LEN];
	const char *state; /* "queued", "prefill", "decode" */
	int prompt_tokens, generated_tokens;
	double age_s; /* since submit */
	struct sched_session_info cache; /* its session's cache (zeros while queued) */
};
/* Every stream with a request id, oldest first: a malloc'd array.  -ENOMEM. */
int scheduler_list_streams(struct scheduler *s, struct sched_stream_info **out, size_t *n);
/* One stream by its request id among owner's (request ids are scoped per
 * API key; NULL: anyone's): -ENOENT when none runs or waits. */
int scheduler_stream_info(struct scheduler *s, const char *owner, const char *request_id,
                          struct sched_stream_info *out);

/* The cache trace (cache/cachetrace.h) of a persistent session (session_id)
 * or of a running stream (request_id), taken by the engine between two
 * forward passes; the first one turns the collection of attention masses
 * on for that session (until it ends), so its masses come from the next
 * step on (trace->attention false until then).  *out is the caller's
 * (scheduler_cache_trace_free).  -ENOENT unknown (or a stream not started
 * yet), -ENOTSUP the backend gives no traces, -ENOMEM, with a message.  A
 * session that no request ran on yet has no slots. */
int scheduler_cache_trace(struct scheduler *s, const char *session_id, const char *owner,
                          const char *request_id, struct cache_trace_step **out, char *err,
                          size_t err_len);
void scheduler_cache_trace_free(struct cache_trace_step *t);

/* ---- Snapshots and the session store (sched_offload.c) ----------------- */

struct session_store;
/* Before any request: the model file a snapshot names (its SHA-256 is
 * computed on first use) and the store of sessions.store_dir (NULL: none;
 * the caller keeps it open until scheduler_free).  With a store, a session
 * idle for scheduler.session_offload_s is written there and freed here, a
 * deleted or expired one's file is removed, and sessions are leased. */
void scheduler_set_model_file(struct scheduler *s, const char *path);
void scheduler_set_store(struct scheduler *s, struct session_store *store);

/* The session's snapshot (session/snapshot.h) in a malloc'd buffer.
 * -ENOENT unknown, -EBUSY a request runs on it (409), -ENOTSUP the backend
 * cannot export, others with a message. */
int scheduler_session_snapshot(struct scheduler *s, const char *id, unsigned char **out,
                               size_t *len, char *err, size_t err_len);

struct session_restore_opts {
	const char *id; /* NULL or "": the snapshot's own id */
	const char *owner;
	int64_t owner_max; /* limits.per_key.max_sessions */
};
/* Creates a session from a snapshot, reserving its bound like a create:
 * -EINVAL/-EBADMSG a snapshot that is corrupt, truncated or hostile,
 * SDERR_MODEL_MISMATCH of another model (all 400), -EEXIST the id is taken
 * (409), -E2BIG its cache bound exceeds what this instance's configured
 * sessions may hold,
 * and the errors of scheduler_session_create(). */
int scheduler_session_restore(struct scheduler *s, const unsigned char *buf, size_t len,
                              const struct session_restore_opts *o,
                              char id_out[SCHED_SESSION_ID_LEN], char *err, size_t err_len);
/* The largest snapshot a restore may carry (its body limit). */
size_t scheduler_snapshot_max_bytes(struct scheduler *s);
/* A session this instance does not hold, from the store: 0 when it is here
 * now (restored, or it already was), -ENOENT not in the store either (or no
 * store), -EBUSY another instance holds its lease (409), -ESTALE its stored
 * snapshot is older than a state that was never written (409; never
 * resumed), others 500.  Brought back for use, its generation grows past
 * the record's (the lease says so before the session runs). */
int scheduler_session_fetch(struct scheduler *s, const char *id, char *err, size_t err_len);
/* Before a request changes a session whose record is in the store: its
 * lease says that a newer generation exists, so that if this instance
 * stops before writing it back, the older record is never resumed.  0, or
 * -EBUSY (another instance holds the lease) or the store's error. */
int scheduler_session_will_change(struct scheduler *s, const char *id, char *err,
                                  size_t err_len);
/* Whether the store holds a session of that id (and this instance does not). */
bool scheduler_session_stored(struct scheduler *s, const char *id);
/* Drain: writes every persistent session to the store and frees it, within
 * timeout_s; returns the number written, *failed those that could not be
 * (each logged as an error naming the session). */
size_t scheduler_offload_all(struct scheduler *s, double timeout_s, size_t *failed);
