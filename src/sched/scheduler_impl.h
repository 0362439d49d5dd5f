/* Internal state of the scheduler, shared by scheduler.c (API, queue,
 * admission, session table, engine loop), sched_tick.c (one batch: build,
 * forward, sample, emit) and sched_metrics.c (histograms, Prometheus text).
 * The parts with an owner of their own keep their state in their own
 * struct, embedded here, and say in their header what locks what:
 * sched_pace.h (prefill pacing), sched_monitor.h (the perplexity monitor),
 * and sched_store.h (the store's side of the hand-over to and from the
 * session store: leases, park, what left, identity, the writer queue);
 * none of them knows struct scheduler.  sched_offload.c (the scheduler's
 * sessions to and from the store) and sched_views.c (lists and cache
 * traces) are core files with no state of their own.
 *
 * Locking: `mu` guards the queue, the session table, the counters and every
 * field marked [mu].  Fields marked [engine] are touched only by the engine
 * thread (no lock).  Backend calls happen only on the engine thread, without
 * the lock held; event callbacks are called without the lock. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/sched_monitor.h"
#include "sched/sched_pace.h"
#include "sched/sched_store.h"
#include "sched/scheduler.h"
#include "session/snapshot.h"
#include "util/errbuf.h"

struct session_store;
struct sched_prefix;
struct sched_prefix_entry;

/* Settings copied from the config (reloadable). */
struct sched_limits {
	int64_t max_batch_tokens;
	int64_t max_queue;
	int64_t max_queue_wait_s;
	int64_t session_ttl_s;
	int64_t session_empty_ttl_s; /* sessions no request ever ran on */
	int64_t max_sessions;        /* limits.max_sessions */
	int64_t session_offload_s;   /* 0 = never */
	int64_t max_prompt_tokens; /* limits.max_prompt_tokens, 0 resolved to max_context_length */
	size_t max_unsent_tokens;  /* flow control; 0 = off */
	size_t budget_bytes;
	bool budget_auto;
	double auto_fraction;
	struct cache_geometry geom; /* for new sessions */
	int max_pinned_tokens;          /* inference.cache.max_pinned_tokens, < window_size */
	size_t prefix_max_bytes;        /* inference.prefix_cache.max_bytes (0: off) */
	int monitor_input;              /* enum monitor_input */
	int64_t monitor_every;
	double alert_ratio;
};

struct sched_session {
	char id[SCHED_SESSION_ID_LEN]; /* "" for a one-shot request's session */
	char owner[SCHED_OWNER_LEN];   /* who created it ("": nobody named) */
	bool persistent;
	bool used; /* [mu] a request was submitted on it (else the empty-session TTL) */
	bool deleted;         /* [mu] out of the table, engine frees it when idle */
	uint64_t busy_handle; /* [mu] request running on it, 0 when idle */
	struct cache_geometry geom;
	int pinned_tokens;            /* stream prefix held in the sink tier (in geom's sinks) */
	size_t bytes_reserved;        /* the bound, counted in s->reserved */
	struct backend_session *bs;   /* [engine] NULL until the first request */
	struct sinkcache_stats stats; /* [mu] copy refreshed after each tick */
	bool has_pending;             /* [mu] the stream's last token is not yet in the cache */
	int32_t *hist;                /* [engine] ring: the last hist_cap tokens of the stream */
	size_t hist_cap;
	size_t hist_n;             /* valid entries (<= hist_cap) */
	size_t hist_end;           /* index after the newest entry */
	double created, last_used; /* [mu] monotonic seconds */
	bool offload_tried;        /* [mu] since the last request */
	/* Snapshots and the session store (sched_offload.c). */
	int ctl_refs;               /* [mu] snapshot jobs pending: not freed while > 0 */
	unsigned char *restore_buf; /* [mu] restored snapshot, imported on first use */
	struct kv_image restore_kv; /* points into restore_buf */
	bool leased;                /* [mu] holds its lease in the store */
	uint64_t generation;        /* [mu] of its state: above its stored record's */
	bool has_record;            /* [mu] a record of it is in the store */
	bool parkable; /* a stored response's: leaves for the store or the park once idle */
	/* [mu] chat messages it holds, in order (chat with session_id): what
	 * a client re-sending the whole conversation already sent.  Kept in
	 * memory only: a session back from the store has none. */
	struct sched_chat_mark *chat_marks;
	size_t n_chat_marks;
	bool gen_marked;            /* [mu] its lease carries generation (it may diverge) */
	bool offloading;            /* [mu] its snapshot is being written to the store */
	bool offload_cancel;        /* [mu] a request came while it was */
	bool stored;                /* [mu] out of the table into the store: keep the file */
	bool trace_wanted; /* [engine] a cache trace was asked for: collect from its first request */
	struct sched_perplexity ppl;     /* [engine] the monitor (sched_monitor.c) */
	struct sched_perplexity ppl_pub; /* [mu] its copy as of the last tick */
	uint64_t ppl_inputs_seen;        /* [engine] input tokens offered (sample: every K-th) */
	/* [engine] the prefix cache entry its sink tier reads (sched_share.c),
	 * referenced until its backend session is freed */
	struct sched_prefix_entry *shared_entry;
	size_t shared_off; /* [mu] what sharing took off bytes_reserved */
	/* [mu] rule D: with no backend session, the stream's first tokens
	 * (before the pending one, all in hist) that wait for their cache */
	int n_deferred;
};

