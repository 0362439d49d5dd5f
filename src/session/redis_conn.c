/* The Redis/Valkey transport of the session store: one connection that
 * opens on demand, speaks RESP over plain TCP or over TLS (GnuTLS, the
 * server's certificate checked against the CA bundle and the host name),
 * sends AUTH from a file and SELECTs the database.  Debian 12's hiredis
 * (0.14) has no TLS, so hiredis only formats commands and parses replies
 * here; the socket, the waits and the timeouts are ours.  Every wait is a
 * poll() with a timeout so that a dead or stopped server gives an error
 * within timeout_ms instead of a hang; after any transport failure the
 * connection is dropped and the next call connects again, which is how a
 * restarted server is picked up.  It knows nothing of sessions or keys. */
#include "session/redis_conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/errbuf.h"
#include "util/monotime.h"

#define REDIS_DEFAULT_PORT 6379
#define REDIS_AUTH_FILE_MAX 4096
#define REDIS_READ_CHUNK 65536

struct redis_conn {
	struct redis_endpoint ep;
	char where[REDIS_HOST_MAX + 16]; /* "host:port" or "[v6]:port" */
	int timeout_ms;
	char *auth_user;                       /* NULL: AUTH with the password alone */
	char *auth_pass;                       /* NULL: no AUTH */
	gnutls_certificate_credentials_t cred; /* rediss only */
	int fd;                                /* -1 when not connected */
	gnutls_session_t tls;                  /* NULL unless connected over TLS */
	redisReader *reader;                   /* NULL when not connected */
	char *rbuf;                            /* (REDIS_READ_CHUNK) bytes read from the socket */
};

/* ---------------------------------------------------------------- the URL */

static int url_host(const char *s, size_t len, struct redis_endpoint *ep, char *err, size_t err_len)
{
	if (len == 0)
		return err_set(err, err_len, -EINVAL, "redis URL: no host");
	if (len > REDIS_HOST_MAX)
		return err_set(err, err_len, -EINVAL, "redis URL: host longer than %d characters",
		               REDIS_HOST_MAX);
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		          (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_' ||
		          ch == ':' || ch == '%';
		if (!ok)
			return err_set(err, err_len, -EINVAL,
			               "redis URL: host has a character not allowed in a host name "
			               "or address (0x%02x)",
			               (unsigned char)ch);
	}
	memcpy(ep->host, s, len);
	ep->host[len] = '\0';
	return 0;
}

/* A decimal number in [lo, hi] that fills s[0..len). */
static int url_number(const char *s, size_t len, unsigned long lo, unsigned long hi, unsigned *out)
{
	unsigned long v = 0;
	if (len == 0 || len > 10)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v < lo || v > hi)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/* host[:port] or [v6][:port]: the authority part, s[0..len). */
static int url_authority(const char *s, size_t len, struct redis_endpoint *ep, char *err,
                         size_t err_len)
{
	const char *end = s + len, *port = NULL;
	int rc;
	if (memchr(s, '@', len))
		return err_set(err, err_len, -EINVAL,
		               "redis URL: credentials in the URL are not accepted; put them in "
		               "the auth file");
	if (len > 0 && s[0] == '[') {
		const char *close = memchr(s, ']', len);
		if (!close)
			return err_set(err, err_len, -EINVAL, "redis URL: '[' without ']'");
		rc = url_host(s + 1, (size_t)(close - s - 1), ep, err, err_len);
		if (rc < 0)
			return rc;
		if (close + 1 < end && close[1] != ':')
			return err_set(err, err_len, -EINVAL, "redis URL: text after ']'");
		port = close + 1 < end ? close + 2 : NULL;
	} else {
		const char *colon = memchr(s, ':', len);
		rc = url_host(s, colon ? (size_t)(colon - s) : len, ep, err, err_len);
		if (rc < 0)
			return rc;
		if (colon)
			port = colon + 1;
	}
	ep->port = REDIS_DEFAULT_PORT;
	if (port && url_number(port, (size_t)(end - port), 1, 65535, &ep->port) < 0)
		return err_set(err, err_len, -EINVAL,
		               "redis URL: the port must be a number from 1 to 65535");
	return 0;
}

