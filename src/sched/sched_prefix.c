/* The prefix cache's store (sched_prefix.h): entries keyed by the chained
 * hash of their tokens in a small hash table, each with its own copy of the
 * geometry it was computed under and of its tokens, so a hit is confirmed
 * on both; a use counter for least-recently-used eviction; references that
 * pin an entry; stale entries (another geometry after a reload) that no
 * lookup finds and that leave with their last reference.  It holds what
 * the scheduler computed; it computes nothing and never calls the backend
 * except to free a backend prefix. */
#include "sched/sched_prefix.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/digest.h"
#include "util/errbuf.h"

/* Buckets of the hash table: enough for the entries a few hundred MiB of
 * prefixes make; chains stay short beyond that. */
#define PREFIX_BUCKETS 256

struct sched_prefix_entry {
	enum sched_prefix_kind kind;
	bool ready;                  /* published */
	bool stale;                  /* out of the table: freed at its last reference */
	struct cache_geometry *geom; /* a malloc'd copy */
	int32_t *tokens;             /* (n_tokens) */
	int n_tokens;
	unsigned char key[DIGEST_SHA256_BYTES];  /* chained hash of the tokens */
	unsigned char rows[DIGEST_SHA256_BYTES]; /* SHARED: sched_prefix_rows_digest */
	struct backend_prefix *prefix;           /* SHARED, published */
	struct kv_image image;                   /* IMAGE, published */
	size_t bytes;
	int refs;
	uint64_t last_use;
	struct sched_prefix_entry *prev, *next; /* every entry, stale ones too */
	struct sched_prefix_entry *hnext;       /* its bucket's chain (not stale) */
};

struct sched_prefix {
	struct backend *be;
	size_t max_bytes;
	uint64_t clock;              /* the use counter */
	struct cache_geometry *geom; /* the last set_geometry's; NULL: none yet */
	struct sched_prefix_entry *head;
	struct sched_prefix_entry *bucket[PREFIX_BUCKETS];
	struct sched_prefix_stats st;
};

/* ---- keys ---------------------------------------------------------------- */

/* The hash of the block tokens[0, n) (n <= SCHED_PREFIX_BLOCK) chained onto
 * prev: SHA-256 of prev, then the token ids as little-endian int32. */
static void block_hash(const unsigned char prev[DIGEST_SHA256_BYTES], const int32_t *tokens, int n,
                       unsigned char out[DIGEST_SHA256_BYTES])
{
	unsigned char buf[DIGEST_SHA256_BYTES + 4 * SCHED_PREFIX_BLOCK];
	memcpy(buf, prev, DIGEST_SHA256_BYTES);
	for (int i = 0; i < n; i++) {
		uint32_t v = (uint32_t)tokens[i];
		unsigned char *p = buf + DIGEST_SHA256_BYTES + 4 * i;
		p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
		p[2] = (unsigned char)(v >> 16), p[3] = (unsigned char)(v >> 24);
	}
	digest_sha256(buf, DIGEST_SHA256_BYTES + 4 * (size_t)n, out);
}

/* The chained hash of tokens[0, n), its last block partial when n is not a
 * whole number of blocks; hashes[k-1] (when not NULL) the hash of the first
 * k whole blocks. */
static void chain_hash(const int32_t *tokens, int n, unsigned char out[DIGEST_SHA256_BYTES],
                       unsigned char (*hashes)[DIGEST_SHA256_BYTES])
{
	unsigned char h[DIGEST_SHA256_BYTES] = {0};
	for (int at = 0, k = 0; at < n; at += SCHED_PREFIX_BLOCK, k++) {
		int len = n - at < SCHED_PREFIX_BLOCK ? n - at : SCHED_PREFIX_BLOCK;
		block_hash(h, tokens + at, len, h);
		if (hashes && len == SCHED_PREFIX_BLOCK)
			memcpy(hashes[k], h, DIGEST_SHA256_BYTES);
	}
	memcpy(out, h, DIGEST_SHA256_BYTES);
}

