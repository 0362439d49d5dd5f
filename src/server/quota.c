/* Per-client usage counts behind limits.per_key.*: a hash table of
 * clients (API key digests or addresses), each with its generations in
 * flight, those of them waiting for admission, and a token bucket for the
 * prompt tokens per minute.  One mutex guards it all.  Memory is bounded: at
 * most max_clients entries; an entry with nothing in flight sits on an LRU
 * list, is dropped after a minute of idleness (its bucket is full again by
 * then, so it holds no state), and is the first evicted when a new client
 * needs room.  It does not know HTTP or the scheduler: the request path
 * calls begin / started / end. */
#include "server/quota.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "util/digest.h"
#include "util/errbuf.h"
#include "util/monotime.h"

/* Seconds of idleness after which an entry holds no state: a bucket
 * refills completely within a minute. */
#define QUOTA_IDLE_S 60.0

struct quota_entry {
	struct quota_client c;
	uint64_t hash;
	int64_t streams; /* in flight */
	int64_t queued;  /* of those, not yet started */
	double tokens;   /* per-minute budget left at t_refill */
	double t_refill;
	double t_used;                 /* last begin or end */
	struct quota_entry *next;      /* hash chain */
	struct quota_entry *prev_idle; /* LRU of entries with nothing in flight, */
	struct quota_entry *next_idle; /* oldest first */
	bool idle;
};

struct quota {
	pthread_mutex_t mu;
	struct quota_limits lim;
	double (*clock)(void *ctx);
	void *clock_ctx;
	struct quota_entry **buckets; /* (n_buckets) chains */
	size_t n_buckets;             /* a power of two */
	size_t n_clients, max_clients;
	struct quota_entry *idle_head, *idle_tail;
	uint64_t evicted;
	uint64_t rejected[QUOTA_N_LIMITS];
};

static const char *const limit_codes[QUOTA_N_LIMITS] = {
    [QUOTA_OK] = "ok",
    [QUOTA_MAX_STREAMS] = "per_key_max_streams",
    [QUOTA_MAX_QUEUED] = "per_key_max_queued",
    [QUOTA_PROMPT_TOKENS] = "per_key_prompt_tokens_per_minute",
    [QUOTA_MAX_SESSIONS] = "per_key_max_sessions",
    [QUOTA_SESSIONS_TOTAL] = "max_sessions",
    [QUOTA_TABLE_FULL] = "too_many_clients",
};

const char *quota_limit_code(enum quota_limit l)
{
	return (int)l >= 0 && l < QUOTA_N_LIMITS ? limit_codes[l] : "unknown";
}

/* ---- clients --------------------------------------------------------- */

void quota_client_of(struct quota_client *c, const unsigned char *key_digest,
                     const struct sockaddr *addr)
{
	memset(c, 0, sizeof(*c));
	if (key_digest) {
		c->kind = QUOTA_CLIENT_KEY;
		c->len = 32;
		memcpy(c->id, key_digest, 32);
		return;
	}
	if (addr && addr->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
		c->kind = QUOTA_CLIENT_ADDR;
		c->len = 4;
		memcpy(c->id, &in->sin_addr, 4);
	} else if (addr && addr->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
		const unsigned char *b = in6->sin6_addr.s6_addr;
		c->kind = QUOTA_CLIENT_ADDR;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			c->len = 4;
			memcpy(c->id, b + 12, 4);
		} else {
			/* One holder of a /64 can use all of it: it counts as one. */
			c->len = 8;
			memcpy(c->id, b, 8);
		}
	}
}

void quota_client_name(const struct quota_client *c, char out[QUOTA_CLIENT_NAME_LEN])
{
	char ip[INET6_ADDRSTRLEN] = "";
	out[0] = '\0';
	if (c->kind == QUOTA_CLIENT_KEY) {
		memcpy(out, "key:", 4);
		digest_hex(c->id, 8, out + 4);
	} else if (c->kind == QUOTA_CLIENT_ADDR && c->len == 4) {
		inet_ntop(AF_INET, c->id, ip, sizeof(ip));
		snprintf(out, QUOTA_CLIENT_NAME_LEN, "addr:%s", ip);
	} else if (c->kind == QUOTA_CLIENT_ADDR) {
		unsigned char full[16] = {0};
		memcpy(full, c->id, 8);
		inet_ntop(AF_INET6, full, ip, sizeof(ip));
		snprintf(out, QUOTA_CLIENT_NAME_LEN, "addr:%s/64", ip);
	}
}

