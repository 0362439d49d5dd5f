/* Plain types of the scheduler's public interface that its parts below
 * the core (sched_monitor.h, sched_store.h) work with too; scheduler.h
 * includes this, so that those parts need not include the scheduler's
 * header (nor know struct scheduler).  No functions, no state. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sessions are named by their keys (session/session_key.h). */
#define SCHED_SESSION_ID_LEN 50 /* SESSION_KEY_LEN */

/* The field of a request or of session settings that a refusal is about.
 * The server names it in its answer with the client's own name for it
 * (server/request_fields.h: "messages", "input" or "text" for the prompt,
 * ...), so the scheduler speaks of fields, never of field names. */
enum sched_field {
	SCHED_FIELD_NONE = 0,
	SCHED_FIELD_PROMPT,
	SCHED_FIELD_MAX_TOKENS,
	SCHED_FIELD_LOGIT_BIAS,
	SCHED_FIELD_SESSION_ID,
	SCHED_FIELD_REVISE_LAST_TOKENS,
	SCHED_FIELD_PIN_PREFIX_TOKENS,
	SCHED_FIELD_WINDOW_SIZE,
	SCHED_FIELD_SINK_KEEP_COUNT,
};

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

/* A session that left this instance for the store (or the park of stored
 * responses), as it was when it left. */
struct sched_left_info {
	uint64_t n_seen;
	int n_resident;
	int window_size, sink_keep_count, pinned_tokens;
	size_t bytes; /* its record */
	bool parked;  /* in this process's park, not a shared store */
};
