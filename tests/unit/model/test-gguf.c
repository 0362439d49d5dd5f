/* The GGUF reader: the real stories260K and llama-spm vocabulary files,
 * a writer round trip, and hand-built files that are each wrong in one way
 * and must be rejected with a message naming the file and the problem. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/gguf_write.h"
#include "util/digest.h"
#include "util/errbuf.h"
#include "testutil.h"

START_TEST(test_stories_metadata)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f;
	ck_assert_int_eq(gguf_open(tu_shared_path("models/stories260K.gguf"), &f, err, sizeof(err)), 0);
	ck_assert_uint_eq(gguf_version(f), 3);
	ck_assert_uint_eq(gguf_n_kv(f), 19);
	int64_t v;
	ck_assert_int_eq(gguf_get_int(f, "llama.embedding_length", &v), 0);
	ck_assert_int_eq(v, 64);
	ck_assert_int_eq(gguf_get_int(f, "tokenizer.ggml.seperator_token_id", &v), 0);
	ck_assert_int_eq(v, 4294967295LL); /* a uint32, widened */
	double d;
	ck_assert_int_eq(gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &d), 0);
	ck_assert_double_eq_tol(d, 1e-5, 1e-12);
	const char *s;
	size_t len;
	ck_assert_int_eq(gguf_get_string(f, "general.architecture", &s, &len), 0);
	ck_assert_int_eq((int)len, 5);
	ck_assert_int_eq(memcmp(s, "llama", 5), 0);
	/* wrong type and missing key */
	ck_assert_int_eq(gguf_get_int(f, "general.architecture", &v), -EINVAL);
	ck_assert_int_eq(gguf_get_string(f, "llama.block_count", &s, &len), -EINVAL);
	ck_assert_int_eq(gguf_get_int(f, "no.such.key", &v), -ENOENT);
	ck_assert(!gguf_has_key(f, "no.such.key"));
	gguf_close(f);
}
END_TEST

START_TEST(test_stories_arrays_and_tensors)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f;
	ck_assert_int_eq(gguf_open(tu_shared_path("models/stories260K.gguf"), &f, err, sizeof(err)), 0);
	enum gguf_value_type et;
	uint64_t n;
	ck_assert_int_eq(gguf_get_array_info(f, "tokenizer.ggml.tokens", &et, &n), 0);
	ck_assert_int_eq(et, GGUF_VALUE_STRING);
	ck_assert_uint_eq(n, 512);
	const char *s;
	size_t len;
	ck_assert_int_eq(gguf_get_array_string(f, "tokenizer.ggml.tokens", 1, &s, &len), 0);
	ck_assert_int_eq((int)len, 3);
	ck_assert_int_eq(memcmp(s, "<s>", 3), 0);
	ck_assert_int_eq(gguf_get_array_string(f, "tokenizer.ggml.tokens", 3, &s, &len), 0);
	ck_assert_int_eq(memcmp(s, "<0x00>", 6), 0);
	ck_assert_int_eq(gguf_get_array_string(f, "tokenizer.ggml.tokens", 512, &s, &len), -ERANGE);
	int64_t tt;
	ck_assert_int_eq(gguf_get_array_int(f, "tokenizer.ggml.token_type", 0, &tt), 0);
	ck_assert_int_eq(tt, 2);
	ck_assert_int_eq(gguf_get_array_int(f, "tokenizer.ggml.token_type", 3, &tt), 0);
	ck_assert_int_eq(tt, 6);
	double score;
	ck_assert_int_eq(gguf_get_array_float(f, "tokenizer.ggml.scores", 511, &score), 0);
	ck_assert_int_eq(gguf_get_array_int(f, "tokenizer.ggml.scores", 0, &tt), -EINVAL);
	ck_assert_ptr_nonnull(gguf_get_array_data(f, "tokenizer.ggml.token_type"));
	ck_assert_ptr_null(gguf_get_array_data(f, "tokenizer.ggml.tokens"));

	ck_assert_uint_eq(gguf_n_tensors(f), 48);
	const struct gguf_tensor *t = gguf_find_tensor(f, "blk.0.ffn_down.weight");
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(t->type, GGML_TYPE_F32);
	ck_assert_uint_eq(t->n_dims, 2);
	ck_assert_uint_eq(t->dims[0], 172);
	ck_assert_uint_eq(t->dims[1], 64);
	ck_assert_uint_eq(t->n_elements, 172 * 64);
	ck_assert_uint_eq(t->n_bytes, 172 * 64 * 4);
	ck_assert_ptr_null(gguf_find_tensor(f, "blk.5.ffn_down.weight"));
	/* every tensor inside the file, aligned */
	const char *base = (const char *)gguf_tensor_at(f, 0)->data - gguf_data_offset(f);
	for (size_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *ti = gguf_tensor_at(f, i);
		size_t off = (size_t)((const char *)ti->data - base);
		ck_assert_uint_eq(off % 32, 0);
		ck_assert_uint_le(off + ti->n_bytes, gguf_file_size(f));
		ck_assert_ptr_eq(gguf_find_tensor(f, ti->name), ti);
	}
	ck_assert_ptr_null(gguf_tensor_at(f, 48));
	gguf_close(f);
}
END_TEST

