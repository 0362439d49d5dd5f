/* Q8_0, Q4_0 and MXFP4 packed (engine/qpack.h, qpack_impl.h) on random
 * stored blocks (every code byte, -128 included; sane fp16 scales, E8M0
 * ones with denormals) and random activations: the packer against the
 * stored blocks element by element (rows past the end zero); the unpacker
 * (qpack_row_to_f32) against the stored rows' dequantization, bit for bit; the plain-C twin against the stored layout's
 * qdot twin (bit for bit: the same integers, scaled in the same order);
 * every variant this CPU runs (AVX2, AVX-VNNI, AVX-512BW, AVX-512 VNNI:
 * each must have its kernel) against both, on rows not a multiple of the
 * group, one row, one and many blocks, B = 1, 2, 3, 7, 8, 9, 31, 64, 512,
 * sub-ranges [r0, r1) (rows outside untouched); the AMX kernels' code
 * with the tile instructions emulated (the real ones: test-qpack-amx.c);
 * and the matmul family with a bias, threads and tile plans against the
 * stored layout's qdot family. */
#include "engine/matmul.h"
#include "engine/qpack_impl.h"
#include "qpack_q0_check.h"
#include "testutil.h"

/* Every element of the packed copy against the stored block. */
START_TEST(test_pack_layout)
{
	const int shapes[][2] = {{1, 64}, {17, 128}, {40, 192}, {16, 64}};
	for (size_t ti = 0; ti < N_TYPES; ti++)
		for (size_t si = 0; si < 4; si++) {
			enum ggml_type t = types[ti];
			struct weight_matrix w = random_matrix(t, shapes[si][0], shapes[si][1]);
			void *p = pack(&w, NULL);
			int groups = (w.rows + QPACK_ROWS - 1) / QPACK_ROWS;
			/* MXFP4's 2 x 16 scale bytes padded to a line */
			size_t pad = t == GGML_TYPE_MXFP4 ? 32 : 0;
			ck_assert_uint_eq(qpack_bytes(&w),
			                  (size_t)groups * (w.cols / 64) *
			                      (2 * QPACK_ROWS * block_bytes(t) + pad));
			for (int r = 0; r < groups * QPACK_ROWS; r++)
				for (int k = 0; k < w.cols / 32; k++) {
					const uint8_t *gb =
					    (const uint8_t *)p + qpack_block_offset(&w, r, k / 2);
					int lane = r % QPACK_ROWS, h = k % 2;
					const uint8_t *src = r < w.rows
					                         ? (const uint8_t *)w.data +
					                               (size_t)r * w.row_bytes +
					                               (size_t)k * block_bytes(t)
					                         : NULL;
					uint16_t d = 0, want_d = 0;
					if (src)
						memcpy(&want_d, src, scale_bytes(t));
					if (t == GGML_TYPE_Q8_0) {
						const struct qpack_q8_0_block *b = (const void *)gb;
						d = b->d[h][lane];
						for (int i = 0; i < 32; i++) {
							int code =
							    b->qs[h][i / 4][lane][i % 4] - 128;
							int want = src ? (int8_t)src[2 + i] : -128;
							ck_assert_int_eq(code, want);
						}
					} else {
						/* Q4_0 and MXFP4 share the code lines */
						const struct qpack_q4_0_block *b = (const void *)gb;
						const struct qpack_mxfp4_block *mb = (const void *)gb;
						d = t == GGML_TYPE_MXFP4 ? mb->d[h][lane] : b->d[h][lane];
						for (int i = 0; i < 16; i++)
							ck_assert_uint_eq(
							    mb->qs[h][i / 4][lane][i % 4],
							    src ? src[scale_bytes(t) + i] : 0);
					}
					ck_assert_uint_eq(d, want_d);
				}
			free(p);
			free((void *)w.data);
		}
}
END_TEST