static size_t bucket_of(const unsigned char key[DIGEST_SHA256_BYTES])
{
	return ((size_t)key[0] | (size_t)key[1] << 8) % PREFIX_BUCKETS;
}

/* The entry of this kind, key, geometry and tokens in the table, or NULL. */
static struct sched_prefix_entry *table_find(const struct sched_prefix *pc,
                                             enum sched_prefix_kind kind,
                                             const unsigned char key[DIGEST_SHA256_BYTES],
                                             const struct cache_geometry *g, const int32_t *tokens,
                                             int n)
{
	for (struct sched_prefix_entry *e = pc->bucket[bucket_of(key)]; e; e = e->hnext)
		if (e->kind == kind && e->n_tokens == n &&
		    memcmp(e->key, key, DIGEST_SHA256_BYTES) == 0 &&
		    memcmp(e->tokens, tokens, (size_t)n * sizeof(*tokens)) == 0 &&
		    cache_geometry_equal(e->geom, g))
			return e;
	return NULL;
}

static void table_remove(struct sched_prefix *pc, struct sched_prefix_entry *e)
{
	struct sched_prefix_entry **p = &pc->bucket[bucket_of(e->key)];
	while (*p && *p != e)
		p = &(*p)->hnext;
	if (*p)
		*p = e->hnext;
	e->hnext = NULL;
}

/* A published entry was used: the most recently used from now. */
static struct sched_prefix_entry *touch(struct sched_prefix *pc, struct sched_prefix_entry *e)
{
	if (e && e->ready)
		e->last_use = ++pc->clock;
	return e;
}

/* ---- entries ------------------------------------------------------------- */

/* Frees e's payload, returning its bytes to the stats (e stays). */
static void entry_drop_payload(struct sched_prefix *pc, struct sched_prefix_entry *e)
{
	if (e->ready) {
		pc->st.bytes -= e->bytes;
		pc->st.entries--;
	} else {
		pc->st.pending--;
	}
	if (e->prefix)
		pc->be->ops->prefix_free(pc->be, e->prefix);
	e->prefix = NULL;
	kv_image_free(&e->image);
	e->bytes = 0;
	e->ready = false;
}

/* Unlinks and frees e (no reference may be left). */
static void entry_free(struct sched_prefix *pc, struct sched_prefix_entry *e)
{
	assert(e->refs == 0);
	if (!e->stale)
		table_remove(pc, e);
	entry_drop_payload(pc, e);
	if (e->prev)
		e->prev->next = e->next;
	else
		pc->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	free(e->geom);
	free(e->tokens);
	free(e);
}

/* The least recently used published entry that no session references. */
static struct sched_prefix_entry *lru_victim(const struct sched_prefix *pc)
{
	struct sched_prefix_entry *victim = NULL;
	for (struct sched_prefix_entry *e = pc->head; e; e = e->next)
		if (e->ready && e->refs == 0 && (!victim || e->last_use < victim->last_use))
			victim = e;
	return victim;
}

/* Evicts least recently used unreferenced entries until `more` bytes fit
 * beside the published ones; false (nothing evicted) when they cannot. */
static bool make_room(struct sched_prefix *pc, size_t more)
{
	if (more > pc->max_bytes || pc->st.bytes_referenced > pc->max_bytes - more)
		return false;
	while (pc->st.bytes > pc->max_bytes - more) {
		struct sched_prefix_entry *victim = lru_victim(pc);
		assert(victim);
		entry_free(pc, victim);
		pc->st.evicted++;
	}
	return true;
}

/* ---- the store ----------------------------------------------------------- */

int sched_prefix_new(struct backend *be, size_t max_bytes, struct sched_prefix **out, char *err,
                     size_t err_len)
{
	*out = NULL;
	struct sched_prefix *pc = calloc(1, sizeof(*pc));
	if (!pc)
		return err_set(err, err_len, -ENOMEM, "prefix cache: out of memory");
	pc->be = be;
	pc->max_bytes = max_bytes;
	*out = pc;
	return 0;
}

