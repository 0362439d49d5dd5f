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

#include "config/config.h"
#include "engine/backend.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

enum gen_finish { GEN_FINISH_NONE = 0, GEN_FINISH_STOP, GEN_FINISH_LENGTH, GEN_FINISH_CANCELLED,
		  GEN_FINISH_ERROR };

enum gen_event_kind {
	GEN_EVENT_PROMPT_DONE = 0, /* prompt fully in the cache */
	GEN_EVENT_TOKEN,	   /* one sampled token; text may be empty (held back) */
	GEN_EVENT_DONE,		   /* last event of a request */
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
	int http_status;      /* DONE with GEN_FINISH_ERROR: status to answer with */
	const char *error;    /* DONE with GEN_FINISH_ERROR: message */
};

/* Called on the engine thread: must not block (copy, wake the connection, return). */
typedef void (*gen_event_cb)(void *user, const struct gen_event *ev);

struct gen_request {
	int32_t *prompt_ids; /* malloc'ed; ownership passes to the scheduler on submit */
	size_t n_prompt;
	struct sampler_params sampling;
	int max_tokens;		/* 0: prefill only (session append without generate) */
	char **stops;		/* owned copies, passed to the scheduler on submit */
	size_t n_stops;
	bool want_logprobs;
	bool ignore_eos;
	const char *session_id; /* persistent session to continue, or NULL */
	size_t revise_last_tokens;
	gen_event_cb on_event;
	void *user;
};

struct scheduler;

int scheduler_new(const struct sinkd_config *cfg, struct backend *be, const struct tokenizer *tok,
		  struct sinkd_log *log, struct scheduler **out, char *err, size_t err_len);
/* Stops the engine thread; pending requests get DONE with GEN_FINISH_CANCELLED. */
void scheduler_free(struct scheduler *s);

/* Queues a request.  Returns 0 and a handle, or: -EAGAIN queue full (503),
 * -ENOENT unknown session (404), -EBUSY session in use (409), -E2BIG prompt
 * too long for the strategy (400), each with a message.  On error the caller
 * keeps ownership of req's buffers. */
int scheduler_submit(struct scheduler *s, struct gen_request *req, uint64_t *handle, char *err,
		     size_t err_len);
/* Cancels a request (client gone): it leaves the batch at the next tick and
 * frees its cache; a DONE event with GEN_FINISH_CANCELLED follows. */
void scheduler_cancel(struct scheduler *s, uint64_t handle);

/* Applies the reloadable parts of a new config (geometry for new sessions,
 * limits, queue sizes). */
void scheduler_reconfigure(struct scheduler *s, const struct sinkd_config *cfg);

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
};
void scheduler_get_stats(struct scheduler *s, struct scheduler_stats *out);
