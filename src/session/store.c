/* The session store's generic layer (store.h): records with generations,
 * the leases this instance holds (refreshed by a thread, their fences used
 * on every write), the instance name's claim, expiry and the size bounds
 * with per-owner shares.  Both backends (store_backend.h) get the same
 * policy from here; they only keep bytes and leases.
 *
 * It does not look inside snapshots beyond the record header, and it does
 * not release leases on close: drain code decides what to hand over. */
#include "session/store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "session/store_backend.h"
#include "util/digest.h"
#include "util/errbuf.h"
#include "util/log.h"
#include "util/monotime.h"

#define STORE_DEFAULT_SWEEP_S 10.0
#define STORE_RECORD_MAGIC "SKDREC01"
#define STORE_RECORD_HEADER 16 /* magic, u64 generation (little-endian) */
#define STORE_LEGACY_MAGIC "SINKDSES" /* a snapshot written before records had headers */
#define STORE_OWNER_COUNTS_MAX 1024

struct held_lease {
	char key[SESSION_KEY_LEN];
	uint64_t fence;
	uint64_t generation; /* the newest the lease knows of */
};

struct session_store {
	const struct store_backend_ops *ops;
	struct store_backend *be;
	uint64_t max_bytes, per_key_bytes;
	double lease_timeout_s, ttl_s, sweep_interval_s;
	struct sinkd_log *log;
	char nonce[33]; /* this process's claim of the instance name */

	pthread_mutex_t lock; /* guards everything below */
	struct held_lease *held; /* (n_held) */
	size_t n_held, cap_held;
	struct session_store_usage counts; /* files and bytes: as the last pass saw them */
	struct session_store_owner_count *owners; /* (n_owners) eviction counts */
	size_t n_owners;
	bool stop;
	pthread_cond_t wake;

	/* Serialises the passes that delete records, so that a put and the
	 * thread's sweep do not both evict for the same excess. */
	pthread_mutex_t policy_lock;
	pthread_t thread;
	bool thread_started;
};

/* ---------------------------------------------------------------- held set */

static ssize_t held_find(const struct session_store *st, const char *key)
{
	for (size_t i = 0; i < st->n_held; i++)
		if (strcmp(st->held[i].key, key) == 0)
			return (ssize_t)i;
	return -1;
}

static int held_set_locked(struct session_store *st, const char *key, uint64_t fence,
                           uint64_t generation)
{
	ssize_t i = held_find(st, key);
	if (i < 0) {
		if (st->n_held == st->cap_held) {
			size_t cap = st->cap_held ? st->cap_held * 2 : 16;
			void *grown = realloc(st->held, cap * sizeof(*st->held));
			if (!grown)
				return -ENOMEM;
			st->held = grown;
			st->cap_held = cap;
		}
		i = (ssize_t)st->n_held++;
		snprintf(st->held[i].key, sizeof(st->held[i].key), "%s", key);
	}
	st->held[i].fence = fence;
	st->held[i].generation = generation;
	return 0;
}

static void held_remove_locked(struct session_store *st, const char *key)
{
	ssize_t i = held_find(st, key);
	if (i >= 0)
		st->held[i] = st->held[--st->n_held];
}

/* Our lease of key: true with its fence and generation, false when none. */
static bool held_get(struct session_store *st, const char *key, struct held_lease *out)
{
	pthread_mutex_lock(&st->lock);
	ssize_t i = held_find(st, key);
	if (i >= 0)
		*out = st->held[i];
	pthread_mutex_unlock(&st->lock);
	return i >= 0;
}

static void count(struct session_store *st, uint64_t *counter)
{
	pthread_mutex_lock(&st->lock);
	(*counter)++;
	pthread_mutex_unlock(&st->lock);
}

static int check_key(const char *key, char *err, size_t err_len)
{
	if (session_key_valid(key))
		return 0;
	return err_set(err, err_len, -EINVAL, "invalid session key");
}

