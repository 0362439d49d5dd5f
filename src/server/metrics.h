/* Server metrics in Prometheus text format: requests by endpoint and status,
 * tokens in and out, time to first token, inter-token latency and SSE write
 * delay histograms, open streams, connections closed by their deadlines. */
#pragma once

#include <stddef.h>
#include <stdint.h>

enum api_endpoint {
	EP_HEALTH = 0,
	EP_READY,
	EP_METRICS,
	EP_MODELS,
	EP_COMPLETIONS,
	EP_CHAT,
	EP_TOKENIZE,
	EP_DETOKENIZE,
	EP_SESSIONS,       /* GET (list), POST /v1/sessions */
	EP_SESSION,        /* GET/DELETE /v1/sessions/{id} */
	EP_SESSION_APPEND, /* POST /v1/sessions/{id}/append */
	EP_SESSION_SNAPSHOT, /* GET /v1/sessions/{id}/snapshot */
	EP_SESSION_RESTORE,  /* POST /v1/sessions/restore */
	EP_RESPONSES,        /* POST /v1/responses */
	EP_CONSOLE,          /* GET / and its files (console.c) */
	EP_SESSION_CACHE,    /* GET /v1/sessions/{id}/cache */
	EP_STREAMS,          /* GET /v1/streams */
	EP_STREAM_CACHE,     /* GET /v1/streams/{request_id}/cache */
	EP_OTHER,
	EP_COUNT
};

/* "/v1/completions" etc.; EP_OTHER for anything unknown. */
const char *api_endpoint_path(enum api_endpoint ep);

/* The deadlines that close a slow connection (server.handshake_timeout_s,
 * request_timeout_s, idle_timeout_s). */
enum conn_deadline { DEADLINE_HANDSHAKE = 0, DEADLINE_REQUEST, DEADLINE_IDLE, DEADLINE_COUNT };

struct metrics;

int metrics_new(struct metrics **out);
void metrics_free(struct metrics *m);

void metrics_request(struct metrics *m, enum api_endpoint ep, int status);
void metrics_tokens(struct metrics *m, uint64_t in, uint64_t out);
void metrics_ttft(struct metrics *m, double seconds);
void metrics_inter_token(struct metrics *m, double seconds);
/* Delay between the engine emitting a token and the server handing its SSE
 * event to the socket. */
void metrics_sse_write_delay(struct metrics *m, double seconds);
void metrics_deadline_close(struct metrics *m, enum conn_deadline d);
void metrics_streams_add(struct metrics *m, int delta);
int64_t metrics_streams_open(struct metrics *m);

/* Renders the server's metrics into a malloc'ed string (NULL on out of
 * memory); the scheduler's own (KV bytes, queue) are appended by the caller. */
char *metrics_render(struct metrics *m, int ready, size_t *len);
