/* The serve mode: config → listener (so /health answers at once) → model,
 * tokenizer, backend, scheduler → ready; then a loop that polls the stop and
 * reload flags set by main.c's signal handlers and the config file watch,
 * pings the systemd watchdog while the engine thread makes progress, and at
 * the end drains.  A reload is one transaction (config_reload.h): the whole
 * file is loaded and checked, every subsystem prepared, then all commit or
 * none.  It does not install signal handlers or exit the process. */
#include "daemon.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config_reload.h"
#include "config/config_watch.h"
#include "cuda_load.h"
#include "cuda_module.h"
#include "engine/backend.h"
#include "model/model.h"
#include "sched/scheduler.h"
#include "server/chat_render.h"
#include "server/server.h"
#include "session/store.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "util/monotime.h"
#include "util/notify.h"

#define LOG_MODULE "daemon"
/* Quiet time after the last file event before a watched change reloads:
 * editors and ConfigMap updates write in several steps. */
#define WATCH_DEBOUNCE_MS 300
#define STATUS_PERIOD_S 5.0

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
	struct chat_render *chat; /* the model's chat template until the server takes it */
	struct session_store *store; /* when sessions.store_dir */
	struct config_watch *watch; /* when config.watch */
	struct server_config_status status;
	double watchdog_period_s; /* 0: no watchdog */
	double last_ping, last_status;
	uint64_t last_heartbeat;
	bool reload_due; /* the file changed before its watch began */
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

/* The CUDA backend from its module (cuda_load.h). */
static int create_cuda(struct daemon *d, const struct cuda_module_api *api,
                       const struct backend_options *bo, char *err, size_t err_len)
{
	const struct sinkd_config *c = d->cfg;
	if (api->device_count() == 0)
		return err_set(err, err_len, -ENODEV,
		               "model.backend: cuda, but no CUDA device is usable here "
		               "(use cpu or auto)");
	struct backend_cuda_options co = {
	    .device = 0,
	    .dtype = c->inference.attention.dtype,
	    .cache_bytes = c->inference.cache.global_cache_limit_auto
	                       ? 0
	                       : (size_t)c->inference.cache.global_cache_limit,
	    .auto_fraction = c->inference.cache.auto_fraction,
	    .log = d->log};
	return api->backend_new(d->model, bo, &co, &d->be, err, err_len);
}

/* model.backend: cuda when asked, or with auto when the driver reports a
 * device and the CUDA module is found; else cpu.  The module (and with it
 * cuBLAS and the CUDA runtime) is loaded only then.  The choice is logged. */
static int create_backend(struct daemon *d, const char **name, char *err, size_t err_len)
{
	const struct sinkd_config *c = d->cfg;
	struct backend_options bo = {.n_threads = (int)c->engine.threads, .log = d->log};
	bool asked = c->model.backend == MODEL_BACKEND_CUDA;
	if (asked || (c->model.backend == MODEL_BACKEND_AUTO && cuda_load_probe_devices() > 0)) {
		const struct cuda_module_api *api = NULL;
		int rc = cuda_load_module(&api, err, err_len);
		if (rc == 0 && (asked || api->device_count() > 0)) {
			*name = "cuda";
			return create_cuda(d, api, &bo, err, err_len);
		}
		if (asked) {
			err_prefix(err, err_len, "model.backend: cuda");
			return rc;
		}
		if (rc == 0)
			err_set(err, err_len, -ENODEV, "the CUDA runtime finds no usable device");
		struct log_field f[] = {LOG_STR("reason", err), LOG_END};
		log_event(d->log, LOG_INFO, LOG_MODULE,
		          "model.backend auto: a CUDA device is present but the CUDA backend "
		          "cannot be loaded; running on cpu",
		          f);
		err[0] = '\0';
	}
	*name = "cpu";
	return backend_cpu_new(d->model, &bo, &d->be, err, err_len);
}

/* sessions.store_dir or sessions.store: the session store, shared with
 * other instances. */