static void sanitise(char *out, size_t out_len, const char *in)
{
	if (out_len == 0)
		return;
	size_t i = 0;
	for (; in[i] && i + 1 < out_len; i++)
		out[i] = (in[i] >= 0x20 && in[i] < 0x7f) ? in[i] : '?';
	out[i] = '\0';
}

/* ---------------------------------------------------------------- leases */

int session_store_lease_take(struct session_store *st, const char *key, uint64_t *generation,
                             char *holder, size_t holder_len, char *err, size_t err_len)
{
	if (holder_len > 0)
		holder[0] = '\0';
	int rc = check_key(key, err, err_len);
	if (rc)
		return rc;
	struct store_lease l;
	memset(&l, 0, sizeof(l));
	rc = st->ops->lease_take(st->be, key, &l, err, err_len);
	if (rc == -EBUSY) {
		char clean[STORE_INSTANCE_MAX + 1];
		sanitise(clean, sizeof(clean), l.instance);
		sanitise(holder, holder_len, clean);
		pthread_mutex_lock(&st->lock);
		held_remove_locked(st, key);
		pthread_mutex_unlock(&st->lock);
		return err_set(err, err_len, -EBUSY, "session %s is leased by instance '%s'", key,
		               clean);
	}
	if (rc)
		return rc;
	pthread_mutex_lock(&st->lock);
	ssize_t i = held_find(st, key);
	/* our own lease taken again keeps the generation we set on it */
	uint64_t gen = i >= 0 && st->held[i].fence == l.fence && st->held[i].generation > l.generation
	                   ? st->held[i].generation
	                   : l.generation;
	rc = held_set_locked(st, key, l.fence, gen);
	if (l.taken_over)
		st->counts.takeovers++;
	pthread_mutex_unlock(&st->lock);
	if (rc)
		return err_set(err, err_len, rc, "session store: out of memory");
	if (generation)
		*generation = gen;
	return 0;
}

static int lost_lease(struct session_store *st, const char *key, char *err, size_t err_len)
{
	pthread_mutex_lock(&st->lock);
	held_remove_locked(st, key);
	pthread_mutex_unlock(&st->lock);
	return err_set(err, err_len, -ESTALE,
	               "session %s: its lease was taken over by another instance", key);
}