void sched_prefix_free(struct sched_prefix *pc)
{
	if (!pc)
		return;
	while (pc->head) {
		pc->head->refs = 0; /* (the sessions were freed first) */
		entry_free(pc, pc->head);
	}
	free(pc->geom);
	free(pc);
}

void sched_prefix_set_max_bytes(struct sched_prefix *pc, size_t max_bytes)
{
	pc->max_bytes = max_bytes;
	struct sched_prefix_entry *victim;
	while (pc->st.bytes > pc->max_bytes && (victim = lru_victim(pc))) {
		entry_free(pc, victim);
		pc->st.evicted++;
	}
}

size_t sched_prefix_evict_unreferenced(struct sched_prefix *pc,
                                       const struct sched_prefix_entry *keep)
{
	size_t freed = 0;
	for (struct sched_prefix_entry *e = pc->head, *next; e; e = next) {
		next = e->next;
		if (e == keep || !e->ready || e->refs > 0 || e->kind != SCHED_PREFIX_SHARED)
			continue;
		freed += e->bytes;
		entry_free(pc, e);
		pc->st.evicted++;
	}
	return freed;
}

/* Whether an entry computed under e->geom still serves new sessions of
 * geometry g: the same geometry, or (SHARED) g pinned to its tokens. */
static bool entry_current(const struct sched_prefix_entry *e, const struct cache_geometry *g,
                          struct cache_geometry *scratch)
{
	if (cache_geometry_equal(e->geom, g))
		return true;
	if (e->kind != SCHED_PREFIX_SHARED)
		return false;
	memcpy(scratch, g, sizeof(*scratch));
	cache_geometry_pin(scratch, e->n_tokens);
	return cache_geometry_equal(e->geom, scratch);
}

void sched_prefix_set_geometry(struct sched_prefix *pc, const struct cache_geometry *g)
{
	if (pc->geom && cache_geometry_equal(pc->geom, g))
		return;
	struct cache_geometry *copy = malloc(sizeof(*copy));
	struct cache_geometry *scratch = malloc(sizeof(*scratch));
	if (copy)
		memcpy(copy, g, sizeof(*copy));
	free(pc->geom);
	pc->geom = copy; /* (NULL: the next call compares again, which is safe) */
	for (struct sched_prefix_entry *e = pc->head, *next; e; e = next) {
		next = e->next;
		if (e->stale || (scratch && entry_current(e, g, scratch)))
			continue;
		table_remove(pc, e);
		e->stale = true;
		if (e->ready && e->refs == 0)
			entry_free(pc, e);
	}
	free(scratch);
}

void sched_prefix_get_stats(const struct sched_prefix *pc, struct sched_prefix_stats *out)
{
	*out = pc->st;
}

/* ---- lookups ------------------------------------------------------------- */

struct sched_prefix_entry *sched_prefix_find_shared(struct sched_prefix *pc,
                                                    const struct cache_geometry *g,
                                                    const int32_t *tokens, int n)
{
	unsigned char key[DIGEST_SHA256_BYTES];
	if (pc->max_bytes == 0 || n <= 0)
		return NULL;
	chain_hash(tokens, n, key, NULL);
	return touch(pc, table_find(pc, SCHED_PREFIX_SHARED, key, g, tokens, n));
}

struct sched_prefix_entry *sched_prefix_find_rows(struct sched_prefix *pc,
                                                  const struct cache_geometry *g,
                                                  const unsigned char digest[32])
{
	if (pc->max_bytes == 0)
		return NULL;
	for (struct sched_prefix_entry *e = pc->head; e; e = e->next)
		if (e->kind == SCHED_PREFIX_SHARED && e->ready && !e->stale &&
		    memcmp(e->rows, digest, DIGEST_SHA256_BYTES) == 0 &&
		    cache_geometry_equal(e->geom, g))
			return touch(pc, e);
	return NULL;
}