static int open_store(struct daemon *d, char *err, size_t err_len)
{
	const struct sinkd_config *c = d->cfg;
	scheduler_set_model_file(d->sched, c->model.path);
	bool dir = c->sessions.store_dir && c->sessions.store_dir[0];
	bool url = c->sessions.store && c->sessions.store[0];
	if (!dir && !url)
		return 0;
	char instance[160], host[64] = "host";
	if (c->sessions.instance_id && c->sessions.instance_id[0]) {
		snprintf(instance, sizeof(instance), "%s", c->sessions.instance_id);
	} else {
		gethostname(host, sizeof(host) - 1);
		host[sizeof(host) - 1] = '\0';
		snprintf(instance, sizeof(instance), "%s:%ld", host, (long)getpid());
	}
	struct session_store_options so = {
	    .dir = dir ? c->sessions.store_dir : NULL,
	    .url = dir ? NULL : c->sessions.store,
	    .auth_file = c->sessions.store_auth_file && c->sessions.store_auth_file[0]
	                     ? c->sessions.store_auth_file
	                     : NULL,
	    .tls_ca_file = c->sessions.store_tls_ca_file && c->sessions.store_tls_ca_file[0]
	                       ? c->sessions.store_tls_ca_file
	                       : NULL,
	    .per_key_bytes = (uint64_t)c->sessions.per_key_store_bytes,
	    .log = d->log,
	    .max_bytes = (uint64_t)c->sessions.store_max_bytes,
	                                   .lease_timeout_s = (double)c->sessions.lease_timeout_s,
	                                   .ttl_s = (double)c->scheduler.session_ttl_s,
	                                   .instance = instance};
	int rc = session_store_open(&so, &d->store, err, err_len);
	if (rc) {
		err_prefix(err, err_len, dir ? "sessions.store_dir" : "sessions.store");
		return rc;
	}
	scheduler_set_store(d->sched, d->store);
	struct log_field f[] = {LOG_STR("backend", session_store_backend(d->store)),
	                        LOG_STR(dir ? "dir" : "url", dir ? c->sessions.store_dir
	                                                         : c->sessions.store),
	                        LOG_STR("instance", instance), LOG_END};
	log_event(d->log, LOG_INFO, LOG_MODULE, "session store open", f);
	return 0;
}

/* Which chat template renders prompts, and what it was found to render
 * itself (the rest sinkd fills in). */
static void log_chat_template(struct daemon *d)
{
	if (!d->chat) {
		log_msg(d->log, LOG_INFO, LOG_MODULE,
		        "chat template: none in the model; sinkd's built-in chat formats render "
		        "prompts");
		return;
	}
	const struct chat_render_caps *c = chat_render_caps(d->chat);
	struct log_field f[] = {LOG_STR("source", chat_render_origin(d->chat)),
	                        LOG_INT("system_role", c->system_role),
	                        LOG_INT("tools", c->tools),
	                        LOG_INT("tool_calls", c->tool_calls),
	                        LOG_INT("tool_responses", c->tool_responses),
	                        LOG_INT("alternating", c->alternating),
	                        LOG_INT("string_arguments", c->string_arguments),
	                        LOG_INT("reasoning_effort", c->reasoning_effort),
	                        LOG_END};
	log_event(d->log, LOG_INFO, LOG_MODULE, "chat template", f);
}

static int load_engine(struct daemon *d, char *err, size_t err_len)
{
	const struct sinkd_config *c = d->cfg;
	double t0 = (double)clock() / CLOCKS_PER_SEC;
	struct log_field f0[] = {LOG_STR("path", c->model.path), LOG_END};
	log_event(d->log, LOG_INFO, LOG_MODULE, "loading model", f0);
	struct model_load_options mo = {.expected_sha256 = c->model.sha256, .log = d->log};
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
	if (!rc)
		rc = chat_render_load(c->model.chat_template, d->tok, c->model.path, &d->chat, err,
		                      err_len);
	if (rc)
		return rc;
	const char *backend_name = NULL;
	rc = create_backend(d, &backend_name, err, err_len);
	if (!rc)
		rc = scheduler_new(c, d->be, d->tok, d->log, &d->sched, err, err_len);
	if (!rc)
		rc = open_store(d, err, err_len);
	if (rc)
		return rc;
	struct log_field f[] = {LOG_STR("model", d->model->name),
	                        LOG_STR("backend", backend_name),
	                        LOG_INT("layers", d->model->hp.n_layers),
	                        LOG_INT("vocab", d->model->hp.n_vocab),
	                        LOG_DBL("cpu_s", (double)clock() / CLOCKS_PER_SEC - t0),
	                        LOG_END};
	log_event(d->log, LOG_INFO, LOG_MODULE, "model loaded", f);
	log_chat_template(d);
	return 0;
}

