/* The serve mode: config → listener (so /health answers at once) → model,
 * tokenizer, backend, scheduler → ready; then a loop that polls the stop and
 * reload flags set by main.c's signal handlers.  Reload re-reads the whole
 * file: on any error the old config stays; otherwise reloadable keys apply and
 * restart-only keys are logged as "needs restart".  It does not install
 * signal handlers or exit the process. */
#include "daemon.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "engine/backend.h"
#ifdef SINKD_HAVE_CUDA
#include "backend_cuda.h"
#include "cuda_device.h"
#endif
#include "model/model.h"
#include "sched/scheduler.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

#define LOG_MODULE "daemon"
#define DRAIN_GRACE_S 10.0

struct daemon {
	const char *config_path;
	const char *const *overrides;
	size_t n_overrides;
	struct sinkd_log *log;
	struct sinkd_config *cfg;
	struct server *srv;
	struct model *model;
	struct tokenizer *tok;
	struct backend *be;
	struct scheduler *sched;
};

static void log_config_errors(struct sinkd_log *log, const struct config_errors *errs)
{
	for (size_t i = 0; i < errs->n; i++) {
		struct log_field f[] = {LOG_STR("error", errs->lines[i]), LOG_END};
		log_event(log, LOG_ERROR, "config", "invalid configuration", f);
	}
}

/* Loads and checks a complete config; on error logs every problem. */
static int load_config(struct daemon *d, struct sinkd_config **out, char *err, size_t err_len)
{
	struct sinkd_config *c = calloc(1, sizeof(*c));
	struct config_errors errs = {0};
	if (!c)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	int rc = config_load(c, d->config_path, d->overrides, d->n_overrides, &errs);
	if (!rc)
		rc = config_check_serve(c, &errs);
	if (!rc && d->model)
		rc = config_check_budget(c, &d->model->hp, &errs);
	if (rc || errs.n) {
		log_config_errors(d->log, &errs);
		err_set(err, err_len, -EINVAL, "%s: %zu configuration error(s)%s%s",
		        d->config_path ? d->config_path : "(defaults)", errs.n,
		        errs.n ? ", first: " : "", errs.n ? errs.lines[0] : "");
		config_errors_deinit(&errs);
		config_deinit(c);
		free(c);
		return -EINVAL;
	}
	config_errors_deinit(&errs);
	*out = c;
	return 0;
}

/* model.backend: cuda when asked, or with auto when a device is present
 * (and this build has the CUDA backend); else cpu.  The choice is logged. */
static int create_backend(struct daemon *d, const char **name, char *err, size_t err_len)
{
	const struct sinkd_config *c = d->cfg;
	struct backend_options bo = {.n_threads = (int)c->engine.threads};
	int want_cuda = c->model.backend == MODEL_BACKEND_CUDA;
#ifdef SINKD_HAVE_CUDA
	int n_devices = cuda_device_count();
	if (c->model.backend == MODEL_BACKEND_AUTO)
		want_cuda = n_devices > 0;
	if (want_cuda && n_devices == 0)
		return err_set(err, err_len, -ENODEV,
		               "model.backend: cuda, but no CUDA device is usable here "
		               "(use cpu or auto)");
	if (want_cuda) {
		struct backend_cuda_options co = {
		    .device = 0,
		    .dtype = c->inference.attention.dtype,
		    .cache_bytes = c->inference.cache.global_cache_limit_auto
		                       ? 0
		                       : (size_t)c->inference.cache.global_cache_limit,
		    .auto_fraction = c->inference.cache.auto_fraction,
		    .log = d->log};
		*name = "cuda";
		return backend_cuda_new(d->model, &bo, &co, &d->be, err, err_len);
	}
#else
	if (want_cuda)
		return err_set(err, err_len, -ENOTSUP,
		               "model.backend: cuda is not available in this build (built "
		               "without nvcc; use cpu or auto)");
#endif
	*name = "cpu";
	return backend_cpu_new(d->model, &bo, &d->be, err, err_len);
}

