/* The attention inner loops (both the AVX2 and baseline clones run the same
 * source) against plain double loops, for every row type, head counts 1..8
 * and head sizes with and without a multiple-of-8 length. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/attend_kernels.h"
#include "cache/kvquant.h"
#include "testutil.h"

enum { N = 37, DMAX = 40, R = 8, LD = 41 };

static float frand(void)
{
	return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

/* Element j of row i as the kernels must see it. */
static double elem(int kind, const unsigned char *rows, size_t rb, int i, int j)
{
	const unsigned char *row = rows + (size_t)i * rb;
	uint16_t h;
	float f;
	switch (kind) {
	case 0:
		memcpy(&f, row + 4 * j, 4);
		return f;
	case 1:
		memcpy(&h, row + 2 * j, 2);
		return kv_f16_to_f32(h);
	case 2:
		memcpy(&h, row + 2 * j, 2);
		return kv_bf16_to_f32(h);
	default:
		return kvq_code_at(row, j, kind == 3 ? 8 : 4);
	}
}

START_TEST(test_kernels_vs_naive)
{
	static unsigned char rows[N * DMAX * 4];
	static float q[R * DMAX], scores[R * LD], acc[R * DMAX], p[R * LD];
	const int dims[] = {8, 12, 16, 40, 6};
	srand(5);
	for (int kind = 0; kind < 5; kind++) {
		for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
			int d = dims[di];
			size_t rb = kind < 3 ? (size_t)d * (kind == 0 ? 4 : 2)
			                     : kvq_code_bytes(d, kind == 3 ? 8 : 4);
			for (int i = 0; i < N; i++) {
				float x[DMAX];
				for (int j = 0; j < d; j++)
					x[j] = frand() * 3.0f;
				if (kind < 3)
					kv_row_store((enum kv_dtype)kind, rows + i * rb, x, d);
				else
					for (size_t b = 0; b < rb; b++)
						rows[i * rb + b] = (unsigned char)rand();
			}
			for (int r = 1; r <= R; r += 3) {
				for (int j = 0; j < R * DMAX; j++)
					q[j] = frand(), acc[j] = 0.5f;
				for (int j = 0; j < R * LD; j++)
					p[j] = frand();
				if (kind < 3) {
					attend_score_rows((enum kv_dtype)kind, rows, rb, N, d, q, r,
					                  scores, LD);
					attend_mix_rows((enum kv_dtype)kind, rows, rb, N, d, p, LD,
					                r, acc);
				} else {
					int bits = kind == 3 ? 8 : 4;
					attend_score_codes(bits, rows, rb, N, d, q, r, scores, LD);
					attend_mix_codes(bits, rows, rb, N, d, p, LD, r, acc);
				}
				for (int h = 0; h < r; h++) {
					for (int i = 0; i < N; i++) {
						double s = 0, mag = 0;
						for (int j = 0; j < d; j++) {
							s += q[h * d + j] *
							     elem(kind, rows, rb, i, j);
							mag += fabs(q[h * d + j] *
							            elem(kind, rows, rb, i, j));
						}
						ck_assert_msg(fabs(scores[h * LD + i] - s) <=
						                  1e-6 * mag + 1e-6,
						              "kind %d d %d r %d", kind, d, r);
					}
					for (int j = 0; j < d; j++) {
						double a = 0.5, mag = 0.5;
						for (int i = 0; i < N; i++) {
							a += p[h * LD + i] *
							     elem(kind, rows, rb, i, j);
							mag += fabs(p[h * LD + i] *
							            elem(kind, rows, rb, i, j));
						}
						ck_assert_msg(fabs(acc[h * d + j] - a) <=
						                  1e-6 * mag,
						              "mix kind %d d %d r %d", kind, d, r);
					}
				}
			}
		}
	}
}
END_TEST

START_TEST(test_exp_sum)
{
	/* exp(x - max) against libm over the whole float range a softmax sees,
	 * including lengths that are not a multiple of 8 */
	static float s[203];
	srand(9);
	for (int n = 1; n <= 203; n += 17) {
		double want = 0, mx = -INFINITY;
		float orig[203];
		for (int i = 0; i < n; i++) {
			s[i] = orig[i] = frand() * (i % 3 ? 30.0f : 200.0f);
			mx = fmax(mx, s[i]);
		}
		for (int i = 0; i < n; i++)
			want += exp(orig[i] - mx);
		float got = attend_exp_sum(s, n);
		ck_assert_double_le(fabs(got - want), 1e-6 * want);
		for (int i = 0; i < n; i++) {
			double e = exp(orig[i] - mx);
			ck_assert_msg(fabs(s[i] - e) <= 4e-7 * e + 1e-37,
			              "n %d i %d x %g: %g vs %g", n, i, orig[i] - mx, s[i], e);
		}
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("attend-kernels");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_kernels_vs_naive);
	tcase_add_test(tc, test_exp_sum);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