static void apply_logging(struct daemon *d)
{
	log_set_level(d->log, d->cfg->logging.level);
	log_set_format(d->log, d->cfg->logging.format);
}

/* ---- appliers of a reload (config_reload.h) ---------------------------- */

static int server_prep(void *ctx, const struct sinkd_config *next, void **out, char *err,
                       size_t err_len)
{
	return server_prepare(((struct daemon *)ctx)->srv, next, (struct server_prepared **)out,
	                      err, err_len);
}

static void server_com(void *ctx, const struct sinkd_config *next, void *p)
{
	server_commit(((struct daemon *)ctx)->srv, p);
}

static void server_drop(void *ctx, void *p)
{
	server_prepared_free(p);
}

static int tls_prep(void *ctx, const struct sinkd_config *next, void **out, char *err,
                    size_t err_len)
{
	return server_tls_prepare(((struct daemon *)ctx)->srv, next, (struct tls_creds **)out, err,
	                          err_len);
}

static void tls_com(void *ctx, const struct sinkd_config *next, void *p)
{
	server_tls_commit(((struct daemon *)ctx)->srv, next, p);
}

static void tls_drop(void *ctx, void *p)
{
	server_tls_discard(p);
}

static int sched_prep(void *ctx, const struct sinkd_config *next, void **out, char *err,
                      size_t err_len)
{
	return scheduler_prepare(((struct daemon *)ctx)->sched, next, (struct sched_prepared **)out,
	                         err, err_len);
}

static void sched_com(void *ctx, const struct sinkd_config *next, void *p)
{
	scheduler_commit(((struct daemon *)ctx)->sched, p);
}

static void sched_drop(void *ctx, void *p)
{
	scheduler_prepared_free(p);
}

static void logging_com(void *ctx, const struct sinkd_config *next, void *p)
{
	struct daemon *d = ctx;
	log_set_level(d->log, next->logging.level);
	log_set_format(d->log, next->logging.format);
}

/* The files a watch follows: the config and, with TLS, its two files. */
static int watch_new(const struct daemon *d, const struct sinkd_config *c,
                     struct config_watch **out, char *err, size_t err_len)
{
	const char *paths[3] = {d->config_path};
	size_t n = 1;
	if (c->server.tls_enabled && c->server.tls_cert_file && c->server.tls_key_file) {
		paths[n++] = c->server.tls_cert_file;
		paths[n++] = c->server.tls_key_file;
	}
	int rc = config_watch_new(paths, n, WATCH_DEBOUNCE_MS, out, err, err_len);
	if (rc)
		err_prefix(err, err_len, "config.watch");
	return rc;
}

/* The daemon's own keys: a fresh watch (the TLS paths may have changed). */
static int daemon_prep(void *ctx, const struct sinkd_config *next, void **out, char *err,
                       size_t err_len)
{
	struct daemon *d = ctx;
	*out = NULL;
	if (!next->config.watch || !d->config_path)
		return 0;
	return watch_new(d, next, (struct config_watch **)out, err, err_len);
}

/* A watch reports changes after its start: if the file already differs from
 * the bytes in force, the next tick reloads. */
static void watch_catch_up(struct daemon *d, const struct sinkd_config *in_force)
{
	char now[65];
	if (d->watch && config_file_sha256(d->config_path, now) == 0 &&
	    strcmp(now, in_force->source_sha256) != 0)
		d->reload_due = true;
}

static void daemon_com(void *ctx, const struct sinkd_config *next, void *p)
{
	struct daemon *d = ctx;
	config_watch_free(d->watch);
	d->watch = p;
	watch_catch_up(d, next);
}

static void daemon_drop(void *ctx, void *p)
{
	config_watch_free(p);
}

/* ---- reload -------------------------------------------------------------- */

static void log_changes(struct daemon *d, const struct config_reload_result *res)
{
	for (size_t i = 0; i < res->n_changed; i++) {
		const struct config_change *c = &res->changed[i];
		struct log_field f[] = {LOG_STR("key", c->key), LOG_STR("old", c->old_value),
		                        LOG_STR("new", c->new_value), LOG_END};
		log_event(d->log, LOG_INFO, LOG_MODULE, "config key changed", f);
	}
	for (size_t i = 0; i < res->n_pending; i++) {
		const struct config_change *c = &res->pending[i];
		struct log_field f[] = {LOG_STR("key", c->key), LOG_STR("running", c->old_value),
		                        LOG_STR("file", c->new_value), LOG_END};
		log_event(d->log, LOG_WARN, LOG_MODULE, "needs restart: key not applied", f);
	}
}

