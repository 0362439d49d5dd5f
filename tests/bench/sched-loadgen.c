/* Load generator for the scheduler benchmark: N concurrent client streams,
 * each a loop of streaming POST /v1/completions over HTTPS (OpenSSL) that
 * reads the SSE events as they arrive.  All streams run in one thread, an
 * epoll loop over non-blocking TLS connections, as vLLM's benchmark_serving
 * (asyncio) and wrk do: on the two cores the server also runs on, a thread
 * per stream made the client's own scheduling show in the latencies.  Each
 * stream keeps its TLS connection alive from one request to the next, as
 * HTTP client libraries (the OpenAI SDKs' among them) do; with
 * FRESH_CONNECTIONS=1 in the environment every request opens a new one (a
 * TCP and TLS handshake per request).  The first request of stream i asks
 * for MAX_TOKENS*(i+1)/N tokens, so that request ends, and the next
 * prompts, are spread over time as in a steady load rather than all at once.
 *
 * Steady window: it opens once every stream has received its first token
 * (the start-up burst of prompts, and any wait for KV budget, stay out of
 * it; at most WARMUP seconds after the start, then it opens anyway) and
 * lasts SECONDS.  Inside it: generated tokens (text events; a request still
 * running at the end is cut there), inter-token latency (gaps between text
 * events, both ends inside; an event's time is that of the read that
 * brought it), time to first token of the requests started inside it
 * (connect included, to the first event carrying text).  Optionally one
 * more client keeps sending a long prompt (max_tokens 1), starting
 * LONG_LEAD_S before the window opens (once every stream decodes), to
 * measure the streams while a long prefill runs alongside.  Prints one JSON
 * line; with ITL_DUMP=FILE also writes every inter-token gap (ms) there.
 * With PLAIN_HTTP=1 in the environment it speaks plain HTTP (no TLS), for
 * servers without TLS such as llama-server (server-sse.sh compares them).
 * Not part of the test suite; run by tests/bench/sched-load.sh.
 *
 * usage: sched-loadgen PORT API_KEY STREAMS WARMUP SECONDS MAX_TOKENS PROMPT_FILE
 *                      [LONG_PROMPT_FILE] */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LONG_LEAD_S 1.0
#define RETRY_S 0.01       /* pause after a failed request */
#define IDLE_TIMEOUT_S 60. /* a connection silent this long is an error */

struct cfg {
	int port;
	const char *key;
	int streams;
	double warmup, seconds;
	int max_tokens;
	const char *prompt;
	char *body;      /* request JSON */
	char *long_body; /* long-prompt request JSON or NULL */
	SSL_CTX *ctx;           /* NULL: plain HTTP */
	bool fresh_connections; /* a new connection per request */
	int epfd;
	int n_first;          /* streams that received a first token */
	double t_open, t_end; /* the window; t_open 0 until it opens */
	bool stop_long;
};

struct samples {
	double *v;
	size_t n, cap;
};

enum phase {
	PH_WAIT,      /* no request in flight; next one at t_next */
	PH_HANDSHAKE, /* TCP connected, TLS handshake running */
	PH_SEND,      /* writing the request */
	PH_HEAD,      /* reading the status line and headers */
	PH_BODY,      /* reading the body */
	PH_DONE,      /* the stream has stopped */
};

/* A line being assembled from received bytes. */
struct line_buf {
	char b[65536];
	size_t n;
};

/* Body framing state (chunked transfer encoding or read-to-close). */
enum body_state { BS_SIZE, BS_DATA, BS_DATA_END, BS_TRAILER };

struct stream {
	struct cfg *c;
	int index;
	bool is_long, got_first;
	struct samples ttft, itl;
	long tokens, requests, errors;

	enum phase phase;
	double t_next;     /* PH_WAIT: when to send the next request */
	double t_activity; /* last progress on the connection */
	int fd;            /* -1: no connection */
	SSL *ssl;
	char *req; /* the request being sent */
	size_t req_len, req_off;
	bool keep;   /* the connection stays open after the response */
	bool reused; /* the request went out on a kept connection */

	/* response parsing: HTTP lines (status, headers, chunk sizes) and SSE
	 * lines apart, since a chunk may end inside an SSE line */
	struct line_buf http, sse;
	bool status_seen, chunked, closes;
	enum body_state bs;
	size_t chunk_left;
	/* the request's SSE events */
	double t0, last;
	bool first_seen, done;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void push(struct samples *s, double v)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 1024;
		s->v = realloc(s->v, s->cap * sizeof(double));
	}
	s->v[s->n++] = v;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)n + 1);
	if (fread(b, 1, (size_t)n, f) != (size_t)n)
		n = 0;
	b[n] = 0;
	fclose(f);
	return b;
}

