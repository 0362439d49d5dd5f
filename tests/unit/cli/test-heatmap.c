/* The cache heatmaps (cli/heatmap.h) on synthetic traces of a cache with 4
 * sinks and a window of 60 (44 quantized, 16 hot), 4 layers, layer 2 also
 * keeping an anchor: both images are written to a temporary folder, read
 * back with libpng and checked where a reader would look: the image size
 * the layout states, each tier's hue in its columns, brightness rising with
 * attention mass, evicted tokens grey in the lifecycle, the legend's
 * colour of every tier (shared sinks beside the session's own); bad paths and bad traces give errors, never a crash. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/heatmap.h"
#include "testutil.h"
#include "util/errbuf.h"

#define N_LAYERS 4
#define SINKS 4
#define WINDOW 60
#define HOT 16
#define ANCHOR_LAYER 2
#define ANCHOR_TOKEN 20
#define MAX_SLOTS (SINKS + WINDOW + 1)

struct trace {
	struct cache_trace_step step;
	struct cache_trace_layer layers[N_LAYERS];
	struct cache_trace_slot slots[N_LAYERS][MAX_SLOTS];
};

/* Mass of a hot token by its age: the newest gets the most. */
static float hot_mass(int64_t age)
{
	return 0.5f / (float)(1 + age * age);
}

static void put(struct cache_trace_layer *ly, int64_t idx, enum cache_tier tier, float mass)
{
	ly->slots[ly->n_slots++] = (struct cache_trace_slot){.stream_index = idx,
	                                                     .tier = tier,
	                                                     .rope_pos = ly->n_slots,
	                                                     .mass_max = mass,
	                                                     .mass_mean = mass / 2,
	                                                     .mass_ema = mass};
}

/* The cache after token `pos`: sinks 0..3, the last 60 tokens (the newest
 * 16 hot), and in layer ANCHOR_LAYER token ANCHOR_TOKEN once it left the
 * window. */
static void trace_at(struct trace *tr, int64_t pos)
{
	memset(tr, 0, sizeof *tr);
	tr->step = (struct cache_trace_step){.step = (uint64_t)pos,
	                                     .stream_pos = pos,
	                                     .geometry = {.sink_keep_count = SINKS,
	                                                  .window_size = WINDOW,
	                                                  .quant_bits = 8,
	                                                  .full_precision_recent = HOT,
	                                                  .anchor_max = 1},
	                                     .n_layers = N_LAYERS,
	                                     .layers = tr->layers};
	int64_t win0 = pos - WINDOW + 1 > SINKS ? pos - WINDOW + 1 : SINKS;
	for (int l = 0; l < N_LAYERS; l++) {
		struct cache_trace_layer *ly = &tr->layers[l];
		ly->slots = tr->slots[l];
		for (int64_t i = 0; i < SINKS && i <= pos; i++)
			put(ly, i, CACHE_TIER_SINK, 0.3f);
		if (l == ANCHOR_LAYER && win0 > ANCHOR_TOKEN)
			put(ly, ANCHOR_TOKEN, CACHE_TIER_ANCHOR, 0.05f);
		for (int64_t i = win0; i <= pos; i++)
			if (pos - i < HOT)
				put(ly, i, CACHE_TIER_HOT, hot_mass(pos - i));
			else
				put(ly, i, CACHE_TIER_COMPRESSED, 1e-3f);
	}
}

static char tmpdir[64];

static void setup(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/test-heatmap-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	const char *names[] = {"step.png", "life.png", "life0.png", "long.png", "wide.png"};
	char p[128];
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		snprintf(p, sizeof p, "%s/%s", tmpdir, names[i]);
		unlink(p);
	}
	rmdir(tmpdir);
}

static const char *tmp_path(const char *name)
{
	static char p[128];
	snprintf(p, sizeof p, "%s/%s", tmpdir, name);
	return p;
}

struct image {
	png_image png;
	uint8_t *px; /* (height, width, 3) */
};

