/* The JSON Schema compiler inside src/grammar (see grammar.h for the
 * subset): a schema to a rule of the grammar builder. */
#pragma once

#include <stddef.h>

#include <cjson/cJSON.h>

struct gbuild;

/* Defines the rules for prefix (NULL: none), one value of schema (NULL: any
 * JSON object, the json_object mode), suffix, and sets *root_rule.  On
 * -EINVAL, path gets the JSON path of the offending keyword. */
int schema_compile(struct gbuild *b, const char *prefix, const cJSON *schema, const char *suffix,
                   int *root_rule, char *path, size_t path_cap, char *err, size_t err_len);