static double unix_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void reload_failed(struct daemon *d, const char *err)
{
	d->status.reload_failures++;
	server_set_config_status(d->srv, &d->status);
	struct log_field f[] = {LOG_STR("error", err),
	                        LOG_INT("failures", (int64_t)d->status.reload_failures), LOG_END};
	log_event(d->log, LOG_ERROR, LOG_MODULE,
	          "reload failed; the running configuration is unchanged", f);
}

static void reload(struct daemon *d, const char *trigger)
{
	char err[SINKD_ERR_LEN];
	struct sinkd_config *nc = NULL;
	double t0 = monotime_s();
	notify_reloading();
	struct log_field f0[] = {LOG_STR("trigger", trigger), LOG_END};
	log_event(d->log, LOG_INFO, LOG_MODULE, "reloading configuration", f0);
	if (load_config(d, &nc, err, sizeof(err))) {
		reload_failed(d, err);
		notify_ready("serving (the last reload failed; see the log)");
		return;
	}
	const struct config_applier_ops ops[CONFIG_N_APPLIERS] = {
	    /* every reload: model.chat_template's file may change under its name */
	    [CONFIG_APPLY_SERVER] = {"server", server_prep, server_com, server_drop, d, true},
	    [CONFIG_APPLY_TLS] = {"tls", tls_prep, tls_com, tls_drop, d,
	                          d->cfg->server.tls_enabled},
	    [CONFIG_APPLY_SCHEDULER] = {"scheduler", sched_prep, sched_com, sched_drop, d, false},
	    [CONFIG_APPLY_LOGGING] = {"logging", NULL, logging_com, NULL, d, false},
	    [CONFIG_APPLY_DAEMON] = {"daemon", daemon_prep, daemon_com, daemon_drop, d, true},
	};
	const struct config_applier_ops *const op_list[CONFIG_N_APPLIERS] = {
	    &ops[0], &ops[1], &ops[2], &ops[3], &ops[4]};
	struct config_reload_result res;
	int rc = config_reload_apply(d->cfg, nc, op_list, &res, err, sizeof(err));
	if (rc) {
		reload_failed(d, err);
		config_reload_result_deinit(&res);
		config_deinit(nc);
		free(nc);
		notify_ready("serving (the last reload failed; see the log)");
		return;
	}
	log_changes(d, &res);
	struct sinkd_config *old = d->cfg;
	d->cfg = nc;
	config_deinit(old);
	free(old);
	d->status.generation++;
	snprintf(d->status.sha256, sizeof(d->status.sha256), "%s", nc->source_sha256);
	d->status.last_success_unix = unix_now();
	d->status.restart_pending = res.n_pending > 0;
	server_set_config_status(d->srv, &d->status);
	struct log_field f[] = {LOG_INT("generation", (int64_t)d->status.generation),
	                        LOG_INT("changed", (int64_t)res.n_changed),
	                        LOG_INT("restart_pending", (int64_t)res.n_pending),
	                        LOG_STR("sha256", nc->source_sha256),
	                        LOG_DBL("ms", (monotime_s() - t0) * 1e3),
	                        LOG_END};
	log_event(d->log, LOG_INFO, LOG_MODULE, "configuration reloaded", f);
	config_reload_result_deinit(&res);
	notify_ready("serving (configuration reloaded)");
}

/* ---- the serve loop -------------------------------------------------------- */

static void wait_tick(void)
{
	struct timespec ts = {0, 100 * 1000 * 1000};
	nanosleep(&ts, NULL);
}

/* WATCHDOG=1 only while the engine thread's loop turns: a stuck engine
 * stops the pings and systemd restarts the service. */
static void tick_watchdog(struct daemon *d, double now)
{
	if (d->watchdog_period_s <= 0 || !d->sched || now - d->last_ping < d->watchdog_period_s / 3)
		return;
	uint64_t hb = scheduler_heartbeat(d->sched);
	if (hb == d->last_heartbeat)
		return;
	d->last_heartbeat = hb;
	d->last_ping = now;
	notify_watchdog();
}

