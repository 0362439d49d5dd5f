/* The model's own chat template, rendered with the Jinja interpreter
 * (chat/jinja.h): made once per loaded model (and again at each config
 * reload) from model.chat_template (a file, or the template text itself)
 * or else the GGUF's tokenizer.chat_template; a model with neither has no
 * renderer and keeps the C families of chat_template.h.  At load it probes
 * what the template renders (a system message, the tools, assistant tool
 * calls, tool results, turns that must alternate) and fills in what it
 * lacks when a request needs it: the system text in front of the first user
 * message, the tools, calls and results written in the generic tool format
 * of tools.h.  It does not parse model output (chat_format does). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "server/request.h"
#include "server/tools.h"

struct cJSON;
struct tokenizer;
struct chat_render;

/* What the template sees of the vocabulary. */
struct chat_render_vocab {
	const char *bos_text; /* bos_token ("" when the model has none) */
	const char *eos_text; /* eos_token */
	bool add_bos;         /* the tokenizer adds BOS: one leading bos_text is dropped */
};

/* What probing found the template to render. */
struct chat_render_caps {
	bool system_role;    /* a system message's text appears */
	bool tools;          /* the `tools` variable is rendered */
	bool tool_calls;     /* an assistant message's tool_calls are rendered */
	bool tool_responses; /* a role "tool" message's content is rendered */
	bool alternating;    /* two user messages in a row raise: turns must alternate */
	/* a call's arguments object does not show in the prompt but its JSON
	 * text does (DeepSeek R1 concatenates them): they are passed as text */
	bool string_arguments;
	bool reasoning_effort; /* the template reads reasoning_effort (gpt-oss) */
};

/* Parses src[0..len) and probes it.  origin names the template in
 * messages ("model.chat_template (FILE)", "tokenizer.chat_template of
 * MODEL"): a template that does not parse gives -EINVAL with
 * "ORIGIN: LINE:COL: ...".  0, -EINVAL or -ENOMEM. */
int chat_render_new(const char *src, size_t len, const char *origin,
                    const struct chat_render_vocab *v, struct chat_render **out, char *err,
                    size_t err_len);

/* The template in force for a model: config_value (model.chat_template:
 * text itself when it holds "{{" or "{%", else a file path; NULL or "":
 * unset), else tok's tokenizer.chat_template (model_label names the model
 * in messages).  *out is NULL when there is none (the C families apply).
 * Errors as chat_render_new's, or a file that cannot be read. */
int chat_render_load(const char *config_value, const struct tokenizer *tok,
                     const char *model_label, struct chat_render **out, char *err,
                     size_t err_len);

/* Reference counted: a reload swaps the server's renderer while requests
 * still render with the old one.  Both accept NULL. */
struct chat_render *chat_render_ref(struct chat_render *cr);
void chat_render_unref(struct chat_render *cr);

/* The template's source text (NUL-terminated; *len may be NULL), what the
 * output side reads the model's tool-call syntax and reasoning tags from. */
const char *chat_render_source(const struct chat_render *cr, size_t *len);
/* The reply format (tool-call and reasoning syntax) read from that source
 * once at load: what the replies are parsed in and the polyfills write. */
struct chat_format;
const struct chat_format *chat_render_format(const struct chat_render *cr);
const char *chat_render_origin(const struct chat_render *cr);
const struct chat_render_caps *chat_render_caps(const struct chat_render *cr);

/* One request's prompt. */
struct chat_render_input {
	const struct api_message *msgs;
	size_t n;
	/* the stream already holds tokens: only what msgs[first_new..n) add to
	 * msgs[0..first_new) (with no held messages: to a stand-in exchange) is
	 * rendered, so no preamble or BOS is written twice */
	bool continuation;
	size_t first_new;
	const struct tool_set *tools; /* NULL or tool_choice none: not offered */
	const char *reasoning_effort; /* NULL: not given */
	const struct cJSON *kwargs;   /* chat_template_kwargs (an object) or NULL */
};

/* Renders in with add_generation_prompt true into *text (malloc'ed,
 * NUL-terminated, *len bytes).  *system_end (may be NULL; 0 on a
 * continuation): the bytes of *text that the template writes before the
 * first user message, found by rendering without it.  Returns 0,
 * JINJA_E_RAISED (the template's raise_exception; err holds its message),
 * -EINVAL (any other render failure or a budget, err says where), -ENOMEM. */
int chat_render_prompt(const struct chat_render *cr, const struct chat_render_input *in,
                       char **text, size_t *len, size_t *system_end, char *err, size_t err_len);
