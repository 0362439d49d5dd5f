/* Small Unicode helpers for the tokenizers: general categories (from the
 * generated table in unicode_table.c) and White_Space.  UTF-8 coding is
 * util/utf8.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* General categories; the order is the one of gen_unicode_table.py. */
enum ucat {
	UCAT_CN = 0,
	UCAT_LU,
	UCAT_LL,
	UCAT_LT,
	UCAT_LM,
	UCAT_LO,
	UCAT_MN,
	UCAT_MC,
	UCAT_ME,
	UCAT_ND,
	UCAT_NL,
	UCAT_NO,
	UCAT_PC,
	UCAT_PD,
	UCAT_PS,
	UCAT_PE,
	UCAT_PI,
	UCAT_PF,
	UCAT_PO,
	UCAT_SM,
	UCAT_SC,
	UCAT_SK,
	UCAT_SO,
	UCAT_ZS,
	UCAT_ZL,
	UCAT_ZP,
	UCAT_CC,
	UCAT_CF,
	UCAT_CS,
	UCAT_CO,
	UCAT_COUNT
};

/* Bit masks over enum ucat for the one-letter classes \p{L}, \p{N}, ... */
#define UCAT_BIT(c) (1u << (c))
#define UCAT_MASK_L                                                                                \
	(UCAT_BIT(UCAT_LU) | UCAT_BIT(UCAT_LL) | UCAT_BIT(UCAT_LT) | UCAT_BIT(UCAT_LM) |           \
	 UCAT_BIT(UCAT_LO))
#define UCAT_MASK_M (UCAT_BIT(UCAT_MN) | UCAT_BIT(UCAT_MC) | UCAT_BIT(UCAT_ME))
#define UCAT_MASK_N (UCAT_BIT(UCAT_ND) | UCAT_BIT(UCAT_NL) | UCAT_BIT(UCAT_NO))
#define UCAT_MASK_P                                                                                \
	(UCAT_BIT(UCAT_PC) | UCAT_BIT(UCAT_PD) | UCAT_BIT(UCAT_PS) | UCAT_BIT(UCAT_PE) |           \
	 UCAT_BIT(UCAT_PI) | UCAT_BIT(UCAT_PF) | UCAT_BIT(UCAT_PO))
#define UCAT_MASK_S (UCAT_BIT(UCAT_SM) | UCAT_BIT(UCAT_SC) | UCAT_BIT(UCAT_SK) | UCAT_BIT(UCAT_SO))
#define UCAT_MASK_Z (UCAT_BIT(UCAT_ZS) | UCAT_BIT(UCAT_ZL) | UCAT_BIT(UCAT_ZP))
#define UCAT_MASK_C                                                                                \
	(UCAT_BIT(UCAT_CN) | UCAT_BIT(UCAT_CC) | UCAT_BIT(UCAT_CF) | UCAT_BIT(UCAT_CS) |           \
	 UCAT_BIT(UCAT_CO))

struct ucat_run {
	uint32_t first; /* first code point of the run */
	uint8_t cat;    /* enum ucat */
};

extern const struct ucat_run ucat_runs[];
extern const size_t ucat_n_runs;

enum ucat unicode_category(uint32_t cp);
/* The Unicode White_Space property (what \s matches). */
bool unicode_is_whitespace(uint32_t cp);