int redis_url_parse(const char *url, struct redis_endpoint *ep, char *err, size_t err_len)
{
	memset(ep, 0, sizeof(*ep));
	if (!url || !*url)
		return err_set(err, err_len, -EINVAL, "redis URL: none given");
	const char *rest;
	if (strncmp(url, "redis://", 8) == 0) {
		rest = url + 8;
	} else if (strncmp(url, "rediss://", 9) == 0) {
		rest = url + 9;
		ep->tls = true;
	} else {
		return err_set(err, err_len, -EINVAL,
		               "redis URL: must start with redis:// or rediss://");
	}
	const char *slash = strchr(rest, '/');
	size_t auth_len = slash ? (size_t)(slash - rest) : strlen(rest);
	int rc = url_authority(rest, auth_len, ep, err, err_len);
	if (rc < 0)
		return rc;
	if (slash && slash[1] != '\0' &&
	    url_number(slash + 1, strlen(slash + 1), 0, 1u << 20, &ep->db) < 0)
		return err_set(err, err_len, -EINVAL,
		               "redis URL: the part after the host must be a database number "
		               "(/0, /1, ...)");
	return 0;
}

/* ---------------------------------------------------------------- the auth file */

/* The file's one line, without its line end; refuses anything but a
 * regular file, and one that other users can read (the password would
 * already be out). */
static int auth_read(const char *path, char *buf, size_t cap, char *err, size_t err_len)
{
	struct stat st;
	int rc = 0;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return err_set(err, err_len, -errno, "redis auth file %s: %s", path,
		               strerror(errno));
	if (fstat(fd, &st) != 0) {
		rc = err_set(err, err_len, -errno, "redis auth file %s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = err_set(err, err_len, -EINVAL, "redis auth file %s: not a regular file", path);
		goto out;
	}
	if (st.st_mode & S_IROTH) {
		rc = err_set(err, err_len, -EPERM,
		             "redis auth file %s: readable by every user (mode %04o); chmod o-r it",
		             path, (unsigned)(st.st_mode & 07777));
		goto out;
	}
	ssize_t n = read(fd, buf, cap - 1);
	if (n < 0) {
		rc = err_set(err, err_len, -errno, "redis auth file %s: %s", path, strerror(errno));
		goto out;
	}
	if ((size_t)n == cap - 1) {
		rc = err_set(err, err_len, -EFBIG, "redis auth file %s: longer than %zu bytes",
		             path, cap - 2);
		goto out;
	}
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	buf[n] = '\0';
	for (ssize_t i = 0; i < n; i++)
		if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
			rc = -EINVAL;
	if (rc < 0 || n == 0)
		rc = err_set(err, err_len, -EINVAL,
		             "redis auth file %s: must hold one line, \"password\" or "
		             "\"user password\"",
		             path);
out:
	close(fd);
	return rc;
}

static int auth_load(struct redis_conn *c, const char *path, char *err, size_t err_len)
{
	char buf[REDIS_AUTH_FILE_MAX + 2];
	int rc = auth_read(path, buf, sizeof(buf), err, err_len);
	if (rc < 0)
		goto out;
	char *space = strchr(buf, ' ');
	if (space) {
		*space = '\0';
		if (space[1] == '\0' || buf[0] == '\0') {
			rc = err_set(err, err_len, -EINVAL,
			             "redis auth file %s: \"user password\" with an empty part",
			             path);
			goto out;
		}
		c->auth_user = strdup(buf);
	}
	c->auth_pass = strdup(space ? space + 1 : buf);
	if (!c->auth_pass || (space && !c->auth_user))
		rc = err_set(err, err_len, -ENOMEM, "redis auth file: out of memory");
out:
	explicit_bzero(buf, sizeof(buf));
	return rc;
}

/* ---------------------------------------------------------------- waits */

/* Waits until fd is ready for events, at most until deadline (ms,
 * monotonic): 0, or -ETIMEDOUT. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - monotime_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int r = poll(&p, 1, (int)left);
		if (r > 0)
			return 0; /* errors and hang-ups show in the next read or write */
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* ---------------------------------------------------------------- connecting */

static void conn_drop(struct redis_conn *c)
{
	if (c->tls) {
		gnutls_deinit(c->tls);
		c->tls = NULL;
	}
	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
	if (c->reader) {
		redisReaderFree(c->reader);
		c->reader = NULL;
	}
}

/* A non-blocking connect to one address, finished within deadline. */
static int tcp_connect_one(const struct addrinfo *ai, int64_t deadline)
{
	int fd =
	    socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		if (errno != EINPROGRESS) {
			rc = -errno;
			goto out;
		}
		rc = wait_fd(fd, POLLOUT, deadline);
		int so = 0;
		socklen_t len = sizeof(so);
		if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0)
			so = errno;
		if (rc == 0 && so != 0)
			rc = -so;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
out:
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

static int tcp_connect(struct redis_conn *c, int64_t deadline, char *err, size_t err_len)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	char port[8];
	snprintf(port, sizeof(port), "%u", c->ep.port);
	int g = getaddrinfo(c->ep.host, port, &hints, &res);
	if (g != 0)
		return err_set(err, err_len, -EHOSTUNREACH, "redis %s: cannot resolve the host: %s",
		               c->where, gai_strerror(g));
	int rc = -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		rc = tcp_connect_one(ai, deadline);
		if (rc >= 0 || rc == -ETIMEDOUT)
			break;
	}
	freeaddrinfo(res);
	if (rc == -ETIMEDOUT)
		return err_set(err, err_len, rc, "redis %s: no answer to connect within %.1f s",
		               c->where, c->timeout_ms / 1000.0);
	if (rc < 0)
		return err_set(err, err_len, rc, "redis %s: cannot connect: %s", c->where,
		               strerror(-rc));
	c->fd = rc;
	return 0;
}

