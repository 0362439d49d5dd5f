/* GGUF reader: maps a GGUF v2/v3 file read-only and validates all of it
 * (header, every metadata value, every tensor's offset and size) before any
 * accessor can be called.  It does not interpret the model: see model.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Metadata value types, numbered as in the GGUF specification. */
enum gguf_value_type {
	GGUF_VALUE_UINT8 = 0,
	GGUF_VALUE_INT8 = 1,
	GGUF_VALUE_UINT16 = 2,
	GGUF_VALUE_INT16 = 3,
	GGUF_VALUE_UINT32 = 4,
	GGUF_VALUE_INT32 = 5,
	GGUF_VALUE_FLOAT32 = 6,
	GGUF_VALUE_BOOL = 7,
	GGUF_VALUE_STRING = 8,
	GGUF_VALUE_ARRAY = 9,
	GGUF_VALUE_UINT64 = 10,
	GGUF_VALUE_INT64 = 11,
	GGUF_VALUE_FLOAT64 = 12,
};

/* Tensor element types, numbered as in ggml. */
enum ggml_type {
	GGML_TYPE_F32 = 0,
	GGML_TYPE_F16 = 1,
	GGML_TYPE_Q4_0 = 2,
	GGML_TYPE_Q4_1 = 3,
	GGML_TYPE_Q5_0 = 6,
	GGML_TYPE_Q5_1 = 7,
	GGML_TYPE_Q8_0 = 8,
	GGML_TYPE_Q8_1 = 9,
	GGML_TYPE_Q2_K = 10,
	GGML_TYPE_Q3_K = 11,
	GGML_TYPE_Q4_K = 12,
	GGML_TYPE_Q5_K = 13,
	GGML_TYPE_Q6_K = 14,
	GGML_TYPE_Q8_K = 15,
	GGML_TYPE_BF16 = 30,
	GGML_TYPE_MXFP4 = 39, /* 32 E2M1 values and an E8M0 scale (gpt-oss's experts) */
	GGML_TYPE_COUNT = 40,
};

#define GGUF_MAX_DIMS 4

/* One tensor as described by the file; data points into the mapping. */
struct gguf_tensor {
	const char *name;	 /* NUL-terminated copy owned by the gguf_file */
	enum ggml_type type;
	uint32_t n_dims;
	uint64_t dims[GGUF_MAX_DIMS]; /* dims[0] is the fastest-varying (row length) */
	uint64_t n_elements;
	uint64_t n_bytes;
	const void *data;
};

struct gguf_file;

/* Opens and validates `path`.  On error returns negative, *out stays NULL,
 * and err names the file and the problem. */
int gguf_open(const char *path, struct gguf_file **out, char *err, size_t err_len);
void gguf_close(struct gguf_file *f);

const char *gguf_path(const struct gguf_file *f);
uint32_t gguf_version(const struct gguf_file *f);

/* Metadata.  Each getter returns 0, -ENOENT when the key is absent, or
 * -EINVAL when the value has an incompatible type (integers of any width
 * convert to int64 when in range; float32/float64 convert to double). */
bool gguf_has_key(const struct gguf_file *f, const char *key);
int gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out);
int gguf_get_float(const struct gguf_file *f, const char *key, double *out);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
/* The string is not NUL-terminated in the file: use len. */
int gguf_get_string(const struct gguf_file *f, const char *key, const char **s, size_t *len);

/* Arrays: element type and count; then O(1) element access. */
int gguf_get_array_info(const struct gguf_file *f, const char *key, enum gguf_value_type *elem_type,
			uint64_t *count);
int gguf_get_array_string(const struct gguf_file *f, const char *key, uint64_t index, const char **s,
			  size_t *len);
/* Numeric arrays: element converted to double / int64. */
int gguf_get_array_float(const struct gguf_file *f, const char *key, uint64_t index, double *out);
int gguf_get_array_int(const struct gguf_file *f, const char *key, uint64_t index, int64_t *out);

/* Tensors. */
size_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, size_t index);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Element types. */
const char *ggml_type_name(enum ggml_type type);
/* Bytes of a row of n elements, or 0 when n is not a multiple of the block
 * size or the type is unknown. */
size_t ggml_row_bytes(enum ggml_type type, uint64_t n);

/* Elements per block of a type (1 for F32/F16/BF16), 0 when unknown. */
uint32_t ggml_block_size(enum ggml_type type);
const char *gguf_value_type_name(enum gguf_value_type type);

/* Layout facts, for tools and tests. */
size_t gguf_alignment(const struct gguf_file *f);
size_t gguf_data_offset(const struct gguf_file *f); /* start of the tensor data section */
size_t gguf_file_size(const struct gguf_file *f);
/* The whole read-only mapping (gguf_file_size bytes), e.g. for madvise or a
 * bulk upload; tensor data pointers lie inside it. */
const void *gguf_map(const struct gguf_file *f);

/* Numeric arrays as stored (little-endian, unaligned): NULL for string
 * arrays, non-arrays and absent keys.  Use gguf_get_array_info for the count. */
const void *gguf_get_array_data(const struct gguf_file *f, const char *key);

/* Every metadata pair in file order, e.g. to copy tokenizer.* keys.  The raw
 * value is the bytes after the value-type field exactly as in the file (for
 * an array: element type, count, elements). */
size_t gguf_n_kv(const struct gguf_file *f);
const char *gguf_kv_key(const struct gguf_file *f, size_t index);
int gguf_kv_raw(const struct gguf_file *f, size_t index, enum gguf_value_type *type,
		const void **data, size_t *len);
