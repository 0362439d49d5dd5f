/* Listening socket for the HTTP server: address parsing and bind with
 * errno-based messages.  It does not accept connections (libmicrohttpd does)
 * and does not resolve host names: addresses are numeric, as in the config. */
#include "server/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/errbuf.h"

static int parse_port(const char *s, const char *spec, int *port, char *err, size_t err_len)
{
	char *end = NULL;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < 0 || v > 65535)
		return err_set(
		    err, err_len, -EINVAL,
		    "server.listen: bad port in \"%s\" (expected host:port, port 0..65535)", spec);
	*port = (int)v;
	return 0;
}

int listen_parse(const char *spec, struct sockaddr_storage *ss, socklen_t *ss_len, char *err,
                 size_t err_len)
{
	char host[128];
	const char *port_s;
	int port = 0;
	if (!spec || !*spec)
		return err_set(err, err_len, -EINVAL, "server.listen: empty address");
	memset(ss, 0, sizeof(*ss));
	if (spec[0] == '[') {
		const char *close = strchr(spec, ']');
		if (!close || close[1] != ':' || (size_t)(close - spec - 1) >= sizeof(host))
			return err_set(
			    err, err_len, -EINVAL,
			    "server.listen: bad address \"%s\" (IPv6 is \"[addr]:port\")", spec);
		memcpy(host, spec + 1, (size_t)(close - spec - 1));
		host[close - spec - 1] = '\0';
		port_s = close + 2;
	} else {
		const char *colon = strrchr(spec, ':');
		if (!colon || colon == spec || strchr(spec, ':') != colon ||
		    (size_t)(colon - spec) >= sizeof(host))
			return err_set(err, err_len, -EINVAL,
			               "server.listen: bad address \"%s\" (expected host:port, "
			               "IPv6 as \"[addr]:port\")",
			               spec);
		memcpy(host, spec, (size_t)(colon - spec));
		host[colon - spec] = '\0';
		port_s = colon + 1;
	}
	int rc = parse_port(port_s, spec, &port, err, err_len);
	if (rc)
		return rc;
	struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
	if (!strcmp(host, "localhost"))
		strcpy(host, "127.0.0.1");
	if (!strcmp(host, "*")) { /* all addresses: IPv6 any, dual stack */
		v6->sin6_family = AF_INET6;
		v6->sin6_addr = in6addr_any;
		v6->sin6_port = htons((uint16_t)port);
		*ss_len = sizeof(*v6);
		return 0;
	}
	if (spec[0] != '[' && inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)port);
		*ss_len = sizeof(*v4);
		return 0;
	}
	if (spec[0] == '[' && inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)port);
		*ss_len = sizeof(*v6);
		return 0;
	}
	return err_set(err, err_len, -EINVAL,
	               "server.listen: \"%s\" is not a numeric IPv4 or [IPv6] address", host);
}

int listen_open(const char *spec, int backlog, int *fd_out, int *port_out, char *err,
                size_t err_len)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	int rc = listen_parse(spec, &ss, &len, err, err_len);
	if (rc)
		return rc;
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return err_set(err, err_len, -errno, "server.listen: socket: %s", strerror(errno));
	int one = 1, zero = 0;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss.ss_family == AF_INET6) {
		/* "[::]" serves IPv4 too (dual stack); a specific v6 address only v6. */
		struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
		int any = IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr);
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, any ? &zero : &one, sizeof(int));
	}
	if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
		rc = -errno;
		err_set(err, err_len, rc, "server.listen: cannot bind %s: %s%s", spec,
		        strerror(errno),
		        errno == EADDRINUSE ? " (another process listens on this port)" : "");
		goto fail;
	}
	if (listen(fd, backlog) < 0) {
		rc = -errno;
		err_set(err, err_len, rc, "server.listen: listen on %s: %s", spec, strerror(errno));
		goto fail;
	}
	struct sockaddr_storage bound;
	socklen_t blen = sizeof(bound);
	getsockname(fd, (struct sockaddr *)&bound, &blen);
	*port_out = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
	                                              : ((struct sockaddr_in *)&bound)->sin_port);
	*fd_out = fd;
	return 0;
fail:
	close(fd);
	return rc;
}
