/* API-key check against SHA-256 digests: "Bearer KEY", or "Basic
 * base64(user:KEY)" for a browser, which cannot send a bearer header when it
 * navigates to the console (the user name is ignored: the key is the
 * secret).  It does not rate-limit failed attempts and keeps no plain keys
 * in memory: only digests (a decoded Basic key is wiped after hashing). */
#include "server/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "util/errbuf.h"

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int auth_keys_parse(char *const *keys, size_t n_keys, struct auth_keys *out, char *err,
                    size_t err_len)
{
	memset(out, 0, sizeof(*out));
	if (!n_keys)
		return 0;
	out->digests = calloc(n_keys, 32);
	if (!out->digests)
		return err_set(err, err_len, -ENOMEM, "server.api_keys: out of memory");
	for (size_t i = 0; i < n_keys; i++) {
		const char *k = keys[i];
		if (!k || strncmp(k, "sha256:", 7) || strlen(k) != 7 + 64)
			goto bad;
		for (int b = 0; b < 32; b++) {
			int hi = hexval(k[7 + 2 * b]), lo = hexval(k[8 + 2 * b]);
			if (hi < 0 || lo < 0)
				goto bad;
			out->digests[i][b] = (unsigned char)(hi << 4 | lo);
		}
		out->n++;
		continue;
	bad:
		auth_keys_deinit(out);
		return err_set(err, err_len, -EINVAL,
		               "server.api_keys[%zu]: expected \"sha256:<64 hex digits>\"", i);
	}
	return 0;
}

void auth_keys_deinit(struct auth_keys *k)
{
	free(k->digests);
	k->digests = NULL;
	k->n = 0;
}

bool auth_check(const struct auth_keys *k, const char *authorization)
{
	return auth_match(k, authorization, NULL);
}

/* A Basic credential longer than this is refused: no real key is. */
#define AUTH_BASIC_MAX 1024

static int b64val(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Strict RFC 4648 base64 (padding required, no spaces) of in[0..n) into
 * out (room for n / 4 * 3); the decoded length or -1. */
static ssize_t b64_decode(const char *in, size_t n, unsigned char *out)
{
	if (n == 0 || n % 4)
		return -1;
	size_t pad = in[n - 1] == '=' ? (in[n - 2] == '=' ? 2 : 1) : 0;
	size_t len = 0;
	for (size_t i = 0; i < n; i += 4) {
		bool last = i + 4 == n;
		int v[4];
		for (int j = 0; j < 4; j++) {
			bool is_pad = last && j >= 4 - (int)pad;
			v[j] = is_pad ? 0 : b64val((unsigned char)in[i + j]);
			if (v[j] < 0)
				return -1;
		}
		uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
		             (uint32_t)v[3];
		size_t take = last ? 3 - pad : 3;
		for (size_t j = 0; j < take; j++)
			out[len++] = (unsigned char)(w >> (16 - 8 * j));
	}
	return (ssize_t)len;
}

/* The key of a Basic credential: what follows the first ':' of the decoded
 * user:password, in buf; its length, or 0 (malformed, no colon, empty). */
static size_t auth_basic_key(const char *cred, unsigned char buf[AUTH_BASIC_MAX],
                             const unsigned char **key)
{
	size_t n = strlen(cred);
	while (n && (cred[n - 1] == ' ' || cred[n - 1] == '\t'))
		n--;
	if (n > AUTH_BASIC_MAX / 3 * 4)
		return 0;
	ssize_t len = b64_decode(cred, n, buf);
	if (len <= 0)
		return 0;
	const unsigned char *colon = memchr(buf, ':', (size_t)len);
	if (!colon)
		return 0;
	*key = colon + 1;
	return (size_t)len - (size_t)(colon + 1 - buf);
}

/* SHA-256 of the key that the Authorization header carries, Bearer or
 * Basic; false when it carries none. */
static bool auth_header_digest(const char *authorization, unsigned char d[32])
{
	bool bearer = authorization && !strncasecmp(authorization, "Bearer ", 7);
	bool basic = authorization && !strncasecmp(authorization, "Basic ", 6);
	if (!bearer && !basic)
		return false;
	const char *cred = authorization + (bearer ? 7 : 6);
	while (*cred == ' ')
		cred++;
	if (basic) {
		unsigned char buf[AUTH_BASIC_MAX];
		const unsigned char *key = NULL;
		size_t len = auth_basic_key(cred, buf, &key);
		if (len)
			SHA256(key, len, d);
		OPENSSL_cleanse(buf, sizeof(buf));
		return len > 0;
	}
	size_t len = strlen(cred);
	while (len && (cred[len - 1] == ' ' || cred[len - 1] == '\t'))
		len--;
	if (!len)
		return false;
	SHA256((const unsigned char *)cred, len, d);
	return true;
}

bool auth_match(const struct auth_keys *k, const char *authorization, int *key_index)
{
	if (key_index)
		*key_index = -1;
	if (!k || k->n == 0)
		return true;
	unsigned char d[32];
	if (!auth_header_digest(authorization, d))
		return false;
	/* Every digest is compared, whatever matched, so timing says nothing;
	 * the index is picked with a mask, not a branch. */
	int found = 0, index = -1;
	for (size_t i = 0; i < k->n; i++) {
		int eq = CRYPTO_memcmp(d, k->digests[i], 32) == 0;
		int take = -(eq & !found); /* all ones at the first match */
		index = (index & ~take) | ((int)i & take);
		found |= eq;
	}
	OPENSSL_cleanse(d, sizeof(d));
	if (key_index)
		*key_index = found ? index : -1;
	return found != 0;
}