/* What a restored session starts from (a decoded snapshot). */
struct sched_restore {
	const struct cache_geometry *geom;
	const int32_t *hist; /* (n_hist) oldest first */
	uint32_t n_hist;
	bool has_pending;
	struct tier_counts kv_counts;
	struct tier_counts kv_counts_swa; /* the model sliding-window layers' (kv_image.n_swa) */
	unsigned char *kv_buf; /* the cache image; the session owns it on success */
	size_t kv_bytes;
	int pinned_tokens;
	bool leased; /* its lease in the store is taken */
	uint64_t generation;
};

/* A job for the engine thread: a snapshot's export, or a cache trace
 * (sched_views.c) of a session (ss) or of a running stream (request_id,
 * looked up when the job runs). */
enum sched_ctl_kind { SCHED_CTL_EXPORT = 0, SCHED_CTL_TRACE };
struct sched_ctl {
	enum sched_ctl_kind kind;
	struct sched_session *ss;
	const char *request_id;
	const char *owner;              /* TRACE of a stream: whose (NULL: anyone's) */
	struct cache_trace_step *trace; /* TRACE: the result */
	struct sched_export ex;
	int rc;
	char err[SINKD_ERR_LEN];
	bool done; /* [mu] */
};

/* An offloaded session on its way to the store (the store's writer
 * thread; sched_offload.c). */
struct sched_offload {
	struct sched_session *ss;
	struct sched_export ex;
	double t_start;
	char owner[SCHED_OWNER_LEN]; /* ss's, copied when the writer takes it ([mu]) */
	uint64_t generation;         /* likewise */
};

enum sched_req_state {
	REQ_QUEUED = 0, /* waiting for admission */
	REQ_STARTING,   /* admitted; engine has not set it up yet */
	REQ_PREFILL,    /* feeding prompt tokens */
	REQ_DECODE,     /* feeding one sampled token per tick */
	REQ_FINISHED,
};

struct sched_req {
	uint64_t handle;
	struct gen_request req; /* owns prompt_ids and stops; session_id points to sid */
	char sid[SCHED_SESSION_ID_LEN];
	char rid[SCHED_REQUEST_ID_LEN];  /* req.request_id points here ("": none) */
	char owner[SCHED_OWNER_LEN];     /* req.owner points here */
	enum sched_req_state state; /* [mu] for QUEUED, else [engine] */
	/* [mu] state and n_generated as of the last tick, for the views */
	enum sched_req_state pub_state;
	int pub_generated;
	bool cancelled;             /* [mu] */
	double enqueued_at;
	size_t need_bytes;              /* reservation to take at admission (0 on a session) */
	struct cache_geometry geom; /* one-shot: the geometry at submit */
	struct sched_session *sess;
	struct sampler *sampler;
	struct stop_matcher *stop;
	struct grammar_matcher *gm; /* req.grammar's parser state, NULL when unconstrained */
	struct detok_stream ds;
	char *text; /* (text_cap) event text buffer */
	size_t text_cap;
	int32_t *feed; /* (n_feed) tokens to put into the cache */
	size_t n_feed, n_fed;
	size_t n_feed_all;  /* n_feed plus the token kept pending (append only) */
	bool had_pending;   /* feed[0] is the session's pending token */
	bool logits_at_end; /* sample after the last fed token */
	int32_t next_token; /* DECODE: the sampled token to feed next */
	int n_generated;
	int n_prompt; /* prompt tokens reported in events */
	uint64_t feed_base; /* [engine] stream index of feed[0] */
	/* [engine] the prefix cache (sched_share.c) */
	int n_cached;                     /* feed tokens it supplied (not computed) */
	struct sched_prefix_entry *claim; /* pending entry this request computes */
	size_t cut;                       /* with claim: the feed index where the prefix ends */
	bool share_wait;                  /* sits out prefill: its prefix is being computed */
	bool defer_after;                 /* rule D: computes its prefix, then defers it */
	size_t n_hist_fed;                /* feed tokens of earlier requests (rule D) */
	struct sched_perplexity ppl_start; /* [engine] the session's monitor when it started */
	/* per tick [engine] */
	size_t n_in_batch;
	int logits_row;       /* -1: no logits this tick */
	uint64_t served_tick; /* the batch it last had a row in (0: none yet) */
	size_t rank;          /* its place in the order candidates were listed in */
};