struct sched_prefix_entry *sched_prefix_find_image(struct sched_prefix *pc,
                                                   const struct cache_geometry *g,
                                                   const int32_t *tokens, int n_max)
{
	int k_max = n_max / SCHED_PREFIX_BLOCK;
	if (pc->max_bytes == 0 || k_max <= 0 || pc->head == NULL)
		return NULL;
	unsigned char key[DIGEST_SHA256_BYTES];
	unsigned char(*hashes)[DIGEST_SHA256_BYTES] = malloc((size_t)k_max * sizeof(*hashes));
	if (!hashes)
		return NULL; /* (a miss: the prompt is computed) */
	chain_hash(tokens, k_max * SCHED_PREFIX_BLOCK, key, hashes);
	struct sched_prefix_entry *e = NULL;
	for (int k = k_max; k >= 1 && !e; k--)
		e = table_find(pc, SCHED_PREFIX_IMAGE, hashes[k - 1], g, tokens,
		               k * SCHED_PREFIX_BLOCK);
	free(hashes);
	return touch(pc, e);
}

/* ---- claims and publishing ----------------------------------------------- */

int sched_prefix_claim(struct sched_prefix *pc, enum sched_prefix_kind kind,
                       const struct cache_geometry *g, const int32_t *tokens, int n,
                       size_t est_bytes, struct sched_prefix_entry **out)
{
	unsigned char key[DIGEST_SHA256_BYTES];
	*out = NULL;
	if (n <= 0 || (kind == SCHED_PREFIX_IMAGE && n % SCHED_PREFIX_BLOCK != 0))
		return -EINVAL;
	if (pc->max_bytes == 0 || est_bytes > pc->max_bytes)
		return -ENOSPC;
	chain_hash(tokens, n, key, NULL);
	if (table_find(pc, kind, key, g, tokens, n))
		return -EEXIST;
	struct sched_prefix_entry *e = calloc(1, sizeof(*e));
	if (e) {
		e->geom = malloc(sizeof(*e->geom));
		e->tokens = malloc((size_t)n * sizeof(*tokens));
	}
	if (!e || !e->geom || !e->tokens) {
		if (e)
			free(e->geom), free(e->tokens);
		free(e);
		return -ENOMEM;
	}
	memcpy(e->geom, g, sizeof(*g));
	memcpy(e->tokens, tokens, (size_t)n * sizeof(*tokens));
	memcpy(e->key, key, sizeof(key));
	e->kind = kind;
	e->n_tokens = n;
	e->next = pc->head;
	if (pc->head)
		pc->head->prev = e;
	pc->head = e;
	size_t b = bucket_of(key);
	e->hnext = pc->bucket[b];
	pc->bucket[b] = e;
	pc->st.pending++;
	*out = e;
	return 0;
}

/* Makes pending e published with `bytes` (its payload already set), or
 * drops it: -ESTALE when a reload made it stale meanwhile, -ENOSPC when it
 * cannot fit. */
static int publish(struct sched_prefix *pc, struct sched_prefix_entry *e, size_t bytes)
{
	assert(!e->ready);
	int rc = e->stale ? -ESTALE : make_room(pc, bytes) ? 0 : -ENOSPC;
	if (rc) {
		entry_free(pc, e);
		return rc;
	}
	pc->st.pending--;
	pc->st.entries++;
	pc->st.bytes += bytes;
	e->bytes = bytes;
	e->ready = true;
	e->last_use = ++pc->clock;
	return 0;
}

int sched_prefix_publish_shared(struct sched_prefix *pc, struct sched_prefix_entry *e,
                                struct backend_prefix *p, size_t bytes,
                                const unsigned char digest[32])
{
	assert(e->kind == SCHED_PREFIX_SHARED);
	e->prefix = p;
	memcpy(e->rows, digest, DIGEST_SHA256_BYTES);
	return publish(pc, e, bytes);
}