/* GnuTLS writes through this so that a peer gone away gives EPIPE, never a
 * SIGPIPE that would end the daemon. */
static ssize_t tls_push(gnutls_transport_ptr_t ptr, const void *data, size_t len)
{
	return send((int)(intptr_t)ptr, data, len, MSG_NOSIGNAL);
}

static int tls_verify_message(struct redis_conn *c, char *err, size_t err_len)
{
	gnutls_datum_t text = {NULL, 0};
	unsigned status = gnutls_session_get_verify_cert_status(c->tls);
	gnutls_certificate_type_t type = gnutls_certificate_type_get(c->tls);
	if (gnutls_certificate_verification_status_print(status, type, &text, 0) != 0)
		return err_set(err, err_len, -EPROTO,
		               "redis %s: the server's certificate is not trusted", c->where);
	err_set(err, err_len, -EPROTO, "redis %s: the server's certificate is not trusted: %s",
	        c->where, (const char *)text.data);
	gnutls_free(text.data);
	return -EPROTO;
}

static int tls_start(struct redis_conn *c, int64_t deadline, char *err, size_t err_len)
{
	int r = gnutls_init(&c->tls, GNUTLS_CLIENT | GNUTLS_NONBLOCK);
	if (r == 0)
		r = gnutls_set_default_priority(c->tls);
	if (r == 0)
		r = gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, c->cred);
	/* SNI only for names: RFC 6066 forbids literal addresses there. */
	struct in6_addr probe;
	bool literal = inet_pton(AF_INET, c->ep.host, &probe) == 1 ||
	               inet_pton(AF_INET6, c->ep.host, &probe) == 1;
	if (r == 0 && !literal)
		r = gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, c->ep.host, strlen(c->ep.host));
	if (r != 0)
		return err_set(err, err_len, -EPROTO, "redis %s: TLS setup: %s", c->where,
		               gnutls_strerror(r));
	gnutls_session_set_verify_cert(c->tls, c->ep.host, 0);
	gnutls_transport_set_int(c->tls, c->fd);
	gnutls_transport_set_push_function(c->tls, tls_push);
	do {
		r = gnutls_handshake(c->tls);
		if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
			short ev = gnutls_record_get_direction(c->tls) ? POLLOUT : POLLIN;
			if (wait_fd(c->fd, ev, deadline) < 0)
				return err_set(err, err_len, -ETIMEDOUT,
				               "redis %s: no TLS handshake within %.1f s", c->where,
				               c->timeout_ms / 1000.0);
		}
	} while (r < 0 && !gnutls_error_is_fatal(r));
	if (r == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR)
		return tls_verify_message(c, err, err_len);
	if (r < 0)
		return err_set(err, err_len, -EPROTO,
		               "redis %s: TLS handshake failed: %s (is it a TLS port?)", c->where,
		               gnutls_strerror(r));
	return 0;
}

/* ---------------------------------------------------------------- I/O */

