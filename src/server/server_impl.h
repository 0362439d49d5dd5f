/* Internals shared by the server's files (http.c: listener and routing,
 * api.c and api_sessions.c: endpoints, genstream.c: one generation bound to
 * a connection, respond.c: answers and the error mapping, openai.c: OpenAI
 * JSON objects).  Calls go one way: http -> api -> api_sessions ->
 * genstream -> respond.  Not for use outside src/server. */
#pragma once

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "sched/scheduler.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/quota.h"
#include "server/server.h"
#include "server/tls.h"
#include "util/monotime.h"

#define REQUEST_ID_LEN 80

struct genstream;
struct http_conn;

/* Settings that a reload may change, read under server.cfg_mu. */
struct server_settings {
	struct auth_keys keys;
	int64_t max_body_bytes;
	int64_t max_tokens;
	int64_t keepalive_s;
	struct quota_limits quota;   /* limits.per_key.* */
	int64_t handshake_timeout_s; /* deadlines of a connection (http.c) */
	int64_t request_timeout_s;
	int64_t idle_timeout_s;
	bool pin_system_prompt; /* inference.cache.pin_system_prompt */
};

/* Compiled constraints kept: a client sends the same schema with each request. */
#define SERVER_GRAMMAR_CACHE 32

struct grammar_cache;

struct server {
	struct sinkd_log *log;
	struct metrics *metrics;
	struct quota *quota; /* per-key usage (limits.per_key.*) */
	struct grammar_cache *grammars; /* compiled response_format / tool_choice constraints */
	struct MHD_Daemon *mhd;
	int listen_fd; /* -1 once handed back by quiesce and closed */
	int port;
	bool tls;
	struct tls_store *tls_store; /* creds for new handshakes; NULL without TLS */
	atomic_int tls_ptr_warned;   /* "no connection behind the TLS session" logged */

	atomic_int ready;    /* engine attached */
	_Atomic uint64_t tokens_queued;  /* for the test hook below */
	_Atomic uint64_t fail_token_at;  /* server_set_token_queue_failure */
	atomic_int draining; /* no new generations */
	atomic_int stopping; /* streams end at once */
	atomic_int shutting_down; /* cancelled streams end with a server_shutdown error */
	bool stopped;

	/* Set once by server_attach_engine before `ready`. */
	const struct model *model;
	const struct tokenizer *tok;
	struct scheduler *sched;
	char model_name[128];

	pthread_mutex_t cfg_mu;
	struct server_settings set;
	/* the model's own chat template (a reference; NULL: the C families);
	 * replaced by a reload [cfg_mu] */
	struct chat_render *chat;
	struct server_config_status cfg_status; /* [cfg_mu] */

	/* Generations bound to live connections (keep-alive timer, stop). */
	pthread_mutex_t gen_mu;
	pthread_cond_t gen_cond; /* signalled when the list shrinks or on stop */
	struct genstream *gens;
	size_t n_gens;
	pthread_t ka_thread;
	bool ka_started;
	bool ka_quit;

	/* Open connections and their deadlines (http.c). */
	pthread_mutex_t conn_mu;
	pthread_cond_t conn_cond; /* wakes the deadline thread to quit */
	struct http_conn *conns;  /* [conn_mu] */
	size_t n_conns;           /* [conn_mu] */
	uint64_t n_cut[DEADLINE_COUNT];       /* closed by a deadline: handshake, request, idle [conn_mu] */
	double cut_logged;        /* when the last summary line was written [conn_mu] */
	pthread_t dl_thread;
	bool dl_started;
	bool dl_quit; /* [conn_mu] */
	/* Fixed at start: the connection cap (beyond it only /health and /ready
	 * are served) and the request line and header limits. */
	int64_t max_connections;
	int64_t max_uri_bytes, max_header_bytes, max_headers;
};

/* Per-connection request state (MHD's con_cls). */
struct request {
	struct server *srv;
	struct MHD_Connection *conn;
	enum api_endpoint ep;
	const char *method;
	char id[REQUEST_ID_LEN];
	char session_id[SCHED_SESSION_ID_LEN]; /* /v1/sessions/{id}... */
	char stream_id[REQUEST_ID_LEN];        /* /v1/streams/{request_id}/cache */
	struct quota_client client;            /* who its limits count for (request_begin) */
	struct http_conn *hc;                  /* its connection's state; NULL when out of memory */
	bool begun;                            /* headers seen (request_begin ran) */
	bool uri_too_long, uri_nul;            /* found in the raw request target */
	bool chunked;                          /* body without a declared length */
	bool close_after;                      /* answer with Connection: close */
	uint64_t body_seen;                    /* body bytes received, kept or not */
	double t_start;
	char *body;
	size_t body_len, body_cap;
	bool body_too_large;
	bool unauthorized; /* 401 once its body (of modest size) has been read and dropped */
	bool responded;
	int status;
	struct genstream *gs;
};

/* Monotonic seconds. */
static inline double server_now(void)
{
	return monotime_s();
}

/* pthread_cond_timedwait for at most ms milliseconds (mu held). */
static inline void server_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mu, long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cond, mu, &ts);
}

/* The reloadable settings that endpoints and streams read (either may be NULL). */
static inline void server_settings_get(struct server *s, int64_t *max_tokens, int64_t *keepalive_s)
{
	pthread_mutex_lock(&s->cfg_mu);
	if (max_tokens)
		*max_tokens = s->set.max_tokens;
	if (keepalive_s)
		*keepalive_s = s->set.keepalive_s;
	pthread_mutex_unlock(&s->cfg_mu);
}

/* A reference to the chat template renderer in force (NULL: none); the
 * caller drops it with chat_render_unref. */
struct chat_render *server_chat_render(struct server *s);

static inline bool server_pin_system_prompt(struct server *s)
{
	pthread_mutex_lock(&s->cfg_mu);
	bool pin = s->set.pin_system_prompt;
	pthread_mutex_unlock(&s->cfg_mu);
	return pin;
}
