/* Heatmap PNGs of cache traces (cli/heatmap.h): the per-step image and the
 * lifecycle image accumulated over steps, drawn on an RGB canvas with a
 * built-in 5x7 font and written with libpng.  Both images share one frame
 * (title, axes with ticks, legend) whose layout is computed before drawing,
 * so tests and callers can find every part.  It does not collect traces
 * (the engine does) nor choose file names (the eval command does). */
#include "cli/heatmap.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/errbuf.h"

/* ---- palette ------------------------------------------------------------ */

/* Okabe-Ito: distinguishable under the common colour-vision deficiencies;
 * shared sinks (read from a shared prefix) in the warm hue next to the
 * session's own sinks. */
static const uint8_t tier_palette[CACHE_TIER_COUNT][3] = {
    [CACHE_TIER_SINK] = {230, 159, 0},
    [CACHE_TIER_ANCHOR] = {204, 121, 167},
    [CACHE_TIER_COMPRESSED] = {0, 114, 178},
    [CACHE_TIER_HOT] = {0, 158, 115},
    [CACHE_TIER_SHARED] = {213, 94, 0},
};
static const uint8_t page_rgb[3] = {255, 255, 255};
static const uint8_t absent_rgb[3] = {224, 224, 224};
static const uint8_t ink_rgb[3] = {0, 0, 0};
/* Brightness at the mass floor: dark enough to read as "little attention",
 * bright enough that the hue (the tier) is still told apart. */
#define SHADE_MIN 0.25f

/* Precedence when several tokens share a pixel: a lone sink or anchor
 * must not vanish among hundreds of window tokens. */
static const int tier_rank[CACHE_TIER_COUNT] = {[CACHE_TIER_SHARED] = 4,
                                                [CACHE_TIER_SINK] = 4,
                                                [CACHE_TIER_ANCHOR] = 3,
                                                [CACHE_TIER_HOT] = 2,
                                                [CACHE_TIER_COMPRESSED] = 1};

void heatmap_tier_rgb(enum cache_tier tier, uint8_t rgb[3])
{
	const uint8_t *c = (unsigned)tier < CACHE_TIER_COUNT ? tier_palette[tier] : absent_rgb;
	memcpy(rgb, c, 3);
}

void heatmap_absent_rgb(uint8_t rgb[3])
{
	memcpy(rgb, absent_rgb, 3);
}

void heatmap_shade(enum cache_tier tier, float mass, uint8_t rgb[3])
{
	uint8_t c[3];
	heatmap_tier_rgb(tier, c);
	float m = mass > HEATMAP_MASS_FLOOR ? mass : HEATMAP_MASS_FLOOR; /* NaN: the floor */
	if (m > 1.0f)
		m = 1.0f;
	float v = log10f(m / HEATMAP_MASS_FLOOR) / -log10f(HEATMAP_MASS_FLOOR);
	float f = SHADE_MIN + (1.0f - SHADE_MIN) * v;
	for (int k = 0; k < 3; k++)
		rgb[k] = (uint8_t)lrintf((float)c[k] * f);
}

/* ---- 5x7 font: ASCII 32..126, five columns, bit 0 the top row ----------- */

#define GLYPH_W 5
#define GLYPH_H 7
#define TEXT_SCALE 2                        /* pixels per font dot */
#define ADV ((GLYPH_W + 1) * TEXT_SCALE)    /* advance per character */
#define TEXT_H (GLYPH_H * TEXT_SCALE)       /* glyph height */
#define LINE_H ((GLYPH_H + 3) * TEXT_SCALE) /* line pitch */
#define MARGIN 10

