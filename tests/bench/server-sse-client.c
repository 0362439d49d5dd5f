/* Client for tests/bench/server-sse.sh (not part of the test suite).
 *
 *   idle PORT KEY N BODY_FILE READY_FILE RELEASE_FILE
 *     opens N HTTPS connections, each a streaming POST /v1/completions that
 *     waits in the scheduler's queue; waits until every one has its SSE
 *     headers and one ": keep-alive" comment, writes READY_FILE, holds them
 *     open until RELEASE_FILE exists, closes them.  Prints one JSON line.
 *   latency PORT KEY N BODY_FILE
 *     N sequential streaming requests (header X-Sinkd-Timing: each event
 *     carries the engine's emit time, CLOCK_MONOTONIC µs); measures time to
 *     first token from the request write, and per token the delay from the
 *     engine emitting it to this client parsing it.  Prints one JSON line. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = calloc(1, 1 << 20);
	size_t n = fread(buf, 1, (1 << 20) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

struct conn {
	int fd;
	SSL *ssl;
	char buf[8192];
	size_t len;
	bool headers, keepalive;
};

static int conn_open(SSL_CTX *ctx, int port, struct conn *c)
{
	memset(c, 0, sizeof(*c));
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)))
		return -1;
	c->ssl = SSL_new(ctx);
	SSL_set_fd(c->ssl, c->fd);
	return SSL_connect(c->ssl) == 1 ? 0 : -1;
}

static void conn_close(struct conn *c)
{
	if (c->ssl)
		SSL_free(c->ssl);
	if (c->fd >= 0)
		close(c->fd);
	c->ssl = NULL;
	c->fd = -1;
}

static int send_request(struct conn *c, const char *key, const char *body, bool timing)
{
	char head[512];
	int n = snprintf(head, sizeof(head),
	                 "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	                 "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
	                 "%sContent-Length: %zu\r\n\r\n",
	                 key, timing ? "X-Sinkd-Timing: 1\r\n" : "", strlen(body));
	if (SSL_write(c->ssl, head, n) != n)
		return -1;
	return SSL_write(c->ssl, body, (int)strlen(body)) == (int)strlen(body) ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	if (!n)
		return -1;
	qsort(v, n, sizeof(*v), cmp_double);
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i];
}

static int run_idle(SSL_CTX *ctx, int port, const char *key, int n, const char *body,
                    const char *ready_file, const char *release_file)
{
	struct conn *c = calloc((size_t)n, sizeof(*c));
	double t0 = now_s();
	int opened = 0;
	for (int i = 0; i < n; i++) {
		if (conn_open(ctx, port, &c[i]) || send_request(&c[i], key, body, false)) {
			fprintf(stderr, "connection %d failed\n", i);
			break;
		}
		opened++;
	}
	double t_open = now_s() - t0;
	/* Reads below only follow poll(); a short receive timeout guards the rest. */
	for (int i = 0; i < opened; i++) {
		struct timeval tv = {0, 1000};
		setsockopt(c[i].fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	int with_ka = 0, with_headers = 0, status_bad = 0;
	double deadline = now_s() + 30;
	while (with_ka < opened && now_s() < deadline) {
		struct pollfd *p = calloc((size_t)opened, sizeof(*p));
		for (int i = 0; i < opened; i++)
			p[i] = (struct pollfd){.fd = c[i].fd, .events = POLLIN};
		poll(p, (nfds_t)opened, 200);
		for (int i = 0; i < opened; i++) {
			if (!(p[i].revents & POLLIN) && !SSL_pending(c[i].ssl))
				continue;
			int r = SSL_read(c[i].ssl, c[i].buf + c[i].len,
			                 (int)(sizeof(c[i].buf) - 1 - c[i].len));
			if (r <= 0)
				continue;
			c[i].len += (size_t)r;
			c[i].buf[c[i].len] = '\0';
			if (!c[i].headers && strstr(c[i].buf, "\r\n\r\n")) {
				c[i].headers = true;
				with_headers++;
				if (strncmp(c[i].buf, "HTTP/1.1 200", 12))
					status_bad++;
			}
			if (!c[i].keepalive && strstr(c[i].buf, ": keep-alive\n\n")) {
				c[i].keepalive = true;
				with_ka++;
			}
			if (c[i].len > sizeof(c[i].buf) / 2)
				c[i].len = 0; /* only markers matter from here on */
		}
		free(p);
	}
	FILE *f = fopen(ready_file, "w");
	if (f)
		fclose(f);
	while (access(release_file, F_OK) != 0)
		usleep(20000);
	for (int i = 0; i < opened; i++)
		conn_close(&c[i]);
	printf(
	    "{\"mode\":\"idle\",\"requested\":%d,\"opened\":%d,\"sse_headers\":%d,\"non_200\":%d,"
	    "\"keepalive_seen\":%d,\"open_seconds\":%.3f}\n",
	    n, opened, with_headers, status_bad, with_ka, t_open);
	free(c);
	return with_ka == n ? 0 : 1;
}

/* Reads events of one streaming response; records TTFT and emit→parse delays. */
static int read_stream(struct conn *c, double t_req, double *ttft, double *delays, size_t *n_delays,
                       size_t cap)
{
	char buf[65536];
	size_t len = 0;
	*ttft = -1;
	for (;;) {
		int r = SSL_read(c->ssl, buf + len, (int)(sizeof(buf) - 1 - len));
		if (r <= 0)
			return -1;
		double t = now_s();
		len += (size_t)r;
		buf[len] = '\0';
		char *p = buf, *end;
		while ((end = strstr(p, "\n\n"))) {
			*end = '\0';
			char *ev = strstr(p, "data: ");
			if (ev && !strncmp(ev + 6, "[DONE]", 6))
				return 0;
			char *em = ev ? strstr(ev, "\"sinkd_emit_us\":") : NULL;
			if (em) {
				if (*ttft < 0)
					*ttft = t - t_req;
				double emit = strtod(em + 16, NULL) * 1e-6;
				if (*n_delays < cap)
					delays[(*n_delays)++] = t - emit;
			}
			p = end + 2;
		}
		len -= (size_t)(p - buf);
		memmove(buf, p, len);
	}
}

static int run_latency(SSL_CTX *ctx, int port, const char *key, int n, const char *body)
{
	size_t cap = 1 << 20, n_delays = 0;
	double *delays = malloc(cap * sizeof(double)), *ttfts = malloc((size_t)n * sizeof(double));
	int ok = 0;
	double t0 = now_s();
	for (int i = 0; i < n; i++) {
		struct conn c;
		if (conn_open(ctx, port, &c))
			break;
		double t_req = now_s();
		if (!send_request(&c, key, body, true) &&
		    !read_stream(&c, t_req, &ttfts[ok], delays, &n_delays, cap))
			ok++;
		conn_close(&c);
	}
	double wall = now_s() - t0, sum = 0;
	for (size_t i = 0; i < n_delays; i++)
		sum += delays[i];
	double mean = n_delays ? sum / (double)n_delays : -1;
	printf("{\"mode\":\"latency\",\"requests\":%d,\"ok\":%d,\"tokens\":%zu,\"wall_s\":%.3f,"
	       "\"ttft_ms_p50\":%.3f,\"ttft_ms_p99\":%.3f,\"emit_to_client_us_mean\":%.1f,"
	       "\"emit_to_client_us_p50\":%.1f,\"emit_to_client_us_p99\":%.1f}\n",
	       n, ok, n_delays, wall, pct(ttfts, (size_t)ok, 0.5) * 1e3,
	       pct(ttfts, (size_t)ok, 0.99) * 1e3, mean * 1e6, pct(delays, n_delays, 0.5) * 1e6,
	       pct(delays, n_delays, 0.99) * 1e6);
	free(delays);
	free(ttfts);
	return ok == n ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr, "usage: see the comment at the top of server-sse-client.c\n");
		return 2;
	}
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	int port = atoi(argv[2]), n = atoi(argv[4]);
	char *body = read_file(argv[5]);
	if (!body)
		return 2;
	int rc;
	if (!strcmp(argv[1], "idle") && argc >= 8)
		rc = run_idle(ctx, port, argv[3], n, body, argv[6], argv[7]);
	else
		rc = run_latency(ctx, port, argv[3], n, body);
	free(body);
	SSL_CTX_free(ctx);
	return rc;
}
