/* The tier policy against a reference written here: each tier a list of
 * stream indices, moved as the cache is meant to (a sink is one of the first
 * S tokens; the window evicts its oldest token; the oldest hot token ages to
 * staging; G-1 staged tokens and the oldest hot one become a group; a
 * revision drops the newest full-precision tokens).  Random appends and
 * revisions over several geometries; after every step the counts match the
 * reference's lists and the step's moves say what the lists did. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/tierpolicy.h"
#include "testutil.h"

#define MAXT 4096

struct ref {
	uint64_t next;
	int n_sink;
	uint64_t win[MAXT]; /* window tokens, oldest first */
	int n_win;
	int n_grouped; /* of them, the oldest ones quantized in groups (rows of groups) */
	int grp_first; /* rows of the oldest group already evicted */
	int n_stage;
};

static struct cache_geometry geometry(int sinks, int window, bool quant, int hot)
{
	return (struct cache_geometry){.n_layers = 1,
	                                   .n_kv_heads = 1,
	                                   .head_dim = 8,
	                                   .rope_dim = 8,
	                                   .rope_theta = 10000.0,
	                                   .strategy = CACHE_STRATEGY_SLIDING_WINDOW,
	                                   .sink_keep_count = sinks,
	                                   .window_size = window,
	                                   .max_context_length = 64,
	                                   .quant_enabled = quant,
	                                   .quant_bits = 8,
	                                   .protect_sinks = true,
	                                   .full_precision_recent = hot,
	                                   .dtype = KV_DTYPE_F32};
}

static void ref_check(const struct tier_caps *c, const struct ref *r, const struct tier_counts *n)
{
	ck_assert_uint_eq(n->n_seen, r->next);
	ck_assert_int_eq(n->n_sink, r->n_sink);
	ck_assert_int_eq(tier_window(c, n), r->n_win);
	int hot = r->n_win - r->n_grouped - r->n_stage;
	ck_assert_int_eq(n->n_hot, hot);
	ck_assert_int_eq(n->n_stage, r->n_stage);
	ck_assert_int_eq(n->n_groups * c->group - n->grp_dropped, r->n_grouped);
	ck_assert_int_eq(n->grp_dropped, r->grp_first);
	ck_assert_int_le(r->n_win, c->window);
	ck_assert_int_le(hot, c->hot);
	/* the window is the newest tokens since the sinks, in order */
	for (int i = 1; i < r->n_win; i++)
		ck_assert_uint_eq(r->win[i], r->win[i - 1] + 1);
	if (r->n_win)
		ck_assert_uint_eq(r->win[r->n_win - 1], r->next - 1);
}

static void ref_append(const struct tier_caps *c, struct ref *r, const struct tier_step *st)
{
	uint64_t t = r->next++;
	if ((uint64_t)r->n_sink == t && r->n_sink < c->sink) {
		ck_assert(st->to_sink);
		ck_assert_int_eq(st->sink_slot, r->n_sink);
		r->n_sink++;
		return;
	}
	ck_assert(!st->to_sink);
	enum tier_evict want_evict = TIER_EVICT_NONE;
	if (r->n_win == c->window) {
		memmove(r->win, r->win + 1, (size_t)(r->n_win - 1) * sizeof(uint64_t));
		r->n_win--;
		if (r->n_grouped > 0) {
			r->n_grouped--;
			want_evict =
			    ++r->grp_first == c->group ? TIER_EVICT_GROUP : TIER_EVICT_GROUP_ROW;
			if (r->grp_first == c->group)
				r->grp_first = 0;
		} else if (r->n_stage > 0) {
			r->n_stage--;
			want_evict = TIER_EVICT_STAGED;
		} else {
			want_evict = TIER_EVICT_HOT;
		}
	}
	ck_assert_int_eq(st->evict, want_evict);
	enum tier_age want_age = TIER_AGE_NONE;
	if (r->n_win - r->n_grouped - r->n_stage == c->hot) {
		if (c->group > 0 && r->n_stage == c->group - 1) {
			r->n_grouped += c->group;
			r->n_stage = 0;
			want_age = TIER_AGE_FLUSH;
		} else {
			r->n_stage++;
			want_age = TIER_AGE_STAGE;
		}
	}
	ck_assert_int_eq(st->age, want_age);
	ck_assert_int_eq(st->hot_index, r->n_win - r->n_grouped - r->n_stage);
	r->win[r->n_win++] = t;
}

START_TEST(test_against_reference)
{
	const struct cache_geometry gs[] = {
	    geometry(4, 60, true, 8),   geometry(0, 60, true, 0),   geometry(2, 17, true, 1),
	    geometry(4, 40, false, 40), geometry(1, 100, true, 36), geometry(6, 7, true, 7),
	};
	srand(7);
	for (size_t k = 0; k < sizeof(gs) / sizeof(gs[0]); k++) {
		struct cache_tiers t;
		struct tier_caps c;
		char err[256];
		ck_assert_int_eq(cache_geometry_tiers_of(&gs[k], &t, err, sizeof(err)), 0);
		tier_caps_of(&gs[k], &t, &c);
		struct tier_counts n = {0};
		static struct ref r;
		memset(&r, 0, sizeof(r));
		for (int i = 0; i < 8000; i++) {
			if (rand() % 8 == 0) {
				size_t drop = (size_t)(rand() % 6);
				int most = tier_revisable(&n);
				int rc = tier_revise(&c, &n, drop, err, sizeof(err));
				ck_assert_int_eq(rc, drop > (size_t)most ? -ERANGE : 0);
				if (rc == 0) {
					int hot = r.n_win - r.n_grouped - r.n_stage;
					int from_hot = (int)drop < hot ? (int)drop : hot;
					r.n_stage -= (int)drop - from_hot;
					r.n_win -= (int)drop;
					r.next -= drop;
				} else {
					ck_assert_ptr_nonnull(strstr(err, "can revise at most"));
				}
			} else {
				struct tier_step st;
				ck_assert(tier_can_append(&c, &n, 1));
				tier_step(&c, &n, &st);
				ck_assert_uint_eq(st.key_pos, r.next);
				ref_append(&c, &r, &st);
			}
			ref_check(&c, &r, &n);
			ck_assert_uint_eq(tier_sink_query_pos(&gs[k], &c, &n, 0),
			                  (uint64_t)(r.n_sink + r.n_win) - 1);
		}
	}
}
END_TEST

START_TEST(test_full_refuses)
{
	struct cache_geometry g = geometry(2, 60, false, 0);
	g.strategy = CACHE_STRATEGY_FULL;
	g.max_context_length = 10;
	struct cache_tiers t;
	struct tier_caps c;
	ck_assert_int_eq(cache_geometry_tiers_of(&g, &t, NULL, 0), 0);
	tier_caps_of(&g, &t, &c);
	struct tier_counts n = {0};
	ck_assert(tier_can_append(&c, &n, 10));
	ck_assert(!tier_can_append(&c, &n, 11));
	for (int i = 0; i < 10; i++) {
		struct tier_step st;
		tier_step(&c, &n, &st);
		ck_assert_int_eq(st.evict, TIER_EVICT_NONE);
	}
	ck_assert(!tier_can_append(&c, &n, 1));
	ck_assert_int_eq(tier_resident(&c, &n), 10);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tierpolicy");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_against_reference);
	tcase_add_test(tc, test_full_refuses);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
