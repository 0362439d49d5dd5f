/* Unicode helpers for the tokenizers: category lookup by binary search over
 * the generated run table, the White_Space property (UTF-8 decoding is
 * util/utf8.c).  No normalisation and no case folding: no tokenizer here needs
 * them. */
#include "tokenizer/unicode.h"

enum ucat unicode_category(uint32_t cp)
{
	if (cp >= 0x110000)
		return UCAT_CN;
	size_t lo = 0, hi = ucat_n_runs; /* answer in [lo, hi) */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (ucat_runs[mid].first <= cp)
			lo = mid;
		else
			hi = mid;
	}
	return (enum ucat)ucat_runs[lo].cat;
}

bool unicode_is_whitespace(uint32_t cp)
{
	if (cp <= 0x20)
		return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
	if (cp < 0x85)
		return false;
	return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
	       cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
