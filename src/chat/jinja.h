/* Jinja chat templates: the subset of Jinja2 that Hugging Face chat
 * templates use, parsed once into a tree and rendered with a JSON context
 * (messages, tools, add_generation_prompt, bos_token, ...) the way
 * transformers' apply_chat_template renders it: trim_blocks and
 * lstrip_blocks on, loop controls, raise_exception and strftime_now
 * available, the {% generation %} block accepted.  A template comes from a
 * GGUF or a config file and is untrusted: every failure is a return code and
 * a message, never a crash, and rendering stops at a step, output and depth
 * budget. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct cJSON;

/* Return codes (negative errno values, named for what went wrong). */
#define JINJA_E_SYNTAX (-EINVAL)  /* parse: message "LINE:COL: CONSTRUCT: what" */
#define JINJA_E_RAISED (-EPERM)   /* render: the template called raise_exception(MSG); the message is MSG */
#define JINJA_E_RUNTIME (-EDOM)   /* render: a type error, unknown filter/test/method, ... "LINE:COL: what" */
#define JINJA_E_BUDGET (-E2BIG)   /* render: a step, output or depth budget ran out "LINE:COL: what" */
#define JINJA_E_NOMEM (-ENOMEM)

/* Budgets of one render; a zero field takes the default noted. */
struct jinja_limits {
	uint64_t max_steps;  /* expression and statement evaluations (default 10,000,000) */
	size_t max_output;   /* bytes of output and of any one string made (default 16 MiB);
			      * the render's working memory is held to 4 x max_output + 8 MiB */
	unsigned max_depth;  /* nesting of macro calls, loops and expressions (default 256,
			      * at most 1024) */
};

/* Render-time environment that is not part of the JSON context. */
struct jinja_env {
	/* what strftime_now() formats, in UTC; 0: the current time */
	time_t now;
	struct jinja_limits limits;
};

struct jinja_template;

/* Parses src[0..len) (UTF-8, at most 4 MiB; a NUL byte is refused).  Errors:
 * JINJA_E_SYNTAX with "LINE:COL: CONSTRUCT: message" in err, e.g.
 * "3:17: {% for %}: expected 'in', found 'message'" or
 * "12:1: {% if %}: not closed (opened at 4:3)"; JINJA_E_NOMEM. */
int jinja_parse(const char *src, size_t len, struct jinja_template **out, char *err,
		size_t err_len);
void jinja_template_free(struct jinja_template *t); /* NULL: no-op */

/* Renders t with the variables of context (a JSON object: each member a
 * top-level variable; JSON null reads as none, integral numbers that fit
 * int64 as integers, others as floats, objects keep their member order for
 * items() and tojson).  *out is malloc'ed and NUL-terminated, *out_len its
 * length (may be NULL).  env may be NULL (defaults).  A template object is
 * read-only while rendering: several threads may render it at once.
 * It renders as @huggingface/jinja does; where that refuses and Python's
 * Jinja2 renders (a for over undefined, trim of none, ...), as Jinja2
 * does: such a render runs a second time following Jinja2 throughout
 * (each run under the budgets).
 * Returns 0 or a JINJA_E_* code with the message in err. */
int jinja_render(const struct jinja_template *t, const struct cJSON *context,
		 const struct jinja_env *env, char **out, size_t *out_len, char *err,
		 size_t err_len);

/* Whether the template's source refers to the variable `name` anywhere
 * (e.g. "tools", "enable_thinking"): what a caller asks before deciding how
 * to offer something the template may not know about. */
bool jinja_template_uses(const struct jinja_template *t, const char *name);
