/* The table of weight types: one row per type the loader accepts, saying
 * whether the engine computes with it as stored (its index in matmul's
 * kernel table) and whether qdot's integer kernels read it.  Adding a type
 * is one row here, a row conversion in dequant.c and, when it is to be
 * kept as stored, kernels in the engine.  It says nothing about how a type
 * is laid out: gguf.c's type table does. */
#include "model/wtype.h"

#include <stdio.h>

static const struct wtype_row {
	enum ggml_type type;
	int stored;       /* enum wtype_stored, or -1: dequantized at load */
	bool integer_dot; /* engine/qdot reads it */
} wtypes[] = {
    {GGML_TYPE_F32, WTYPE_F32, false},  {GGML_TYPE_F16, WTYPE_F16, false},
    {GGML_TYPE_BF16, WTYPE_BF16, false}, {GGML_TYPE_Q8_0, WTYPE_Q8_0, true},
    {GGML_TYPE_Q4_0, WTYPE_Q4_0, true},  {GGML_TYPE_Q4_1, -1, false},
    {GGML_TYPE_Q5_0, -1, false},         {GGML_TYPE_Q5_1, -1, false},
    {GGML_TYPE_Q4_K, WTYPE_Q4_K, true},  {GGML_TYPE_Q5_K, WTYPE_Q5_K, true},
    {GGML_TYPE_Q6_K, WTYPE_Q6_K, true},
    /* gpt-oss's experts: read as stored by the qdot kernels */
    {GGML_TYPE_MXFP4, WTYPE_MXFP4, true},
};

static const struct wtype_row *row_of(enum ggml_type type)
{
	for (size_t i = 0; i < sizeof(wtypes) / sizeof(wtypes[0]); i++)
		if (wtypes[i].type == type)
			return &wtypes[i];
	return NULL;
}

bool wtype_loadable(enum ggml_type type)
{
	return row_of(type) != NULL;
}

int wtype_stored_index(enum ggml_type type)
{
	const struct wtype_row *r = row_of(type);
	return r ? r->stored : -1;
}

bool wtype_kept_as_stored(enum ggml_type type)
{
	return wtype_stored_index(type) >= 0;
}

bool wtype_integer_dot(enum ggml_type type)
{
	const struct wtype_row *r = row_of(type);
	return r && r->integer_dot;
}

void wtype_names(char *out, size_t len)
{
	size_t n = 0;
	if (len == 0)
		return;
	out[0] = '\0';
	for (size_t i = 0; i < sizeof(wtypes) / sizeof(wtypes[0]) && n < len; i++) {
		int w = snprintf(out + n, len - n, "%s%s", i ? ", " : "", ggml_type_name(wtypes[i].type));
		if (w < 0)
			break;
		n += (size_t)w;
	}
}