START_TEST(test_vocab_file_string_index)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f;
	ck_assert_int_eq(gguf_open(tu_shared_path("vocab/ggml-vocab-llama-spm.gguf"), &f, err, sizeof(err)),
	                 0);
	ck_assert_uint_eq(gguf_n_tensors(f), 0);
	uint64_t n;
	ck_assert_int_eq(gguf_get_array_info(f, "tokenizer.ggml.tokens", NULL, &n), 0);
	ck_assert_uint_eq(n, 32000);
	/* every element is reachable and the lengths add up to the array's bytes */
	size_t total = 0;
	for (uint64_t i = 0; i < n; i++) {
		const char *s;
		size_t len;
		ck_assert_int_eq(gguf_get_array_string(f, "tokenizer.ggml.tokens", i, &s, &len), 0);
		total += 8 + len;
	}
	ck_assert_uint_gt(total, 32000 * 9);
	bool b;
	ck_assert_int_eq(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b), 0);
	ck_assert(b);
	gguf_close(f);
}
END_TEST

START_TEST(test_sha256)
{
	char hex[65], err[SINKD_ERR_LEN];
	ck_assert_int_eq(digest_file_sha256_hex(tu_shared_path("models/stories260K.gguf"), hex, err, sizeof(err)),
	                 0);
	FILE *fp = fopen(tu_shared_path("models/SHA256SUMS"), "r");
	ck_assert_ptr_nonnull(fp);
	char want[65] = "";
	ck_assert_int_eq(fscanf(fp, "%64s", want), 1);
	fclose(fp);
	ck_assert_str_eq(hex, want);
	ck_assert_int_eq(digest_file_sha256_hex("/nonexistent/x.gguf", hex, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.gguf"));
}
END_TEST

START_TEST(test_writer_round_trip)
{
	char path[64];
	tu_temp_file(path, sizeof(path), "sinkd-test-gguf", NULL, 0);
	char err[SINKD_ERR_LEN];
	struct gguf_writer *w;
	ck_assert_int_eq(gguf_writer_new(path, &w, err, sizeof(err)), 0);
	const char *strs[] = {"a", "", "héllo"};
	int16_t nums[] = {-3, 7};
	ck_assert_int_eq(gguf_writer_add_string(w, "s", "text"), 0);
	ck_assert_int_eq(gguf_writer_add_i32(w, "i", -42), 0);
	ck_assert_int_eq(gguf_writer_add_f32(w, "f", 0.5f), 0);
	ck_assert_int_eq(gguf_writer_add_bool(w, "b", 1), 0);
	ck_assert_int_eq(gguf_writer_add_string_array(w, "sa", strs, 3), 0);
	ck_assert_int_eq(gguf_writer_add_array(w, "na", GGUF_VALUE_INT16, 2, nums), 0);
	uint64_t d1[1] = {3}, d2[2] = {32, 2};
	ck_assert_int_eq(gguf_writer_add_tensor(w, "v", GGML_TYPE_F32, 1, d1), 0);
	ck_assert_int_eq(gguf_writer_add_tensor(w, "q", GGML_TYPE_Q8_0, 2, d2), 0);
	ck_assert_int_eq(gguf_writer_write_header(w, err, sizeof(err)), 0);
	float v[3] = {1, 2, 3};
	uint8_t q[68];
	memset(q, 0x11, sizeof(q));
	ck_assert_int_eq(gguf_writer_write_data(w, v, sizeof(v), err, sizeof(err)), 0);
	ck_assert_int_ne(gguf_writer_finish(w, err, sizeof(err)), 0); /* q still missing */
	ck_assert_int_eq(gguf_writer_write_data(w, q, 34, err, sizeof(err)), 0);
	ck_assert_int_eq(gguf_writer_write_data(w, q + 34, 34, err, sizeof(err)), 0);
	ck_assert_int_eq(gguf_writer_finish(w, err, sizeof(err)), 0);
	gguf_writer_free(w);

	struct gguf_file *f;
	ck_assert_int_eq(gguf_open(path, &f, err, sizeof(err)), 0);
	int64_t i;
	double d;
	const char *s;
	size_t len;
	ck_assert_int_eq(gguf_get_int(f, "i", &i), 0);
	ck_assert_int_eq(i, -42);
	ck_assert_int_eq(gguf_get_float(f, "f", &d), 0);
	ck_assert_double_eq(d, 0.5);
	ck_assert_int_eq(gguf_get_array_string(f, "sa", 2, &s, &len), 0);
	ck_assert_int_eq((int)len, 6);
	ck_assert_int_eq(gguf_get_array_string(f, "sa", 1, &s, &len), 0);
	ck_assert_int_eq((int)len, 0);
	ck_assert_int_eq(gguf_get_array_int(f, "na", 0, &i), 0);
	ck_assert_int_eq(i, -3);
	const struct gguf_tensor *t = gguf_find_tensor(f, "v");
	ck_assert_int_eq(memcmp(t->data, v, sizeof(v)), 0);
	t = gguf_find_tensor(f, "q");
	ck_assert_uint_eq(t->n_bytes, 68);
	ck_assert_int_eq(memcmp(t->data, q, 68), 0);
	gguf_close(f);
	unlink(path);
}
END_TEST

/* Every scalar width converts to int64/double as documented. */
START_TEST(test_scalar_conversions)
{
	char path[64];
	tu_temp_file(path, sizeof(path), "sinkd-test-gguf", NULL, 0);
	char err[SINKD_ERR_LEN];
	struct gguf_writer *w;
	ck_assert_int_eq(gguf_writer_new(path, &w, err, sizeof(err)), 0);
	uint8_t u8 = 200;
	int8_t i8 = -100;
	uint16_t u16 = 60000;
	int16_t i16 = -30000;
	uint64_t u64 = 1ull << 40, u64big = UINT64_MAX;
	int64_t i64 = -(1ll << 50);
	double f64 = 0.1;
	ck_assert_int_eq(gguf_writer_add_raw(w, "u8", GGUF_VALUE_UINT8, &u8, 1), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "i8", GGUF_VALUE_INT8, &i8, 1), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "u16", GGUF_VALUE_UINT16, &u16, 2), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "i16", GGUF_VALUE_INT16, &i16, 2), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "u64", GGUF_VALUE_UINT64, &u64, 8), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "u64big", GGUF_VALUE_UINT64, &u64big, 8), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "i64", GGUF_VALUE_INT64, &i64, 8), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "f64", GGUF_VALUE_FLOAT64, &f64, 8), 0);
	ck_assert_int_eq(gguf_writer_add_bool(w, "b", 0), 0);
	ck_assert_int_eq(gguf_writer_add_array(w, "bools", GGUF_VALUE_BOOL, 1, &u8) != 0, 0);
	ck_assert_int_eq(gguf_writer_write_header(w, err, sizeof(err)), 0);
	ck_assert_int_eq(gguf_writer_finish(w, err, sizeof(err)), 0);
	gguf_writer_free(w);

	struct gguf_file *f;
	/* the bool array holds 200: rejected */
	ck_assert_int_lt(gguf_open(path, &f, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "key 'bools': bool value 200"));

	ck_assert_int_eq(gguf_writer_new(path, &w, err, sizeof(err)), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "u8", GGUF_VALUE_UINT8, &u8, 1), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "i8", GGUF_VALUE_INT8, &i8, 1), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "u16", GGUF_VALUE_UINT16, &u16, 2), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "i16", GGUF_VALUE_INT16, &i16, 2), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "u64", GGUF_VALUE_UINT64, &u64, 8), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "u64big", GGUF_VALUE_UINT64, &u64big, 8), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "i64", GGUF_VALUE_INT64, &i64, 8), 0);
	ck_assert_int_eq(gguf_writer_add_raw(w, "f64", GGUF_VALUE_FLOAT64, &f64, 8), 0);
	ck_assert_int_eq(gguf_writer_add_bool(w, "b", 0), 0);
	ck_assert_int_eq(gguf_writer_write_header(w, err, sizeof(err)), 0);
	ck_assert_int_eq(gguf_writer_finish(w, err, sizeof(err)), 0);
	gguf_writer_free(w);
	ck_assert_int_eq(gguf_open(path, &f, err, sizeof(err)), 0);
	int64_t v;
	double d;
	bool b = true;
	ck_assert_int_eq(gguf_get_int(f, "u8", &v), 0);
	ck_assert_int_eq(v, 200);
	ck_assert_int_eq(gguf_get_int(f, "i8", &v), 0);
	ck_assert_int_eq(v, -100);
	ck_assert_int_eq(gguf_get_int(f, "u16", &v), 0);
	ck_assert_int_eq(v, 60000);
	ck_assert_int_eq(gguf_get_int(f, "i16", &v), 0);
	ck_assert_int_eq(v, -30000);
	ck_assert_int_eq(gguf_get_int(f, "u64", &v), 0);
	ck_assert_int_eq(v, 1ll << 40);
	ck_assert_int_eq(gguf_get_int(f, "u64big", &v), -EINVAL); /* out of int64 range */
	ck_assert_int_eq(gguf_get_int(f, "i64", &v), 0);
	ck_assert_int_eq(v, -(1ll << 50));
	ck_assert_int_eq(gguf_get_float(f, "f64", &d), 0);
	ck_assert_double_eq(d, 0.1);
	ck_assert_int_eq(gguf_get_float(f, "i16", &d), 0); /* integers read as floats too */
	ck_assert_double_eq(d, -30000.0);
	ck_assert_int_eq(gguf_get_int(f, "f64", &v), -EINVAL);
	ck_assert_int_eq(gguf_get_int(f, "b", &v), -EINVAL);
	ck_assert_int_eq(gguf_get_bool(f, "b", &b), 0);
	ck_assert(!b);
	ck_assert_int_eq(gguf_get_bool(f, "u8", &b), -EINVAL);
	ck_assert_int_eq(gguf_get_array_info(f, "u8", NULL, NULL), -EINVAL);
	ck_assert_int_eq(gguf_get_array_int(f, "u8", 0, &v), -EINVAL);
	ck_assert_int_eq(gguf_get_array_string(f, "nope", 0, NULL, NULL), -ENOENT);
	ck_assert_str_eq(gguf_path(f), path);
	ck_assert_uint_eq(gguf_alignment(f), 32);
	gguf_close(f);
	unlink(path);
}
END_TEST

