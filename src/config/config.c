/* Configuration loading: parses values for the keys of config_table.c from
 * their defaults, a YAML file (libyaml events, with line and column for every
 * problem) and `--set key.path=value` overrides, then checks the rules that
 * span several keys.  All problems are collected, not just the first.  It
 * does not watch files or apply a config: the daemon does that on SIGHUP. */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "cache/geometry.h"
#include "config/config_table.h"
#include "model/model.h"
#include "util/digest.h"
#include "util/errbuf.h"
#include "util/utf8.h"

#define ORIGIN_LEN 192
/* A sinkd config is at most 4 levels deep.  Deeper nesting is refused as its
 * events arrive, so libyaml's scanner (whose cost per token grows with the
 * flow nesting depth) never gets more than a line past this depth. */
#define CONFIG_MAX_DEPTH 16
/* Enough to fix a file in one pass; stopping there bounds the work a hostile
 * file of unknown keys causes (each one gets a spelling suggestion). */
#define CONFIG_MAX_ERRORS 100

/* State of one config_load call. */
struct loader {
	struct sinkd_config *cfg;
	struct config_errors *errs;
	const char *file;	 /* path as given, for messages */
	char base_dir[4096];	 /* relative PATH values resolve against this */
	char (*origin)[ORIGIN_LEN]; /* per key: "file:line:col" or "--set" or "default" */
	char **seen;		 /* paths already set in this file (duplicates) */
	size_t n_seen;
	int depth; /* open YAML mappings and sequences */
	yaml_parser_t parser;
};

/* ---------------------------------------------------------------- errors */

void config_errors_deinit(struct config_errors *e)
{
	if (e == NULL)
		return;
	for (size_t i = 0; i < e->n; i++)
		free(e->lines[i]);
	free(e->lines);
	e->lines = NULL;
	e->n = 0;
}

void config_errors_print(const struct config_errors *e, FILE *out)
{
	for (size_t i = 0; e && i < e->n; i++)
		fprintf(out, "%s\n", e->lines[i]);
}

/* A copy of s in which control characters (C0, DEL, C1, U+2028/U+2029) are
 * written as \n, \t, \xNN or \uNNNN and bytes that are not UTF-8 as \xNN,
 * so quoted input can never start a line of its own or drive a terminal.
 * Backslashes stay as they are: escaping twice changes nothing. */
static char *escape_line(const char *s)
{
	size_t len = strlen(s), n = 0;
	char *out = malloc(4 * len + 1); /* the worst case: \xNN for every byte */
	if (out == NULL)
		return NULL;
	for (size_t i = 0; i < len;) {
		const unsigned char *p = (const unsigned char *)s + i;
		size_t step;
		uint32_t cp = utf8_decode(p, len - i, &step);
		int invalid = cp == 0xFFFD && step == 1;
		if (cp == '\n' || cp == '\t' || cp == '\r')
			n += (size_t)sprintf(out + n, "\\%c",
			                     cp == '\n'   ? 'n'
			                     : cp == '\t' ? 't'
			                                  : 'r');
		else if (invalid || cp < 0x20 || cp == 0x7F)
			n += (size_t)sprintf(out + n, "\\x%02x", *p);
		else if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029)
			n += (size_t)sprintf(out + n, "\\u%04x", (unsigned)cp);
		else {
			memcpy(out + n, p, step);
			n += step;
		}
		i += step;
	}
	out[n] = '\0';
	return out;
}

static void add_error(struct loader *ld, const char *where, const char *fmt, ...) SINKD_PRINTF(3, 4);
static void add_error(struct loader *ld, const char *where, const char *fmt, ...)
{
	char msg[1024];
	if (ld->errs->n > CONFIG_MAX_ERRORS)
		return;
	if (ld->errs->n == CONFIG_MAX_ERRORS) {
		where = ld->file ? ld->file : "config";
		snprintf(msg, sizeof(msg), "too many problems: stopped after the first %d",
		         CONFIG_MAX_ERRORS);
	} else {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
	}
	char **lines = realloc(ld->errs->lines, (ld->errs->n + 1) * sizeof(char *));
	if (lines == NULL)
		return;
	ld->errs->lines = lines;
	size_t len = strlen(where) + strlen(msg) + 3;
	char *raw = malloc(len);
	if (raw == NULL)
		return;
	snprintf(raw, len, "%s: %s", where, msg);
	char *line = escape_line(raw);
	free(raw);
	if (line == NULL)
		return;
	lines[ld->errs->n++] = line;
}

/* ---------------------------------------------------------------- table */

static const struct config_key *find_key(const char *path)
{
	for (size_t i = 0; i < config_n_keys; i++)
		if (strcmp(config_keys[i].path, path) == 0)
			return &config_keys[i];
	return NULL;
}

static int is_section(const char *path)
{
	size_t len = strlen(path);
	for (size_t i = 0; i < config_n_keys; i++)
		if (strncmp(config_keys[i].path, path, len) == 0 && config_keys[i].path[len] == '.')
			return 1;
	return 0;
}

static size_t levenshtein(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 128 || lb > 128)
		return (size_t)-1;
	size_t row[129];
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
			size_t best = diag + cost;
			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* The known key or section nearest to an unknown path, or NULL. */
static const char *suggest(const char *path, char *buf, size_t buf_len)
{
	size_t best = (size_t)-1, path_len = strlen(path);
	size_t limit = path_len / 4 > 2 ? path_len / 4 : 2;
	const char *best_path = NULL;
	for (size_t i = 0; i < config_n_keys; i++) {
		const char *k = config_keys[i].path;
		/* Compare against the key and every section prefix of it (not
		 * those whose length alone puts them past the limit). */
		for (const char *dot = k;; dot++) {
			if (*dot == '.' || *dot == '\0') {
				size_t n = (size_t)(dot - k);
				size_t diff = n > path_len ? n - path_len : path_len - n;
				if (n < buf_len && diff <= limit) {
					memcpy(buf, k, n);
					buf[n] = '\0';
					size_t d = levenshtein(path, buf);
					if (d < best) {
						best = d;
						best_path = k;
					}
				}
			}
			if (*dot == '\0')
				break;
		}
	}
	if (best_path == NULL || best > limit)
		return NULL;
	/* Recompute the matching prefix of best_path into buf. */
	for (const char *dot = best_path;; dot++) {
		if (*dot == '.' || *dot == '\0') {
			size_t n = (size_t)(dot - best_path);
			memcpy(buf, best_path, n);
			buf[n] = '\0';
			if (levenshtein(path, buf) == best)
				return buf;
		}
		if (*dot == '\0')
			break;
	}
	return NULL;
}

