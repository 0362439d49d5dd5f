/* The memory backend of the session store (store_backend.h): records and
 * leases in this process's memory, for what needs no sharing — the parked
 * sessions of stored responses when no shared store is set, so that an
 * idle stored response holds bytes, not a KV reservation.  One instance
 * owns it, so a lease is always this instance's; the generic layer's
 * bounds and expiry work as for the other backends.  Entries are few
 * (hundreds), so they live in one array searched linearly. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "session/store_backend.h"
#include "util/errbuf.h"
#include "util/monotime.h"

struct mem_entry {
	char key[SESSION_STORE_KEY_MAX + 1];
	unsigned char *bytes; /* (n) NULL when only the lease entry exists */
	size_t n;
	double written;  /* monotonic seconds */
	struct store_lease lease;
	bool has_lease;
};

struct store_backend {
	pthread_mutex_t mu;
	struct mem_entry *e; /* (n_e) */
	size_t n_e, cap_e;
	char instance[STORE_INSTANCE_MAX + 1];
};

static struct mem_entry *find(struct store_backend *b, const char *key)
{
	for (size_t i = 0; i < b->n_e; i++)
		if (!strcmp(b->e[i].key, key))
			return &b->e[i];
	return NULL;
}

static struct mem_entry *find_or_add(struct store_backend *b, const char *key)
{
	struct mem_entry *m = find(b, key);
	if (m)
		return m;
	if (b->n_e == b->cap_e) {
		size_t cap = b->cap_e ? b->cap_e * 2 : 64;
		void *grown = realloc(b->e, cap * sizeof(*b->e));
		if (!grown)
			return NULL;
		b->e = grown;
		b->cap_e = cap;
	}
	m = &b->e[b->n_e++];
	memset(m, 0, sizeof(*m));
	snprintf(m->key, sizeof(m->key), "%s", key);
	return m;
}

static void drop(struct store_backend *b, struct mem_entry *m)
{
	free(m->bytes);
	*m = b->e[--b->n_e];
}

static int mem_put(struct store_backend *b, const char *key, uint64_t fence, const void *bytes,
                   size_t n, char *err, size_t err_len)
{
	unsigned char *copy = malloc(n ? n : 1);
	if (!copy)
		return err_set(err, err_len, -ENOMEM, "session park: no memory for %zu bytes", n);
	memcpy(copy, bytes, n);
	pthread_mutex_lock(&b->mu);
	struct mem_entry *m = find_or_add(b, key);
	int rc = 0;
	if (!m)
		rc = err_set(err, err_len, -ENOMEM, "session park: out of memory");
	else if (fence && (!m->has_lease || m->lease.fence != fence))
		rc = err_set(err, err_len, -ESTALE, "session %s: the lease changed hands", key);
	if (!rc) {
		free(m->bytes);
		m->bytes = copy;
		m->n = n;
		m->written = monotime_s();
		copy = NULL;
	}
	pthread_mutex_unlock(&b->mu);
	free(copy);
	return rc;
}

static int mem_get(struct store_backend *b, const char *key, size_t max_bytes, unsigned char **out,
                   size_t *n, char *err, size_t err_len)
{
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&b->mu);
	struct mem_entry *m = find(b, key);
	int rc = 0;
	if (!m || !m->bytes)
		rc = err_set(err, err_len, -ENOENT, "no parked session %s", key);
	else if (m->n > max_bytes)
		rc = err_set(err, err_len, -EFBIG, "parked session %s: %zu bytes, more than %zu", key,
		             m->n, max_bytes);
	else if (!(*out = malloc(m->n ? m->n : 1)))
		rc = err_set(err, err_len, -ENOMEM, "session park: out of memory");
	if (!rc) {
		memcpy(*out, m->bytes, m->n);
		*n = m->n;
	}
	pthread_mutex_unlock(&b->mu);
	return rc;
}

static int mem_remove(struct store_backend *b, const char *key, char *err, size_t err_len)
{
	pthread_mutex_lock(&b->mu);
	struct mem_entry *m = find(b, key);
	if (m)
		drop(b, m);
	pthread_mutex_unlock(&b->mu);
	return 0;
}

static int mem_exists(struct store_backend *b, const char *key)
{
	pthread_mutex_lock(&b->mu);
	struct mem_entry *m = find(b, key);
	int yes = m && m->bytes;
	pthread_mutex_unlock(&b->mu);
	return yes;
}

