/* Shared plumbing of the one-shot sub-commands: argument walking, reading a
 * whole file or stdin, and opening the config, model, tokenizer and cpu
 * backend (generate, eval).  It does not run the model: each command drives
 * the backend itself. */
#include "cli/cli_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

int cli_engine_open(struct cli_engine *e, const char *config_path, const char *const *sets,
		    size_t n_sets, const char *model_path, int n_threads, char *err,
		    size_t err_len)
{
	struct config_errors errs = {0};
	int rc = config_load(&e->cfg, config_path, sets, n_sets, &errs);
	e->cfg_loaded = true;
	if (rc) {
		config_errors_print(&errs, stderr);
		config_errors_deinit(&errs);
		return err_set(err, err_len, -EINVAL, "%s: invalid configuration",
			       config_path ? config_path : "--set");
	}
	config_errors_deinit(&errs);
	const char *path = model_path ? model_path : e->cfg.model.path;
	if (path == NULL || path[0] == '\0')
		return err_set(err, err_len, -EINVAL, "--model FILE (or model.path in --config) is required");
	if ((rc = model_load(path, NULL, &e->model, err, err_len)))
		return rc;
	if ((rc = tokenizer_new_from_gguf(e->model->file, &e->tok, err, err_len)))
		return rc;
	struct backend_options opt = {.n_threads = n_threads >= 0 ? n_threads
								 : (int)e->cfg.engine.threads};
	return backend_cpu_new(e->model, &opt, &e->be, err, err_len);
}

void cli_engine_close(struct cli_engine *e)
{
	backend_free(e->be);
	tokenizer_free(e->tok);
	model_free(e->model);
	if (e->cfg_loaded)
		config_deinit(&e->cfg);
	memset(e, 0, sizeof(*e));
}

int cli_parse_args(int argc, char **argv, const char *command, void *args, cli_flag_fn on_flag,
		   cli_valued_fn on_valued, void (*usage)(FILE *out))
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 1;
		}
		int rc = on_flag(args, argv[i]);
		if (rc < 0)
			return rc;
		if (rc > 0)
			continue;
		rc = i + 1 < argc ? on_valued(args, argv[i], argv[i + 1]) : 0;
		if (rc < 0)
			return rc;
		if (rc == 0) {
			fprintf(stderr, "sinkd %s: unknown or incomplete argument '%s'\n", command,
				argv[i]);
			usage(stderr);
			return -EINVAL;
		}
		i++;
	}
	return 0;
}

int cli_read_stream(FILE *in, char **buf, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);
	while (b) {
		n += fread(b + n, 1, cap - 1 - n, in);
		if (n < cap - 1)
			break;
		char *nb = realloc(b, cap *= 2);
		if (!nb)
			free(b);
		b = nb;
	}
	if (!b)
		return -ENOMEM;
	if (ferror(in)) {
		free(b);
		return -EIO;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

int cli_read_path(const char *path, char **buf, size_t *len, char *err, size_t err_len)
{
	bool is_stdin = !strcmp(path, "-");
	FILE *f = is_stdin ? stdin : fopen(path, "rb");
	if (!f)
		return err_set(err, err_len, -errno, "cannot open %s: %s", path, strerror(errno));
	int rc = cli_read_stream(f, buf, len);
	if (!is_stdin)
		fclose(f);
	if (rc)
		return err_set(err, err_len, rc, "cannot read %s: %s", is_stdin ? "stdin" : path,
			       strerror(-rc));
	return 0;
}