static void describe_allowed(const struct config_key *k, char *out, size_t len)
{
	switch (k->type) {
	case CONFIG_BOOL:
		snprintf(out, len, "true or false");
		break;
	case CONFIG_INT:
		snprintf(out, len, "an integer %lld..%lld", (long long)k->min, (long long)k->max);
		break;
	case CONFIG_SIZE:
		snprintf(out, len, "a size such as 512MiB or 8GiB (KiB/MiB/GiB/TiB, K/M/G/T), %s%lld..%lld bytes",
			 k->aux_offset ? "or auto, " : "", (long long)k->min, (long long)k->max);
		break;
	case CONFIG_DOUBLE:
		snprintf(out, len, "a number %g..%g", k->dmin, k->dmax);
		break;
	case CONFIG_ENUM: {
		size_t n = 0;
		out[0] = '\0';
		for (size_t i = 0; k->names[i]; i++)
			n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%s", i ? " | " : "",
					      k->names[i]);
		break;
	}
	case CONFIG_STRING:
		snprintf(out, len, "a string");
		break;
	case CONFIG_PATH:
		snprintf(out, len, "the path of a readable file");
		break;
	case CONFIG_STRLIST:
		snprintf(out, len, "a list of strings");
		break;
	}
}

/* ---------------------------------------------------------------- values */

int config_parse_size(const char *s, int64_t *bytes)
{
	static const struct {
		const char *suffix;
		double mult;
	} units[] = {{"", 1.0},
		     {"b", 1.0},
		     {"k", 1024.0},
		     {"kib", 1024.0},
		     {"kb", 1e3},
		     {"m", 1048576.0},
		     {"mib", 1048576.0},
		     {"mb", 1e6},
		     {"g", 1073741824.0},
		     {"gib", 1073741824.0},
		     {"gb", 1e9},
		     {"t", 1099511627776.0},
		     {"tib", 1099511627776.0},
		     {"tb", 1e12}};
	if (s == NULL)
		return -EINVAL;
	while (isspace((unsigned char)*s))
		s++;
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	while (isspace((unsigned char)*end))
		end++;
	char suffix[8];
	size_t n = strlen(end);
	if (n >= sizeof(suffix))
		return -EINVAL;
	memset(suffix, 0, sizeof(suffix));
	for (size_t i = 0; i < n && i + 1 < sizeof(suffix); i++)
		suffix[i] = (char)tolower((unsigned char)end[i]);
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(suffix, units[i].suffix) == 0) {
			double b = v * units[i].mult;
			if (b > 9.2e18 || b != floor(b))
				return -EINVAL;
			*bytes = (int64_t)b;
			return 0;
		}
	}
	return -EINVAL;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", NULL};
	static const char *const no[] = {"false", "no", "off", NULL};
	for (size_t i = 0; yes[i]; i++)
		if (strcasecmp(s, yes[i]) == 0)
			return *out = true, 0;
	for (size_t i = 0; no[i]; i++)
		if (strcasecmp(s, no[i]) == 0)
			return *out = false, 0;
	return -EINVAL;
}

static int parse_int(const char *s, int64_t *out)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

static void *field(struct sinkd_config *cfg, size_t offset)
{
	return (char *)cfg + offset;
}

static const void *cfield(const struct sinkd_config *cfg, size_t offset)
{
	return (const char *)cfg + offset;
}

static void free_strlist(struct sinkd_config *cfg, const struct config_key *k)
{
	char ***list = field(cfg, k->offset);
	size_t *count = field(cfg, k->aux_offset);
	for (size_t i = 0; i < *count; i++)
		free((*list)[i]);
	free(*list);
	*list = NULL;
	*count = 0;
}

/* Resolves a relative path against base_dir (the config file's folder). */
static char *resolve_path(const char *base_dir, const char *value)
{
	if (value[0] == '/' || base_dir == NULL || base_dir[0] == '\0')
		return strdup(value);
	size_t len = strlen(base_dir) + strlen(value) + 2;
	char *out = malloc(len);
	if (out)
		snprintf(out, len, "%s/%s", base_dir, value);
	return out;
}

/* Drops blanks at both ends of the span [*s, *s + *n). */
static void trim_blanks(const char **s, size_t *n)
{
	while (*n && isspace((unsigned char)**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && isspace((unsigned char)(*s)[*n - 1]))
		(*n)--;
}

/* Adds item number `index` (1-based, for the message), the span [s, s + n)
 * less blanks and one pair of matching quotes around it.  A wrong item's
 * message names its number; the validator shows no more of it than a
 * secret may show. */
static int strlist_append(struct sinkd_config *cfg, const struct config_key *k, const char *s,
			  size_t n, size_t index, char *msg, size_t msg_len)
{
	char ***list = field(cfg, k->offset);
	size_t *count = field(cfg, k->aux_offset);
	trim_blanks(&s, &n);
	if (n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0]) {
		s++;
		n -= 2;
		trim_blanks(&s, &n);
	}
	char *item = strndup(s, n);
	if (item == NULL)
		return err_set(msg, msg_len, -ENOMEM, "out of memory");
	char why[480];
	if (k->validate && k->validate(item, why, sizeof(why))) {
		free(item);
		return err_set(msg, msg_len, -EINVAL, "item %zu: %s", index, why);
	}
	char **grown = realloc(*list, (*count + 1) * sizeof(char *));
	if (grown == NULL) {
		free(item);
		return err_set(msg, msg_len, -ENOMEM, "out of memory");
	}
	*list = grown;
	grown[(*count)++] = item;
	return 0;
}

/* A list written as one string, as --set (or a YAML scalar) gives it:
 * `a,b`, `[a, b]`, `["a","b"]` or `['a']`, blanks around items allowed, an
 * empty item (a trailing comma, `[]`, "") skipped.  A comma inside quotes
 * belongs to its item. */