static const uint8_t font5x7[95][GLYPH_W] = {
    {0x00, 0x00, 0x00, 0x00, 0x00}, {0x00, 0x00, 0x5F, 0x00, 0x00}, /*   ! */
    {0x00, 0x07, 0x00, 0x07, 0x00}, {0x14, 0x7F, 0x14, 0x7F, 0x14}, /* " # */
    {0x24, 0x2A, 0x7F, 0x2A, 0x12}, {0x23, 0x13, 0x08, 0x64, 0x62}, /* $ % */
    {0x36, 0x49, 0x55, 0x22, 0x50}, {0x00, 0x05, 0x03, 0x00, 0x00}, /* & ' */
    {0x00, 0x1C, 0x22, 0x41, 0x00}, {0x00, 0x41, 0x22, 0x1C, 0x00}, /* ( ) */
    {0x14, 0x08, 0x3E, 0x08, 0x14}, {0x08, 0x08, 0x3E, 0x08, 0x08}, /* * + */
    {0x00, 0x50, 0x30, 0x00, 0x00}, {0x08, 0x08, 0x08, 0x08, 0x08}, /* , - */
    {0x00, 0x60, 0x60, 0x00, 0x00}, {0x20, 0x10, 0x08, 0x04, 0x02}, /* . / */
    {0x3E, 0x51, 0x49, 0x45, 0x3E}, {0x00, 0x42, 0x7F, 0x40, 0x00}, /* 0 1 */
    {0x42, 0x61, 0x51, 0x49, 0x46}, {0x21, 0x41, 0x45, 0x4B, 0x31}, /* 2 3 */
    {0x18, 0x14, 0x12, 0x7F, 0x10}, {0x27, 0x45, 0x45, 0x45, 0x39}, /* 4 5 */
    {0x3C, 0x4A, 0x49, 0x49, 0x30}, {0x01, 0x71, 0x09, 0x05, 0x03}, /* 6 7 */
    {0x36, 0x49, 0x49, 0x49, 0x36}, {0x06, 0x49, 0x49, 0x29, 0x1E}, /* 8 9 */
    {0x00, 0x36, 0x36, 0x00, 0x00}, {0x00, 0x56, 0x36, 0x00, 0x00}, /* : ; */
    {0x08, 0x14, 0x22, 0x41, 0x00}, {0x14, 0x14, 0x14, 0x14, 0x14}, /* < = */
    {0x00, 0x41, 0x22, 0x14, 0x08}, {0x02, 0x01, 0x51, 0x09, 0x06}, /* > ? */
    {0x32, 0x49, 0x79, 0x41, 0x3E}, {0x7E, 0x11, 0x11, 0x11, 0x7E}, /* @ A */
    {0x7F, 0x49, 0x49, 0x49, 0x36}, {0x3E, 0x41, 0x41, 0x41, 0x22}, /* B C */
    {0x7F, 0x41, 0x41, 0x22, 0x1C}, {0x7F, 0x49, 0x49, 0x49, 0x41}, /* D E */
    {0x7F, 0x09, 0x09, 0x09, 0x01}, {0x3E, 0x41, 0x49, 0x49, 0x7A}, /* F G */
    {0x7F, 0x08, 0x08, 0x08, 0x7F}, {0x00, 0x41, 0x7F, 0x41, 0x00}, /* H I */
    {0x20, 0x40, 0x41, 0x3F, 0x01}, {0x7F, 0x08, 0x14, 0x22, 0x41}, /* J K */
    {0x7F, 0x40, 0x40, 0x40, 0x40}, {0x7F, 0x02, 0x0C, 0x02, 0x7F}, /* L M */
    {0x7F, 0x04, 0x08, 0x10, 0x7F}, {0x3E, 0x41, 0x41, 0x41, 0x3E}, /* N O */
    {0x7F, 0x09, 0x09, 0x09, 0x06}, {0x3E, 0x41, 0x51, 0x21, 0x5E}, /* P Q */
    {0x7F, 0x09, 0x19, 0x29, 0x46}, {0x46, 0x49, 0x49, 0x49, 0x31}, /* R S */
    {0x01, 0x01, 0x7F, 0x01, 0x01}, {0x3F, 0x40, 0x40, 0x40, 0x3F}, /* T U */
    {0x1F, 0x20, 0x40, 0x20, 0x1F}, {0x3F, 0x40, 0x38, 0x40, 0x3F}, /* V W */
    {0x63, 0x14, 0x08, 0x14, 0x63}, {0x07, 0x08, 0x70, 0x08, 0x07}, /* X Y */
    {0x61, 0x51, 0x49, 0x45, 0x43}, {0x00, 0x7F, 0x41, 0x41, 0x00}, /* Z [ */
    {0x02, 0x04, 0x08, 0x10, 0x20}, {0x00, 0x41, 0x41, 0x7F, 0x00}, /* \ ] */
    {0x04, 0x02, 0x01, 0x02, 0x04}, {0x40, 0x40, 0x40, 0x40, 0x40}, /* ^ _ */
    {0x00, 0x01, 0x02, 0x04, 0x00}, {0x20, 0x54, 0x54, 0x54, 0x78}, /* ` a */
    {0x7F, 0x48, 0x44, 0x44, 0x38}, {0x38, 0x44, 0x44, 0x44, 0x20}, /* b c */
    {0x38, 0x44, 0x44, 0x48, 0x7F}, {0x38, 0x54, 0x54, 0x54, 0x18}, /* d e */
    {0x08, 0x7E, 0x09, 0x01, 0x02}, {0x0C, 0x52, 0x52, 0x52, 0x3E}, /* f g */
    {0x7F, 0x08, 0x04, 0x04, 0x78}, {0x00, 0x44, 0x7D, 0x40, 0x00}, /* h i */
    {0x20, 0x40, 0x44, 0x3D, 0x00}, {0x7F, 0x10, 0x28, 0x44, 0x00}, /* j k */
    {0x00, 0x41, 0x7F, 0x40, 0x00}, {0x7C, 0x04, 0x18, 0x04, 0x78}, /* l m */
    {0x7C, 0x08, 0x04, 0x04, 0x78}, {0x38, 0x44, 0x44, 0x44, 0x38}, /* n o */
    {0x7C, 0x14, 0x14, 0x14, 0x08}, {0x08, 0x14, 0x14, 0x18, 0x7C}, /* p q */
    {0x7C, 0x08, 0x04, 0x04, 0x08}, {0x48, 0x54, 0x54, 0x54, 0x20}, /* r s */
    {0x04, 0x3F, 0x44, 0x40, 0x20}, {0x3C, 0x40, 0x40, 0x20, 0x7C}, /* t u */
    {0x1C, 0x20, 0x40, 0x20, 0x1C}, {0x3C, 0x40, 0x30, 0x40, 0x3C}, /* v w */
    {0x44, 0x28, 0x10, 0x28, 0x44}, {0x0C, 0x50, 0x50, 0x50, 0x3C}, /* x y */
    {0x44, 0x64, 0x54, 0x4C, 0x44}, {0x00, 0x08, 0x36, 0x41, 0x00}, /* z { */
    {0x00, 0x00, 0x7F, 0x00, 0x00}, {0x00, 0x41, 0x36, 0x08, 0x00}, /* | } */
    {0x08, 0x04, 0x08, 0x10, 0x08},                                 /* ~ */
};

/* ---- canvas ------------------------------------------------------------- */

struct canvas {
	int w, h;
	uint8_t *px; /* (h, w, 3) RGB */
};

