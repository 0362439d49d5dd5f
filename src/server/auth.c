/* Bearer-key check against SHA-256 digests.  It does not rate-limit failed
 * attempts and keeps no plain keys in memory: only digests. */
#include "server/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

bool auth_match(const struct auth_keys *k, const char *authorization, int *key_index)
{
	if (key_index)
		*key_index = -1;
	if (!k || k->n == 0)
		return true;
	if (!authorization || strncasecmp(authorization, "Bearer ", 7))
		return false;
	const char *key = authorization + 7;
	while (*key == ' ')
		key++;
	size_t len = strlen(key);
	while (len && (key[len - 1] == ' ' || key[len - 1] == '\t'))
		len--;
	if (!len)
		return false;
	unsigned char d[32];
	SHA256((const unsigned char *)key, len, d);
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
