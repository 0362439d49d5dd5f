/* The prefix cache (inference.prefix_cache): the K/V of prompt prefixes
 * recently computed, for new streams that start with the same tokens, per
 * cache geometry (an entry serves only sessions of a geometry equal to its
 * own: cache_geometry_equal), held within max_bytes, least recently used
 * out first, never an entry a session still references.
 *
 * Two kinds of entry:
 *   SHARED  a pinned prefix: the whole sink tier (S = the geometry's
 *           sink_keep_count tokens, full precision) as a backend_prefix
 *           (engine/backend.h) that sessions read in place
 *           (session_new_shared); its bytes are held once however many
 *           sessions share it.
 *   IMAGE   an unpinned prefix: the canonical cache image (kv_image) of a
 *           session right after its first n tokens (n a whole number of
 *           blocks), which a new session imports (a copy, so nothing shared
 *           changes when its window slides).
 *
 * Keys: the tokens are cut into blocks of SCHED_PREFIX_BLOCK; block i's
 * hash is SHA-256 of block i-1's hash and block i's token ids (vLLM's
 * chained block hash), so the hash of a prompt's first k blocks names that
 * prefix and a longer prompt finds its longest cached prefix by walking its
 * own chain.  A SHARED entry of S tokens, S not a multiple of the block,
 * hashes its last partial block the same way.  Every hit is confirmed on
 * the tokens themselves.
 *
 * An entry may be pending (claimed: a session is computing it); lookups
 * return it, so that other sessions wanting the same prefix can wait for it
 * instead of computing it too; publish fills it, abandon drops it.
 *
 * Not thread-safe: the engine thread alone calls it (the scheduler copies
 * sched_prefix_stats under its lock for /metrics).  Backend prefixes are
 * freed through the backend given at creation. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/geometry.h"
#include "cache/kvimage.h"
#include "engine/backend.h"
#include "util/tuning.h"

#define SCHED_PREFIX_BLOCK TUNING_PREFIX_BLOCK_TOKENS

struct sched_prefix;
struct sched_prefix_entry;

enum sched_prefix_kind {
	SCHED_PREFIX_SHARED = 0,
	SCHED_PREFIX_IMAGE,
};

struct sched_prefix_stats {
	size_t bytes;          /* held by published entries */
	size_t bytes_referenced; /* of them, by entries some session references */
	size_t entries;        /* published */
	size_t pending;        /* claimed, not yet published */
	size_t refs;           /* references held (sessions sharing an entry) */
	uint64_t evicted;      /* entries evicted for room (max_bytes, churn, backend) */
};

/* max_bytes 0: off (every claim refuses, lookups find nothing). */
int sched_prefix_new(struct backend *be, size_t max_bytes, struct sched_prefix **out, char *err,
                     size_t err_len);
/* Frees every entry; no session may still reference one (their backend
 * sessions are freed first). */
void sched_prefix_free(struct sched_prefix *pc);
/* A reload: evicts unreferenced entries, least recently used first, until
 * the published bytes fit (referenced ones stay: they leave when their last
 * session does). */
void sched_prefix_set_max_bytes(struct sched_prefix *pc, size_t max_bytes);
/* A reload changed the geometry of new sessions: entries of any other
 * geometry are stale (never found again; unreferenced ones freed now,
 * referenced ones at their last unref), so the cache starts anew.  A
 * SHARED entry whose geometry is g pinned to its tokens (cache_geometry_pin)
 * is of g; the geometry of the previous call again changes nothing. */
void sched_prefix_set_geometry(struct sched_prefix *pc, const struct cache_geometry *g);
/* The backend found no room for a session: every published SHARED entry
 * no session references goes but keep (NULL: none), counted in `evicted`,
 * since their rows may hold backend memory the KV budget does not count
 * (the CUDA arena).  IMAGE entries stay (host memory).  Returns the bytes
 * freed. */
size_t sched_prefix_evict_unreferenced(struct sched_prefix *pc,
                                       const struct sched_prefix_entry *keep);
void sched_prefix_get_stats(const struct sched_prefix *pc, struct sched_prefix_stats *out);

