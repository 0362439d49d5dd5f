/* The CPU backend with packed block weights (engine/qpack.h) on synthetic
 * Q4_K, Q5_K, Q6_K, Q8_0 and Q4_0 models and MXFP4 mixture-of-experts ones
 * (gpt-oss, qwen3moe: MXFP4 experts, Q8_0 elsewhere) from sinkd-mkmodel
 * (path in argv[1]): the
 * last-position logits of a prompt, prefilled in chunks and then decoded a
 * token at a time, match those of the same model kept in its stored layout
 * (backend_options.cpu_stored_layout) within float summation order, and
 * the model file's pages that the packed matrices came from are no longer
 * resident in this process (the copy replaces them, not doubles them). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/matmul.h"
#include "engine/qpack.h"
#include "util/errbuf.h"
#include "testutil.h"

static const char *mkmodel_path;

/* max |diff| / max |logit| allowed.  Each product forms the same integer
 * sums as the stored layout's, but a last-bit difference in one layer's
 * output can move an activation across a rounding edge of the next
 * layer's int8 quantization, and such a step, carried through the layers,
 * moved a Q5_K model's logits by 1.2% of the largest (every product
 * checked equal to 1e-7 in between); a wrong scale or code moves them by
 * far more. */
#define LOGIT_TOL 3e-2
/* Bytes of the file that may stay resident beyond the unpacked tensors. */
#define RSS_SLACK (256 * 1024)

/* A model of type (and extra sinkd-mkmodel arguments: the architecture),
 * case i's file. */
static struct model *make_model(char *path, size_t path_len, const char *type, const char *extra,
                                int i)
{
	char cmd[2048], err[SINKD_ERR_LEN];
	snprintf(path, path_len, "/tmp/sinkd-qpack-backend-%d-%s-%d.gguf", (int)getpid(), type, i);
	snprintf(cmd, sizeof(cmd),
	         "'%s' --out '%s' --dim 256 --heads 4 --layers 2 --ffn 512 --vocab-size 300 "
	         "--seed 5 --type %s %s >/dev/null",
	         mkmodel_path, path, type, extra);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	struct model *m = NULL;
	ck_assert_msg(model_load(path, NULL, &m, err, sizeof(err)) == 0, "%s", err);
	return m;
}

struct run {
	struct backend *be;
	struct backend_session *s;
	struct cache_geometry g;
};

static void run_open(struct run *r, const struct model *m, bool stored)
{
	char err[SINKD_ERR_LEN];
	struct backend_options opt = {
	    .n_threads = 2, .parallel_min_macs = 1, .cpu_stored_layout = stored};
	ck_assert_msg(backend_cpu_new(m, &opt, &r->be, err, sizeof(err)) == 0, "%s", err);
	r->g = tu_model_geometry(&m->hp, 1024);
	r->g.strategy = CACHE_STRATEGY_SLIDING_WINDOW;
	r->g.max_context_length = 2048;
	ck_assert_msg(r->be->ops->session_new(r->be, &r->g, &r->s, err, sizeof(err)) == 0, "%s",
	              err);
}

static void run_close(struct run *r)
{
	r->be->ops->session_free(r->be, r->s);
	backend_free(r->be);
}

/* ids[0..n) in chunks of `chunk`, the last token's logits. */
static void run_tokens(struct run *r, const int32_t *ids, int n, int chunk, float *logits)
{
	struct backend_token batch[16];
	char err[SINKD_ERR_LEN];
	for (int i = 0; i < n; i += chunk) {
		int c = n - i < chunk ? n - i : chunk;
		for (int j = 0; j < c; j++)
			batch[j] = (struct backend_token){
			    .session = r->s, .token = ids[i + j], .want_logits = i + j == n - 1};
		ck_assert_msg(
		    r->be->ops->forward(r->be, batch, (size_t)c, logits, err, sizeof(err)) == 0,
		    "%s", err);
	}
}

/* Resident bytes of this process's mappings of path (/proc/self/smaps). */
static size_t resident_of_file(const char *path)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	ck_assert_ptr_nonnull(f);
	char line[4096];
	bool in = false;
	size_t kb_total = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		size_t kb;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = strstr(line, path) != NULL;
		else if (in && sscanf(line, "Rss: %zu kB", &kb) == 1)
			kb_total += kb;
	}
	fclose(f);
	return kb_total * 1024;
}

