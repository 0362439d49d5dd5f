/* Stop-string matcher for streamed text (OpenAI `stop`).
 *
 * Text arrives in pieces of any size (one token's worth, usually).  The
 * matcher releases at once every byte that can no longer begin a stop string,
 * holds back the longest tail that is still a prefix of one, and reports a
 * stop when the text so far contains a stop string.  The stop string and
 * everything after it are never released.
 *
 * Rule when stops overlap: generation stops where the first stop string
 * *ends* in the text (ties: the one that starts earliest).  That is the point
 * a byte-by-byte stream would notice, so the released text does not depend on
 * how the text was split into pieces.
 *
 * It compares bytes; it knows nothing of tokens, UTF-8 or the tokenizer. */
#include "engine/stopstr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

struct stop_matcher {
	char *stops[STOP_MAX_STRINGS];
	size_t stop_len[STOP_MAX_STRINGS];
	size_t n_stops;
	size_t max_len;
	char *pending; /* (n_pending) text not yet released: held-back tail */
	size_t n_pending;
	size_t cap_pending;
	bool stopped;
};

int stop_matcher_new(const char *const *stops, size_t n_stops, struct stop_matcher **out,
		     char *err, size_t err_len)
{
	*out = NULL;
	if (n_stops > STOP_MAX_STRINGS)
		return err_set(err, err_len, -EINVAL, "at most %d stop strings (got %zu)",
			       STOP_MAX_STRINGS, n_stops);
	for (size_t i = 0; i < n_stops; i++) {
		size_t len = stops[i] ? strlen(stops[i]) : 0;
		if (len == 0 || len > STOP_MAX_LEN)
			return err_set(err, err_len, -EINVAL,
				       "stop string %zu must be 1..%d bytes (got %zu)", i,
				       STOP_MAX_LEN, len);
	}
	struct stop_matcher *m = calloc(1, sizeof(*m));
	if (!m)
		goto oom;
	m->cap_pending = 2 * STOP_MAX_LEN;
	m->pending = malloc(m->cap_pending);
	if (!m->pending)
		goto oom;
	for (size_t i = 0; i < n_stops; i++) {
		m->stops[i] = strdup(stops[i]);
		if (!m->stops[i])
			goto oom;
		m->stop_len[i] = strlen(stops[i]);
		if (m->stop_len[i] > m->max_len)
			m->max_len = m->stop_len[i];
		m->n_stops++;
	}
	*out = m;
	return 0;
oom:
	stop_matcher_free(m);
	return err_set(err, err_len, -ENOMEM, "out of memory for the stop strings");
}

void stop_matcher_free(struct stop_matcher *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_stops; i++)
		free(m->stops[i]);
	free(m->pending);
	free(m);
}

void stop_matcher_reset(struct stop_matcher *m)
{
	m->n_pending = 0;
	m->stopped = false;
}

/* Earliest-ending stop string in buf[0..len): returns its start or -1. */
static ptrdiff_t find_first_stop(const struct stop_matcher *m, const char *buf, size_t len)
{
	ptrdiff_t best_start = -1;
	size_t best_end = 0;
	for (size_t i = 0; i < m->n_stops; i++) {
		const char *hit = memmem(buf, len, m->stops[i], m->stop_len[i]);
		if (!hit)
			continue;
		size_t start = (size_t)(hit - buf), end = start + m->stop_len[i];
		if (best_start < 0 || end < best_end ||
		    (end == best_end && (ptrdiff_t)start < best_start)) {
			best_start = (ptrdiff_t)start;
			best_end = end;
		}
	}
	return best_start;
}

/* Length of the longest tail of buf[0..len) that is a proper prefix of a
 * stop string. */
static size_t held_tail(const struct stop_matcher *m, const char *buf, size_t len)
{
	size_t best = 0;
	for (size_t i = 0; i < m->n_stops; i++) {
		size_t k = m->stop_len[i] - 1;
		if (k > len)
			k = len;
		for (; k > best; k--) {
			if (buf[len - k] == m->stops[i][0] && memcmp(buf + len - k, m->stops[i], k) == 0)
				break;
		}
		if (k > best)
			best = k;
	}
	return best;
}

/* Moves up to n bytes from the front of pending to out (NUL-terminated when
 * out_cap > 0); returns how many moved. */
static size_t release(struct stop_matcher *m, size_t n, char *out, size_t out_cap)
{
	if (out_cap == 0)
		return 0;
	if (n > out_cap - 1)
		n = out_cap - 1;
	memcpy(out, m->pending, n);
	out[n] = '\0';
	memmove(m->pending, m->pending + n, m->n_pending - n);
	m->n_pending -= n;
	return n;
}

static int pending_append(struct stop_matcher *m, const char *text, size_t len)
{
	if (m->n_pending + len > m->cap_pending) {
		size_t cap = m->cap_pending;
		while (cap < m->n_pending + len)
			cap *= 2;
		char *p = realloc(m->pending, cap);
		if (!p)
			return -ENOMEM;
		m->pending = p;
		m->cap_pending = cap;
	}
	memcpy(m->pending + m->n_pending, text, len);
	m->n_pending += len;
	return 0;
}

size_t stop_matcher_feed(struct stop_matcher *m, const char *text, size_t len, char *out,
			 size_t out_cap, bool *stopped)
{
	*stopped = m->stopped;
	if (out_cap > 0)
		out[0] = '\0';
	if (m->stopped) /* pending holds only text before the stop (small out) */
		return release(m, m->n_pending, out, out_cap);
	if (pending_append(m, text, len) != 0) {
		/* No memory to hold the text: release what is pending as is. */
		size_t n = release(m, m->n_pending, out, out_cap);
		return n;
	}
	ptrdiff_t at = find_first_stop(m, m->pending, m->n_pending);
	if (at >= 0) {
		m->n_pending = (size_t)at;
		m->stopped = true;
		*stopped = true;
		return release(m, m->n_pending, out, out_cap);
	}
	size_t hold = held_tail(m, m->pending, m->n_pending);
	return release(m, m->n_pending - hold, out, out_cap);
}

size_t stop_matcher_flush(struct stop_matcher *m, char *out, size_t out_cap)
{
	if (out_cap > 0)
		out[0] = '\0';
	return release(m, m->n_pending, out, out_cap);
}
