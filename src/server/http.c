/* The listener: libmicrohttpd with TLS (GnuTLS, TLS 1.2/1.3, AEAD ciphers),
 * an epoll thread pool of server.threads, the certificate chosen per
 * handshake (so a reload rotates it), suspend/resume for streams, our own
 * bound socket (clear bind errors), routing with 404/405, bearer auth, the
 * body limit counted while it arrives, request ids, and one log line per
 * request (never its text).  Endpoint logic is in api.c. */
#include <errno.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "server/genstream.h"
#include "server/listen.h"
#include "server/server_impl.h"
#include "util/errbuf.h"

#define LOG_MODULE "http"

/* Largest declared body that is read and dropped before a 413 (see request_begin). */
#define HTTP_BODY_DRAIN_MAX (16LL << 20)

double server_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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
    {"/tokenize", EP_TOKENIZE, "POST", false},
    {"/detokenize", EP_DETOKENIZE, "POST", false},
    {"/v1/sessions", EP_SESSIONS, "POST", false},
};

static const struct route *route_find(const char *url)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (!strcmp(url, routes[i].path))
			return &routes[i];
	return NULL;
}

/* /v1/sessions/{id} (GET, PUT: create with this id, DELETE) and
 * /v1/sessions/{id}/append (POST); the id (1..32 hex digits) goes to id_out. */
static const struct route *route_session(const char *url, const char *method,
                                         char id_out[SCHED_SESSION_ID_LEN])
{
	static const struct route session_get = {"", EP_SESSION, "GET", false};
	static const struct route session_delete = {"", EP_SESSION, "DELETE", false};
	static const struct route session_append = {"", EP_SESSION_APPEND, "POST", false};
	static const struct route session_put = {"", EP_SESSIONS, "PUT", false};
	const char *prefix = "/v1/sessions/";
	if (strncmp(url, prefix, strlen(prefix)))
		return NULL;
	const char *id = url + strlen(prefix);
	size_t n = strspn(id, "0123456789abcdefABCDEF");
	if (n == 0 || n >= SCHED_SESSION_ID_LEN)
		return NULL;
	memcpy(id_out, id, n);
	id_out[n] = '\0';
	if (!strcmp(id + n, "/append"))
		return &session_append;
	if (id[n])
		return NULL;
	if (!strcmp(method, "PUT"))
		return &session_put;
	return !strcmp(method, "DELETE") ? &session_delete : &session_get;
}

void server_settings_get(struct server *s, int64_t *max_tokens, int64_t *keepalive_s)
{
	pthread_mutex_lock(&s->cfg_mu);
	if (max_tokens)
		*max_tokens = s->set.max_tokens;
	if (keepalive_s)
		*keepalive_s = s->set.keepalive_s;
	pthread_mutex_unlock(&s->cfg_mu);
}

/* ---- responses ---------------------------------------------------------- */

enum MHD_Result http_queue(struct request *r, int status, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "X-Request-Id", r->id);
	/* A draining instance closes each connection after its answer, so a
	 * balancer's kept-alive connection moves to another instance. */
	if (atomic_load(&r->srv->draining))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	if (status == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
	enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
	r->status = status;
	r->responded = true;
	return ret;
}

enum MHD_Result http_respond(struct request *r, int status, const char *content_type,
                             const char *body, size_t len)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", content_type);
	return http_queue(r, status, resp);
}

enum MHD_Result http_respond_json(struct request *r, int status, cJSON *obj)
{
	char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
	cJSON_Delete(obj);
	if (!s)
		return MHD_NO;
	enum MHD_Result ret = http_respond(r, status, "application/json", s, strlen(s));
	free(s);
	return ret;
}

static enum MHD_Result respond_error_v(struct request *r, int status, const char *type,
                                       const char *param, const char *code, int retry_after_s,
                                       const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	char *s = NULL;
	cJSON *o = oa_error(msg, type, param, code);
	s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!s)
		return MHD_NO;
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(s);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "application/json");
	if (retry_after_s > 0) {
		char ra[16];
		snprintf(ra, sizeof(ra), "%d", retry_after_s);
		MHD_add_response_header(resp, "Retry-After", ra);
	}
	return http_queue(r, status, resp);
}

enum MHD_Result http_respond_error(struct request *r, int status, const char *type,
                                   const char *param, const char *code, int retry_after_s,
                                   const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	enum MHD_Result ret = respond_error_v(r, status, type, param, code, retry_after_s, fmt, ap);
	va_end(ap);
	return ret;
}

/* ---- request lifecycle ---------------------------------------------------- */

