/* The streaming-perplexity monitor: the negative log-likelihood of the
 * tokens flowing through each session under the model's own distribution,
 * input tokens (when monitoring.input_perplexity asks: their logits rows
 * cost an output projection each) and generated ones apart.  A session's
 * first full window (the tokens predicted before its cache evicted
 * anything) is its baseline; the running perplexity of everything scored
 * after it is checked against monitoring.perplexity_alert_ratio once per
 * baseline's worth of scored tokens, and a rise past it is logged with the
 * word "perplexity" and counted (sinkd_perplexity_alerts_total): a cache
 * that lost what the model needs (its sinks, say) shows there first. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/attend_kernels.h"
#include "config/config_types.h"
#include "sched/sched_monitor.h"
#include "util/log.h"

void sched_monitor_init(struct sched_monitor *m, struct sinkd_log *log, int n_vocab)
{
	*m = (struct sched_monitor){.log = log, .n_vocab = n_vocab};
}

void sched_monitor_deinit(struct sched_monitor *m)
{
	free(m->score_rows);
	free(m->nll_queue);
	free(m->raw_row);
	*m = (struct sched_monitor){0};
}

bool sched_monitor_wants_input(uint64_t *offered, const struct sched_monitor_settings *m)
{
	if (m->input == MONITOR_INPUT_OFF)
		return false;
	if (m->input == MONITOR_INPUT_ALL)
		return true;
	return (*offered)++ % (uint64_t)m->every == 0;
}

double sched_monitor_nll(float *row, int n_vocab, int32_t target)
{
	/* the attention's vector exp: row[i] <- exp(row[i] - max), the sum */
	double sum = (double)attend_exp_sum(row, n_vocab), e = (double)row[target];
	/* below float's least (p < 1e-45, only where a bias or a constraint
	 * forced the token): counted as that floor, 104 nats */
	return e > 0.0 ? log(sum / e) : log(sum) + 104.0;
}

static double ppl_of(double nll_sum, uint64_t n)
{
	return n ? exp(nll_sum / (double)n) : 0.0;
}

static void check_alert(struct sched_monitor *m, const struct sched_monitor_stream *st,
                        struct sched_perplexity *p)
{
	double first = p->first_nll / (double)p->first_tokens;
	double running = p->running_nll / (double)p->running_tokens;
	p->ratio = exp(running - first);
	if (p->ratio <= m->set.alert_ratio) {
		p->alerting = false;
		return;
	}
	if (p->alerting)
		return;
	p->alerting = true;
	p->alerts++;
	m->alerts++;
	log_event(m->log, LOG_WARN, "sched", "perplexity rose above the session's first window",
	          (struct log_field[]){
	              LOG_STR("session", st->session_id[0] ? st->session_id : "-"),
	              LOG_STR("request_id", st->request_id[0] ? st->request_id : "-"),
	              LOG_DBL("ratio", p->ratio), LOG_DBL("alert_ratio", m->set.alert_ratio),
	              LOG_DBL("first_window_perplexity", exp(first)),
	              LOG_DBL("running_perplexity", exp(running)),
	              LOG_INT("scored_tokens", p->first_tokens + p->running_tokens), LOG_END});
}

void sched_monitor_add(struct sched_monitor *m, const struct sched_monitor_stream *st, double nll,
                       bool input, uint64_t pos)
{
	struct sched_perplexity *p = st->ppl;
	if (!isfinite(nll)) /* a -inf logit of the token itself: nothing to learn from it */
		return;
	if (input) {
		p->input_tokens++;
		p->input_nll += nll;
	} else {
		p->generated_tokens++;
		p->generated_nll += nll;
	}
	if (pos < st->first_window) {
		p->first_tokens++;
		p->first_nll += nll;
	} else {
		p->running_tokens++;
		p->running_nll += nll;
		if (p->first_tokens && p->running_tokens % p->first_tokens == 0)
			check_alert(m, st, p);
	}
	if (m->n_nll_queue == m->cap_nll_queue) {
		size_t cap = m->cap_nll_queue ? 2 * m->cap_nll_queue : 256;
		void *q = realloc(m->nll_queue, cap * sizeof(*m->nll_queue));
		if (!q)
			return; /* the histograms miss it; the session's sums have it */
		m->nll_queue = q;
		m->cap_nll_queue = cap;
	}
	m->nll_queue[m->n_nll_queue++] = (struct sched_nll){nll, input};
}