int sched_prefix_publish_image(struct sched_prefix *pc, struct sched_prefix_entry *e,
                               struct kv_image *im)
{
	assert(e->kind == SCHED_PREFIX_IMAGE);
	e->image = *im;
	im->data = NULL;
	im->bytes = 0;
	return publish(pc, e, e->image.bytes);
}

void sched_prefix_abandon(struct sched_prefix *pc, struct sched_prefix_entry *e)
{
	assert(!e->ready && e->refs == 0);
	entry_free(pc, e);
}

/* ---- references ---------------------------------------------------------- */

void sched_prefix_ref(struct sched_prefix *pc, struct sched_prefix_entry *e)
{
	assert(e->ready);
	if (e->refs++ == 0)
		pc->st.bytes_referenced += e->bytes;
	pc->st.refs++;
	touch(pc, e);
}

void sched_prefix_unref(struct sched_prefix *pc, struct sched_prefix_entry *e)
{
	assert(e->ready && e->refs > 0);
	pc->st.refs--;
	if (--e->refs > 0)
		return;
	pc->st.bytes_referenced -= e->bytes;
	if (e->stale)
		entry_free(pc, e);
	else if (pc->st.bytes > pc->max_bytes)
		sched_prefix_set_max_bytes(pc, pc->max_bytes); /* a shrink waited for it */
}

/* ---- an entry ------------------------------------------------------------ */

bool sched_prefix_entry_ready(const struct sched_prefix_entry *e)
{
	return e->ready;
}

enum sched_prefix_kind sched_prefix_entry_kind(const struct sched_prefix_entry *e)
{
	return e->kind;
}

int sched_prefix_entry_tokens(const struct sched_prefix_entry *e)
{
	return e->n_tokens;
}

size_t sched_prefix_entry_bytes(const struct sched_prefix_entry *e)
{
	return e->bytes;
}

int sched_prefix_entry_refs(const struct sched_prefix_entry *e)
{
	return e->refs;
}

const struct backend_prefix *sched_prefix_entry_prefix(const struct sched_prefix_entry *e)
{
	return e->ready ? e->prefix : NULL;
}

const struct kv_image *sched_prefix_entry_image(const struct sched_prefix_entry *e)
{
	return e->ready && e->kind == SCHED_PREFIX_IMAGE ? &e->image : NULL;
}

/* ---- the rows of a snapshot ---------------------------------------------- */

int sched_prefix_rows_digest(const struct cache_geometry *g, const struct kv_image *im,
                             unsigned char out[32], char *err, size_t err_len)
{
	struct kv_image_plan plan;
	int rc = kv_image_plan_of(g, &im->n, &im->n_swa, &plan, err, err_len);
	if (rc)
		return rc;
	if (im->bytes != plan.total_bytes || !im->data)
		return err_set(err, err_len, -EINVAL,
		               "cache image: %zu bytes, its counts lay out %zu", im->bytes,
		               plan.total_bytes);
	/* chained per layer: SHA-256 of the sink count, then of each digest so
	 * far and the layer's sink region (keys, values, and the parameters of
	 * quantized sinks), which the layout puts first in every layer */
	unsigned char buf[2 * DIGEST_SHA256_BYTES];
	uint32_t n_sink = (uint32_t)im->n.n_sink;
	unsigned char count[4] = {(unsigned char)n_sink, (unsigned char)(n_sink >> 8),
	                          (unsigned char)(n_sink >> 16), (unsigned char)(n_sink >> 24)};
	digest_sha256(count, sizeof(count), buf);
	for (int l = 0; l < g->n_layers; l++) {
		size_t offset;
		const struct kv_image_layout *lo = kv_image_plan_layer(&plan, g, l, &offset);
		digest_sha256(im->data + offset, lo->off_groups, buf + DIGEST_SHA256_BYTES);
		digest_sha256(buf, sizeof(buf), out);
		memcpy(buf, out, DIGEST_SHA256_BYTES);
	}
	if (g->n_layers == 0)
		memcpy(out, buf, DIGEST_SHA256_BYTES);
	return 0;
}