/* X-Request-Id from the client when it is short and printable, else 16 random bytes. */
static void request_id_init(struct request *r)
{
	const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
	size_t n = h ? strlen(h) : 0;
	bool ok = n > 0 && n < REQUEST_ID_LEN;
	for (size_t i = 0; ok && i < n; i++)
		ok = (h[i] >= 'a' && h[i] <= 'z') || (h[i] >= 'A' && h[i] <= 'Z') ||
		     (h[i] >= '0' && h[i] <= '9') || strchr("-_.:", h[i]);
	if (ok) {
		memcpy(r->id, h, n + 1);
		return;
	}
	unsigned char b[16];
	if (RAND_bytes(b, sizeof(b)) != 1)
		memset(b, 0, sizeof(b));
	for (int i = 0; i < 16; i++)
		snprintf(r->id + 2 * i, 3, "%02x", b[i]);
}

static enum MHD_Result request_begin(struct server *s, struct MHD_Connection *c, const char *url,
                                     const char *method, void **con_cls)
{
	struct request *r = calloc(1, sizeof(*r));
	if (!r)
		return MHD_NO;
	r->srv = s;
	r->conn = c;
	r->method = method;
	r->t_start = server_now();
	*con_cls = r;
	request_id_init(r);
	const struct route *rt = route_find(url);
	if (!rt)
		rt = route_session(url, method, r->session_id);
	r->ep = rt ? rt->ep : EP_OTHER;
	if (!rt)
		return http_respond_error(r, 404, "invalid_request_error", NULL, "not_found", 0,
		                          "no such endpoint: %s %.200s", method, url);
	/* HEAD is GET without the body (libmicrohttpd drops it): probes use it. */
	bool head_ok = !strcmp(method, "HEAD") && !strcmp(rt->method, "GET");
	if (strcmp(method, rt->method) && !head_ok) {
		struct MHD_Response *resp;
		char *body = NULL;
		cJSON *o = oa_error("method not allowed", "invalid_request_error", NULL,
		                    "method_not_allowed");
		body = cJSON_PrintUnformatted(o);
		cJSON_Delete(o);
		if (!body)
			return MHD_NO;
		resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
		MHD_add_response_header(resp, "Content-Type", "application/json");
		MHD_add_response_header(resp, "Allow",
		                        rt->ep == EP_SESSION ? "GET, PUT, DELETE" : rt->method);
		return http_queue(r, 405, resp);
	}
	if (!rt->open) {
		pthread_mutex_lock(&s->cfg_mu);
		bool ok = auth_check(
		    &s->set.keys, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"));
		pthread_mutex_unlock(&s->cfg_mu);
		if (!ok)
			return http_respond_error(r, 401, "authentication_error", NULL,
			                          "invalid_api_key", 0,
			                          "missing or invalid API key");
	}
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	pthread_mutex_lock(&s->cfg_mu);
	int64_t limit = s->set.max_body_bytes;
	pthread_mutex_unlock(&s->cfg_mu);
	long long declared = cl ? strtoll(cl, NULL, 10) : -1;
	if (declared > limit) {
		/* Answering before the body is read makes the socket close with unread
		 * bytes, and the kernel's reset can destroy the 413 before the client
		 * reads it.  So a body of modest size is read and dropped first; only
		 * a client that waits for "100 Continue", or one that declares more
		 * than HTTP_BODY_DRAIN_MAX, gets its answer at once. */
		const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
		if ((expect && strcasecmp(expect, "100-continue") == 0) ||
		    declared > HTTP_BODY_DRAIN_MAX)
			return http_respond_error(r, 413, "invalid_request_error", NULL,
			                          "body_too_large", 0,
			                          "request body larger than %lld bytes",
			                          (long long)limit);
		r->body_too_large = true;
	}
	return MHD_YES;
}

/* Counts upload data as it arrives; keeps nothing past the limit. */
static void request_body_add(struct request *r, const char *data, size_t n)
{
	if (r->body_too_large)
		return;
	pthread_mutex_lock(&r->srv->cfg_mu);
	int64_t limit = r->srv->set.max_body_bytes;
	pthread_mutex_unlock(&r->srv->cfg_mu);
	if ((int64_t)(r->body_len + n) > limit) {
		r->body_too_large = true;
		free(r->body);
		r->body = NULL;
		r->body_len = r->body_cap = 0;
		return;
	}
	if (sse_append_raw(&r->body, &r->body_len, &r->body_cap, data, n))
		r->body_too_large = true;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
	struct request *r = *con_cls;
	if (!r)
		return request_begin(cls, c, url, method, con_cls);
	if (*upload_data_size) {
		if (!r->responded)
			request_body_add(r, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->responded)
		return MHD_YES;
	if (r->body_too_large) {
		pthread_mutex_lock(&r->srv->cfg_mu);
		long long limit = (long long)r->srv->set.max_body_bytes;
		pthread_mutex_unlock(&r->srv->cfg_mu);
		return http_respond_error(r, 413, "invalid_request_error", NULL, "body_too_large",
		                          0, "request body larger than %lld bytes", limit);
	}
	if (r->gs)
		return genstream_respond(r);
	return api_handle(r);
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
	int status = r->responded ? r->status : 499; /* client went away first */
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && r->gs)
		status = 499;
	metrics_request(s->metrics, r->ep, status);
	double dur_ms = (server_now() - r->t_start) * 1e3;
	enum log_level lv =
	    r->ep == EP_HEALTH || r->ep == EP_READY || r->ep == EP_METRICS ? LOG_DEBUG : LOG_INFO;
	struct log_field f[] = {LOG_STR("request_id", r->id),
	                        LOG_STR("method", r->method),
	                        LOG_STR("endpoint", api_endpoint_path(r->ep)),
	                        LOG_INT("status", status),
	                        LOG_INT("tokens_in", tin),
	                        LOG_INT("tokens_out", tout),
	                        LOG_DBL("ttft_ms", ttft >= 0 ? ttft * 1e3 : -1),
	                        LOG_DBL("duration_ms", dur_ms),
	                        LOG_END};
	log_event(s->log, lv, LOG_MODULE, "request", f);
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

/* Per connection (libmicrohttpd's socket context): the credentials its
 * handshake was given.  GnuTLS keeps pointing at them for the whole session,
 * so the connection holds a reference until libmicrohttpd reports it closed,
 * which it does after gnutls_deinit. */
struct tls_conn {
	struct server *srv;
	struct tls_creds *creds; /* NULL until the handshake asks */
};

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

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
	struct server *s = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		struct tls_conn *tc = calloc(1, sizeof(*tc));
		if (tc)
			tc->srv = s;
		*socket_context = tc; /* NULL (out of memory): its handshake fails */
		tls_check_session_ptr(s, c);
		return;
	}
	struct tls_conn *tc = *socket_context;
	if (tc) {
		tls_creds_unref(tc->creds);
		free(tc);
	}
	*socket_context = NULL;
}

