/* GGUF v3 writer.  Metadata is serialized into a memory buffer as it is
 * added; tensor infos are kept in a table; gguf_writer_write_header emits
 * header + metadata + infos with 32-byte aligned data offsets, and tensor
 * bytes are then streamed through a buffered FILE with padding written after
 * each tensor.  It never reads GGUF (see gguf.c) and does no validation of
 * key names beyond what the reader would reject. */
#include "model/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/errbuf.h"

#define WRITER_DEFAULT_ALIGNMENT 32
#define WRITER_MAX_ALIGNMENT 4096

struct writer_tensor {
	char *name;
	enum ggml_type type;
	uint32_t n_dims;
	uint64_t dims[GGUF_MAX_DIMS];
	uint64_t n_bytes;
	uint64_t offset; /* relative to the data section */
};

struct gguf_writer {
	char *path;
	FILE *fp;
	char *kv_buf; /* serialized metadata (kv_len bytes) */
	size_t kv_len, kv_cap;
	uint64_t n_kv;
	struct writer_tensor *tensors; /* (n_tensors) */
	size_t n_tensors;
	size_t cur;           /* tensor being streamed */
	uint64_t cur_written; /* its bytes so far */
	int state;            /* 0 adding, 1 header written, 2 finished, -1 failed */
	uint32_t alignment;   /* of tensor data offsets */
};

int gguf_writer_new(const char *path, struct gguf_writer **out, char *err, size_t err_len)
{
	*out = NULL;
	struct gguf_writer *w = calloc(1, sizeof(*w));
	if (w == NULL || (w->path = strdup(path)) == NULL) {
		free(w);
		return err_set(err, err_len, -ENOMEM, "%s: out of memory", path);
	}
	w->fp = fopen(path, "wb");
	if (w->fp == NULL) {
		int rc =
		    err_set(err, err_len, -errno, "%s: cannot create: %s", path, strerror(errno));
		free(w->path);
		free(w);
		return rc;
	}
	setvbuf(w->fp, NULL, _IOFBF, 1 << 20);
	w->alignment = WRITER_DEFAULT_ALIGNMENT;
	*out = w;
	return 0;
}

void gguf_writer_free(struct gguf_writer *w)
{
	if (w == NULL)
		return;
	if (w->fp) {
		fclose(w->fp);
		if (w->state != 2)
			unlink(w->path);
	}
	for (size_t i = 0; i < w->n_tensors; i++)
		free(w->tensors[i].name);
	free(w->tensors);
	free(w->kv_buf);
	free(w->path);
	free(w);
}

static int put(struct gguf_writer *w, const void *data, size_t n)
{
	if (w->state != 0)
		return -EINVAL;
	if (w->kv_len + n > w->kv_cap) {
		size_t cap = w->kv_cap ? w->kv_cap : 4096;
		while (cap < w->kv_len + n)
			cap *= 2;
		char *grown = realloc(w->kv_buf, cap);
		if (grown == NULL)
			return -ENOMEM;
		w->kv_buf = grown;
		w->kv_cap = cap;
	}
	memcpy(w->kv_buf + w->kv_len, data, n);
	w->kv_len += n;
	return 0;
}

static int put_u32(struct gguf_writer *w, uint32_t v)
{
	return put(w, &v, 4);
}

static int put_str(struct gguf_writer *w, const char *s, size_t len)
{
	uint64_t n = len;
	int rc = put(w, &n, 8);
	return rc ? rc : put(w, s, len);
}

/* Key and value type; the caller appends the value. */
static int put_key(struct gguf_writer *w, const char *key, enum gguf_value_type type)
{
	int rc = put_str(w, key, strlen(key));
	if (rc == 0)
		rc = put_u32(w, (uint32_t)type);
	if (rc == 0)
		w->n_kv++;
	return rc;
}

int gguf_writer_add_raw(struct gguf_writer *w, const char *key, enum gguf_value_type type,
                        const void *data, size_t len)
{
	int rc = put_key(w, key, type);
	return rc ? rc : put(w, data, len);
}

