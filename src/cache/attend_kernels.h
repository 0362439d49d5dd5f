/* Inner loops of cache attention over runs of stored rows, for up to
 * ATTEND_MAX_HEADS query heads that share one kv head (GQA: each key and
 * value row is read once for all of them).  Built twice (AVX2+FMA and
 * baseline) and picked at load time from the CPU (GCC target_clones), so
 * one binary runs everywhere and uses the wide units where they exist. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/geometry.h"

#define ATTEND_MAX_HEADS 8

/* scores[h*ld + i] = q[h] . row_i for rows base + i*row_bytes (dtype dt,
 * d elements), i in [0, n), h in [0, r).  q: (r, d).  Each score's bits
 * depend only on q[h] and row_i, not on n, i or r.  prefetch: the rows are
 * not known to be in cache (the wide kernels then prefetch ahead); it
 * never changes a result. */
void attend_score_rows(enum kv_dtype dt, const unsigned char *base, size_t row_bytes, int n, int d,
                       const float *q, int r, float *scores, int ld, bool prefetch);
/* Value accumulation into ATTEND_PARTS partial sums per head, so that the
 * result depends only on each row's index in the whole score row, never on
 * how the rows are split into runs or the heads into groups (the sum is
 * bit-identical however the ring wraps or the heads are spread over
 * threads), while the kernels keep independent FMA chains:
 *   acc[(h*ATTEND_PARTS + (g0+i) % ATTEND_PARTS)*d + j] += p[h*ld + i] * row_i[j]
 * for i < n, in increasing i; acc: (r, ATTEND_PARTS, d), g0: the index of
 * row 0 in the score row (p points at its score).  The caller sums the
 * parts in order 0..ATTEND_PARTS-1 as ((0 + 1) + (2 + 3)). */
#define ATTEND_PARTS 4
void attend_mix_rows(enum kv_dtype dt, const unsigned char *base, size_t row_bytes, int n, int d,
                     const float *p, int ld, int r, float *acc, int g0, bool prefetch);
/* Same over rows of int8/int4 codes (row_bytes apart): raw code dot products. */
void attend_score_codes(int bits, const uint8_t *base, size_t row_bytes, int n, int d,
                        const float *q, int r, float *scores, int ld);
/* Same as attend_mix_rows with weights w over codes. */
void attend_mix_codes(int bits, const uint8_t *base, size_t row_bytes, int n, int d, const float *w,
                      int ld, int r, float *acc, int g0);
/* scores[i] <- exp(scores[i] - max) in place; returns their sum. */
float attend_exp_sum(float *scores, int n);
/* The same with a learned sink logit (gpt-oss) beside the scores: the max
 * is over the scores and sink, *sink_exp (when not NULL) gets exp(sink -
 * max), and the sum returned is the scores' alone.  sink -INFINITY: no
 * sink, the result bit-identical to attend_exp_sum's. */
float attend_exp_sum_sink(float *scores, int n, float sink, float *sink_exp);
