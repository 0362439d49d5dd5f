/* Hostile files: stories260K.gguf truncated at every 1 KiB boundary, and
 * with every header/metadata/tensor-info position overwritten by huge,
 * wrong and off-by-one values.  Each variant must either be rejected with a
 * message naming the file, or load into a model whose every pointer stays
 * inside the mapping or its own buffers.  It must never crash (CI runs this
 * under AddressSanitizer + UBSan).  One scratch copy is mutated in place and
 * restored after each trial, which is equivalent to writing many mutated
 * copies but costs one file. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "util/errbuf.h"
#include "testutil.h"

static uint8_t *orig; /* (orig_size) the pristine file */
static size_t orig_size;
static size_t meta_end;  /* start of the tensor data section */
static char scratch[64]; /* the mutated copy */

static void read_original(void)
{
	const char *path = tu_shared_path("models/stories260K.gguf");
	orig = (uint8_t *)tu_slurp(path, &orig_size);
	char err[SINKD_ERR_LEN];
	struct gguf_file *f;
	ck_assert_int_eq(gguf_open(path, &f, err, sizeof(err)), 0);
	meta_end = gguf_data_offset(f);
	gguf_close(f);
}

static int write_scratch(size_t len)
{
	snprintf(scratch, sizeof(scratch), "/tmp/sinkd-hostile-XXXXXX");
	int fd = mkstemp(scratch);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq((int)write(fd, orig, len), (int)len);
	return fd;
}

static int inside(const void *p, size_t n, const uint8_t *lo, size_t size)
{
	const uint8_t *b = p;
	return b >= lo && b <= lo + size && n <= (size_t)(lo + size - b);
}

/* A loaded model's pointers must all be in the mapping or in owned memory;
 * reading the first and last element of each owned buffer lets ASan check
 * those. */
static void check_matrix(const struct model *m, const struct weight_matrix *w, volatile float *sink)
{
	const uint8_t *map = gguf_map(m->file);
	size_t size = gguf_file_size(m->file), bytes = (size_t)w->rows * w->row_bytes;
	ck_assert_int_gt(w->rows, 0);
	ck_assert_int_gt(w->cols, 0);
	if (inside(w->data, bytes, map, size))
		return;
	int owned = 0;
	for (size_t i = 0; i < m->n_owned; i++)
		owned |= m->owned[i] == w->data;
	ck_assert_msg(owned, "matrix points neither into the file nor into owned memory");
	*sink += ((const float *)w->data)[0] + ((const float *)w->data)[bytes / 4 - 1];
}

static void check_vector(const struct model *m, const float *v, int n, volatile float *sink)
{
	ck_assert_ptr_nonnull(v);
	*sink += v[0] + v[n - 1];
	(void)m;
}

static void check_consistent(const struct model *m)
{
	const uint8_t *map = gguf_map(m->file);
	size_t size = gguf_file_size(m->file);
	for (size_t i = 0; i < gguf_n_tensors(m->file); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(m->file, i);
		ck_assert(inside(t->data, t->n_bytes, map, size));
	}
	volatile float sink = 0;
	const struct model_hparams *hp = &m->hp;
	ck_assert_int_gt(hp->n_vocab, 0);
	ck_assert_int_eq(hp->head_dim * hp->n_heads, hp->dim);
	check_matrix(m, &m->token_embd, &sink);
	check_matrix(m, &m->output, &sink);
	check_vector(m, m->output_norm, hp->dim, &sink);
	for (int l = 0; l < hp->n_layers; l++) {
		const struct model_layer *ly = &m->layers[l];
		const struct weight_matrix *mats[7] = {&ly->wq,     &ly->wk,   &ly->wv,    &ly->wo,
		                                       &ly->w_gate, &ly->w_up, &ly->w_down};
		for (int k = 0; k < 7; k++)
			check_matrix(m, mats[k], &sink);
		check_vector(m, ly->attn_norm, hp->dim, &sink);
		check_vector(m, ly->ffn_norm, hp->dim, &sink);
	}
}

/* Loads the scratch file; returns 1 if it loaded (and was consistent). */
static int try_load(void)
{
	char err[SINKD_ERR_LEN] = "";
	struct model *m = NULL;
	int rc = model_load(scratch, NULL, &m, err, sizeof(err));
	if (rc != 0) {
		ck_assert_ptr_null(m);
		ck_assert_msg(strstr(err, scratch) != NULL, "message without the file name: %s",
		              err);
		return 0;
	}
	check_consistent(m);
	model_free(m);
	return 1;
}

START_TEST(test_truncated)
{
	int fd = write_scratch(orig_size);
	ck_assert_int_eq(try_load(), 1);
	int n = 0;
	for (size_t len = (orig_size - 1) / 1024 * 1024;; len -= 1024) {
		ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
		ck_assert_msg(try_load() == 0, "a file truncated to %zu bytes loaded", len);
		n++;
		if (len == 0)
			break;
	}
	/* and just one byte short */
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	ck_assert_int_eq((int)pwrite(fd, orig, orig_size - 1, 0), (int)orig_size - 1);
	ck_assert_int_eq(try_load(), 0);
	close(fd);
	unlink(scratch);
	fprintf(stderr, "hostile: %d truncations rejected\n", n + 1);
}
END_TEST

