/* Per-client limits (limits.per_key.*): who a request counts for (an API
 * key by its digest, or a client address when no keys are configured), how
 * many generations each client has in flight and waiting, and its prompt
 * tokens per minute.  One job: count usage and answer allow or deny with a
 * Retry-After.  Thread-safe; the table of clients is bounded (idle entries
 * are evicted first).  A NULL quota allows everything. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"

struct sockaddr;

/* Who a limit counts for. */
enum quota_client_kind { QUOTA_CLIENT_KEY = 1, QUOTA_CLIENT_ADDR = 2 };
struct quota_client {
	unsigned char kind; /* enum quota_client_kind; 0: nobody (not counted) */
	unsigned char len;  /* bytes of id in use */
	unsigned char id[32];
};
/* The client of a request: the SHA-256 digest of its API key when one
 * matched, else its address (IPv4, or an IPv6 address by its /64, an
 * IPv4-mapped one as IPv4); kind 0 when neither is known. */
void quota_client_of(struct quota_client *c, const unsigned char *key_digest,
                     const struct sockaddr *addr);
#define QUOTA_CLIENT_NAME_LEN 64
/* "key:<first 8 bytes of the digest in hex>" or "addr:<address>" (IPv6:
 * "<prefix>::/64"); "" for nobody.  For session owners and logs. */
void quota_client_name(const struct quota_client *c, char out[QUOTA_CLIENT_NAME_LEN]);

/* limits.per_key.*, 0 = unlimited each. */
struct quota_limits {
	int64_t max_streams;
	int64_t max_queued;
	int64_t prompt_tokens_per_minute;
	int64_t max_sessions; /* enforced by the scheduler; kept here for the server */
};
void quota_limits_from_config(const struct sinkd_config *cfg, struct quota_limits *out);

/* What refused a request; also the error code and metric label
 * (quota_limit_code). */
enum quota_limit {
	QUOTA_OK = 0,
	QUOTA_MAX_STREAMS,    /* 429 per_key_max_streams */
	QUOTA_MAX_QUEUED,     /* 429 per_key_max_queued */
	QUOTA_PROMPT_TOKENS,  /* 429 per_key_prompt_tokens_per_minute */
	QUOTA_MAX_SESSIONS,   /* 429 per_key_max_sessions (counted for the scheduler) */
	QUOTA_SESSIONS_TOTAL, /* 503 max_sessions (counted for the scheduler) */
	QUOTA_TABLE_FULL,     /* 503 too_many_clients: every tracked client is busy */
	QUOTA_N_LIMITS
};
const char *quota_limit_code(enum quota_limit l);

struct quota_verdict {
	enum quota_limit limit;
	int status;        /* 429 or 503; 0 when allowed */
	int retry_after_s; /* seconds; 0: no point in retrying (a prompt over the whole budget) */
	char message[256]; /* what was exceeded, with the key and the numbers */
};

struct quota_options {
	size_t max_clients; /* entries in the table at most (>= 1) */
	/* Monotonic seconds; NULL: CLOCK_MONOTONIC.  Tests inject their own. */
	double (*clock)(void *ctx);
	void *clock_ctx;
};

struct quota;
int quota_new(const struct quota_options *opt, const struct quota_limits *lim, struct quota **out,
              char *err, size_t err_len);
void quota_free(struct quota *q);
/* New limits (a reload): counts and buckets are kept; a bucket above a
 * lower limit is cut to it, a client new to a limit starts with it full. */
void quota_set_limits(struct quota *q, const struct quota_limits *lim);
void quota_get_limits(struct quota *q, struct quota_limits *out);

/* A generation of client c with n_prompt prompt tokens asks to start.
 * Allowed (true): it counts as one stream, waiting for admission, and its
 * tokens leave the per-minute budget; the caller must call quota_end once.
 * Denied (false): nothing is counted; v says why.  A client of kind 0 is
 * always allowed and never counted. */
bool quota_begin(struct quota *q, const struct quota_client *c, size_t n_prompt,
                 struct quota_verdict *v);
/* The generation left the queue (the engine started it). */
void quota_started(struct quota *q, const struct quota_client *c);
/* The generation ended; started: whether quota_started was called for it. */
void quota_end(struct quota *q, const struct quota_client *c, bool started);
/* A refusal decided elsewhere (sessions), for the metrics. */
void quota_count_rejection(struct quota *q, enum quota_limit l);

struct quota_usage {
	int64_t streams; /* in flight, waiting or running */
	int64_t queued;  /* of those, waiting */
	double tokens;   /* left in the per-minute budget now (limit 0: 0) */
};
/* false when the client has no entry (nothing counted, a full budget). */
bool quota_usage_of(struct quota *q, const struct quota_client *c, struct quota_usage *out);

struct quota_stats {
	size_t clients;   /* entries in the table */
	uint64_t evicted; /* entries dropped to make room */
	uint64_t rejected[QUOTA_N_LIMITS];
};
void quota_get_stats(struct quota *q, struct quota_stats *out);
/* sinkd_quota_rejections_total{limit="..."}, sinkd_quota_clients,
 * sinkd_quota_clients_evicted_total (Prometheus text). */
void quota_write_metrics(struct quota *q, FILE *out);
