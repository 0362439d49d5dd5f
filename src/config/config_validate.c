/* Checks of string-shaped configuration values (addresses, digests).  Pure
 * functions: no I/O, no allocation. */
#include "config/config_validate.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

int config_split_listen(const char *value, char *host, size_t host_len, int *port)
{
	const char *colon;
	const char *host_start = value;
	size_t hlen;
	if (value == NULL || *value == '\0')
		return -EINVAL;
	if (value[0] == '[') {
		const char *close = strchr(value, ']');
		if (close == NULL || close[1] != ':')
			return -EINVAL;
		host_start = value + 1;
		hlen = (size_t)(close - host_start);
		colon = close + 1;
	} else {
		colon = strrchr(value, ':');
		if (colon == NULL || memchr(value, ':', (size_t)(colon - value)) != NULL)
			return -EINVAL; /* bare IPv6 without brackets is ambiguous */
		hlen = (size_t)(colon - value);
	}
	if (hlen + 1 > host_len)
		return -EINVAL;
	if (hlen == 1 && host_start[0] == '*')
		hlen = 0;
	memcpy(host, host_start, hlen);
	host[hlen] = '\0';
	char *end = NULL;
	errno = 0;
	long p = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end != '\0' || p < 1 || p > 65535)
		return -EINVAL;
	*port = (int)p;
	return 0;
}

int config_validate_listen(const char *value, char *msg, size_t msg_len)
{
	char host[256];
	int port;
	if (config_split_listen(value, host, sizeof(host), &port) != 0)
		return err_set(msg, msg_len, -EINVAL,
			       "'%s' is not an address (allowed: host:port, [ipv6]:port, *:port with "
			       "port 1..65535)",
			       value);
	return 0;
}

static int is_hex64(const char *s)
{
	if (strlen(s) != 64)
		return 0;
	for (size_t i = 0; i < 64; i++)
		if (!isxdigit((unsigned char)s[i]))
			return 0;
	return 1;
}

int config_validate_sha256(const char *value, char *msg, size_t msg_len)
{
	if (!is_hex64(value))
		return err_set(msg, msg_len, -EINVAL,
			       "'%.80s' is not a SHA-256 digest (allowed: 64 hex digits)", value);
	return 0;
}

/* What is wrong with a digest entry that starts with "sha256:", told
 * without showing it: only counts. */
static void key_digest_detail(const char *hex, char *out, size_t len)
{
	size_t n = strlen(hex), n_hex = 0;
	while (n_hex < n && isxdigit((unsigned char)hex[n_hex]))
		n_hex++;
	if (n_hex == 64 && strspn(hex + 64, " \t-") == n - 64)
		snprintf(out, len, "; drop the '  -' that sha256sum prints after the digest");
	else
		snprintf(out, len, "; after 'sha256:' come %zu characters, %zu of them hex digits", n,
			 n_hex);
}

/* A wrong entry may be the raw key itself: its first 4 characters and its
 * length are all that the message shows of it. */
int config_validate_key_digest(const char *value, char *msg, size_t msg_len)
{
	if (strncmp(value, "sha256:", 7) == 0 && is_hex64(value + 7))
		return 0;
	char detail[96] = "";
	if (strncmp(value, "sha256:", 7) == 0)
		key_digest_detail(value + 7, detail, sizeof(detail));
	return err_set(msg, msg_len, -EINVAL,
		       "'%.4s...' (%zu characters) is not an API key digest%s (allowed: "
		       "'sha256:' followed by 64 hex digits, the SHA-256 of the key from "
		       "`printf %%s \"$KEY\" | sha256sum`; never the key itself)",
		       value, strlen(value), detail);
}
