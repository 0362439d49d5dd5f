/* The streaming-perplexity monitor's interface to the engine (what it
 * measures: the top of sched_monitor.c).  The engine lists the prompt rows
 * it wants scored while it builds a batch, hands over the logits after the
 * forward pass and the raw row of each sampled token; the monitor keeps
 * each session's sums (struct sched_perplexity, which the caller owns and
 * names in a struct sched_monitor_stream), logs and counts alerts, and
 * queues every NLL for the histograms, which the caller fills from it at
 * the end of the tick under its lock.  It knows neither the scheduler nor
 * its requests and sessions: only what a stream descriptor gives it.
 *
 * Locking: every field of struct sched_monitor, and the sums a stream
 * names, are the engine thread's ([engine], no lock);
 * sched_monitor_flush_locked() is the one call made with the scheduler's
 * `mu` held, and the only one that writes outside the monitor (through the
 * observe callback it is given, and the alert counter). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/sched_types.h"

struct sinkd_log;

/* One stream as the monitor sees it: the sums it adds to, where the
 * session's first window ends, and the names its log lines carry. */
struct sched_monitor_stream {
	struct sched_perplexity *ppl; /* the session's sums ([engine]) */
	uint64_t first_window;        /* stream indexes below it: the first window */
	const char *session_id;       /* "" for a one-shot session */
	const char *request_id;       /* "" when none */
};

/* Monitor settings of this tick ([engine] copies, taken with the lock). */
struct sched_monitor_settings {
	int input; /* enum monitor_input */
	int64_t every;
	double alert_ratio;
};

struct sched_monitor {
	struct sinkd_log *log;             /* alerts and stream lines (NULL: none) */
	int n_vocab;                       /* the width of a logits row */
	struct sched_monitor_settings set; /* of this tick */
	/* the input rows of the batch to score */
	struct sched_score_row {
		struct sched_monitor_stream st;
		int row;
		int32_t target;
		uint64_t pos;
	} * score_rows;
	size_t n_score_rows, cap_score_rows;
	/* NLLs waiting for the histograms */
	struct sched_nll {
		double nll;
		bool input;
	} * nll_queue;
	size_t n_nll_queue, cap_nll_queue;
	float *raw_row;  /* (n_vocab) the sampled row before sampling changed it */
	uint64_t alerts; /* alerts so far; published at the flush */
};

void sched_monitor_init(struct sched_monitor *m, struct sinkd_log *log, int n_vocab);
void sched_monitor_deinit(struct sched_monitor *m);
/* Whether the next input token offered by a session is scored; *offered
 * is the session's count of offers (every K-th is sampled). */
bool sched_monitor_wants_input(uint64_t *offered, const struct sched_monitor_settings *m);
/* The NLL of `target` under the raw logits row, which it overwrites. */
double sched_monitor_nll(float *row, int n_vocab, int32_t target);
/* One scored token of stream st at stream index pos: into its sums and
 * the histogram queue; checks the alert (logged with the word perplexity). */
void sched_monitor_add(struct sched_monitor *m, const struct sched_monitor_stream *st, double nll,
                       bool input, uint64_t pos);
/* A new batch: no rows to score yet. */
void sched_monitor_batch_begin(struct sched_monitor *m);
/* Room for one more row to score; false without memory (the row goes in
 * unscored). */
bool sched_monitor_score_room(struct sched_monitor *m);
/* Row `row` of the batch's logits predicts `target`, st's input token at
 * stream index pos (after sched_monitor_score_room said yes).  st is
 * copied; what it points to must live until sched_monitor_score_batch. */
void sched_monitor_score_row(struct sched_monitor *m, const struct sched_monitor_stream *st,
                             int row, int32_t target, uint64_t pos);
/* After the forward pass: scores the listed rows of logits ((rows, n_vocab),
 * overwritten). */
void sched_monitor_score_batch(struct sched_monitor *m, float *logits);
/* Keeps a copy of a row about to be sampled (logit_bias, penalties and the
 * grammar change it in place). */
void sched_monitor_keep_raw(struct sched_monitor *m, const float *row);
/* The token sampled from the kept row: st's generated token at stream index pos. */
void sched_monitor_add_generated(struct sched_monitor *m, const struct sched_monitor_stream *st,
                                 int32_t token, uint64_t pos);
/* Where the queued NLLs go at the flush (the caller's histograms). */
typedef void (*sched_monitor_observe_fn)(void *arg, double nll, bool input);
/* Under the caller's lock at the end of a tick: each queued NLL to observe,
 * the alerts so far into *alerts. */
void sched_monitor_flush_locked(struct sched_monitor *m, sched_monitor_observe_fn observe,
                                void *arg, uint64_t *alerts);
/* The log line of a stream that ended: its tokens' perplexities since
 * *start (its sums when the request began). */
void sched_monitor_stream_done(struct sched_monitor *m, const struct sched_monitor_stream *st,
                               const struct sched_perplexity *start);
