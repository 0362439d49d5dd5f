/* The token-embedding table on the CPU backend: read as stored (one row
 * converted per token, never a widened copy), held once.  A tied output
 * head that multiplies by the table as stored reads the backend's copy, so
 * the table's file pages are given back (none mapped after a forward) and
 * the logits are those of the head reading its own copy of the bytes.  A
 * tied head with a packed layout (engine/qpack.h) is packed and serves the
 * lookups from its packed copy: the backend's block is the packed copies
 * alone (no copy of the table; its debug line names the bytes), the
 * process's anonymous memory grows by about that, and the logits are the
 * stored layout's within float summation order.  Synthetic models from
 * sinkd-mkmodel (path in argv[1]). */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

#include "config/config.h"
#include "engine/backend.h"
#include "engine/panels.h"
#include "engine/qpack.h"
#include "model/gguf.h"
#include "util/log.h"
#include "util/errbuf.h"
#include "testutil.h"

static const char *mkmodel_path;

static struct model *make_model(char *path, size_t len, const char *type, int vocab)
{
	char cmd[2048], err[SINKD_ERR_LEN];
	snprintf(path, len, "/tmp/sinkd-embd-table-%d.gguf", (int)getpid());
	snprintf(cmd, sizeof(cmd),
	         "'%s' --out '%s' --dim 256 --layers 2 --heads 4 --ffn 256 --vocab-size %d "
	         "--seed 5 --type %s --tied >/dev/null",
	         mkmodel_path, path, vocab, type);
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

/* Whether the backend packs a tied head of type t on this CPU (a packed
 * layout with a vector kernel), so that the lookups read its packed copy. */
static bool packs_here(enum ggml_type t)
{
	return qpack_supported(t) && qpack_variant_best(t) != QDOT_VARIANT_SCALAR;
}

/* Q8_0: the head multiplies the table as stored, bit for bit the
 * reference, unless this CPU packs Q8_0 (then the packed kernel against the
 * stored one: summation order, F16's tolerance); F16: it gets panels
 * where the CPU has them (packed from the copy), and the reference on its
 * own copy does not (another kernel: summation order). */
static const struct {
	const char *type;
	enum ggml_type stored;
	float tol;
} cases[] = {{"q8_0", GGML_TYPE_Q8_0, 0.0f}, {"f16", GGML_TYPE_F16, 1e-4f}};

/* Bytes the backend re-lays of the layer matrices (panels or packed
 * copies, each 64-byte aligned in the block): what its block holds besides
 * the table's copy when a tied head reads that copy. */
static size_t layer_relaid_bytes(const struct model *m)
{
	size_t total = 0;
	for (int l = 0; l < m->hp.n_layers; l++) {
		const struct model_layer *L = &m->layers[l];
		const struct weight_matrix *ws[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
		                                    &L->w_gate, &L->w_up, &L->w_down};
		for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++) {
			size_t b = panels_supported(ws[i]->type) ? panels_bytes(ws[i])
			           : packs_here(ws[i]->type)     ? qpack_bytes(ws[i])
			                                         : 0;
			total += (b + 63) & ~(size_t)63;
		}
	}
	return total;
}

/* The bytes of the backend's huge-page block, from its debug line
 * (log_alloc, JSON) in the log's text. */
static size_t block_bytes_logged(const char *text);

