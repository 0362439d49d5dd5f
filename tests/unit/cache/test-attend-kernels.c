/* The attention inner loops (both the AVX2 and baseline clones run the same
 * source) against plain double loops, for every row type (f32, f16, bf16,
 * int8 and int4 codes), head counts 1..8, head sizes with and without a
 * multiple-of-8 length (8 and 64 among them) and row counts that are and are
 * not multiples of the kernels' blocks; each partial sum of the value
 * accumulator is checked on its own.  Then the invariances attend.c relies
 * on for bit-identical outputs (on AVX-512 CPUs the 16-wide kernels for head
 * sizes of a multiple of 16), splitting the rows into runs, or the heads
 * into groups, changes no bit of the scores or the value parts.  Rows are
 * read both packed and SPREAD apart (the cache stores a token's kv heads
 * side by side, so one head's rows are n_kv rows apart). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/attend_kernels.h"
#include "cache/kvquant.h"
#include "testutil.h"

enum { N = 130, DMAX = 64, R = 8, LD = 133, NKIND = 5, SPREAD = 3 };

static unsigned char rows[N * DMAX * 4 * SPREAD];
/* Rows are this many row sizes apart (1: packed); the bytes between them
 * are random, so a kernel that reads past its head's part fails. */
static int spread = 1;
static float q[R * DMAX], p[R * LD];

static float frand(void)
{
	return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

/* Bytes of a row of d elements of kind (0..2 dtypes, 3 int8, 4 int4). */
static size_t row_bytes(int kind, int d)
{
	if (kind < 3)
		return (size_t)d * (kind == 0 ? 4 : 2) * (size_t)spread;
	return kvq_code_bytes(d, kind == 3 ? 8 : 4);
}

/* Element j of row i as the kernels must see it. */
static double elem(int kind, size_t rb, int i, int j)
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

/* N random rows of kind, and random queries and probabilities. */
static void fill(int kind, int d)
{
	size_t rb = row_bytes(kind, d);
	for (size_t b = 0; b < sizeof(rows); b++)
		rows[b] = (unsigned char)rand();
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
	for (int j = 0; j < R * DMAX; j++)
		q[j] = frand();
	for (int j = 0; j < R * LD; j++)
		p[j] = frand();
}

static void score(int kind, int i0, int n, int d, const float *qh, int r, float *out)
{
	size_t rb = row_bytes(kind, d);
	if (kind < 3)
		attend_score_rows((enum kv_dtype)kind, rows + i0 * rb, rb, n, d, qh, r, out, LD,
		                  (n & 1) != 0);
	else
		attend_score_codes(kind == 3 ? 8 : 4, rows + i0 * rb, rb, n, d, qh, r, out, LD);
}

static void mix(int kind, int i0, int n, int d, const float *ph, int r, float *acc, int g0)
{
	size_t rb = row_bytes(kind, d);
	if (kind < 3)
		attend_mix_rows((enum kv_dtype)kind, rows + i0 * rb, rb, n, d, ph, LD, r, acc, g0,
		                (n & 1) != 0);
	else
		attend_mix_codes(kind == 3 ? 8 : 4, rows + i0 * rb, rb, n, d, ph, LD, r, acc, g0);
}

/* Head sizes a kind is stored with (int4 packs two codes a byte). */
static const int dims[] = {8, 64, 16, 24, 40, 6, 12, 5, 3};
static bool dim_ok(int kind, int d)
{
	return kind != 4 || d % 2 == 0;
}

START_TEST(test_kernels_vs_naive)
{
	static float scores[R * LD], acc[R * ATTEND_PARTS * DMAX];
	const int ns[] = {1, 3, 4, 7, 8, 9, 13, 37, N};
	const int rs[] = {1, 2, 3, 5, 8};
	spread = _i ? SPREAD : 1;
	srand(5);
	for (int kind = 0; kind < NKIND; kind++)
		for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
			int d = dims[di];
			size_t rb = row_bytes(kind, d);
			if (!dim_ok(kind, d))
				continue;
			fill(kind, d);
			for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
				for (size_t ri = 0; ri < sizeof(rs) / sizeof(rs[0]); ri++) {
					int n = ns[ni], r = rs[ri], g0 = rand() % 11;
					for (int j = 0; j < R * ATTEND_PARTS * DMAX; j++)
						acc[j] = 0.5f;
					score(kind, 0, n, d, q, r, scores);
					mix(kind, 0, n, d, p, r, acc, g0);
					for (int h = 0; h < r; h++) {
						for (int i = 0; i < n; i++) {
							double s = 0, mag = 0;
							for (int j = 0; j < d; j++) {
								double t = q[h * d + j] *
								           elem(kind, rb, i, j);
								s += t;
								mag += fabs(t);
							}
							ck_assert_msg(
							    fabs(scores[h * LD + i] - s) <=
							        1e-6 * mag + 1e-6,
							    "score kind %d d %d n %d r %d", kind, d,
							    n, r);
						}
						/* each part: the rows whose index is its number
						 * modulo ATTEND_PARTS */
						for (int u = 0; u < ATTEND_PARTS; u++)
							for (int j = 0; j < d; j++) {
								double a = 0.5, mag = 0.5;
								for (int i = 0; i < n; i++) {
									if ((g0 + i) %
									        ATTEND_PARTS !=
									    u)
										continue;
									double t =
									    p[h * LD + i] *
									    elem(kind, rb, i, j);
									a += t;
									mag += fabs(t);
								}
								float got =
								    acc[(h * ATTEND_PARTS + u) * d +
								        j];
								ck_assert_msg(
								    fabs(got - a) <= 1e-6 * mag,
								    "mix kind %d d %d n %d r %d "
								    "part %d: %g vs %g",
								    kind, d, n, r, u, got, a);
							}
					}
				}
		}
}
END_TEST