static void tick_status(struct daemon *d, double now, const char *state)
{
	if (now - d->last_status < STATUS_PERIOD_S || !d->sched)
		return;
	d->last_status = now;
	struct scheduler_stats st;
	scheduler_get_stats(d->sched, &st);
	notify_status(
	    "%s: %zu streams, %zu queued, %zu sessions, KV %.1f of %.1f MiB reserved "
	    "(%.0f%%), config generation %llu%s",
	    state, st.running, st.queue_depth, st.sessions,
	    (double)st.kv_bytes_reserved / 1048576.0, (double)st.kv_bytes_budget / 1048576.0,
	    st.kv_bytes_budget ? 100.0 * (double)st.kv_bytes_reserved / (double)st.kv_bytes_budget
	                       : 0.0,
	    (unsigned long long)d->status.generation,
	    d->status.restart_pending ? ", restart pending" : "");
}

static void tick_watch(struct daemon *d, double now)
{
	if (!d->watch)
		return;
	char err[SINKD_ERR_LEN];
	int rc = config_watch_poll(d->watch, now, err, sizeof(err));
	if (rc > 0) {
		reload(d, "file change");
	} else if (rc < 0) {
		struct log_field f[] = {LOG_STR("error", err), LOG_END};
		log_event(d->log, LOG_ERROR, LOG_MODULE,
		          "config.watch stopped; SIGHUP still reloads", f);
		config_watch_free(d->watch);
		d->watch = NULL;
	}
}

/* Sleeps up to seconds while the watchdog goes on; false when forced. */
static bool drain_sleep(struct daemon *d, double seconds, const volatile int *force_flag)
{
	double until = monotime_s() + seconds;
	while (monotime_s() < until) {
		if (force_flag && *force_flag)
			return false;
		double now = monotime_s();
		tick_watchdog(d, now);
		tick_status(d, now, "draining");
		wait_tick();
	}
	return true;
}

/* SIGTERM: /ready 503 at once; for drain_grace_s new requests get 503 (so
 * health checks see it); the listener closes; running streams get
 * drain_timeout_s; the rest end with a server_shutdown event.  A second
 * signal skips the waits.  How many persistent sessions could not be
 * written to the store (each logged as an error by the scheduler). */
static size_t drain(struct daemon *d, const volatile int *force_flag)
{
	size_t lost = 0;
	struct scheduler_stats st = {0};
	if (d->sched)
		scheduler_get_stats(d->sched, &st);
	size_t n = server_active_generations(d->srv);
	notify_stopping("draining");
	server_drain_begin(d->srv);
	struct log_field f[] = {LOG_INT("streams", (int64_t)n),
	                        LOG_INT("grace_s", d->cfg->server.drain_grace_s),
	                        LOG_INT("timeout_s", d->cfg->server.drain_timeout_s), LOG_END};
	log_event(d->log, LOG_INFO, LOG_MODULE, "draining: /ready is 503, new requests get 503", f);
	bool calm = drain_sleep(d, (double)d->cfg->server.drain_grace_s, force_flag);
	server_close_listener(d->srv);
	log_msg(d->log, LOG_INFO, LOG_MODULE, "draining: listener closed, %zu stream(s) running",
	        server_active_generations(d->srv));
	double until = monotime_s() + (double)d->cfg->server.drain_timeout_s;
	bool done = server_active_generations(d->srv) == 0;
	while (calm && !done && monotime_s() < until) {
		double left = until - monotime_s();
		done = server_wait_generations(d->srv, left < 0.5 ? left : 0.5, force_flag);
		if (force_flag && *force_flag)
			calm = false;
		double now = monotime_s();
		tick_watchdog(d, now);
		tick_status(d, now, "draining");
	}
	size_t left = server_active_generations(d->srv);
	if (left)
		log_msg(d->log, LOG_WARN, LOG_MODULE,
		        "draining: %s; %zu stream(s) end with a server_shutdown error",
		        calm ? "drain_timeout_s reached" : "second stop signal", left);
	server_stop(d->srv);
	if (d->sched)
		scheduler_get_stats(d->sched, &st);
	if (st.sessions && d->store) {
		size_t failed = 0;
		double t0 = monotime_s();
		size_t n = scheduler_offload_all(d->sched, (double)d->cfg->server.drain_timeout_s + 5.0,
		                                 &failed);
		struct log_field fo[] = {LOG_INT("written", (int64_t)n),
		                         LOG_INT("not_written", (int64_t)failed),
		                         LOG_DBL("seconds", monotime_s() - t0), LOG_END};
		log_event(d->log, failed ? LOG_ERROR : LOG_INFO, LOG_MODULE,
		          "draining: persistent sessions written to the session store", fo);
		lost = failed;
	} else if (st.sessions) {
		log_msg(d->log, LOG_WARN, LOG_MODULE,
		        "draining: %zu persistent session(s) dropped (set sessions.store_dir to "
		        "keep them across restarts)",
		        st.sessions);
	}
	return lost;
}

