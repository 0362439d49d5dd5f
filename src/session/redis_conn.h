/* One client connection to a Redis/Valkey server: the URL, the socket
 * (plain TCP or TLS through GnuTLS), AUTH and SELECT, and one command at a
 * time with hiredis formatting the request and parsing the reply.  Not
 * thread-safe: the caller serialises calls (store_redis.c holds a mutex). */
#pragma once

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>

#define REDIS_HOST_MAX 255

/* Where the server is, as a redis:// or rediss:// URL says. */
struct redis_endpoint {
	char host[REDIS_HOST_MAX + 1]; /* a name or an address, no brackets */
	unsigned port;                 /* 1..65535, 6379 when the URL has none */
	unsigned db;                   /* SELECTed after connecting; 0 by default */
	bool tls;                      /* rediss:// */
};

/* Parses redis://host[:port][/db] or rediss://...; the message says what
 * is wrong with a bad URL (-EINVAL).  A password in the URL is refused:
 * it belongs in the auth file, away from configuration and logs. */
int redis_url_parse(const char *url, struct redis_endpoint *ep, char *err, size_t err_len);

struct redis_conn_options {
	const struct redis_endpoint *ep;
	const char *auth_file;   /* NULL: no AUTH; else "password" or "user password" */
	const char *tls_ca_file; /* rediss: trusted CAs in PEM; NULL: the system's */
	int timeout_ms;          /* connect, and each wait for I/O progress; > 0 */
};

struct redis_conn;

/* Reads the auth file and the CA bundle now (so a bad one fails at open);
 * connects lazily, on the first call. */
int redis_conn_new(const struct redis_conn_options *o, struct redis_conn **out, char *err,
                   size_t err_len);
void redis_conn_free(struct redis_conn *c);

/* Sends one command and waits for its reply (freeReplyObject it), which may
 * be an error reply: the caller decides what that means.  Connects first
 * when there is no connection (or the last one failed); a failure of the
 * transport closes the connection and returns -ECONNREFUSED, -ETIMEDOUT,
 * -EPROTO, -ECONNRESET, ... with "redis host:port: ..." in err. */
int redis_conn_call(struct redis_conn *c, int argc, const char **argv, const size_t *argvlen,
                    redisReply **reply, char *err, size_t err_len);

/* "host:port" of the server, for messages. */
const char *redis_conn_where(const struct redis_conn *c);
