/* The listener: libmicrohttpd with TLS (GnuTLS, TLS 1.2/1.3, AEAD ciphers),
 * a poll() thread pool of server.threads, the certificate chosen per
 * handshake (so a reload rotates it), suspend/resume for streams, our own
 * bound socket (clear bind errors), deadlines per connection for the
 * handshake, the request and keep-alive idling (a thread that shuts late
 * sockets down), the per-address cap and a reserve of connections for
 * /health and /ready, framing checks (smuggling-prone or oversized heads
 * refused with our JSON error), bearer auth before routing (404/405), the
 * body limit counted while it arrives, request ids, and one log line per
 * request (never its text).  Endpoint logic is in api.c, answers are built
 * by respond.c.  A request head is also looked at as it arrives (see
 * gnutls_record_recv below) for what libmicrohttpd 0.9.75 would hide or
 * answer twice: a malformed Content-Length, a NUL, an obs-folded line.
 * What it still refuses before any callback (an HTTP version other than
 * 1.x, a head bigger than the connection's memory) it answers itself, in
 * HTML.  Plain HTTP sent to the TLS port gets a plain-HTTP 400 naming https
 * (see gnutls_handshake below) instead of a silent close. */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "grammar/grammar.h"
#include "session/session_key.h"
#include "server/api.h"
#include "server/chat_render.h"
#include "server/console.h"
#include "server/genstream.h"
#include "server/listen.h"
#include "server/respond.h"
#include "server/server_impl.h"
#include "util/digest.h"
#include "util/errbuf.h"

#define LOG_MODULE "http"

/* Largest declared body that is read and dropped before a 413 (see request_begin). */
#define HTTP_BODY_DRAIN_MAX (16LL << 20)

struct route {
	const char *path;
	enum api_endpoint ep;
	const char *method;
	bool open; /* no auth */
};

static const struct route routes[] = {
    {"/health", EP_HEALTH, "GET", true},
    {"/ready", EP_READY, "GET", true},
    {"/metrics", EP_METRICS, "GET", false},
    {"/v1/models", EP_MODELS, "GET", false},
    {"/v1/completions", EP_COMPLETIONS, "POST", false},
    {"/v1/chat/completions", EP_CHAT, "POST", false},
    {"/v1/responses", EP_RESPONSES, "POST", false},
    {"/tokenize", EP_TOKENIZE, "POST", false},
    {"/detokenize", EP_DETOKENIZE, "POST", false},
    {"/v1/sessions", EP_SESSIONS, "POST", false},
    {"/v1/sessions", EP_SESSIONS, "GET", false}, /* the list */
    {"/v1/streams", EP_STREAMS, "GET", false},
    {"/v1/sessions/restore", EP_SESSION_RESTORE, "POST", false},
    /* the web console (console.c): behind the key like the API */
    {"/", EP_CONSOLE, "GET", false},
    {"/console.js", EP_CONSOLE, "GET", false},
    {"/console.css", EP_CONSOLE, "GET", false},
};

/* The route of a path: the one of its method when the path has several
 * (HEAD as GET), else its first (whose method then answers 405). */
static const struct route *route_find(const char *url, const char *method)
{
	const struct route *first = NULL;
	const char *m = strcmp(method, "HEAD") ? method : "GET";
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (strcmp(url, routes[i].path))
			continue;
		if (!strcmp(m, routes[i].method))
			return &routes[i];
		if (!first)
			first = &routes[i];
	}
	return first;
}

/* What a request id may hold (X-Request-Id, and so a stream's name). */
static bool request_id_char(char c)
{
	return c && (isalnum((unsigned char)c) || strchr("-_.:", c));
}

/* /v1/streams/{request_id}/cache (GET): a request id is what
 * request_id_init() accepts; it goes to id_out. */
static const struct route *route_stream(const char *url, char id_out[REQUEST_ID_LEN])
{
	static const struct route stream_cache = {"", EP_STREAM_CACHE, "GET", false};
	const char *prefix = "/v1/streams/", *suffix = "/cache";
	if (strncmp(url, prefix, strlen(prefix)))
		return NULL;
	const char *id = url + strlen(prefix);
	size_t n = 0;
	while (n < REQUEST_ID_LEN && request_id_char(id[n]))
		n++;
	if (n == 0 || n >= REQUEST_ID_LEN || strcmp(id + n, suffix))
		return NULL;
	memcpy(id_out, id, n);
	id_out[n] = '\0';
	return &stream_cache;
}

/* /v1/sessions/{id} (GET, PUT: create with this id, DELETE),
 * /v1/sessions/{id}/append (POST), /v1/sessions/{id}/snapshot (GET) and
 * /v1/sessions/{id}/cache (GET); the id (1..32 hex digits) goes to id_out.
 * A path of that shape whose id breaks the rule still gets its route, with
 * *bad_id set, so that it is answered with the rule (a 400) after the key
 * and the method are checked, not with "no such endpoint". */
static const struct route *route_session(const char *url, const char *method,
                                         char id_out[SCHED_SESSION_ID_LEN], bool *bad_id)
{
	static const struct route session_get = {"", EP_SESSION, "GET", false};
	static const struct route session_delete = {"", EP_SESSION, "DELETE", false};
	static const struct route session_append = {"", EP_SESSION_APPEND, "POST", false};
	static const struct route session_put = {"", EP_SESSIONS, "PUT", false};
	static const struct route session_snapshot = {"", EP_SESSION_SNAPSHOT, "GET", false};
	static const struct route session_cache = {"", EP_SESSION_CACHE, "GET", false};
	const char *prefix = "/v1/sessions/";
	*bad_id = false;
	if (strncmp(url, prefix, strlen(prefix)))
		return NULL;
	const char *id = url + strlen(prefix);
	size_t n = strcspn(id, "/");
	const char *rest = id + n;
	const struct route *rt = NULL;
	if (!strcmp(rest, "/append"))
		rt = &session_append;
	else if (!strcmp(rest, "/snapshot"))
		rt = &session_snapshot;
	else if (!strcmp(rest, "/cache"))
		rt = &session_cache;
	else if (*rest)
		return NULL;
	else if (!strcmp(method, "PUT"))
		rt = &session_put;
	else
		rt = !strcmp(method, "DELETE") ? &session_delete : &session_get;
	*bad_id = !session_id_valid_n(id, n);
	if (*bad_id)
		n = 0;
	memcpy(id_out, id, n);
	id_out[n] = '\0';
	return rt;
}

void server_set_token_queue_failure(struct server *s, uint64_t nth)
{
	atomic_store(&s->fail_token_at, nth);
}

/* ---- request lifecycle ---------------------------------------------------- */

/* X-Request-Id from the client when it is short and printable, else 16
 * random bytes (drawn once: before the headers are in, then kept). */
static void request_id_init(struct request *r)
{
	const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
	size_t n = h ? strlen(h) : 0;
	bool ok = n > 0 && n < REQUEST_ID_LEN;
	for (size_t i = 0; ok && i < n; i++)
		ok = request_id_char(h[i]);
	if (ok) {
		memcpy(r->id, h, n + 1);
		return;
	}
	if (r->id[0])
		return;
	unsigned char b[16];
	if (RAND_bytes(b, sizeof(b)) != 1)
		memset(b, 0, sizeof(b));
	digest_hex(b, sizeof(b), r->id);
}

/* ---- connections: deadlines and the reserve --------------------------------- */

/* Where a connection is, for its deadline.  libmicrohttpd's own timeout
 * restarts at every byte, so one byte every few seconds would hold a
 * connection for ever; these deadlines count from the phase's start. */
