/* The built-in web console: GET / serves one page (HTML, CSS, JS compiled
 * into the binary by console/embed.py) that drives the API from a browser:
 * a playground and a live view of sessions, streams and the KV cache. */
#pragma once

#include <microhttpd.h>
#include <stddef.h>

struct request;

/* One embedded file. */
struct console_file {
	const char *path;          /* URL path: "/", "/console.js" */
	const char *type;          /* its Content-Type */
	const unsigned char *data; /* (len) bytes */
	size_t len;
};

/* The table of embedded files; written by console/embed.py at build time
 * (console_files.c in the build folder). */
const struct console_file *console_files(size_t *n);
/* The file served at url (the path, no query), or NULL. */
const struct console_file *console_file_find(const char *url);
/* Answers a GET or HEAD of a console file, with the headers that keep the
 * page self-contained (CSP), fresh (no-cache) and typed (nosniff); a path
 * that names none is a 404. */
enum MHD_Result console_respond(struct request *r, const char *url);
