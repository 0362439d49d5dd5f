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
#define SESSION_OWNER_TAG_LEN 16 /* hex digits of an owner tag */
#define SESSION_KEY_LEN 50       /* tag, '-', id, NUL */

/* 1..32 characters of [0-9a-fA-F]. */
bool session_id_valid(const char *id);
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
