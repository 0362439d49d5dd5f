/* A small backtracking regular-expression matcher over Unicode code points,
 * just large enough for the pre-tokenizer patterns of GPT-2-style tokenizers:
 * alternation, (?:...) groups, classes with ranges, \s \S \d \p{L} \p{Lu}
 * \P{..}, quantifiers ? * + {n} {n,} {n,m} (greedy), the single-class
 * negative lookahead (?!X), and $ (end of the text being split).
 * Leftmost-first (Perl/Oniguruma) semantics. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct ure;

/* Text prepared for matching: code points and, per code point, its general
 * category (enum ucat) with bit 0x80 set when it is White_Space. */
struct ure_text {
	const uint32_t *cp; /* (n) code points */
	const uint8_t *cls; /* (n) category | 0x80 for whitespace */
	size_t n;
};

/* Reusable backtracking stack; zero-initialise, free with ure_scratch_free. */
struct ure_scratch {
	uint32_t *stack; /* pairs (pc, pos) */
	size_t cap;
};

int ure_compile(const char *pattern, struct ure **out, char *err, size_t err_len);
void ure_free(struct ure *re);
/* Tries to match at `pos` with the text ending at `end` (an exclusive bound
 * that $ and lookahead see as the end).  Returns the end of the match, or
 * -1 when there is none, or -ENOMEM. */
long ure_match_at(const struct ure *re, struct ure_scratch *sc, const struct ure_text *t,
                  size_t pos, size_t end);
void ure_scratch_free(struct ure_scratch *sc);
