/* The listening socket: parses "host:port" ("127.0.0.1:8443",
 * "[::1]:8443", "0.0.0.0:8443", "[::]:8443" — the last one dual-stack) and
 * binds it ourselves, so that "address in use" and "bad address" become clear
 * messages before libmicrohttpd starts. */
#pragma once

#include <stddef.h>
#include <sys/socket.h>

/* Parses a numeric "host:port" / "[v6]:port" into *ss (port 0 allowed: any). */
int listen_parse(const char *spec, struct sockaddr_storage *ss, socklen_t *ss_len, char *err,
                 size_t err_len);
/* Creates, binds and listens; *fd is the socket, *port the bound port. */
int listen_open(const char *spec, int backlog, int *fd, int *port, char *err, size_t err_len);
