/* A directory of session snapshots shared by several daemon instances (a
 * local folder, or a shared volume every instance mounts):
 *   <dir>/<id>.snap   a snapshot: opaque bytes, replaced atomically by put
 *   <dir>/<id>.lease  "<instance>\n": which instance owns the session now
 * Ids are 1..32 hex digits, checked before any path is built.
 *
 * A lease is live while its holder refreshes its mtime: a background thread
 * of the store that holds it touches it every lease_timeout_s / 3.  Another
 * instance may take over a lease that has not been refreshed for
 * lease_timeout_s.  The same thread sweeps every sweep_interval_s: it
 * expires snapshots older than ttl_s whose lease is not live, removes stale
 * temp files and stale leases, and enforces max_bytes.
 *
 * Ages are judged against this host's clock, so instances sharing a volume
 * need clocks synchronised well within lease_timeout_s.  Every function is
 * safe to call from several threads at once. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SESSION_STORE_ID_MAX 32

struct session_store;

struct session_store_options {
	const char *dir;         /* created (0700) when missing; its parent must exist */
	uint64_t max_bytes;      /* sessions.store_max_bytes: bound on all .snap bytes; 0 = none */
	double lease_timeout_s;  /* sessions.lease_timeout_s; > 0 */
	double ttl_s;            /* scheduler.session_ttl_s; 0 = never expire */
	double sweep_interval_s; /* 0 = 10 s */
	const char *instance;    /* this instance's name: 1..128 printable characters */
};

struct session_store_usage {
	uint64_t files;     /* .snap files in the directory now */
	uint64_t bytes;     /* their total size */
	uint64_t evicted;   /* snapshots this store deleted to keep within max_bytes */
	uint64_t expired;   /* snapshots this store deleted for being older than ttl_s */
	uint64_t takeovers; /* stale leases of other instances this store took over */
};

/* 1..32 characters of [0-9a-fA-F], nothing else. */
bool session_store_id_valid(const char *id);

/* Opens (creating if needed) the directory, checks it is writable, and
 * starts the refresh/sweep thread. */
int session_store_open(const struct session_store_options *o, struct session_store **out, char *err,
                       size_t err_len);
/* Stops the thread and frees the store; leases stay on disk (release them
 * first when draining).  NULL is fine. */
void session_store_close(struct session_store *st);

/* Writes the snapshot atomically (temp file, fsync, rename, fsync of the
 * directory), then deletes the oldest other snapshots while the directory
 * holds more than max_bytes, sparing those leased live by another instance. */
int session_store_put(struct session_store *st, const char *id, const void *bytes, size_t n,
                      char *err, size_t err_len);
/* The whole snapshot in a malloc'd buffer (*out, free it; *n its size).
 * -ENOENT when absent, -EFBIG when larger than max_bytes (nothing is
 * allocated then), -ELOOP for a symlink, -EINVAL for another non-regular file. */
int session_store_get(struct session_store *st, const char *id, size_t max_bytes,
                      unsigned char **out, size_t *n, char *err, size_t err_len);
/* Deletes the snapshot (absent is fine) and the lease if this instance holds it. */
int session_store_remove(struct session_store *st, const char *id, char *err, size_t err_len);
/* Whether <id>.snap exists as a regular file (false for a bad id). */
bool session_store_exists(struct session_store *st, const char *id);

/* Takes the session's lease: creates it, refreshes it when it is already
 * ours, or takes it over when another instance let it go stale.  -EBUSY
 * when another instance holds it live; its name (non-printable characters
 * replaced by '?') then goes into holder when holder_len > 0. */
int session_store_lease_take(struct session_store *st, const char *id, char *holder,
                             size_t holder_len, char *err, size_t err_len);
/* Deletes the lease if it names this instance and stops refreshing it:
 * 0 when released, -ENOENT when there was none, -EPERM when another
 * instance holds it (it is left alone), -EINVAL for a bad id. */
int session_store_lease_release(struct session_store *st, const char *id);

/* One sweep as the thread runs it (see the top of this file): how many
 * files it deleted, or a negative errno when the directory could not be read. */
int session_store_sweep(struct session_store *st);

/* Current directory usage (scanned now) and this store's counters. */
void session_store_get_usage(struct session_store *st, struct session_store_usage *out);