enum conn_phase {
	CONN_HANDSHAKE, /* TLS handshake: server.handshake_timeout_s from the accept */
	CONN_FIRST,     /* first request due: request_timeout_s from the handshake's end */
	CONN_REQUEST,   /* a later request's line came: request_timeout_s from it */
	CONN_ANSWER,    /* the request is in; its answer (a stream too) has no deadline */
	CONN_IDLE,      /* kept alive: idle_timeout_s from the last answer */
};

/* What the scan of a request head found so far (head_scan_chunk): the
 * plaintext on its way to libmicrohttpd, which the connection's own thread
 * reads, so no lock. */
struct head_scan_state {
	bool active;        /* a head is arriving; off from its end to the request's */
	bool past_request_line;
	bool at_line_start;
	bool after_cr;
	bool in_name;       /* before the line's first ':' */
	bool is_length;     /* the line is a Content-Length header */
	bool length_bad;    /* its value is not OWS digits OWS */
	bool length_ows_after;
	int n_length_digits;
	size_t name_len;
	char name[16];      /* the line's name, first 15 bytes */
	long line_off;      /* where the line starts in this chunk; -1: an earlier one */
	long value_off;     /* where its value starts in this chunk; -1: unknown */
	long cr_off;        /* where the CR that may end it is; -1: an earlier chunk */
	const char *bad;    /* what is wrong with the head (static text); NULL: nothing */
};

/* Per connection (libmicrohttpd's socket context), from accept to close. */
struct http_conn {
	struct server *srv;
	struct tls_creds *creds; /* NULL until the handshake asks */
	int fd;
	enum conn_phase phase;         /* [srv->conn_mu] */
	double phase_t0;               /* [srv->conn_mu] */
	bool cut;                      /* closed by its deadline [srv->conn_mu] */
	struct http_conn *prev, *next; /* srv->conns [srv->conn_mu] */
	struct head_scan_state scan;   /* the request head as it arrives [its thread] */
	unsigned magic;                /* HTTP_CONN_MAGIC: gnutls_record_recv's check */
	bool first_byte_seen;          /* gnutls_handshake looked for plain HTTP [its thread] */
};

#define HTTP_CONN_MAGIC 0x68747470u

/* Connections beyond server.max_connections that are still accepted, so
 * that /health and /ready answer while every other request gets a 503. */
#define HTTP_HEALTH_RESERVE 32
/* libmicrohttpd's inactivity timeout: a connection on which nothing moves
 * (a client that stops reading its answer) is closed after this. */
#define HTTP_STALL_TIMEOUT_S 120

static struct http_conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
	return ci ? ci->socket_context : NULL;
}

/* A phase change on the connection's own thread; `from_now` restarts the
 * clock (CONN_REQUEST after CONN_FIRST keeps the handshake's end). */
static void conn_phase_set(struct http_conn *hc, enum conn_phase p, bool from_now)
{
	if (!hc)
		return;
	pthread_mutex_lock(&hc->srv->conn_mu);
	hc->phase = p;
	if (from_now)
		hc->phase_t0 = server_now();
	pthread_mutex_unlock(&hc->srv->conn_mu);
}

/* A request line arrived. */
static void conn_request_arrived(struct http_conn *hc)
{
	if (!hc)
		return;
	pthread_mutex_lock(&hc->srv->conn_mu);
	if (hc->phase != CONN_FIRST)
		hc->phase_t0 = server_now();
	hc->phase = CONN_REQUEST;
	pthread_mutex_unlock(&hc->srv->conn_mu);
}

static bool conn_over_limit(struct server *s)
{
	pthread_mutex_lock(&s->conn_mu);
	bool over = (int64_t)s->n_conns > s->max_connections;
	pthread_mutex_unlock(&s->conn_mu);
	return over;
}

/* The deadline of a phase in seconds; 0 = none. */
static double conn_phase_limit(const struct server_settings *set, enum conn_phase p,
                               enum conn_deadline *kind)
{
	switch (p) {
	case CONN_HANDSHAKE:
		*kind = DEADLINE_HANDSHAKE;
		return (double)set->handshake_timeout_s;
	case CONN_FIRST:
	case CONN_REQUEST:
		*kind = DEADLINE_REQUEST;
		return (double)set->request_timeout_s;
	case CONN_IDLE:
		*kind = DEADLINE_IDLE;
		return (double)set->idle_timeout_s;
	case CONN_ANSWER:
		break;
	}
	return 0;
}

/* Closes every connection past its deadline.  shutdown() from this thread
 * is safe where libmicrohttpd's calls are not: the socket stays open until
 * the connection's CLOSED notice, which takes conn_mu, and libmicrohttpd's
 * own thread then sees the end of the stream and closes it.  Holds conn_mu. */
static void conn_cut_late(struct server *s, const struct server_settings *set, double now)
{
	for (struct http_conn *hc = s->conns; hc; hc = hc->next) {
		enum conn_deadline kind = DEADLINE_HANDSHAKE;
		double limit = conn_phase_limit(set, hc->phase, &kind);
		if (hc->cut || limit <= 0 || now - hc->phase_t0 < limit || hc->fd < 0)
			continue;
		shutdown(hc->fd, SHUT_RDWR);
		hc->cut = true;
		s->n_cut[kind]++;
		metrics_deadline_close(s->metrics, kind);
	}
}

/* One line at most every 10 s, when slow handshakes or requests were cut
 * since the last (idle connections are closed every day): slow clients are
 * many when they are an attack.  Holds conn_mu. */
static void conn_log_cuts(struct server *s, double now, uint64_t logged[3])
{
	if (now - s->cut_logged < 10.0 || (s->n_cut[DEADLINE_HANDSHAKE] == logged[DEADLINE_HANDSHAKE] &&
	                                   s->n_cut[DEADLINE_REQUEST] == logged[DEADLINE_REQUEST]))
		return;
	s->cut_logged = now;
	memcpy(logged, s->n_cut, sizeof(s->n_cut));
	struct log_field f[] = {LOG_INT("handshake_total", (long long)s->n_cut[DEADLINE_HANDSHAKE]),
	                        LOG_INT("request_total", (long long)s->n_cut[DEADLINE_REQUEST]),
	                        LOG_INT("idle_total", (long long)s->n_cut[DEADLINE_IDLE]),
	                        LOG_INT("open", (long long)s->n_conns), LOG_END};
	log_event(s->log, LOG_INFO, LOG_MODULE, "closed slow connections past their deadline", f);
}

static void *conn_deadline_main(void *arg)
{
	struct server *s = arg;
	uint64_t logged[3] = {0, 0, 0};
	pthread_mutex_lock(&s->conn_mu);
	while (!s->dl_quit) {
		server_cond_wait_ms(&s->conn_cond, &s->conn_mu, 250);
		if (s->dl_quit)
			break;
		pthread_mutex_unlock(&s->conn_mu);
		struct server_settings set;
		pthread_mutex_lock(&s->cfg_mu);
		set.handshake_timeout_s = s->set.handshake_timeout_s;
		set.request_timeout_s = s->set.request_timeout_s;
		set.idle_timeout_s = s->set.idle_timeout_s;
		pthread_mutex_unlock(&s->cfg_mu);
		double now = server_now();
		pthread_mutex_lock(&s->conn_mu);
		conn_cut_late(s, &set, now);
		conn_log_cuts(s, now, logged);
	}
	pthread_mutex_unlock(&s->conn_mu);
	return NULL;
}