static int load_engine(struct daemon *d, char *err, size_t err_len)
{
	const struct sinkd_config *c = d->cfg;
	double t0 = (double)clock() / CLOCKS_PER_SEC;
	struct log_field f0[] = {LOG_STR("path", c->model.path), LOG_END};
	log_event(d->log, LOG_INFO, LOG_MODULE, "loading model", f0);
	struct model_load_options mo = {.expected_sha256 = c->model.sha256};
	int rc = model_load(c->model.path, &mo, &d->model, err, err_len);
	if (rc)
		return rc;
	struct config_errors errs = {0};
	if (config_check_budget(c, &d->model->hp, &errs) || errs.n) {
		log_config_errors(d->log, &errs);
		err_set(err, err_len, -EINVAL, "%s",
		        errs.n ? errs.lines[0] : "global_cache_limit too small for this model");
		config_errors_deinit(&errs);
		return -EINVAL;
	}
	rc = tokenizer_new_from_gguf(d->model->file, &d->tok, err, err_len);
	if (rc)
		return rc;
	const char *backend_name = NULL;
	rc = create_backend(d, &backend_name, err, err_len);
	if (!rc)
		rc = scheduler_new(c, d->be, d->tok, d->log, &d->sched, err, err_len);
	if (rc)
		return rc;
	struct log_field f[] = {LOG_STR("model", d->model->name),
	                        LOG_STR("backend", backend_name),
	                        LOG_INT("layers", d->model->hp.n_layers),
	                        LOG_INT("vocab", d->model->hp.n_vocab),
	                        LOG_DBL("cpu_s", (double)clock() / CLOCKS_PER_SEC - t0),
	                        LOG_END};
	log_event(d->log, LOG_INFO, LOG_MODULE, "model loaded", f);
	return 0;
}

static void apply_logging(struct daemon *d)
{
	log_set_level(d->log, d->cfg->logging.level);
	log_set_format(d->log, d->cfg->logging.format);
}

static void reload(struct daemon *d)
{
	char err[SINKD_ERR_LEN];
	struct sinkd_config *nc = NULL;
	log_msg(d->log, LOG_INFO, LOG_MODULE, "reloading configuration");
	if (load_config(d, &nc, err, sizeof(err))) {
		struct log_field f[] = {LOG_STR("error", err), LOG_END};
		log_event(d->log, LOG_ERROR, LOG_MODULE,
		          "reload failed; the running configuration is unchanged", f);
		return;
	}
	if (server_reconfigure(d->srv, nc, err, sizeof(err))) {
		struct log_field f[] = {LOG_STR("error", err), LOG_END};
		log_event(d->log, LOG_ERROR, LOG_MODULE,
		          "reload failed; the running configuration is unchanged", f);
		config_deinit(nc);
		free(nc);
		return;
	}
	char keys[1024] = "";
	int n_restart = config_restart_only_changes(d->cfg, nc, keys, sizeof(keys));
	if (n_restart > 0) {
		struct log_field f[] = {LOG_STR("keys", keys), LOG_INT("count", n_restart),
		                        LOG_END};
		log_event(d->log, LOG_WARN, LOG_MODULE, "needs restart: changed keys not applied",
		          f);
	}
	if (d->sched)
		scheduler_reconfigure(d->sched, nc);
	struct sinkd_config *old = d->cfg;
	d->cfg = nc;
	apply_logging(d);
	config_deinit(old);
	free(old);
	log_msg(d->log, LOG_INFO, LOG_MODULE, "configuration reloaded");
}

static void wait_tick(void)
{
	struct timespec ts = {0, 100 * 1000 * 1000};
	nanosleep(&ts, NULL);
}

static void daemon_teardown(struct daemon *d)
{
	if (d->srv) {
		server_set_draining(d->srv);
		server_stop(d->srv, DRAIN_GRACE_S);
	}
	scheduler_free(d->sched);
	server_free(d->srv);
	backend_free(d->be);
	tokenizer_free(d->tok);
	model_free(d->model);
	if (d->cfg) {
		config_deinit(d->cfg);
		free(d->cfg);
	}
}

int daemon_run(const char *config_path, const char *const *overrides, size_t n_overrides,
               struct sinkd_log *log, const volatile int *stop_flag, volatile int *reload_flag,
               char *err, size_t err_len)
{
	struct daemon d = {.config_path = config_path,
	                   .overrides = overrides,
	                   .n_overrides = n_overrides,
	                   .log = log};
	int rc = load_config(&d, &d.cfg, err, err_len);
	if (rc)
		return rc;
	apply_logging(&d);
	log_msg(log, LOG_INFO, LOG_MODULE, "sinkd %s starting", SINKD_VERSION);
	rc = server_new(d.cfg, log, &d.srv, err, err_len);
	if (!rc)
		rc = load_engine(&d, err, err_len);
	if (rc)
		goto out;
	struct server_engine eng = {.model = d.model,
	                            .tok = d.tok,
	                            .sched = d.sched,
	                            .model_name = d.cfg->model.name && d.cfg->model.name[0]
	                                              ? d.cfg->model.name
	                                              : d.model->name};
	if (!*stop_flag) {
		server_attach_engine(d.srv, &eng);
		log_msg(log, LOG_INFO, LOG_MODULE, "ready on port %d", server_port(d.srv));
	}
	while (!*stop_flag) {
		if (reload_flag && *reload_flag) {
			*reload_flag = 0;
			reload(&d);
		}
		wait_tick();
	}
	log_msg(log, LOG_INFO, LOG_MODULE, "stopping: draining open requests");
out:
	daemon_teardown(&d);
	if (!rc)
		log_msg(log, LOG_INFO, LOG_MODULE, "stopped");
	return rc;
}
