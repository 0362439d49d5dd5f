/* The HTTP(S) server of sinkd: listener, routing, auth, limits and the
 * OpenAI-compatible API over a scheduler.  The daemon starts it before the
 * model is loaded (/health answers, /ready is 503), attaches the engine when
 * it is, and stops it on shutdown. */
#pragma once

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
};

/* Binds server.listen, loads TLS material and starts the listener threads.
 * On error nothing is left running. */
int server_new(const struct sinkd_config *cfg, struct sinkd_log *log, struct server **out,
               char *err, size_t err_len);
/* The bound port (useful with "host:0"). */
int server_port(const struct server *s);
/* Makes the API available; /ready turns 200. */
void server_attach_engine(struct server *s, const struct server_engine *e);
/* Applies the reloadable server keys (api_keys, sse_keepalive_s, limits). */
int server_reconfigure(struct server *s, const struct sinkd_config *cfg, char *err, size_t err_len);
/* /ready turns 503 and new generations are refused; running ones go on. */
void server_set_draining(struct server *s);
/* Generations bound to open connections. */
size_t server_active_generations(struct server *s);
/* Stops accepting, waits up to grace_s for running generations, cancels the
 * rest, ends every stream and stops the listener.  Must run before the
 * scheduler is freed.  Safe to call twice. */
void server_stop(struct server *s, double grace_s);
/* server_stop(s, 0) if needed, then frees. */
void server_free(struct server *s);
