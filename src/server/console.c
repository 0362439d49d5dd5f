/* Serves the web console's embedded files.  The page is static: everything
 * it shows it fetches from the API as any client would, with the same key
 * (a browser sends it as Basic credentials, see auth.c), so this module
 * holds no state and decides nothing about access; http.c routes here
 * after its auth check.  It does not read files at run time. */
#include "server/console.h"

#include <string.h>

#include "server/respond.h"

/* Everything from this origin, nothing inline, nothing framed: the page
 * needs no more (the favicon is a data: URL, so that no request 404s). */
#define CONSOLE_CSP                                                                                \
	"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "          \
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "             \
	"frame-ancestors 'none'"

const struct console_file *console_file_find(const char *url)
{
	size_t n = 0;
	const struct console_file *f = console_files(&n);
	for (size_t i = 0; url && i < n; i++)
		if (!strcmp(url, f[i].path))
			return &f[i];
	return NULL;
}

enum MHD_Result console_respond(struct request *r, const char *url)
{
	const struct console_file *f = console_file_find(url);
	if (!f)
		return respond_error(r, 404, NULL, "not_found", 0, "no such console file: %.200s",
		                     url ? url : "");
	/* The bytes live in the binary for the process's life: no copy. */
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(f->len, (void *)f->data, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", f->type);
	/* A new binary serves a new page: the browser asks again every time. */
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "Content-Security-Policy", CONSOLE_CSP);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(resp, "X-Frame-Options", "DENY");
	return respond_queue(r, 200, resp);
}
