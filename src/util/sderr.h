/* sinkd's own error codes: the failures that errno has no word for.
 *
 * Functions return 0 or a negative code.  Plain errno values (-EINVAL,
 * -ENOMEM, -ENOENT, -EBUSY, -EEXIST, ...) keep their usual meaning; a failure
 * that needs a meaning of its own (a snapshot of another model, a session
 * limit, a revision past the window) gets a name here instead of borrowing
 * an errno whose meaning a reader would have to guess.  The values lie far
 * below any errno, so the two sets never meet.  server/respond.c maps every
 * code to an HTTP status once; sderr_name() gives the name for logs. */
#pragma once

enum sderr {
	SDERR_BASE = -4096,
	/* a snapshot or stored session was made by another model or geometry */
	SDERR_MODEL_MISMATCH = SDERR_BASE,
	/* limits.max_sessions sessions exist */
	SDERR_MAX_SESSIONS = SDERR_BASE - 1,
	/* the caller's key holds limits.per_key.max_sessions sessions */
	SDERR_OWNER_SESSIONS = SDERR_BASE - 2,
	/* a field's value is outside what the server allows (max_tokens past
	 * the limit, a pin longer than the sink tier, a token id past the
	 * vocabulary) */
	SDERR_OUT_OF_RANGE = SDERR_BASE - 3,
	/* the request contradicts the session's state: revise_last_tokens
	 * reaches past what the window still holds */
	SDERR_CONFLICT = SDERR_BASE - 4,
	/* a module was handed input its caller promised to have checked (the
	 * server's gen_prepare checks every request before the scheduler sees
	 * it): the caller's bug, never the client's fault */
	SDERR_UNCHECKED = SDERR_BASE - 5,
	SDERR_LAST = SDERR_BASE - 5,
};

/* "model_mismatch", ...; NULL for a code that is not one of these. */
const char *sderr_name(int rc);
