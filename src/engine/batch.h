/* One forward pass's tokens grouped by session, the same way for every
 * backend: sessions in the order of their first token, each session's
 * tokens contiguous (in batch order) in `order`.  It checks the tokens and
 * touches no cache; each backend then checks its caches can take them. */
#pragma once

#include <stddef.h>

#include "engine/backend.h"

/* The first member of every backend's struct backend_session: the batch
 * scratch this module fills (C lets a pointer to a struct point to its
 * first member). */
struct batch_member {
	int n;    /* tokens of this session in the batch */
	int slot; /* index into the plan's sessions, -1 between batches */
};

static inline struct batch_member *batch_member_of(struct backend_session *s)
{
	return (struct batch_member *)(void *)s;
}

/* Arrays the caller owns, sized for the largest batch: sessions and begin
 * (n + 1), order (n). */
struct batch_plan {
	struct backend_session **sessions;
	int *begin; /* session j's tokens are order[begin[j] .. begin[j + 1]) */
	int *order; /* token indices */
	int n_sessions;
	int longest; /* most tokens of one session */
};

/* -EINVAL with the token's index when a token has no session or an id
 * outside 0..n_vocab-1. */
int batch_plan_make(const struct backend_token *tokens, size_t n, int n_vocab, struct batch_plan *p,
                    char *err, size_t err_len);