static int strlist_set_text(struct sinkd_config *cfg, const struct config_key *k,
			    const char *text, char *msg, size_t msg_len)
{
	free_strlist(cfg, k);
	const char *s = text;
	size_t n = strlen(text), index = 0;
	trim_blanks(&s, &n);
	if (n && s[0] == '[') {
		if (n < 2 || s[n - 1] != ']')
			return err_set(msg, msg_len, -EINVAL,
				       "a list that opens with '[' must close with ']' (allowed: "
				       "[\"a\", \"b\"], or a,b)");
		s++;
		n -= 2;
	}
	const char *item = s;
	char quote = 0;
	for (size_t i = 0; i <= n; i++) {
		char c = i < n ? s[i] : ',';
		if (quote && i < n) {
			quote = c == quote ? 0 : quote;
			continue;
		}
		if (quote)
			return err_set(msg, msg_len, -EINVAL, "item %zu: a quote is not closed",
				       index + 1);
		const char *lead = item;
		while (lead < s + i && isspace((unsigned char)*lead))
			lead++;
		if ((c == '"' || c == '\'') && lead == s + i) {
			quote = c; /* only at an item's start: an apostrophe inside is a letter */
			continue;
		}
		if (c != ',')
			continue;
		size_t len = (size_t)(s + i - item);
		const char *t = item;
		trim_blanks(&t, &len);
		if (len > 0) {
			int rc = strlist_append(cfg, k, t, len, ++index, msg, msg_len);
			if (rc)
				return rc;
		}
		item = s + i + 1;
	}
	return 0;
}

/* Parses `text` for key k and stores it.  Returns 0 or -EINVAL with msg. */
static int set_scalar(struct sinkd_config *cfg, const struct config_key *k, const char *text,
		      const char *base_dir, char *msg, size_t msg_len)
{
	char allowed[320];
	describe_allowed(k, allowed, sizeof(allowed));
	switch (k->type) {
	case CONFIG_BOOL: {
		bool v;
		if (parse_bool(text, &v))
			return err_set(msg, msg_len, -EINVAL, "'%.80s' is not a boolean (allowed: %s)",
				       text, allowed);
		*(bool *)field(cfg, k->offset) = v;
		return 0;
	}
	case CONFIG_INT: {
		int64_t v;
		if (parse_int(text, &v))
			return err_set(msg, msg_len, -EINVAL, "'%.80s' is not an integer (allowed: %s)",
				       text, allowed);
		if (v < k->min || v > k->max)
			return err_set(msg, msg_len, -ERANGE, "%lld is out of range (allowed: %s)",
				       (long long)v, allowed);
		*(int64_t *)field(cfg, k->offset) = v;
		return 0;
	}
	case CONFIG_SIZE: {
		int64_t v = 0;
		bool is_auto = k->aux_offset && strcasecmp(text, "auto") == 0;
		if (!is_auto && config_parse_size(text, &v))
			return err_set(msg, msg_len, -EINVAL, "'%.80s' is not a size (allowed: %s)",
				       text, allowed);
		if (!is_auto && (v < k->min || v > k->max))
			return err_set(msg, msg_len, -ERANGE, "%s is out of range (allowed: %s)", text,
				       allowed);
		*(int64_t *)field(cfg, k->offset) = v;
		if (k->aux_offset)
			*(bool *)field(cfg, k->aux_offset) = is_auto;
		return 0;
	}
	case CONFIG_DOUBLE: {
		char *end = NULL;
		errno = 0;
		double v = strtod(text, &end);
		if (errno || end == text || *end != '\0' || !isfinite(v))
			return err_set(msg, msg_len, -EINVAL, "'%.80s' is not a number (allowed: %s)",
				       text, allowed);
		if (v < k->dmin || v > k->dmax)
			return err_set(msg, msg_len, -ERANGE, "%g is out of range (allowed: %s)", v,
				       allowed);
		*(double *)field(cfg, k->offset) = v;
		return 0;
	}
	case CONFIG_ENUM:
		for (size_t i = 0; k->names[i]; i++) {
			if (strcmp(text, k->names[i]) == 0) {
				*(int *)field(cfg, k->offset) = k->values[i];
				return 0;
			}
		}
		return err_set(msg, msg_len, -EINVAL, "'%.80s' is not allowed (allowed: %s)", text,
			       allowed);
	case CONFIG_STRING:
	case CONFIG_PATH: {
		char **slot = field(cfg, k->offset);
		if (text[0] != '\0' && k->validate && k->validate(text, msg, msg_len))
			return -EINVAL;
		char *v = NULL;
		bool path = k->type == CONFIG_PATH &&
		            !((k->flags & CONFIG_INLINE_TEMPLATE) &&
		              (strstr(text, "{{") || strstr(text, "{%")));
		if (text[0] != '\0') {
			v = path ? resolve_path(base_dir, text) : strdup(text);
			if (v == NULL)
				return err_set(msg, msg_len, -ENOMEM, "out of memory");
			if (path && access(v, R_OK) != 0) {
				/* Kept, and reported by the serve rules: see
				 * config_missing_file. */
				int e = errno;
				err_set(msg, msg_len, -ENOENT, "cannot read file '%s': %s", v,
					strerror(e));
				free(*slot);
				*slot = v;
				return -ENOENT;
			}
		}
		free(*slot);
		*slot = v;
		return 0;
	}
	case CONFIG_STRLIST:
		return strlist_set_text(cfg, k, text, msg, msg_len);
	}
	return -EINVAL;
}

/* ---------------------------------------------------------------- YAML */

static void mark_where(const struct loader *ld, const yaml_mark_t *mark, char *out, size_t len)
{
	snprintf(out, len, "%s:%zu:%zu", ld->file, mark->line + 1, mark->column + 1);
}

static size_t key_index(const struct config_key *k)
{
	return (size_t)(k - config_keys);
}

/* The next event, or -EINVAL (with an error) on a syntax error, nesting
 * deeper than CONFIG_MAX_DEPTH, or once too many problems were found. */