static int conn_deadlines_start(struct server *s, char *err, size_t err_len)
{
	s->dl_quit = false;
	int rc = pthread_create(&s->dl_thread, NULL, conn_deadline_main, s);
	if (rc)
		return err_set(err, err_len, -rc, "connection deadline timer: %s", strerror(rc));
	s->dl_started = true;
	return 0;
}

static void conn_deadlines_stop(struct server *s)
{
	if (!s->dl_started)
		return;
	pthread_mutex_lock(&s->conn_mu);
	s->dl_quit = true;
	pthread_cond_broadcast(&s->conn_cond);
	pthread_mutex_unlock(&s->conn_mu);
	pthread_join(s->dl_thread, NULL);
	s->dl_started = false;
}

/* ---- request heads as they arrive: what libmicrohttpd hides or answers twice ---- */

/* libmicrohttpd 0.9.75 handles a few things in a request head before any
 * callback of ours, and wrongly: it answers a malformed Content-Length (-1,
 * +5, 20 digits) itself with its status line and headers twice (its error
 * path builds the header block, then its state machine builds it again),
 * cuts a header value at a NUL, and glues an obs-folded line onto the
 * previous header's name.  MHD_get_connection_values shows none of it.  So
 * the plaintext is looked at on its way in: this file defines
 * gnutls_record_recv, which libmicrohttpd's TLS reader calls through the
 * dynamic linker and so reaches here first; it calls GnuTLS's and scans
 * what a session of this listener (marked with gnutls_db_set_ptr in
 * conn_started) returned, from a request's first byte to its head's empty
 * line.  A NUL becomes a space and a bad Content-Length line is renamed
 * ("Xontent-Length"), so that libmicrohttpd passes the request on and
 * request_refuse_malformed answers it once, with our JSON (a line whose
 * name came in an earlier TLS record gets its value zeroed instead).
 * Limits: a Content-Length value split across two records, pipelined heads
 * and plain HTTP (no TLS) are not fixed up: libmicrohttpd answers those as
 * before. */

static void head_scan_reset(struct head_scan_state *hs)
{
	*hs = (struct head_scan_state){.active = true, .at_line_start = true,
	                                .line_off = -1, .value_off = -1, .cr_off = -1};
}

static void head_scan_flag(struct head_scan_state *hs, const char *what)
{
	if (!hs->bad)
		hs->bad = what;
}

/* A Content-Length value byte: OWS, 1 to 19 digits (below 2^64), OWS. */
static void head_scan_length_byte(struct head_scan_state *hs, char c)
{
	if (c == ' ' || c == '\t')
		hs->length_ows_after = hs->n_length_digits > 0;
	else if (c >= '0' && c <= '9' && !hs->length_ows_after)
		hs->n_length_digits++;
	else
		hs->length_bad = true;
}

/* The line that ends at end (its CR or LF; -1: in an earlier chunk). */
static void head_scan_line_end(struct head_scan_state *hs, char *buf, long end)
{
	bool bad = hs->length_bad || hs->n_length_digits < 1 || hs->n_length_digits > 19;
	if (hs->is_length && bad) {
		head_scan_flag(hs, "a malformed Content-Length (it must be 1 to 19 digits)");
		if (hs->line_off >= 0)
			buf[hs->line_off] = 'X'; /* libmicrohttpd no longer sees it */
		else if (hs->value_off >= 0 && end > hs->value_off)
			memset(buf + hs->value_off, '0', (size_t)(end - hs->value_off)); /* 0 */
	} else if (hs->is_length && hs->length_ows_after && hs->value_off >= 0 && end >= 0) {
		/* "5 " is allowed, but libmicrohttpd refuses the space (twice):
		 * the same number, zero-padded, takes the value's place. */
		char digits[20];
		int n = 0;
		for (long i = hs->value_off; i < end; i++)
			if (buf[i] >= '0' && buf[i] <= '9')
				digits[n++] = buf[i];
		memset(buf + hs->value_off, '0', (size_t)(end - hs->value_off));
		memcpy(buf + end - n, digits, (size_t)n);
	}
	hs->past_request_line = true;
	hs->at_line_start = true;
}

/* A line's first byte, at off in the chunk. */
static void head_scan_line_start(struct head_scan_state *hs, char c, long off)
{
	hs->at_line_start = false;
	hs->line_off = off;
	hs->value_off = -1;
	hs->in_name = hs->past_request_line;
	hs->is_length = hs->length_bad = hs->length_ows_after = false;
	hs->n_length_digits = 0;
	hs->name_len = 0;
	if (hs->past_request_line && (c == ' ' || c == '\t'))
		head_scan_flag(hs, "a folded header line (a line that starts with a space or tab)");
}

static void head_scan_name_byte(struct head_scan_state *hs, char c, long off)
{
	if (c != ':') {
		if (hs->name_len < sizeof(hs->name) - 1)
			hs->name[hs->name_len] = c;
		hs->name_len++;
		return;
	}
	hs->in_name = false;
	hs->is_length = hs->name_len == 14 && !strncasecmp(hs->name, "content-length", 14);
	hs->value_off = off + 1;
}

/* LF or CR at i; returns false at the head's empty line (the scan ends). */
static bool head_scan_terminator(struct head_scan_state *hs, char *buf, long i, char c)
{
	if (c == '\r') {
		hs->after_cr = true;
		hs->cr_off = i;
		return true;
	}
	long end = hs->after_cr ? hs->cr_off : i;
	hs->after_cr = false;
	if (hs->at_line_start)
		return !hs->past_request_line; /* empty lines before a request are skipped */
	head_scan_line_end(hs, buf, end);
	return true;
}

static void head_scan_chunk(struct head_scan_state *hs, char *buf, long n)
{
	hs->line_off = hs->value_off = hs->cr_off = -1; /* offsets are per chunk */
	for (long i = 0; i < n && hs->active; i++) {
		char c = buf[i];
		if (hs->after_cr && c != '\n') {
			head_scan_flag(hs, "a bare CR in a header (a CR not followed by LF)");
			hs->after_cr = false;
		}
		if (c == '\r' || c == '\n') {
			hs->active = head_scan_terminator(hs, buf, i, c);
			continue;
		}
		if (c == '\0') {
			head_scan_flag(hs, "a NUL byte in the request head");
			buf[i] = c = ' ';
		}
		if (hs->at_line_start)
			head_scan_line_start(hs, c, i);
		if (hs->in_name)
			head_scan_name_byte(hs, c, i);
		else if (hs->is_length)
			head_scan_length_byte(hs, c);
	}
}

typedef ssize_t (*record_recv_fn)(gnutls_session_t, void *, size_t);

/* See the section's comment.  The pointer to GnuTLS's own function is looked
 * up once and cached: the one piece of static state here, and it never
 * changes once set. */
ssize_t gnutls_record_recv(gnutls_session_t session, void *data, size_t data_size)
{
	static _Atomic(record_recv_fn) real;
	record_recv_fn fn = atomic_load(&real);
	if (!fn) {
		fn = (record_recv_fn)dlsym(RTLD_NEXT, "gnutls_record_recv");
		if (!fn)
			return GNUTLS_E_INTERNAL_ERROR;
		atomic_store(&real, fn);
	}
	ssize_t n = fn(session, data, data_size);
	struct http_conn *hc = n > 0 ? gnutls_db_get_ptr(session) : NULL;
	if (hc && hc->magic == HTTP_CONN_MAGIC && hc->scan.active)
		head_scan_chunk(&hc->scan, data, (long)n);
	return n;
}

/* ---- plain HTTP on the TLS port ---------------------------------------------- */

