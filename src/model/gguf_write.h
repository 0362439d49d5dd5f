/* GGUF v3 writer: metadata and tensor descriptions are collected in memory,
 * then the header is written once and tensor data is streamed after it in
 * the order the tensors were added, so files larger than memory can be
 * written (used by sinkd-mkmodel and by tests that build GGUF files). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

struct gguf_writer;

/* Creates (truncates) path. */
int gguf_writer_new(const char *path, struct gguf_writer **out, char *err, size_t err_len);
/* Closes and frees; removes the file when it was not finished. */
void gguf_writer_free(struct gguf_writer *w);

/* Metadata (before gguf_writer_write_header).  Each returns 0 or negative. */
int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_add_bool(struct gguf_writer *w, const char *key, int v);
int gguf_writer_add_string(struct gguf_writer *w, const char *key, const char *s);
/* Numeric array: count elements of elem_type, packed little-endian. */
int gguf_writer_add_array(struct gguf_writer *w, const char *key, enum gguf_value_type elem_type,
                          uint64_t count, const void *data);
int gguf_writer_add_string_array(struct gguf_writer *w, const char *key, const char *const *s,
                                 uint64_t count);
/* A value in its serialized form (as gguf_kv_raw returns it). */
int gguf_writer_add_raw(struct gguf_writer *w, const char *key, enum gguf_value_type type,
                        const void *data, size_t len);

/* Sets general.alignment (a power of two up to 4096; 32 when not called);
 * call before adding tensors. */
int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment);

/* Tensors, in data order; dims[0] is the row length. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type,
                           uint32_t n_dims, const uint64_t *dims);

/* Writes header, metadata and tensor infos; then stream each tensor's bytes
 * with gguf_writer_write_data (one tensor may take many calls, a call never
 * spans two tensors). */
int gguf_writer_write_header(struct gguf_writer *w, char *err, size_t err_len);
int gguf_writer_write_data(struct gguf_writer *w, const void *data, size_t n, char *err,
                           size_t err_len);
/* Checks every tensor got all its bytes and closes the file. */
int gguf_writer_finish(struct gguf_writer *w, char *err, size_t err_len);
