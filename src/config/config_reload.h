/* A reload as one transaction, driven by the config table: every key names
 * the subsystems that apply it (config_key.apply); each subsystem has a
 * prepare step that can fail and a commit step that cannot.  A reload
 * prepares every subsystem touched by a changed key, then commits all of
 * them or none.  Keys that cannot change live keep their running value and
 * are reported as waiting for a restart at every reload. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"

struct config_applier_ops {
	const char *name; /* for messages: "tls", "scheduler", ... */
	/* Builds what commit installs from the complete next config; on error
	 * nothing has changed.  *prepared may stay NULL. */
	int (*prepare)(void *ctx, const struct sinkd_config *next, void **prepared, char *err,
	               size_t err_len);
	/* Installs a prepared state; cannot fail.  `next` becomes the config in
	 * force right after and outlives the commit. */
	void (*commit)(void *ctx, const struct sinkd_config *next, void *prepared);
	/* Drops a prepared state that will not be committed (may be NULL). */
	void (*discard)(void *ctx, void *prepared);
	void *ctx;
	/* Prepared at every reload, changed keys or not (TLS re-reads its files,
	 * whose content can change under the same names). */
	bool every_reload;
};

struct config_change {
	const char *key; /* table path */
	char *old_value; /* as YAML would write it; secrets "***" */
	char *new_value;
};

struct config_reload_result {
	struct config_change *changed; /* applied keys whose value changed */
	size_t n_changed;
	struct config_change *pending; /* restart-only keys: running value, file value */
	size_t n_pending;
};
void config_reload_result_deinit(struct config_reload_result *r);

/* `next` is a freshly loaded config that passed every check.  Replaces its
 * restart-only keys by the running values of `cur` (so next is exactly the
 * config that will be in force), lists what changed and what waits for a
 * restart, prepares the appliers (ops may have NULL entries: subsystems not
 * running) and commits all or none.  0: committed, the caller makes next
 * the running config; else the error names the subsystem and nothing was
 * applied (res still lists the changes the file asked for). */
int config_reload_apply(const struct sinkd_config *cur, struct sinkd_config *next,
                        const struct config_applier_ops *const ops[CONFIG_N_APPLIERS],
                        struct config_reload_result *res, char *err, size_t err_len);
