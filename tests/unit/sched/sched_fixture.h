/* The sched tests' shared fixture: the real stories260K model, the CPU
 * backend and the tokenizer (loaded once per test program), a scheduler made
 * over them with config overrides, and a collector of one request's events.
 * Test code: problems outside a test end the program, problems inside one
 * fail it (ck_assert). */
#pragma once

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "grammar/grammar.h"
#include "sched/scheduler.h"

struct ref_prompt {
	int32_t ids[64];
	size_t n;
	int32_t cont[64]; /* greedy continuation from the reference implementation */
	size_t n_cont;
};

struct sched_fixture {
	struct model *model;
	char model_path[1024];
	struct backend *be;
	struct tokenizer *tok;
	struct ref_prompt ref[4];
	size_t n_ref;
};
extern struct sched_fixture fx;

/* Loads the model, the tokenizer and the reference prompts ($SINKD_SHARED);
 * exits on failure. */
void fixture_load(void);
/* Frees what fixture_load and sched_make made. */
void fixture_free(void);
/* A scheduler over the fixture with config overrides ("key=value"). */
struct scheduler *sched_make(struct sinkd_config *cfg, const char *const *ov, size_t n_ov);

struct coll {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct scheduler *s;
	uint64_t handle;
	int cancel_after; /* > 0: cancel from the callback after this many tokens */
	int32_t tokens[4096];
	float logprobs[4096]; /* when the request asked for them */
	int n_tokens;
	size_t text_len;
	int n_prompt_done, n_done;
	enum gen_finish finish;
	int error_rc, retry_after_s, done_generated;
	enum sched_field error_field; /* DONE's, or submit's on an error */
	char error[256];
	int max_tokens;
	bool expect_cancel;
	struct coll *watch;       /* another request to observe */
	int watch_at_prompt_done; /* its token count when this prompt was in */
	bool flow;                /* reports unsent tokens: n_tokens - taken */
	int taken;                /* tokens the "client" took */
	int most_unsent;          /* largest n_tokens - taken seen */
	bool ticks;               /* note the engine tick of each token: */
	uint64_t tick_submit;     /* ticks before the submit */
	uint64_t tick_first;      /* the tick of the first token */
	uint64_t tick_last;       /* of the latest token */
	uint64_t tick_gap_from;   /* gaps count only between tokens after this tick */
	uint64_t max_tick_gap;    /* largest tick distance of consecutive tokens */
	int n_started;            /* on_start calls */
	int pin;                  /* the request's pin_prefix_tokens */
	bool want_logprobs;       /* fill logprobs[] */
	int n_cached;             /* PROMPT_DONE's n_cached_tokens */
	/* the next submit only: a grammar (reference taken), logit_bias, seed */
	struct grammar *grammar;
	struct sampler_bias bias[4];
	size_t n_bias;
	float temperature;
	uint64_t seed;
};

struct coll *coll_new(struct scheduler *s);
void coll_free(struct coll *c);
/* Tokens so far. */
int coll_tokens(struct coll *c);
/* Waits for DONE (30 s, times SINKD_TEST_TIME_SCALE). */
void coll_wait(struct coll *c);
/* Submits ids (copied) with greedy sampling; returns submit's code. */
int submit(struct scheduler *s, struct coll *c, const int32_t *ids, size_t n, int max_tokens,
           const char *session_id, size_t revise);
/* Runs one request to the end and copies its tokens. */
int run_one(struct scheduler *s, const int32_t *ids, size_t n, int max_tokens, const char *sid,
            size_t revise, int32_t *out);
/* Waits until nothing runs, waits or is reserved (asserts it). */
void wait_idle(struct scheduler *s);