/* JSON string literal of text (quotes included). */
static char *json_str(const char *t)
{
	size_t n = strlen(t);
	char *o = malloc(n * 6 + 3), *p = o;
	*p++ = '"';
	for (; *t; t++) {
		unsigned char ch = (unsigned char)*t;
		if (ch == '"' || ch == '\\') {
			*p++ = '\\';
			*p++ = (char)ch;
		} else if (ch < 0x20) {
			p += sprintf(p, "\\u%04x", ch);
		} else {
			*p++ = (char)ch;
		}
	}
	*p++ = '"';
	*p = 0;
	return o;
}

static char *make_body(const char *prompt, int max_tokens)
{
	char *js = json_str(prompt);
	size_t n = strlen(js) + 256;
	char *b = malloc(n);
	snprintf(b, n,
	         "{\"prompt\":%s,\"max_tokens\":%d,\"stream\":true,\"temperature\":0,"
	         "\"ignore_eos\":true,\"stream_options\":{\"include_usage\":true}}",
	         js, max_tokens);
	free(js);
	return b;
}

static bool in_window(const struct cfg *c, double t)
{
	return c->t_open > 0 && t >= c->t_open && t <= c->t_end;
}

static bool window_over(const struct cfg *c, double t)
{
	return c->t_open > 0 && t >= c->t_end;
}

/* ---- connections ------------------------------------------------------- */

static void conn_close(struct stream *st)
{
	if (st->ssl) {
		SSL_shutdown(st->ssl);
		SSL_free(st->ssl);
		st->ssl = NULL;
	}
	if (st->fd >= 0) {
		epoll_ctl(st->c->epfd, EPOLL_CTL_DEL, st->fd, NULL);
		close(st->fd);
		st->fd = -1;
	}
}

static void watch(struct stream *st, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = st};
	epoll_ctl(st->c->epfd, EPOLL_CTL_MOD, st->fd, &ev);
}

static int conn_open(struct stream *st)
{
	struct cfg *c = st->c;
	int one = 1;
	st->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (st->fd < 0)
		return -1;
	setsockopt(st->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (connect(st->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS)
		goto fail;
	struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = st};
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, st->fd, &ev) != 0)
		goto fail;
	if (!c->ctx)
		return 0;
	st->ssl = SSL_new(c->ctx);
	SSL_set_fd(st->ssl, st->fd);
	SSL_set_connect_state(st->ssl);
	return 0;
fail:
	conn_close(st);
	return -1;
}

/* ---- one request ------------------------------------------------------- */

/* Stops a stream, in the middle of its request or between two. */
static void cut(struct stream *st)
{
	conn_close(st);
	st->phase = PH_DONE;
}

static void finish_request(struct stream *st, bool ok, double t);

static void start_request(struct stream *st, double t)
{
	struct cfg *c = st->c;
	const char *body = st->is_long ? c->long_body : c->body;
	char *first = NULL;
	if (!st->is_long && st->requests == 0) { /* staggered first request */
		int n = (int)((long)c->max_tokens * (st->index + 1) / c->streams);
		body = first = make_body(c->prompt, n > 0 ? n : 1);
	}
	st->keep = !c->fresh_connections && !st->is_long;
	size_t blen = strlen(body);
	free(st->req);
	st->req = malloc(blen + 1024);
	int hl = snprintf(
	    st->req, 1024,
	    "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
	    "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: %s\r\n\r\n",
	    c->key, blen, st->keep ? "keep-alive" : "close");
	memcpy(st->req + hl, body, blen);
	st->req_len = (size_t)hl + blen;
	st->req_off = 0;
	free(first);
	st->http.n = st->sse.n = 0;
	st->status_seen = st->chunked = st->done = st->first_seen = false;
	st->closes = !st->keep;
	st->t0 = st->t_activity = t;
	st->reused = st->fd >= 0;
	if (st->fd < 0) {
		if (conn_open(st) != 0) {
			finish_request(st, false, t);
			return;
		}
		st->phase = PH_HANDSHAKE;
	} else {
		st->phase = PH_SEND;
		watch(st, EPOLLOUT);
	}
}

/* Ends the request; the next one starts at once (after a short pause when
 * this one failed), unless the stream is to stop. */
static void finish_request(struct stream *st, bool ok, double t)
{
	struct cfg *c = st->c;
	st->requests++;
	if (!ok)
		st->errors++;
	if (!ok || !st->keep || st->closes)
		conn_close(st);
	bool stop = st->is_long ? c->stop_long : window_over(c, t);
	if (stop) {
		cut(st);
		return;
	}
	st->phase = PH_WAIT;
	st->t_next = ok ? t : t + RETRY_S;
	if (st->fd >= 0)
		watch(st, 0);
}