void quota_limits_from_config(const struct sinkd_config *cfg, struct quota_limits *out)
{
	out->max_streams = cfg->limits.per_key.max_streams;
	out->max_queued = cfg->limits.per_key.max_queued;
	out->prompt_tokens_per_minute = cfg->limits.per_key.prompt_tokens_per_minute;
	out->max_sessions = cfg->limits.per_key.max_sessions;
}

/* ---- the table ------------------------------------------------------- */

static double default_clock(void *ctx)
{
	(void)ctx;
	return monotime_s();
}

static uint64_t client_hash(const struct quota_client *c)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	unsigned char head[2] = {c->kind, c->len};
	for (size_t i = 0; i < 2; i++)
		h = (h ^ head[i]) * 1099511628211ull;
	for (size_t i = 0; i < c->len; i++)
		h = (h ^ c->id[i]) * 1099511628211ull;
	return h;
}

static bool client_eq(const struct quota_client *a, const struct quota_client *b)
{
	return a->kind == b->kind && a->len == b->len && memcmp(a->id, b->id, a->len) == 0;
}

static struct quota_entry *entry_find(struct quota *q, const struct quota_client *c, uint64_t h)
{
	for (struct quota_entry *e = q->buckets[h & (q->n_buckets - 1)]; e; e = e->next)
		if (e->hash == h && client_eq(&e->c, c))
			return e;
	return NULL;
}

static void idle_push(struct quota *q, struct quota_entry *e)
{
	e->idle = true;
	e->next_idle = NULL;
	e->prev_idle = q->idle_tail;
	if (q->idle_tail)
		q->idle_tail->next_idle = e;
	else
		q->idle_head = e;
	q->idle_tail = e;
}

static void idle_remove(struct quota *q, struct quota_entry *e)
{
	if (!e->idle)
		return;
	if (e->prev_idle)
		e->prev_idle->next_idle = e->next_idle;
	else
		q->idle_head = e->next_idle;
	if (e->next_idle)
		e->next_idle->prev_idle = e->prev_idle;
	else
		q->idle_tail = e->prev_idle;
	e->idle = false;
	e->prev_idle = e->next_idle = NULL;
}

static void entry_drop(struct quota *q, struct quota_entry *e)
{
	struct quota_entry **p = &q->buckets[e->hash & (q->n_buckets - 1)];
	while (*p != e)
		p = &(*p)->next;
	*p = e->next;
	idle_remove(q, e);
	q->n_clients--;
	free(e);
}

/* Entries idle for QUOTA_IDLE_S hold nothing a fresh one would not. */
static void sweep_idle(struct quota *q, double now)
{
	while (q->idle_head && now - q->idle_head->t_used >= QUOTA_IDLE_S)
		entry_drop(q, q->idle_head);
}

static double bucket_rate(const struct quota_limits *lim)
{
	return (double)lim->prompt_tokens_per_minute / 60.0;
}

static void bucket_refill(const struct quota *q, struct quota_entry *e, double now)
{
	double cap = (double)q->lim.prompt_tokens_per_minute;
	if (now > e->t_refill)
		e->tokens += (now - e->t_refill) * bucket_rate(&q->lim);
	if (e->tokens > cap)
		e->tokens = cap;
	e->t_refill = now;
}

/* The entry of c, made (evicting the oldest idle one if the table is full)
 * when missing; NULL when every entry is busy or memory is out. */