START_TEST(test_unreadable_paths)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f;
	ck_assert_int_eq(gguf_open("/nonexistent/m.gguf", &f, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/m.gguf: cannot open"));
	ck_assert_int_eq(gguf_open("/tmp", &f, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "/tmp: not a regular file"));
}
END_TEST

/* ------------------------------------------------------------------------
 * Hand-built files. */

struct raw {
	uint8_t buf[4096];
	size_t len;
};

static void raw_put(struct raw *r, const void *p, size_t n)
{
	ck_assert_uint_le(r->len + n, sizeof(r->buf));
	memcpy(r->buf + r->len, p, n);
	r->len += n;
}

static void raw_u32(struct raw *r, uint32_t v)
{
	raw_put(r, &v, 4);
}

static void raw_u64(struct raw *r, uint64_t v)
{
	raw_put(r, &v, 8);
}

static void raw_str(struct raw *r, const char *s)
{
	raw_u64(r, strlen(s));
	raw_put(r, s, strlen(s));
}

static void raw_header(struct raw *r, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	r->len = 0;
	raw_put(r, "GGUF", 4);
	raw_u32(r, version);
	raw_u64(r, n_tensors);
	raw_u64(r, n_kv);
}

/* One tensor info: name, dims, type, relative offset. */
static void raw_tensor(struct raw *r, const char *name, uint32_t n_dims, const uint64_t *dims,
                       uint32_t type, uint64_t off)
{
	raw_str(r, name);
	raw_u32(r, n_dims);
	for (uint32_t i = 0; i < n_dims; i++)
		raw_u64(r, dims[i]);
	raw_u32(r, type);
	raw_u64(r, off);
}

/* Pads to 32 and appends `data_bytes` zero bytes of tensor data. */
static void raw_data(struct raw *r, size_t data_bytes)
{
	static const uint8_t zeros[4096];
	raw_put(r, zeros, (32 - r->len % 32) % 32);
	raw_put(r, zeros, data_bytes);
}

/* Writes r to a temp file, opens it, expects failure whose message has
 * the path and `needle`. */
static void expect_reject(const struct raw *r, const char *needle)
{
	char path[64];
	tu_temp_file(path, sizeof(path), "sinkd-test-gguf", r->buf, r->len);
	char err[SINKD_ERR_LEN] = "";
	struct gguf_file *f = (struct gguf_file *)1;
	int rc = gguf_open(path, &f, err, sizeof(err));
	unlink(path);
	ck_assert_msg(rc < 0, "accepted a file that should fail with '%s'", needle);
	ck_assert_ptr_null(f);
	ck_assert_msg(strstr(err, path) != NULL, "message lacks the path: %s", err);
	ck_assert_msg(strstr(err, needle) != NULL, "expected '%s' in: %s", needle, err);
}

static void expect_accept(const struct raw *r)
{
	char path[64];
	tu_temp_file(path, sizeof(path), "sinkd-test-gguf", r->buf, r->len);
	char err[SINKD_ERR_LEN] = "";
	struct gguf_file *f;
	int rc = gguf_open(path, &f, err, sizeof(err));
	unlink(path);
	ck_assert_msg(rc == 0, "rejected: %s", err);
	gguf_close(f);
}

START_TEST(test_reject_header)
{
	struct raw r;
	raw_header(&r, 1, 0, 0);
	expect_reject(&r, "version 1 is not supported");
	raw_header(&r, 4, 0, 0);
	expect_reject(&r, "unsupported GGUF version 4");
	raw_header(&r, 0x03000000u, 0, 0);
	expect_reject(&r, "big-endian");
	raw_header(&r, 3, 0, 0);
	memcpy(r.buf, "GGML", 4);
	expect_reject(&r, "not a GGUF file");
	raw_header(&r, 3, 0, 0);
	r.len = 20;
	expect_reject(&r, "too small");
	raw_header(&r, 2, 0, 0);
	expect_accept(&r); /* v2, empty */
	raw_header(&r, 3, 0, UINT64_MAX);
	expect_reject(&r, "metadata count");
	raw_header(&r, 3, UINT64_MAX / 2, 0);
	expect_reject(&r, "tensor count");
}
END_TEST

START_TEST(test_reject_metadata)
{
	struct raw r;
	raw_header(&r, 3, 0, 1);
	raw_u64(&r, 1u << 30); /* key length past the end */
	raw_put(&r, "abcdefghijklmn", 14);
	expect_reject(&r, "extends past end of file");

	raw_header(&r, 3, 0, 2);
	raw_str(&r, "k");
	raw_u32(&r, GGUF_VALUE_UINT32);
	raw_u32(&r, 5);
	raw_str(&r, "k");
	raw_u32(&r, GGUF_VALUE_UINT32);
	raw_u32(&r, 6);
	expect_reject(&r, "duplicate metadata key 'k'");

	raw_header(&r, 3, 0, 1);
	raw_str(&r, "k");
	raw_u32(&r, 13);
	raw_u32(&r, 0);
	expect_reject(&r, "unknown value type 13");

	raw_header(&r, 3, 0, 1);
	raw_str(&r, "nested");
	raw_u32(&r, GGUF_VALUE_ARRAY);
	raw_u32(&r, GGUF_VALUE_ARRAY);
	raw_u64(&r, 1);
	raw_u32(&r, GGUF_VALUE_UINT8);
	raw_u64(&r, 0);
	expect_reject(&r, "nested arrays");

	raw_header(&r, 3, 0, 1);
	raw_str(&r, "big");
	raw_u32(&r, GGUF_VALUE_ARRAY);
	raw_u32(&r, GGUF_VALUE_UINT64);
	raw_u64(&r, 1ull << 61); /* count * 8 overflows 64 bits */
	raw_u64(&r, 0);
	expect_reject(&r, "key 'big': array of");

	raw_header(&r, 3, 0, 1);
	raw_str(&r, "strs");
	raw_u32(&r, GGUF_VALUE_ARRAY);
	raw_u32(&r, GGUF_VALUE_STRING);
	raw_u64(&r, 2);
	raw_str(&r, "ok");
	raw_u64(&r, 1000); /* second string runs off the end */
	raw_put(&r, "xx", 2);
	expect_reject(&r, "key 'strs': element 1");

	raw_header(&r, 3, 0, 1);
	raw_str(&r, "b");
	raw_u32(&r, GGUF_VALUE_BOOL);
	raw_put(&r, "\x02", 1);
	expect_reject(&r, "neither 0 nor 1");

	raw_header(&r, 3, 0, 1);
	raw_u64(&r, 3);
	raw_put(&r, "a\0b", 3);
	raw_u32(&r, GGUF_VALUE_UINT8);
	raw_put(&r, "\x01", 1);
	expect_reject(&r, "NUL byte");

	raw_header(&r, 3, 0, 1);
	raw_str(&r, "general.alignment");
	raw_u32(&r, GGUF_VALUE_UINT32);
	raw_u32(&r, 48);
	expect_reject(&r, "general.alignment 48 is not a power of two");

	raw_header(&r, 3, 0, 1);
	raw_str(&r, "general.alignment");
	raw_u32(&r, GGUF_VALUE_STRING);
	raw_str(&r, "32");
	expect_reject(&r, "general.alignment is not an integer");

	raw_header(&r, 3, 0, 1);
	raw_str(&r, "k");
	raw_u32(&r, GGUF_VALUE_UINT64);
	raw_u32(&r, 7); /* half of the value */
	expect_reject(&r, "key 'k': value extends past end of file");
}
END_TEST

START_TEST(test_reject_tensors)
{
	struct raw r;
	uint64_t d2[2] = {32, 2}, d5[5] = {1, 1, 1, 1, 1};
	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 2, d2, GGML_TYPE_F32, 0);
	raw_data(&r, 256);
	expect_accept(&r);

	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 2, d2, GGML_TYPE_F32, 0);
	raw_data(&r, 255);
	expect_reject(&r, "tensor 't': data [");

	raw_header(&r, 3, 2, 0);
	raw_tensor(&r, "t", 2, d2, GGML_TYPE_F32, 0);
	raw_tensor(&r, "t", 2, d2, GGML_TYPE_F32, 256);
	raw_data(&r, 512);
	expect_reject(&r, "duplicate tensor name 't'");

	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 5, d5, GGML_TYPE_F32, 0);
	raw_data(&r, 32);
	expect_reject(&r, "5 dimensions");

	uint64_t dz[2] = {32, 0};
	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 2, dz, GGML_TYPE_F32, 0);
	raw_data(&r, 32);
	expect_reject(&r, "dimension 1 is 0");

	uint64_t dover[3] = {1ull << 32, 1ull << 32, 4};
	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 3, dover, GGML_TYPE_F32, 0);
	raw_data(&r, 32);
	expect_reject(&r, "overflows");

	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 2, d2, 4 /* removed Q4_2 */, 0);
	raw_data(&r, 256);
	expect_reject(&r, "unknown type 4");

	uint64_t d33[2] = {33, 2};
	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 2, d33, GGML_TYPE_Q8_0, 0);
	raw_data(&r, 256);
	expect_reject(&r, "not a whole number of Q8_0 blocks");

	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 2, d2, GGML_TYPE_F32, 16);
	raw_data(&r, 512);
	expect_reject(&r, "offset 16 is not a multiple of the alignment 32");

	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 2, d2, GGML_TYPE_F32, UINT64_MAX - 31);
	raw_data(&r, 256);
	expect_reject(&r, "extends past end of file");

	raw_header(&r, 3, 1, 0);
	raw_tensor(&r, "t", 2, d2, GGML_TYPE_F32, 0);
	expect_reject(&r, "extends past end of file"); /* no data section at all */
}
END_TEST