static void sse_event(struct stream *st, const char *data, double t)
{
	struct cfg *c = st->c;
	if (strcmp(data, "[DONE]") == 0) {
		st->done = true;
		return;
	}
	if (st->is_long || !strstr(data, "\"text\":\"") || strstr(data, "\"text\":\"\""))
		return;
	if (!st->got_first) {
		st->got_first = true;
		c->n_first++;
	}
	if (in_window(c, t)) {
		st->tokens++;
		if (!st->first_seen && in_window(c, st->t0))
			push(&st->ttft, t - st->t0);
		else if (st->first_seen && in_window(c, st->last))
			push(&st->itl, t - st->last);
	}
	st->first_seen = true;
	st->last = t;
}

/* One complete line of the response (CRLF stripped).  Returns false when the
 * response is over or broken (st->phase says which). */
static bool head_line(struct stream *st, const char *line, double t)
{
	if (!st->status_seen) {
		st->status_seen = true;
		if (strncmp(line, "HTTP/1.1 200", 12) != 0) {
			finish_request(st, false, t);
			return false;
		}
		return true;
	}
	if (line[0]) {
		if (strcasestr(line, "transfer-encoding:") && strcasestr(line, "chunked"))
			st->chunked = true;
		if (strcasestr(line, "connection:") && strcasestr(line, "close"))
			st->closes = true;
		return true;
	}
	st->phase = PH_BODY;
	st->bs = BS_SIZE;
	return true;
}

/* Adds ch to lb; true when it ended a line (then in lb->b, CR stripped). */
static bool take_line(struct line_buf *lb, char ch)
{
	if (ch != '\n') {
		if (lb->n + 1 < sizeof(lb->b))
			lb->b[lb->n++] = ch;
		return false;
	}
	if (lb->n && lb->b[lb->n - 1] == '\r')
		lb->n--;
	lb->b[lb->n] = 0;
	lb->n = 0;
	return true;
}

/* Body bytes of the SSE stream. */
static void sse_bytes(struct stream *st, const char *p, size_t n, double t)
{
	for (size_t i = 0; i < n; i++)
		if (take_line(&st->sse, p[i]) && strncmp(st->sse.b, "data: ", 6) == 0)
			sse_event(st, st->sse.b + 6, t);
}

/* Feeds received bytes; returns false when the request ended. */
static bool feed(struct stream *st, const char *p, size_t n, double t)
{
	size_t i = 0;
	while (i < n) {
		if (st->phase == PH_HEAD) {
			if (take_line(&st->http, p[i++]) && !head_line(st, st->http.b, t))
				return false;
			continue;
		}
		if (!st->chunked) { /* until the server closes */
			sse_bytes(st, p + i, n - i, t);
			return true;
		}
		switch (st->bs) {
		case BS_SIZE:
		case BS_DATA_END:
		case BS_TRAILER:
			if (!take_line(&st->http, p[i++]))
				break;
			if (st->bs == BS_DATA_END) {
				st->bs = BS_SIZE;
			} else if (st->bs == BS_SIZE) {
				st->chunk_left = strtoul(st->http.b, NULL, 16);
				st->bs = st->chunk_left ? BS_DATA : BS_TRAILER;
			} else if (!st->http.b[0]) { /* the empty line after the last chunk */
				finish_request(st, st->done, t);
				return false;
			}
			break;
		case BS_DATA: {
			size_t take = n - i < st->chunk_left ? n - i : st->chunk_left;
			sse_bytes(st, p + i, take, t);
			i += take;
			st->chunk_left -= take;
			if (!st->chunk_left)
				st->bs = BS_DATA_END;
			break;
		}
		}
	}
	return true;
}

/* The SSL call said it needs the socket readable or writable. */
static bool ssl_would_block(struct stream *st, int rc)
{
	int e = SSL_get_error(st->ssl, rc);
	if (e == SSL_ERROR_WANT_READ) {
		watch(st, EPOLLIN);
		return true;
	}
	if (e == SSL_ERROR_WANT_WRITE) {
		watch(st, EPOLLOUT);
		return true;
	}
	return false;
}

/* The socket calls of both kinds of connection: SSL_* with TLS, send and
 * recv on plain HTTP (then 0 from a read is the peer's close, and a call
 * that would block watches the socket for events). */
