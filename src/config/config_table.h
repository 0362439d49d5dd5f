/* The table of configuration keys: the single place where each key's type,
 * default, bounds and flags are written.  Internal to src/config. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "config/config_types.h"

enum config_type {
	CONFIG_BOOL = 0,
	CONFIG_INT,	 /* int64_t, bounds min..max */
	CONFIG_SIZE,	 /* int64_t bytes with KiB/MiB/GiB suffixes; "auto" when flag_offset set */
	CONFIG_DOUBLE,	 /* double, bounds dmin..dmax */
	CONFIG_STRING,	 /* char *, NULL when empty */
	CONFIG_PATH,	 /* char *, a file that must exist and be readable when set */
	CONFIG_ENUM,	 /* int-sized enum, names[] / values[] */
	CONFIG_STRLIST,	 /* char ** + size_t count at count_offset */
};

enum config_flags {
	CONFIG_SECRET = 1u << 2, /* masked when printed and in reload logs */
	/* PATH: a value holding "{{" or "{%" is Jinja text itself, not a path */
	CONFIG_INLINE_TEMPLATE = 1u << 3,
};


struct config_key {
	const char *path; /* "inference.cache.window_size" */
	enum config_type type;
	size_t offset;	     /* into struct sinkd_config */
	size_t aux_offset;   /* SIZE: bool "auto" flag; STRLIST: size_t count */
	int64_t min, max;    /* INT, SIZE */
	double dmin, dmax;   /* DOUBLE */
	const char *const *names; /* ENUM: NULL-terminated */
	const int *values;	  /* ENUM: one per name */
	const char *def;	  /* the default, written as it would be in YAML ("" = unset) */
	unsigned flags;		  /* enum config_flags */
	const char *help;	  /* one line: what it does */
	unsigned apply;		  /* CONFIG_APPLIES() bits; 0 = restart only */
	/* Extra check of a string value (STRING, STRLIST items); 0 or -EINVAL
	 * with "what is allowed" in msg. */
	int (*validate)(const char *value, char *msg, size_t msg_len);
};

extern const struct config_key config_keys[];
extern const size_t config_n_keys;

/* The value of key k in c as YAML would write it; secrets as "***" when mask. */
void config_format_value(const struct sinkd_config *c, const struct config_key *k, int mask,
			 char *out, size_t len);
/* Copies key k's value from src into dst (strings and lists duplicated).
 * 0 or -ENOMEM (dst keeps its old value then). */
int config_copy_value(struct sinkd_config *dst, const struct sinkd_config *src,
		      const struct config_key *k);
