/* Compiled grammars by the SHA-256 of what they were compiled from (the
 * prefix, the schema's unformatted cJSON text, the suffix), so a schema
 * sent with every request is compiled once.  A schema that fails to
 * compile is kept the same way (its message and path), so a client that
 * resends a schema too large to compile pays the compile budget once, not
 * per request.  A small LRU list under one mutex: compiling happens outside
 * the lock, and when two threads compile the same schema at once the
 * second one's copy is dropped.
 *
 * Compiles that miss the cache run on the caller's (HTTP) thread for up to
 * the compile budget (gbuild.c), so each client gets a bucket of compile
 * work, counted in whole budgets: GRAMMAR_CACHE_BURST at once,
 * GRAMMAR_CACHE_PER_S a second after that.  A compile may start while the
 * bucket is not empty and then takes what it cost, so a schema too large
 * to compile takes a whole budget and a small one next to nothing: a
 * client may compile hundreds of small schemas a second but only one
 * blow-up.  Past it the request is refused with a retry time, never
 * queued.  Hits cost nothing.  The table of clients is bounded: a new
 * client takes the slot of one whose bucket has refilled, else of the one
 * seen least recently.  It does not limit how many clients compile at
 * once, nor make two threads that miss on one schema wait for each other. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "grammar/grammar_internal.h"
#include "util/errbuf.h"
#include "util/monotime.h"

struct gc_entry {
	unsigned char key[32];
	struct grammar *g;            /* NULL: the schema does not compile */
	char *err, *path;             /* then: its message and JSON path */
	struct gc_entry *prev, *next; /* most recently used first */
};

#define GC_CLIENTS 64       /* clients whose buckets are kept */
#define GC_MIN_COST 0.01    /* of a compile budget: what the smallest compile costs */
#define GC_CLIENT_ID_MAX 48 /* longer ids share the bucket of their first bytes */

struct gc_client {
	unsigned char id[GC_CLIENT_ID_MAX];
	size_t len;    /* 0: a free slot */
	double tokens; /* compile budgets it may spend now, at time t */
	double t;      /* monotonic seconds */
};

struct grammar_cache {
	pthread_mutex_t lock;
	size_t capacity, n;
	struct gc_entry *head, *tail;
	double burst, per_s; /* a client's bucket, in compile budgets (GB_WORK_BUDGET) */
	struct gc_client clients[GC_CLIENTS];
};

static void gc_entry_free(struct gc_entry *e)
{
	if (!e)
		return;
	grammar_unref(e->g);
	free(e->err);
	free(e->path);
	free(e);
}

int grammar_cache_new(size_t capacity, struct grammar_cache **out)
{
	*out = NULL;
	struct grammar_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (pthread_mutex_init(&c->lock, NULL)) {
		free(c);
		return -ENOMEM;
	}
	c->capacity = capacity ? capacity : 1;
	c->burst = GRAMMAR_CACHE_BURST;
	c->per_s = GRAMMAR_CACHE_PER_S;
	*out = c;
	return 0;
}

void grammar_cache_set_rate(struct grammar_cache *c, double burst, double per_s)
{
	pthread_mutex_lock(&c->lock);
	c->burst = burst;
	c->per_s = per_s;
	for (size_t i = 0; i < GC_CLIENTS; i++)
		c->clients[i].len = 0; /* everyone starts again with a full bucket */
	pthread_mutex_unlock(&c->lock);
}

void grammar_cache_free(struct grammar_cache *c)
{
	if (!c)
		return;
	for (struct gc_entry *e = c->head, *next; e; e = next) {
		next = e->next;
		gc_entry_free(e);
	}
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Each part with its length first, so ("ab", "c") and ("a", "bc") differ. */
static int gc_digest_part(EVP_MD_CTX *ctx, const char *s)
{
	uint64_t len = s ? strlen(s) + 1 : 0; /* NULL and "" differ only here; both mean none */
	if (s && !s[0])
		len = 0;
	return EVP_DigestUpdate(ctx, &len, sizeof(len)) &&
	               (!len || EVP_DigestUpdate(ctx, s, len - 1))
	           ? 0
	           : -ENOMEM;
}

/* regex (not NULL): a whole-text regex, keyed apart from every schema
 * (no schema's text starts with a control byte). */
static int gc_key(const char *prefix, const cJSON *schema, const char *suffix, const char *regex,
                  unsigned char *key)
{
	char *text = schema ? cJSON_PrintUnformatted(schema) : NULL;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned int n = 0;
	int rc = -ENOMEM;
	if ((schema && !text) || !ctx)
		goto out;
	const char *middle = regex ? "\x02regex" : schema ? text : "\x01json_object";
	if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ||
	    gc_digest_part(ctx, regex ? regex : prefix) || gc_digest_part(ctx, middle) ||
	    gc_digest_part(ctx, suffix) || !EVP_DigestFinal_ex(ctx, key, &n) || n != 32)
		goto out;
	rc = 0;
out:
	EVP_MD_CTX_free(ctx);
	cJSON_free(text);
	return rc;
}

