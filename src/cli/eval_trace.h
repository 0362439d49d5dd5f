/* What `sinkd eval --trace FILE.jsonl` and `--heatmap DIR` write while the
 * stream is scored: the cache trace of a scored step as one JSON line (the
 * API's object, cache/cachetrace.h, with the position and the NLL of the
 * token it predicted), and PNG heatmaps (cli/heatmap.h): a step image every
 * N-th scored step, and at the end the lifecycle over every scored step
 * and a summary step image whose brightness is each slot's moving average. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"

struct eval_trace_opts {
	const char *jsonl_path; /* NULL: no JSON lines */
	long trace_every;       /* a line every K-th scored step (>= 1) */
	const char *heatmap_dir; /* NULL: no heatmaps; created when missing */
	long heatmap_every;      /* a step image every N-th scored step (>= 1) */
	int heatmap_layer;       /* lifecycle image of this layer; -1 all */
};

struct eval_trace;

/* Opens the outputs; -EINVAL/-EIO naming the file or folder at fault.
 * -ENOTSUP when the backend gives no traces. */
int eval_trace_new(const struct eval_trace_opts *o, struct backend *be,
                   const struct cache_geometry *g, struct eval_trace **out, char *err,
                   size_t err_len);
void eval_trace_free(struct eval_trace *t);
/* Turns collection on for the session the stream is scored in. */
int eval_trace_start(struct eval_trace *t, struct backend_session *s, char *err, size_t err_len);
/* Whether the k-th scored step (from 0) needs a trace. */
bool eval_trace_wants(const struct eval_trace *t, uint64_t k);
/* After the forward pass whose last token, at `position`, makes the k-th
 * scored prediction (of a token with that NLL): its trace, written where
 * asked. */
int eval_trace_step(struct eval_trace *t, struct backend_session *s, uint64_t k,
                    int64_t position, double nll, char *err, size_t err_len);
/* The end of the stream: the lifecycle and summary images. */
int eval_trace_finish(struct eval_trace *t, struct backend_session *s, char *err,
                      size_t err_len);