START_TEST(test_split_invariance)
{
	/* One call over n rows == two calls over [0, s) and [s, n) (g0 moved
	 * on), and r heads at once == each head alone, to the bit. */
	static float s1[R * LD], s2[R * LD], a1[R * ATTEND_PARTS * DMAX],
	    a2[R * ATTEND_PARTS * DMAX];
	const int n = 45, splits[] = {1, 3, 4, 5, 8, 13, 44}, rs[] = {2, 3, 8};
	spread = _i ? SPREAD : 1;
	srand(7);
	for (int kind = 0; kind < NKIND; kind++)
		for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
			for (size_t ri = 0; ri < sizeof(rs) / sizeof(rs[0]); ri++) {
				int d = dims[di], r = rs[ri], g0 = rand() % 9;
				size_t ab = (size_t)r * ATTEND_PARTS * (size_t)d * sizeof(float);
				if (!dim_ok(kind, d))
					continue;
				fill(kind, d);
				memset(a1, 0, sizeof(a1));
				score(kind, 0, n, d, q, r, s1);
				mix(kind, 0, n, d, p, r, a1, g0);
				for (size_t k = 0; k < sizeof(splits) / sizeof(splits[0]); k++) {
					int s = splits[k];
					memset(s2, 0, sizeof(s2));
					memset(a2, 0, sizeof(a2));
					score(kind, 0, s, d, q, r, s2);
					score(kind, s, n - s, d, q, r, s2 + s);
					mix(kind, 0, s, d, p, r, a2, g0);
					mix(kind, s, n - s, d, p + s, r, a2, g0 + s);
					for (int h = 0; h < r; h++)
						ck_assert_msg(memcmp(s1 + h * LD, s2 + h * LD,
						                     n * sizeof(float)) == 0,
						              "score split kind %d d %d at %d",
						              kind, d, s);
					ck_assert_msg(memcmp(a1, a2, ab) == 0,
					              "mix split kind %d d %d at %d", kind, d, s);
				}
				memset(a2, 0, sizeof(a2));
				for (int h = 0; h < r; h++) {
					score(kind, 0, n, d, q + h * d, 1, s2 + h * LD);
					mix(kind, 0, n, d, p + h * LD, 1, a2 + h * ATTEND_PARTS * d,
					    g0);
					ck_assert_msg(memcmp(s1 + h * LD, s2 + h * LD,
					                     n * sizeof(float)) == 0,
					              "score heads kind %d d %d r %d", kind, d, r);
				}
				ck_assert_msg(memcmp(a1, a2, ab) == 0,
				              "mix heads kind %d d %d r %d", kind, d, r);
			}
}
END_TEST