void sched_monitor_batch_begin(struct sched_monitor *m)
{
	m->n_score_rows = 0;
}

bool sched_monitor_score_room(struct sched_monitor *m)
{
	if (m->n_score_rows < m->cap_score_rows)
		return true;
	size_t cap = m->cap_score_rows ? 2 * m->cap_score_rows : 64;
	void *p = realloc(m->score_rows, cap * sizeof(*m->score_rows));
	if (!p)
		return false;
	m->score_rows = p;
	m->cap_score_rows = cap;
	return true;
}

void sched_monitor_score_row(struct sched_monitor *m, const struct sched_monitor_stream *st,
                             int row, int32_t target, uint64_t pos)
{
	m->score_rows[m->n_score_rows++] =
	    (struct sched_score_row){.st = *st, .row = row, .target = target, .pos = pos};
}

void sched_monitor_score_batch(struct sched_monitor *m, float *logits)
{
	for (size_t i = 0; i < m->n_score_rows; i++) {
		const struct sched_score_row *sr = &m->score_rows[i];
		float *row = logits + (size_t)sr->row * (size_t)m->n_vocab; /* not sampled */
		sched_monitor_add(m, &sr->st, sched_monitor_nll(row, m->n_vocab, sr->target), true,
		                  sr->pos);
	}
}

void sched_monitor_keep_raw(struct sched_monitor *m, const float *row)
{
	if (!m->raw_row)
		m->raw_row = malloc((size_t)m->n_vocab * sizeof(float));
	if (m->raw_row)
		memcpy(m->raw_row, row, (size_t)m->n_vocab * sizeof(float));
}

void sched_monitor_add_generated(struct sched_monitor *m, const struct sched_monitor_stream *st,
                                 int32_t token, uint64_t pos)
{
	if (m->raw_row)
		sched_monitor_add(m, st, sched_monitor_nll(m->raw_row, m->n_vocab, token), false,
		                  pos);
}

void sched_monitor_flush_locked(struct sched_monitor *m, sched_monitor_observe_fn observe,
                                void *arg, uint64_t *alerts)
{
	for (size_t i = 0; i < m->n_nll_queue; i++)
		observe(arg, m->nll_queue[i].nll, m->nll_queue[i].input);
	m->n_nll_queue = 0;
	*alerts = m->alerts;
}

void sched_monitor_stream_done(struct sched_monitor *m, const struct sched_monitor_stream *st,
                               const struct sched_perplexity *start)
{
	const struct sched_perplexity *p = st->ppl, *a = start;
	uint64_t n_in = p->input_tokens - a->input_tokens;
	uint64_t n_gen = p->generated_tokens - a->generated_tokens;
	if (!n_in && !n_gen)
		return;
	log_event(
	    m->log, LOG_INFO, "sched", "stream perplexity",
	    (struct log_field[]){
	        LOG_STR("session", st->session_id[0] ? st->session_id : "-"),
	        LOG_STR("request_id", st->request_id[0] ? st->request_id : "-"),
	        LOG_INT("input_tokens_scored", n_in),
	        LOG_DBL("input_perplexity", ppl_of(p->input_nll - a->input_nll, n_in)),
	        LOG_INT("generated_tokens_scored", n_gen),
	        LOG_DBL("generated_perplexity", ppl_of(p->generated_nll - a->generated_nll, n_gen)),
	        LOG_DBL("session_ratio", p->ratio), LOG_END});
}
