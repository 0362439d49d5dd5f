/* Error buffer helpers: formatting and prefixing of the messages that every
 * module returns beside its integer status.  It does no allocation. */
#include "util/errbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(char *err, size_t err_len, int code, const char *fmt, ...)
{
	if (err == NULL || err_len == 0)
		return code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
	return code;
}

void err_prefix(char *err, size_t err_len, const char *prefix)
{
	if (err == NULL || err_len == 0 || prefix == NULL)
		return;
	size_t plen = strlen(prefix);
	size_t mlen = strnlen(err, err_len - 1);
	if (plen + 2 >= err_len)
		return;
	size_t keep = mlen;
	if (plen + 2 + keep >= err_len)
		keep = err_len - plen - 3;
	memmove(err + plen + 2, err, keep);
	err[plen + 2 + keep] = '\0';
	memcpy(err, prefix, plen);
	err[plen] = ':';
	err[plen + 1] = ' ';
}