START_TEST(test_exp_sum)
{
	/* exp(x - max) against libm over the whole float range a softmax sees,
	 * every length up to 17 and longer ones that are not a multiple of 8;
	 * the differences are rounded to float, as the kernel's */
	static float s[203];
	srand(9);
	for (int n = 1; n <= 203; n += n < 17 ? 1 : 17) {
		double want = 0;
		float orig[203], mx = -INFINITY;
		for (int i = 0; i < n; i++) {
			s[i] = orig[i] = frand() * (i % 3 ? 30.0f : 200.0f);
			mx = fmaxf(mx, s[i]);
		}
		for (int i = 0; i < n; i++)
			want += exp((float)(orig[i] - mx));
		float got = attend_exp_sum(s, n);
		ck_assert_double_le(fabs(got - want), 1e-6 * want);
		for (int i = 0; i < n; i++) {
			double e = exp((float)(orig[i] - mx));
			ck_assert_msg(fabs(s[i] - e) <= 4e-7 * e + 1e-37,
			              "n %d i %d x %g: %g vs %g", n, i, orig[i] - mx, s[i], e);
		}
	}
}
END_TEST

START_TEST(test_exp_sum_sink)
{
	/* a learned sink logit joins the max: below every score it changes
	 * nothing but its own exp; above them it is the max; -inf is no sink,
	 * bit for bit */
	static float a[203], b[203];
	srand(10);
	for (int n = 1; n <= 203; n += n < 17 ? 1 : 17) {
		float mx = -INFINITY;
		for (int i = 0; i < n; i++) {
			a[i] = b[i] = frand() * 20.0f;
			mx = fmaxf(mx, a[i]);
		}
		float orig[203];
		memcpy(orig, a, sizeof(float) * (size_t)n);
		ck_assert(attend_exp_sum(a, n) == attend_exp_sum_sink(b, n, -INFINITY, NULL));
		ck_assert_int_eq(memcmp(a, b, sizeof(float) * (size_t)n), 0);
		const float sinks[3] = {mx - 3.0f, mx, mx + 5.0f};
		for (int k = 0; k < 3; k++) {
			float top = fmaxf(mx, sinks[k]), e = -1.0f;
			double want = 0;
			memcpy(b, orig, sizeof(float) * (size_t)n);
			for (int i = 0; i < n; i++)
				want += exp((float)(orig[i] - top));
			float got = attend_exp_sum_sink(b, n, sinks[k], &e);
			ck_assert_double_le(fabs(got - want), 1e-6 * want + 1e-30);
			double we = exp((float)(sinks[k] - top));
			ck_assert_msg(fabs(e - we) <= 4e-7 * we, "n %d sink %d: %g vs %g", n, k, e, we);
			for (int i = 0; i < n; i++) {
				double w = exp((float)(orig[i] - top));
				ck_assert(fabs(b[i] - w) <= 4e-7 * w + 1e-37);
			}
		}
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("attend-kernels");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_kernels_vs_naive, 0, 2);
	tcase_add_loop_test(tc, test_split_invariance, 0, 2);
	tcase_add_test(tc, test_exp_sum);
	tcase_add_test(tc, test_exp_sum_sink);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