static int mem_list(struct store_backend *b, const char *prefix, struct store_entry **out,
                    size_t *n, char *err, size_t err_len)
{
	size_t plen = prefix ? strlen(prefix) : 0;
	pthread_mutex_lock(&b->mu);
	struct store_entry *l = malloc((b->n_e ? b->n_e : 1) * sizeof(*l));
	size_t k = 0;
	double now = monotime_s();
	for (size_t i = 0; l && i < b->n_e; i++) {
		const struct mem_entry *m = &b->e[i];
		if (!m->bytes || (plen && strncmp(m->key, prefix, plen)))
			continue;
		l[k] = (struct store_entry){.bytes = m->n,
		                            .age_s = now - m->written,
		                            .leased_live = m->has_lease && m->lease.live,
		                            .leased_us = m->has_lease && m->lease.live};
		snprintf(l[k].key, sizeof(l[k].key), "%s", m->key);
		k++;
	}
	pthread_mutex_unlock(&b->mu);
	if (!l)
		return err_set(err, err_len, -ENOMEM, "session park: out of memory");
	*out = l;
	*n = k;
	return 0;
}

/* The only instance: a lease is ours, new (fence grows) or already ours. */
static int mem_lease_take(struct store_backend *b, const char *key, struct store_lease *out,
                          char *err, size_t err_len)
{
	pthread_mutex_lock(&b->mu);
	struct mem_entry *m = find_or_add(b, key);
	if (m && !(m->has_lease && m->lease.live)) {
		m->lease.fence++;
		m->lease.live = true;
		m->has_lease = true;
		snprintf(m->lease.instance, sizeof(m->lease.instance), "%s", b->instance);
	}
	if (m)
		*out = m->lease;
	pthread_mutex_unlock(&b->mu);
	return m ? 0 : err_set(err, err_len, -ENOMEM, "session park: out of memory");
}

/* Our lease of key with fence, or NULL (-ESTALE). */
static struct mem_entry *ours(struct store_backend *b, const char *key, uint64_t fence)
{
	struct mem_entry *m = find(b, key);
	return m && m->has_lease && m->lease.live && m->lease.fence == fence ? m : NULL;
}

static int mem_lease_refresh(struct store_backend *b, const char *key, uint64_t fence)
{
	pthread_mutex_lock(&b->mu);
	int rc = ours(b, key, fence) ? 0 : -ESTALE;
	pthread_mutex_unlock(&b->mu);
	return rc;
}

static int mem_lease_set_generation(struct store_backend *b, const char *key, uint64_t fence,
                                    uint64_t generation)
{
	pthread_mutex_lock(&b->mu);
	struct mem_entry *m = ours(b, key, fence);
	if (m)
		m->lease.generation = generation;
	pthread_mutex_unlock(&b->mu);
	return m ? 0 : -ESTALE;
}

static int mem_lease_release(struct store_backend *b, const char *key, uint64_t fence)
{
	pthread_mutex_lock(&b->mu);
	struct mem_entry *m = ours(b, key, fence);
	if (m) {
		m->lease.live = false;
		m->lease.instance[0] = '\0';
		if (!m->bytes) /* nothing of it left to describe */
			drop(b, m);
	}
	pthread_mutex_unlock(&b->mu);
	return m ? 0 : -ESTALE;
}

static int mem_lease_peek(struct store_backend *b, const char *key, struct store_lease *out)
{
	pthread_mutex_lock(&b->mu);
	struct mem_entry *m = find(b, key);
	if (m && m->has_lease)
		*out = m->lease;
	int rc = m && m->has_lease ? 0 : -ENOENT;
	pthread_mutex_unlock(&b->mu);
	return rc;
}

static int mem_instance_claim(struct store_backend *b, const char *nonce, char *holder,
                              size_t holder_len, char *err, size_t err_len)
{
	return 0; /* this process's memory: no other process to share it with */
}

static int mem_instance_refresh(struct store_backend *b, const char *nonce)
{
	return 0;
}

static void mem_instance_release(struct store_backend *b, const char *nonce)
{
}

static void mem_close(struct store_backend *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->n_e; i++)
		free(b->e[i].bytes);
	free(b->e);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

static int mem_open(const struct store_backend_options *o, struct store_backend **out, char *err,
                    size_t err_len)
{
	struct store_backend *b = calloc(1, sizeof(*b));
	if (!b)
		return err_set(err, err_len, -ENOMEM, "session park: out of memory");
	pthread_mutex_init(&b->mu, NULL);
	snprintf(b->instance, sizeof(b->instance), "%s", o->instance);
	*out = b;
	return 0;
}

const struct store_backend_ops store_memory_ops = {
    .name = "memory",
    .open = mem_open,
    .close = mem_close,
    .put = mem_put,
    .get = mem_get,
    .remove = mem_remove,
    .exists = mem_exists,
    .list = mem_list,
    .lease_take = mem_lease_take,
    .lease_refresh = mem_lease_refresh,
    .lease_set_generation = mem_lease_set_generation,
    .lease_release = mem_lease_release,
    .lease_peek = mem_lease_peek,
    .instance_claim = mem_instance_claim,
    .instance_refresh = mem_instance_refresh,
    .instance_release = mem_instance_release,
};