static int io_write(struct stream *st, const char *p, size_t n)
{
	if (st->ssl)
		return SSL_write(st->ssl, p, (int)n);
	ssize_t r = send(st->fd, p, n, MSG_NOSIGNAL);
	return r < 0 ? -1 : (int)r;
}

static int io_read(struct stream *st, char *p, size_t n)
{
	if (st->ssl)
		return SSL_read(st->ssl, p, (int)n);
	ssize_t r = recv(st->fd, p, n, 0);
	return r < 0 ? -1 : (int)r;
}

static bool io_would_block(struct stream *st, int rc, uint32_t events)
{
	if (st->ssl)
		return ssl_would_block(st, rc);
	if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		watch(st, events);
		return true;
	}
	return false;
}

/* Advances the stream as far as its socket allows. */
static void progress(struct stream *st)
{
	char buf[16384];
	double t = now_s();
	st->t_activity = t;
	if (st->phase == PH_HANDSHAKE && !st->ssl) /* plain: connected (or send says why not) */
		st->phase = PH_SEND;
	if (st->phase == PH_HANDSHAKE) {
		int rc = SSL_do_handshake(st->ssl);
		if (rc != 1) {
			if (!ssl_would_block(st, rc))
				finish_request(st, false, t);
			return;
		}
		st->phase = PH_SEND;
	}
	while (st->phase == PH_SEND) {
		int rc = io_write(st, st->req + st->req_off, st->req_len - st->req_off);
		if (rc <= 0) {
			if (!io_would_block(st, rc, EPOLLOUT))
				finish_request(st, false, t);
			return;
		}
		st->req_off += (size_t)rc;
		if (st->req_off == st->req_len) {
			st->phase = PH_HEAD;
			st->status_seen = false;
			st->http.n = 0;
			watch(st, EPOLLIN);
		}
	}
	while (st->phase == PH_HEAD || st->phase == PH_BODY) {
		int rc = io_read(st, buf, sizeof(buf));
		if (rc <= 0) {
			if (io_would_block(st, rc, EPOLLIN))
				return;
			if (st->reused && !st->status_seen) {
				/* a kept connection the server had closed: once more on a
				 * new one, as client libraries do */
				conn_close(st);
				st->t_next = st->t0;
				st->phase = PH_WAIT;
				return;
			}
			/* closed: the end of a read-to-close body, else an error */
			bool ok = st->phase == PH_BODY && !st->chunked && st->done;
			st->closes = true;
			finish_request(st, ok, now_s());
			return;
		}
		if (!feed(st, buf, (size_t)rc, now_s()))
			return;
	}
}

/* ---- the loop ---------------------------------------------------------- */

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(struct samples *s, double p)
{
	if (!s->n)
		return 0;
	qsort(s->v, s->n, sizeof(double), cmp_d);
	size_t i = (size_t)(p * (double)(s->n - 1) + 0.5);
	return s->v[i];
}

/* Runs every stream until the window is over; the long client (if any)
 * starts once every stream has a first token (or at the warm-up deadline)
 * and the window opens LONG_LEAD_S later. */