static void image_read(struct image *im, const char *path)
{
	memset(im, 0, sizeof *im);
	im->png.version = PNG_IMAGE_VERSION;
	ck_assert_msg(png_image_begin_read_from_file(&im->png, path), "%s: %s", path,
	              im->png.message);
	im->png.format = PNG_FORMAT_RGB;
	im->px = malloc(PNG_IMAGE_SIZE(im->png));
	ck_assert_ptr_nonnull(im->px);
	ck_assert_msg(png_image_finish_read(&im->png, NULL, im->px, 0, NULL), "%s",
	              im->png.message);
}

static const uint8_t *pixel(const struct image *im, int x, int y)
{
	ck_assert_int_lt(x, (int)im->png.width);
	ck_assert_int_lt(y, (int)im->png.height);
	return im->px + 3 * ((size_t)y * im->png.width + (size_t)x);
}

/* The centre of the cell of token column col in row item. */
static const uint8_t *cell(const struct image *im, const struct heatmap_layout *l, int64_t col,
                           int item)
{
	return pixel(im, heatmap_layout_col_x(l, col) + l->cell_w / 2,
	             heatmap_layout_row_y(l, item) + l->cell_h / 2);
}

/* The tier whose palette colour, scaled, is nearest: the hue a reader sees. */
static int hue_of(const uint8_t *p)
{
	int best = -1;
	double best_d = 1e30;
	for (int t = 0; t < CACHE_TIER_COUNT; t++) {
		uint8_t c[3];
		heatmap_tier_rgb((enum cache_tier)t, c);
		double dot = 0, cc = 0;
		for (int k = 0; k < 3; k++) {
			dot += (double)p[k] * c[k];
			cc += (double)c[k] * c[k];
		}
		double s = dot / cc, d = 0;
		for (int k = 0; k < 3; k++)
			d += (p[k] - s * c[k]) * (p[k] - s * c[k]);
		if (d < best_d) {
			best_d = d;
			best = t;
		}
	}
	return best;
}

static bool rgb_eq(const uint8_t *a, const uint8_t *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
}

static int brightness(const uint8_t *p)
{
	return p[0] + p[1] + p[2];
}

static void check_legend(const struct image *im, const struct heatmap_layout *l)
{
	for (int t = 0; t < CACHE_TIER_COUNT; t++) {
		uint8_t c[3];
		heatmap_tier_rgb((enum cache_tier)t, c);
		const struct heatmap_rect *r = &l->swatch[t];
		ck_assert_int_gt(r->w, 0);
		ck_assert_int_ge(r->y, l->plot.y + l->plot.h);
		ck_assert_msg(rgb_eq(pixel(im, r->x + r->w / 2, r->y + r->h / 2), c),
		              "legend swatch of %s", cache_tier_name((enum cache_tier)t));
	}
}

START_TEST(test_tier_names)
{
	ck_assert_str_eq(cache_tier_name(CACHE_TIER_SINK), "sink");
	ck_assert_str_eq(cache_tier_name(CACHE_TIER_ANCHOR), "anchor");
	ck_assert_str_eq(cache_tier_name(CACHE_TIER_COMPRESSED), "compressed");
	ck_assert_str_eq(cache_tier_name(CACHE_TIER_HOT), "hot");
	ck_assert_str_eq(cache_tier_name(CACHE_TIER_SHARED), "shared");
	ck_assert_str_eq(cache_tier_name(CACHE_TIER_COUNT), "?");
	uint8_t lo[3], hi[3], top[3];
	heatmap_shade(CACHE_TIER_HOT, 0.0f, lo);
	heatmap_shade(CACHE_TIER_HOT, 0.01f, hi);
	heatmap_shade(CACHE_TIER_HOT, 1.0f, top);
	ck_assert_int_lt(brightness(lo), brightness(hi));
	ck_assert_int_lt(brightness(hi), brightness(top));
	uint8_t c[3];
	heatmap_tier_rgb(CACHE_TIER_HOT, c);
	ck_assert(rgb_eq(top, c));
	ck_assert_int_eq(hue_of(lo), CACHE_TIER_HOT); /* the floor keeps its hue */

	struct cache_geometry g = tu_geometry(N_LAYERS, 1, 8, SINKS, WINDOW, true, 8, HOT);
	g.max_context_length = 64;
	g.anchor_max = 2;
	g.anchor_promote = 0.1f;
	g.anchor_demote_steps = 4;
	ck_assert_uint_eq(cache_trace_slots_per_layer(&g), SINKS + WINDOW + 2);
	struct cache_trace_geometry tg;
	cache_trace_geometry_of(&g, &tg);
	ck_assert_int_eq(tg.quant_bits, 8);
	ck_assert_int_eq(tg.anchor_max, 2);
	g.quant_enabled = false;
	cache_trace_geometry_of(&g, &tg);
	ck_assert_int_eq(tg.quant_bits, 0);
}
END_TEST

