/* The HTTP(S) server of sinkd: listener, routing, auth, limits and the
 * OpenAI-compatible API over a scheduler.  The daemon starts it before the
 * model is loaded (/health answers, /ready is 503), attaches the engine when
 * it is, and stops it on shutdown. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "util/log.h"

struct model;
struct tokenizer;
struct scheduler;

struct server;

struct server_engine {
	const struct model *model;
	const struct tokenizer *tok;
	struct scheduler *sched;
	const char *model_name; /* served name (copied) */
	/* the model's chat template (chat_render.h; the server takes this
	 * reference; NULL: none, the C families render) */
	struct chat_render *chat;
};

/* Binds server.listen, loads TLS material and starts the listener threads.
 * On error nothing is left running. */
int server_new(const struct sinkd_config *cfg, struct sinkd_log *log, struct server **out,
               char *err, size_t err_len);
/* The bound port (useful with "host:0"). */
int server_port(const struct server *s);
/* Test hook (SINKD_TEST_FAIL_TOKEN_QUEUE): every nth token the server
 * queues for a client (counted over all requests) fails as if memory ran
 * out; 0 = never. */
void server_set_token_queue_failure(struct server *s, uint64_t nth);
/* Makes the API available; /ready turns 200. */
void server_attach_engine(struct server *s, const struct server_engine *e);
/* A reload in two steps (config_reload.h).  server_prepare builds the
 * reloadable HTTP settings of cfg (API keys, body and token limits,
 * keep-alive) and, once the engine is attached, the chat template of
 * model.chat_template (or the model's own) and may fail, changing nothing;
 * server_commit installs them and cannot fail. */
struct server_prepared;
int server_prepare(struct server *s, const struct sinkd_config *cfg, struct server_prepared **out,
                   char *err, size_t err_len);
void server_commit(struct server *s, struct server_prepared *p); /* frees p */
void server_prepared_free(struct server_prepared *p);
/* Certificate rotation: prepare re-reads cfg's certificate and key and
 * checks them (a bad or mismatched pair fails the reload); commit makes new
 * handshakes use them while open connections keep theirs. */
struct tls_creds;
int server_tls_prepare(struct server *s, const struct sinkd_config *cfg, struct tls_creds **out,
                       char *err, size_t err_len);
/* Takes the reference; cfg is the config the creds were prepared from. */
void server_tls_commit(struct server *s, const struct sinkd_config *cfg, struct tls_creds *creds);
void server_tls_discard(struct tls_creds *creds);
/* What /metrics says of the configuration in force (the daemon sets it). */
struct server_config_status {
	uint64_t generation;      /* 1 at start, +1 per applied reload */
	uint64_t reload_failures; /* reloads refused since start */
	char sha256[65];          /* of the file in force */
	double last_success_unix; /* wall-clock seconds of the last applied load */
	bool restart_pending;     /* a restart-only key differs from the file */
};
void server_set_config_status(struct server *s, const struct server_config_status *st);

/* Drain, in the daemon's order: drain_begin (/ready turns 503; new
 * requests get 503 + Retry-After + Connection: close; running ones go on),
 * after the grace close_listener (new connections are refused, which every
 * balancer retries elsewhere), wait_generations, then stop. */
void server_drain_begin(struct server *s);
void server_close_listener(struct server *s);
/* Generations bound to open connections. */
size_t server_active_generations(struct server *s);
/* Waits up to timeout_s for running generations to end (or until *abort);
 * true when none is left. */
bool server_wait_generations(struct server *s, double timeout_s, const volatile int *abort);
/* Ends every stream still running with a server_shutdown error event and
 * [DONE], cancels their generations and stops the listener.  Must run
 * before the scheduler is freed.  Safe to call twice. */
void server_stop(struct server *s);
/* server_stop(s) if needed, then frees. */
void server_free(struct server *s);