static int next_event(struct loader *ld, yaml_event_t *ev)
{
	char where[ORIGIN_LEN];
	if (ld->errs->n >= CONFIG_MAX_ERRORS) {
		add_error(ld, ld->file, "too many problems"); /* once: add_error caps */
		return -EINVAL;
	}
	if (!yaml_parser_parse(&ld->parser, ev)) {
		mark_where(ld, &ld->parser.problem_mark, where, sizeof(where));
		add_error(ld, where, "YAML syntax error: %s%s%s",
		          ld->parser.problem ? ld->parser.problem : "?",
		          ld->parser.context ? " " : "",
		          ld->parser.context ? ld->parser.context : "");
		return -EINVAL;
	}
	if (ev->type == YAML_MAPPING_START_EVENT || ev->type == YAML_SEQUENCE_START_EVENT) {
		if (++ld->depth > CONFIG_MAX_DEPTH) {
			mark_where(ld, &ev->start_mark, where, sizeof(where));
			add_error(ld, where,
			          "YAML nested deeper than %d levels (a sinkd config is at most 4 "
			          "levels deep)",
			          CONFIG_MAX_DEPTH);
			yaml_event_delete(ev);
			return -EINVAL;
		}
	} else if (ev->type == YAML_MAPPING_END_EVENT || ev->type == YAML_SEQUENCE_END_EVENT) {
		ld->depth--;
	}
	return 0;
}

/* Consumes the rest of a node whose start event was `start`. */
static int skip_node(struct loader *ld, yaml_event_type_t start)
{
	if (start != YAML_MAPPING_START_EVENT && start != YAML_SEQUENCE_START_EVENT)
		return 0;
	int depth = 1;
	while (depth > 0) {
		yaml_event_t ev;
		if (next_event(ld, &ev))
			return -EINVAL;
		if (ev.type == YAML_MAPPING_START_EVENT || ev.type == YAML_SEQUENCE_START_EVENT)
			depth++;
		else if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT)
			depth--;
		yaml_event_delete(&ev);
	}
	return 0;
}

static int note_seen(struct loader *ld, const char *path, const char *where)
{
	for (size_t i = 0; i < ld->n_seen; i++) {
		if (strcmp(ld->seen[i], path) == 0) {
			add_error(ld, where, "%s: duplicate key (each key may appear once)", path);
			return -EINVAL;
		}
	}
	char **grown = realloc(ld->seen, (ld->n_seen + 1) * sizeof(char *));
	if (grown == NULL)
		return -ENOMEM;
	ld->seen = grown;
	ld->seen[ld->n_seen++] = strdup(path);
	return 0;
}

static int is_null_scalar(const yaml_event_t *ev)
{
	const char *v = (const char *)ev->data.scalar.value;
	if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return 0;
	return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0;
}

/* Records an unreadable file of a path key: only serving needs it. */
static void note_missing_file(struct loader *ld, const struct config_key *k, const char *where,
			      const char *msg)
{
	struct sinkd_config *c = ld->cfg;
	size_t len = strlen(where) + strlen(k->path) + strlen(msg) + 8;
	char *line = malloc(len);
	struct config_missing_file *grown =
		realloc(c->missing_files, (c->n_missing_files + 1) * sizeof(*grown));
	if (line == NULL || grown == NULL) {
		free(line);
		if (grown)
			c->missing_files = grown;
		add_error(ld, where, "%s: out of memory", k->path);
		return;
	}
	snprintf(line, len, "%s: %s: %s", where, k->path, msg);
	c->missing_files = grown;
	char *escaped = escape_line(line);
	if (escaped) {
		free(line);
		line = escaped;
	}
	grown[c->n_missing_files].key = k->path;
	grown[c->n_missing_files].message = line;
	c->n_missing_files++;
}

static void drop_missing_file(struct sinkd_config *c, const struct config_key *k)
{
	for (size_t i = 0; i < c->n_missing_files; i++) {
		if (strcmp(c->missing_files[i].key, k->path) == 0) {
			free(c->missing_files[i].message);
			c->missing_files[i] = c->missing_files[--c->n_missing_files];
			return;
		}
	}
}

/* Parses one value for key k from `where`; path keys whose file is missing
 * are kept and noted. */
static void apply_value(struct loader *ld, const struct config_key *k, const char *text,
			const char *base_dir, const char *where)
{
	char msg[600];
	drop_missing_file(ld->cfg, k);
	int rc = set_scalar(ld->cfg, k, text, base_dir, msg, sizeof(msg));
	if (rc == -ENOENT && k->type == CONFIG_PATH)
		note_missing_file(ld, k, where, msg);
	else if (rc != 0) {
		add_error(ld, where, "%s: %s", k->path, msg);
		return;
	}
	snprintf(ld->origin[key_index(k)], ORIGIN_LEN, "%s", where);
}

static void apply_yaml_scalar(struct loader *ld, const struct config_key *k, const yaml_event_t *ev,
			      const char *where)
{
	char msg[600];
	const char *text = (const char *)ev->data.scalar.value;
	int empty_ok = k->type == CONFIG_STRING || k->type == CONFIG_PATH || k->type == CONFIG_STRLIST;
	if (is_null_scalar(ev) && !empty_ok) {
		describe_allowed(k, msg, sizeof(msg));
		add_error(ld, where, "%s: needs a value (allowed: %s)", k->path, msg);
		return;
	}
	if (is_null_scalar(ev))
		text = "";
	/* a list as one string (a,b) is read as --set reads it */
	apply_value(ld, k, text, ld->base_dir, where);
}

static int parse_list(struct loader *ld, const struct config_key *k, const char *where)
{
	free_strlist(ld->cfg, k);
	snprintf(ld->origin[key_index(k)], ORIGIN_LEN, "%s", where);
	for (size_t n_items = 1;; n_items++) {
		yaml_event_t ev;
		if (next_event(ld, &ev))
			return -EINVAL;
		if (ev.type == YAML_SEQUENCE_END_EVENT) {
			yaml_event_delete(&ev);
			return 0;
		}
		char item_where[ORIGIN_LEN], msg[600];
		mark_where(ld, &ev.start_mark, item_where, sizeof(item_where));
		if (ev.type != YAML_SCALAR_EVENT) {
			add_error(ld, item_where, "%s: wrong type: list items must be strings", k->path);
			yaml_event_type_t t = ev.type;
			yaml_event_delete(&ev);
			if (skip_node(ld, t))
				return -EINVAL;
			continue;
		}
		const char *item = (const char *)ev.data.scalar.value;
		if (strlist_append(ld->cfg, k, item, strlen(item), n_items, msg, sizeof(msg)))
			add_error(ld, item_where, "%s: %s", k->path, msg);
		yaml_event_delete(&ev);
	}
}

