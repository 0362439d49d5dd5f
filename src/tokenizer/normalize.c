/* Unicode Normalization Form C (UAX #15) over the tables of nfc_table.c:
 * each code point is fully decomposed (canonical mappings, applied again to
 * their results; Hangul syllables by arithmetic), runs of combining marks
 * are put in canonical order, then each mark is composed with the last
 * starter when nothing between them blocks it.  Bytes that are not UTF-8
 * are carried through as they are (they never compose).  This is the
 * normalizer only; tokenizer_bpe.c decides when to apply it. */
#include "tokenizer/normalize.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "util/utf8.h"

#define RAW_BYTE 0x80000000u /* a byte that is not UTF-8, carried as is */

/* Hangul syllable arithmetic (Unicode chapter 3.12). */
#define S_BASE 0xAC00u
#define L_BASE 0x1100u
#define V_BASE 0x1161u
#define T_BASE 0x11A7u
#define L_COUNT 19u
#define V_COUNT 21u
#define T_COUNT 28u
#define N_COUNT (V_COUNT * T_COUNT)
#define S_COUNT (L_COUNT * N_COUNT)

static int cmp_decomp(const void *key, const void *elem)
{
	uint32_t cp = *(const uint32_t *)key, e = ((const struct nfc_decomp *)elem)->cp;
	return cp < e ? -1 : cp > e;
}

static int cmp_ccc(const void *key, const void *elem)
{
	uint32_t cp = *(const uint32_t *)key, e = ((const struct nfc_ccc *)elem)->cp;
	return cp < e ? -1 : cp > e;
}

static int cmp_comp(const void *key, const void *elem)
{
	const uint32_t *k = key;
	const struct nfc_comp *e = elem;
	if (k[0] != e->a)
		return k[0] < e->a ? -1 : 1;
	return k[1] < e->b ? -1 : k[1] > e->b;
}

/* Code points with no decomposition, class 0, that never compose as the
 * second of a pair: Latin-1, the CJK ideographs, raw bytes.  (Checked
 * against the tables when they were generated.) */
static bool is_inert(uint32_t cp)
{
	return cp < 0x300 || (cp >= 0x3400 && cp < 0xA000) || cp & RAW_BYTE;
}

static uint8_t ccc_of(uint32_t cp)
{
	if (is_inert(cp))
		return 0;
	const struct nfc_ccc *hit = bsearch(&cp, nfc_cccs, nfc_n_cccs, sizeof(*hit), cmp_ccc);
	return hit ? hit->ccc : 0;
}

/* Appends the full canonical decomposition of cp to out (room for 4 more:
 * no decomposition is longer); returns the new count. */
static size_t decompose(uint32_t cp, uint32_t *out, size_t n)
{
	if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
		uint32_t s = cp - S_BASE;
		out[n++] = L_BASE + s / N_COUNT;
		out[n++] = V_BASE + (s % N_COUNT) / T_COUNT;
		if (s % T_COUNT)
			out[n++] = T_BASE + s % T_COUNT;
		return n;
	}
	const struct nfc_decomp *d =
	    cp < 0xC0 || (cp >= 0x3400 && cp < 0xA000) || cp & RAW_BYTE
	        ? NULL
	        : bsearch(&cp, nfc_decomps, nfc_n_decomps, sizeof(*d), cmp_decomp);
	if (!d) {
		out[n++] = cp;
		return n;
	}
	n = decompose(d->a, out, n);
	return d->b ? decompose(d->b, out, n) : n;
}

/* The primary composite of a b, or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b)
{
	if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
		return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
	if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
	    b < T_BASE + T_COUNT)
		return a + (b - T_BASE);
	uint32_t key[2] = {a, b};
	const struct nfc_comp *hit = bsearch(key, nfc_comps, nfc_n_comps, sizeof(*hit), cmp_comp);
	return hit ? hit->c : 0;
}

/* Stable sort of each run of combining marks by combining class. */
static void canonical_order(uint32_t *cp, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		uint8_t c = ccc_of(cp[i]);
		for (size_t j = i; c && j > 0 && ccc_of(cp[j - 1]) > c; j--) {
			uint32_t t = cp[j - 1];
			cp[j - 1] = cp[j];
			cp[j] = t;
		}
	}
}

/* Composes in place (UAX #15's algorithm); returns the new count. */
static size_t compose(uint32_t *cp, size_t n)
{
	if (n == 0)
		return 0;
	size_t starter = 0, k = 1;
	int last = ccc_of(cp[0]) ? 256 : 0; /* text may start with a mark */
	for (size_t i = 1; i < n; i++) {
		uint32_t c = cp[i];
		int cc = ccc_of(c);
		uint32_t comp = last == 256 || is_inert(c) ? 0 : compose_pair(cp[starter], c);
		if (comp && (last < cc || last == 0)) {
			cp[starter] = comp;
			continue;
		}
		if (cc == 0)
			starter = k;
		last = cc;
		cp[k++] = c;
	}
	return k;
}

static bool needs_nfc(const char *text, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)text[i] >= 0xCC) /* lead bytes from U+0300 up */
			return true;
	return false;
}

int unicode_nfc(const char *text, size_t len, char **out, size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	if (!needs_nfc(text, len))
		return 0;
	uint32_t *cp = malloc((4 * len + 4) * sizeof(*cp)); /* <= 4 per byte decomposed */
	if (!cp)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		size_t step;
		const unsigned char *p = (const unsigned char *)text + i;
		uint32_t c = utf8_decode(p, len - i, &step);
		bool raw = c == 0xFFFD && utf8_sequence_status(p, len - i) != 3;
		n = raw ? (cp[n] = RAW_BYTE | *p, n + 1) : decompose(c, cp, n);
		i += step;
	}
	canonical_order(cp, n);
	n = compose(cp, n);
	char *s = malloc(4 * n + 1);
	if (!s) {
		free(cp);
		return -ENOMEM;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (cp[i] & RAW_BYTE)
			s[k++] = (char)(cp[i] & 0xFF);
		else
			k += utf8_encode(cp[i], s + k);
	}
	free(cp);
	*out = s;
	*out_len = k;
	return 0;
}