START_TEST(test_kernels_match_twins)
{
	const int shapes[][2] = {{1, 64}, {5, 64}, {16, 128}, {17, 192}, {33, 64}, {48, 768}};
	const int batches[] = {1, 2, 3, 7, 8, 9, 31, 64};
	int checked = 0;
	for (size_t ti = 0; ti < N_TYPES; ti++)
		for (int v = 0; v < QDOT_VARIANT_COUNT; v++) {
			qpack_rows_fn k = qpack_rows_get(types[ti], (enum qdot_variant)v);
			/* every variant the CPU runs has its packed kernel: the
			 * backend packs only where one does */
			ck_assert_msg(k || !qdot_variant_runs((enum qdot_variant)v),
			              "%s: no packed kernel for %s, which this CPU runs",
			              ggml_type_name(types[ti]), qdot_variant_name(v));
			if (!k)
				continue;
			checked += v != QDOT_VARIANT_SCALAR;
			for (size_t si = 0; si < 6; si++)
				for (size_t bi = 0; bi < 8; bi++)
					check_kernel(types[ti], qdot_variant_name(v), k,
					             shapes[si][0], shapes[si][1], batches[bi], 0,
					             shapes[si][0]);
			/* a large batch once, and sub-ranges that start and end
			 * inside groups */
			check_kernel(types[ti], qdot_variant_name(v), k, 40, 128, 512, 0, 40);
			check_kernel(types[ti], qdot_variant_name(v), k, 70, 128, 9, 3, 37);
			check_kernel(types[ti], qdot_variant_name(v), k, 70, 128, 1, 16, 70);
			check_kernel(types[ti], qdot_variant_name(v), k, 70, 64, 5, 21, 22);
			check_kernel(types[ti], qdot_variant_name(v), k, 70, 64, 2, 5, 5);
		}
	if (!checked)
		fprintf(stderr, "note: no vector qpack kernel for Q8_0/Q4_0/MXFP4 runs here; "
		                "only the twin was checked\n");
}
END_TEST

START_TEST(test_family_with_bias)
{
	check_family(MATMUL_FAMILY_QPACK);
}
END_TEST

/* The AMX kernels' code with the tile instructions emulated: whole tiles
 * of 16 vectors and the rest, sub-ranges, B below one tile. */
START_TEST(test_amx_emulated)
{
	int checked = 0;
	for (int ti = 0; ti < N_AMX_TYPES; ti++) {
		qpack_rows_fn k = qpack_amx_emulated_rows_get(types[ti]);
		if (!k)
			continue;
		checked++;
		check_amx_shapes(types[ti], "amx-emulated", k);
	}
	if (!checked)
		fprintf(stderr, "note: the AMX emulation needs the AVX-512 VNNI kernels; "
		                "not checked here\n");
}
END_TEST

/* Every row read back from the packed copy (qpack_row_to_f32) is the
 * stored row's dequantization, bit for bit. */
START_TEST(test_row_to_f32)
{
	for (size_t ti = 0; ti < N_TYPES; ti++) {
		struct weight_matrix w = random_matrix(types[ti], 37, 256);
		void *p = pack(&w, NULL);
		float got[256], want[256];
		for (int r = 0; r < w.rows; r++) {
			dequantize_row(w.type, (const uint8_t *)w.data + (size_t)r * w.row_bytes, want,
			               (uint64_t)w.cols);
			qpack_row_to_f32(&w, r, got);
			ck_assert_msg(memcmp(got, want, sizeof(got)) == 0, "%s row %d differs",
			              ggml_type_name(w.type), r);
		}
		free(p);
		free((void *)w.data);
	}
}
END_TEST

/* Cols that are not whole group blocks get no packed copy (the stored
 * layout's kernels keep them). */
START_TEST(test_unpackable_cols)
{
	for (size_t ti = 0; ti < N_TYPES; ti++) {
		struct weight_matrix w = {.type = types[ti], .rows = 16, .cols = 96};
		ck_assert_uint_eq(qpack_bytes(&w), 0);
		ck_assert(qpack_supported(types[ti]));
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("qpack-q0");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_pack_layout);
	tcase_add_test(tc, test_kernels_match_twins);
	tcase_add_test(tc, test_family_with_bias);
	tcase_add_test(tc, test_amx_emulated);
	tcase_add_test(tc, test_row_to_f32);
	tcase_add_test(tc, test_unpackable_cols);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
