/* Session keys (session_key.h): building them from an owner and an id, and
 * taking them apart.  Pure string work; no allocation. */
#include "session/session_key.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool session_id_valid_n(const char *s, size_t n)
{
	if (n == 0 || n > SESSION_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_hex(s[i]))
			return false;
	return true;
}

bool session_id_valid(const char *id)
{
	return id && session_id_valid_n(id, strnlen(id, SESSION_ID_MAX + 1));
}

bool session_id_nameable(const char *s)
{
	size_t n = strnlen(s, SESSION_ID_NAME_MAX + 1);
	if (n == 0 || n > SESSION_ID_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	return true;
}

void session_owner_tag(const char *owner, char tag[SESSION_OWNER_TAG_LEN + 1])
{
	tag[0] = '\0';
	if (!owner || strncmp(owner, "key:", 4))
		return;
	const char *hex = owner + 4;
	size_t n = 0;
	while (n < SESSION_OWNER_TAG_LEN && is_hex(hex[n]))
		n++;
	if (n != SESSION_OWNER_TAG_LEN || hex[n])
		return; /* not a tag quota_client_name makes: the shared namespace */
	for (size_t i = 0; i < n; i++)
		tag[i] = (char)(hex[i] >= 'A' && hex[i] <= 'F' ? hex[i] - 'A' + 'a' : hex[i]);
	tag[n] = '\0';
}

int session_key_make(const char *owner, const char *id, char key[SESSION_KEY_LEN])
{
	key[0] = '\0';
	if (!session_id_valid(id))
		return -EINVAL;
	char tag[SESSION_OWNER_TAG_LEN + 1];
	session_owner_tag(owner, tag);
	if (tag[0])
		snprintf(key, SESSION_KEY_LEN, "%s-%s", tag, id);
	else
		snprintf(key, SESSION_KEY_LEN, "%s", id);
	return 0;
}

const char *session_key_id(const char *key)
{
	const char *dash = key ? strchr(key, '-') : NULL;
	return dash ? dash + 1 : key;
}

bool session_key_valid(const char *key)
{
	if (!key)
		return false;
	const char *dash = strchr(key, '-');
	if (!dash)
		return session_id_valid(key);
	if (dash - key != SESSION_OWNER_TAG_LEN)
		return false;
	for (const char *p = key; p < dash; p++)
		if (!is_hex(*p) || (*p >= 'A' && *p <= 'F'))
			return false;
	return session_id_valid(dash + 1);
}

bool session_key_owned_by(const char *key, const char *owner)
{
	char tag[SESSION_OWNER_TAG_LEN + 1];
	session_owner_tag(owner, tag);
	const char *dash = strchr(key, '-');
	if (!tag[0])
		return dash == NULL;
	return dash && (size_t)(dash - key) == SESSION_OWNER_TAG_LEN &&
	       !strncmp(key, tag, SESSION_OWNER_TAG_LEN);
}
