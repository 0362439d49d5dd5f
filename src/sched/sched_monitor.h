/* The streaming-perplexity monitor's interface to the engine (what it
 * measures: the top of sched_monitor.c).  The engine lists the prompt rows
 * it wants scored while it builds a batch, hands over the logits after the
 * forward pass and the raw row of each sampled token; the monitor keeps
 * each session's sums (struct sched_perplexity, in the session), logs and
 * counts alerts, and queues every NLL for the histograms, which it fills
 * at the end of the tick under the scheduler's lock.
 *
 * Locking: every field of struct sched_monitor is the engine thread's
 * ([engine], no lock); sched_monitor_flush_locked() is the one call made
 * with the scheduler's `mu` held, and the only one that writes outside the
 * monitor (the histograms and the alert counter it is given). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sched_hist;
struct sched_req;
struct sched_session;
struct sinkd_log;

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
		struct sched_req *r;
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
/* Whether the input token at stream index `target_pos` of session ss is
 * scored (counts the offer for sampling). */
bool sched_monitor_wants_input(struct sched_session *ss, const struct sched_monitor_settings *m);
/* The NLL of `target` under the raw logits row, which it overwrites. */
double sched_monitor_nll(float *row, int n_vocab, int32_t target);
/* One scored token of r's session at stream index pos: into the session's
 * sums and the histogram queue; checks the alert (logged with the word
 * perplexity). */
void sched_monitor_add(struct sched_monitor *m, struct sched_req *r, double nll, bool input,
                       uint64_t pos);
/* A new batch: no rows to score yet. */
void sched_monitor_batch_begin(struct sched_monitor *m);
/* Room for one more row to score; false without memory (the row goes in
 * unscored). */
bool sched_monitor_score_room(struct sched_monitor *m);
/* Row `row` of the batch's logits predicts `target`, r's input token at
 * stream index pos (after sched_monitor_score_room said yes). */
void sched_monitor_score_row(struct sched_monitor *m, struct sched_req *r, int row, int32_t target,
                             uint64_t pos);
/* After the forward pass: scores the listed rows of logits ((rows, n_vocab),
 * overwritten). */
void sched_monitor_score_batch(struct sched_monitor *m, float *logits);
/* Keeps a copy of a row about to be sampled (logit_bias, penalties and the
 * grammar change it in place). */
void sched_monitor_keep_raw(struct sched_monitor *m, const float *row);
/* The token sampled from the kept row: r's generated token at stream index pos. */
void sched_monitor_add_generated(struct sched_monitor *m, struct sched_req *r, int32_t token,
                                 uint64_t pos);
/* Under the lock at the end of a tick: the queued NLLs into the histograms,
 * the alerts so far into *alerts. */
void sched_monitor_flush_locked(struct sched_monitor *m, struct sched_hist *input,
                                struct sched_hist *generated, uint64_t *alerts);
/* The log line of a stream that ended: its tokens' perplexities. */
void sched_monitor_stream_done(struct sched_monitor *m, struct sched_req *r);
