/* The stop-string matcher (OpenAI `stop`): holds back streamed text that
 * may be the start of a stop string and reports when one completes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Stop strings over streamed text: at most STOP_MAX_STRINGS strings of
 * 1..STOP_MAX_LEN bytes each.  Matching is on bytes (UTF-8 safe: a stop
 * string is compared byte for byte; released text is cut only where no stop
 * string can begin, so complete characters stay complete when the stop
 * strings themselves are whole characters). */
#define STOP_MAX_STRINGS 16
#define STOP_MAX_LEN 256
struct stop_matcher;
int stop_matcher_new(const char *const *stops, size_t n_stops, struct stop_matcher **out,
		     char *err, size_t err_len);
void stop_matcher_free(struct stop_matcher *m);
/* Feeds newly decoded text.  Writes to out what can be released now (text
 * that cannot be part of a stop string), returns its length; sets *stopped
 * when a stop string completed (the stop string itself and anything after it
 * are never released; later feeds ignore their text).  Where stops overlap,
 * the one that ends first in the text wins, so the result does not depend on
 * how the text was split.  out is NUL-terminated; with out_cap >= len +
 * STOP_MAX_LEN + 1 everything releasable comes out at once, with less the
 * rest stays held and comes out on the next call. */
size_t stop_matcher_feed(struct stop_matcher *m, const char *text, size_t len, char *out,
			 size_t out_cap, bool *stopped);
/* At the end of generation: releases the held-back text (after a stop, only
 * text before the stop that did not fit in out earlier; call again while it
 * returns out_cap - 1). */
size_t stop_matcher_flush(struct stop_matcher *m, char *out, size_t out_cap);
/* Clears the held-back text and the stopped state for a new generation. */
void stop_matcher_reset(struct stop_matcher *m);
