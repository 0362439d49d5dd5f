/* Decoding: the bytes each token stands for (SentencePiece: U+2581 is a
 * space and <0xNN> is one byte; byte-level BPE: code points map back to
 * bytes), whole-sequence decoding, and the streaming detokenizer that only
 * ever hands out complete, valid UTF-8 characters.  Control and unused
 * tokens produce no text; an unknown token reads as U+FFFD. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "util/errbuf.h"
#include "util/utf8.h"

#define REPLACEMENT "\xef\xbf\xbd" /* U+FFFD */

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static size_t spm_piece(const char *t, size_t len, char *buf)
{
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		if (i + 3 <= len && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
			buf[n++] = ' ';
			i += 3;
		} else {
			buf[n++] = t[i++];
		}
	}
	return n;
}

static size_t bpe_piece(const char *t, size_t len, char *buf)
{
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		size_t step;
		uint32_t cp = utf8_decode((const unsigned char *)t + i, len - i, &step);
		int b = bpe_cp_to_byte(cp);
		if (b >= 0) {
			buf[n++] = (char)b;
		} else {
			memcpy(buf + n, t + i, step);
			n += step;
		}
		i += step;
	}
	return n;
}

size_t tokenizer_piece(const struct tokenizer *tok, int32_t id, char *buf)
{
	if (id < 0 || (uint32_t)id >= tok->n_vocab)
		return 0;
	size_t len;
	const char *t = tok_text(tok, id, &len);
	switch (tok->type[id]) {
	case TOK_TYPE_CONTROL:
		if (!(tok->attr[id] & TOK_ATTR_PRINTED))
			return 0;
		memcpy(buf, t, len); /* output syntax a parser reads */
		return len;
	case TOK_TYPE_UNUSED:
		return 0;
	case TOK_TYPE_UNKNOWN:
		memcpy(buf, REPLACEMENT, 3);
		return 3;
	case TOK_TYPE_USER_DEFINED:
		memcpy(buf, t, len);
		return len;
	case TOK_TYPE_BYTE:
		if (len == 6 && memcmp(t, "<0x", 3) == 0 && hex_digit(t[3]) >= 0 &&
		    hex_digit(t[4]) >= 0) {
			buf[0] = (char)(hex_digit(t[3]) * 16 + hex_digit(t[4]));
			return 1;
		}
		break;
	default:
		break;
	}
	return tok->kind == TOK_KIND_SPM ? spm_piece(t, len, buf) : bpe_piece(t, len, buf);
}

size_t tokenizer_max_piece_len(const struct tokenizer *tok)
{
	return tok->max_piece;
}

size_t tokenizer_token_piece(const struct tokenizer *tok, int32_t id, char *buf, size_t cap)
{
	char stackbuf[256];
	char *tmp = tok->max_piece <= sizeof(stackbuf) ? stackbuf : malloc(tok->max_piece);
	if (!tmp)
		return 0;
	size_t n = tokenizer_piece(tok, id, tmp);
	if (cap > 0) {
		size_t c = n < cap - 1 ? n : cap - 1;
		memcpy(buf, tmp, c);
		buf[c] = '\0';
	}
	if (tmp != stackbuf)
		free(tmp);
	return n;
}

/* Copies the complete characters of in[0..len) to out (room for cap bytes),
 * invalid sequences as U+FFFD; stops before an incomplete tail, whose start
 * goes to *used.  Returns the bytes written. */
static size_t utf8_emit(const unsigned char *in, size_t len, char *out, size_t cap, size_t *used)
{
	size_t i = 0, n = 0;
	while (i < len) {
		int st = utf8_sequence_status(in + i, len - i);
		if (st == 0)
			break;
		const char *src = st > 0 ? (const char *)in + i : REPLACEMENT;
		size_t sl = st > 0 ? (size_t)st : 3;
		if (n + sl <= cap) {
			memcpy(out + n, src, sl);
			n += sl;
		} else {
			cap = n; /* full: drop the rest, never a partial character */
		}
		i += st > 0 ? (size_t)st : 1;
	}
	*used = i;
	return n;
}

