/* Counters and histograms for /metrics, guarded by one mutex (updates are a
 * few per token; contention is negligible next to a decode step).  It does not
 * collect scheduler state: the server appends scheduler_write_metrics(). */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

#define N_STATUS_SLOTS 16
#define N_BUCKETS 14

/* Seconds; shared by the three latency histograms (le="+Inf" is implicit). */
static const double bucket_le[N_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                            0.1,    0.25,  0.5,    1,     2.5,  5,     10};

static const char *const endpoint_paths[EP_COUNT] = {"/health",
                                                     "/ready",
                                                     "/metrics",
                                                     "/v1/models",
                                                     "/v1/completions",
                                                     "/v1/chat/completions",
                                                     "/tokenize",
                                                     "/detokenize",
                                                     "/v1/sessions",
                                                     "/v1/sessions/{id}",
                                                     "/v1/sessions/{id}/append",
                                                     "/v1/sessions/{id}/snapshot",
                                                     "/v1/sessions/restore",
                                                     "/v1/responses",
                                                     "/",
                                                     "/v1/sessions/{id}/cache",
                                                     "/v1/streams",
                                                     "/v1/streams/{id}/cache",
                                                     "other"};

struct histogram {
	uint64_t counts[N_BUCKETS + 1]; /* last: above every bound */
	uint64_t n;
	double sum;
};

struct status_count {
	int status; /* 0 = free slot */
	uint64_t n;
};

struct metrics {
	pthread_mutex_t mu;
	struct status_count requests[EP_COUNT][N_STATUS_SLOTS];
	uint64_t tokens_in, tokens_out;
	struct histogram ttft, itl, write_delay;
	int64_t streams_open;
	uint64_t deadline_closes[DEADLINE_COUNT];
};

static const char *const deadline_names[DEADLINE_COUNT] = {"handshake", "request", "idle"};

const char *api_endpoint_path(enum api_endpoint ep)
{
	return ep >= 0 && ep < EP_COUNT ? endpoint_paths[ep] : "other";
}

int metrics_new(struct metrics **out)
{
	struct metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return -12;
	pthread_mutex_init(&m->mu, NULL);
	*out = m;
	return 0;
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->mu);
	free(m);
}

void metrics_request(struct metrics *m, enum api_endpoint ep, int status)
{
	if (!m || ep < 0 || ep >= EP_COUNT)
		return;
	pthread_mutex_lock(&m->mu);
	struct status_count *slots = m->requests[ep];
	for (int i = 0; i < N_STATUS_SLOTS; i++) {
		if (slots[i].status == status || slots[i].status == 0) {
			slots[i].status = status;
			slots[i].n++;
			break;
		}
	}
	pthread_mutex_unlock(&m->mu);
}

void metrics_deadline_close(struct metrics *m, enum conn_deadline d)
{
	if (!m || d < 0 || d >= DEADLINE_COUNT)
		return;
	pthread_mutex_lock(&m->mu);
	m->deadline_closes[d]++;
	pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(struct metrics *m, uint64_t in, uint64_t out)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->tokens_in += in;
	m->tokens_out += out;
	pthread_mutex_unlock(&m->mu);
}

static void observe(struct metrics *m, struct histogram *h, double v)
{
	int b = 0;
	while (b < N_BUCKETS && v > bucket_le[b])
		b++;
	pthread_mutex_lock(&m->mu);
	h->counts[b]++;
	h->n++;
	h->sum += v;
	pthread_mutex_unlock(&m->mu);
}

void metrics_ttft(struct metrics *m, double s)
{
	if (m)
		observe(m, &m->ttft, s);
}

void metrics_inter_token(struct metrics *m, double s)
{
	if (m)
		observe(m, &m->itl, s);
}

void metrics_sse_write_delay(struct metrics *m, double s)
{
	if (m)
		observe(m, &m->write_delay, s);
}

void metrics_streams_add(struct metrics *m, int delta)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->streams_open += delta;
	pthread_mutex_unlock(&m->mu);
}