/* A client that speaks plain HTTP to the TLS port would get its connection
 * closed and nothing else (GnuTLS fails the handshake on its first byte).
 * libmicrohttpd 0.9.75 gives no hook before its handshake, so, as for
 * gnutls_record_recv above, this file defines gnutls_handshake: before a
 * session of this listener starts its handshake it peeks at the first byte
 * on the socket.  A TLS record starts with its type (0x14..0x18, 0x80 for an
 * SSLv2 hello), a request line with a method in capitals: for that one a
 * short plain-HTTP 400 naming https is written on the raw socket (as nginx
 * does), what the client sent so far is read and dropped (a close with
 * unread bytes would reset the connection and lose the answer), and the
 * handshake fails, so libmicrohttpd closes the connection. */

#define PLAIN_HTTP_BODY                                                                        \
	"400 The plain HTTP request was sent to HTTPS port: use https:// for this server.\n"
_Static_assert(sizeof(PLAIN_HTTP_BODY) - 1 == 81, "the Content-Length below");
static const char plain_http_answer[] = "HTTP/1.1 400 Bad Request\r\n"
                                        "Content-Type: text/plain; charset=utf-8\r\n"
                                        "Content-Length: 81\r\n"
                                        "Connection: close\r\n"
                                        "\r\n" PLAIN_HTTP_BODY;

/* True when the connection spoke plain HTTP and was answered. */
static bool conn_refuse_plain_http(struct http_conn *hc)
{
	unsigned char first;
	ssize_t n = recv(hc->fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n <= 0)
		return false; /* nothing yet (looked at again next time), or gone */
	hc->first_byte_seen = true;
	if (first < 'A' || first > 'Z')
		return false;
	char drop[4096];
	for (int i = 0; i < 16 && recv(hc->fd, drop, sizeof(drop), MSG_DONTWAIT) > 0; i++)
		;
	ssize_t sent = send(hc->fd, plain_http_answer, sizeof(plain_http_answer) - 1,
	                    MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)sent; /* a client that cannot take 250 bytes gets the close alone */
	shutdown(hc->fd, SHUT_WR);
	return true;
}

typedef int (*handshake_fn)(gnutls_session_t);

/* See the section's comment; the pointer is cached as gnutls_record_recv's. */
int gnutls_handshake(gnutls_session_t session)
{
	static _Atomic(handshake_fn) real;
	handshake_fn fn = atomic_load(&real);
	if (!fn) {
		fn = (handshake_fn)dlsym(RTLD_NEXT, "gnutls_handshake");
		if (!fn)
			return GNUTLS_E_INTERNAL_ERROR;
		atomic_store(&real, fn);
	}
	struct http_conn *hc = gnutls_db_get_ptr(session);
	if (hc && hc->magic == HTTP_CONN_MAGIC && !hc->first_byte_seen && hc->fd >= 0 &&
	    conn_refuse_plain_http(hc))
		return GNUTLS_E_UNEXPECTED_PACKET;
	return fn(session);
}

/* ---- request framing: checked before routing ---------------------------------- */

/* What one pass over the request's headers found. */
struct header_scan {
	size_t n, bytes;
	int n_host, n_length, n_te, n_auth;
	bool bad_name; /* a name with a space or another non-token byte */
	bool bare_cr;  /* a CR left in a value (libmicrohttpd splits lines at LF) */
	const char *te;
};

static enum MHD_Result header_scan_one(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
	struct header_scan *h = cls;
	(void)kind;
	if (!key)
		return MHD_YES;
	h->n++;
	h->bytes += strlen(key) + (value ? strlen(value) : 0) + 4; /* ": " and CRLF */
	static const char tchar[] = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
	                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
	if (!*key || key[strspn(key, tchar)])
		h->bad_name = true;
	if (value && strchr(value, '\r'))
		h->bare_cr = true;
	/* Repeated even with equal values: which one counts differs between
	 * a proxy and us, and that difference is how requests get smuggled. */
	if (!strcasecmp(key, "Host")) {
		h->n_host++;
	} else if (!strcasecmp(key, "Content-Length")) {
		h->n_length++;
	} else if (!strcasecmp(key, "Authorization")) {
		h->n_auth++;
	} else if (!strcasecmp(key, "Transfer-Encoding")) {
		h->n_te++;
		h->te = value;
	}
	return MHD_YES;
}

static enum MHD_Result refuse(struct request *r, int status, const char *code, const char *msg)
{
	r->close_after = true; /* how the rest of the bytes are framed is unclear */
	return respond_error(r, status, NULL, code, 0, "%s", msg);
}

/* Requests that libmicrohttpd accepts but that smuggle, hide or overflow:
 * answers and returns true for those. */
static bool request_refuse_malformed(struct request *r, const char *version, enum MHD_Result *ret)
{
	struct server *s = r->srv;
	char msg[160];
	if (r->uri_too_long) {
		snprintf(msg, sizeof(msg), "request target longer than %lld bytes",
		         (long long)s->max_uri_bytes);
		*ret = refuse(r, 414, "uri_too_long", msg);
		return true;
	}
	if (r->uri_nul) {
		*ret = refuse(r, 400, "invalid_path", "request target contains %00 (a NUL byte)");
		return true;
	}
	struct header_scan h = {0};
	MHD_get_connection_values(r->conn, MHD_HEADER_KIND, header_scan_one, &h);
	const char *bad = NULL;
	if ((int64_t)h.n > s->max_headers || (int64_t)h.bytes > s->max_header_bytes) {
		snprintf(msg, sizeof(msg),
		         "request headers too large: %zu lines, %zu bytes (at most %lld lines, "
		         "%lld bytes)",
		         h.n, h.bytes, (long long)s->max_headers, (long long)s->max_header_bytes);
		*ret = refuse(r, 431, "headers_too_large", msg);
		return true;
	}
	if (r->hc && r->hc->scan.bad)
		bad = r->hc->scan.bad;
	else if (version && strcmp(version, MHD_HTTP_VERSION_1_0) && h.n_host == 0)
		bad = "HTTP/1.1 request without a Host header";
	else if (h.n_host > 1)
		bad = "more than one Host header";
	else if (h.bad_name)
		bad = "a header name with a space or a byte that is not a token character";
	else if (h.bare_cr)
		bad = "a bare CR in a header (a CR not followed by LF)";
	else if (h.n_length > 1)
		bad = "more than one Content-Length header";
	else if (h.n_auth > 1)
		bad = "more than one Authorization header";
	else if (h.n_te && h.n_length)
		bad = "both Transfer-Encoding and Content-Length";
	else if (h.n_te > 1)
		bad = "more than one Transfer-Encoding header";
	if (bad) {
		*ret = refuse(r, 400, "malformed_request", bad);
		return true;
	}
	if (h.n_te && (!h.te || strcasecmp(h.te, "chunked"))) {
		*ret = refuse(r, 501, "unsupported_transfer_encoding",
		              "Transfer-Encoding other than chunked is not supported");
		return true;
	}
	r->chunked = h.n_te > 0;
	return false;
}

/* ---- request lifecycle (continued) ----------------------------------------------- */

static struct request *request_new(struct server *s, struct MHD_Connection *c)
{
	struct request *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->srv = s;
	r->conn = c;
	r->ep = EP_OTHER;
	r->hc = conn_of(c);
	r->t_start = server_now();
	request_id_init(r);
	conn_request_arrived(r->hc);
	return r;
}

/* libmicrohttpd's URI log callback: the request line is in, the headers are
 * not.  The raw target still shows "%00", which the decoded URL hides. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
	struct server *s = cls;
	struct request *r = request_new(s, c);
	if (!r)
		return NULL; /* on_access tries again */
	r->uri_too_long = (int64_t)strlen(uri) > s->max_uri_bytes;
	r->uri_nul = strstr(uri, "%00") != NULL;
	return r;
}