struct strbuf {
	char *s;
	size_t n, cap;
};

static int sb_reserve(struct strbuf *sb, size_t extra)
{
	if (sb->n + extra + 1 <= sb->cap)
		return 0;
	size_t cap = sb->cap ? sb->cap * 2 : 256;
	while (cap < sb->n + extra + 1)
		cap *= 2;
	char *s = realloc(sb->s, cap);
	if (!s)
		return -ENOMEM;
	sb->s = s;
	sb->cap = cap;
	return 0;
}

int tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n_ids, char **text,
                     size_t *len, char *err, size_t err_len)
{
	struct strbuf raw = {0}, valid = {0};
	bool first = tok->add_space_prefix;
	int rc = -ENOMEM;
	*text = NULL;
	*len = 0;
	for (size_t i = 0; i < n_ids; i++) {
		if (sb_reserve(&raw, tok->max_piece) < 0)
			goto out;
		size_t n = tokenizer_piece(tok, ids[i], raw.s + raw.n);
		/* Only the first piece loses its space, even when that leaves it
		 * empty (a lone U+2581): as in detok_stream_push. */
		if (first && n > 0) {
			if (raw.s[raw.n] == ' ')
				memmove(raw.s + raw.n, raw.s + raw.n + 1, --n);
			first = false;
		}
		raw.n += n;
	}
	/* Invalid UTF-8 grows at most 3x as U+FFFD. */
	if (sb_reserve(&valid, 3 * raw.n) < 0)
		goto out;
	size_t used;
	valid.n =
	    raw.n ? utf8_emit((const unsigned char *)raw.s, raw.n, valid.s, 3 * raw.n, &used) : 0;
	if (raw.n && used < raw.n) { /* incomplete tail */
		memcpy(valid.s + valid.n, REPLACEMENT, 3);
		valid.n += 3;
	}
	valid.s[valid.n] = '\0';
	*text = valid.s;
	*len = valid.n;
	valid.s = NULL;
	rc = 0;
out:
	free(raw.s);
	free(valid.s);
	return rc < 0 ? err_set(err, err_len, rc, "detokenize: out of memory") : 0;
}

void detok_stream_init(struct detok_stream *ds, const struct tokenizer *tok,
                       bool strip_leading_space)
{
	memset(ds, 0, sizeof(*ds));
	ds->tok = tok;
	ds->at_start = strip_leading_space;
}

size_t detok_stream_push(struct detok_stream *ds, int32_t id, char *out, size_t out_cap)
{
	const struct tokenizer *tok = ds->tok;
	unsigned char stackbuf[512];
	size_t need = ds->n_pending + tok->max_piece;
	unsigned char *buf = need <= sizeof(stackbuf) ? stackbuf : malloc(need);
	if (out_cap > 0)
		out[0] = '\0';
	if (!buf || out_cap == 0) {
		if (buf != stackbuf)
			free(buf);
		return 0;
	}
	memcpy(buf, ds->pending, ds->n_pending);
	size_t n = tokenizer_piece(tok, id, (char *)buf + ds->n_pending);
	if (ds->at_start && n > 0) {
		if (buf[ds->n_pending] == ' ')
			memmove(buf + ds->n_pending, buf + ds->n_pending + 1, --n);
		ds->at_start = false;
	}
	size_t total = ds->n_pending + n, used;
	size_t w = utf8_emit(buf, total, out, out_cap - 1, &used);
	out[w] = '\0';
	ds->n_pending = total - used; /* < 4: an incomplete but valid prefix */
	memmove(ds->pending, buf + used, ds->n_pending);
	if (buf != stackbuf)
		free(buf);
	return w;
}

size_t detok_stream_flush(struct detok_stream *ds, char *out, size_t out_cap)
{
	size_t w = 0;
	if (ds->n_pending > 0 && out_cap > 3) {
		memcpy(out, REPLACEMENT, 3);
		w = 3;
	}
	if (out_cap > 0)
		out[w] = '\0';
	ds->n_pending = 0;
	return w;
}
