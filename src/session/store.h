/* The session store: snapshots of persistent sessions that several daemon
 * instances share, behind one table of operations (store_backend.h) with two
 * implementations: a folder (a local directory or a shared volume; leases
 * are files kept live by their mtimes) and Redis/Valkey (`redis://` or
 * `rediss://`; leases with fencing tokens, TTLs as Redis expiries).
 *
 * Everything here is keyed by session keys (session_key.h: owner tag + id),
 * so a store never answers one tenant about another's session.  This layer
 * owns what both backends share, once:
 *   - the record: a header (magic, generation) in front of the snapshot;
 *   - generations: a session brought back for use gets a generation above
 *     its record's, carried by its lease; a record older than its lease's
 *     generation was superseded by a state that was never written (an
 *     instance died or its store was full) and is refused (-ESTALE), never
 *     resumed;
 *   - the leases this instance holds, refreshed by a background thread every
 *     lease_timeout_s / 3, with their fencing tokens: a write after the lease
 *     was taken over is refused (-ESTALE);
 *   - the instance name's claim: a second live instance with the same name
 *     cannot open the store;
 *   - the policy: records older than ttl_s whose lease is not live expire;
 *     the total stays within max_bytes and each owner within its share
 *     (per_key_bytes): a put by an owner over its share evicts that owner's
 *     own oldest records first, never another's while it is over; past that,
 *     the oldest records of owners over their share go first, then the
 *     oldest of all.  Records leased live elsewhere are never evicted.
 * Every function is safe to call from several threads at once. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "session/session_key.h"

struct sinkd_log;
struct session_store;

struct session_store_options {
	const char *dir;         /* the folder backend: created (0700) when missing */
	const char *url;         /* or Redis: redis://host[:port][/db], rediss://... */
	bool memory;             /* or this process's memory (store_memory.c: parked responses) */
	const char *auth_file;   /* Redis AUTH: a file with "password" or "user password" */
	const char *tls_ca_file; /* rediss: CA bundle (NULL: the system's) */
	uint64_t max_bytes;      /* sessions.store_max_bytes: all records; 0 = none */
	uint64_t per_key_bytes;  /* sessions.per_key_store_bytes; 0 = max_bytes / 8 */
	double lease_timeout_s;  /* sessions.lease_timeout_s; > 0 */
	double ttl_s;            /* scheduler.session_ttl_s; 0 = never expire */
	double sweep_interval_s; /* 0 = 10 s */
	const char *instance;    /* this instance's name: 1..128 printable characters */
	struct sinkd_log *log;     /* evictions and lost leases are logged here (may be NULL) */
};

struct session_store_usage {
	uint64_t files;        /* records in the store now */
	uint64_t bytes;        /* their total size */
	uint64_t evicted;      /* records this store deleted to keep within the bounds */
	uint64_t expired;      /* records this store deleted for being older than ttl_s */
	uint64_t takeovers;    /* stale leases of other instances this store took over */
	uint64_t stale;        /* records refused for being older than their lease's generation */
	uint64_t fenced;       /* writes refused because the lease had changed hands */
};

/* Evictions of one owner (its tag; "" for the shared namespace). */
struct session_store_owner_count {
	char tag[SESSION_OWNER_TAG_LEN + 1];
	uint64_t evicted;
};

/* Opens the backend (dir or url, exactly one), claims the instance name
 * (-EADDRINUSE when another live process holds it: the message names it),
 * and starts the refresh/sweep thread. */
int session_store_open(const struct session_store_options *o, struct session_store **out, char *err,
                       size_t err_len);
/* Stops the thread, drops the instance claim and frees the store; leases
 * stay (release them first when draining).  NULL is fine. */
void session_store_close(struct session_store *st);
/* "folder" or "redis". */
const char *session_store_backend(const struct session_store *st);

/* Takes the lease of key for this instance (see store_backend.h), and
 * remembers it for refreshes and writes.  -EBUSY when another instance
 * holds it live (its name, sanitised, in holder).  *generation (may be
 * NULL) gets the newest generation the lease knows of. */
int session_store_lease_take(struct session_store *st, const char *key, uint64_t *generation,
                             char *holder, size_t holder_len, char *err, size_t err_len);
/* Says that the session's newest state is generation (it is about to
 * diverge from its record).  -ESTALE when our lease was lost. */
int session_store_lease_set_generation(struct session_store *st, const char *key,
                                       uint64_t generation, char *err, size_t err_len);
/* Frees our lease: 0, -ENOENT when we held none, -ESTALE when it had
 * changed hands (left alone). */
int session_store_lease_release(struct session_store *st, const char *key);

/* Writes the snapshot as generation `generation` under our lease (taken
 * for this write and let go after it when we held none), then applies the
 * size bounds.  -ESTALE when
 * the lease changed hands: the write is refused. */
int session_store_put(struct session_store *st, const char *key, uint64_t generation,
                      const void *bytes, size_t n, char *err, size_t err_len);
/* The snapshot of key (malloc'd, *out) and its generation.  -ENOENT when
 * absent, -EFBIG when larger than max_bytes, -ESTALE when our lease knows
 * of a newer generation than the record's (the message says so). */
int session_store_get(struct session_store *st, const char *key, size_t max_bytes,
                      unsigned char **out, size_t *n, uint64_t *generation, char *err,
                      size_t err_len);
/* Deletes the record and its lease entry (absent is fine). */
int session_store_remove(struct session_store *st, const char *key, char *err, size_t err_len);
/* Whether a record of key exists (false for a bad key or a failure). */
bool session_store_exists(struct session_store *st, const char *key);
/* The keys of owner's records (malloc'd array of SESSION_KEY_LEN strings,
 * *keys; free it). */
int session_store_list(struct session_store *st, const char *owner, char (**keys)[SESSION_KEY_LEN],
                       size_t *n, char *err, size_t err_len);

/* One sweep as the thread runs it: expiry and the bounds.  How many records
 * it deleted, or a negative errno. */
int session_store_sweep(struct session_store *st);
/* Usage now (the store is listed) and this store's counters. */
void session_store_get_usage(struct session_store *st, struct session_store_usage *out);
/* The same without listing: files and bytes as the last sweep or bounded
 * put saw them (for /metrics, which must not scan a large store). */
void session_store_get_usage_cached(struct session_store *st, struct session_store_usage *out);
/* Evictions per owner (at most cap owners, the ones with most first). */
size_t session_store_evictions_by_owner(struct session_store *st,
                                        struct session_store_owner_count *out, size_t cap);