struct sched_hist {
	int n_buckets;
	const double *upper;
	uint64_t
	    count[SCHED_HIST_BUCKETS]; /* not cumulative: observations in (upper[i-1], upper[i]] */
	uint64_t total;
	double sum;
};

struct scheduler {
	struct backend *be;
	const struct tokenizer *tok;
	struct sinkd_log *log;
	int n_vocab;
	struct vocab_trie *vocab; /* the vocabulary as bytes, for grammar masks */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	bool thread_started;
	bool stopping; /* [mu] */
	atomic_uint_fast64_t heartbeat; /* engine loop turns */
	char stall_file[256];           /* [mu] test hook; "" = none */

	struct sched_limits lim; /* [mu] */
	size_t reserved;         /* [mu] bytes */
	size_t resident;         /* [mu] bytes */
	uint64_t next_handle;    /* [mu] */

	struct sched_req **queue; /* [mu] FIFO */
	size_t n_queue, cap_queue;
	struct sched_req **active; /* admitted; modified by the engine under mu */
	size_t n_active, cap_active;
	struct sched_session **sessions; /* [mu] persistent, alive */
	size_t n_sessions, cap_sessions;
	struct sched_session **dead; /* [mu] deleted/expired, to free on the engine */
	size_t n_dead, cap_dead;

	/* the store's side of the hand-over (sched_store.h says what locks what) */
	struct sched_store store;
	struct sched_ctl **ctl; /* [mu] jobs for the engine */
	size_t n_ctl, cap_ctl;
	pthread_cond_t ctl_cv; /* a job is done, or an offload finished */
	bool offload_all; /* [mu] drain: every idle session is due now */

	struct scheduler_stats st;                /* [mu] counters */
	struct sched_hist hist[SCHED_HIST_COUNT]; /* [mu] */

	struct sched_monitor monitor; /* [engine] the perplexity monitor (sched_monitor.h) */
	/* [engine] batch buffers */
	struct backend_token *batch;
	size_t cap_batch;
	float *logits; /* (cap_logits_rows, n_vocab) */
	size_t cap_logits_rows;
	size_t rr_decode, rr_prefill; /* round-robin cursors */
	uint64_t n_batches;           /* batches built (served_tick stamps) */
	struct sched_req **cand;      /* (cap_cand) decoders, then prompts, of one batch */
	size_t cap_cand;
	struct sched_pace pace; /* [engine] prefill pacing while sessions decode (sched_pace.h) */
	/* flow control (sched_tick.c) */
	_Atomic unsigned kicks;   /* scheduler_kick() calls */
	_Atomic bool kick_wanted; /* the engine thread waits for a kick */
	size_t max_unsent;        /* [engine] lim.max_unsent_tokens of this tick */
	size_t n_held;            /* [engine] decoders that sat out this tick */
	/* [engine] the prefix cache (sched_prefix.h, used by sched_share.c) and
	 * the settings it runs under */
	struct sched_prefix *prefix;
	size_t prefix_max_applied;
	struct cache_geometry prefix_geom_applied;
};

double sched_now(void);
/* Appends p to a growable array of pointers; -ENOMEM. */
int sched_ptrs_push(void ***arr, size_t *n, size_t *cap, void *p);
void sched_ptrs_remove_at(void **arr, size_t *n, size_t i);
/* Waits on ctl_cv (a job done, an offload finished) for at most ms
 * milliseconds (under a second); mu held. */
void sched_ctl_wait_locked(struct scheduler *s, long ms);

/* sched_tick.c */
/* Sets up admitted requests, runs one batch, emits events; returns the number
 * of tokens forwarded (0: nothing to do). */
size_t sched_tick(struct scheduler *s);
/* The last event of r; GEN_FINISH_ERROR carries rc, the field at fault
 * (or SCHED_FIELD_NONE) and the message. */
void sched_emit_done(struct scheduler *s, struct sched_req *r, enum gen_finish finish, int rc,
                     enum sched_field field, const char *error);
void sched_req_free(struct sched_req *r);
/* Frees a session's backend state and history (engine thread or after it stopped). */
void sched_session_release(struct scheduler *s, struct sched_session *ss);
/* Makes the request leave: session unbusied (or freed when one-shot). */
void sched_req_retire(struct scheduler *s, struct sched_req *r);
/* Sets ss->n_deferred (rule D) under the lock. */
void sched_session_set_deferred(struct scheduler *s, struct sched_session *ss, int n);
/* The engine's part of the jobs taken from s->ctl (jobs[0..n)): snapshot
 * exports (sched_offload.c) and cache traces (sched_views.c); then wakes the
 * threads waiting for them. */