int64_t metrics_streams_open(struct metrics *m)
{
	pthread_mutex_lock(&m->mu);
	int64_t n = m->streams_open;
	pthread_mutex_unlock(&m->mu);
	return n;
}

/* A growing string; `ok` turns false on out of memory. */
struct strbuf {
	char *s;
	size_t len, cap;
	bool ok;
};

static void sb_printf(struct strbuf *b, const char *fmt, ...) SINKD_PRINTF(2, 3);
static void sb_printf(struct strbuf *b, const char *fmt, ...)
{
	for (int pass = 0; pass < 2 && b->ok; pass++) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->ok = false;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = (b->cap + (size_t)n + 1) * 2;
		char *s = realloc(b->s, cap);
		if (!s) {
			b->ok = false;
			return;
		}
		b->s = s;
		b->cap = cap;
	}
}

static void render_histogram(struct strbuf *b, const char *name, const char *help,
                             const struct histogram *h)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	uint64_t cum = 0;
	for (int i = 0; i < N_BUCKETS; i++) {
		cum += h->counts[i];
		sb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_le[i],
		          (unsigned long long)cum);
	}
	sb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
	          (unsigned long long)h->n, name, h->sum, name, (unsigned long long)h->n);
}

static void render_gauge(struct strbuf *b, const char *name, const char *type, const char *help,
                         unsigned long long v)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

static void render_requests(struct strbuf *b, const struct metrics *m)
{
	sb_printf(b, "# HELP sinkd_http_requests_total HTTP requests by endpoint and status.\n"
	             "# TYPE sinkd_http_requests_total counter\n");
	for (int ep = 0; ep < EP_COUNT; ep++)
		for (int i = 0; i < N_STATUS_SLOTS && m->requests[ep][i].status; i++)
			sb_printf(b,
			          "sinkd_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
			          endpoint_paths[ep], m->requests[ep][i].status,
			          (unsigned long long)m->requests[ep][i].n);
}

char *metrics_render(struct metrics *m, int ready, size_t *len)
{
	struct strbuf b = {.s = malloc(4096), .cap = 4096, .ok = true};
	if (!b.s)
		return NULL;
	b.s[0] = '\0';
	pthread_mutex_lock(&m->mu);
	render_requests(&b, m);
	render_gauge(&b, "sinkd_tokens_in_total", "counter", "Prompt tokens processed.",
	             m->tokens_in);
	render_gauge(&b, "sinkd_tokens_out_total", "counter", "Tokens generated.", m->tokens_out);
	render_histogram(&b, "sinkd_time_to_first_token_seconds",
	                 "Time from submit to the first generated token.", &m->ttft);
	render_histogram(&b, "sinkd_inter_token_latency_seconds",
	                 "Time between consecutive generated tokens of a request.", &m->itl);
	render_histogram(&b, "sinkd_sse_write_delay_seconds",
	                 "Time from token emitted by the engine to SSE event handed to the socket.",
	                 &m->write_delay);
	sb_printf(&b, "# HELP sinkd_http_deadline_closes_total Connections closed by their "
	              "handshake, request or keep-alive idle deadline.\n"
	              "# TYPE sinkd_http_deadline_closes_total counter\n");
	for (int d = 0; d < DEADLINE_COUNT; d++)
		sb_printf(&b, "sinkd_http_deadline_closes_total{deadline=\"%s\"} %llu\n",
		          deadline_names[d], (unsigned long long)m->deadline_closes[d]);
	render_gauge(&b, "sinkd_open_streams", "gauge", "Open SSE streams.",
	             (unsigned long long)(m->streams_open > 0 ? m->streams_open : 0));
	pthread_mutex_unlock(&m->mu);
	render_gauge(&b, "sinkd_ready", "gauge", "1 when the model is loaded and not draining.",
	             (unsigned long long)(ready != 0));
	if (!b.ok) {
		free(b.s);
		return NULL;
	}
	*len = b.len;
	return b.s;
}
