/* The weight types sinkd loads, and what it does with each: computes with
 * it as stored (and at which index of the kernel tables), or dequantizes it
 * at load; whether the integer-dot kernels (engine/qdot) read it.  The one
 * list that the loader, qdot and matmul consult. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "model/gguf.h"

/* The types kept as stored, dense from 0: the row index of matmul's kernel
 * table.  Their order is the table's in wtype.c (checked by its test). */
enum wtype_stored {
	WTYPE_F32,
	WTYPE_F16,
	WTYPE_BF16,
	WTYPE_Q8_0,
	WTYPE_Q4_0,
	WTYPE_Q4_K,
	WTYPE_Q5_K,
	WTYPE_Q6_K,
	WTYPE_MXFP4,
	WTYPE_N_STORED
};

/* True when the loader accepts tensors of this type. */
bool wtype_loadable(enum ggml_type type);
/* The enum wtype_stored index of a type computed with as stored; -1 for one
 * dequantized at load and for one not loaded at all. */
int wtype_stored_index(enum ggml_type type);
/* wtype_stored_index(type) >= 0. */
bool wtype_kept_as_stored(enum ggml_type type);
/* True when the integer-dot kernels (engine/qdot) read this type. */
bool wtype_integer_dot(enum ggml_type type);
/* The names of the loadable types, ", "-separated, for error messages;
 * truncated to len (always NUL-terminated). */
void wtype_names(char *out, size_t len);