/* Bytes of the model's matrices of packed types that the backend packs. */
static size_t packed_matrix_bytes(const struct model *m)
{
	size_t total = 0;
	const struct weight_matrix *out = &m->output;
	if (qpack_supported(out->type))
		total += (size_t)out->rows * out->row_bytes;
	for (int l = 0; l < m->hp.n_layers; l++) {
		const struct model_layer *L = &m->layers[l];
		const struct weight_matrix *ws[7] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
		                                     &L->w_gate, &L->w_up, &L->w_down};
		for (int i = 0; i < 7; i++)
			if (qpack_supported(ws[i]->type))
				total += (size_t)ws[i]->rows * ws[i]->row_bytes;
		for (int e = 0; L->exp_gate && e < m->hp.n_experts; e++) {
			const struct weight_matrix *ex[3] = {&L->exp_gate[e], &L->exp_up[e],
			                                     &L->exp_down[e]};
			for (int i = 0; i < 3; i++)
				if (qpack_supported(ex[i]->type))
					total += (size_t)ex[i]->rows * ex[i]->row_bytes;
		}
	}
	return total;
}

#define MOE_ARGS "--experts 4 --experts-used 2 --expert-ffn 256"
static const char *const model_types[] = {"q4_k", "q5_k", "q6_k", "q8_0", "q4_0", "mxfp4", "mxfp4"};
static const char *const model_args[] = {
    "", "", "", "", "", "--arch gpt-oss " MOE_ARGS, "--arch qwen3moe " MOE_ARGS};
/* the type whose kernels the case needs (MXFP4: the experts') */
static const enum ggml_type model_ggml_types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
                                                  GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_MXFP4,
                                                  GGML_TYPE_MXFP4};

START_TEST(test_packed_logits_and_pages)
{
	if (!matmul_have_avx2() || qpack_variant_best(GGML_TYPE_Q4_K) == QDOT_VARIANT_SCALAR) {
		tu_skip("no vector qpack kernel on this CPU: the backend does not pack");
		return;
	}
	if (qpack_variant_best(model_ggml_types[_i]) == QDOT_VARIANT_SCALAR) {
		/* Q8_0 and Q4_0 have AVX-512 VNNI kernels only */
		fprintf(stderr, "note: %s is not packed on this CPU; not checked\n",
		        model_types[_i]);
		return;
	}
	char path[256];
	struct model *m = make_model(path, sizeof(path), model_types[_i], model_args[_i], _i);
	int nv = m->hp.n_vocab;
	int32_t ids[40];
	for (int i = 0; i < 40; i++)
		ids[i] = (int32_t)((i * 37 + 11) % nv);
	float *want = malloc(sizeof(float) * nv), *got = malloc(sizeof(float) * nv);

	struct run stored, packed;
	run_open(&stored, m, true);
	run_tokens(&stored, ids, 33, 11, want);
	run_open(&packed, m, false);
	size_t packed_bytes = packed_matrix_bytes(m), rss = resident_of_file(path);
	ck_assert_uint_gt(packed_bytes, 0);
	/* the stored backend has just read every page of the file; packing
	 * gave back those of the packed matrices (pages at a matrix's ends may
	 * stay: the slack) */
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_msg(rss + packed_bytes <= (size_t)st.st_size + RSS_SLACK,
	              "%zu bytes of the %zu-byte file resident after packing %zu", rss,
	              (size_t)st.st_size, packed_bytes);
	run_close(&stored);
	run_tokens(&packed, ids, 33, 11, got);
	for (int step = 0; step < 2; step++) {
		double diff = 0, top = 0;
		for (int i = 0; i < nv; i++) {
			diff = fmax(diff, fabs((double)got[i] - want[i]));
			top = fmax(top, fabs((double)want[i]));
		}
		ck_assert_msg(diff <= LOGIT_TOL * top, "%s step %d: logits differ by %g of %g",
		              model_types[_i], step, diff, top);
		if (step == 1)
			break;
		/* a decode step after the prefill: B = 1 takes the decode kernels */
		run_open(&stored, m, true);
		run_tokens(&stored, ids, 34, 11, want);
		run_close(&stored);
		run_tokens(&packed, ids + 33, 1, 1, got);
	}
	run_close(&packed);
	free(want);
	free(got);
	model_free(m);
	unlink(path);
}
END_TEST

int main(int argc, char **argv)
{
	mkmodel_path = argc > 1 ? argv[1] : NULL;
	if (mkmodel_path == NULL) {
		fprintf(stderr, "usage: %s path/to/sinkd-mkmodel\n", argv[0]);
		return 2;
	}
	Suite *s = suite_create("qpack-backend");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_packed_logits_and_pages, 0,
	                    (int)(sizeof(model_types) / sizeof(model_types[0])));
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