START_TEST(test_type_table)
{
	ck_assert_str_eq(ggml_type_name(GGML_TYPE_Q4_K), "Q4_K");
	ck_assert_str_eq(ggml_type_name((enum ggml_type)17), "IQ2_XS");
	ck_assert_str_eq(ggml_type_name((enum ggml_type)5), "unknown");
	ck_assert_str_eq(ggml_type_name((enum ggml_type)1000), "unknown");
	ck_assert_uint_eq(ggml_row_bytes(GGML_TYPE_Q4_K, 512), 288);
	ck_assert_uint_eq(ggml_row_bytes(GGML_TYPE_Q6_K, 256), 210);
	ck_assert_uint_eq(ggml_row_bytes(GGML_TYPE_Q8_0, 64), 68);
	ck_assert_uint_eq(ggml_row_bytes(GGML_TYPE_BF16, 3), 6);
	ck_assert_uint_eq(ggml_row_bytes(GGML_TYPE_Q4_0, 33), 0);
	ck_assert_uint_eq(ggml_row_bytes((enum ggml_type)5, 32), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gguf");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_stories_metadata);
	tcase_add_test(tc, test_stories_arrays_and_tensors);
	tcase_add_test(tc, test_vocab_file_string_index);
	tcase_add_test(tc, test_sha256);
	tcase_add_test(tc, test_writer_round_trip);
	tcase_add_test(tc, test_scalar_conversions);
	tcase_add_test(tc, test_unreadable_paths);
	tcase_add_test(tc, test_reject_header);
	tcase_add_test(tc, test_reject_metadata);
	tcase_add_test(tc, test_reject_tensors);
	tcase_add_test(tc, test_type_table);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
