/* SHA-256 (OpenSSL's) over buffers and files, and hex.  One place for the
 * streaming loop and the encoder that gguf, the config watcher, snapshots
 * and the ids used to write each for themselves.  It does not decide how
 * much of a file is worth hashing: callers pass their bound. */
#include "util/digest.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "util/errbuf.h"

void digest_sha256(const void *buf, size_t n, unsigned char md[DIGEST_SHA256_BYTES])
{
	SHA256(buf, n, md);
}

void digest_hex(const unsigned char *bytes, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

void digest_sha256_hex(const void *buf, size_t n, char out[DIGEST_SHA256_HEX_LEN])
{
	unsigned char md[DIGEST_SHA256_BYTES];
	digest_sha256(buf, n, md);
	digest_hex(md, sizeof(md), out);
}

int digest_sha256_fd(int fd, size_t max_bytes, unsigned char md[DIGEST_SHA256_BYTES],
                     int *read_errno, char *err, size_t err_len)
{
	unsigned char buf[1 << 16];
	unsigned md_len = 0;
	int rc = 0;
	*read_errno = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		rc = err_set(err, err_len, -ENOMEM, "OpenSSL SHA-256 setup failed");
		goto out;
	}
	for (size_t left = max_bytes; left > 0;) {
		ssize_t n = read(fd, buf, left < sizeof(buf) ? left : sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			*read_errno = errno;
			goto out;
		}
		if (n == 0)
			break;
		left -= (size_t)n;
		if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1) {
			rc = err_set(err, err_len, -EIO, "OpenSSL SHA-256 update failed");
			goto out;
		}
	}
	if (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != DIGEST_SHA256_BYTES)
		rc = err_set(err, err_len, -EIO, "OpenSSL SHA-256 final failed");
out:
	EVP_MD_CTX_free(ctx);
	return rc;
}

int digest_file_sha256_hex(const char *path, char out[DIGEST_SHA256_HEX_LEN], char *err,
                           size_t err_len)
{
	unsigned char md[DIGEST_SHA256_BYTES];
	int read_errno = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_set(err, err_len, -errno, "%s: cannot open: %s", path, strerror(errno));
	int rc = digest_sha256_fd(fd, SIZE_MAX, md, &read_errno, err, err_len);
	close(fd);
	if (rc < 0) {
		err_prefix(err, err_len, path);
		return rc;
	}
	if (read_errno != 0)
		return err_set(err, err_len, -read_errno, "%s: read error: %s", path,
		               strerror(read_errno));
	digest_hex(md, sizeof(md), out);
	return 0;
}