static int parse_mapping(struct loader *ld, const char *prefix);

/* Handles the value of `path` whose first event is ev (consumed here). */
static int parse_value(struct loader *ld, const char *path, yaml_event_t *ev, const char *where)
{
	const struct config_key *k = find_key(path);
	int section = k == NULL && is_section(path);
	int rc = 0;
	if (ev->type == YAML_ALIAS_EVENT) {
		add_error(ld, where, "%s: YAML aliases are not supported", path);
	} else if (k == NULL && !section) {
		char buf[256];
		const char *near = suggest(path, buf, sizeof(buf));
		if (near)
			add_error(ld, where, "%s: unknown key (did you mean '%s'?)", path, near);
		else
			add_error(ld, where, "%s: unknown key", path);
		rc = skip_node(ld, ev->type);
	} else if (section) {
		if (ev->type == YAML_MAPPING_START_EVENT)
			rc = parse_mapping(ld, path);
		else if (ev->type == YAML_SCALAR_EVENT && is_null_scalar(ev))
			rc = 0; /* an empty section keeps its defaults */
		else {
			add_error(ld, where, "%s: wrong type: this is a section, expected a mapping of its keys",
				  path);
			rc = skip_node(ld, ev->type);
		}
	} else if (ev->type == YAML_SCALAR_EVENT) {
		apply_yaml_scalar(ld, k, ev, where);
	} else if (ev->type == YAML_SEQUENCE_START_EVENT && k->type == CONFIG_STRLIST) {
		rc = parse_list(ld, k, where);
	} else {
		char allowed[320];
		describe_allowed(k, allowed, sizeof(allowed));
		add_error(ld, where, "%s: wrong type: expected %s", path, allowed);
		rc = skip_node(ld, ev->type);
	}
	return rc;
}

static int parse_mapping(struct loader *ld, const char *prefix)
{
	for (;;) {
		yaml_event_t key_ev, val_ev;
		if (next_event(ld, &key_ev))
			return -EINVAL;
		if (key_ev.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&key_ev);
			return 0;
		}
		char where[ORIGIN_LEN], path[256];
		mark_where(ld, &key_ev.start_mark, where, sizeof(where));
		if (key_ev.type != YAML_SCALAR_EVENT) {
			add_error(ld, where, "%s: keys must be plain strings", prefix[0] ? prefix : "(top)");
			yaml_event_delete(&key_ev);
			return -EINVAL;
		}
		snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "",
			 (const char *)key_ev.data.scalar.value);
		yaml_event_delete(&key_ev);
		if (next_event(ld, &val_ev))
			return -EINVAL;
		int dup = note_seen(ld, path, where);
		int rc = 0;
		if (dup == 0)
			rc = parse_value(ld, path, &val_ev, where);
		else
			rc = skip_node(ld, val_ev.type);
		yaml_event_delete(&val_ev);
		if (rc)
			return rc;
	}
}

static int parse_document(struct loader *ld)
{
	yaml_event_t ev;
	int rc = 0;
	for (;;) {
		if (next_event(ld, &ev))
			return -EINVAL;
		yaml_event_type_t t = ev.type;
		char where[ORIGIN_LEN];
		mark_where(ld, &ev.start_mark, where, sizeof(where));
		if (t == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			return rc;
		}
		if (t == YAML_MAPPING_START_EVENT) {
			yaml_event_delete(&ev);
			rc = parse_mapping(ld, "");
			if (rc)
				return rc;
			continue;
		}
		if (t == YAML_SCALAR_EVENT && !is_null_scalar(&ev)) {
			add_error(ld, where, "the file must be a mapping of sections (server:, model:, inference:, ...)");
			yaml_event_delete(&ev);
			return -EINVAL;
		}
		if (t == YAML_SEQUENCE_START_EVENT) {
			add_error(ld, where, "the file must be a mapping of sections, not a list");
			yaml_event_delete(&ev);
			return -EINVAL;
		}
		yaml_event_delete(&ev);
	}
}

/* What a path that is not a regular file is, for the message refusing it. */
static const char *file_kind(mode_t mode)
{
	return S_ISDIR(mode)    ? "a folder"
	       : S_ISFIFO(mode) ? "a FIFO"
	       : S_ISSOCK(mode) ? "a socket"
	       : S_ISCHR(mode)  ? "a character device"
	       : S_ISBLK(mode)  ? "a block device"
	                        : "not a file";
}

/* Opens path to read it, never blocking: O_NONBLOCK so that a FIFO moved
 * into the config's place cannot hang a reload (the serve loop) in open(),
 * and anything but a regular file is refused before a byte is read (a FIFO
 * would block or read as empty, a device might never end). */
static int config_file_open(struct loader *ld, const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		add_error(ld, path, "cannot open config file: %s", strerror(e));
		return -e;
	}
	if (fstat(fd, &st) != 0) {
		int e = errno;
		add_error(ld, path, "cannot read config file: %s", strerror(e));
		close(fd);
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		add_error(ld, path, "cannot read config file: not a regular file (%s)",
		          file_kind(st.st_mode));
		close(fd);
		return -EINVAL;
	}
	return fd;
}

/* Reads up to cap bytes of fd, growing buf with what it finds: a small
 * config costs a small buffer.  Returns 0 or a negative errno. */