static void daemon_teardown(struct daemon *d)
{
	if (d->srv)
		server_stop(d->srv);
	config_watch_free(d->watch);
	scheduler_free(d->sched);
	session_store_close(d->store);
	server_free(d->srv);
	backend_free(d->be);
	chat_render_unref(d->chat);
	tokenizer_free(d->tok);
	model_free(d->model);
	if (d->cfg) {
		config_deinit(d->cfg);
		free(d->cfg);
	}
}

static void start_watch(struct daemon *d)
{
	char err[SINKD_ERR_LEN];
	if (!d->cfg->config.watch || !d->config_path)
		return;
	if (watch_new(d, d->cfg, &d->watch, err, sizeof(err))) {
		struct log_field f[] = {LOG_STR("error", err), LOG_END};
		log_event(d->log, LOG_ERROR, LOG_MODULE, "config.watch off; SIGHUP still reloads",
		          f);
	}
}

static void serve_loop(struct daemon *d, const volatile int *stop_flag, volatile int *reload_flag)
{
	while (!*stop_flag) {
		if (reload_flag && *reload_flag) {
			*reload_flag = 0;
			reload(d, "SIGHUP");
		}
		if (d->reload_due) {
			d->reload_due = false;
			reload(d, "file change");
		}
		double now = monotime_s();
		tick_watch(d, now);
		tick_watchdog(d, now);
		tick_status(d, now, "serving");
		wait_tick();
	}
}

int daemon_run(const char *config_path, const char *const *overrides, size_t n_overrides,
               struct sinkd_log *log, const volatile int *stop_flag, const volatile int *force_flag,
               volatile int *reload_flag, char *err, size_t err_len)
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
	if (!rc) {
		d.status.generation = 1;
		snprintf(d.status.sha256, sizeof(d.status.sha256), "%s", d.cfg->source_sha256);
		d.status.last_success_unix = unix_now();
		server_set_config_status(d.srv, &d.status);
		rc = load_engine(&d, err, err_len);
	}
	if (rc)
		goto out;
	const char *fail_at = getenv("SINKD_TEST_FAIL_TOKEN_QUEUE");
	if (fail_at && fail_at[0])
		server_set_token_queue_failure(d.srv, strtoull(fail_at, NULL, 10));
	const char *stall = getenv("SINKD_TEST_STALL_FILE");
	if (stall && stall[0])
		scheduler_set_stall_file(d.sched, stall);
	struct server_engine eng = {.model = d.model,
	                            .tok = d.tok,
	                            .sched = d.sched,
	                            .model_name = d.cfg->model.name && d.cfg->model.name[0]
	                                              ? d.cfg->model.name
	                                              : d.model->name,
	                            .chat = d.chat};
	d.watchdog_period_s = notify_watchdog_period_s();
	if (!*stop_flag) {
		start_watch(&d);
		server_attach_engine(d.srv, &eng);
		d.chat = NULL; /* the server's now */
		log_msg(log, LOG_INFO, LOG_MODULE, "ready on port %d", server_port(d.srv));
		notify_ready("serving");
		serve_loop(&d, stop_flag, reload_flag);
	}
	log_msg(log, LOG_INFO, LOG_MODULE, "stopping: draining open requests");
	size_t lost = drain(&d, force_flag);
	if (lost)
		rc = err_set(err, err_len, -EIO,
		             "draining: %zu persistent session(s) could not be written to the "
		             "session store and are lost (each named in the log)",
		             lost);
out:
	daemon_teardown(&d);
	if (!rc)
		log_msg(log, LOG_INFO, LOG_MODULE, "stopped");
	return rc;
}