static enum MHD_Result http_respond_405(struct request *r, const struct route *rt)
{
	struct MHD_Response *resp = respond_error_response(
	    respond_type_of(405), NULL, "method_not_allowed", 0, "method not allowed");
	if (!resp)
		return MHD_NO;
	const char *allow = rt->method;
	if (rt->ep == EP_SESSION)
		allow = "GET, PUT, DELETE";
	else if (rt->ep == EP_SESSIONS && !strcmp(rt->path, "/v1/sessions"))
		allow = "GET, POST";
	MHD_add_response_header(resp, "Allow", allow);
	return respond_queue(r, 405, resp);
}

/* limits.max_body_bytes, or for a restore what the largest snapshot this
 * instance can take may need. */
static int64_t request_body_limit(const struct request *r)
{
	if (r->ep == EP_SESSION_RESTORE)
		return (int64_t)scheduler_snapshot_max_bytes(r->srv->sched);
	pthread_mutex_lock(&r->srv->cfg_mu);
	int64_t limit = r->srv->set.max_body_bytes;
	pthread_mutex_unlock(&r->srv->cfg_mu);
	return limit;
}

/* A declared body over the limit: 413 now, or read and drop it first. */
static enum MHD_Result request_check_length(struct request *r)
{
	struct MHD_Connection *c = r->conn;
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	int64_t limit = request_body_limit(r);
	long long declared = cl ? strtoll(cl, NULL, 10) : -1;
	if (declared <= limit)
		return MHD_YES;
	/* Answering before the body is read makes the socket close with unread
	 * bytes, and the kernel's reset can destroy the 413 before the client
	 * reads it.  So a body of modest size is read and dropped first; only
	 * a client that waits for "100 Continue", or one that declares more
	 * than HTTP_BODY_DRAIN_MAX, gets its answer at once. */
	const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
	if ((expect && strcasecmp(expect, "100-continue") == 0) || declared > HTTP_BODY_DRAIN_MAX)
		return respond_error(r, 413, NULL, "body_too_large", 0,
		                     "request body larger than %lld bytes", (long long)limit);
	r->body_too_large = true;
	return MHD_YES;
}

/* respond_queue adds the Bearer challenge; Basic is offered too (auth.c
 * takes its password as the key) because it is the only one a browser
 * answers, with a prompt: opening the console, or the console's own fetch
 * calls when their credentials went stale. */
static enum MHD_Result http_respond_401(struct request *r)
{
	struct MHD_Response *resp = respond_error_response(
	    respond_type_of(401), NULL, "invalid_api_key", 0, "missing or invalid API key");
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "WWW-Authenticate",
	                        "Basic realm=\"sinkd\", charset=\"UTF-8\"");
	return respond_queue(r, 401, resp);
}

/* A body that will follow and that is worth reading to its end (declared
 * up to HTTP_BODY_DRAIN_MAX, or chunked) before an early answer. */
static bool request_body_modest(const struct request *r)
{
	const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
	const char *expect = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Expect");
	if (expect && strcasecmp(expect, "100-continue") == 0)
		return false;
	if (r->chunked)
		return true;
	long long declared = cl ? strtoll(cl, NULL, 10) : 0;
	return declared > 0 && declared <= HTTP_BODY_DRAIN_MAX;
}

/* Headers are in: framing, then authentication (so that 404 and 405 tell
 * nothing to a client without a key), then the route, then the body size. */
static enum MHD_Result request_begin(struct server *s, struct MHD_Connection *c, const char *url,
                                     const char *method, const char *version, void **con_cls)
{
	struct request *r = *con_cls;
	if (!r && !(r = request_new(s, c)))
		return MHD_NO;
	*con_cls = r;
	r->begun = true;
	r->method = method;
	request_id_init(r);
	enum MHD_Result ret;
	if (request_refuse_malformed(r, version, &ret))
		return ret;
	bool bad_session_id = false;
	const struct route *rt = route_find(url, method);
	if (!rt)
		rt = route_session(url, method, r->session_id, &bad_session_id);
	if (!rt)
		rt = route_stream(url, r->stream_id);
	r->ep = rt ? rt->ep : EP_OTHER;
	bool open = rt && rt->open;
	if (!open && conn_over_limit(s)) {
		r->close_after = true;
		return respond_error(r, 503, NULL, "too_many_connections", 1,
		                     "too many open connections; only /health and /ready are "
		                     "served beyond server.max_connections");
	}
	if (!open) {
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		int key = -1;
		pthread_mutex_lock(&s->cfg_mu);
		bool ok = auth_match(
		    &s->set.keys, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"),
		    &key);
		quota_client_of(&r->client, key >= 0 ? s->set.keys.digests[key] : NULL,
		                ci ? ci->client_addr : NULL);
		pthread_mutex_unlock(&s->cfg_mu);
		if (!ok && request_body_modest(r)) {
			/* answered after its body is read and dropped, as a 413 is:
			 * an answer before it can be lost to the close's reset */
			r->unauthorized = true;
			return MHD_YES;
		}
		if (!ok)
			return http_respond_401(r);
	}
	if (!rt)
		return respond_error(r, 404, NULL, "not_found", 0, "no such endpoint: %s %.200s",
		                     method, url);
	/* HEAD is GET without the body (libmicrohttpd drops it): probes use it. */
	bool head_ok = !strcmp(method, "HEAD") && !strcmp(rt->method, "GET");
	if (strcmp(method, rt->method) && !head_ok)
		return http_respond_405(r, rt);
	if (bad_session_id)
		return respond_error(r, 400, "session_id", "invalid_value", 0,
		                     "not a session id: session ids are 1 to %d hex digits",
		                     SESSION_ID_MAX);
	return request_check_length(r);
}

/* Counts upload data as it arrives; keeps nothing past the limit.  Returns
 * false for a chunked body past HTTP_BODY_DRAIN_MAX: nothing declared bounds
 * what such a client may still send, so the connection is closed (a modest
 * one is read to its end for its 413, as a declared length is). */
static bool request_body_add(struct request *r, const char *data, size_t n)
{
	int64_t limit = request_body_limit(r);
	r->body_seen += n;
	if (r->chunked && r->body_seen > (uint64_t)limit &&
	    r->body_seen > (uint64_t)HTTP_BODY_DRAIN_MAX)
		return false;
	if (r->unauthorized)
		return r->body_seen <= (uint64_t)HTTP_BODY_DRAIN_MAX;
	if (r->body_too_large || r->responded)
		return true;
	if ((int64_t)(r->body_len + n) > limit) {
		r->body_too_large = true;
		free(r->body);
		r->body = NULL;
		r->body_len = r->body_cap = 0;
		return true;
	}
	if (sse_append_raw(&r->body, &r->body_len, &r->body_cap, data, n))
		r->body_too_large = true;
	return true;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
	struct request *r = *con_cls;
	if (!r || !r->begun)
		return request_begin(cls, c, url, method, version, con_cls);
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		return request_body_add(r, upload_data, n) ? MHD_YES : MHD_NO;
	}
	conn_phase_set(r->hc, CONN_ANSWER, false); /* the whole request is in */
	if (r->responded)
		return MHD_YES;
	if (r->unauthorized)
		return http_respond_401(r);
	if (r->body_too_large)
		return respond_error(r, 413, NULL, "body_too_large", 0,
		                     "request body larger than %lld bytes",
		                     (long long)request_body_limit(r));
	if (r->gs)
		return genstream_respond(r);
	if (r->ep == EP_CONSOLE)
		return console_respond(r, url); /* static: served while loading too */
	return api_handle(r);
}

