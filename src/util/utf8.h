/* UTF-8 coding that never fails (an invalid byte decodes as U+FFFD of
 * length 1) and the RFC 3629 check of one sequence. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point at s (len > 0 bytes left); *n gets its length.
 * Invalid or truncated sequences give U+FFFD with *n = 1. */
uint32_t utf8_decode(const unsigned char *s, size_t len, size_t *n);
/* Writes cp as UTF-8 into out (4 bytes room); returns the length. */
size_t utf8_encode(uint32_t cp, char *out);
/* Length of a valid sequence starting at s, 0 when the bytes so far are a
 * valid but incomplete prefix, -1 when s starts with an invalid byte
 * sequence. */
int utf8_sequence_status(const unsigned char *s, size_t len);