/* The SHARED entry (published or pending) of exactly tokens[0, n) under
 * geometry g, or NULL. */
struct sched_prefix_entry *sched_prefix_find_shared(struct sched_prefix *pc,
                                                    const struct cache_geometry *g,
                                                    const int32_t *tokens, int n);
/* The published SHARED entry of geometry g whose rows have this digest
 * (sched_prefix_rows_digest), or NULL: a restored snapshot's sinks shared
 * again. */
struct sched_prefix_entry *sched_prefix_find_rows(struct sched_prefix *pc,
                                                  const struct cache_geometry *g,
                                                  const unsigned char digest[32]);
/* The IMAGE entry (published or pending) of geometry g for the longest
 * prefix tokens[0, k * SCHED_PREFIX_BLOCK) with k * SCHED_PREFIX_BLOCK <=
 * n_max, or NULL. */
struct sched_prefix_entry *sched_prefix_find_image(struct sched_prefix *pc,
                                                   const struct cache_geometry *g,
                                                   const int32_t *tokens, int n_max);

/* A pending entry of tokens[0, n) (n a whole number of blocks for IMAGE)
 * under geometry g, for the session about to compute it.  -EEXIST when one
 * (pending or published) exists, -ENOSPC when the cache is off or n's rows
 * could never fit max_bytes (est_bytes: their expected size, 0: unknown),
 * -ENOMEM. */
int sched_prefix_claim(struct sched_prefix *pc, enum sched_prefix_kind kind,
                       const struct cache_geometry *g, const int32_t *tokens, int n,
                       size_t est_bytes, struct sched_prefix_entry **out);
/* Fills a pending SHARED entry with the backend prefix p (ownership passes:
 * freed with the entry, or at once on failure) of `bytes` bytes and its rows'
 * digest, evicting unreferenced entries for room.  -ENOSPC (the entry is
 * dropped, p freed) when it cannot fit, -ESTALE (the same) when
 * set_geometry made the entry stale while it was pending. */
int sched_prefix_publish_shared(struct sched_prefix *pc, struct sched_prefix_entry *e,
                                struct backend_prefix *p, size_t bytes,
                                const unsigned char digest[32]);
/* Fills a pending IMAGE entry with im (ownership of im->data passes; on
 * failure it is freed and the entry dropped; -ENOSPC as above). */
int sched_prefix_publish_image(struct sched_prefix *pc, struct sched_prefix_entry *e,
                               struct kv_image *im);
/* Drops a pending entry (its session failed or left before computing it). */
void sched_prefix_abandon(struct sched_prefix *pc, struct sched_prefix_entry *e);

/* A session starts (ref) or stops (unref) using a published entry; a hit
 * also makes it the most recently used.  An entry is evictable only at zero
 * references; a stale one is freed at its last unref. */
void sched_prefix_ref(struct sched_prefix *pc, struct sched_prefix_entry *e);
void sched_prefix_unref(struct sched_prefix *pc, struct sched_prefix_entry *e);

bool sched_prefix_entry_ready(const struct sched_prefix_entry *e); /* published */
enum sched_prefix_kind sched_prefix_entry_kind(const struct sched_prefix_entry *e);
int sched_prefix_entry_tokens(const struct sched_prefix_entry *e);
size_t sched_prefix_entry_bytes(const struct sched_prefix_entry *e);
int sched_prefix_entry_refs(const struct sched_prefix_entry *e);
const struct backend_prefix *sched_prefix_entry_prefix(const struct sched_prefix_entry *e);
const struct kv_image *sched_prefix_entry_image(const struct sched_prefix_entry *e);

/* SHA-256 over the sink rows of every layer of an image (per layer its sink
 * keys, then values, as kv_image lays them out) whose counts hold n_sink
 * sinks under geometry g: the same digest for a prefix's image
 * (backend prefix_image of all S rows) and for a snapshot of a session that
 * shared it.  -EINVAL when the image does not fit g. */
int sched_prefix_rows_digest(const struct cache_geometry *g, const struct kv_image *im,
                             unsigned char out[32], char *err, size_t err_len);
