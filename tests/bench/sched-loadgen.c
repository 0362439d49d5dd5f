/* Load generator for the scheduler benchmark: N concurrent client streams,
 * each a loop of streaming POST /v1/completions over HTTPS (OpenSSL) that
 * reads the SSE events as they arrive.  Each stream keeps its TLS
 * connection alive from one request to the next, as HTTP client libraries
 * (the OpenAI SDKs' among them) do; with FRESH_CONNECTIONS=1 in the
 * environment every request opens a new one (a TCP and TLS handshake per
 * request, on the same two cores as the server).  The first request of stream i asks for
 * MAX_TOKENS*(i+1)/N tokens, so that request ends, and the next prompts,
 * are spread over time as in a steady load rather than all at once.
 *
 * Steady window: it opens once every stream has received its first token
 * (the start-up burst of prompts, and any wait for KV budget, stay out of
 * it; at most WARMUP seconds after the start, then it opens anyway) and
 * lasts SECONDS.  Inside it: generated tokens (text events; a request still
 * running at the end is cut there), inter-token latency (gaps between text
 * events, both ends inside), time to first token of the requests started
 * inside it (connect included, to the first event carrying text).
 * Optionally one more client keeps sending a long prompt (max_tokens 1),
 * starting LONG_LEAD_S before the window opens (once every stream decodes),
 * to measure the streams while a long prefill runs alongside.  Prints one
 * JSON line.  Not part of the test suite; run by tests/bench/sched-load.sh.
 *
 * usage: sched-loadgen PORT API_KEY STREAMS WARMUP SECONDS MAX_TOKENS PROMPT_FILE
 *                      [LONG_PROMPT_FILE] */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define LONG_LEAD_S 1.0

struct cfg {
	int port;
	const char *key;
	int streams;
	double warmup, seconds;
	int max_tokens;
	const char *prompt;
	char *body;      /* request JSON */
	char *long_body; /* long-prompt request JSON or NULL */
	SSL_CTX *ctx;
	bool fresh_connections; /* a new connection per request */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int n_first;           /* [mu] streams that received a first token */
	double t_open, t_end;  /* the window; set before any stream starts reading */
	_Atomic double t_real_open; /* when the window opened (0 until then) */
	atomic_bool stop_long;
};

struct samples {
	double *v;
	size_t n, cap;
};

struct stream {
	struct cfg *c;
	int index;
	bool is_long, got_first;
	struct samples ttft, itl;
	long tokens, requests, errors;
	double long_prefill_s; /* long client: total request time */
	struct conn *conn;     /* open connection, or NULL */
	pthread_t th;
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

static bool in_window(struct cfg *c, double t)
{
	double open = atomic_load(&c->t_real_open);
	return open > 0 && t >= open && t <= c->t_end;
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

/* ---- one request ------------------------------------------------------- */

struct reader {
	SSL *ssl;
	char buf[16384];
	size_t len, pos;
};

/* A stream's connection, kept from one request to the next. */
struct conn {
	int fd;
	SSL *ssl;
	struct reader r;
};

static int rd_fill(struct reader *r)
{
	if (r->pos < r->len)
		return 1;
	int n = SSL_read(r->ssl, r->buf, sizeof(r->buf));
	if (n <= 0)
		return 0;
	r->len = (size_t)n;
	r->pos = 0;
	return 1;
}

/* Reads one line (without CRLF) into out; 0 at EOF. */
static int rd_line(struct reader *r, char *out, size_t cap)
{
	size_t n = 0;
	for (;;) {
		if (!rd_fill(r))
			return n > 0;
		char ch = r->buf[r->pos++];
		if (ch == '\n')
			break;
		if (n + 1 < cap)
			out[n++] = ch;
	}
	if (n && out[n - 1] == '\r')
		n--;
	out[n] = 0;
	return 1;
}

struct sse {
	char line[65536];
	size_t n;
	double t0, last;
	bool first_seen, done, cut;
	long tokens;
};

static void sse_event(struct stream *st, struct sse *e, const char *data)
{
	double t = now_s();
	if (strcmp(data, "[DONE]") == 0) {
		e->done = true;
		return;
	}
	if (!strstr(data, "\"text\":\"") || strstr(data, "\"text\":\"\""))
		return;
	if (st->is_long)
		return;
	if (t > st->c->t_end && atomic_load(&st->c->t_real_open) > 0) {
		e->cut = true; /* past the window: stop reading */
		return;
	}
	if (!st->got_first) {
		struct cfg *c = st->c;
		st->got_first = true;
		pthread_mutex_lock(&c->mu);
		if (++c->n_first == c->streams)
			pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
	}
	if (in_window(st->c, t)) {
		e->tokens++;
		if (!e->first_seen && in_window(st->c, e->t0))
			push(&st->ttft, t - e->t0);
		else if (e->first_seen && in_window(st->c, e->last))
			push(&st->itl, t - e->last);
	}
	e->first_seen = true;
	e->last = t;
}

/* Feeds body bytes to the SSE line splitter. */
static void sse_feed(struct stream *st, struct sse *e, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\n') {
			if (e->n + 1 < sizeof(e->line))
				e->line[e->n++] = p[i];
			continue;
		}
		e->line[e->n] = 0;
		if (strncmp(e->line, "data: ", 6) == 0)
			sse_event(st, e, e->line + 6);
		e->n = 0;
	}
}

