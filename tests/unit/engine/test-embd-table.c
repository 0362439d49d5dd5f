/* The token-embedding table on the CPU backend: read as stored (one row
 * converted per token, never a widened copy), held once.  A tied output
 * head that multiplies by the table as stored reads the backend's copy, so
 * the table's file pages are given back (none mapped after a forward) and
 * the logits are those of the head reading its own copy of the bytes.
 * Synthetic Q8_0 models from sinkd-mkmodel (path in argv[1]). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

#include "config/config.h"
#include "engine/backend.h"
#include "util/errbuf.h"
#include "testutil.h"

static const char *mkmodel_path;

static struct model *make_model(char *path, size_t len, const char *type)
{
	char cmd[2048], err[SINKD_ERR_LEN];
	snprintf(path, len, "/tmp/sinkd-embd-table-%d.gguf", (int)getpid());
	snprintf(cmd, sizeof(cmd),
	         "'%s' --out '%s' --dim 256 --layers 2 --heads 4 --ffn 256 --vocab-size 4096 "
	         "--seed 5 --type %s --tied >/dev/null",
	         mkmodel_path, path, type);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	struct model *m = NULL;
	ck_assert_msg(model_load(path, NULL, &m, err, sizeof(err)) == 0, "%s", err);
	return m;
}

/* Whole pages inside [p, p + n) mapped in this process now
 * (/proc/self/pagemap's present bit; mincore would count the file's page
 * cache instead).  The pages at the ends hold neighbouring tensors too. */
static size_t resident_pages(const void *p, size_t n)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t first = ((uintptr_t)p + page - 1) / page, end = ((uintptr_t)p + n) / page;
	size_t count = 0;
	FILE *f = fopen("/proc/self/pagemap", "rb");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fseek(f, (long)(first * sizeof(uint64_t)), SEEK_SET), 0);
	for (uintptr_t i = first; i < end; i++) {
		uint64_t e = 0;
		ck_assert_int_eq(fread(&e, sizeof(e), 1, f), 1);
		count += (e >> 63) & 1;
	}
	fclose(f);
	return count;
}

/* Logits of a 3-token prompt on a fresh backend and session. */
static void logits_of(const struct model *m, struct backend *be, float *out)
{
	char err[SINKD_ERR_LEN];
	struct cache_geometry g = tu_model_geometry(&m->hp, 64);
	struct backend_session *s = NULL;
	ck_assert_msg(be->ops->session_new(be, &g, &s, err, sizeof(err)) == 0, "%s", err);
	struct backend_token t[3];
	for (int i = 0; i < 3; i++)
		t[i] = (struct backend_token){
		    .session = s, .token = 7 + 100 * i, .want_logits = i == 2};
	ck_assert_msg(be->ops->forward(be, t, 3, out, err, sizeof(err)) == 0, "%s", err);
	be->ops->session_free(be, s);
}

/* Q8_0: the head multiplies the table as stored; F16: it gets panels
 * where the CPU has them (packed from the copy), and the reference on its
 * own copy does not (another kernel: summation order). */
static const struct {
	const char *type;
	enum ggml_type stored;
	float tol;
} cases[] = {{"q8_0", GGML_TYPE_Q8_0, 0.0f}, {"f16", GGML_TYPE_F16, 1e-4f}};

START_TEST(test_tied_table_held_once)
{
	char path[128], err[SINKD_ERR_LEN];
	struct model *m = make_model(path, sizeof(path), cases[_i].type);
	ck_assert(m->hp.tied_output);
	ck_assert_int_eq(m->token_embd.type, cases[_i].stored); /* as stored, not widened */
	struct backend_options bo = {.n_threads = 1};
	struct backend *be = NULL;
	ck_assert_msg(backend_cpu_new(m, &bo, &be, err, sizeof(err)) == 0, "%s", err);
	float *tied = malloc((size_t)m->hp.n_vocab * sizeof(float));
	float *ref = malloc((size_t)m->hp.n_vocab * sizeof(float));
	logits_of(m, be, tied);
	size_t table = (size_t)m->token_embd.rows * m->token_embd.row_bytes;
	/* the lookups and the head read all of it: no page of the file's
	 * table came back */
	ck_assert_uint_eq(resident_pages(m->token_embd.data, table), 0);
	backend_free(be);
	/* the reference: the head on a private copy of the same bytes, a
	 * matrix of its own that the backend reads where it lies */
	void *copy = malloc(table);
	memcpy(copy, m->token_embd.data, table);
	m->output.data = copy;
	ck_assert_msg(backend_cpu_new(m, &bo, &be, err, sizeof(err)) == 0, "%s", err);
	logits_of(m, be, ref);
	for (int i = 0; i < m->hp.n_vocab; i++)
		ck_assert_msg(fabsf(tied[i] - ref[i]) <= cases[_i].tol * (1.0f + fabsf(ref[i])),
		              "%s logit %d: %g, head on its own copy %g", cases[_i].type, i,
		              (double)tied[i], (double)ref[i]);
	backend_free(be);
	model_free(m);
	unlink(path);
	free(copy);
	free(tied);
	free(ref);
}
END_TEST

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s SINKD_MKMODEL\n", argv[0]);
		return 2;
	}
	mkmodel_path = argv[1];
	Suite *s = suite_create("embd-table");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_tied_table_held_once, 0,
	                    (int)(sizeof(cases) / sizeof(cases[0])));
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