static void run(struct cfg *c, struct stream *st, int n_streams, struct stream *long_st,
                double *t_start)
{
	struct epoll_event evs[256];
	double t0 = now_s(), t_long = 0;
	*t_start = t0;
	for (int i = 0; i < n_streams; i++)
		st[i].t_next = t0;
	for (;;) {
		double t = now_s();
		if (!c->t_open && !t_long && (c->n_first == c->streams || t >= t0 + c->warmup)) {
			if (long_st) {
				t_long = t;
				long_st->phase = PH_WAIT;
				long_st->t_next = t;
			} else {
				t_long = -1;
			}
		}
		if (!c->t_open && t_long && (t_long < 0 || t >= t_long + LONG_LEAD_S)) {
			c->t_open = t;
			c->t_end = t + c->seconds;
		}
		bool running = false;
		double wake = t + 0.1;
		for (int i = 0; i < n_streams + (long_st ? 1 : 0); i++) {
			struct stream *s = i < n_streams ? &st[i] : long_st;
			if (s->phase == PH_DONE || (s == long_st && !t_long))
				continue;
			if (s != long_st && window_over(c, t)) {
				cut(s);
				continue;
			}
			if (s == long_st && c->stop_long) {
				cut(s);
				continue;
			}
			if (s != long_st)
				running = true;
			if (s->phase == PH_WAIT) {
				if (s->t_next <= t)
					start_request(s, t);
				else if (s->t_next < wake)
					wake = s->t_next;
			} else if (t - s->t_activity > IDLE_TIMEOUT_S) {
				finish_request(s, false, t);
			}
		}
		if (!running) {
			c->stop_long = true;
			if (long_st && long_st->phase != PH_DONE && long_st->phase != PH_WAIT)
				long_st->requests++; /* the one still prefilling counts too */
			if (long_st && long_st->phase != PH_DONE)
				cut(long_st);
			return;
		}
		if (c->t_open && c->t_end < wake)
			wake = c->t_end;
		int ms = (int)((wake - now_s()) * 1e3) + 1;
		int n = epoll_wait(c->epfd, evs, 256, ms < 0 ? 0 : ms);
		for (int k = 0; k < n; k++) {
			struct stream *s = evs[k].data.ptr;
			if (s->phase != PH_WAIT && s->phase != PH_DONE)
				progress(s);
			else if (s->fd >= 0) /* a kept connection closed by the server */
				conn_close(s);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 8) {
		fprintf(stderr,
		        "usage: %s PORT KEY STREAMS WARMUP SECONDS MAX_TOKENS PROMPT_FILE "
		        "[LONG_FILE]\n",
		        argv[0]);
		return 2;
	}
	struct cfg c = {.port = atoi(argv[1]),
	                .key = argv[2],
	                .streams = atoi(argv[3]),
	                .warmup = atof(argv[4]),
	                .seconds = atof(argv[5]),
	                .max_tokens = atoi(argv[6])};
	char *prompt = read_file(argv[7]);
	char *long_prompt = argc > 8 ? read_file(argv[8]) : NULL;
	if (!prompt || (argc > 8 && !long_prompt) || c.streams < 1) {
		fprintf(stderr, "cannot read prompt files, or no streams\n");
		return 2;
	}
	c.prompt = prompt;
	c.body = make_body(prompt, c.max_tokens);
	c.long_body = long_prompt ? make_body(long_prompt, 1) : NULL;
	const char *fresh = getenv("FRESH_CONNECTIONS");
	c.fresh_connections = fresh && !strcmp(fresh, "1");
	const char *plain = getenv("PLAIN_HTTP");
	if (!plain || strcmp(plain, "1") != 0) {
		c.ctx = SSL_CTX_new(TLS_client_method());
		SSL_CTX_set_verify(c.ctx, SSL_VERIFY_NONE, NULL);
	}
	c.epfd = epoll_create1(0);
	struct stream *st = calloc((size_t)c.streams + 1, sizeof(*st));
	for (int i = 0; i <= c.streams; i++)
		st[i] = (struct stream){.c = &c, .index = i, .fd = -1, .phase = PH_WAIT};
	struct stream *long_st = NULL;
	if (c.long_body) {
		long_st = &st[c.streams];
		long_st->is_long = true;
	}
	double t0;
	run(&c, st, c.streams, long_st, &t0);
	double wall = c.seconds; /* tokens are counted inside [t_open, t_end] */
	struct samples ttft = {0}, itl = {0};
	long tokens = 0, reqs = 0, errs = 0;
	for (int i = 0; i < c.streams; i++) {
		tokens += st[i].tokens;
		reqs += st[i].requests;
		errs += st[i].errors;
		for (size_t k = 0; k < st[i].ttft.n; k++)
			push(&ttft, st[i].ttft.v[k]);
		for (size_t k = 0; k < st[i].itl.n; k++)
			push(&itl, st[i].itl.v[k]);
	}
	const char *dump = getenv("ITL_DUMP");
	FILE *f = dump ? fopen(dump, "w") : NULL;
	for (size_t k = 0; f && k < itl.n; k++)
		fprintf(f, "%.6f\n", itl.v[k] * 1e3);
	if (f)
		fclose(f);
	printf(
	    "{\"streams\":%d,\"long_prefill\":%s,\"warmup_s\":%.3f,\"seconds\":%.3f,"
	    "\"requests\":%ld,\"errors\":%ld,\"first_tokens\":%d,"
	    "\"tokens\":%ld,\"tok_s\":%.1f,\"ttft_p50_ms\":%.2f,\"ttft_p99_ms\":%.2f,"
	    "\"itl_p50_ms\":%.3f,\"itl_p99_ms\":%.3f,\"long_requests\":%ld,\"long_errors\":%ld}\n",
	    c.streams, c.long_body ? "true" : "false", c.t_open - t0, wall, reqs, errs, c.n_first,
	    tokens, (double)tokens / wall, pct(&ttft, 0.5) * 1e3, pct(&ttft, 0.99) * 1e3,
	    pct(&itl, 0.5) * 1e3, pct(&itl, 0.99) * 1e3, long_st ? long_st->requests : 0,
	    long_st ? long_st->errors : 0);
	return errs ? 1 : 0;
}