/* ------------------------------------------------------------------------
 * Mutations.  The test walks the file format on its own (independently of
 * gguf.c) to find every structural field: counts, lengths, value and element
 * types, array counts, each string length, each tensor's n_dims, dims, type
 * and offset.  Each is set to hostile values; then a sweep over every
 * 8-byte-aligned u64 of the whole metadata region covers the rest. */

struct field {
	size_t off;
	size_t width; /* 4 or 8 */
};

static struct field *fields;
static size_t n_fields, cap_fields;

static void add_field(size_t off, size_t width)
{
	if (n_fields == cap_fields) {
		cap_fields = cap_fields ? 2 * cap_fields : 1024;
		fields = realloc(fields, cap_fields * sizeof(*fields));
	}
	fields[n_fields].off = off;
	fields[n_fields++].width = width;
}

static uint64_t rd(size_t *pos, size_t width, int record)
{
	uint64_t v = 0;
	memcpy(&v, orig + *pos, width);
	if (record)
		add_field(*pos, width);
	*pos += width;
	return v;
}

static void walk_value(size_t *pos, uint32_t type)
{
	static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
	if (type == 8) { /* string */
		*pos += rd(pos, 8, 1);
	} else if (type == 9) { /* array */
		uint32_t et = (uint32_t)rd(pos, 4, 1);
		uint64_t n = rd(pos, 8, 1);
		for (uint64_t i = 0; i < n; i++)
			if (et == 8)
				*pos += rd(pos, 8, 1);
			else
				*pos += sizes[et];
	} else {
		*pos += sizes[type];
	}
}

static void walk_fields(void)
{
	size_t pos = 4;
	n_fields = 0;
	rd(&pos, 4, 1); /* version */
	uint64_t n_tensors = rd(&pos, 8, 1), n_kv = rd(&pos, 8, 1);
	for (uint64_t i = 0; i < n_kv; i++) {
		pos += rd(&pos, 8, 1);
		walk_value(&pos, (uint32_t)rd(&pos, 4, 1));
	}
	for (uint64_t i = 0; i < n_tensors; i++) {
		pos += rd(&pos, 8, 1);
		uint32_t n_dims = (uint32_t)rd(&pos, 4, 1);
		for (uint32_t d = 0; d < n_dims; d++)
			rd(&pos, 8, 1);
		rd(&pos, 4, 1); /* type */
		rd(&pos, 8, 1); /* offset */
	}
	ck_assert_uint_le(pos, meta_end);
}

/* Sets the field to v, loads, restores; counts the outcome. */
static void trial(int fd, size_t off, size_t width, uint64_t v, int *loaded, int *rejected)
{
	if (memcmp(&v, orig + off, width) == 0)
		return;
	ck_assert_int_eq((int)pwrite(fd, &v, width, (off_t)off), (int)width);
	if (try_load())
		(*loaded)++;
	else
		(*rejected)++;
	ck_assert_int_eq((int)pwrite(fd, orig + off, width, (off_t)off), (int)width);
}

START_TEST(test_mutated_fields)
{
	int fd = write_scratch(orig_size);
	walk_fields();
	int loaded = 0, rejected = 0;
	for (size_t i = 0; i < n_fields; i++) {
		size_t off = fields[i].off, w = fields[i].width;
		uint64_t o = 0, max = w == 8 ? UINT64_MAX : UINT32_MAX;
		memcpy(&o, orig + off, w);
		const uint64_t vals[] = {
		    max,           0x7fffffff,    0,
		    (o + 1) & max, (o - 1) & max, w == 8 ? 1ull << 40 : 1ull << 20};
		for (size_t k = 0; k < sizeof(vals) / sizeof(vals[0]); k++)
			trial(fd, off, w, vals[k], &loaded, &rejected);
	}
	fprintf(stderr,
	        "hostile: %zu structural fields, %d variants rejected, %d loaded consistently\n",
	        n_fields, rejected, loaded);
	ck_assert_uint_gt(n_fields, 800);
	ck_assert_int_gt(rejected, 3000);
	free(fields);
	fields = NULL;
	cap_fields = 0;

	int swept_loaded = 0, swept_rejected = 0;
	static const uint64_t sweep[] = {UINT64_MAX, 0x7fffffff, 0};
	for (size_t off = 0; off + 8 <= meta_end; off += 8) {
		uint64_t o;
		memcpy(&o, orig + off, 8);
		for (int k = 0; k < 3; k++)
			trial(fd, off, 8, sweep[k], &swept_loaded, &swept_rejected);
		trial(fd, off, 8, o + 1, &swept_loaded, &swept_rejected);
	}
	close(fd);
	unlink(scratch);
	fprintf(stderr,
	        "hostile: aligned u64 sweep of %zu bytes: %d rejected, %d loaded consistently\n",
	        meta_end, swept_rejected, swept_loaded);
	/* both outcomes occur: string and score bytes are free, counts are not */
	ck_assert_int_gt(swept_rejected, 1000);
	ck_assert_int_gt(swept_loaded, 1000);
}
END_TEST

static void free_original(void)
{
	free(orig);
	orig = NULL;
}

int main(void)
{
	Suite *s = suite_create("hostile");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 600);
	tcase_add_checked_fixture(tc, read_original, free_original);
	tcase_add_test(tc, test_truncated);
	tcase_add_test(tc, test_mutated_fields);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