static int conn_send(struct redis_conn *c, const char *buf, size_t len, char *err, size_t err_len)
{
	while (len > 0) {
		ssize_t n;
		short ev = POLLOUT;
		if (c->tls) {
			n = gnutls_record_send(c->tls, buf, len);
			if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
				ev = gnutls_record_get_direction(c->tls) ? POLLOUT : POLLIN;
				n = -1;
				errno = EAGAIN;
			} else if (n < 0) {
				return err_set(err, err_len, -ECONNRESET, "redis %s: TLS write: %s",
				               c->where, gnutls_strerror((int)n));
			}
		} else {
			n = send(c->fd, buf, len, MSG_NOSIGNAL);
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return err_set(err, err_len, -errno, "redis %s: write: %s", c->where,
			               strerror(errno));
		if (n < 0 && wait_fd(c->fd, ev, monotime_ms() + c->timeout_ms) < 0)
			return err_set(err, err_len, -ETIMEDOUT,
			               "redis %s: the server took no data for %.1f s", c->where,
			               c->timeout_ms / 1000.0);
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		}
	}
	return 0;
}

/* Some bytes into c->rbuf: their count, 0 when none were there yet (*ev
 * then says what to wait for), or a negative errno. */
static ssize_t conn_recv_some(struct redis_conn *c, short *ev, char *err, size_t err_len)
{
	ssize_t n;
	*ev = POLLIN;
	if (c->tls) {
		n = gnutls_record_recv(c->tls, c->rbuf, REDIS_READ_CHUNK);
		if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) {
			*ev = gnutls_record_get_direction(c->tls) ? POLLOUT : POLLIN;
			return 0;
		}
		if (n < 0 && n != GNUTLS_E_PREMATURE_TERMINATION)
			return err_set(err, err_len, -ECONNRESET, "redis %s: TLS read: %s",
			               c->where, gnutls_strerror((int)n));
	} else {
		n = recv(c->fd, c->rbuf, REDIS_READ_CHUNK, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n < 0)
			return err_set(err, err_len, -errno, "redis %s: read: %s", c->where,
			               strerror(errno));
	}
	if (n <= 0)
		return err_set(err, err_len, -ECONNRESET,
		               "redis %s: connection closed by the server", c->where);
	return n;
}

static int conn_read_reply(struct redis_conn *c, redisReply **reply, char *err, size_t err_len)
{
	void *r = NULL;
	for (;;) {
		if (redisReaderGetReply(c->reader, &r) != REDIS_OK)
			return err_set(err, err_len, -EPROTO, "redis %s: bad reply: %s", c->where,
			               c->reader->errstr);
		if (r) {
			*reply = r;
			return 0;
		}
		short ev;
		ssize_t n = conn_recv_some(c, &ev, err, err_len);
		if (n < 0)
			return (int)n;
		if (n == 0 && wait_fd(c->fd, ev, monotime_ms() + c->timeout_ms) < 0)
			return err_set(err, err_len, -ETIMEDOUT, "redis %s: no reply within %.1f s",
			               c->where, c->timeout_ms / 1000.0);
		if (n > 0 && redisReaderFeed(c->reader, c->rbuf, (size_t)n) != REDIS_OK)
			return err_set(err, err_len, -EPROTO, "redis %s: bad reply: %s", c->where,
			               c->reader->errstr);
	}
}

/* One round trip on the open connection; the formatted command is wiped
 * before it is freed since it may hold the password. */
static int conn_round_trip(struct redis_conn *c, int argc, const char **argv, const size_t *argvlen,
                           redisReply **reply, char *err, size_t err_len)
{
	char *cmd = NULL;
	int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
	if (len < 0)
		return err_set(err, err_len, -ENOMEM, "redis: cannot format a command");
	int rc = conn_send(c, cmd, (size_t)len, err, err_len);
	explicit_bzero(cmd, (size_t)len);
	redisFreeCommand(cmd);
	if (rc == 0)
		rc = conn_read_reply(c, reply, err, err_len);
	return rc;
}

/* A command whose error reply fails the connection (AUTH, SELECT). */
static int conn_setup_call(struct redis_conn *c, const char *what, int argc, const char **argv,
                           char *err, size_t err_len)
{
	size_t lens[3];
	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	redisReply *r = NULL;
	int rc = conn_round_trip(c, argc, argv, lens, &r, err, err_len);
	if (rc < 0)
		return rc;
	if (r->type == REDIS_REPLY_ERROR)
		rc = err_set(err, err_len, strncmp(r->str, "WRONGPASS", 9) == 0 ? -EACCES : -EIO,
		             "redis %s: %s refused: %s", c->where, what, r->str);
	freeReplyObject(r);
	return rc;
}