static int canvas_init(struct canvas *c, int w, int h, char *err, size_t err_len)
{
	c->w = w;
	c->h = h;
	c->px = malloc((size_t)w * (size_t)h * 3);
	if (!c->px)
		return err_set(err, err_len, -ENOMEM, "no memory for a %dx%d image", w, h);
	for (size_t i = 0; i < (size_t)w * (size_t)h; i++)
		memcpy(c->px + 3 * i, page_rgb, 3);
	return 0;
}

static void fill_rect(struct canvas *c, int x, int y, int w, int h, const uint8_t rgb[3])
{
	int x0 = x < 0 ? 0 : x, y0 = y < 0 ? 0 : y;
	int x1 = x + w > c->w ? c->w : x + w, y1 = y + h > c->h ? c->h : y + h;
	for (int yy = y0; yy < y1; yy++)
		for (int xx = x0; xx < x1; xx++)
			memcpy(c->px + 3 * ((size_t)yy * (size_t)c->w + (size_t)xx), rgb, 3);
}

static int text_w(const char *s)
{
	size_t n = strlen(s);
	return n ? (int)n * ADV - TEXT_SCALE : 0;
}

static void draw_text(struct canvas *c, int x, int y, const char *s, const uint8_t rgb[3])
{
	for (; *s; s++, x += ADV) {
		unsigned ch = (unsigned char)*s;
		const uint8_t *g = font5x7[(ch >= 32 && ch <= 126 ? ch : '?') - 32];
		for (int col = 0; col < GLYPH_W; col++)
			for (int row = 0; row < GLYPH_H; row++)
				if (g[col] >> row & 1)
					fill_rect(c, x + col * TEXT_SCALE, y + row * TEXT_SCALE,
					          TEXT_SCALE, TEXT_SCALE, rgb);
	}
}

/* ---- PNG ---------------------------------------------------------------- */

struct png_fail {
	jmp_buf jump;
	char msg[160];
};

