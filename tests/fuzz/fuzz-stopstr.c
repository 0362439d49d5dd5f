/* Fuzz target: the stop-string matcher (engine/stopstr.c).  Input: byte 0
 * holds the number of stop strings (mod 5, plus 1) and byte 1 the output
 * buffer size (mod 64 plus 2, or 0: large); then each stop string is a
 * length byte (mod 9, plus 1) and that many bytes; the rest is the text,
 * fed in pieces whose sizes come from the text's own bytes (mod 7).
 * Checks against a plain reference: the released text (all feeds, then
 * flushes) is the text up to the stop string that ends first (ties: the
 * one that starts first), or all of it; *stopped agrees; nothing is
 * released past a stop, whatever the pieces or the buffer size. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/stopstr.h"
#include "util/errbuf.h"

#define MAX_STOPS 5

/* Where the released text must end: the start of the earliest-ending stop
 * string (ties: earliest start), or len when none occurs. */
static size_t reference_cut(char *const *stops, size_t n_stops, const char *text, size_t len,
                            bool *stopped)
{
	for (size_t end = 1; end <= len; end++) {
		size_t best = len + 1;
		for (size_t i = 0; i < n_stops; i++) {
			size_t sl = strlen(stops[i]);
			if (sl <= end && memcmp(text + end - sl, stops[i], sl) == 0 &&
			    end - sl < best)
				best = end - sl;
		}
		if (best <= len) {
			*stopped = true;
			return best;
		}
	}
	*stopped = false;
	return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t n_stops = data[0] % MAX_STOPS + 1;
	size_t cap = data[1] % 66 < 64 ? data[1] % 64 + 2 : 4096;
	size_t pos = 2;
	char *stops[MAX_STOPS];
	size_t n = 0;
	while (n < n_stops && pos < size) {
		size_t sl = data[pos++] % 9 + 1;
		if (sl > size - pos)
			sl = size - pos;
		stops[n] = strndup((const char *)data + pos, sl); /* cut at a NUL, like C */
		pos += sl;
		if (stops[n][0] == '\0') {
			free(stops[n]);
			continue;
		}
		n++;
	}
	const char *text = (const char *)data + pos;
	size_t len = size - pos;
	struct stop_matcher *m = NULL;
	char err[SINKD_ERR_LEN];
	if (stop_matcher_new((const char *const *)stops, n, &m, err, sizeof(err)) != 0)
		abort();
	char *out = malloc(cap); /* exactly cap: ASan sees a write past it */
	char *got = malloc(len + 1);
	size_t got_len = 0;
	bool stopped = false;
	if (!out || !got)
		abort();
	for (size_t i = 0; i < len;) {
		size_t piece = (unsigned char)text[i] % 7 + 1;
		if (piece > len - i)
			piece = len - i;
		bool st = false;
		size_t w = stop_matcher_feed(m, text + i, piece, out, cap, &st);
		if (w >= cap || out[w] != '\0' || got_len + w > len || (stopped && !st))
			abort();
		memcpy(got + got_len, out, w);
		got_len += w;
		stopped = st;
		i += piece;
	}
	for (int guard = 0;; guard++) {
		size_t w = stop_matcher_flush(m, out, cap);
		if (w >= cap || got_len + w > len || guard > (int)len + 2)
			abort();
		memcpy(got + got_len, out, w);
		got_len += w;
		if (w < cap - 1)
			break;
	}
	bool want_stop;
	size_t want = reference_cut(stops, n, text, len, &want_stop);
	if (got_len != want || memcmp(got, text, want) != 0 || stopped != want_stop) {
		fprintf(stderr, "released %zu bytes (stopped %d), want %zu (stopped %d)\n", got_len,
		        stopped, want, want_stop);
		abort();
	}
	stop_matcher_free(m);
	for (size_t i = 0; i < n; i++)
		free(stops[i]);
	free(out);
	free(got);
	return 0;
}
