/* The --trace and --heatmap outputs of `sinkd eval` (eval_trace.h). */
#include "cli/eval_trace.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/cachetrace.h"
#include "cli/heatmap.h"
#include "util/errbuf.h"

struct eval_trace {
	struct eval_trace_opts o;
	struct backend *be;
	FILE *jsonl;
	struct cache_trace_step *step;
	struct heatmap_lifecycle *life;
	bool life_full; /* the lifecycle's step cap was reached: later steps are not in it */
	uint64_t life_steps;
	char path[4096];
};

void eval_trace_free(struct eval_trace *t)
{
	if (!t)
		return;
	if (t->jsonl)
		fclose(t->jsonl);
	cache_trace_step_free(t->step);
	heatmap_lifecycle_free(t->life);
	free(t);
}

int eval_trace_new(const struct eval_trace_opts *o, struct backend *be,
                   const struct cache_geometry *g, struct eval_trace **out, char *err,
                   size_t err_len)
{
	int rc = 0;
	*out = NULL;
	if (!be->ops->session_trace)
		return err_set(err, err_len, -ENOTSUP,
		               "--trace and --heatmap need a backend that traces its caches; the "
		               "%s backend does not (use inference.backend cpu)",
		               be->ops->name);
	struct eval_trace *t = calloc(1, sizeof(*t));
	if (!t)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	t->o = *o;
	t->be = be;
	t->step = cache_trace_step_new(g);
	if (!t->step) {
		rc = err_set(err, err_len, -ENOMEM, "out of memory for a cache trace");
		goto fail;
	}
	if (o->jsonl_path && !(t->jsonl = fopen(o->jsonl_path, "w"))) {
		rc = err_set(err, err_len, -EIO, "--trace %s: %s", o->jsonl_path, strerror(errno));
		goto fail;
	}
	if (o->heatmap_dir) {
		struct stat sb;
		if (mkdir(o->heatmap_dir, 0777) && errno != EEXIST) {
			rc = err_set(err, err_len, -EIO, "--heatmap %s: %s", o->heatmap_dir,
			             strerror(errno));
			goto fail;
		}
		if (stat(o->heatmap_dir, &sb) || !S_ISDIR(sb.st_mode)) {
			rc = err_set(err, err_len, -EIO, "--heatmap %s: not a folder", o->heatmap_dir);
			goto fail;
		}
		struct heatmap_lifecycle_opts lo = {.layer = o->heatmap_layer,
		                                    .max_steps = HEATMAP_LIFE_MAX_STEPS};
		if ((rc = heatmap_lifecycle_new(&lo, &t->life, err, err_len)))
			goto fail;
	}
	*out = t;
	return 0;
fail:
	eval_trace_free(t);
	return rc;
}

int eval_trace_start(struct eval_trace *t, struct backend_session *s, char *err, size_t err_len)
{
	return t->be->ops->session_trace_enable(t->be, s, true, err, err_len);
}

bool eval_trace_wants(const struct eval_trace *t, uint64_t k)
{
	return (t->life && !t->life_full) ||
	       (t->o.heatmap_dir && k % (uint64_t)t->o.heatmap_every == 0) ||
	       (t->jsonl && k % (uint64_t)t->o.trace_every == 0);
}

static int write_line(struct eval_trace *t, uint64_t k, int64_t position, double nll, char *err,
                      size_t err_len)
{
	cJSON *o = cache_trace_json(t->step, NULL);
	char *text = NULL;
	bool ok = o && cJSON_AddNumberToObject(o, "scored_step", (double)k) &&
	          cJSON_AddNumberToObject(o, "position", (double)position) &&
	          cJSON_AddNumberToObject(o, "nll", nll) && (text = cJSON_PrintUnformatted(o));
	cJSON_Delete(o);
	if (!ok)
		return err_set(err, err_len, -ENOMEM, "out of memory for a trace line");
	ok = fputs(text, t->jsonl) >= 0 && fputc('\n', t->jsonl) != EOF;
	free(text);
	if (!ok)
		return err_set(err, err_len, -EIO, "--trace %s: %s", t->o.jsonl_path,
		               strerror(errno));
	return 0;
}

int eval_trace_step(struct eval_trace *t, struct backend_session *s, uint64_t k,
                    int64_t position, double nll, char *err, size_t err_len)
{
	int rc = t->be->ops->session_trace(t->be, s, t->step, err, err_len);
	if (rc)
		return rc;
	if (t->jsonl && k % (uint64_t)t->o.trace_every == 0 &&
	    (rc = write_line(t, k, position, nll, err, err_len)))
		return rc;
	if (!t->o.heatmap_dir)
		return 0;
	if (k % (uint64_t)t->o.heatmap_every == 0) {
		snprintf(t->path, sizeof(t->path), "%s/step-%06llu.png", t->o.heatmap_dir,
		         (unsigned long long)k);
		if ((rc = heatmap_step_write(t->step, t->path, err, err_len)))
			return rc;
	}
	if (!t->life_full) {
		char why[SINKD_ERR_LEN];
		rc = heatmap_lifecycle_add_step(t->life, t->step, why, sizeof(why));
		if (rc == -ENOSPC) { /* the picture keeps the steps it has */
			t->life_full = true;
			fprintf(stderr, "sinkd eval: --heatmap: the lifecycle image shows the first "
			                "%llu scored steps (%s)\n",
			        (unsigned long long)t->life_steps, why);
		} else if (rc) {
			return err_set(err, err_len, rc, "%s", why);
		} else {
			t->life_steps++;
		}
	}
	return 0;
}

int eval_trace_finish(struct eval_trace *t, struct backend_session *s, char *err,
                      size_t err_len)
{
	int rc = 0;
	if (t->jsonl) {
		FILE *f = t->jsonl;
		t->jsonl = NULL;
		if (fclose(f))
			return err_set(err, err_len, -EIO, "--trace %s: %s", t->o.jsonl_path,
			               strerror(errno));
	}
	if (!t->o.heatmap_dir)
		return 0;
	if ((rc = t->be->ops->session_trace(t->be, s, t->step, err, err_len)))
		return rc;
	snprintf(t->path, sizeof(t->path), "%s/summary.png", t->o.heatmap_dir);
	if ((rc = heatmap_step_write_mass(t->step, HEATMAP_MASS_EMA, t->path, err, err_len)))
		return rc;
	if (heatmap_lifecycle_steps(t->life) == 0)
		return 0;
	snprintf(t->path, sizeof(t->path), "%s/lifecycle.png", t->o.heatmap_dir);
	return heatmap_lifecycle_write(t->life, t->path, err, err_len);
}
