/* The table of operations a session-store backend implements: the folder
 * (store_folder.c) and Redis/Valkey (store_redis.c).  Only store.c calls
 * these; everything about owners, generations, quotas and eviction policy
 * lives there, once for both backends.  A backend stores opaque records
 * under keys and keeps leases with fencing tokens; it decides nothing.
 *
 * Keys are what store.c builds from (owner, id): 1..SESSION_STORE_KEY_MAX
 * characters of [0-9a-f-] ("<16 hex owner tag>-<id>", or "<id>" for the
 * shared namespace), checked before any backend sees them.
 *
 * A lease value is (instance, fence, generation):
 *   - fence: a token that grows every time the lease changes hands (a new
 *     take or a take-over), never reused for a key while its lease entry
 *     exists; put refuses (-ESTALE) a write whose fence is no longer the
 *     lease's, so a holder that lost its lease cannot overwrite the new
 *     holder's record;
 *   - generation: the newest state of the session known to exist (set by
 *     the holder with lease_set_generation); the record's own generation is
 *     inside its bytes (store.c's record header), so a record older than
 *     its lease's generation is known stale.
 * A released lease is not deleted: its entry stays, free (no instance),
 * carrying fence and generation, until the session is removed or expires.
 *
 * Every operation is safe to call from several threads at once.  Errors
 * are negative errno values with a message in err that may name the
 * backend's location (store.c keeps such messages away from clients). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SESSION_STORE_KEY_MAX 49 /* 16 hex owner tag, '-', 32 hex id */
#define STORE_INSTANCE_MAX 128

struct store_lease {
	char instance[STORE_INSTANCE_MAX + 1]; /* holder; "" when released */
	uint64_t fence;                        /* 0 = none */
	uint64_t generation;
	bool live; /* held, and refreshed within the lease timeout */
	bool taken_over; /* lease_take: it was another instance's (free or stale) */
};

/* One stored record, as list() sees it. */
struct store_entry {
	char key[SESSION_STORE_KEY_MAX + 1];
	uint64_t bytes;   /* the record's size */
	double age_s;     /* seconds since it was written */
	bool leased_live; /* its lease is held live by some instance (this one too) */
	bool leased_us;   /* ... by this instance */
};

struct store_backend_options {
	const char *dir;       /* folder: the directory */
	const char *url;       /* redis: redis://host[:port][/db] or rediss://... */
	const char *auth_file; /* redis: AUTH from this file: "password" or "user password" */
	const char *tls_ca_file; /* rediss: CA bundle (NULL: the system's) */
	const char *instance;  /* this instance's name: 1..128 printable characters */
	double lease_timeout_s; /* > 0 */
	double ttl_s;          /* records and free leases expire after this; 0 = never */
};

struct store_backend;

struct store_backend_ops {
	const char *name; /* "folder", "redis" */
	int (*open)(const struct store_backend_options *o, struct store_backend **out, char *err,
	            size_t err_len);
	void (*close)(struct store_backend *b);

	/* Writes the record atomically (a reader sees the old or the new one
	 * whole).  fence 0 writes without a lease (a snapshot restored over the
	 * API before its lease exists is never written so: store.c always takes
	 * the lease first); otherwise -ESTALE when the key's lease is not this
	 * instance's with this fence. */
	int (*put)(struct store_backend *b, const char *key, uint64_t fence, const void *bytes,
	           size_t n, char *err, size_t err_len);
	/* The whole record (malloc'd, *out), -ENOENT when absent, -EFBIG when
	 * larger than max_bytes (nothing allocated). */
	int (*get)(struct store_backend *b, const char *key, size_t max_bytes, unsigned char **out,
	           size_t *n, char *err, size_t err_len);
	/* Deletes the record and its lease entry (absent is fine). */
	int (*remove)(struct store_backend *b, const char *key, char *err, size_t err_len);
	/* 1 when a record exists, 0 when not, negative on failure. */
	int (*exists)(struct store_backend *b, const char *key);
	/* Every record whose key starts with prefix (NULL or "": all), in a
	 * malloc'd array (*out, free it). */
	int (*list)(struct store_backend *b, const char *prefix, struct store_entry **out, size_t *n,
	            char *err, size_t err_len);

	/* Takes the key's lease for this instance: a new lease (fence grows),
	 * a free or stale lease taken over (fence grows), or ours already
	 * (refreshed, same fence).  -EBUSY when another instance holds it live
	 * (its value in *out then).  *out gets the lease as it now is, with the
	 * generation the entry carried (0 for a new one). */
	int (*lease_take)(struct store_backend *b, const char *key, struct store_lease *out,
	                  char *err, size_t err_len);
	/* Keeps our lease live.  -ESTALE when it is no longer ours with this fence. */
	int (*lease_refresh)(struct store_backend *b, const char *key, uint64_t fence);
	/* Sets the generation our lease carries.  -ESTALE as above. */
	int (*lease_set_generation)(struct store_backend *b, const char *key, uint64_t fence,
	                            uint64_t generation);
	/* Frees our lease (the entry stays with its fence and generation).
	 * -ESTALE when it is not ours with this fence (left alone). */
	int (*lease_release)(struct store_backend *b, const char *key, uint64_t fence);
	/* The lease entry as it is (-ENOENT when none). */
	int (*lease_peek)(struct store_backend *b, const char *key, struct store_lease *out);

	/* The instance registry: one live claim per instance name.  claim
	 * succeeds when there is none, when it is stale, or when nonce is ours;
	 * -EADDRINUSE when another process holds the name live (its description
	 * in holder).  refresh keeps it live; release drops it. */
	int (*instance_claim)(struct store_backend *b, const char *nonce, char *holder,
	                      size_t holder_len, char *err, size_t err_len);
	int (*instance_refresh)(struct store_backend *b, const char *nonce);
	void (*instance_release)(struct store_backend *b, const char *nonce);

	/* Optional (NULL): housekeeping the sweep does besides expiry and the
	 * bounds (the folder deletes stale temp files and lease entries without
	 * a record older than ttl_s).  How many entries it deleted. */
	int (*maintain)(struct store_backend *b);
};

extern const struct store_backend_ops store_folder_ops;
extern const struct store_backend_ops store_redis_ops;
extern const struct store_backend_ops store_memory_ops;