int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
	return gguf_writer_add_raw(w, key, GGUF_VALUE_UINT32, &v, 4);
}

int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v)
{
	return gguf_writer_add_raw(w, key, GGUF_VALUE_INT32, &v, 4);
}

int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v)
{
	return gguf_writer_add_raw(w, key, GGUF_VALUE_FLOAT32, &v, 4);
}

int gguf_writer_add_bool(struct gguf_writer *w, const char *key, int v)
{
	uint8_t b = v ? 1 : 0;
	return gguf_writer_add_raw(w, key, GGUF_VALUE_BOOL, &b, 1);
}

int gguf_writer_add_string(struct gguf_writer *w, const char *key, const char *s)
{
	int rc = put_key(w, key, GGUF_VALUE_STRING);
	return rc ? rc : put_str(w, s, strlen(s));
}

static size_t scalar_bytes(enum gguf_value_type t)
{
	static const uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
	return (unsigned)t < sizeof(sizes) ? sizes[t] : 0;
}

int gguf_writer_add_array(struct gguf_writer *w, const char *key, enum gguf_value_type elem_type,
                          uint64_t count, const void *data)
{
	size_t es = scalar_bytes(elem_type);
	if (es == 0)
		return -EINVAL;
	int rc = put_key(w, key, GGUF_VALUE_ARRAY);
	if (rc == 0)
		rc = put_u32(w, (uint32_t)elem_type);
	if (rc == 0)
		rc = put(w, &count, 8);
	return rc ? rc : put(w, data, (size_t)count * es);
}

int gguf_writer_add_string_array(struct gguf_writer *w, const char *key, const char *const *s,
                                 uint64_t count)
{
	int rc = put_key(w, key, GGUF_VALUE_ARRAY);
	if (rc == 0)
		rc = put_u32(w, GGUF_VALUE_STRING);
	if (rc == 0)
		rc = put(w, &count, 8);
	for (uint64_t i = 0; rc == 0 && i < count; i++)
		rc = put_str(w, s[i], strlen(s[i]));
	return rc;
}

int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment)
{
	if (w->n_tensors > 0 || alignment == 0 || alignment > WRITER_MAX_ALIGNMENT ||
	    (alignment & (alignment - 1)) != 0)
		return -EINVAL;
	w->alignment = alignment;
	return gguf_writer_add_u32(w, "general.alignment", alignment);
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum ggml_type type,
                           uint32_t n_dims, const uint64_t *dims)
{
	if (w->state != 0 || n_dims == 0 || n_dims > GGUF_MAX_DIMS)
		return -EINVAL;
	uint64_t n = 1;
	for (uint32_t d = 0; d < n_dims; d++)
		n *= dims[d];
	size_t row = ggml_row_bytes(type, dims[0]);
	if (row == 0)
		return -EINVAL;
	struct writer_tensor *grown = realloc(w->tensors, (w->n_tensors + 1) * sizeof(*grown));
	if (grown == NULL)
		return -ENOMEM;
	w->tensors = grown;
	struct writer_tensor *t = &w->tensors[w->n_tensors];
	memset(t, 0, sizeof(*t));
	if ((t->name = strdup(name)) == NULL)
		return -ENOMEM;
	t->type = type;
	t->n_dims = n_dims;
	memcpy(t->dims, dims, n_dims * sizeof(uint64_t));
	t->n_bytes = (uint64_t)row * (n / dims[0]);
	uint64_t off = 0;
	if (w->n_tensors > 0) {
		const struct writer_tensor *p = &w->tensors[w->n_tensors - 1];
		off = p->offset + p->n_bytes;
		off = (off + w->alignment - 1) / w->alignment * w->alignment;
	}
	t->offset = off;
	w->n_tensors++;
	return 0;
}

