/* Token sampling from logits: penalties, temperature, top-k, top-p, min-p,
 * seeded randomness (same seed, same output), greedy at temperature 0, and
 * the log-probabilities of the chosen token and its top-N alternatives.
 * The stop-string matcher is engine/stopstr.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sampler_params {
	float temperature;	  /* 0 = greedy */
	int top_k;		  /* <= 0: off */
	float top_p;		  /* 1: off */
	float min_p;		  /* 0: off */
	float repeat_penalty;	  /* 1: off (llama.cpp semantics) */
	int repeat_last_n;	  /* window of recent tokens the penalties look at; -1 = all */
	float presence_penalty;	  /* 0: off (OpenAI semantics) */
	float frequency_penalty;  /* 0: off */
	uint64_t seed;
	int n_top_logprobs;	  /* 0..20 alternatives reported */
	bool logprobs;		  /* fill res->logprob (also done when alternatives are asked for) */
};

/* Defaults follow the OpenAI API: temperature 1, top_p 1, every filter and
 * penalty off, repeat_last_n 64, seed 0, no logprobs. */
void sampler_params_default(struct sampler_params *p);
/* Checks the ranges (temperature >= 0, top_p in (0,1], min_p in [0,1],
 * repeat_penalty > 0, repeat_last_n >= -1, presence/frequency in [-2,2],
 * n_top_logprobs in 0..20); returns 0 or -EINVAL with a message naming the
 * field.  sampler_new calls it; the API layer may call it early. */
int sampler_params_validate(const struct sampler_params *p, char *err, size_t err_len);

#define SAMPLER_MAX_TOP_LOGPROBS 20

/* One logit_bias entry: added to the token's logit before penalties and
 * sampling (-100 bans the token, +100 all but forces it). */
struct sampler_bias {
	int32_t token;
	float bias;
};
#define SAMPLER_MAX_BIAS 1024 /* entries of one request's logit_bias */

struct token_logprob {
	int32_t token;
	float logprob; /* natural log of the probability after penalties, before temperature */
};

struct sampler_result {
	int32_t token;
	float logprob;
	int n_top;
	struct token_logprob top[SAMPLER_MAX_TOP_LOGPROBS];
};

struct sampler;

int sampler_new(const struct sampler_params *p, int n_vocab, struct sampler **out, char *err,
		size_t err_len);
void sampler_free(struct sampler *s);
/* Records a token of the context (prompt or generated) for the penalties. */
void sampler_accept(struct sampler *s, int32_t token);
/* Samples from logits (n_vocab floats, modified in place: the penalties are
 * applied to them).  res->logprob (when p.logprobs or n_top_logprobs; else 0:
 * a log-sum-exp over the whole vocabulary costs more than a greedy pick)
 * and res->top[] are the log-softmax of the
 * penalised logits at temperature 1 (what the model thinks after penalties,
 * independent of temperature and of the top-k/top-p/min-p filters); top[] is
 * sorted by decreasing logprob, ties by lower id.  Returns 0, or -EINVAL when
 * a logit is NaN or every logit is -inf.  Does not call sampler_accept. */
int sampler_sample(struct sampler *s, float *logits, struct sampler_result *res);
/* Forgets the accepted tokens and restarts the random sequence from the seed. */
void sampler_reset(struct sampler *s);
