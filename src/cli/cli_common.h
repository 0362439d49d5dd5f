/* What the sub-commands share: the argument loop, reading a whole input,
 * and the config + model + tokenizer + cpu backend `generate` and `eval`
 * run on. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "engine/backend.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

struct cli_engine {
	struct sinkd_config cfg;
	bool cfg_loaded;
	struct model *model;
	struct tokenizer *tok;
	struct backend *be;
};

/* Loads the config (config_path may be NULL: defaults; every config error
 * is printed to stderr and -EINVAL returned), then the model (model_path,
 * else model.path), its tokenizer and the cpu backend with n_threads
 * (< 0: engine.threads from the config). */
int cli_engine_open(struct cli_engine *e, const char *config_path, const char *const *sets,
		    size_t n_sets, const char *model_path, int n_threads, char *err,
		    size_t err_len);
/* Safe on a zeroed or partly opened engine. */
void cli_engine_close(struct cli_engine *e);

/* One option: returns 1 when consumed, 0 when unknown, negative on a bad value. */
typedef int (*cli_flag_fn)(void *args, const char *opt);
typedef int (*cli_valued_fn)(void *args, const char *opt, const char *value);

/* Walks argv[1..]: options without a value go to on_flag first, then
 * "--opt VALUE" pairs to on_valued; --help/-h prints usage to stdout.
 * Returns 0, 1 after --help, or -EINVAL after printing what was wrong. */
int cli_parse_args(int argc, char **argv, const char *command, void *args, cli_flag_fn on_flag,
		   cli_valued_fn on_valued, void (*usage)(FILE *out));

/* Reads all of in into a malloc'ed buffer, NUL-terminated (*len excludes
 * the NUL).  Returns 0, -EIO or -ENOMEM. */
int cli_read_stream(FILE *in, char **buf, size_t *len);
/* The same for the file at path, "-" meaning stdin; the message names path. */
int cli_read_path(const char *path, char **buf, size_t *len, char *err, size_t err_len);