static struct quota_entry *entry_get(struct quota *q, const struct quota_client *c, double now)
{
	uint64_t h = client_hash(c);
	struct quota_entry *e = entry_find(q, c, h);
	if (e)
		return e;
	if (q->n_clients >= q->max_clients) {
		if (!q->idle_head)
			return NULL;
		entry_drop(q, q->idle_head);
		q->evicted++;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->c = *c;
	e->hash = h;
	e->tokens = (double)q->lim.prompt_tokens_per_minute;
	e->t_refill = e->t_used = now;
	size_t b = h & (q->n_buckets - 1);
	e->next = q->buckets[b];
	q->buckets[b] = e;
	q->n_clients++;
	idle_push(q, e);
	return e;
}

int quota_new(const struct quota_options *opt, const struct quota_limits *lim, struct quota **out,
              char *err, size_t err_len)
{
	if (!opt || opt->max_clients < 1)
		return err_set(err, err_len, -EINVAL, "quota: max_clients must be at least 1");
	struct quota *q = calloc(1, sizeof(*q));
	if (!q)
		return err_set(err, err_len, -ENOMEM, "quota: out of memory");
	q->n_buckets = 16;
	while (q->n_buckets < opt->max_clients)
		q->n_buckets *= 2;
	q->buckets = calloc(q->n_buckets, sizeof(*q->buckets));
	if (!q->buckets) {
		free(q);
		return err_set(err, err_len, -ENOMEM, "quota: out of memory");
	}
	pthread_mutex_init(&q->mu, NULL);
	q->max_clients = opt->max_clients;
	q->clock = opt->clock ? opt->clock : default_clock;
	q->clock_ctx = opt->clock_ctx;
	if (lim)
		q->lim = *lim;
	*out = q;
	return 0;
}

void quota_free(struct quota *q)
{
	if (!q)
		return;
	for (size_t b = 0; b < q->n_buckets; b++)
		for (struct quota_entry *e = q->buckets[b], *next; e; e = next) {
			next = e->next;
			free(e);
		}
	free(q->buckets);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

void quota_set_limits(struct quota *q, const struct quota_limits *lim)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->mu);
	double now = q->clock(q->clock_ctx);
	bool was_off = q->lim.prompt_tokens_per_minute == 0;
	for (size_t b = 0; b < q->n_buckets; b++)
		for (struct quota_entry *e = q->buckets[b]; e; e = e->next) {
			bucket_refill(q, e, now); /* at the old rate, up to now */
			if (was_off || e->tokens > (double)lim->prompt_tokens_per_minute)
				e->tokens = (double)lim->prompt_tokens_per_minute;
		}
	q->lim = *lim;
	pthread_mutex_unlock(&q->mu);
}

void quota_get_limits(struct quota *q, struct quota_limits *out)
{
	memset(out, 0, sizeof(*out));
	if (!q)
		return;
	pthread_mutex_lock(&q->mu);
	*out = q->lim;
	pthread_mutex_unlock(&q->mu);
}

/* ---- begin / started / end ------------------------------------------- */

static bool deny(struct quota *q, struct quota_verdict *v, enum quota_limit l, int status,
                 int retry_after_s)
{
	q->rejected[l]++;
	v->limit = l;
	v->status = status;
	v->retry_after_s = retry_after_s;
	return false;
}

/* The limits that refuse e another generation of n_prompt tokens. */
static bool check_limits(struct quota *q, struct quota_entry *e, size_t n_prompt, const char *who,
                         struct quota_verdict *v)
{
	const struct quota_limits *lim = &q->lim;
	if (lim->max_streams > 0 && e->streams >= lim->max_streams) {
		snprintf(v->message, sizeof(v->message),
		         "%s has %" PRId64 " generations in flight, the most "
		         "limits.per_key.max_streams allows; retry when one ends",
		         who, e->streams);
		return deny(q, v, QUOTA_MAX_STREAMS, 429, 1);
	}
	if (lim->max_queued > 0 && e->queued >= lim->max_queued) {
		snprintf(v->message, sizeof(v->message),
		         "%s has %" PRId64 " requests waiting for admission, the most "
		         "limits.per_key.max_queued allows; retry when one starts",
		         who, e->queued);
		return deny(q, v, QUOTA_MAX_QUEUED, 429, 1);
	}
	int64_t ppm = lim->prompt_tokens_per_minute;
	if (ppm > 0 && (double)n_prompt > (double)ppm) {
		snprintf(
		    v->message, sizeof(v->message),
		    "the prompt has %zu tokens, more than limits.per_key.prompt_tokens_per_minute "
		    "(%" PRId64 ") allows %s in a minute: it can never be accepted; send a "
		    "shorter prompt",
		    n_prompt, ppm, who);
		return deny(q, v, QUOTA_PROMPT_TOKENS, 429, 0);
	}
	if (ppm > 0 && e->tokens < (double)n_prompt) {
		double wait = ((double)n_prompt - e->tokens) / bucket_rate(lim);
		snprintf(v->message, sizeof(v->message),
		         "%s has %.0f of its limits.per_key.prompt_tokens_per_minute (%" PRId64
		         ") left; this prompt has %zu tokens",
		         who, floor(e->tokens), ppm, n_prompt);
		return deny(q, v, QUOTA_PROMPT_TOKENS, 429, wait < 1 ? 1 : (int)ceil(wait));
	}
	return true;
}

