/* UTF-8 coding that never fails (an invalid byte decodes as U+FFFD of
 * length 1) and the RFC 3629 check of one sequence (no overlongs, no
 * surrogates, nothing above U+10FFFF).  The bottom layer's own, so that the
 * logger can escape text without reaching up into the tokenizer; the
 * tokenizers' Unicode tables (categories, White_Space) stay there. */
#include "util/utf8.h"

/* Second-byte bounds that exclude overlongs, surrogates and > U+10FFFF. */
static int utf8_second_ok(unsigned char lead, unsigned char b)
{
	if (lead == 0xE0)
		return b >= 0xA0 && b <= 0xBF;
	if (lead == 0xED)
		return b >= 0x80 && b <= 0x9F;
	if (lead == 0xF0)
		return b >= 0x90 && b <= 0xBF;
	if (lead == 0xF4)
		return b >= 0x80 && b <= 0x8F;
	return b >= 0x80 && b <= 0xBF;
}

static int utf8_expected_len(unsigned char lead)
{
	if (lead < 0x80)
		return 1;
	if (lead >= 0xC2 && lead <= 0xDF)
		return 2;
	if (lead >= 0xE0 && lead <= 0xEF)
		return 3;
	if (lead >= 0xF0 && lead <= 0xF4)
		return 4;
	return -1;
}

int utf8_sequence_status(const unsigned char *s, size_t len)
{
	int need = utf8_expected_len(s[0]);
	if (need < 0)
		return -1;
	for (int i = 1; i < need; i++) {
		if ((size_t)i >= len)
			return 0;
		int ok = i == 1 ? utf8_second_ok(s[0], s[1]) : (s[i] >= 0x80 && s[i] <= 0xBF);
		if (!ok)
			return -1;
	}
	return need;
}

uint32_t utf8_decode(const unsigned char *s, size_t len, size_t *n)
{
	int st = utf8_sequence_status(s, len);
	if (st <= 0) {
		*n = 1;
		return 0xFFFD;
	}
	*n = (size_t)st;
	switch (st) {
	case 1:
		return s[0];
	case 2:
		return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
	case 3:
		return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) |
		       (s[2] & 0x3F);
	default:
		return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
		       ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
	}
}

size_t utf8_encode(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}