static int read_body(struct stream *st, struct reader *r, struct sse *e, bool chunked)
{
	char line[256];
	if (!chunked) {
		while (!e->cut && rd_fill(r)) {
			sse_feed(st, e, r->buf + r->pos, r->len - r->pos);
			r->pos = r->len;
		}
		return 0;
	}
	for (;;) {
		if (!rd_line(r, line, sizeof(line)))
			return -1;
		size_t left = strtoul(line, NULL, 16);
		if (left == 0)
			return 0;
		while (left > 0) {
			if (e->cut)
				return 0;
			if (!rd_fill(r))
				return -1;
			size_t take = r->len - r->pos < left ? r->len - r->pos : left;
			sse_feed(st, e, r->buf + r->pos, take);
			r->pos += take;
			left -= take;
		}
		rd_line(r, line, sizeof(line)); /* CRLF after the chunk */
	}
}

/* The long-prompt client: waits for the end of its response (or the end of
 * the measurement) without blocking, so it can be stopped at any time. */
static int long_wait(struct stream *st, int fd, SSL *ssl)
{
	char buf[4096];
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (atomic_load(&st->c->stop_long))
			return 0;
		if (SSL_pending(ssl) == 0 && poll(&p, 1, 100) <= 0)
			continue;
		int n = SSL_read(ssl, buf, sizeof(buf) - 1);
		if (n <= 0)
			return 0; /* Connection: close after the response */
		buf[n] = 0;
		if (strstr(buf, "[DONE]"))
			return 0;
		if (strstr(buf, "HTTP/1.1 ") == buf && strncmp(buf, "HTTP/1.1 200", 12) != 0)
			return -1;
	}
}

static void conn_close(struct conn *k)
{
	if (!k)
		return;
	if (k->ssl) {
		SSL_shutdown(k->ssl);
		SSL_free(k->ssl);
	}
	if (k->fd >= 0)
		close(k->fd);
	free(k);
}