static void gc_unlink(struct grammar_cache *c, struct gc_entry *e)
{
	*(e->prev ? &e->prev->next : &c->head) = e->next;
	*(e->next ? &e->next->prev : &c->tail) = e->prev;
	e->prev = e->next = NULL;
}

static void gc_push_front(struct grammar_cache *c, struct gc_entry *e)
{
	e->prev = NULL;
	e->next = c->head;
	*(c->head ? &c->head->prev : &c->tail) = e;
	c->head = e;
}

/* The entry under key, moved to the front; or NULL. */
static struct gc_entry *gc_lookup(struct grammar_cache *c, const unsigned char *key)
{
	for (struct gc_entry *e = c->head; e; e = e->next)
		if (!memcmp(e->key, key, 32)) {
			gc_unlink(c, e);
			gc_push_front(c, e);
			return e;
		}
	return NULL;
}

/* What an entry answers: a new reference to its grammar, or its failure. */
static int gc_answer(const struct gc_entry *e, struct grammar **out, char *path, size_t path_cap,
                     char *err, size_t err_len)
{
	if (e->g) {
		*out = grammar_ref(e->g);
		return 0;
	}
	if (path && path_cap)
		snprintf(path, path_cap, "%s", e->path);
	return err_set(err, err_len, -EINVAL, "%s", e->err);
}

/* Adds an entry at the front (the caller checked that key is not there),
 * dropping the least recently used one past the capacity. */
static void gc_insert(struct grammar_cache *c, struct gc_entry *e)
{
	gc_push_front(c, e);
	if (++c->n > c->capacity) {
		struct gc_entry *old = c->tail;
		gc_unlink(c, old);
		c->n--;
		gc_entry_free(old);
	}
}

static double gc_tokens_at(const struct grammar_cache *c, const struct gc_client *k, double now)
{
	return fmin(c->burst, k->tokens + (now - k->t) * c->per_s);
}

/* Whether slot k is a better one to give a new client than slot than: a
 * free one, else one whose bucket has refilled (forgetting that client
 * costs it nothing), else the one seen least recently. */
static bool gc_client_victim(const struct grammar_cache *c, const struct gc_client *k,
                             const struct gc_client *than, double now)
{
	if (!than)
		return true;
	if (!k->len != !than->len)
		return !k->len;
	bool k_full = gc_tokens_at(c, k, now) >= c->burst;
	if (k_full != (gc_tokens_at(c, than, now) >= c->burst))
		return k_full;
	return k->t < than->t;
}

/* The bucket of client id, refilled up to now; a slot is found or taken. */
static struct gc_client *gc_client_of(struct grammar_cache *c, const void *id, size_t len,
                                      double now)
{
	struct gc_client *slot = NULL;
	len = len < GC_CLIENT_ID_MAX ? len : GC_CLIENT_ID_MAX;
	for (size_t i = 0; i < GC_CLIENTS; i++) {
		struct gc_client *k = &c->clients[i];
		if (k->len == len && !memcmp(k->id, id, len)) {
			k->tokens = gc_tokens_at(c, k, now);
			k->t = now;
			return k;
		}
		if (gc_client_victim(c, k, slot, now))
			slot = k;
	}
	memcpy(slot->id, id, len);
	slot->len = len;
	slot->tokens = c->burst;
	slot->t = now;
	return slot;
}

/* Whether the client may start a compile: its bucket is not empty (a
 * compile's cost is only known after it, gc_rate_charge); else how long
 * until it is. */
static int gc_rate_check(struct grammar_cache *c, const void *client, size_t client_len,
                         int *retry_after_s, char *err, size_t err_len)
{
	if (!client || !client_len)
		return 0;
	pthread_mutex_lock(&c->lock);
	struct gc_client *k = gc_client_of(c, client, client_len, monotime_s());
	double wait = k->tokens > 0 ? 0 : -k->tokens / (c->per_s > 0 ? c->per_s : 1e-9);
	double burst = c->burst, per_s = c->per_s;
	pthread_mutex_unlock(&c->lock);
	if (wait <= 0)
		return 0;
	int secs = wait < 86400 ? (int)ceil(wait + 1e-3) : 86400;
	if (retry_after_s)
		*retry_after_s = secs;
	return err_set(err, err_len, -EAGAIN,
	               "too many new JSON schemas from this client: compiling schemas that are "
	               "not cached may take at most %g compile budgets at once and %g per "
	               "second (one that is too large to compile takes a whole budget); retry "
	               "in %d s (schemas already compiled are not limited)",
	               burst, per_s, secs);
}

/* Takes what a compile cost (its share of the compile budget, at least
 * GC_MIN_COST) from the client's bucket, which may go below empty. */
static void gc_rate_charge(struct grammar_cache *c, const void *client, size_t client_len,
                           uint64_t work)
{
	if (!client || !client_len)
		return;
	double cost = fmax(GC_MIN_COST, (double)work / (double)GB_WORK_BUDGET);
	pthread_mutex_lock(&c->lock);
	gc_client_of(c, client, client_len, monotime_s())->tokens -= cost;
	pthread_mutex_unlock(&c->lock);
}