/* A gnutls_certificate_retrieve_function2: libmicrohttpd passes no user
 * pointer, so the store is reached through session -> connection -> socket
 * context.  Returning -1 fails the handshake. */
static int tls_cert_callback(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                             const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                             gnutls_pcert_st **pcert, unsigned int *pcert_length,
                             gnutls_privkey_t *privkey)
{
	struct MHD_Connection *c = gnutls_session_get_ptr(session);
	const union MHD_ConnectionInfo *ci =
	    c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
	struct tls_conn *tc = ci ? ci->socket_context : NULL;
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
	return 0;
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
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
	struct MHD_OptionItem opts[16];
	int n = 0;
	unsigned pool = cfg->server.threads > 1 ? (unsigned)cfg->server.threads : 1;
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, s->listen_fd, NULL};
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s};
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT,
	                                    (intptr_t)cfg->server.max_connections, NULL};
	opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, 120, NULL};
	opts[n++] =
	    (struct MHD_OptionItem){MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_logger, s->log};
	if (pool > 1)
		opts[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, pool, NULL};
	if (s->tls) {
		flags |= MHD_USE_TLS;
		opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
		                                    (void *)tls_cert_callback};
		opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION,
		                                    (intptr_t)on_connection, s};
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
	s->tls = cfg->server.tls_enabled;
	int rc = metrics_new(&s->metrics);
	if (rc) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
		goto fail;
	}
	rc = settings_from_config(cfg, &s->set, err, err_len);
	if (!rc && s->tls)
		rc = server_tls_init(s, cfg, err, err_len);
	if (rc)
		goto fail;
	raise_nofile(log, cfg->server.max_connections);
	rc = listen_open(cfg->server.listen, 1024, &s->listen_fd, &s->port, err, err_len);
	if (!rc)
		rc = genstream_keepalive_start(s, err, err_len);
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
	atomic_store(&s->ready, 1);
}

struct server_prepared {
	struct server_settings set;
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
	*out = p;
	return 0;
}

void server_commit(struct server *s, struct server_prepared *p)
{
	pthread_mutex_lock(&s->cfg_mu);
	struct server_settings old = s->set;
	s->set = p->set;
	pthread_mutex_unlock(&s->cfg_mu);
	auth_keys_deinit(&old.keys);
	free(p);
}

void server_prepared_free(struct server_prepared *p)
{
	if (!p)
		return;
	auth_keys_deinit(&p->set.keys);
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
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->gen_cond, &s->gen_mu, &ts);
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
}

void server_free(struct server *s)
{
	if (!s)
		return;
	server_stop(s);
	genstream_keepalive_stop(s);
	if (s->mhd)
		MHD_stop_daemon(s->mhd);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	tls_store_free(s->tls_store); /* after MHD_stop_daemon: no handshake left */
	auth_keys_deinit(&s->set.keys);
	metrics_free(s->metrics);
	pthread_cond_destroy(&s->gen_cond);
	pthread_mutex_destroy(&s->gen_mu);
	pthread_mutex_destroy(&s->cfg_mu);
	free(s);
}
