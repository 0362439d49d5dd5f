/* Fuzz target: the YAML config loader with --set overrides.  The input is
 * split at NUL bytes: the first piece is the file's text (loaded from a
 * memfd, as config_load reads any file), each further piece one
 * "key.path=value" override.  Checks: the result is 0 or -EINVAL; every
 * error is one printable line (no control characters, valid UTF-8) that
 * names where; a config that loads prints, and the printed config loads
 * again to the same effective values (secrets masked aside). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/config_table.h"
#include "fuzzutil.h"

#define MAX_OVERRIDES 8

static void check_line(const char *line)
{
	size_t n = strlen(line);
	if (n == 0 || !fuzz_utf8_valid(line, n))
		abort();
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)line[i];
		if (c < 0x20 || c == 0x7F)
			abort(); /* a forged line or a terminal escape */
		if (c == 0xC2 && (unsigned char)line[i + 1] <= 0x9F)
			abort(); /* C1 control */
	}
}

static char *print_config(const struct sinkd_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	if (mem == NULL)
		abort();
	config_print(c, mem);
	fclose(mem);
	return buf;
}

/* Whether every string value is UTF-8 and every path absolute, and there
 * are no secrets: what round-trips through the printed config. */
static int printable_as_is(const struct sinkd_config *c)
{
	for (size_t i = 0; i < config_n_keys; i++) {
		const struct config_key *k = &config_keys[i];
		const char *base = (const char *)c + k->offset;
		if (k->type == CONFIG_STRLIST) {
			size_t n = *(const size_t *)((const char *)c + k->aux_offset);
			char *const *list = *(char **const *)base;
			for (size_t j = 0; j < n; j++)
				if ((k->flags & CONFIG_SECRET) ||
				    !fuzz_utf8_valid(list[j], strlen(list[j])))
					return 0;
		}
		if (k->type != CONFIG_STRING && k->type != CONFIG_PATH)
			continue;
		const char *v = *(char *const *)base;
		if (v && ((k->flags & CONFIG_SECRET) || !fuzz_utf8_valid(v, strlen(v)) ||
		          (k->type == CONFIG_PATH && v[0] != '/')))
			return 0;
	}
	return 1;
}

/* The printed config, loaded again, prints the same. */
static void check_round_trip(const struct sinkd_config *c)
{
	/* Not expected to come back the same: masked secrets ("***"), --set
	 * paths relative to the working directory (a file's resolve against its
	 * folder), bytes that are not UTF-8 (printed as \xNN, read as U+00NN). */
	if (!printable_as_is(c))
		return;
	char *printed = print_config(c);
	struct fuzz_file f;
	fuzz_file_open(&f, printed, strlen(printed));
	struct sinkd_config again;
	struct config_errors errs;
	int rc = config_load(&again, f.path, NULL, 0, &errs);
	if (rc != 0) {
		fprintf(stderr, "printed config does not load:\n%s", printed);
		config_errors_print(&errs, stderr);
		abort();
	}
	char *reprinted = print_config(&again);
	if (strcmp(printed, reprinted) != 0) {
		fprintf(stderr, "printed config changed:\n%s\n---\n%s", printed, reprinted);
		abort();
	}
	free(reprinted);
	config_errors_deinit(&errs);
	config_deinit(&again);
	fuzz_file_close(&f);
	free(printed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *pieces[1 + MAX_OVERRIDES];
	size_t n = 0;
	char *copy = fuzz_split(data, size, pieces, 1 + MAX_OVERRIDES, &n);
	struct fuzz_file f;
	fuzz_file_open(&f, pieces[0], strlen(pieces[0]));
	struct sinkd_config c;
	struct config_errors errs;
	int rc = config_load(&c, f.path, (const char *const *)pieces + 1, n - 1, &errs);
	if (rc != 0 && rc != -EINVAL)
		abort();
	if ((rc == 0) != (errs.n == 0))
		abort();
	for (size_t i = 0; i < errs.n; i++)
		check_line(errs.lines[i]);
	if (rc == 0)
		check_round_trip(&c);
	config_errors_deinit(&errs);
	config_deinit(&c);
	fuzz_file_close(&f);
	free(copy);
	return 0;
}
