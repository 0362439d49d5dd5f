/* Token sampling from logits: penalties, temperature, top-k, top-p, min-p,
 * seeded randomness (same seed, same output), greedy at temperature 0, and
 * the log-probabilities of the chosen token and its top-N alternatives.
 * Also the stop-string matcher that holds back text that may be the start
 * of a stop string. */
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
};

void sampler_params_default(struct sampler_params *p);

#define SAMPLER_MAX_TOP_LOGPROBS 20

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
/* Samples from logits (n_vocab floats, modified in place). */
int sampler_sample(struct sampler *s, float *logits, struct sampler_result *res);

/* Stop strings over streamed text. */
struct stop_matcher;
int stop_matcher_new(const char *const *stops, size_t n_stops, struct stop_matcher **out,
		     char *err, size_t err_len);
void stop_matcher_free(struct stop_matcher *m);
/* Feeds newly decoded text.  Writes to out what can be released now (text
 * that cannot be part of a stop string), returns its length; sets *stopped
 * when a stop string completed (the stop string itself and anything after it
 * are never released). */
size_t stop_matcher_feed(struct stop_matcher *m, const char *text, size_t len, char *out,
			 size_t out_cap, bool *stopped);
/* At the end of generation: releases the held-back text. */
size_t stop_matcher_flush(struct stop_matcher *m, char *out, size_t out_cap);
