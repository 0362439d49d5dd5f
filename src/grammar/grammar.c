/* The grammar object: reference counting and the public ways to make one
 * (schema.c's grammar_build compiles a schema with gbuild.c's builder).  A
 * grammar never changes after it is made, except for the mask caches that
 * mask.c keeps inside it under its lock, so any number of threads may
 * share it. */
#include <errno.h>
#include <stdlib.h>

#include "grammar/grammar_internal.h"
#include "util/errbuf.h"

struct grammar *grammar_ref(struct grammar *g)
{
	if (g)
		atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
	return g;
}

void grammar_unref(struct grammar *g)
{
	if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1)
		return;
	gmask_caches_free(g->caches, g->n_states);
	pthread_mutex_destroy(&g->lock);
	free(g->states);
	free(g->edges);
	free(g->calls);
	free(g);
}

int grammar_from_json_schema(const cJSON *schema, struct grammar **out, char *path, size_t path_cap,
                             char *err, size_t err_len)
{
	if (!schema) {
		*out = NULL;
		return err_set(err, err_len, -EINVAL, "no schema");
	}
	return grammar_build(NULL, schema, NULL, out, NULL, path, path_cap, err, err_len);
}

int grammar_json_object(struct grammar **out, char *err, size_t err_len)
{
	return grammar_build(NULL, NULL, NULL, out, NULL, NULL, 0, err, err_len);
}

int grammar_from_json_schema_wrapped(const char *prefix, const cJSON *schema, const char *suffix,
                                     struct grammar **out, char *path, size_t path_cap, char *err,
                                     size_t err_len)
{
	if (!schema) {
		*out = NULL;
		return err_set(err, err_len, -EINVAL, "no schema");
	}
	return grammar_build(prefix, schema, suffix, out, NULL, path, path_cap, err, err_len);
}

int grammar_from_regex(const char *regex, struct grammar **out, char *err, size_t err_len)
{
	if (!regex) {
		*out = NULL;
		return err_set(err, err_len, -EINVAL, "no regex");
	}
	return grammar_build_regex(regex, out, NULL, err, err_len);
}