static struct conn *conn_open(struct cfg *c)
{
	struct conn *k = calloc(1, sizeof(*k));
	int one = 1;
	k->fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	struct timeval tmo = {.tv_sec = 60};
	setsockopt(k->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(k->fd, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo));
	if (connect(k->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		goto fail;
	k->ssl = SSL_new(c->ctx);
	SSL_set_fd(k->ssl, k->fd);
	if (SSL_connect(k->ssl) != 1)
		goto fail;
	k->r.ssl = k->ssl;
	return k;
fail:
	conn_close(k);
	return NULL;
}

/* Sends the request on the stream's connection (a new one when there is
 * none, or when a kept one turns out closed) and reads the status line;
 * returns 1 on "200", 0 on another status, -1 when nothing came back. */
static int send_request(struct stream *st, const char *body, bool keep, char *line, size_t cap)
{
	struct cfg *c = st->c;
	char hdr[1024];
	int hl = snprintf(
	    hdr, sizeof(hdr),
	    "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
	    "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: %s\r\n\r\n",
	    c->key, strlen(body), keep ? "keep-alive" : "close");
	for (int attempt = 0; attempt < 2; attempt++) {
		bool reused = st->conn != NULL;
		if (!st->conn)
			st->conn = conn_open(c);
		if (!st->conn)
			return -1;
		SSL *ssl = st->conn->ssl;
		if (SSL_write(ssl, hdr, hl) == hl &&
		    SSL_write(ssl, body, (int)strlen(body)) == (int)strlen(body) &&
		    (st->is_long || rd_line(&st->conn->r, line, cap)))
			return st->is_long || strncmp(line, "HTTP/1.1 200", 12) == 0 ? 1 : 0;
		conn_close(st->conn);
		st->conn = NULL;
		if (!reused) /* a kept connection the server closed: once more on a new one */
			return -1;
	}
	return -1;
}

static int do_request(struct stream *st, const char *body)
{
	struct cfg *c = st->c;
	struct sse *e = calloc(1, sizeof(*e));
	int rc = -1;
	bool keep = !c->fresh_connections && !st->is_long;
	char line[1024];
	e->t0 = now_s();
	if (send_request(st, body, keep, line, sizeof(line)) != 1)
		goto out;
	struct reader *r = &st->conn->r;
	if (st->is_long) {
		rc = long_wait(st, st->conn->fd, st->conn->ssl);
		goto out;
	}
	bool chunked = false, closes = !keep;
	while (rd_line(r, line, sizeof(line)) && line[0]) {
		if (strcasestr(line, "transfer-encoding:") && strcasestr(line, "chunked"))
			chunked = true;
		if (strcasestr(line, "connection:") && strcasestr(line, "close"))
			closes = true;
	}
	int body_rc = read_body(st, r, e, chunked);
	st->tokens += e->tokens;
	if (!e->cut && (body_rc != 0 || !e->done))
		goto out;
	/* the empty line after the last chunk: the connection is then ready for
	 * the next request */
	if (!e->cut && chunked && !closes && rd_line(r, line, sizeof(line)) == 1 && !line[0]) {
		free(e);
		return 0;
	}
	rc = 0;
out:
	conn_close(st->conn);
	st->conn = NULL;
	free(e);
	return rc;
}

static bool window_over(struct cfg *c)
{
	return atomic_load(&c->t_real_open) > 0 && now_s() >= c->t_end;
}

static void *stream_main(void *arg)
{
	struct stream *st = arg;
	struct cfg *c = st->c;
	for (;;) {
		if (st->is_long ? atomic_load(&c->stop_long) : window_over(c))
			break;
		double t0 = now_s();
		const char *body = st->is_long ? c->long_body : c->body;
		char *first = NULL;
		if (!st->is_long && st->requests == 0) { /* staggered first request */
			int n = (int)((long)c->max_tokens * (st->index + 1) / c->streams);
			body = first = make_body(c->prompt, n > 0 ? n : 1);
		}
		int rc = do_request(st, body);
		free(first);
		if (rc != 0) {
			st->errors++;
			usleep(10000);
		}
		st->requests++;
		if (st->is_long)
			st->long_prefill_s += now_s() - t0;
	}
	conn_close(st->conn);
	st->conn = NULL;
	return NULL;
}

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

/* Waits until every stream has received its first token, at most until
 * deadline (CLOCK_MONOTONIC seconds). */
static void wait_first_tokens(struct cfg *c, double deadline)
{
	pthread_mutex_lock(&c->mu);
	while (c->n_first < c->streams && now_s() < deadline) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100000000L; /* re-check every 100 ms */
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&c->cv, &c->mu, &ts);
	}
	pthread_mutex_unlock(&c->mu);
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
	                .max_tokens = atoi(argv[6]),
	                .mu = PTHREAD_MUTEX_INITIALIZER,
	                .cv = PTHREAD_COND_INITIALIZER};
	char *prompt = read_file(argv[7]);
	char *long_prompt = argc > 8 ? read_file(argv[8]) : NULL;
	if (!prompt || (argc > 8 && !long_prompt)) {
		fprintf(stderr, "cannot read prompt files\n");
		return 2;
	}
	c.prompt = prompt;
	c.body = make_body(prompt, c.max_tokens);
	c.long_body = long_prompt ? make_body(long_prompt, 1) : NULL;
	const char *fresh = getenv("FRESH_CONNECTIONS");
	c.fresh_connections = fresh && !strcmp(fresh, "1");
	c.ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_verify(c.ctx, SSL_VERIFY_NONE, NULL);
	int n = c.streams + (c.long_body ? 1 : 0);
	struct stream *st = calloc((size_t)n, sizeof(*st));
	double t0 = now_s();
	for (int i = 0; i < c.streams; i++) {
		st[i] = (struct stream){.c = &c, .index = i};
		pthread_create(&st[i].th, NULL, stream_main, &st[i]);
	}
	wait_first_tokens(&c, t0 + c.warmup);
	if (c.long_body) { /* the long prefill runs alongside the whole window */
		st[c.streams] = (struct stream){.c = &c, .is_long = true};
		pthread_create(&st[c.streams].th, NULL, stream_main, &st[c.streams]);
		usleep((useconds_t)(LONG_LEAD_S * 1e6));
	}
	double t_open = now_s();
	c.t_end = t_open + c.seconds;
	atomic_store(&c.t_real_open, t_open);
	for (int i = 0; i < c.streams; i++)
		pthread_join(st[i].th, NULL);
	double wall = c.seconds; /* tokens are counted inside [t_open, t_end] */
	atomic_store(&c.stop_long, true);
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
	if (c.long_body)
		pthread_join(st[c.streams].th, NULL);
	printf(
	    "{\"streams\":%d,\"long_prefill\":%s,\"warmup_s\":%.3f,\"seconds\":%.3f,"
	    "\"requests\":%ld,\"errors\":%ld,\"first_tokens\":%d,"
	    "\"tokens\":%ld,\"tok_s\":%.1f,\"ttft_p50_ms\":%.2f,\"ttft_p99_ms\":%.2f,"
	    "\"itl_p50_ms\":%.3f,\"itl_p99_ms\":%.3f,\"long_requests\":%ld,\"long_errors\":%ld}\n",
	    c.streams, c.long_body ? "true" : "false", t_open - t0, wall, reqs, errs, c.n_first,
	    tokens, (double)tokens / wall, pct(&ttft, 0.5) * 1e3, pct(&ttft, 0.99) * 1e3,
	    pct(&itl, 0.5) * 1e3, pct(&itl, 0.99) * 1e3, c.long_body ? st[c.streams].requests : 0,
	    c.long_body ? st[c.streams].errors : 0);
	return errs ? 1 : 0;
}
