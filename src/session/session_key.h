/* Session keys: where a persistent session lives is (owner, id), never the
 * id alone.  A client names a session by its id (1..32 hex digits); the
 * daemon names it by its key, "<owner tag>-<id>", where the owner tag is
 * the 16 hex digits of the API key's hash (quota_client_name's "key:..."),
 * or by the bare id in the shared namespace of clients without API keys.
 * The scheduler, the session store and the logs use keys, the API uses ids,
 * so the same id under two API keys is two sessions, and no lookup by one
 * key's client can reach another key's session: isolation by construction,
 * not by a check someone could forget. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define SESSION_ID_MAX 32        /* hex digits of a client-visible id */
#define SESSION_ID_NAME_MAX 64   /* bytes of a string a request may give as an id */
#define SESSION_OWNER_TAG_LEN 16 /* hex digits of an owner tag */
#define SESSION_KEY_LEN 50       /* tag, '-', id, NUL */

/* The one rule of a session id: 1..32 characters of [0-9a-fA-F] (ids a
 * client chooses, ids the daemon makes, ids inside keys, snapshots and
 * response ids). */
bool session_id_valid(const char *id);
/* The same rule over the n bytes at s (an id inside a path or a response
 * id, not NUL-terminated there). */
bool session_id_valid_n(const char *s, size_t n);
/* What a request body may give as a session id: 1..64 bytes of printable
 * ASCII without spaces.  Only a valid id can name a session, any other such
 * string names one that is simply not there (404); a string that is not
 * even this is no session id at all (400). */
bool session_id_nameable(const char *s);
/* A key as session_key_make builds it. */
bool session_key_valid(const char *key);
/* The owner tag of an owner name ("key:<16 hex>" gives the 16 hex digits;
 * any other owner, the shared namespace, gives ""). */
void session_owner_tag(const char *owner, char tag[SESSION_OWNER_TAG_LEN + 1]);
/* The key of (owner, id): -EINVAL when id is not a valid id. */
int session_key_make(const char *owner, const char *id, char key[SESSION_KEY_LEN]);
/* The client-visible id inside a key (a pointer into key). */
const char *session_key_id(const char *key);
/* Whether key is in owner's namespace. */
bool session_key_owned_by(const char *key, const char *owner);