static int config_file_slurp(int fd, size_t cap, unsigned char **out, size_t *len)
{
	unsigned char *buf = NULL;
	size_t size = 0, n = 0;
	for (;;) {
		if (n == size) {
			if (size == cap)
				break;
			size_t want = size ? 2 * size : 64 << 10;
			want = want > cap ? cap : want;
			unsigned char *grown = realloc(buf, want);
			if (grown == NULL) {
				free(buf);
				return -ENOMEM;
			}
			buf = grown;
			size = want;
		}
		ssize_t got = read(fd, buf + n, size - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int e = errno;
			free(buf);
			return -e;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	*out = buf;
	*len = n;
	return 0;
}

/* Reads the whole file (so the digest is of exactly the bytes parsed), at
 * most CONFIG_FILE_MAX of it: one byte more tells that it is too large. */
static int read_config_file(struct loader *ld, const char *path, unsigned char **out, size_t *len)
{
	unsigned char *buf = NULL;
	size_t n = 0;
	int fd = config_file_open(ld, path);
	if (fd < 0)
		return fd;
	int rc = config_file_slurp(fd, CONFIG_FILE_MAX + 1, &buf, &n);
	close(fd);
	if (rc == 0 && n > CONFIG_FILE_MAX) {
		free(buf);
		rc = -EFBIG;
	}
	if (rc < 0) {
		if (rc == -ENOMEM || rc == -EFBIG)
			add_error(ld, path, "%s",
			          rc == -ENOMEM ? "out of memory" : "config file larger than 4 MiB");
		else
			add_error(ld, path, "cannot read config file: %s", strerror(-rc));
		return -EINVAL;
	}
	*out = buf;
	*len = n;
	return 0;
}

int config_file_sha256(const char *path, char out[65])
{
	struct config_errors errs = {0};
	struct loader ld = {.errs = &errs};
	unsigned char *text = NULL;
	size_t len = 0;
	int rc = read_config_file(&ld, path, &text, &len);
	config_errors_deinit(&errs);
	if (rc)
		return rc;
	digest_sha256_hex(text, len, out);
	free(text);
	return 0;
}

static int load_file(struct loader *ld, const char *path)
{
	unsigned char *text = NULL;
	size_t len = 0;
	int rc = read_config_file(ld, path, &text, &len);
	if (rc)
		return rc;
	digest_sha256_hex(text, len, ld->cfg->source_sha256);
	/* Relative paths in the file are relative to its folder. */
	snprintf(ld->base_dir, sizeof(ld->base_dir), "%s", path);
	char *slash = strrchr(ld->base_dir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(ld->base_dir, sizeof(ld->base_dir), ".");
	yaml_parser_initialize(&ld->parser);
	yaml_parser_set_input_string(&ld->parser, text, len);
	rc = parse_document(ld);
	yaml_parser_delete(&ld->parser);
	free(text);
	return rc;
}

/* ---------------------------------------------------------------- overrides */

static void apply_override(struct loader *ld, const char *spec)
{
	char where[ORIGIN_LEN];
	snprintf(where, sizeof(where), "--set %.160s", spec);
	const char *eq = strchr(spec, '=');
	if (eq == NULL || eq == spec) {
		add_error(ld, where, "expected key.path=value");
		return;
	}
	char path[256];
	size_t n = (size_t)(eq - spec);
	if (n >= sizeof(path)) {
		add_error(ld, where, "key too long");
		return;
	}
	memcpy(path, spec, n);
	path[n] = '\0';
	const struct config_key *k = find_key(path);
	char buf[256];
	const char *near = k ? NULL : suggest(path, buf, sizeof(buf));
	const struct config_key *meant = k ? k : near ? find_key(near) : NULL;
	if (meant && (meant->flags & CONFIG_SECRET)) /* a raw key is never echoed */
		snprintf(where, sizeof(where), "--set %.160s=(a secret: not shown)", path);
	if (k == NULL) {
		if (is_section(path))
			add_error(ld, where, "%s: is a section; set one of its keys", path);
		else if (near)
			add_error(ld, where, "%s: unknown key (did you mean '%s'?)", path, near);
		else
			add_error(ld, where, "%s: unknown key", path);
		return;
	}
	/* --set paths are relative to the working directory. */
	apply_value(ld, k, eq + 1, NULL, where);
}

/* ---------------------------------------------------------------- rules */

/* One session store: a folder or a Redis URL. */
static void check_store_keys(struct loader *ld)
{
	const struct sinkd_config *c = ld->cfg;
	const char *url = c->sessions.store, *dir = c->sessions.store_dir;
	const char *url_at = ld->origin[key_index(find_key("sessions.store"))];
	if (url && url[0] && dir && dir[0])
		add_error(ld, url_at,
		          "sessions.store: set either sessions.store (a Redis URL) or "
		          "sessions.store_dir (a folder, set at %s), not both",
		          ld->origin[key_index(find_key("sessions.store_dir"))]);
	if (url && url[0] && strncmp(url, "redis://", 8) && strncmp(url, "rediss://", 9))
		add_error(ld, url_at,
		          "sessions.store: '%.200s' is not a redis:// or rediss:// URL (a folder "
		          "goes in sessions.store_dir)",
		          url);
}

static void check_cross_keys(struct loader *ld)
{
	const struct sinkd_config *c = ld->cfg;
	check_store_keys(ld);
	const char *sink_at = ld->origin[key_index(find_key("inference.cache.sink_keep_count"))];
	const char *win_at = ld->origin[key_index(find_key("inference.cache.window_size"))];
	const char *hot_at =
		ld->origin[key_index(find_key("inference.quantization.full_precision_recent"))];
	if (c->inference.cache.strategy == CACHE_STRATEGY_SLIDING_WINDOW) {
		if (c->inference.cache.sink_keep_count >= c->inference.cache.window_size)
			add_error(ld, sink_at,
				  "inference.cache.sink_keep_count: %lld must be smaller than "
				  "inference.cache.window_size (%lld, set at %s)",
				  (long long)c->inference.cache.sink_keep_count,
				  (long long)c->inference.cache.window_size, win_at);
		if (c->inference.cache.window_size > c->inference.max_context_length)
			add_error(ld, win_at,
				  "inference.cache.window_size: %lld is larger than "
				  "inference.max_context_length (%lld)",
				  (long long)c->inference.cache.window_size,
				  (long long)c->inference.max_context_length);
		if (c->inference.quantization.enabled &&
		    c->inference.quantization.full_precision_recent > c->inference.cache.window_size)
			add_error(ld, hot_at,
				  "inference.quantization.full_precision_recent: %lld is larger than "
				  "inference.cache.window_size (%lld); allowed 0..window_size",
				  (long long)c->inference.quantization.full_precision_recent,
				  (long long)c->inference.cache.window_size);
	} else if (c->inference.cache.anchors.enabled) {
		add_error(ld, ld->origin[key_index(find_key("inference.cache.anchors.enabled"))],
			  "inference.cache.anchors.enabled: needs inference.cache.strategy "
			  "sliding_window (a full cache evicts nothing, so keeps no anchors)");
	}
}

/* ---------------------------------------------------------------- public */

int config_init_defaults(struct sinkd_config *c)
{
	memset(c, 0, sizeof(*c));
	char msg[600];
	for (size_t i = 0; i < config_n_keys; i++) {
		if (set_scalar(c, &config_keys[i], config_keys[i].def, NULL, msg, sizeof(msg)) != 0)
			return -EINVAL; /* a broken table: caught by the unit tests */
	}
	return 0;
}

void config_deinit(struct sinkd_config *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->n_missing_files; i++)
		free(c->missing_files[i].message);
	free(c->missing_files);
	c->missing_files = NULL;
	c->n_missing_files = 0;
	for (size_t i = 0; i < config_n_keys; i++) {
		const struct config_key *k = &config_keys[i];
		if (k->type == CONFIG_STRING || k->type == CONFIG_PATH) {
			char **slot = field(c, k->offset);
			free(*slot);
			*slot = NULL;
		} else if (k->type == CONFIG_STRLIST) {
			free_strlist(c, k);
		}
	}
}

int config_load(struct sinkd_config *c, const char *path, const char *const *overrides,
		size_t n_overrides, struct config_errors *errs)
{
	struct loader ld = {.cfg = c, .errs = errs, .file = path ? path : "(defaults)"};
	errs->lines = NULL;
	errs->n = 0;
	if (config_init_defaults(c) != 0) {
		add_error(&ld, "config table", "a default does not parse (bug)");
		return -EINVAL;
	}
	ld.origin = calloc(config_n_keys, ORIGIN_LEN);
	if (ld.origin == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < config_n_keys; i++)
		snprintf(ld.origin[i], ORIGIN_LEN, "default");
	if (path)
		load_file(&ld, path);
	for (size_t i = 0; i < n_overrides; i++)
		apply_override(&ld, overrides[i]);
	if (errs->n == 0)
		check_cross_keys(&ld);
	for (size_t i = 0; i < ld.n_seen; i++)
		free(ld.seen[i]);
	free(ld.seen);
	free(ld.origin);
	if (errs->n) {
		config_deinit(c);
		config_init_defaults(c);
		return -EINVAL;
	}
	return 0;
}

int config_check_serve(const struct sinkd_config *c, struct config_errors *errs)
{
	struct loader ld = {.cfg = (struct sinkd_config *)c, .errs = errs};
	if (c->model.path == NULL)
		add_error(&ld, "model.path", "required to serve: the GGUF model file to load");
	for (size_t i = 0; i < c->n_missing_files; i++) {
		const struct config_missing_file *mf = &c->missing_files[i];
		if (strncmp(mf->key, "server.tls.", 11) == 0 && !c->server.tls_enabled)
			continue;
		add_error(&ld, mf->message, "required to serve");
	}
	if (c->server.tls_enabled && c->server.tls_cert_file == NULL)
		add_error(&ld, "server.tls.cert_file",
			  "required when server.tls.enabled is true (a PEM certificate; "
			  "server.tls.enabled: false serves plain HTTP)");
	if (c->server.tls_enabled && c->server.tls_key_file == NULL)
		add_error(&ld, "server.tls.key_file",
			  "required when server.tls.enabled is true (the PEM private key)");
	return errs->n ? -EINVAL : 0;
}

int config_check_budget(const struct sinkd_config *c, const struct model_hparams *hp,
			struct config_errors *errs)
{
	struct loader ld = {.cfg = (struct sinkd_config *)c, .errs = errs};
	if (c->inference.cache.global_cache_limit_auto)
		return 0;
	struct cache_geometry g;
	config_cache_geometry(c, hp, &g);
	size_t one = cache_geometry_bound_bytes(&g);
	if ((size_t)c->inference.cache.global_cache_limit < one) {
		add_error(&ld, "inference.cache.global_cache_limit",
			  "%lld bytes is smaller than one session's cache (%zu bytes for this model "
			  "and cache geometry); raise it or shrink inference.cache.window_size",
			  (long long)c->inference.cache.global_cache_limit, one);
		return -EINVAL;
	}
	return 0;
}

void config_cache_settings(const struct sinkd_config *c, struct cache_settings *s)
{
	*s = (struct cache_settings){
	    .strategy = c->inference.cache.strategy,
	    .sink_keep_count = (int)c->inference.cache.sink_keep_count,
	    .window_size = (int)c->inference.cache.window_size,
	    .max_context_length = (int)c->inference.max_context_length,
	    .quant_enabled = c->inference.quantization.enabled,
	    .quant_bits = (int)c->inference.quantization.bits,
	    .protect_sinks = c->inference.quantization.protect_sink_positions,
	    .full_precision_recent = (int)c->inference.quantization.full_precision_recent,
	    .rope_positions = c->inference.cache.rope_positions,
	    .dtype = c->inference.attention.dtype,
	    .anchors_enabled = c->inference.cache.anchors.enabled,
	    .anchor_max = (int)c->inference.cache.anchors.max_tokens,
	    .anchor_promote = c->inference.cache.anchors.promote_threshold,
	    .anchor_demote_steps = (int)c->inference.cache.anchors.demote_after_steps,
	};
}

void config_cache_geometry(const struct sinkd_config *c, const struct model_hparams *hp,
			   struct cache_geometry *g)
{
	struct cache_settings s;
	config_cache_settings(c, &s);
	cache_geometry_build(&s, hp, g);
}

/* Appends s as a YAML double-quoted scalar to out (len bytes, used so far),
 * whole escapes only; returns the new used.  Control characters and quotes
 * are escaped, so a printed value is one line and reads back as the same
 * string (bytes that are not UTF-8 print as \xNN, which reads back as
 * U+00NN). */
static size_t put_yaml_quoted(char *out, size_t len, size_t used, const char *s)
{
	size_t slen = strlen(s);
	if (used + 3 > len) /* the quotes and NUL */
		return used;
	out[used++] = '"';
	for (size_t i = 0; i < slen;) {
		const unsigned char *p = (const unsigned char *)s + i;
		size_t step;
		char esc[8];
		uint32_t cp = utf8_decode(p, slen - i, &step);
		const char *piece = esc;
		size_t n;
		if (cp == '"' || cp == '\\')
			n = (size_t)snprintf(esc, sizeof(esc), "\\%c", (char)cp);
		else if (cp == '\n' || cp == '\t')
			n = (size_t)snprintf(esc, sizeof(esc), "\\%c", cp == '\n' ? 'n' : 't');
		else if ((cp == 0xFFFD && step == 1) || cp < 0x20 || cp == 0x7F)
			n = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", *p);
		else if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
		         cp == 0xFEFF || cp == 0xFFFE ||
		         cp == 0xFFFF) /* and what YAML calls non-printable */
			n = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp);
		else
			piece = (const char *)p, n = step;
		if (used + n + 2 > len) /* room for this, the closing quote and NUL */
			break;
		memcpy(out + used, piece, n);
		used += n;
		i += step;
	}
	out[used++] = '"';
	out[used] = '\0';
	return used;
}