static int write_bytes(struct gguf_writer *w, const void *p, size_t n, char *err, size_t err_len)
{
	if (n && fwrite(p, 1, n, w->fp) != n) {
		w->state = -1;
		return err_set(err, err_len, -EIO, "%s: write failed: %s", w->path,
		               strerror(errno));
	}
	return 0;
}

static int write_padding(struct gguf_writer *w, uint64_t pos, char *err, size_t err_len)
{
	static const uint8_t zeros[WRITER_MAX_ALIGNMENT];
	size_t pad = (size_t)((w->alignment - pos % w->alignment) % w->alignment);
	return write_bytes(w, zeros, pad, err, err_len);
}

int gguf_writer_write_header(struct gguf_writer *w, char *err, size_t err_len)
{
	if (w->state != 0)
		return err_set(err, err_len, -EINVAL, "%s: header already written", w->path);
	uint32_t version = 3;
	uint64_t n_tensors = w->n_tensors;
	int rc = write_bytes(w, "GGUF", 4, err, err_len);
	uint64_t pos = 24 + w->kv_len;
	if (rc == 0)
		rc = write_bytes(w, &version, 4, err, err_len);
	if (rc == 0)
		rc = write_bytes(w, &n_tensors, 8, err, err_len);
	if (rc == 0)
		rc = write_bytes(w, &w->n_kv, 8, err, err_len);
	if (rc == 0)
		rc = write_bytes(w, w->kv_buf, w->kv_len, err, err_len);
	for (size_t i = 0; rc == 0 && i < w->n_tensors; i++) {
		const struct writer_tensor *t = &w->tensors[i];
		uint64_t len = strlen(t->name);
		uint32_t type = (uint32_t)t->type;
		rc = write_bytes(w, &len, 8, err, err_len);
		rc = rc ? rc : write_bytes(w, t->name, len, err, err_len);
		rc = rc ? rc : write_bytes(w, &t->n_dims, 4, err, err_len);
		rc = rc ? rc : write_bytes(w, t->dims, 8 * t->n_dims, err, err_len);
		rc = rc ? rc : write_bytes(w, &type, 4, err, err_len);
		rc = rc ? rc : write_bytes(w, &t->offset, 8, err, err_len);
		pos += 8 + len + 4 + 8 * t->n_dims + 4 + 8;
	}
	if (rc == 0 && w->n_tensors > 0)
		rc = write_padding(w, pos, err, err_len);
	if (rc == 0)
		w->state = 1;
	return rc;
}

int gguf_writer_write_data(struct gguf_writer *w, const void *data, size_t n, char *err,
                           size_t err_len)
{
	if (w->state != 1 || w->cur >= w->n_tensors)
		return err_set(err, err_len, -EINVAL, "%s: no tensor is waiting for data", w->path);
	struct writer_tensor *t = &w->tensors[w->cur];
	if (n > t->n_bytes - w->cur_written)
		return err_set(err, err_len, -EINVAL,
		               "%s: tensor '%s': %zu bytes is more than the %llu left", w->path,
		               t->name, n, (unsigned long long)(t->n_bytes - w->cur_written));
	int rc = write_bytes(w, data, n, err, err_len);
	w->cur_written += n;
	if (rc == 0 && w->cur_written == t->n_bytes) {
		if (w->cur + 1 < w->n_tensors)
			rc = write_padding(w, t->offset + t->n_bytes, err, err_len);
		w->cur++;
		w->cur_written = 0;
	}
	return rc;
}

int gguf_writer_finish(struct gguf_writer *w, char *err, size_t err_len)
{
	if (w->state != 1 || w->cur != w->n_tensors)
		return err_set(err, err_len, -EINVAL, "%s: %zu of %zu tensors written", w->path,
		               w->cur, w->n_tensors);
	int rc = fclose(w->fp);
	w->fp = NULL;
	if (rc != 0) {
		unlink(w->path);
		return err_set(err, err_len, -EIO, "%s: close failed: %s", w->path,
		               strerror(errno));
	}
	w->state = 2;
	return 0;
}
