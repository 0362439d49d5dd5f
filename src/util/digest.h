/* SHA-256 of a buffer, of an open file or of a named file, and the one
 * lower-case hex encoder every id and digest in sinkd is written with. */
#pragma once

#include <stddef.h>

#define DIGEST_SHA256_BYTES 32
#define DIGEST_SHA256_HEX_LEN 65 /* 64 hex digits and the NUL */

/* The SHA-256 of buf[0..n) into md. */
void digest_sha256(const void *buf, size_t n, unsigned char md[DIGEST_SHA256_BYTES]);

/* bytes[0..n) as 2n lower-case hex digits and a NUL into out (2n+1 bytes). */
void digest_hex(const unsigned char *bytes, size_t n, char *out);

/* digest_sha256 written as hex. */
void digest_sha256_hex(const void *buf, size_t n, char out[DIGEST_SHA256_HEX_LEN]);

/* The SHA-256 of what fd reads, to its end or to max_bytes (SIZE_MAX: no
 * bound), EINTR retried.  A failed read is not an error of the digest: it
 * returns 0 and puts the errno in *read_errno (0 when all was read).  A
 * failure of the digest itself returns a negative code with err. */
int digest_sha256_fd(int fd, size_t max_bytes, unsigned char md[DIGEST_SHA256_BYTES],
                     int *read_errno, char *err, size_t err_len);

/* The SHA-256 of the whole file at path, as hex: 0, or a negative errno
 * (open or read failures too) with err naming the path. */
int digest_file_sha256_hex(const char *path, char out[DIGEST_SHA256_HEX_LEN], char *err,
                           size_t err_len);