/* The status a request is logged and counted with. */
static int request_final_status(const struct request *r, enum MHD_RequestTerminationCode toe)
{
	bool cut = false;
	if (r->hc) {
		pthread_mutex_lock(&r->srv->conn_mu);
		cut = r->hc->cut;
		pthread_mutex_unlock(&r->srv->conn_mu);
	}
	if (!r->responded)
		return cut ? 408 : 499; /* its deadline passed, or the client went away first */
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && r->gs)
		return 499; /* a generation whose client hung up before the end */
	return r->status;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	struct server *s = cls;
	struct request *r = *con_cls;
	if (!r)
		return;
	int tin = 0, tout = 0;
	double ttft = -1;
	if (r->gs)
		genstream_detach(r->gs, &tin, &tout, &ttft);
	int status = request_final_status(r, toe);
	/* A request that libmicrohttpd answered itself (a header block past its
	 * memory, a bad Content-Length) never reached request_begin. */
	const union MHD_ConnectionInfo *ci =
	    r->begun ? NULL : MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
	if (ci && ci->http_status)
		status = (int)ci->http_status;
	metrics_request(s->metrics, r->ep, status);
	double dur_ms = (server_now() - r->t_start) * 1e3;
	enum log_level lv =
	    r->ep == EP_HEALTH || r->ep == EP_READY || r->ep == EP_METRICS ? LOG_DEBUG : LOG_INFO;
	struct log_field f[] = {LOG_STR("request_id", r->id),
	                        LOG_STR("method", r->method ? r->method : ""),
	                        LOG_STR("endpoint", api_endpoint_path(r->ep)),
	                        LOG_INT("status", status),
	                        LOG_INT("tokens_in", tin),
	                        LOG_INT("tokens_out", tout),
	                        LOG_DBL("ttft_ms", ttft >= 0 ? ttft * 1e3 : -1),
	                        LOG_DBL("duration_ms", dur_ms),
	                        LOG_END};
	log_event(s->log, lv, LOG_MODULE, "request", f);
	conn_phase_set(r->hc, CONN_IDLE, true);
	if (r->hc)
		head_scan_reset(&r->hc->scan); /* the next request's head is next */
	free(r->body);
	free(r);
	*con_cls = NULL;
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char msg[256];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	struct log_field f[] = {LOG_STR("detail", msg), LOG_END};
	log_event(cls, LOG_DEBUG, LOG_MODULE, "libmicrohttpd", f);
}

/* ---- TLS: a certificate per handshake --------------------------------------- */

/* tls_cert_callback finds its connection through the GnuTLS session's user
 * pointer, which libmicrohttpd sets to the connection.  A libmicrohttpd that
 * does not would fail every handshake, and the callback cannot reach the log,
 * so the check (and the one log line) is here. */
static void tls_check_session_ptr(struct server *s, struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
	gnutls_session_t session = ci ? (gnutls_session_t)ci->tls_session : NULL;
	if (session && gnutls_session_get_ptr(session) == c)
		return;
	if (atomic_exchange(&s->tls_ptr_warned, 1) == 0)
		log_msg(s->log, LOG_ERROR, LOG_MODULE,
		        "TLS handshakes fail: this libmicrohttpd does not set the GnuTLS session "
		        "pointer to its connection, so no certificate can be chosen");
}

/* GnuTLS calls this on the connection's thread when the client's Finished
 * message is in: the handshake deadline gives way to the request's. */
static int tls_handshake_hook(gnutls_session_t session, unsigned int htype, unsigned int when,
                              unsigned int incoming, const gnutls_datum_t *msg)
{
	(void)when;
	(void)msg;
	if (htype != GNUTLS_HANDSHAKE_FINISHED || !incoming)
		return 0;
	struct http_conn *hc = conn_of(gnutls_session_get_ptr(session));
	if (!hc)
		return 0;
	pthread_mutex_lock(&hc->srv->conn_mu);
	if (hc->phase == CONN_HANDSHAKE) {
		hc->phase = CONN_FIRST;
		hc->phase_t0 = server_now();
	}
	pthread_mutex_unlock(&hc->srv->conn_mu);
	return 0;
}

static void conn_started(struct server *s, struct MHD_Connection *c, void **socket_context)
{
	struct http_conn *hc = calloc(1, sizeof(*hc));
	*socket_context = hc; /* NULL (out of memory): no deadline; a TLS handshake fails */
	if (s->tls)
		tls_check_session_ptr(s, c);
	if (!hc)
		return;
	hc->srv = s;
	hc->magic = HTTP_CONN_MAGIC;
	head_scan_reset(&hc->scan);
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	hc->fd = ci ? ci->connect_fd : -1;
	hc->phase = s->tls ? CONN_HANDSHAKE : CONN_FIRST;
	hc->phase_t0 = server_now();
	ci = s->tls ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION) : NULL;
	if (ci && ci->tls_session) {
		gnutls_handshake_set_hook_function((gnutls_session_t)ci->tls_session,
		                                   GNUTLS_HANDSHAKE_FINISHED, GNUTLS_HOOK_POST,
		                                   tls_handshake_hook);
		/* marks the session for gnutls_record_recv's head scan (no
		 * session cache callbacks are set: nothing else reads it) */
		gnutls_db_set_ptr((gnutls_session_t)ci->tls_session, hc);
	}
	pthread_mutex_lock(&s->conn_mu);
	hc->next = s->conns;
	if (s->conns)
		s->conns->prev = hc;
	s->conns = hc;
	s->n_conns++;
	pthread_mutex_unlock(&s->conn_mu);
}

/* libmicrohttpd reports a connection closed after gnutls_deinit and before
 * it closes the socket: GnuTLS no longer points at the credentials, and the
 * deadline thread may still shut the socket down until it is unlinked here. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
	struct server *s = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		conn_started(s, c, socket_context);
		return;
	}
	struct http_conn *hc = *socket_context;
	*socket_context = NULL;
	if (!hc)
		return;
	pthread_mutex_lock(&s->conn_mu);
	if (hc->prev)
		hc->prev->next = hc->next;
	else
		s->conns = hc->next;
	if (hc->next)
		hc->next->prev = hc->prev;
	s->n_conns--;
	pthread_mutex_unlock(&s->conn_mu);
	tls_creds_unref(hc->creds);
	free(hc);
}

/* A gnutls_certificate_retrieve_function2: libmicrohttpd passes no user
 * pointer, so the store is reached through session -> connection -> socket
 * context.  Returning -1 fails the handshake. */
static int tls_cert_callback(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                             const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                             gnutls_pcert_st **pcert, unsigned int *pcert_length,
                             gnutls_privkey_t *privkey)
{
	struct http_conn *tc = conn_of(gnutls_session_get_ptr(session));
	if (!tc)
		return -1;
	/* A second call (TLS 1.2 renegotiation) keeps the first answer, which
	 * GnuTLS may still point at. */
	if (!tc->creds)
		tc->creds = tls_store_current(tc->srv->tls_store);
	if (!tc->creds)
		return -1;
	tls_creds_get(tc->creds, pcert, pcert_length, privkey);
	return 0;
}

/* The first half of a rotation, the one that can fail: loads and checks the
 * files of cfg.  *out stays NULL when there is nothing to rotate (no TLS, or
 * a server.tls.enabled change, which needs a restart). */