static void png_on_error(png_structp png, png_const_charp msg)
{
	struct png_fail *f = png_get_error_ptr(png);
	snprintf(f->msg, sizeof f->msg, "%s", msg);
	longjmp(f->jump, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
	/* warnings (none for a plain RGB write) must not reach stderr */
}

/* Nothing that changes after setjmp() is read after the jump back. */
static int png_encode(FILE *file, const struct canvas *c, struct png_fail *fail)
{
	png_structp png =
	    png_create_write_struct(PNG_LIBPNG_VER_STRING, fail, png_on_error, png_on_warning);
	if (!png)
		return -ENOMEM;
	png_infop info = png_create_info_struct(png);
	if (!info) {
		png_destroy_write_struct(&png, NULL);
		return -ENOMEM;
	}
	if (setjmp(fail->jump)) {
		png_destroy_write_struct(&png, &info);
		return -EIO;
	}
	png_init_io(png, file);
	png_set_IHDR(png, info, (png_uint_32)c->w, (png_uint_32)c->h, 8, PNG_COLOR_TYPE_RGB,
	             PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_write_info(png, info);
	for (int y = 0; y < c->h; y++)
		png_write_row(png, c->px + (size_t)y * (size_t)c->w * 3);
	png_write_end(png, NULL);
	png_destroy_write_struct(&png, &info);
	return 0;
}

static int canvas_write_png(const struct canvas *c, const char *path, char *err, size_t err_len)
{
	FILE *file = fopen(path, "wb");
	if (!file) {
		int e = errno;
		return err_set(err, err_len, -e, "cannot write %s: %s", path, strerror(e));
	}
	struct png_fail fail = {.msg = ""};
	int rc = png_encode(file, c, &fail);
	int e = 0;
	if (fclose(file) != 0 && rc == 0) {
		e = errno;
		rc = -e;
	}
	if (rc == 0)
		return 0;
	unlink(path); /* no half-written image under the name */
	return err_set(err, err_len, rc, "cannot write %s: %s", path,
	               fail.msg[0] ? fail.msg : strerror(e ? e : -rc));
}

/* ---- the frame: title, axes, legend ------------------------------------- */

struct frame_spec {
	const char *title[2];
	const char *x_caption, *y_caption;
	int64_t n_cols;
	int n_items;
	const char *x_widest, *y_widest; /* the widest tick labels */
	int plot_w_target, max_cell_w;
	int plot_h_target, min_cell_h, max_cell_h;
	bool absent_swatch;       /* lifecycle: a "not resident" swatch */
	const char *ramp_caption; /* step: brightness ramps with this caption; NULL: none */
};

static int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static int maxi(int a, int b)
{
	return a > b ? a : b;
}

#define RAMP_W 256
#define ABSENT_NAME "not resident"

/* Swatches in one row: a square, the name, a gap of three characters. */
static int legend_layout(const struct frame_spec *s, struct heatmap_layout *l, int y)
{
	int x = MARGIN;
	for (int t = 0; t < CACHE_TIER_COUNT; t++) {
		l->swatch[t] = (struct heatmap_rect){x, y, TEXT_H, TEXT_H};
		x += TEXT_H + ADV + text_w(cache_tier_name((enum cache_tier)t)) + 3 * ADV;
	}
	if (s->absent_swatch) {
		l->swatch_absent = (struct heatmap_rect){x, y, TEXT_H, TEXT_H};
		x += TEXT_H + ADV + text_w(ABSENT_NAME) + 3 * ADV;
	}
	int w = x - MARGIN, h = LINE_H;
	if (s->ramp_caption) {
		w = maxi(w, text_w(s->ramp_caption));
		w = maxi(w, text_w("1e-04") + ADV + RAMP_W + ADV + text_w("1"));
		h += 2 * LINE_H;
	}
	l->legend = (struct heatmap_rect){MARGIN, y, w, h};
	return y + h;
}

static void frame_layout(const struct frame_spec *s, struct heatmap_layout *l)
{
	memset(l, 0, sizeof *l);
	l->n_cols = s->n_cols;
	l->n_bins = (int)(s->n_cols < HEATMAP_MAX_COLUMNS ? (s->n_cols > 0 ? s->n_cols : 1)
	                                                  : HEATMAP_MAX_COLUMNS);
	l->n_items = s->n_items;
	l->n_rows =
	    s->n_items < HEATMAP_MAX_ROWS ? (s->n_items > 0 ? s->n_items : 1) : HEATMAP_MAX_ROWS;
	l->cell_w = clampi(s->plot_w_target / l->n_bins, 1, s->max_cell_w);
	l->cell_h = clampi(s->plot_h_target / l->n_rows, s->min_cell_h, s->max_cell_h);
	int title_w = maxi(text_w(s->title[0]), text_w(s->title[1]));
	l->title = (struct heatmap_rect){MARGIN, MARGIN, title_w, 2 * LINE_H};
	int y_lab_w = text_w(s->y_widest); /* the y caption sits on the line above */
	l->plot.x = MARGIN + y_lab_w + 2 * ADV;
	l->plot.y = MARGIN + 3 * LINE_H + TEXT_SCALE * 2; /* title, then the y caption */
	l->plot.w = l->n_bins * l->cell_w;
	l->plot.h = l->n_rows * l->cell_h;
	/* below the plot: tick marks, their labels, the x caption */
	int legend_y = l->plot.y + l->plot.h + 4 * TEXT_SCALE + 2 * LINE_H + LINE_H / 2;
	int bottom = legend_layout(s, l, legend_y);
	int right = l->plot.x + l->plot.w + text_w(s->x_widest);
	right = maxi(right, MARGIN + text_w(s->x_caption));
	right = maxi(right, MARGIN + title_w);
	right = maxi(right, l->legend.x + l->legend.w);
	l->width = right + MARGIN;
	l->height = bottom + MARGIN;
}

static int bin_of(const struct heatmap_layout *l, int64_t col)
{
	if (l->n_cols <= 0 || col < 0)
		return 0;
	if (col >= l->n_cols)
		return l->n_bins - 1;
	return (int)(col * l->n_bins / l->n_cols);
}

static int row_of(const struct heatmap_layout *l, int item)
{
	if (l->n_items <= 0 || item < 0)
		return 0;
	if (item >= l->n_items)
		return l->n_rows - 1;
	return (int)((int64_t)item * l->n_rows / l->n_items);
}

int heatmap_layout_col_x(const struct heatmap_layout *l, int64_t col)
{
	return l->plot.x + bin_of(l, col) * l->cell_w;
}

int heatmap_layout_row_y(const struct heatmap_layout *l, int item)
{
	return l->plot.y + row_of(l, item) * l->cell_h;
}

/* The first token column of a bin and the first item of a row (ceilings
 * of the inverse of bin_of / row_of). */
static int64_t bin_first_col(const struct heatmap_layout *l, int b)
{
	return ((int64_t)b * l->n_cols + l->n_bins - 1) / l->n_bins;
}

static int row_first_item(const struct heatmap_layout *l, int r)
{
	return (int)(((int64_t)r * l->n_items + l->n_rows - 1) / l->n_rows);
}

/* Tick labels: x_vals[col] (NULL: col itself), y_vals[item] (NULL: item). */
struct frame_labels {
	const int64_t *x_vals;
	const uint64_t *y_vals;
};

static void draw_x_ticks(struct canvas *c, const struct heatmap_layout *l,
                         const struct frame_spec *s, const struct frame_labels *lab)
{
	int every = (text_w(s->x_widest) + 2 * ADV + l->cell_w - 1) / l->cell_w;
	int y = l->plot.y + l->plot.h;
	char buf[32];
	for (int b = 0; b < l->n_bins && l->n_cols > 0; b += every) {
		int64_t col = bin_first_col(l, b);
		int x = l->plot.x + b * l->cell_w;
		fill_rect(c, x, y, TEXT_SCALE, 3 * TEXT_SCALE, ink_rgb);
		snprintf(buf, sizeof buf, "%lld",
		         (long long)(lab->x_vals ? lab->x_vals[col] : col));
		draw_text(c, x, y + 4 * TEXT_SCALE, buf, ink_rgb);
	}
	draw_text(c, l->plot.x, y + 4 * TEXT_SCALE + LINE_H, s->x_caption, ink_rgb);
}

static void draw_y_ticks(struct canvas *c, const struct heatmap_layout *l,
                         const struct frame_spec *s, const struct frame_labels *lab)
{
	int every = (LINE_H + l->cell_h - 1) / l->cell_h;
	char buf[32];
	for (int r = 0; r < l->n_rows && l->n_items > 0; r += every) {
		int item = row_first_item(l, r);
		snprintf(buf, sizeof buf, "%llu",
		         (unsigned long long)(lab->y_vals ? lab->y_vals[item] : (uint64_t)item));
		int y = l->plot.y + r * l->cell_h + (l->cell_h - TEXT_H) / 2;
		if (y < l->plot.y)
			y = l->plot.y;
		draw_text(c, l->plot.x - ADV - text_w(buf), y, buf, ink_rgb);
	}
	draw_text(c, MARGIN, l->plot.y - LINE_H, s->y_caption, ink_rgb);
}

static void draw_legend(struct canvas *c, const struct heatmap_layout *l,
                        const struct frame_spec *s)
{
	for (int t = 0; t < CACHE_TIER_COUNT; t++) {
		const struct heatmap_rect *r = &l->swatch[t];
		fill_rect(c, r->x, r->y, r->w, r->h, tier_palette[t]);
		draw_text(c, r->x + r->w + ADV, r->y, cache_tier_name((enum cache_tier)t), ink_rgb);
	}
	if (s->absent_swatch) {
		const struct heatmap_rect *r = &l->swatch_absent;
		fill_rect(c, r->x - 1, r->y - 1, r->w + 2, r->h + 2, ink_rgb); /* grey on white */
		fill_rect(c, r->x, r->y, r->w, r->h, absent_rgb);
		draw_text(c, r->x + r->w + ADV, r->y, ABSENT_NAME, ink_rgb);
	}
	if (!s->ramp_caption)
		return;
	int y = l->legend.y + LINE_H;
	draw_text(c, MARGIN, y, s->ramp_caption, ink_rgb);
	y += LINE_H;
	draw_text(c, MARGIN, y, "1e-04", ink_rgb);
	int x = MARGIN + text_w("1e-04") + ADV;
	int band = TEXT_H / CACHE_TIER_COUNT;
	for (int i = 0; i < RAMP_W; i++) {
		/* log scale: column i shows mass floor^(1 - i/(RAMP_W-1)) */
		float mass = powf(HEATMAP_MASS_FLOOR, 1.0f - (float)i / (RAMP_W - 1));
		for (int t = 0; t < CACHE_TIER_COUNT; t++) {
			uint8_t rgb[3];
			heatmap_shade((enum cache_tier)t, mass, rgb);
			fill_rect(c, x + i, y + t * band, 1, band, rgb);
		}
	}
	draw_text(c, x + RAMP_W + ADV, y, "1", ink_rgb);
}

static void draw_frame(struct canvas *c, const struct heatmap_layout *l, const struct frame_spec *s,
                       const struct frame_labels *lab)
{
	draw_text(c, l->title.x, l->title.y, s->title[0], ink_rgb);
	draw_text(c, l->title.x, l->title.y + LINE_H, s->title[1], ink_rgb);
	fill_rect(c, l->plot.x, l->plot.y, l->plot.w, l->plot.h, absent_rgb);
	draw_x_ticks(c, l, s, lab);
	draw_y_ticks(c, l, s, lab);
	draw_legend(c, l, s);
}

static void geometry_line(const struct cache_trace_geometry *g, int n_layers, char *buf, size_t len)
{
	char quant[48];
	if (g->quant_bits > 0)
		snprintf(quant, sizeof quant, "int%d, %d full-precision recent", g->quant_bits,
		         g->full_precision_recent);
	else
		snprintf(quant, sizeof quant, "full precision");
	snprintf(buf, len, "sinks %d, window %d (%s), anchors %d, %d layers", g->sink_keep_count,
	         g->window_size, quant, g->anchor_max, n_layers);
}

/* ---- the step image ----------------------------------------------------- */

_Static_assert(HEATMAP_MAX_LAYERS <= HEATMAP_MAX_ROWS, "a step image draws one row per layer");

static const char *const mass_caption[] = {
    [HEATMAP_MASS_MAX] = "brightness: attention mass, max over heads (log scale)",
    [HEATMAP_MASS_MEAN] = "brightness: attention mass, mean over heads (log scale)",
    [HEATMAP_MASS_EMA] = "brightness: moving average of max mass (log scale)",
};

struct step_plan {
	struct frame_spec spec;
	struct heatmap_layout layout;
	int64_t *cols; /* (n_cols) the distinct stream indices of all layers, ascending */
	char title[2][200];
	char x_widest[24], y_widest[24];
};

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The union of the layers' stream indices: the step image's columns. */
static int step_columns(const struct cache_trace_step *t, struct step_plan *p, char *err,
                        size_t err_len)
{
	size_t total = 0;
	for (int l = 0; l < t->n_layers; l++)
		total += (size_t)t->layers[l].n_slots;
	p->cols = malloc((total ? total : 1) * sizeof *p->cols);
	if (!p->cols)
		return err_set(err, err_len, -ENOMEM, "no memory for %zu trace slots", total);
	size_t n = 0;
	for (int l = 0; l < t->n_layers; l++)
		for (int i = 0; i < t->layers[l].n_slots; i++)
			p->cols[n++] = t->layers[l].slots[i].stream_index;
	qsort(p->cols, n, sizeof *p->cols, cmp_i64);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (u == 0 || p->cols[i] != p->cols[u - 1])
			p->cols[u++] = p->cols[i];
	p->spec.n_cols = (int64_t)u;
	return 0;
}

static int step_plan_build(const struct cache_trace_step *t, enum heatmap_mass mass,
                           struct step_plan *p, char *err, size_t err_len)
{
	memset(p, 0, sizeof *p);
	int rc = cache_trace_step_check(t, err, err_len);
	if (rc)
		return rc;
	if (t->n_layers > HEATMAP_MAX_LAYERS)
		return err_set(err, err_len, -E2BIG, "cache trace has %d layers, at most %d drawn",
		               t->n_layers, HEATMAP_MAX_LAYERS);
	if ((unsigned)mass > HEATMAP_MASS_EMA)
		return err_set(err, err_len, -EINVAL, "unknown mass kind %d", (int)mass);
	rc = step_columns(t, p, err, err_len);
	if (rc)
		return rc;
	snprintf(p->title[0], sizeof p->title[0],
	         "sinkd KV cache: step %llu, query at stream index %lld",
	         (unsigned long long)t->step, (long long)t->stream_pos);
	geometry_line(&t->geometry, t->n_layers, p->title[1], sizeof p->title[1]);
	snprintf(p->x_widest, sizeof p->x_widest, "%lld",
	         (long long)(p->spec.n_cols ? p->cols[p->spec.n_cols - 1] : 0));
	snprintf(p->y_widest, sizeof p->y_widest, "%d", t->n_layers - 1);
	p->spec.title[0] = p->title[0];
	p->spec.title[1] = p->title[1];
	p->spec.x_caption = "resident tokens in stream order (ticks: stream index)";
	p->spec.y_caption = "layer";
	p->spec.n_items = t->n_layers;
	p->spec.x_widest = p->x_widest;
	p->spec.y_widest = p->y_widest;
	p->spec.plot_w_target = 1024;
	p->spec.max_cell_w = 12;
	p->spec.plot_h_target = 512;
	p->spec.min_cell_h = 2;
	p->spec.max_cell_h = 16;
	p->spec.ramp_caption = mass_caption[mass];
	frame_layout(&p->spec, &p->layout);
	return 0;
}

int heatmap_step_layout(const struct cache_trace_step *t, struct heatmap_layout *out, char *err,
                        size_t err_len)
{
	struct step_plan p;
	int rc = step_plan_build(t, HEATMAP_MASS_MAX, &p, err, err_len);
	if (rc == 0)
		*out = p.layout;
	free(p.cols);
	return rc;
}

static float slot_mass(const struct cache_trace_slot *s, enum heatmap_mass mass)
{
	return mass == HEATMAP_MASS_MEAN  ? s->mass_mean
	       : mass == HEATMAP_MASS_EMA ? s->mass_ema
	                                  : s->mass_max;
}

/* One layer's row: per pixel column the slot of most mass among those
 * that fall into it (all of them when nothing is downsampled). */
static void step_paint_layer(struct canvas *c, const struct step_plan *p,
                             const struct cache_trace_layer *ly, int layer, enum heatmap_mass mass,
                             const struct cache_trace_slot **best)
{
	const struct heatmap_layout *l = &p->layout;
	for (int b = 0; b < l->n_bins; b++)
		best[b] = NULL;
	for (int i = 0; i < ly->n_slots; i++) {
		const struct cache_trace_slot *s = &ly->slots[i];
		const int64_t *at =
		    bsearch(&s->stream_index, p->cols, (size_t)l->n_cols, sizeof *p->cols, cmp_i64);
		int b = bin_of(l, at - p->cols);
		if (!best[b] || slot_mass(s, mass) > slot_mass(best[b], mass))
			best[b] = s;
	}
	int y = heatmap_layout_row_y(l, layer);
	for (int b = 0; b < l->n_bins; b++) {
		if (!best[b])
			continue;
		uint8_t rgb[3];
		heatmap_shade(best[b]->tier, slot_mass(best[b], mass), rgb);
		fill_rect(c, l->plot.x + b * l->cell_w, y, l->cell_w, l->cell_h, rgb);
	}
}

int heatmap_step_write_mass(const struct cache_trace_step *t, enum heatmap_mass mass,
                            const char *path, char *err, size_t err_len)
{
	struct step_plan p;
	struct canvas c = {0};
	const struct cache_trace_slot **best = NULL;
	int rc = step_plan_build(t, mass, &p, err, err_len);
	if (rc)
		goto out;
	rc = canvas_init(&c, p.layout.width, p.layout.height, err, err_len);
	if (rc)
		goto out;
	best = malloc((size_t)p.layout.n_bins * sizeof *best);
	if (!best) {
		rc = err_set(err, err_len, -ENOMEM, "no memory for the step image");
		goto out;
	}
	struct frame_labels lab = {.x_vals = p.cols};
	draw_frame(&c, &p.layout, &p.spec, &lab);
	/* one plot row per layer: HEATMAP_MAX_LAYERS <= HEATMAP_MAX_ROWS */
	for (int l = 0; l < t->n_layers; l++)
		step_paint_layer(&c, &p, &t->layers[l], l, mass, best);
	rc = canvas_write_png(&c, path, err, err_len);
out:
	free(best);
	free(c.px);
	free(p.cols);
	return rc;
}

int heatmap_step_write(const struct cache_trace_step *t, const char *path, char *err,
                       size_t err_len)
{
	return heatmap_step_write_mass(t, HEATMAP_MASS_MAX, path, err, err_len);
}

/* ---- the lifecycle image ------------------------------------------------ */

/* Consecutive stream indices of one tier in one step. */
struct life_run {
	int64_t start;
	int32_t len;
	int32_t tier;
};

struct life_slot {
	int64_t stream_index;
	int32_t rank; /* tier_rank of its tier */
	int32_t tier;
};

struct heatmap_lifecycle {
	int layer; /* -1: all layers */
	int max_steps;
	size_t max_runs;
	int n_steps;
	uint64_t *step_id;     /* (max_steps) each step's number, for the y ticks */
	size_t *run_first;     /* (max_steps + 1) step i's runs: [run_first[i], run_first[i+1]) */
	struct life_run *runs; /* (cap_runs), grown up to max_runs */
	size_t n_runs, cap_runs;
	int64_t n_stream;                     /* largest stream index seen + 1 */
	struct cache_trace_geometry geometry; /* the first step's */
	int n_layers;
	struct life_slot *scratch; /* (cap_scratch) one step's slots, merged */
	size_t cap_scratch;
};

int heatmap_lifecycle_new(const struct heatmap_lifecycle_opts *opts, struct heatmap_lifecycle **out,
                          char *err, size_t err_len)
{
	struct heatmap_lifecycle_opts o =
	    opts ? *opts : (struct heatmap_lifecycle_opts){.layer = -1};
	*out = NULL;
	if (o.max_steps == 0)
		o.max_steps = HEATMAP_LIFE_DEFAULT_STEPS;
	if (o.max_steps < 0 || o.max_steps > HEATMAP_LIFE_MAX_STEPS)
		return err_set(err, err_len, -EINVAL, "lifecycle max_steps %d: allowed 1..%d",
		               o.max_steps, HEATMAP_LIFE_MAX_STEPS);
	if (o.layer < -1)
		return err_set(err, err_len, -EINVAL, "lifecycle layer %d: a layer, or -1 for all",
		               o.layer);
	struct heatmap_lifecycle *h = calloc(1, sizeof *h);
	if (!h)
		goto nomem;
	h->layer = o.layer;
	h->max_steps = o.max_steps;
	h->max_runs = (size_t)o.max_steps * HEATMAP_LIFE_RUNS_PER_STEP;
	h->step_id = calloc((size_t)o.max_steps, sizeof *h->step_id);
	h->run_first = calloc((size_t)o.max_steps + 1, sizeof *h->run_first);
	if (!h->step_id || !h->run_first)
		goto nomem;
	*out = h;
	return 0;
nomem:
	heatmap_lifecycle_free(h);
	return err_set(err, err_len, -ENOMEM, "no memory for a lifecycle of %d steps", o.max_steps);
}

void heatmap_lifecycle_free(struct heatmap_lifecycle *h)
{
	if (!h)
		return;
	free(h->step_id);
	free(h->run_first);
	free(h->runs);
	free(h->scratch);
	free(h);
}

int heatmap_lifecycle_steps(const struct heatmap_lifecycle *h)
{
	return h ? h->n_steps : 0;
}

static int cmp_life_slot(const void *a, const void *b)
{
	const struct life_slot *x = a, *y = b;
	if (x->stream_index != y->stream_index)
		return (x->stream_index > y->stream_index) - (x->stream_index < y->stream_index);
	return y->rank - x->rank; /* the strongest tier first */
}

/* The step's slots of the shown layer(s) in h->scratch, sorted; how many. */
static int life_gather(struct heatmap_lifecycle *h, const struct cache_trace_step *t, size_t *n,
                       char *err, size_t err_len)
{
	int l0 = h->layer < 0 ? 0 : h->layer, l1 = h->layer < 0 ? t->n_layers : h->layer + 1;
	size_t total = 0;
	for (int l = l0; l < l1; l++)
		total += (size_t)t->layers[l].n_slots;
	if (total > h->cap_scratch) {
		struct life_slot *s = realloc(h->scratch, total * sizeof *s);
		if (!s)
			return err_set(err, err_len, -ENOMEM, "no memory for %zu trace slots",
			               total);
		h->scratch = s;
		h->cap_scratch = total;
	}
	*n = 0;
	for (int l = l0; l < l1; l++)
		for (int i = 0; i < t->layers[l].n_slots; i++) {
			const struct cache_trace_slot *s = &t->layers[l].slots[i];
			if (s->stream_index >= HEATMAP_LIFE_MAX_STREAM)
				return err_set(
				    err, err_len, -ERANGE,
				    "layer %d: stream index %lld past the lifecycle's %lld", l,
				    (long long)s->stream_index, (long long)HEATMAP_LIFE_MAX_STREAM);
			h->scratch[(*n)++] = (struct life_slot){s->stream_index, tier_rank[s->tier],
			                                        (int32_t)s->tier};
		}
	if (l1 - l0 > 1)
		qsort(h->scratch, *n, sizeof *h->scratch, cmp_life_slot);
	return 0;
}

/* Runs of the sorted slots (a duplicate index keeps its first, strongest
 * tier) into out, or only counted when out is NULL. */
static size_t life_runs(const struct life_slot *s, size_t n, struct life_run *out)
{
	size_t k = 0;
	struct life_run cur = {0};
	for (size_t i = 0; i < n; i++) {
		if (i && s[i].stream_index == s[i - 1].stream_index)
			continue;
		if (k && cur.tier == s[i].tier && cur.start + cur.len == s[i].stream_index &&
		    cur.len < INT32_MAX) {
			cur.len++;
			continue;
		}
		if (k && out)
			out[k - 1] = cur;
		cur = (struct life_run){s[i].stream_index, 1, s[i].tier};
		k++;
	}
	if (k && out)
		out[k - 1] = cur;
	return k;
}

static int life_reserve(struct heatmap_lifecycle *h, size_t more, char *err, size_t err_len)
{
	if (h->n_runs + more > h->max_runs)
		return err_set(err, err_len, -ENOSPC,
		               "lifecycle full: %zu tier runs at most (%d steps x %d)", h->max_runs,
		               h->max_steps, HEATMAP_LIFE_RUNS_PER_STEP);
	if (h->n_runs + more <= h->cap_runs)
		return 0;
	size_t cap = h->cap_runs ? h->cap_runs * 2 : 1024;
	while (cap < h->n_runs + more)
		cap *= 2;
	if (cap > h->max_runs)
		cap = h->max_runs;
	struct life_run *r = realloc(h->runs, cap * sizeof *r);
	if (!r)
		return err_set(err, err_len, -ENOMEM, "no memory for %zu tier runs", cap);
	h->runs = r;
	h->cap_runs = cap;
	return 0;
}

int heatmap_lifecycle_add_step(struct heatmap_lifecycle *h, const struct cache_trace_step *t,
                               char *err, size_t err_len)
{
	if (!h)
		return err_set(err, err_len, -EINVAL, "no lifecycle");
	int rc = cache_trace_step_check(t, err, err_len);
	if (rc)
		return rc;
	if (h->layer >= t->n_layers)
		return err_set(err, err_len, -ERANGE, "lifecycle shows layer %d, the trace has %d",
		               h->layer, t->n_layers);
	if (h->n_steps == h->max_steps)
		return err_set(err, err_len, -ENOSPC, "lifecycle full: %d steps at most",
		               h->max_steps);
	size_t n = 0;
	rc = life_gather(h, t, &n, err, err_len);
	if (rc)
		return rc;
	/* counting first: a step that does not fit leaves nothing behind */
	rc = life_reserve(h, life_runs(h->scratch, n, NULL), err, err_len);
	if (rc)
		return rc;
	size_t made = life_runs(h->scratch, n, h->runs + h->n_runs);
	h->n_runs += made;
	if (n && h->scratch[n - 1].stream_index + 1 > h->n_stream)
		h->n_stream = h->scratch[n - 1].stream_index + 1;
	if (h->n_steps == 0) {
		h->geometry = t->geometry;
		h->n_layers = t->n_layers;
	}
	h->step_id[h->n_steps++] = t->step;
	h->run_first[h->n_steps] = h->n_runs;
	return 0;
}

struct life_plan {
	struct frame_spec spec;
	struct heatmap_layout layout;
	char title[2][200];
	char x_widest[24], y_widest[24];
};

static int life_plan_build(const struct heatmap_lifecycle *h, struct life_plan *p, char *err,
                           size_t err_len)
{
	memset(p, 0, sizeof *p);
	if (!h || h->n_steps == 0)
		return err_set(err, err_len, -EINVAL, "lifecycle has no steps to draw");
	char layer[32];
	if (h->layer < 0)
		snprintf(layer, sizeof layer, "all layers");
	else
		snprintf(layer, sizeof layer, "layer %d", h->layer);
	snprintf(p->title[0], sizeof p->title[0],
	         "sinkd KV cache lifecycle: steps %llu-%llu (%d drawn), %s",
	         (unsigned long long)h->step_id[0], (unsigned long long)h->step_id[h->n_steps - 1],
	         h->n_steps, layer);
	geometry_line(&h->geometry, h->n_layers, p->title[1], sizeof p->title[1]);
	snprintf(p->x_widest, sizeof p->x_widest, "%lld", (long long)(h->n_stream - 1));
	uint64_t widest = 0;
	for (int i = 0; i < h->n_steps; i++)
		widest = h->step_id[i] > widest ? h->step_id[i] : widest;
	snprintf(p->y_widest, sizeof p->y_widest, "%llu", (unsigned long long)widest);
	p->spec.title[0] = p->title[0];
	p->spec.title[1] = p->title[1];
	p->spec.x_caption = "stream index";
	p->spec.y_caption = "step";
	p->spec.n_cols = h->n_stream;
	p->spec.n_items = h->n_steps;
	p->spec.x_widest = p->x_widest;
	p->spec.y_widest = p->y_widest;
	p->spec.plot_w_target = 1024;
	p->spec.max_cell_w = 4;
	p->spec.plot_h_target = 768;
	p->spec.min_cell_h = 1;
	p->spec.max_cell_h = 4;
	p->spec.absent_swatch = true;
	frame_layout(&p->spec, &p->layout);
	return 0;
}

int heatmap_lifecycle_layout(const struct heatmap_lifecycle *h, struct heatmap_layout *out,
                             char *err, size_t err_len)
{
	struct life_plan p;
	int rc = life_plan_build(h, &p, err, err_len);
	if (rc == 0)
		*out = p.layout;
	return rc;
}

/* grid: (n_rows, n_bins) tier + 1 of the strongest token in each cell, 0: none. */
static void life_fill_grid(const struct heatmap_lifecycle *h, const struct heatmap_layout *l,
                           uint8_t *grid)
{
	for (int s = 0; s < h->n_steps; s++) {
		uint8_t *row = grid + (size_t)row_of(l, s) * (size_t)l->n_bins;
		for (size_t r = h->run_first[s]; r < h->run_first[s + 1]; r++) {
			const struct life_run *run = &h->runs[r];
			int b1 = bin_of(l, run->start + run->len - 1);
			for (int b = bin_of(l, run->start); b <= b1; b++)
				if (!row[b] || tier_rank[row[b] - 1] < tier_rank[run->tier])
					row[b] = (uint8_t)(run->tier + 1);
		}
	}
}

int heatmap_lifecycle_write(const struct heatmap_lifecycle *h, const char *path, char *err,
                            size_t err_len)
{
	struct life_plan p;
	struct canvas c = {0};
	uint8_t *grid = NULL;
	int rc = life_plan_build(h, &p, err, err_len);
	if (rc)
		goto out;
	const struct heatmap_layout *l = &p.layout;
	rc = canvas_init(&c, l->width, l->height, err, err_len);
	if (rc)
		goto out;
	grid = calloc((size_t)l->n_rows * (size_t)l->n_bins, 1);
	if (!grid) {
		rc = err_set(err, err_len, -ENOMEM, "no memory for the lifecycle image");
		goto out;
	}
	struct frame_labels lab = {.y_vals = h->step_id};
	draw_frame(&c, l, &p.spec, &lab);
	life_fill_grid(h, l, grid);
	for (int r = 0; r < l->n_rows; r++)
		for (int b = 0; b < l->n_bins; b++) {
			uint8_t code = grid[(size_t)r * (size_t)l->n_bins + (size_t)b];
			if (code)
				fill_rect(&c, l->plot.x + b * l->cell_w, l->plot.y + r * l->cell_h,
				          l->cell_w, l->cell_h, tier_palette[code - 1]);
		}
	rc = canvas_write_png(&c, path, err, err_len);
out:
	free(grid);
	free(c.px);
	return rc;
}
