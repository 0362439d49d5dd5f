/* Names of sinkd's own error codes, for logs and tests; the HTTP mapping is
 * server/respond.c's. */
#include "util/sderr.h"

#include <stddef.h>

static const struct {
	int rc;
	const char *name;
} names[] = {
    {SDERR_MODEL_MISMATCH, "model_mismatch"}, {SDERR_MAX_SESSIONS, "max_sessions"},
    {SDERR_OWNER_SESSIONS, "owner_sessions"}, {SDERR_OUT_OF_RANGE, "out_of_range"},
    {SDERR_CONFLICT, "conflict"},             {SDERR_UNCHECKED, "unchecked"},
};

const char *sderr_name(int rc)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].rc == rc)
			return names[i].name;
	return NULL;
}
