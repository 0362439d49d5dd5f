/* sinkd configuration: one table of keys (type, default, bounds, reload or
 * restart, secret) drives parsing of the YAML file, `--set key.path=value`
 * overrides, validation, printing of the effective config and reload diffs.
 * Defaults live only in that table (config_table.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config_types.h"

struct config_missing_file {
	const char *key; /* table path, e.g. "server.tls.cert_file" */
	char *message;
};

/* Every problem found while loading, each a complete line such as
 * "sinkd.yaml:12:5: inference.cache.window_size: 0 is out of range (allowed 1..1048576)". */
struct config_errors {
	char **lines;
	size_t n;
};
void config_errors_deinit(struct config_errors *e);
/* Writes each line + '\n'. */
void config_errors_print(const struct config_errors *e, FILE *out);

/* Fills every key with its default (from the table). */
int config_init_defaults(struct sinkd_config *c);
void config_deinit(struct sinkd_config *c);

/* Loads `path` (may be NULL: defaults only), applies `overrides` ("a.b.c=value"),
 * checks cross-key rules.  Returns 0, or -EINVAL with every problem in errs
 * (then *c holds defaults and must still be deinit'ed). */
int config_load(struct sinkd_config *c, const char *path, const char *const *overrides,
		size_t n_overrides, struct config_errors *errs);

/* Rules that only serving needs: model.path set and readable; TLS files set
 * and readable when TLS is on.
 * These two append to errs (initialise it to {0} first). */
int config_check_serve(const struct sinkd_config *c, struct config_errors *errs);
/* global_cache_limit must hold at least one session's cache for this model. */
struct model_hparams;
int config_check_budget(const struct sinkd_config *c, const struct model_hparams *hp,
			struct config_errors *errs);

/* Prints the effective config as YAML; secret values are masked. */
void config_print(const struct sinkd_config *c, FILE *out);

/* The config's cache settings (cache/geometry.h), and the cache geometry
 * they give a model. */
void config_cache_settings(const struct sinkd_config *c, struct cache_settings *s);
void config_cache_geometry(const struct sinkd_config *c, const struct model_hparams *hp,
			   struct cache_geometry *g);

/* The largest config file a load or reload reads, in bytes.  config_watch
 * hashes no more than this + 1 bytes of a watched file, so a watch never
 * reads more than the reload it triggers. */
#define CONFIG_FILE_MAX ((size_t)4 << 20)

/* The SHA-256 (hex) of a config file's bytes, as config_load records it in
 * source_sha256; negative errno when unreadable. */
int config_file_sha256(const char *path, char out[65]);

/* Parses "8GiB", "512 MiB", "1048576", "4k"; -EINVAL on malformed input. */
int config_parse_size(const char *s, int64_t *bytes);