START_TEST(test_step_image)
{
	struct trace *tr = malloc(sizeof *tr);
	ck_assert_ptr_nonnull(tr);
	trace_at(tr, 99); /* window 40..99: compressed 40..83, hot 84..99 */
	char err[SINKD_ERR_LEN] = "";
	struct heatmap_layout l;
	ck_assert_msg(heatmap_step_layout(&tr->step, &l, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(l.n_cols, SINKS + 1 + WINDOW); /* the anchor is a column of its own */
	ck_assert_int_eq(l.n_bins, l.n_cols);
	ck_assert_int_eq(l.n_rows, N_LAYERS);
	ck_assert_msg(heatmap_step_write(&tr->step, tmp_path("step.png"), err, sizeof err) == 0,
	              "%s", err);
	struct image im;
	image_read(&im, tmp_path("step.png"));
	ck_assert_int_eq(im.png.width, l.width);
	ck_assert_int_eq(im.png.height, l.height);
	/* columns: 0..3 sinks, 4 the anchor (token 20), 5.. the window from token 40 */
	uint8_t want[3], grey[3];
	heatmap_absent_rgb(grey);
	for (int layer = 0; layer < N_LAYERS; layer++) {
		for (int col = 0; col < SINKS; col++) {
			heatmap_shade(CACHE_TIER_SINK, 0.3f, want);
			ck_assert(rgb_eq(cell(&im, &l, col, layer), want));
			ck_assert_int_eq(hue_of(cell(&im, &l, col, layer)), CACHE_TIER_SINK);
		}
		const uint8_t *a = cell(&im, &l, SINKS, layer);
		if (layer == ANCHOR_LAYER)
			ck_assert_int_eq(hue_of(a), CACHE_TIER_ANCHOR);
		else
			ck_assert_msg(rgb_eq(a, grey), "layer %d holds no anchor: grey", layer);
		for (int64_t tok = 40; tok <= 99; tok++) {
			const uint8_t *p = cell(&im, &l, SINKS + 1 + (tok - 40), layer);
			int tier = 99 - tok < HOT ? CACHE_TIER_HOT : CACHE_TIER_COMPRESSED;
			ck_assert_msg(hue_of(p) == tier, "layer %d token %lld", layer,
			              (long long)tok);
		}
		/* the newest token got the most attention: the brightest hot cell */
		const uint8_t *newest = cell(&im, &l, SINKS + WINDOW, layer);
		const uint8_t *older = cell(&im, &l, SINKS + WINDOW - 3, layer);
		ck_assert_int_gt(brightness(newest), brightness(older));
		heatmap_shade(CACHE_TIER_HOT, hot_mass(0), want);
		ck_assert(rgb_eq(newest, want));
	}
	check_legend(&im, &l);
	free(im.px);
	free(tr);
}
END_TEST

/* A layer whose sinks are read from a shared prefix draws them in the
 * shared tier's hue, told apart from every other tier's. */
START_TEST(test_shared_sinks)
{
	for (int t = 0; t < CACHE_TIER_COUNT; t++) {
		uint8_t c[3];
		heatmap_tier_rgb((enum cache_tier)t, c);
		ck_assert_int_eq(hue_of(c), t);
	}
	struct trace *tr = malloc(sizeof *tr);
	ck_assert_ptr_nonnull(tr);
	trace_at(tr, 99);
	for (int i = 0; i < SINKS; i++)
		tr->layers[1].slots[i].tier = CACHE_TIER_SHARED;
	char err[SINKD_ERR_LEN] = "";
	struct heatmap_layout l;
	ck_assert_msg(heatmap_step_layout(&tr->step, &l, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(heatmap_step_write(&tr->step, tmp_path("step.png"), err, sizeof err) == 0,
	              "%s", err);
	struct image im;
	image_read(&im, tmp_path("step.png"));
	for (int layer = 0; layer < N_LAYERS; layer++)
		for (int col = 0; col < SINKS; col++)
			ck_assert_int_eq(hue_of(cell(&im, &l, col, layer)),
			                 layer == 1 ? CACHE_TIER_SHARED : CACHE_TIER_SINK);
	check_legend(&im, &l);
	free(im.px);
	free(tr);
}
END_TEST

static struct heatmap_lifecycle *lifecycle_of(int layer, int64_t from, int64_t to)
{
	struct heatmap_lifecycle *h;
	char err[SINKD_ERR_LEN] = "";
	struct heatmap_lifecycle_opts o = {.layer = layer};
	ck_assert_msg(heatmap_lifecycle_new(&o, &h, err, sizeof err) == 0, "%s", err);
	struct trace *tr = malloc(sizeof *tr);
	ck_assert_ptr_nonnull(tr);
	for (int64_t pos = from; pos <= to; pos++) {
		trace_at(tr, pos);
		ck_assert_msg(heatmap_lifecycle_add_step(h, &tr->step, err, sizeof err) == 0, "%s",
		              err);
	}
	free(tr);
	return h;
}

START_TEST(test_lifecycle_image)
{
	struct heatmap_lifecycle *h = lifecycle_of(-1, 0, 149);
	ck_assert_int_eq(heatmap_lifecycle_steps(h), 150);
	char err[SINKD_ERR_LEN] = "";
	struct heatmap_layout l;
	ck_assert_msg(heatmap_lifecycle_layout(h, &l, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(l.n_cols, 150);
	ck_assert_int_eq(l.n_rows, 150);
	ck_assert_msg(heatmap_lifecycle_write(h, tmp_path("life.png"), err, sizeof err) == 0, "%s",
	              err);
	struct image im;
	image_read(&im, tmp_path("life.png"));
	ck_assert_int_eq(im.png.width, l.width);
	ck_assert_int_eq(im.png.height, l.height);
	uint8_t grey[3], c[3];
	heatmap_absent_rgb(grey);
	for (int s = 0; s < 150; s++) {
		for (int tok = 0; tok < SINKS && tok <= s; tok++)
			ck_assert_int_eq(hue_of(cell(&im, &l, tok, s)), CACHE_TIER_SINK);
		heatmap_tier_rgb(CACHE_TIER_HOT, c);
		if (s >= SINKS)
			ck_assert_msg(rgb_eq(cell(&im, &l, s, s), c), "step %d: its token is hot",
			              s);
		if (s + 1 < 150)
			ck_assert_msg(rgb_eq(cell(&im, &l, s + 1, s), grey),
			              "step %d: not yet seen", s);
		/* token 10 leaves the window at step 70: evicted, grey */
		if (s >= 70)
			ck_assert_msg(rgb_eq(cell(&im, &l, 10, s), grey), "step %d: evicted", s);
		else if (s >= 10 + HOT)
			ck_assert_int_eq(hue_of(cell(&im, &l, 10, s)), CACHE_TIER_COMPRESSED);
	}
	/* layer 2's anchor shows in the all-layers image, from step 80 on */
	heatmap_tier_rgb(CACHE_TIER_ANCHOR, c);
	ck_assert(rgb_eq(cell(&im, &l, ANCHOR_TOKEN, 120), c));
	check_legend(&im, &l);
	const struct heatmap_rect *r = &l.swatch_absent;
	ck_assert(rgb_eq(pixel(&im, r->x + r->w / 2, r->y + r->h / 2), grey));
	free(im.px);
	heatmap_lifecycle_free(h);

	/* layer 0 alone holds no anchor: token 20 is evicted there */
	h = lifecycle_of(0, 0, 149);
	ck_assert_msg(heatmap_lifecycle_layout(h, &l, err, sizeof err) == 0, "%s", err);
	ck_assert_msg(heatmap_lifecycle_write(h, tmp_path("life0.png"), err, sizeof err) == 0, "%s",
	              err);
	image_read(&im, tmp_path("life0.png"));
	ck_assert(rgb_eq(cell(&im, &l, ANCHOR_TOKEN, 120), grey));
	free(im.px);
	heatmap_lifecycle_free(h);
}
END_TEST

/* A stream longer than HEATMAP_MAX_COLUMNS is downsampled, and the four
 * sinks still show in the first pixel column. */
START_TEST(test_lifecycle_downsampled)
{
	struct heatmap_lifecycle *h = lifecycle_of(-1, 3000, 3099);
	char err[SINKD_ERR_LEN] = "";
	struct heatmap_layout l;
	ck_assert_msg(heatmap_lifecycle_layout(h, &l, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(l.n_cols, 3100);
	ck_assert_int_eq(l.n_bins, HEATMAP_MAX_COLUMNS);
	ck_assert_int_eq(l.plot.w, HEATMAP_MAX_COLUMNS * l.cell_w);
	ck_assert_msg(heatmap_lifecycle_write(h, tmp_path("long.png"), err, sizeof err) == 0, "%s",
	              err);
	struct image im;
	image_read(&im, tmp_path("long.png"));
	ck_assert_int_eq(im.png.width, l.width);
	ck_assert_int_eq(hue_of(cell(&im, &l, 0, 50)), CACHE_TIER_SINK);
	ck_assert_int_eq(hue_of(cell(&im, &l, 3050, 50)), CACHE_TIER_HOT);
	uint8_t grey[3];
	heatmap_absent_rgb(grey);
	ck_assert(rgb_eq(cell(&im, &l, 1000, 50), grey));
	free(im.px);
	heatmap_lifecycle_free(h);
}
END_TEST

/* A step whose layer holds more tokens than HEATMAP_MAX_COLUMNS. */
START_TEST(test_step_downsampled)
{
	enum { N = 3000 };
	struct cache_trace_slot *slots = calloc(N, sizeof *slots);
	ck_assert_ptr_nonnull(slots);
	for (int i = 0; i < N; i++)
		slots[i] =
		    (struct cache_trace_slot){.stream_index = i,
		                              .tier = i < SINKS ? CACHE_TIER_SINK : CACHE_TIER_HOT,
		                              .mass_max = i < SINKS ? 0.2f : 1e-5f};
	struct cache_trace_layer layer = {.n_slots = N, .slots = slots};
	struct cache_trace_step t = {.stream_pos = N - 1, .n_layers = 1, .layers = &layer};
	char err[SINKD_ERR_LEN] = "";
	struct heatmap_layout l;
	ck_assert_msg(heatmap_step_layout(&t, &l, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(l.n_bins, HEATMAP_MAX_COLUMNS);
	ck_assert_msg(heatmap_step_write(&t, tmp_path("wide.png"), err, sizeof err) == 0, "%s",
	              err);
	struct image im;
	image_read(&im, tmp_path("wide.png"));
	ck_assert_int_eq(im.png.width, l.width);
	ck_assert_int_eq(im.png.height, l.height);
	ck_assert_int_eq(hue_of(cell(&im, &l, 0, 0)), CACHE_TIER_SINK);
	uint8_t floor[3];
	heatmap_shade(CACHE_TIER_HOT, 0.0f, floor); /* below the floor: the darkest */
	ck_assert(rgb_eq(cell(&im, &l, N - 1, 0), floor));
	free(im.px);
	free(slots);
}
END_TEST

START_TEST(test_errors)
{
	struct trace *tr = malloc(sizeof *tr);
	ck_assert_ptr_nonnull(tr);
	trace_at(tr, 99);
	char err[SINKD_ERR_LEN] = "";
	const char *bad = "/nonexistent-heatmap-dir/step.png";
	ck_assert_int_lt(heatmap_step_write(&tr->step, bad, err, sizeof err), 0);
	ck_assert_msg(strstr(err, bad) != NULL, "names the path: %s", err);
	ck_assert_int_ne(access(bad, F_OK), 0);

	struct cache_trace_step none = {.n_layers = 0};
	err[0] = 0;
	ck_assert_int_eq(heatmap_step_write(&none, tmp_path("step.png"), err, sizeof err), -EINVAL);
	ck_assert_msg(strstr(err, "no layers") != NULL, "%s", err);
	ck_assert_int_ne(access(tmp_path("step.png"), F_OK), 0);
	struct heatmap_layout l;
	ck_assert_int_eq(heatmap_step_layout(&none, &l, err, sizeof err), -EINVAL);
	ck_assert_int_eq(heatmap_step_write(NULL, tmp_path("step.png"), err, sizeof err), -EINVAL);

	/* out of stream order, unknown tier, NaN mass */
	tr->slots[1][5].stream_index = 2;
	ck_assert_int_eq(heatmap_step_write(&tr->step, tmp_path("step.png"), err, sizeof err),
	                 -EINVAL);
	ck_assert_msg(strstr(err, "layer 1 slot 5") != NULL, "%s", err);
	trace_at(tr, 99);
	tr->slots[0][0].tier = (enum cache_tier)7;
	ck_assert_int_eq(cache_trace_step_check(&tr->step, err, sizeof err), -EINVAL);
	trace_at(tr, 99);
	tr->slots[3][9].mass_max = nanf("");
	ck_assert_int_eq(cache_trace_step_check(&tr->step, err, sizeof err), -EINVAL);
	tr->slots[3][9].mass_max = 0.1f;
	tr->layers[2].slots = NULL;
	ck_assert_int_eq(cache_trace_step_check(&tr->step, err, sizeof err), -EINVAL);

	/* a layer holding nothing draws an empty plot */
	struct cache_trace_layer empty = {0};
	struct cache_trace_step bare = {.n_layers = 1, .layers = &empty};
	ck_assert_msg(heatmap_step_write(&bare, tmp_path("step.png"), err, sizeof err) == 0, "%s",
	              err);
	unlink(tmp_path("step.png"));

	struct heatmap_lifecycle *h;
	struct heatmap_lifecycle_opts o = {.layer = 7, .max_steps = 2};
	ck_assert_int_eq(heatmap_lifecycle_new(&o, &h, err, sizeof err), 0);
	ck_assert_int_eq(heatmap_lifecycle_write(h, tmp_path("life.png"), err, sizeof err),
	                 -EINVAL); /* nothing added yet */
	trace_at(tr, 99);
	ck_assert_int_eq(heatmap_lifecycle_add_step(h, &tr->step, err, sizeof err), -ERANGE);
	ck_assert_int_eq(heatmap_lifecycle_add_step(h, &none, err, sizeof err), -EINVAL);
	heatmap_lifecycle_free(h);
	o.layer = 0;
	ck_assert_int_eq(heatmap_lifecycle_new(&o, &h, err, sizeof err), 0);
	ck_assert_int_eq(heatmap_lifecycle_add_step(h, &tr->step, err, sizeof err), 0);
	ck_assert_int_eq(heatmap_lifecycle_add_step(h, &tr->step, err, sizeof err), 0);
	ck_assert_int_eq(heatmap_lifecycle_add_step(h, &tr->step, err, sizeof err), -ENOSPC);
	ck_assert_int_eq(heatmap_lifecycle_steps(h), 2);
	ck_assert_int_eq(heatmap_lifecycle_add_step(NULL, &tr->step, err, sizeof err), -EINVAL);
	ck_assert_int_lt(heatmap_lifecycle_write(h, bad, err, sizeof err), 0);
	ck_assert_msg(strstr(err, bad) != NULL, "%s", err);
	heatmap_lifecycle_free(h);
	heatmap_lifecycle_free(NULL);
	o.max_steps = HEATMAP_LIFE_MAX_STEPS + 1;
	ck_assert_int_eq(heatmap_lifecycle_new(&o, &h, err, sizeof err), -EINVAL);
	ck_assert_ptr_null(h);
	free(tr);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("heatmap");
	TCase *tc = tcase_create("heatmap");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_tier_names);
	tcase_add_test(tc, test_shared_sinks);
	tcase_add_test(tc, test_step_image);
	tcase_add_test(tc, test_lifecycle_image);
	tcase_add_test(tc, test_lifecycle_downsampled);
	tcase_add_test(tc, test_step_downsampled);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