void sched_ctl_run(struct scheduler *s, struct sched_ctl **jobs, size_t n);

/* sched_offload.c: the scheduler's sessions to and from the store */
/* Runs an EXPORT job taken from s->ctl (engine thread, lock not held):
 * the session copied out for its snapshot, or why not; marks it done. */
void sched_export_run(struct scheduler *s, struct sched_ctl *c);
/* Copies a session's state out (engine thread; the session is idle). */
int sched_export_session(struct scheduler *s, struct sched_session *ss, struct sched_export *ex,
                         char *err, size_t err_len);
/* Imports a restored session's snapshot into its new backend session. */
int sched_import_pending(struct scheduler *s, struct sched_session *ss, char *err, size_t err_len);
/* Hands exported sessions to the store's writer thread (started with the
 * first); those it cannot take count as failed offloads. */
void sched_offload_queue(struct scheduler *s, struct sched_offload **jobs, size_t n);
/* A session left the table for good (deleted or expired, not offloaded):
 * its stored file, its lease and its record of leaving go too.  Called
 * without the lock. */
void sched_forget_stored(struct scheduler *s, const char *id);

/* scheduler.c, for sched_offload.c */
/* Creates a session from a snapshot (the checks of a create, the geometry
 * as restored). */
int sched_session_create_restored(struct scheduler *s, const struct session_settings *opt,
                                  const struct sched_restore *rs, char id_out[SCHED_SESSION_ID_LEN],
                                  char *err, size_t err_len);
/* The live session of that id, or NULL; mu held. */
struct sched_session *sched_session_find_locked(struct scheduler *s, const char *id);
/* What scheduler_session_info() reports of ss. */
void sched_session_info_locked(const struct sched_session *ss, double now,
                               struct sched_session_info *out);
/* Takes a session out of the table; the engine frees it once idle. */
void sched_session_kill_locked(struct scheduler *s, struct sched_session *ss);

/* sched_share.c: new streams and the prefix cache */
int sched_share_init(struct scheduler *s, size_t max_bytes, char *err, size_t err_len);
/* After every backend session is freed. */
void sched_share_deinit(struct scheduler *s);
/* Whether a new stream of ss may take its prefix from the cache (shared
 * when pinned, copied when not). */
bool sched_share_eligible(const struct scheduler *s, const struct sched_session *ss);
/* A new, eligible stream whose feed is built makes its backend session:
 * shared (r->n_fed and n_cached skip the prefix), or plain with a claim
 * (r->cut), or none yet (r->share_wait: call again next tick). */
int sched_share_start(struct scheduler *s, struct sched_req *r, char *err, size_t err_len);
/* ss's own backend session (ss->bs), as every one the scheduler makes:
 * when the backend has no room (-ENOSPC), the prefix cache's unreferenced
 * entries make way (their rows may hold KV memory outside the budget) and
 * it tries once more. */
int sched_share_session_new(struct scheduler *s, struct sched_session *ss, char *err,
                            size_t err_len);
/* After a forward: r reached its cut, so its prefix is published and
 * shared. */
void sched_share_after_forward(struct scheduler *s, struct sched_req *r);
/* Rule R: a restored session's backend session over the entry its
 * snapshot's sinks are (0), or none (ss->bs NULL: import it as it is). */
int sched_share_restored(struct scheduler *s, struct sched_session *ss);
/* Rule D's tokens into a backend session of ss's own (before a snapshot). */
int sched_share_materialize(struct scheduler *s, struct sched_session *ss, char *err,
                            size_t err_len);
/* r leaves without computing its claim. */
void sched_share_abandon(struct scheduler *s, struct sched_req *r);
/* ss's backend session was freed: its reference goes. */
void sched_share_release(struct scheduler *s, struct sched_session *ss);
void sched_share_stats_locked(struct scheduler *s);
/* A reload's prefix cache settings, applied on the engine thread. */
void sched_share_apply_limits(struct scheduler *s, size_t max_bytes,
                              const struct cache_geometry *g);
/* Whether a reload changed them since (engine thread, mu held): a tick is
 * due even with nothing else to do. */
bool sched_share_reload_due_locked(const struct scheduler *s);

/* sched_metrics.c */
void sched_hist_init_all(struct scheduler *s);
void sched_hist_observe(struct sched_hist *h, double v);

/* Cached tokens a revision may take from a session's cache: those past the
 * sinks, and no more than a model sliding-window layer holds. */
static inline size_t sched_revisable_cached(const struct sinkcache_stats *st,
                                            const struct cache_geometry *g)
{
	size_t n = (size_t)(st->n_resident - st->n_sink);
	if (cache_geometry_per_layer(g) && (size_t)st->n_resident_swa < n)
		n = (size_t)st->n_resident_swa;
	return n;
}