void config_format_value(const struct sinkd_config *c, const struct config_key *k, int mask,
			 char *out, size_t len)
{
	switch (k->type) {
	case CONFIG_BOOL:
		snprintf(out, len, "%s", *(const bool *)cfield(c, k->offset) ? "true" : "false");
		break;
	case CONFIG_INT:
		snprintf(out, len, "%lld", (long long)*(const int64_t *)cfield(c, k->offset));
		break;
	case CONFIG_SIZE:
		if (k->aux_offset && *(const bool *)cfield(c, k->aux_offset))
			snprintf(out, len, "auto");
		else
			snprintf(out, len, "%lld", (long long)*(const int64_t *)cfield(c, k->offset));
		break;
	case CONFIG_DOUBLE:
		snprintf(out, len, "%g", *(const double *)cfield(c, k->offset));
		break;
	case CONFIG_ENUM: {
		int v = *(const int *)cfield(c, k->offset);
		snprintf(out, len, "?");
		for (size_t i = 0; k->names[i]; i++)
			if (k->values[i] == v)
				snprintf(out, len, "%s", k->names[i]);
		break;
	}
	case CONFIG_STRING:
	case CONFIG_PATH: {
		const char *s = *(char *const *)cfield(c, k->offset);
		if (len > 0)
			out[0] = '\0';
		put_yaml_quoted(out, len, 0,
		                s ? (mask && (k->flags & CONFIG_SECRET) ? "***" : s) : "");
		break;
	}
	case CONFIG_STRLIST: {
		char *const *list = *(char **const *)cfield(c, k->offset);
		size_t n = *(const size_t *)cfield(c, k->aux_offset), used = 0;
		used += (size_t)snprintf(out, len, "[");
		for (size_t i = 0; i < n && used + 3 < len; i++) {
			if (i)
				used += (size_t)snprintf(out + used, len - used, ", ");
			used = put_yaml_quoted(
			    out, len, used, mask && (k->flags & CONFIG_SECRET) ? "***" : list[i]);
		}
		if (used < len)
			snprintf(out + used, len - used, "]");
		break;
	}
	}
}