bool quota_begin(struct quota *q, const struct quota_client *c, size_t n_prompt,
                 struct quota_verdict *v)
{
	memset(v, 0, sizeof(*v));
	if (!q || !c || !c->kind)
		return true;
	/* A key is not named back (its digest is a secret of the config). */
	char who[QUOTA_CLIENT_NAME_LEN + 16], name[QUOTA_CLIENT_NAME_LEN];
	quota_client_name(c, name);
	snprintf(who, sizeof(who), "%s%s", c->kind == QUOTA_CLIENT_KEY ? "this API key" : "client ",
	         c->kind == QUOTA_CLIENT_KEY ? "" : name + strlen("addr:"));
	pthread_mutex_lock(&q->mu);
	double now = q->clock(q->clock_ctx);
	sweep_idle(q, now);
	struct quota_entry *e = entry_get(q, c, now);
	bool ok = false;
	if (!e) {
		snprintf(v->message, sizeof(v->message),
		         "%zu clients are in flight, the most this server tracks; retry later",
		         q->n_clients);
		deny(q, v, QUOTA_TABLE_FULL, 503, 1);
		goto out;
	}
	bucket_refill(q, e, now);
	if (!check_limits(q, e, n_prompt, who, v))
		goto out;
	if (q->lim.prompt_tokens_per_minute > 0)
		e->tokens -= (double)n_prompt;
	e->streams++;
	e->queued++;
	e->t_used = now;
	idle_remove(q, e);
	ok = true;
out:
	pthread_mutex_unlock(&q->mu);
	return ok;
}

void quota_started(struct quota *q, const struct quota_client *c)
{
	if (!q || !c || !c->kind)
		return;
	pthread_mutex_lock(&q->mu);
	struct quota_entry *e = entry_find(q, c, client_hash(c));
	if (e && e->queued > 0)
		e->queued--;
	pthread_mutex_unlock(&q->mu);
}

void quota_end(struct quota *q, const struct quota_client *c, bool started)
{
	if (!q || !c || !c->kind)
		return;
	pthread_mutex_lock(&q->mu);
	struct quota_entry *e = entry_find(q, c, client_hash(c));
	if (e && e->streams > 0) {
		e->streams--;
		if (!started && e->queued > 0)
			e->queued--;
		e->t_used = q->clock(q->clock_ctx);
		if (e->streams == 0)
			idle_push(q, e);
	}
	pthread_mutex_unlock(&q->mu);
}

void quota_count_rejection(struct quota *q, enum quota_limit l)
{
	if (!q || (int)l <= QUOTA_OK || l >= QUOTA_N_LIMITS)
		return;
	pthread_mutex_lock(&q->mu);
	q->rejected[l]++;
	pthread_mutex_unlock(&q->mu);
}

bool quota_usage_of(struct quota *q, const struct quota_client *c, struct quota_usage *out)
{
	memset(out, 0, sizeof(*out));
	if (!q || !c || !c->kind)
		return false;
	pthread_mutex_lock(&q->mu);
	struct quota_entry *e = entry_find(q, c, client_hash(c));
	if (e) {
		bucket_refill(q, e, q->clock(q->clock_ctx));
		out->streams = e->streams;
		out->queued = e->queued;
		out->tokens = e->tokens;
	}
	pthread_mutex_unlock(&q->mu);
	return e != NULL;
}

void quota_get_stats(struct quota *q, struct quota_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!q)
		return;
	pthread_mutex_lock(&q->mu);
	out->clients = q->n_clients;
	out->evicted = q->evicted;
	memcpy(out->rejected, q->rejected, sizeof(out->rejected));
	pthread_mutex_unlock(&q->mu);
}

void quota_write_metrics(struct quota *q, FILE *out)
{
	struct quota_stats st;
	quota_get_stats(q, &st);
	fprintf(out, "# HELP sinkd_quota_rejections_total Requests refused by a limit, by the "
	             "limit (429 per key, 503 in total)\n"
	             "# TYPE sinkd_quota_rejections_total counter\n");
	for (int l = QUOTA_OK + 1; l < QUOTA_N_LIMITS; l++)
		fprintf(out, "sinkd_quota_rejections_total{limit=\"%s\"} %" PRIu64 "\n",
		        limit_codes[l], st.rejected[l]);
	fprintf(out,
	        "# HELP sinkd_quota_clients Clients (API keys or addresses) the per-key limits "
	        "track now\n"
	        "# TYPE sinkd_quota_clients gauge\nsinkd_quota_clients %zu\n"
	        "# HELP sinkd_quota_clients_evicted_total Idle clients dropped from the full "
	        "table to make room\n"
	        "# TYPE sinkd_quota_clients_evicted_total counter\n"
	        "sinkd_quota_clients_evicted_total %" PRIu64 "\n",
	        st.clients, st.evicted);
}