static int server_tls_load(const struct server *s, const struct sinkd_config *cfg,
                           struct tls_creds **out, char *err, size_t err_len)
{
	*out = NULL;
	if (!s->tls || !cfg->server.tls_enabled)
		return 0;
	return tls_creds_load(cfg->server.tls_cert_file, cfg->server.tls_key_file, out, err,
	                      err_len);
}

/* The second half, which cannot fail: new handshakes get next (its reference
 * moves to the store); connections that handshook before keep theirs. */
static void server_tls_swap(struct server *s, struct tls_creds *next, const char *cert_file)
{
	if (!next)
		return;
	struct tls_creds *cur = tls_store_current(s->tls_store);
	bool changed = !cur || strcmp(tls_creds_fingerprint(cur), tls_creds_fingerprint(next));
	tls_creds_unref(cur);
	struct log_field f[] = {LOG_STR("cert_file", cert_file),
	                        LOG_STR("fingerprint_sha256", tls_creds_fingerprint(next)),
	                        LOG_INT("changed", changed), LOG_END};
	tls_store_swap(s->tls_store, next);
	log_event(s->log, LOG_INFO, LOG_MODULE, "TLS certificate reloaded", f);
}

static int server_tls_init(struct server *s, const struct sinkd_config *cfg, char *err,
                           size_t err_len)
{
	if (MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES)
		return err_set(err, err_len, -ENOTSUP,
		               "server.tls: this libmicrohttpd cannot choose the certificate per "
		               "handshake (MHD_FEATURE_HTTPS_CERT_CALLBACK: built without GnuTLS "
		               "3?); rebuild it, or serve plain HTTP (server.tls.enabled: false) "
		               "behind a TLS proxy");
	struct tls_creds *creds = NULL;
	int rc = server_tls_load(s, cfg, &creds, err, err_len);
	if (rc)
		return rc;
	struct log_field f[] = {LOG_STR("cert_file", cfg->server.tls_cert_file),
	                        LOG_STR("fingerprint_sha256", tls_creds_fingerprint(creds)),
	                        LOG_END};
	log_event(s->log, LOG_INFO, LOG_MODULE, "TLS certificate loaded", f);
	return tls_store_new(creds, &s->tls_store, err, err_len);
}

/* ---- lifecycle -------------------------------------------------------------- */

static int settings_from_config(const struct sinkd_config *cfg, struct server_settings *set,
                                char *err, size_t err_len)
{
	int rc =
	    auth_keys_parse(cfg->server.api_keys, cfg->server.n_api_keys, &set->keys, err, err_len);
	if (rc)
		return rc;
	set->max_body_bytes = cfg->limits.max_body_bytes;
	set->max_tokens = cfg->limits.max_tokens;
	set->keepalive_s = cfg->server.sse_keepalive_s;
	quota_limits_from_config(cfg, &set->quota);
	set->handshake_timeout_s = cfg->server.handshake_timeout_s;
	set->request_timeout_s = cfg->server.request_timeout_s;
	set->idle_timeout_s = cfg->server.idle_timeout_s;
	set->pin_system_prompt = cfg->inference.cache.pin_system_prompt;
	return 0;
}

/* Memory per connection: the request line and the header block stay in it
 * while the headers are parsed (each header costs a list entry too), and
 * the rest of the read buffer takes the body.  Sized so that our limits,
 * answered as JSON, are reached before libmicrohttpd's own (HTML). */
static size_t connection_memory(const struct sinkd_config *cfg)
{
	return (size_t)(cfg->server.max_uri_bytes + cfg->server.max_header_bytes +
	                cfg->server.max_headers * 96) +
	       (size_t)(32 << 10);
}

/* 1,000 streams need 1,000+ descriptors: raise the soft limit to the hard one. */
static void raise_nofile(struct sinkd_log *log, int64_t want)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	rlim_t need = (rlim_t)want + 64;
	if (rl.rlim_cur >= need || rl.rlim_cur == rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
		log_msg(log, LOG_INFO, LOG_MODULE, "raised open-file limit to %llu",
		        (unsigned long long)rl.rlim_cur);
	if (rl.rlim_cur < need)
		log_msg(log, LOG_WARN, LOG_MODULE,
		        "open-file limit %llu is below server.max_connections + 64",
		        (unsigned long long)rl.rlim_cur);
}

static int start_mhd(struct server *s, const struct sinkd_config *cfg, char *err, size_t err_len)
{
	/* poll(), not epoll: libmicrohttpd 0.9.75's epoll loop aborts the
	 * process when MHD_quiesce_daemon (drain) races its own removal of the
	 * listen socket from the epoll set ("Failed to remove listen FD"). */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
	                 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	struct MHD_OptionItem opts[24];
	int n = 0;
	unsigned pool = cfg->server.threads > 1 ? (unsigned)cfg->server.threads : 1;
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, s->listen_fd, NULL};
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s};
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_uri, s};
	opts[n++] =
	    (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, s};
	opts[n++] = (struct MHD_OptionItem){
	    MHD_OPTION_CONNECTION_LIMIT,
	    (intptr_t)(cfg->server.max_connections + HTTP_HEALTH_RESERVE), NULL};
	if (cfg->server.max_connections_per_address > 0)
		opts[n++] = (struct MHD_OptionItem){
		    MHD_OPTION_PER_IP_CONNECTION_LIMIT,
		    (intptr_t)cfg->server.max_connections_per_address, NULL};
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	                                    (intptr_t)connection_memory(cfg), NULL};
	opts[n++] =
	    (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, HTTP_STALL_TIMEOUT_S, NULL};
	opts[n++] =
	    (struct MHD_OptionItem){MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_logger, s->log};
	if (pool > 1)
		opts[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, pool, NULL};
	if (s->tls) {
		flags |= MHD_USE_TLS;
		opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
		                                    (void *)tls_cert_callback};
		opts[n++] =
		    (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)TLS_PRIORITIES};
	}
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
	s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s, MHD_OPTION_ARRAY, opts,
	                          MHD_OPTION_END);
	if (!s->mhd)
		return err_set(err, err_len, -EIO,
		               "cannot start the %s listener on %s (libmicrohttpd refused the "
		               "options; run with logging.level=debug for details)",
		               s->tls ? "HTTPS" : "HTTP", cfg->server.listen);
	return 0;
}

int server_new(const struct sinkd_config *cfg, struct sinkd_log *log, struct server **out,
               char *err, size_t err_len)
{
	struct server *s = calloc(1, sizeof(*s));
	if (!s)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	s->log = log;
	s->listen_fd = -1;
	s->stopped = true; /* nothing to stop until the listener runs */
	pthread_mutex_init(&s->cfg_mu, NULL);
	pthread_mutex_init(&s->gen_mu, NULL);
	pthread_cond_init(&s->gen_cond, NULL);
	pthread_mutex_init(&s->conn_mu, NULL);
	pthread_cond_init(&s->conn_cond, NULL);
	s->tls = cfg->server.tls_enabled;
	s->max_connections = cfg->server.max_connections;
	s->max_uri_bytes = cfg->server.max_uri_bytes;
	s->max_header_bytes = cfg->server.max_header_bytes;
	s->max_headers = cfg->server.max_headers;
	int rc = metrics_new(&s->metrics);
	if (rc) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto fail;
	}
	rc = settings_from_config(cfg, &s->set, err, err_len);
	/* Clients with a stream each are at most the connections: room for
	 * those, and as many idle ones again. */
	if (!rc)
		rc = quota_new(&(struct quota_options){.max_clients =
		                                           2 * (size_t)cfg->server.max_connections},
		               &s->set.quota, &s->quota, err, err_len);
	if (!rc && grammar_cache_new(SERVER_GRAMMAR_CACHE, &s->grammars))
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
	if (!rc && s->tls)
		rc = server_tls_init(s, cfg, err, err_len);
	if (rc)
		goto fail;
	raise_nofile(log, cfg->server.max_connections + HTTP_HEALTH_RESERVE);
	rc = listen_open(cfg->server.listen, 1024, &s->listen_fd, &s->port, err, err_len);
	if (!rc)
		rc = genstream_keepalive_start(s, err, err_len);
	if (!rc)
		rc = conn_deadlines_start(s, err, err_len);
	if (!rc)
		rc = start_mhd(s, cfg, err, err_len);
	if (rc)
		goto fail;
	s->stopped = false;
	if (!s->tls)
		log_msg(log, LOG_WARN, LOG_MODULE,
		        "TLS IS DISABLED (server.tls.enabled: false): API keys and all traffic "
		        "travel in clear text; use this only behind a TLS-terminating proxy");
	struct log_field f[] = {
	    LOG_STR("listen", cfg->server.listen),
	    LOG_INT("port", s->port),
	    LOG_STR("scheme", s->tls ? "https" : "http"),
	    LOG_INT("threads", cfg->server.threads > 1 ? cfg->server.threads : 1),
	    LOG_INT("auth", s->set.keys.n > 0),
	    LOG_END};
	log_event(log, LOG_INFO, LOG_MODULE, "listening", f);
	*out = s;
	return 0;
