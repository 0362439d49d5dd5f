/* Compiled grammars by the SHA-256 of what they were compiled from (the
 * prefix, the schema's unformatted cJSON text, the suffix), so a schema
 * sent with every request is compiled once.  A small LRU list under one
 * mutex: compiling happens outside the lock, and when two threads compile
 * the same schema at once the second one's copy is dropped. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "grammar/grammar.h"
#include "util/errbuf.h"

struct gc_entry {
	unsigned char key[32];
	struct grammar *g;
	struct gc_entry *prev, *next; /* most recently used first */
};

struct grammar_cache {
	pthread_mutex_t lock;
	size_t capacity, n;
	struct gc_entry *head, *tail;
};

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
	*out = c;
	return 0;
}

void grammar_cache_free(struct grammar_cache *c)
{
	if (!c)
		return;
	for (struct gc_entry *e = c->head, *next; e; e = next) {
		next = e->next;
		grammar_unref(e->g);
		free(e);
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

static int gc_key(const char *prefix, const cJSON *schema, const char *suffix, unsigned char *key)
{
	char *text = schema ? cJSON_PrintUnformatted(schema) : NULL;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned int n = 0;
	int rc = -ENOMEM;
	if ((schema && !text) || !ctx)
		goto out;
	if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) || gc_digest_part(ctx, prefix) ||
	    gc_digest_part(ctx, schema ? text : "\x01json_object") || gc_digest_part(ctx, suffix) ||
	    !EVP_DigestFinal_ex(ctx, key, &n) || n != 32)
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

/* A new reference to the grammar under key, moved to the front; or NULL. */
static struct grammar *gc_lookup(struct grammar_cache *c, const unsigned char *key)
{
	for (struct gc_entry *e = c->head; e; e = e->next)
		if (!memcmp(e->key, key, 32)) {
			gc_unlink(c, e);
			gc_push_front(c, e);
			return grammar_ref(e->g);
		}
	return NULL;
}

static int compile(const char *prefix, const cJSON *schema, const char *suffix,
                   struct grammar **out, char *path, size_t path_cap, char *err, size_t err_len)
{
	bool plain = (!prefix || !prefix[0]) && (!suffix || !suffix[0]);
	if (!schema && plain)
		return grammar_json_object(out, err, err_len);
	cJSON *any = NULL;
	if (!schema) {
		any = cJSON_CreateObject();
		if (!any || !cJSON_AddStringToObject(any, "type", "object")) {
			cJSON_Delete(any);
			return err_set(err, err_len, -ENOMEM, "out of memory");
		}
		schema = any;
	}
	int rc = grammar_from_json_schema_wrapped(prefix, schema, suffix, out, path, path_cap, err,
	                                          err_len);
	cJSON_Delete(any);
	return rc;
}

int grammar_cache_get(struct grammar_cache *c, const char *prefix, const cJSON *schema,
                      const char *suffix, struct grammar **out, char *path, size_t path_cap,
                      char *err, size_t err_len)
{
	unsigned char key[32];
	*out = NULL;
	if (path && path_cap)
		path[0] = '\0';
	if (gc_key(prefix, schema, suffix, key))
		return err_set(err, err_len, -ENOMEM, "out of memory");
	pthread_mutex_lock(&c->lock);
	struct grammar *g = gc_lookup(c, key);
	pthread_mutex_unlock(&c->lock);
	if (g) {
		*out = g;
		return 0;
	}
	int rc = compile(prefix, schema, suffix, &g, path, path_cap, err, err_len);
	if (rc)
		return rc; /* failures are not kept: they are cheap to find again */
	struct gc_entry *e = calloc(1, sizeof(*e));
	pthread_mutex_lock(&c->lock);
	struct grammar *had = gc_lookup(c, key);
	if (had) {
		grammar_unref(g);
		g = had;
	} else if (e) {
		memcpy(e->key, key, 32);
		e->g = grammar_ref(g);
		gc_push_front(c, e);
		e = NULL;
		if (++c->n > c->capacity) {
			struct gc_entry *old = c->tail;
			gc_unlink(c, old);
			c->n--;
			grammar_unref(old->g);
			free(old);
		}
	}
	pthread_mutex_unlock(&c->lock);
	free(e);
	*out = g;
	return 0;
}
