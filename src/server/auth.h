/* API keys: the config holds SHA-256 digests ("sha256:<64 hex>"); a request's
 * "Authorization: Bearer <key>", or "Authorization: Basic
 * base64(<anything>:<key>)" (what a browser sends for the web console), is
 * hashed and compared in constant time against every digest.  No keys
 * configured = auth off. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct auth_keys {
	unsigned char (*digests)[32]; /* (n, 32) */
	size_t n;
};

int auth_keys_parse(char *const *keys, size_t n_keys, struct auth_keys *out, char *err,
                    size_t err_len);
void auth_keys_deinit(struct auth_keys *k);
/* `authorization` is the header value or NULL.  True when auth is off or the
 * key's digest (Bearer or Basic) is one of the configured ones. */
bool auth_check(const struct auth_keys *k, const char *authorization);
/* auth_check, and which key matched: *key_index (when not NULL) is its
 * index in k->digests (the per-key limits count by that digest), or -1 when
 * auth is off or the check failed.  Equally constant-time. */
bool auth_match(const struct auth_keys *k, const char *authorization, int *key_index);