START_TEST(test_tied_table_held_once)
{
	char path[128], err[SINKD_ERR_LEN], *log_text = NULL;
	size_t log_len = 0;
	struct model *m = make_model(path, sizeof(path), cases[_i].type, 4096);
	ck_assert(m->hp.tied_output);
	ck_assert_int_eq(m->token_embd.type, cases[_i].stored); /* as stored, not widened */
	FILE *stream = open_memstream(&log_text, &log_len);
	struct sinkd_log *log = log_new(stream, LOG_DEBUG, LOG_FORMAT_JSON);
	struct backend_options bo = {.n_threads = 1, .log = log};
	struct backend *be = NULL;
	ck_assert_msg(backend_cpu_new(m, &bo, &be, err, sizeof(err)) == 0, "%s", err);
	float *tied = malloc((size_t)m->hp.n_vocab * sizeof(float));
	float *ref = malloc((size_t)m->hp.n_vocab * sizeof(float));
	logits_of(m, be, tied);
	float tol = packs_here(cases[_i].stored) ? 1e-4f : cases[_i].tol;
	size_t table = (size_t)m->token_embd.rows * m->token_embd.row_bytes;
	/* the lookups and the head read all of it: no page of the file's
	 * table came back */
	ck_assert_uint_eq(resident_pages(m->token_embd.data, table), 0);
	/* where the head reads the table's copy, the block is that copy and
	 * the layers' re-laid matrices: nothing reserved for the head */
	fflush(stream);
	if (!packs_here(cases[_i].stored))
		ck_assert_uint_eq(block_bytes_logged(log_text),
		                  ((table + 63) & ~(size_t)63) + layer_relaid_bytes(m));
	backend_free(be);
	log_free(log);
	fclose(stream);
	free(log_text);
	bo.log = NULL;
	/* the reference: the head on a private copy of the same bytes, a
	 * matrix of its own that the backend reads where it lies */
	void *copy = malloc(table);
	memcpy(copy, m->token_embd.data, table);
	m->output.data = copy;
	ck_assert_msg(backend_cpu_new(m, &bo, &be, err, sizeof(err)) == 0, "%s", err);
	logits_of(m, be, ref);
	for (int i = 0; i < m->hp.n_vocab; i++)
		ck_assert_msg(fabsf(tied[i] - ref[i]) <= tol * (1.0f + fabsf(ref[i])),
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

/* Kilobytes of anonymous memory resident in this process now. */
static long rss_anon_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %ld kB", &kb) == 1)
			break;
	fclose(f);
	ck_assert_int_ge(kb, 0);
	return kb;
}

/* Bytes of the packed copies the backend makes: the head and every layer
 * matrix of a packed type, each 64-byte aligned in the block. */
static size_t packed_bytes(const struct model *m)
{
	size_t total = (qpack_bytes(&m->output) + 63) & ~(size_t)63;
	for (int l = 0; l < m->hp.n_layers; l++) {
		const struct model_layer *L = &m->layers[l];
		const struct weight_matrix *ws[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
		                                    &L->w_gate, &L->w_up, &L->w_down};
		for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
			total += (qpack_bytes(ws[i]) + 63) & ~(size_t)63;
	}
	return total;
}

/* Tied heads of the packed types this CPU runs a vector kernel for (the
 * backend packs no others); main adds only these. */
static const struct {
	const char *type;
	enum ggml_type stored;
} packed_cases[] = {{"q4_k", GGML_TYPE_Q4_K},
                    {"q6_k", GGML_TYPE_Q6_K},
                    {"q8_0", GGML_TYPE_Q8_0},
                    {"q4_0", GGML_TYPE_Q4_0}};
#define N_PACKED (int)(sizeof(packed_cases) / sizeof(packed_cases[0]))

static bool packed_case_runs(int i)
{
	return packs_here(packed_cases[i].stored);
}

/* max |a - b| / max |b| allowed: test-qpack-backend.c's bound (an int8
 * rounding edge crossed in one layer carries through the next). */
#define PACKED_LOGIT_TOL 3e-2

/* The bytes of the backend's huge-page block, from its debug line
 * (log_alloc, JSON) in the log's text. */
static size_t block_bytes_logged(const char *text)
{
	const char *at = text ? strstr(text, "weights re-laid") : NULL;
	ck_assert_msg(at != NULL, "no debug line of the weights' block in: %s", text);
	at = strstr(at, "\"bytes\":");
	ck_assert_ptr_nonnull(at);
	return (size_t)strtoull(at + strlen("\"bytes\":"), NULL, 10);
}

/* The logits of m on the stored layout (no packed copies) against tied. */
static void expect_stored_logits(const struct model *m, const float *tied, const char *type)
{
	char err[SINKD_ERR_LEN];
	struct backend_options bo = {.n_threads = 1, .cpu_stored_layout = true};
	struct backend *be = NULL;
	ck_assert_msg(backend_cpu_new(m, &bo, &be, err, sizeof(err)) == 0, "%s", err);
	float *ref = malloc((size_t)m->hp.n_vocab * sizeof(float));
	logits_of(m, be, ref);
	float diff = 0.0f, mag = 0.0f;
	for (int i = 0; i < m->hp.n_vocab; i++) {
		diff = fmaxf(diff, fabsf(tied[i] - ref[i]));
		mag = fmaxf(mag, fabsf(ref[i]));
	}
	ck_assert_msg(mag > 0.0f && diff <= PACKED_LOGIT_TOL * mag,
	              "%s: logits differ from the stored layout's by %g (largest %g)", type,
	              (double)diff, (double)mag);
	backend_free(be);
	free(ref);
}

START_TEST(test_tied_packed_held_once)
{
	char path[128], err[SINKD_ERR_LEN], *log_text = NULL;
	size_t log_len = 0;
	/* a table of a few MB, so that a copy of it would stand out of the
	 * anonymous memory's page rounding */
	struct model *m = make_model(path, sizeof(path), packed_cases[_i].type, 16384);
	ck_assert(m->hp.tied_output);
	ck_assert_int_eq(m->token_embd.type, packed_cases[_i].stored);
	size_t table = (size_t)m->token_embd.rows * m->token_embd.row_bytes;
	float *tied = malloc((size_t)m->hp.n_vocab * sizeof(float));
	FILE *stream = open_memstream(&log_text, &log_len);
	struct sinkd_log *log = log_new(stream, LOG_DEBUG, LOG_FORMAT_JSON);
	struct backend_options bo = {.n_threads = 1, .log = log};
	struct backend *be = NULL;
	long before = rss_anon_kb();
	ck_assert_msg(backend_cpu_new(m, &bo, &be, err, sizeof(err)) == 0, "%s", err);
	logits_of(m, be, tied);
	long grown = (rss_anon_kb() - before) * 1024;
	fflush(stream);
	/* the block is the packed copies, the head's among them, and no copy
	 * of the table; the table's file pages are gone */
	ck_assert_uint_eq(block_bytes_logged(log_text), packed_bytes(m));
	ck_assert_uint_eq(resident_pages(m->token_embd.data, table), 0);
	/* under AddressSanitizer its shadow and quarantine grow the anonymous
	 * memory too: the block's size above is the check there */
	if (!TU_UNDER_ASAN)
		ck_assert_msg((size_t)grown < packed_bytes(m) + table / 3,
		              "%s: anonymous memory grew by %ld bytes; packed copies %zu, table %zu",
		              packed_cases[_i].type, grown, packed_bytes(m), table);
	backend_free(be);
	expect_stored_logits(m, tied, packed_cases[_i].type);
	model_free(m);
	unlink(path);
	log_free(log);
	fclose(stream);
	free(log_text);
	free(tied);
}
END_TEST

/* Whether p lies in m's file mapping. */
static bool in_mapping(const struct model *m, const void *p)
{
	const uint8_t *map = gguf_map(m->file), *q = p;
	return q >= map && q < map + gguf_file_size(m->file);
}

/* The vectors every forward reads (norms) are the model's copies, not the
 * mapping's: read there, each would fault back in the page-cache folio
 * around it (up to 2 MiB) once the backend has given the matrices' file
 * pages back. */
START_TEST(test_vectors_not_in_mapping)
{
	char path[128];
	struct model *m = make_model(path, sizeof(path), "q8_0", 512);
	ck_assert(!in_mapping(m, m->output_norm));
	for (int l = 0; l < m->hp.n_layers; l++) {
		ck_assert_msg(!in_mapping(m, m->layers[l].attn_norm), "layer %d attn_norm", l);
		ck_assert_msg(!in_mapping(m, m->layers[l].ffn_norm), "layer %d ffn_norm", l);
	}
	model_free(m);
	unlink(path);
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
	for (int i = 0; i < N_PACKED; i++)
		if (packed_case_runs(i))
			tcase_add_loop_test(tc, test_tied_packed_held_once, i, i + 1);
		else
			printf("embd-table: %s has no packed kernel on this CPU: skipped\n",
			       packed_cases[i].type);
	tcase_add_test(tc, test_vectors_not_in_mapping);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