int config_copy_value(struct sinkd_config *dst, const struct sinkd_config *src,
		      const struct config_key *k)
{
	if (k->type == CONFIG_STRING || k->type == CONFIG_PATH) {
		const char *v = *(char *const *)cfield(src, k->offset);
		char *copy = v ? strdup(v) : NULL;
		if (v && !copy)
			return -ENOMEM;
		char **slot = field(dst, k->offset);
		free(*slot);
		*slot = copy;
		drop_missing_file(dst, k); /* the running value's file was readable */
		return 0;
	}
	if (k->type == CONFIG_STRLIST) {
		char *const *list = *(char **const *)cfield(src, k->offset);
		size_t n = *(const size_t *)cfield(src, k->aux_offset);
		char **copy = n ? calloc(n, sizeof(char *)) : NULL;
		if (n && !copy)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			copy[i] = strdup(list[i]);
			if (!copy[i]) {
				while (i--)
					free(copy[i]);
				free(copy);
				return -ENOMEM;
			}
		}
		free_strlist(dst, k);
		*(char ***)field(dst, k->offset) = copy;
		*(size_t *)field(dst, k->aux_offset) = n;
		return 0;
	}
	size_t size = k->type == CONFIG_BOOL	 ? sizeof(bool)
		      : k->type == CONFIG_DOUBLE ? sizeof(double)
		      : k->type == CONFIG_ENUM	 ? sizeof(int)
						 : sizeof(int64_t);
	memcpy(field(dst, k->offset), cfield(src, k->offset), size);
	if (k->type == CONFIG_SIZE && k->aux_offset)
		*(bool *)field(dst, k->aux_offset) = *(const bool *)cfield(src, k->aux_offset);
	return 0;
}

void config_print(const struct sinkd_config *c, FILE *out)
{
	char prev[256] = "";
	for (size_t i = 0; i < config_n_keys; i++) {
		const struct config_key *k = &config_keys[i];
		/* Open every section of this path that the previous key did not share. */
		int depth = 0;
		const char *p = k->path;
		const char *dot;
		while ((dot = strchr(p, '.')) != NULL) {
			size_t n = (size_t)(dot - k->path);
			if (strncmp(prev, k->path, n + 1) != 0)
				fprintf(out, "%*s%.*s:\n", depth * 2, "", (int)(dot - p), p);
			depth++;
			p = dot + 1;
		}
		char value[2048];
		config_format_value(c, k, 1, value, sizeof(value));
		fprintf(out, "%*s%s: %s%s%s\n", depth * 2, "", p, value,
			 k->apply == 0 ? "  # restart" : "",
			 (k->flags & CONFIG_SECRET) ? "  # secret" : "");
		snprintf(prev, sizeof(prev), "%s", k->path);
	}
}