fail:
	server_free(s);
	return rc;
}

int server_port(const struct server *s)
{
	return s->port;
}

void server_attach_engine(struct server *s, const struct server_engine *e)
{
	s->model = e->model;
	s->tok = e->tok;
	s->sched = e->sched;
	snprintf(s->model_name, sizeof(s->model_name), "%s", e->model_name ? e->model_name : "");
	pthread_mutex_lock(&s->cfg_mu);
	s->chat = e->chat;
	pthread_mutex_unlock(&s->cfg_mu);
	atomic_store(&s->ready, 1);
}

struct chat_render *server_chat_render(struct server *s)
{
	pthread_mutex_lock(&s->cfg_mu);
	struct chat_render *cr = chat_render_ref(s->chat);
	pthread_mutex_unlock(&s->cfg_mu);
	return cr;
}

struct server_prepared {
	struct server_settings set;
	struct chat_render *chat;
};

int server_prepare(struct server *s, const struct sinkd_config *cfg, struct server_prepared **out,
                   char *err, size_t err_len)
{
	struct server_prepared *p = calloc(1, sizeof(*p));
	if (!p)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	int rc = settings_from_config(cfg, &p->set, err, err_len);
	if (rc) {
		free(p);
		return rc;
	}
	/* the template file is read again even under the same name */
	if (s->tok)
		rc = chat_render_load(cfg->model.chat_template, s->tok, cfg->model.path, &p->chat,
		                      err, err_len);
	if (rc) {
		server_prepared_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

void server_commit(struct server *s, struct server_prepared *p)
{
	pthread_mutex_lock(&s->cfg_mu);
	struct server_settings old = s->set;
	s->set = p->set;
	struct chat_render *old_chat = s->chat;
	if (s->tok)
		s->chat = p->chat;
	else
		old_chat = p->chat;
	pthread_mutex_unlock(&s->cfg_mu);
	quota_set_limits(s->quota, &p->set.quota);
	auth_keys_deinit(&old.keys);
	if (s->tok) {
		struct log_field f[] = {
		    LOG_STR("source", p->chat ? chat_render_origin(p->chat)
		                              : "none (sinkd's built-in chat formats)"),
		    LOG_END};
		log_event(s->log, LOG_INFO, LOG_MODULE, "chat template in force", f);
	}
	chat_render_unref(old_chat);
	free(p);
}

void server_prepared_free(struct server_prepared *p)
{
	if (!p)
		return;
	auth_keys_deinit(&p->set.keys);
	chat_render_unref(p->chat);
	free(p);
}

int server_tls_prepare(struct server *s, const struct sinkd_config *cfg, struct tls_creds **out,
                       char *err, size_t err_len)
{
	return server_tls_load(s, cfg, out, err, err_len);
}

void server_tls_commit(struct server *s, const struct sinkd_config *cfg, struct tls_creds *creds)
{
	server_tls_swap(s, creds, cfg->server.tls_cert_file);
}

void server_tls_discard(struct tls_creds *creds)
{
	tls_creds_unref(creds);
}

void server_drain_begin(struct server *s)
{
	atomic_store(&s->draining, 1);
}

void server_close_listener(struct server *s)
{
	pthread_mutex_lock(&s->gen_mu);
	if (s->mhd && s->listen_fd >= 0) {
		int fd = MHD_quiesce_daemon(s->mhd); /* no new connections */
		if (fd >= 0 && fd == s->listen_fd) {
			close(fd);
			s->listen_fd = -1;
		}
	}
	pthread_mutex_unlock(&s->gen_mu);
}

size_t server_active_generations(struct server *s)
{
	pthread_mutex_lock(&s->gen_mu);
	size_t n = s->n_gens;
	pthread_mutex_unlock(&s->gen_mu);
	return n;
}

/* Waits until no generation is bound to a connection, `until`, or *abort. */
static bool wait_generations(struct server *s, double until, const volatile int *abort)
{
	pthread_mutex_lock(&s->gen_mu);
	while (s->n_gens > 0 && server_now() < until && !(abort && *abort)) {
		server_cond_wait_ms(&s->gen_cond, &s->gen_mu, 50);
	}
	bool none = s->n_gens == 0;
	pthread_mutex_unlock(&s->gen_mu);
	return none;
}

bool server_wait_generations(struct server *s, double timeout_s, const volatile int *abort)
{
	return wait_generations(s, server_now() + timeout_s, abort);
}

/* Ends what is left: every running stream gets a server_shutdown error event
 * and [DONE] (genstream), then the listener stops. */
void server_stop(struct server *s)
{
	if (!s || s->stopped)
		return;
	s->stopped = true;
	atomic_store(&s->draining, 1);
	server_close_listener(s);
	atomic_store(&s->shutting_down, 1);
	if (s->sched)
		genstream_cancel_all(s);
	wait_generations(s, server_now() + 2.0, NULL);
	atomic_store(&s->stopping, 1);
	genstream_wake_all(s, false);
	genstream_keepalive_stop(s);
	if (s->mhd) {
		/* Streams resumed above end at once; give them a moment to flush. */
		wait_generations(s, server_now() + 1.0, NULL);
		genstream_wake_all(s, false);
		MHD_stop_daemon(s->mhd);
		s->mhd = NULL;
		s->listen_fd = -1; /* closed by quiesce above or by libmicrohttpd */
	}
	conn_deadlines_stop(s);
}

void server_free(struct server *s)
{
	if (!s)
		return;
	server_stop(s);
	genstream_keepalive_stop(s);
	if (s->mhd)
		MHD_stop_daemon(s->mhd);
	conn_deadlines_stop(s);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	tls_store_free(s->tls_store); /* after MHD_stop_daemon: no handshake left */
	auth_keys_deinit(&s->set.keys);
	metrics_free(s->metrics);
	quota_free(s->quota);
	grammar_cache_free(s->grammars);
	chat_render_unref(s->chat);
	pthread_cond_destroy(&s->gen_cond);
	pthread_mutex_destroy(&s->gen_mu);
	pthread_mutex_destroy(&s->cfg_mu);
	pthread_cond_destroy(&s->conn_cond);
	pthread_mutex_destroy(&s->conn_mu);
	free(s);
}