/* Keeps what key compiled to, unless a thread that compiled it too got
 * there first; *g becomes the kept grammar.  Failures other than a bad
 * schema (out of memory) are not kept: they may not happen again. */
static void gc_keep(struct grammar_cache *c, const unsigned char *key, int rc, struct grammar **g,
                    const char *path, const char *err)
{
	if (rc && rc != -EINVAL)
		return;
	struct gc_entry *e = calloc(1, sizeof(*e));
	if (e && rc && (!(e->err = strdup(err)) || !(e->path = strdup(path ? path : "")))) {
		gc_entry_free(e); /* only the caching is lost */
		e = NULL;
	}
	pthread_mutex_lock(&c->lock);
	struct gc_entry *had = gc_lookup(c, key);
	if (had && had->g && !rc) {
		grammar_unref(*g);
		*g = grammar_ref(had->g);
	} else if (!had && e) {
		memcpy(e->key, key, 32);
		e->g = grammar_ref(*g);
		gc_insert(c, e);
		e = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	gc_entry_free(e);
}

/* What the cache compiles: a schema in its envelope, a regex, or one of
 * several enveloped schemas. */
struct gc_source {
	const char *prefix, *suffix, *regex;
	const cJSON *schema;
	const struct grammar_alt *alts;
	size_t n_alts;
};

/* The key of alternatives: each one's key, hashed in order with a tag no
 * single schema's key starts with. */
static int gc_key_alts(const struct grammar_alt *alts, size_t n, unsigned char *key)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned int len = 0;
	int rc =
	    ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && !gc_digest_part(ctx, "\x03alts")
	        ? 0
	        : -ENOMEM;
	for (size_t i = 0; !rc && i < n; i++) {
		unsigned char one[32];
		rc = gc_key(alts[i].prefix, alts[i].schema, alts[i].suffix, NULL, one);
		if (!rc && !EVP_DigestUpdate(ctx, one, sizeof(one)))
			rc = -ENOMEM;
	}
	if (!rc && (!EVP_DigestFinal_ex(ctx, key, &len) || len != 32))
		rc = -ENOMEM;
	EVP_MD_CTX_free(ctx);
	return rc;
}

static int gc_get(struct grammar_cache *c, const void *client, size_t client_len,
                  const struct gc_source *src, struct grammar **out, int *retry_after_s, char *path,
                  size_t path_cap, char *err, size_t err_len)
{
	const char *prefix = src->prefix, *suffix = src->suffix;
	const cJSON *schema = src->schema;
	unsigned char key[32];
	*out = NULL;
	if (retry_after_s)
		*retry_after_s = 0;
	if (path && path_cap)
		path[0] = '\0';
	if (src->alts ? gc_key_alts(src->alts, src->n_alts, key)
	              : gc_key(prefix, schema, suffix, src->regex, key))
		return err_set(err, err_len, -ENOMEM, "out of memory");
	pthread_mutex_lock(&c->lock);
	struct gc_entry *hit = gc_lookup(c, key);
	int rc = hit ? gc_answer(hit, out, path, path_cap, err, err_len) : 0;
	pthread_mutex_unlock(&c->lock);
	if (hit)
		return rc;
	if ((rc = gc_rate_check(c, client, client_len, retry_after_s, err, err_len)))
		return rc;
	struct grammar *g = NULL;
	uint64_t work = 0;
	if (src->regex)
		rc = grammar_build_regex(src->regex, &g, &work, err, err_len);
	else if (src->alts)
		rc = grammar_build_alts(src->alts, src->n_alts, &g, &work, path, path_cap, err,
		                        err_len);
	else
		rc = grammar_build(prefix, schema, suffix, &g, &work, path, path_cap, err, err_len);
	gc_rate_charge(c, client, client_len, work);
	gc_keep(c, key, rc, &g, path, err);
	*out = g;
	return rc;
}

int grammar_cache_get(struct grammar_cache *c, const void *client, size_t client_len,
                      const char *prefix, const cJSON *schema, const char *suffix,
                      struct grammar **out, int *retry_after_s, char *path, size_t path_cap,
                      char *err, size_t err_len)
{
	struct gc_source src = {.prefix = prefix, .suffix = suffix, .schema = schema};
	return gc_get(c, client, client_len, &src, out, retry_after_s, path, path_cap, err,
	              err_len);
}

int grammar_cache_get_regex(struct grammar_cache *c, const void *client, size_t client_len,
                            const char *regex, struct grammar **out, int *retry_after_s, char *err,
                            size_t err_len)
{
	struct gc_source src = {.regex = regex};
	return gc_get(c, client, client_len, &src, out, retry_after_s, NULL, 0, err, err_len);
}

int grammar_cache_get_alts(struct grammar_cache *c, const void *client, size_t client_len,
                           const struct grammar_alt *alts, size_t n, struct grammar **out,
                           int *retry_after_s, char *path, size_t path_cap, char *err,
                           size_t err_len)
{
	struct gc_source src = {.alts = alts, .n_alts = n};
	return gc_get(c, client, client_len, &src, out, retry_after_s, path, path_cap, err,
	              err_len);
}
