/* Inner loops of cache attention over runs of stored rows, for up to
 * ATTEND_MAX_HEADS query heads that share one kv head (GQA: each key and
 * value row is read once for all of them).  Built twice (AVX2+FMA and
 * baseline) and picked at load time from the CPU (GCC target_clones), so
 * one binary runs everywhere and uses the wide units where they exist. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "cache/sinkcache.h"

#define ATTEND_MAX_HEADS 8

/* scores[h*ld + i] = q[h] . row_i for rows base + i*row_bytes (dtype dt,
 * d elements), i in [0, n), h in [0, r).  q: (r, d). */
void attend_score_rows(enum kv_dtype dt, const unsigned char *base, size_t row_bytes, int n, int d,
                       const float *q, int r, float *scores, int ld);
/* acc[h*d + j] += p[h*ld + i] * row_i[j]. */
void attend_mix_rows(enum kv_dtype dt, const unsigned char *base, size_t row_bytes, int n, int d,
                     const float *p, int ld, int r, float *acc);
/* Same over rows of int8/int4 codes (row_bytes apart): raw code dot products. */
void attend_score_codes(int bits, const uint8_t *base, size_t row_bytes, int n, int d,
                        const float *q, int r, float *scores, int ld);
/* acc[h*d + j] += w[h*ld + i] * code_i[j]. */
void attend_mix_codes(int bits, const uint8_t *base, size_t row_bytes, int n, int d, const float *w,
                      int ld, int r, float *acc);
/* scores[i] <- exp(scores[i] - max) in place; returns their sum. */
float attend_exp_sum(float *scores, int n);