int session_store_lease_set_generation(struct session_store *st, const char *key,
                                       uint64_t generation, char *err, size_t err_len)
{
	struct held_lease h;
	if (!held_get(st, key, &h))
		return err_set(err, err_len, -ESTALE, "session %s: this instance holds no lease",
		               key);
	int rc = st->ops->lease_set_generation(st->be, key, h.fence, generation);
	if (rc == -ESTALE)
		return lost_lease(st, key, err, err_len);
	if (rc)
		return err_set(err, err_len, rc, "session %s: setting the lease's generation: %s",
		               key, strerror(-rc));
	pthread_mutex_lock(&st->lock);
	held_set_locked(st, key, h.fence, generation);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

int session_store_lease_release(struct session_store *st, const char *key)
{
	struct held_lease h;
	if (!session_key_valid(key))
		return -EINVAL;
	if (!held_get(st, key, &h))
		return -ENOENT;
	int rc = st->ops->lease_release(st->be, key, h.fence);
	pthread_mutex_lock(&st->lock);
	held_remove_locked(st, key);
	pthread_mutex_unlock(&st->lock);
	return rc;
}

/* Refreshes every lease we hold; forgets (and logs) those we lost. */
static void leases_refresh(struct session_store *st)
{
	pthread_mutex_lock(&st->lock);
	size_t n = st->n_held;
	struct held_lease *copy = n ? malloc(n * sizeof(*copy)) : NULL;
	if (copy)
		memcpy(copy, st->held, n * sizeof(*copy));
	pthread_mutex_unlock(&st->lock);
	if (!copy)
		return;
	for (size_t i = 0; i < n; i++) {
		int rc = st->ops->lease_refresh(st->be, copy[i].key, copy[i].fence);
		if (rc != -ESTALE)
			continue;
		pthread_mutex_lock(&st->lock);
		ssize_t j = held_find(st, copy[i].key);
		if (j >= 0 && st->held[j].fence == copy[i].fence)
			held_remove_locked(st, copy[i].key);
		pthread_mutex_unlock(&st->lock);
		log_event(st->log, LOG_WARN, "store", "session lease lost to another instance",
		          (struct log_field[]){LOG_STR("session", copy[i].key), LOG_END});
	}
	free(copy);
}

/* ---------------------------------------------------------------- policy */

static void owner_tag_of(const char *key, char tag[SESSION_OWNER_TAG_LEN + 1])
{
	const char *dash = strchr(key, '-');
	size_t n = dash ? (size_t)(dash - key) : 0;
	memcpy(tag, key, n);
	tag[n] = '\0';
}

static void count_eviction(struct session_store *st, const char *key, uint64_t bytes,
                           const char *why)
{
	char tag[SESSION_OWNER_TAG_LEN + 1];
	owner_tag_of(key, tag);
	pthread_mutex_lock(&st->lock);
	st->counts.evicted++;
	size_t i = 0;
	while (i < st->n_owners && strcmp(st->owners[i].tag, tag))
		i++;
	if (i == st->n_owners && st->n_owners < STORE_OWNER_COUNTS_MAX) {
		void *grown = realloc(st->owners, (st->n_owners + 1) * sizeof(*st->owners));
		if (grown) {
			st->owners = grown;
			memset(&st->owners[i], 0, sizeof(st->owners[i]));
			snprintf(st->owners[i].tag, sizeof(st->owners[i].tag), "%s", tag);
			st->n_owners++;
		}
	}
	if (i < st->n_owners)
		st->owners[i].evicted++;
	pthread_mutex_unlock(&st->lock);
	log_event(st->log, LOG_WARN, "store", "session evicted from the store",
	          (struct log_field[]){LOG_STR("session", key), LOG_STR("owner", tag[0] ? tag : "-"),
	                               LOG_INT("bytes", (int64_t)bytes), LOG_STR("reason", why),
	                               LOG_END});
}

static int entry_older(const void *a, const void *b)
{
	const struct store_entry *x = a, *y = b;
	if (x->age_s != y->age_s)
		return x->age_s > y->age_s ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* Each listed entry's owner, and each owner's bytes, worked out once per
 * pass and kept current as entries are evicted. */
struct owner_use {
	char tag[SESSION_OWNER_TAG_LEN + 1];
	uint64_t bytes;
};

struct owners {
	struct owner_use *use; /* (n_use) */
	size_t n_use;
	size_t *of; /* (entries) index into use */
};

static int owners_build(const struct store_entry *e, size_t n, struct owners *o)
{
	o->use = malloc((n ? n : 1) * sizeof(*o->use));
	o->of = malloc((n ? n : 1) * sizeof(*o->of));
	o->n_use = 0;
	if (!o->use || !o->of)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		char t[SESSION_OWNER_TAG_LEN + 1];
		owner_tag_of(e[i].key, t);
		size_t u = 0;
		while (u < o->n_use && strcmp(o->use[u].tag, t))
			u++;
		if (u == o->n_use) {
			snprintf(o->use[u].tag, sizeof(o->use[u].tag), "%s", t);
			o->use[u].bytes = 0;
			o->n_use++;
		}
		o->use[u].bytes += e[i].bytes;
		o->of[i] = u;
	}
	return 0;
}

static void owners_free(struct owners *o)
{
	free(o->use);
	free(o->of);
}

/* The shared namespace is one tenant (every client without a key), held
 * to the total bound only. */
static uint64_t share_of(const struct session_store *st, const char *tag)
{
	return tag[0] ? st->per_key_bytes : UINT64_MAX;
}

static bool owner_over(const struct session_store *st, const struct owner_use *u)
{
	return u->bytes > share_of(st, u->tag);
}

/* Deletes entry i (marks it gone, its bytes off its owner's and the
 * total); false when it could not be deleted. */
static bool evict(struct session_store *st, struct store_entry *e, struct owner_use *u,
                  uint64_t *total, const char *why)
{
	char err[SINKD_ERR_LEN];
	if (st->ops->remove(st->be, e->key, err, sizeof(err)))
		return false;
	count_eviction(st, e->key, e->bytes, why);
	*total -= e->bytes;
	u->bytes -= e->bytes;
	e->bytes = UINT64_MAX;
	return true;
}

/* The bounds over a list sorted oldest first: the writer's own share first
 * (its oldest, never another's while it is over), then owners over their
 * share, then the oldest of all.  keep (may be NULL) is never evicted, nor
 * is a record leased live by another instance.  How many it deleted. */
static int enforce_bounds(struct session_store *st, struct store_entry *e, size_t n,
                          const char *keep)
{
	struct owners o;
	if (owners_build(e, n, &o)) {
		owners_free(&o);
		return 0; /* out of memory: the next sweep tries again */
	}
	uint64_t total = 0;
	int removed = 0;
	struct owner_use *writer = NULL;
	for (size_t i = 0; i < n; i++) {
		total += e[i].bytes;
		if (keep && !strcmp(e[i].key, keep))
			writer = &o.use[o.of[i]];
	}
	for (int pass = 0; pass < 3; pass++) {
		for (size_t i = 0; i < n; i++) {
			if (e[i].bytes == UINT64_MAX || (keep && !strcmp(e[i].key, keep)) ||
			    (e[i].leased_live && !e[i].leased_us))
				continue;
			struct owner_use *u = &o.use[o.of[i]];
			bool over = owner_over(st, u);
			if (pass == 0 && (u != writer || !over))
				continue;
			if (pass == 1 && (!over || (st->max_bytes && total <= st->max_bytes)))
				continue;
			/* a writer still over its share (its one record is larger)
			 * takes no room from keys within theirs */
			if (pass == 2 && (!st->max_bytes || total <= st->max_bytes ||
			                  (writer && owner_over(st, writer))))
				break;
			removed += evict(st, &e[i], u, &total,
			                 pass == 2 ? "store_max_bytes" : "per_key_store_bytes");
		}
	}
	owners_free(&o);
	return removed;
}

/* Expires records older than ttl_s whose lease is not live. */
static int expire_old(struct session_store *st, struct store_entry *e, size_t n)
{
	if (st->ttl_s <= 0)
		return 0;
	int removed = 0;
	char err[SINKD_ERR_LEN];
	for (size_t i = 0; i < n; i++) {
		if (e[i].age_s <= st->ttl_s || e[i].leased_live)
			continue;
		if (st->ops->remove(st->be, e[i].key, err, sizeof(err)) == 0) {
			count(st, &st->counts.expired);
			e[i].bytes = UINT64_MAX;
			removed++;
		}
	}
	return removed;
}

static int policy_pass(struct session_store *st, const char *keep, bool expire)
{
	struct store_entry *e = NULL;
	size_t n = 0;
	char err[SINKD_ERR_LEN];
	int removed = 0;
	pthread_mutex_lock(&st->policy_lock);
	int rc = st->ops->list(st->be, NULL, &e, &n, err, sizeof(err));
	if (rc == 0) {
		if (expire) {
			removed += expire_old(st, e, n);
			size_t kept = 0;
			for (size_t i = 0; i < n; i++)
				if (e[i].bytes != UINT64_MAX)
					e[kept++] = e[i];
			n = kept;
		}
		if (n)
			qsort(e, n, sizeof(*e), entry_older);
		removed += enforce_bounds(st, e, n, keep);
		uint64_t files = 0, bytes = 0;
		for (size_t i = 0; i < n; i++)
			if (e[i].bytes != UINT64_MAX) {
				files++;
				bytes += e[i].bytes;
			}
		pthread_mutex_lock(&st->lock);
		st->counts.files = files;
		st->counts.bytes = bytes;
		pthread_mutex_unlock(&st->lock);
	}
	pthread_mutex_unlock(&st->policy_lock);
	free(e);
	return rc < 0 ? rc : removed;
}

int session_store_sweep(struct session_store *st)
{
	int removed = 0;
	if (st->ops->maintain) {
		int rc = st->ops->maintain(st->be);
		removed += rc > 0 ? rc : 0;
	}
	int rc = policy_pass(st, NULL, true);
	return rc < 0 ? rc : removed + rc;
}

/* ---------------------------------------------------------------- records */

static void put_u64le(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64le(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

int session_store_put(struct session_store *st, const char *key, uint64_t generation,
                      const void *bytes, size_t n, char *err, size_t err_len)
{
	int rc = check_key(key, err, err_len);
	if (rc)
		return rc;
	struct held_lease h;
	bool borrowed = false; /* a lease taken for this write alone, let go after it */
	if (!held_get(st, key, &h)) {
		char holder[STORE_INSTANCE_MAX + 1];
		rc = session_store_lease_take(st, key, NULL, holder, sizeof(holder), err, err_len);
		if (rc)
			return rc;
		held_get(st, key, &h);
		borrowed = true;
	}
	unsigned char *rec = malloc(STORE_RECORD_HEADER + n);
	if (!rec)
		return err_set(err, err_len, -ENOMEM, "session store: no memory for %zu bytes", n);
	memcpy(rec, STORE_RECORD_MAGIC, 8);
	put_u64le(rec + 8, generation);
	memcpy(rec + STORE_RECORD_HEADER, bytes, n);
	rc = st->ops->put(st->be, key, h.fence, rec, STORE_RECORD_HEADER + n, err, err_len);
	struct store_lease now;
	if (rc == -ESTALE && st->ops->lease_peek(st->be, key, &now) == -ENOENT) {
		/* the entry itself is gone (a Redis restarted empty): nobody holds
		 * it, so it is taken anew and the write tried once more */
		char holder[STORE_INSTANCE_MAX + 1];
		pthread_mutex_lock(&st->lock);
		held_remove_locked(st, key);
		pthread_mutex_unlock(&st->lock);
		rc = session_store_lease_take(st, key, NULL, holder, sizeof(holder), err, err_len);
		if (!rc && held_get(st, key, &h))
			rc = st->ops->put(st->be, key, h.fence, rec, STORE_RECORD_HEADER + n, err,
			                  err_len);
		if (rc == -EBUSY)
			rc = -ESTALE;
	}
	free(rec);
	if (rc == -ESTALE) {
		count(st, &st->counts.fenced);
		char why[SINKD_ERR_LEN];
		snprintf(why, sizeof(why), "%s", err);
		lost_lease(st, key, err, err_len);
		return err_set(err, err_len, -ESTALE, "%s", why);
	}
	if (rc) {
		if (borrowed)
			session_store_lease_release(st, key);
		return rc;
	}
	/* the record now holds the newest state: the lease says so too */
	if (generation > h.generation)
		session_store_lease_set_generation(st, key, generation, NULL, 0);
	if (borrowed)
		session_store_lease_release(st, key);
	if (st->max_bytes || st->per_key_bytes)
		policy_pass(st, key, false);
	return 0;
}

int session_store_get(struct session_store *st, const char *key, size_t max_bytes,
                      unsigned char **out, size_t *n, uint64_t *generation, char *err,
                      size_t err_len)
{
	*out = NULL;
	*n = 0;
	int rc = check_key(key, err, err_len);
	if (rc)
		return rc;
	unsigned char *rec = NULL;
	size_t len = 0;
	rc = st->ops->get(st->be, key, max_bytes + STORE_RECORD_HEADER, &rec, &len, err, err_len);
	if (rc)
		return rc;
	uint64_t gen = 0;
	size_t skip = 0;
	if (len >= STORE_RECORD_HEADER && !memcmp(rec, STORE_RECORD_MAGIC, 8)) {
		gen = get_u64le(rec + 8);
		skip = STORE_RECORD_HEADER;
	} else if (len < 8 || memcmp(rec, STORE_LEGACY_MAGIC, 8)) {
		free(rec);
		return err_set(err, err_len, -EINVAL, "session %s: the stored record is not a "
		               "session snapshot", key);
	}
	if (len - skip > max_bytes) {
		free(rec);
		return err_set(err, err_len, -EFBIG, "session %s: %zu bytes, more than the %zu allowed",
		               key, len - skip, max_bytes);
	}
	struct held_lease h;
	if (held_get(st, key, &h) && h.generation > gen) {
		free(rec);
		count(st, &st->counts.stale);
		return err_set(err, err_len, -ESTALE,
		               "session %s: the stored snapshot is generation %" PRIu64
		               ", but generation %" PRIu64 " existed and was never written "
		               "(an instance stopped or failed before it could store it); "
		               "resuming would lose its newest state",
		               session_key_id(key), gen, h.generation);
	}
	if (skip)
		memmove(rec, rec + skip, len - skip);
	*out = rec;
	*n = len - skip;
	if (generation)
		*generation = gen;
	return 0;
}

int session_store_remove(struct session_store *st, const char *key, char *err, size_t err_len)
{
	int rc = check_key(key, err, err_len);
	if (rc)
		return rc;
	rc = st->ops->remove(st->be, key, err, err_len);
	pthread_mutex_lock(&st->lock);
	held_remove_locked(st, key);
	pthread_mutex_unlock(&st->lock);
	return rc;
}

bool session_store_exists(struct session_store *st, const char *key)
{
	return session_key_valid(key) && st->ops->exists(st->be, key) == 1;
}

int session_store_list(struct session_store *st, const char *owner, char (**keys)[SESSION_KEY_LEN],
                       size_t *n, char *err, size_t err_len)
{
	char tag[SESSION_OWNER_TAG_LEN + 1], prefix[SESSION_OWNER_TAG_LEN + 2] = "";
	session_owner_tag(owner, tag);
	if (tag[0])
		snprintf(prefix, sizeof(prefix), "%s-", tag);
	struct store_entry *e = NULL;
	size_t m = 0;
	*keys = NULL;
	*n = 0;
	int rc = st->ops->list(st->be, prefix, &e, &m, err, err_len);
	if (rc)
		return rc;
	char(*out)[SESSION_KEY_LEN] = malloc((m ? m : 1) * sizeof(*out));
	if (!out) {
		free(e);
		return err_set(err, err_len, -ENOMEM, "session store: out of memory");
	}
	size_t k = 0;
	for (size_t i = 0; i < m; i++)
		if (session_key_owned_by(e[i].key, owner))
			snprintf(out[k++], SESSION_KEY_LEN, "%s", e[i].key);
	free(e);
	*keys = out;
	*n = k;
	return 0;
}

/* ---------------------------------------------------------------- usage */

void session_store_get_usage(struct session_store *st, struct session_store_usage *out)
{
	struct store_entry *e = NULL;
	size_t n = 0;
	char err[SINKD_ERR_LEN];
	pthread_mutex_lock(&st->lock);
	*out = st->counts;
	pthread_mutex_unlock(&st->lock);
	out->files = out->bytes = 0;
	if (st->ops->list(st->be, NULL, &e, &n, err, sizeof(err)) == 0) {
		out->files = n;
		for (size_t i = 0; i < n; i++)
			out->bytes += e[i].bytes;
	}
	free(e);
}

void session_store_get_usage_cached(struct session_store *st, struct session_store_usage *out)
{
	pthread_mutex_lock(&st->lock);
	*out = st->counts;
	pthread_mutex_unlock(&st->lock);
}

size_t session_store_evictions_by_owner(struct session_store *st,
                                        struct session_store_owner_count *out, size_t cap)
{
	pthread_mutex_lock(&st->lock);
	size_t n = st->n_owners < cap ? st->n_owners : cap;
	/* the most evicted first: a partial selection sort is enough for cap */
	struct session_store_owner_count *all = st->owners;
	for (size_t k = 0; k < n; k++) {
		size_t best = k;
		for (size_t i = k + 1; i < st->n_owners; i++)
			if (all[i].evicted > all[best].evicted)
				best = i;
		struct session_store_owner_count t = all[k];
		all[k] = all[best];
		all[best] = t;
		out[k] = all[k];
	}
	pthread_mutex_unlock(&st->lock);
	return n;
}

const char *session_store_backend(const struct session_store *st)
{
	return st->ops->name;
}

/* ---------------------------------------------------------------- thread */

static struct timespec mono_deadline(double at)
{
	struct timespec ts;
	ts.tv_sec = (time_t)at;
	ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static void *store_thread(void *arg)
{
	struct session_store *st = arg;
	double refresh_every = st->lease_timeout_s / 3.0;
	double next_refresh = monotime_s() + refresh_every;
	double next_sweep = monotime_s() + st->sweep_interval_s;
	pthread_mutex_lock(&st->lock);
	while (!st->stop) {
		double now = monotime_s();
		if (now >= next_refresh) {
			pthread_mutex_unlock(&st->lock);
			leases_refresh(st);
			if (st->ops->instance_refresh(st->be, st->nonce) == -ESTALE)
				log_event(st->log, LOG_ERROR, "store",
				          "another process claimed this instance's name in the "
				          "session store",
				          (struct log_field[]){LOG_END});
			pthread_mutex_lock(&st->lock);
			next_refresh = now + refresh_every;
			continue;
		}
		if (now >= next_sweep) {
			pthread_mutex_unlock(&st->lock);
			session_store_sweep(st);
			pthread_mutex_lock(&st->lock);
			next_sweep = monotime_s() + st->sweep_interval_s;
			continue;
		}
		struct timespec until =
		    mono_deadline(next_refresh < next_sweep ? next_refresh : next_sweep);
		pthread_cond_timedwait(&st->wake, &st->lock, &until);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/* ---------------------------------------------------------------- open/close */

static int check_options(const struct session_store_options *o, char *err, size_t err_len)
{
	bool dir = o->dir && o->dir[0], url = o->url && o->url[0];
	if ((int)dir + (int)url + (int)o->memory != 1)
		return err_set(err, err_len, -EINVAL,
		               "session store: give either a directory, a redis:// URL or memory");
	if (!(o->lease_timeout_s > 0))
		return err_set(err, err_len, -EINVAL, "session store: lease_timeout_s must be > 0");
	if (!(o->ttl_s >= 0) || !(o->sweep_interval_s >= 0))
		return err_set(err, err_len, -EINVAL,
		               "session store: ttl_s and sweep_interval_s must be >= 0");
	size_t len = o->instance ? strlen(o->instance) : 0;
	if (len == 0 || len > STORE_INSTANCE_MAX)
		return err_set(err, err_len, -EINVAL,
		               "session store: instance name must be 1..%d characters",
		               STORE_INSTANCE_MAX);
	for (size_t i = 0; i < len; i++)
		if (o->instance[i] < 0x20 || o->instance[i] >= 0x7f)
			return err_set(err, err_len, -EINVAL,
			               "session store: instance name must be printable ASCII");
	return 0;
}

static void make_nonce(char out[33])
{
	unsigned char raw[16] = {0};
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		for (size_t i = 0; i < sizeof(raw); i++)
			raw[i] = (unsigned char)((uint64_t)ts.tv_nsec >> (i % 4 * 8)) ^ (unsigned char)i;
	}
	digest_hex(raw, sizeof(raw), out);
}

static int init_sync(struct session_store *st)
{
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca) != 0)
		return -ENOMEM;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(&st->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (rc != 0)
		return -rc;
	pthread_mutex_init(&st->lock, NULL);
	pthread_mutex_init(&st->policy_lock, NULL);
	return 0;
}

static int open_backend(struct session_store *st, const struct session_store_options *o,
                        char *err, size_t err_len)
{
	struct store_backend_options bo = {.dir = o->dir,
	                                   .url = o->url,
	                                   .auth_file = o->auth_file,
	                                   .tls_ca_file = o->tls_ca_file,
	                                   .instance = o->instance,
	                                   .lease_timeout_s = o->lease_timeout_s,
	                                   .ttl_s = o->ttl_s};
	st->ops = o->memory                ? &store_memory_ops
	          : o->dir && o->dir[0] ? &store_folder_ops
	                                : &store_redis_ops;
	int rc = st->ops->open(&bo, &st->be, err, err_len);
	if (rc)
		return rc;
	char holder[STORE_INSTANCE_MAX + 64] = "";
	make_nonce(st->nonce);
	return st->ops->instance_claim(st->be, st->nonce, holder, sizeof(holder), err, err_len);
}

int session_store_open(const struct session_store_options *o, struct session_store **out, char *err,
                       size_t err_len)
{
	*out = NULL;
	int rc = check_options(o, err, err_len);
	if (rc < 0)
		return rc;
	struct session_store *st = calloc(1, sizeof(*st));
	if (!st)
		return err_set(err, err_len, -ENOMEM, "session store: out of memory");
	st->max_bytes = o->max_bytes;
	st->per_key_bytes = o->per_key_bytes ? o->per_key_bytes : o->max_bytes / 8;
	if (!st->per_key_bytes)
		st->per_key_bytes = UINT64_MAX;
	st->lease_timeout_s = o->lease_timeout_s;
	st->ttl_s = o->ttl_s;
	st->sweep_interval_s = o->sweep_interval_s > 0 ? o->sweep_interval_s : STORE_DEFAULT_SWEEP_S;
	st->log = o->log;
	rc = init_sync(st);
	if (rc < 0) {
		free(st);
		return err_set(err, err_len, rc, "session store: %s", strerror(-rc));
	}
	rc = open_backend(st, o, err, err_len);
	if (rc == 0)
		policy_pass(st, NULL, false); /* the usage /metrics shows until the first sweep */
	if (rc == 0) {
		rc = -pthread_create(&st->thread, NULL, store_thread, st);
		st->thread_started = rc == 0;
		if (rc < 0)
			err_set(err, err_len, rc, "session store: starting its thread: %s",
			        strerror(-rc));
	}
	if (rc < 0) {
		/* a claim held by another process is not ours to drop */
		if (rc == -EADDRINUSE)
			st->nonce[0] = '\0';
		session_store_close(st);
		return rc;
	}
	*out = st;
	return 0;
}

void session_store_close(struct session_store *st)
{
	if (!st)
		return;
	if (st->thread_started) {
		pthread_mutex_lock(&st->lock);
		st->stop = true;
		pthread_cond_signal(&st->wake);
		pthread_mutex_unlock(&st->lock);
		pthread_join(st->thread, NULL);
	}
	if (st->be) {
		if (st->nonce[0])
			st->ops->instance_release(st->be, st->nonce);
		st->ops->close(st->be);
	}
	pthread_cond_destroy(&st->wake);
	pthread_mutex_destroy(&st->lock);
	pthread_mutex_destroy(&st->policy_lock);
	free(st->held);
	free(st->owners);
	free(st);
}