static int conn_open(struct redis_conn *c, char *err, size_t err_len)
{
	int64_t deadline = monotime_ms() + c->timeout_ms;
	int rc = tcp_connect(c, deadline, err, err_len);
	if (rc == 0 && c->ep.tls)
		rc = tls_start(c, deadline, err, err_len);
	if (rc == 0) {
		c->reader = redisReaderCreate();
		if (!c->reader)
			rc = err_set(err, err_len, -ENOMEM, "redis: out of memory");
	}
	if (rc == 0 && c->auth_pass) {
		const char *argv[3] = {"AUTH", c->auth_user ? c->auth_user : c->auth_pass,
		                       c->auth_pass};
		rc = conn_setup_call(c, "AUTH", c->auth_user ? 3 : 2, argv, err, err_len);
	}
	if (rc == 0 && c->ep.db != 0) {
		char db[16];
		snprintf(db, sizeof(db), "%u", c->ep.db);
		const char *argv[2] = {"SELECT", db};
		rc = conn_setup_call(c, "SELECT", 2, argv, err, err_len);
	}
	if (rc < 0)
		conn_drop(c);
	return rc;
}

/* Whether the idle connection is still usable: the server sends nothing
 * unasked, so anything readable is its close (a restart), or a protocol
 * slip; TLS may also have post-handshake records, which GnuTLS eats. */
static bool conn_idle_ok(struct redis_conn *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	if (poll(&p, 1, 0) == 0)
		return true;
	if (c->tls) {
		char one;
		return gnutls_record_recv(c->tls, &one, 1) == GNUTLS_E_AGAIN;
	}
	char one;
	ssize_t n = recv(c->fd, &one, 1, MSG_PEEK | MSG_DONTWAIT);
	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

int redis_conn_call(struct redis_conn *c, int argc, const char **argv, const size_t *argvlen,
                    redisReply **reply, char *err, size_t err_len)
{
	*reply = NULL;
	if (c->fd >= 0 && !conn_idle_ok(c))
		conn_drop(c);
	int rc = c->fd < 0 ? conn_open(c, err, err_len) : 0;
	if (rc == 0)
		rc = conn_round_trip(c, argc, argv, argvlen, reply, err, err_len);
	if (rc < 0)
		conn_drop(c); /* the reply stream is out of step now; start afresh next time */
	return rc;
}

/* ---------------------------------------------------------------- the object */

static int cred_load(struct redis_conn *c, const char *ca_file, char *err, size_t err_len)
{
	if (gnutls_certificate_allocate_credentials(&c->cred) != 0) {
		c->cred = NULL;
		return err_set(err, err_len, -ENOMEM, "redis: out of memory");
	}
	int n = ca_file
	            ? gnutls_certificate_set_x509_trust_file(c->cred, ca_file, GNUTLS_X509_FMT_PEM)
	            : gnutls_certificate_set_x509_system_trust(c->cred);
	if (n < 0)
		return err_set(err, err_len, -EINVAL, "redis TLS: cannot load %s: %s",
		               ca_file ? ca_file : "the system's trusted CAs", gnutls_strerror(n));
	if (n == 0)
		return err_set(err, err_len, -EINVAL, "redis TLS: no CA certificate in %s",
		               ca_file ? ca_file : "the system's trust store");
	return 0;
}

int redis_conn_new(const struct redis_conn_options *o, struct redis_conn **out, char *err,
                   size_t err_len)
{
	int rc = 0;
	struct redis_conn *c = calloc(1, sizeof(*c));
	*out = NULL;
	if (!c || !(c->rbuf = malloc(REDIS_READ_CHUNK))) {
		rc = err_set(err, err_len, -ENOMEM, "redis: out of memory");
		goto out;
	}
	c->fd = -1;
	c->ep = *o->ep;
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 2000;
	snprintf(c->where, sizeof(c->where), strchr(c->ep.host, ':') ? "[%s]:%u" : "%s:%u",
	         c->ep.host, c->ep.port);
	if (o->auth_file && *o->auth_file)
		rc = auth_load(c, o->auth_file, err, err_len);
	if (rc == 0 && c->ep.tls)
		rc = cred_load(c, o->tls_ca_file, err, err_len);
out:
	if (rc < 0) {
		redis_conn_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void redis_conn_free(struct redis_conn *c)
{
	if (!c)
		return;
	conn_drop(c);
	if (c->cred)
		gnutls_certificate_free_credentials(c->cred);
	if (c->auth_pass)
		explicit_bzero(c->auth_pass, strlen(c->auth_pass));
	if (c->auth_user)
		explicit_bzero(c->auth_user, strlen(c->auth_user));
	free(c->auth_pass);
	free(c->auth_user);
	free(c->rbuf);
	free(c);
}

const char *redis_conn_where(const struct redis_conn *c)
{
	return c->where;
}
