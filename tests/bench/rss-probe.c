/* Resident memory of a loaded model (run by engine-bench.sh, not a test):
 * loads a model, makes the CPU backend, then runs one token through one
 * session so every weight page is faulted in, and prints what the process
 * holds at each point (from /proc/self/status: file-backed pages of the
 * mapping, anonymous memory of copies, panels and caches) with the bytes of
 * the file, as one JSON line:
 *   {"model":..,"file_bytes":F,"weight_bytes":W,"load_rss":R0,"step_rss":R1,
 *    "step_rss_file":RF,"step_rss_anon":RA}
 * weight_bytes: model_weight_bytes, what one decode step reads.
 * usage: rss-probe MODEL.gguf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/config.h"
#include "engine/backend.h"
#include "util/errbuf.h"

/* RssFile (+ RssShmem: a model on tmpfs maps as shared memory) and
 * RssAnon of this process, bytes. */
static void rss(size_t *file, size_t *anon)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long kb;
	*file = *anon = 0;
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "RssFile: %lu kB", &kb) == 1 ||
		    sscanf(line, "RssShmem: %lu kB", &kb) == 1)
			*file += (size_t)kb << 10;
		else if (sscanf(line, "RssAnon: %lu kB", &kb) == 1)
			*anon = (size_t)kb << 10;
	}
	if (f)
		fclose(f);
}

int main(int argc, char **argv)
{
	char err[SINKD_ERR_LEN] = "";
	struct model *m = NULL;
	struct backend *be = NULL;
	struct backend_session *s = NULL;
	struct sinkd_config cfg;
	struct config_errors errs;
	struct stat st;
	if (argc != 2 || stat(argv[1], &st)) {
		fprintf(stderr, "usage: rss-probe MODEL.gguf\n");
		return 2;
	}
	if (config_load(&cfg, NULL, NULL, 0, &errs)) {
		config_errors_print(&errs, stderr);
		return 1;
	}
	struct backend_options bo = {0};
	if (model_load(argv[1], NULL, &m, err, sizeof(err)) ||
	    backend_cpu_new(m, &bo, &be, err, sizeof(err)))
		goto fail;
	size_t f0, a0, f1, a1;
	rss(&f0, &a0);
	struct cache_geometry g;
	config_cache_geometry(&cfg, &m->hp, &g);
	if (be->ops->session_new(be, &g, &s, err, sizeof(err)))
		goto fail;
	float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
	struct backend_token t = {.session = s, .token = 1, .want_logits = true};
	if (!logits || be->ops->forward(be, &t, 1, logits, err, sizeof(err)))
		goto fail;
	rss(&f1, &a1);
	printf("{\"model\":\"%s\",\"file_bytes\":%lld,\"weight_bytes\":%zu,\"load_rss\":%zu,"
	       "\"step_rss\":%zu,\"step_rss_file\":%zu,\"step_rss_anon\":%zu}\n",
	       m->name, (long long)st.st_size, model_weight_bytes(m), f0 + a0, f1 + a1, f1, a1);
	free(logits);
	be->ops->session_free(be, s);
	backend_free(be);
	model_free(m);
	return 0;
fail:
	fprintf(stderr, "rss-probe: %s\n", err);
	return 1;
}
