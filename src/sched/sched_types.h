/* Plain types of the scheduler's public interface that its parts below
 * the core (sched_monitor.h, sched_store.h) work with too; scheduler.h
 * includes this, so that those parts need not include the scheduler's
 * header (nor know struct scheduler).  No functions, no state. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* The streaming-perplexity monitor of one session (sched_monitor.c): the
 * NLL of every scored token under the model's own distribution (raw
 * logits: before logit_bias, penalties, constraints and temperature), input
 * tokens (monitoring.input_perplexity) and generated ones apart; the first
 * full window (scored tokens predicted while the cache had not yet
 * evicted: stream index below sinks + window) and the running mean of every
 * scored token after it. */
struct sched_perplexity {
	uint64_t input_tokens, generated_tokens;
	double input_nll, generated_nll; /* sums */
	uint64_t first_tokens, running_tokens;
	double first_nll, running_nll; /* sums */
	double ratio;    /* exp(running mean - first mean) at the last check; 0 before one */
	uint64_t alerts; /* times the ratio rose past monitoring.perplexity_alert_ratio */
	bool alerting;   /* above it now (an alert is logged again only after it fell below) */
};
