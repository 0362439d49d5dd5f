/* One engine tick: set up newly admitted requests (backend session, revise,
 * the tokens to feed), build one batch, run one forward pass, sample each
 * session's next token, run the streaming detokenizer and the stop matcher,
 * and deliver events.  Runs on the engine thread only; takes the scheduler
 * lock only for short bookkeeping.  Admission and the session table live in
 * scheduler.c.  The engine's other jobs between two ticks (snapshot
 * exports, cache traces) are handed from here to their parts.
 *
 * Batch policy (fairness): every decoding session first gets its one token.
 * The rest of max_batch_tokens is shared among prefilling sessions
 * round-robin: each gets an equal share of what is left (leftovers of short
 * prompts pass on to the next), capped at the session's window so a chunk
 * never evicts its own tokens, and the first session served rotates every
 * tick.  When rows are fewer than candidates, decoders take turns (the
 * least recently served first: each waits at most ceil(decoders / rows)
 * ticks) and prompts go in the order they were submitted (a prompt waits
 * only for older ones; rows shared among all waiting prompts finish them
 * all late, together, and leave the batches short of decoders meanwhile).
 *
 * Crowding: when the decoders (those held by flow control included) would
 * leave prompts fewer than the pacing's share of max_batch_tokens rows (at
 * least one), decoders get at most max_batch_tokens minus that share and
 * prompts the rest.  Without it, once as many streams decode as a batch has
 * rows, a new request got no prompt row until a stream finished; with it,
 * every admitted request reaches its first token within a bounded number
 * of ticks, and the decoders beyond the batch take turns.  A batch of one
 * row alternates between the two.
 *
 * Pacing: while any session decodes, sched_pace.c caps the prefill share
 * of a batch (the top of that file).
 *
 * Flow control: a decoding request whose consumer reports
 * scheduler.max_unsent_tokens or more tokens it has not taken yet (a client
 * reading slower than we generate, or a model so small that the engine
 * outruns the network path on shared cores) sits out the tick; the others
 * go on.  Its tokens thus wait in the model, not in a queue per connection,
 * and the CPU time goes to the requests whose clients keep up (and to the
 * threads that write to the clients).  When every decoder sits out, the
 * engine thread sleeps until a consumer takes tokens (scheduler_kick).
 *
 * Persistent sessions keep the stream's last token un-fed ("pending"): a
 * later request starts by feeding it, which yields the logits to continue
 * from; a revise that reaches it just drops it. */
#include "sched/scheduler_impl.h"
#include "sched/sched_views.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/stopstr.h"
#include "grammar/grammar.h"
#include "util/errbuf.h"
#include "util/log.h"
#include "util/sderr.h"
#include "util/tuning.h"

/* r's stream as the perplexity monitor sees it (r has a session). */
static struct sched_monitor_stream req_monitor_stream(struct sched_req *r)
{
	return (struct sched_monitor_stream){
	    .ppl = &r->sess->ppl,
	    .first_window = cache_geometry_global_capacity_tokens(&r->sess->geom),
	    .session_id = r->sess->id,
	    .request_id = r->rid};
}

/* ---- request and session lifetime ------------------------------------- */

void sched_req_free(struct sched_req *r)
{
	if (!r)
		return;
	free(r->req.prompt_ids);
	for (size_t i = 0; i < r->req.n_stops; i++)
		free(r->req.stops[i]);
	free(r->req.stops);
	free(r->req.logit_bias);
	grammar_unref(r->req.grammar);
	sampler_free(r->sampler);
	stop_matcher_free(r->stop);
	grammar_matcher_free(r->gm);
	free(r->text);
	free(r->feed);
	free(r);
}

void sched_session_release(struct scheduler *s, struct sched_session *ss)
{
	if (ss->bs)
		s->be->ops->session_free(s->be, ss->bs);
	ss->bs = NULL;
	sched_share_release(s, ss); /* after the session that read its rows */
	free(ss->hist);
	free(ss->chat_marks);
	ss->chat_marks = NULL;
	ss->n_chat_marks = 0;
	ss->hist = NULL;
	free(ss->restore_buf);
	ss->restore_buf = NULL;
}

void sched_req_retire(struct scheduler *s, struct sched_req *r)
{
	struct sched_session *ss = r->sess;
	bool one_shot = ss && !ss->persistent;
	sched_share_abandon(s, r);
	if (one_shot)
		sched_session_release(s, ss);
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->n_active; i++)
		if (s->active[i] == r) {
			sched_ptrs_remove_at((void **)s->active, &s->n_active, i);
			break;
		}
	if (one_shot) {
		s->reserved -= ss->bytes_reserved;
		s->resident -= ss->stats.bytes_resident;
	}
	pthread_cond_signal(&s->cv); /* room in the budget, or a dead session to free */
	pthread_mutex_unlock(&s->mu);
	if (one_shot)
		free(ss);
	sched_req_free(r);
}

static void emit(struct sched_req *r, struct gen_event *ev)
{
	ev->n_prompt_tokens = r->n_prompt;
	ev->n_generated_tokens = r->n_generated;
	ev->n_cached_tokens = r->n_cached;
	r->req.on_event(r->req.user, ev);
}

static void session_refresh_stats(struct scheduler *s, struct sched_session *ss);

/* The session is free again before the client hears DONE, so that it can
 * send its next request on it at once; its info is already up to date. */
void sched_emit_done(struct scheduler *s, struct sched_req *r, enum gen_finish finish, int rc,
                     enum sched_field field, const char *error)
{
	struct gen_event ev = {.kind = GEN_EVENT_DONE, .token = -1, .finish = finish};
	if (finish == GEN_FINISH_ERROR) {
		ev.error_rc = rc;
		ev.error_field = field;
		ev.error = error;
		if (rc == -EAGAIN)
			ev.retry_after_s = scheduler_retry_after_s(s);
	}
	if (r->sess && r->sess->bs)
		session_refresh_stats(s, r->sess);
	pthread_mutex_lock(&s->mu);
	if (r->sess && r->sess->persistent && r->sess->busy_handle == r->handle) {
		r->sess->busy_handle = 0;
		r->sess->last_used = sched_now();
	}
	if (finish == GEN_FINISH_CANCELLED)
		s->st.cancelled++;
	else if (finish == GEN_FINISH_ERROR)
		s->st.errors++;
	else
		s->st.completed++;
	pthread_mutex_unlock(&s->mu);
	r->state = REQ_FINISHED;
	if (r->feed && r->sess) { /* it started: its tokens went through the monitor */
		struct sched_monitor_stream ms = req_monitor_stream(r);
		sched_monitor_stream_done(&s->monitor, &ms, &r->ppl_start);
	}
	if (log_enabled(s->log, LOG_DEBUG)) {
		static const char *const names[] = {"none", "stop", "length", "cancelled", "error"};
		log_event(s->log, LOG_DEBUG, "sched", "request done",
		          (struct log_field[]){LOG_INT("handle", r->handle),
		                               LOG_STR("finish", names[finish]),
		                               LOG_INT("prompt_tokens", r->n_prompt),
		                               LOG_INT("generated_tokens", r->n_generated),
		                               LOG_INT("rc", rc), LOG_END});
	}
	emit(r, &ev);
}

/* ---- the stream history of persistent sessions (for exact revise) ------ */

static void hist_push(struct sched_session *ss, int32_t token)
{
	if (!ss->hist_cap)
		return;
	ss->hist[ss->hist_end] = token;
	ss->hist_end = (ss->hist_end + 1) % ss->hist_cap;
	if (ss->hist_n < ss->hist_cap)
		ss->hist_n++;
}

static void hist_pop(struct sched_session *ss, size_t n)
{
	if (n > ss->hist_n)
		n = ss->hist_n;
	ss->hist_end = (ss->hist_end + ss->hist_cap - n % ss->hist_cap) % ss->hist_cap;
	ss->hist_n -= n;
}

static int32_t hist_last(const struct sched_session *ss)
{
	return ss->hist[(ss->hist_end + ss->hist_cap - 1) % ss->hist_cap];
}

/* The i-th oldest token of the history. */
static int32_t hist_at(const struct sched_session *ss, size_t i)
{
	return ss->hist[(ss->hist_end + ss->hist_cap - ss->hist_n + i) % ss->hist_cap];
}

static void session_refresh_stats(struct scheduler *s, struct sched_session *ss)
{
	struct sinkcache_stats st = {0};
	if (ss->bs)
		s->be->ops->session_stats(s->be, ss->bs, &st);
	pthread_mutex_lock(&s->mu);
	s->resident += st.bytes_resident;
	s->resident -= ss->stats.bytes_resident;
	if (st.evicted_compressed > ss->stats.evicted_compressed)
		s->st.evicted_window += st.evicted_compressed - ss->stats.evicted_compressed;
	if (st.moved_to_compressed > ss->stats.moved_to_compressed)
		s->st.moved_to_compressed += st.moved_to_compressed - ss->stats.moved_to_compressed;
	ss->stats = st;
	ss->ppl_pub = ss->ppl;
	pthread_mutex_unlock(&s->mu);
}

static void session_set_pending(struct scheduler *s, struct sched_session *ss, bool pending)
{
	pthread_mutex_lock(&s->mu);
	ss->has_pending = pending;
	pthread_mutex_unlock(&s->mu);
}

void sched_session_set_deferred(struct scheduler *s, struct sched_session *ss, int n)
{
	pthread_mutex_lock(&s->mu);
	ss->n_deferred = n;
	pthread_mutex_unlock(&s->mu);
}

/* A revise of a stream whose tokens wait for their cache (rule D): only
 * its pending token can go (the others are its pinned prefix); the last
 * deferred one becomes pending. */
static int deferred_revise(struct scheduler *s, struct sched_session *ss, size_t n, char *err,
                           size_t err_len)
{
	if (n > (ss->has_pending ? 1u : 0u))
		return err_set(err, err_len, SDERR_CONFLICT,
		               "cannot revise %zu tokens: only the last %d can be (the others are "
		               "the pinned prefix)",
		               n, ss->has_pending ? 1 : 0);
	hist_pop(ss, n);
	session_set_pending(s, ss, ss->n_deferred > 0);
	sched_session_set_deferred(s, ss, ss->n_deferred > 0 ? ss->n_deferred - 1 : 0);
	return 0;
}

/* After the stream lost its tail: moves the cache's last token back out of
 * it so that it is pending again (re-feeding it later is exact). */
static void session_restore_pending(struct scheduler *s, struct sched_session *ss)
{
	struct sinkcache_stats st;
	char err[SINKD_ERR_LEN];
	if (ss->has_pending || ss->hist_n == 0)
		return;
	s->be->ops->session_stats(s->be, ss->bs, &st);
	if (st.n_resident > st.n_sink &&
	    s->be->ops->session_revise(s->be, ss->bs, 1, err, sizeof(err)) == 0)
		session_set_pending(s, ss, true); /* hist_last() is that token */
}

/* Drops the last n tokens of the stream (pending first, then the cache). */
static int session_revise(struct scheduler *s, struct sched_session *ss, size_t n, char *err,
                          size_t err_len)
{
	size_t from_cache = n;
	struct sinkcache_stats st;
	int rc;
	s->be->ops->session_stats(s->be, ss->bs, &st);
	size_t most = sched_revisable_cached(&st, &ss->geom) + (ss->has_pending ? 1 : 0);
	if (n > most)
		return err_set(
		    err, err_len, SDERR_CONFLICT,
		    "cannot revise %zu tokens: only the last %zu are still in the window", n, most);
	if (ss->has_pending && from_cache > 0) {
		from_cache--;
		session_set_pending(s, ss, false);
	}
	if (from_cache > 0) {
		rc = s->be->ops->session_revise(s->be, ss->bs, from_cache, err, err_len);
		if (rc)
			return rc;
	}
	hist_pop(ss, n);
	session_restore_pending(s, ss);
	return 0;
}

/* A request on a persistent session ends early (cancel, error): the stream
 * keeps what reached the cache, and its last token becomes pending again. */
static void req_abandon_stream(struct scheduler *s, struct sched_req *r)
{
	struct sched_session *ss = r->sess;
	if (ss && ss->persistent && r->n_hist_fed > 0 && r->n_fed < r->n_hist_fed &&
	    (r->state == REQ_PREFILL || r->share_wait)) {
		/* its deferred tokens (rule D) are not all in the cache yet: they
		 * wait again, as before the request */
		if (ss->bs)
			s->be->ops->session_free(s->be, ss->bs);
		ss->bs = NULL;
		sched_share_release(s, ss);
		hist_pop(ss, r->req.n_prompt);
		session_set_pending(s, ss, true);
		sched_session_set_deferred(s, ss, (int)r->n_hist_fed - 1);
		return;
	}
	if (ss && ss->persistent && !ss->bs && r->share_wait) { /* never reached a cache */
		hist_pop(ss, r->req.n_prompt);
		session_set_pending(s, ss, ss->hist_n > 0);
		return;
	}
	if (!ss || !ss->persistent || !ss->bs || ss->deleted)
		return;
	if (r->state == REQ_DECODE) { /* next_token is in the history, not in the cache */
		session_set_pending(s, ss, true);
	} else if (r->state == REQ_PREFILL) {
		size_t unfed = r->n_feed_all - r->n_fed;
		if (r->n_fed == 0 && r->had_pending) { /* as before the request */
			hist_pop(ss, unfed - 1);
			session_set_pending(s, ss, true);
			return;
		}
		hist_pop(ss, unfed);
		session_set_pending(s, ss, false);
		session_restore_pending(s, ss);
	}
}

/* ---- request start ----------------------------------------------------- */

/* A new stream's backend session once its feed is known (shared, plain,
 * or none yet while it waits for its prefix). */
static int req_start_fresh(struct scheduler *s, struct sched_req *r, char *err, size_t err_len)
{
	int rc = sched_share_start(s, r, err, err_len);
	if (rc)
		return rc == -ENOMEM ? rc : -EIO;
	sched_trace_session_started(s, r->sess);
	return 0;
}

/* Backend session, revise, and the tokens to feed.  Errors in the codes of
 * scheduler_submit(), *field the field at fault (or NULL). */
static int req_start(struct scheduler *s, struct sched_req *r, enum sched_field *field, char *err,
                     size_t err_len)
{
	struct sched_session *ss = r->sess;
	const struct gen_request *q = &r->req;
	int rc;
	*field = SCHED_FIELD_NONE;
	pthread_mutex_lock(&s->mu);
	ss->offload_tried = false;
	pthread_mutex_unlock(&s->mu);
	/* A new stream that may share its prefix, or one whose tokens wait
	 * for their cache (rule D), makes its session once its feed is known
	 * (sched_share_start). */
	bool deferred = !ss->bs && ss->n_deferred > 0;
	if (deferred && q->revise_last_tokens > 0) {
		rc = deferred_revise(s, ss, q->revise_last_tokens, err, err_len);
		if (rc) {
			*field = SCHED_FIELD_REVISE_LAST_TOKENS;
			return rc;
		}
	}
	bool fresh = !ss->bs && !ss->restore_buf &&
	             (deferred || (q->revise_last_tokens == 0 && sched_share_eligible(s, ss)));
	/* The cache was admitted whole: failing to make it is the engine's fault. */
	if (!ss->bs && !fresh && sched_share_restored(s, ss) == 0) {
		sched_trace_session_started(s, ss);
	} else if (!ss->bs && !fresh) {
		rc = sched_share_session_new(s, ss, err, err_len);
		if (rc)
			return rc == -ENOMEM ? rc : -EIO;
		rc = sched_import_pending(s, ss, err, err_len);
		if (rc) { /* the snapshot was checked whole: only memory can fail here */
			s->be->ops->session_free(s->be, ss->bs);
			ss->bs = NULL;
			return rc == -ENOMEM ? rc : -EIO;
		}
		sched_trace_session_started(s, ss);
	}
	if (q->revise_last_tokens > 0 && !deferred) {
		rc = session_revise(s, ss, q->revise_last_tokens, err, err_len);
		if (rc) { /* whatever the cache says, the revise reached too far back */
			*field = SCHED_FIELD_REVISE_LAST_TOKENS;
			return SDERR_CONFLICT;
		}
	}
	r->feed = malloc((q->n_prompt + 1 + (deferred ? ss->hist_n : 0)) * sizeof(*r->feed));
	if (!r->feed)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	struct sinkcache_stats cs = {0};
	if (ss->bs)
		s->be->ops->session_stats(s->be, ss->bs, &cs);
	r->feed_base = cs.n_seen; /* the pending token, or the first prompt token, goes there */
	r->ppl_start = ss->ppl;
	r->had_pending = ss->has_pending && !deferred;
	if (deferred) /* the whole stream so far, none of it in a cache */
		for (size_t i = 0; i < ss->hist_n; i++)
			r->feed[r->n_feed++] = hist_at(ss, i);
	else if (ss->has_pending)
		r->feed[r->n_feed++] = hist_last(ss);
	r->n_hist_fed = deferred ? ss->hist_n : 0;
	if (q->n_prompt)
		memcpy(r->feed + r->n_feed, q->prompt_ids, q->n_prompt * sizeof(*r->feed));
	r->n_feed += q->n_prompt;
	r->n_feed_all = r->n_feed;
	r->n_prompt = (int)q->n_prompt;
	r->logits_at_end = q->max_tokens > 0;
	bool keep_last = ss->persistent && !r->logits_at_end && r->n_feed > 0;
	if (keep_last)
		r->n_feed--; /* stays pending for the next request */
	if (r->logits_at_end && r->n_feed == 0)
		return err_set(err, err_len, -EINVAL, "nothing to continue from");
	if (fresh) {
		rc = req_start_fresh(s, r, err, err_len);
		if (rc)
			return rc;
	}
	if (ss->bs && !s->be->ops->session_can_append(s->be, ss->bs, r->n_feed - r->n_fed)) {
		if (fresh) { /* as it came: no cache, or its tokens deferred */
			s->be->ops->session_free(s->be, ss->bs);
			ss->bs = NULL;
			sched_share_release(s, ss);
		}
		*field = SCHED_FIELD_PROMPT;
		return err_set(err, err_len, -E2BIG, "prompt exceeds the context");
	}
	/* Checks passed: the prompt joins the session's stream. */
	for (size_t i = 0; i < q->n_prompt; i++) {
		sampler_accept(r->sampler, q->prompt_ids[i]);
		hist_push(ss, q->prompt_ids[i]);
	}
	session_set_pending(s, ss, keep_last);
	if (ss->bs)
		sched_session_set_deferred(s, ss, 0);
	r->state = REQ_PREFILL;
	detok_stream_init(&r->ds, s->tok, false);
	return 0;
}

/* ---- sampling and text ------------------------------------------------- */

/* Feeds one token's text through detokenizer and stop matcher into r->text.
 * finishing: also flush what they hold back. */
static size_t req_text(struct sched_req *r, int32_t token, bool finishing, bool *stopped)
{
	char piece[512];
	size_t n = token >= 0 ? detok_stream_push(&r->ds, token, piece, sizeof(piece)) : 0;
	size_t out;
	*stopped = false;
	if (finishing)
		n += detok_stream_flush(&r->ds, piece + n, sizeof(piece) - n);
	if (!r->stop) {
		memcpy(r->text, piece, n);
		return n;
	}
	out = stop_matcher_feed(r->stop, piece, n, r->text, r->text_cap, stopped);
	if (finishing && !*stopped)
		out += stop_matcher_flush(r->stop, r->text + out, r->text_cap - out);
	return out;
}

/* Handles a freshly sampled token; returns true when the request finished. */
static bool req_on_token(struct scheduler *s, struct sched_req *r, const struct sampler_result *res)
{
	struct sched_session *ss = r->sess;
	int32_t t = res->token;
	/* Under a grammar, end-of-generation is allowed only where the text is
	 * complete, so it always ends the reply; a complete text that nothing
	 * may follow ends it too. */
	bool eog = (!r->req.ignore_eos || r->gm) && tokenizer_is_eog(s->tok, t);
	bool complete = r->gm && !eog && grammar_matcher_done(r->gm);
	bool full = !eog && !complete && r->n_generated + 1 < r->req.max_tokens &&
	            !s->be->ops->session_can_append(s->be, ss->bs, 1);
	bool length = !complete && (r->n_generated + 1 >= r->req.max_tokens || full);
	bool stopped = false;
	sampler_accept(r->sampler, t);
	r->n_generated++;
	pthread_mutex_lock(&s->mu);
	s->st.tokens_out++;
	pthread_mutex_unlock(&s->mu);
	hist_push(ss, t);
	size_t n = req_text(r, eog ? -1 : t, eog || length || complete, &stopped);
	stopped |= complete;
	struct gen_event ev = {.kind = GEN_EVENT_TOKEN,
	                       .token = t,
	                       .text = r->text,
	                       .text_len = n,
	                       .logprobs = r->req.want_logprobs ? res : NULL};
	emit(r, &ev);
	if (!eog && !stopped && !length) {
		r->next_token = t;
		r->state = REQ_DECODE;
		return false;
	}
	session_set_pending(s, ss, ss->persistent); /* t is the stream's last token, not fed */
	sched_emit_done(s, r, eog || stopped ? GEN_FINISH_STOP : GEN_FINISH_LENGTH, 0,
	                SCHED_FIELD_NONE, NULL);
	return true;
}

/* logit_bias, then the grammar's mask, then the sampler; the grammar
 * takes the sampled token. */
static int req_pick(struct scheduler *s, struct sched_req *r, float *row,
                    struct sampler_result *res, const char **why)
{
	for (size_t i = 0; i < r->req.n_logit_bias; i++)
		row[r->req.logit_bias[i].token] += r->req.logit_bias[i].bias;
	*why = "the constraint (response_format or tool_choice) allows no token here";
	if (r->gm && grammar_matcher_apply(r->gm, row))
		return -EIO;
	*why = "sampling failed";
	if (sampler_sample(r->sampler, row, res))
		return -EIO;
	*why = "the sampled token breaks the constraint";
	if (r->gm && !tokenizer_is_eog(s->tok, res->token) &&
	    grammar_matcher_accept_token(r->gm, res->token))
		return -EIO;
	return 0;
}

static bool req_sample(struct scheduler *s, struct sched_req *r)
{
	struct sampler_result res;
	float *row = s->logits + (size_t)r->logits_row * (size_t)s->n_vocab;
	const char *why = NULL;
	/* the monitor scores the model's own distribution: the row before
	 * logit_bias, penalties and the grammar change it in place */
	sched_monitor_keep_raw(&s->monitor, row);
	if (req_pick(s, r, row, &res, &why) != 0) {
		if (r->sess->persistent) { /* everything fed is in the cache */
			session_set_pending(s, r->sess, false);
			session_restore_pending(s, r->sess);
		}
		sched_emit_done(s, r, GEN_FINISH_ERROR, -EIO, SCHED_FIELD_NONE, why);
		return true;
	}
	struct sched_monitor_stream ms = req_monitor_stream(r);
	sched_monitor_add_generated(&s->monitor, &ms, res.token,
	                            r->feed_base + r->n_feed + (uint64_t)r->n_generated);
	return req_on_token(s, r, &res);
}

/* ---- batch ------------------------------------------------------------- */

static int batch_reserve(struct scheduler *s, size_t n_tokens, size_t n_rows)
{
	if (2 * n_rows > s->cap_cand) {
		void *p = realloc(s->cand, 2 * n_rows * sizeof(*s->cand));
		if (!p)
			return -ENOMEM;
		s->cand = p;
		s->cap_cand = 2 * n_rows;
	}
	if (n_tokens > s->cap_batch) {
		void *p = realloc(s->batch, n_tokens * sizeof(*s->batch));
		if (!p)
			return -ENOMEM;
		s->batch = p;
		s->cap_batch = n_tokens;
	}
	if (n_rows > s->cap_logits_rows) {
		void *p = realloc(s->logits, n_rows * (size_t)s->n_vocab * sizeof(float));
		if (!p)
			return -ENOMEM;
		s->logits = p;
		s->cap_logits_rows = n_rows;
	}
	return 0;
}

static void batch_add(struct scheduler *s, size_t *n, int *rows, struct sched_req *r, int32_t tok,
                      bool want_logits)
{
	s->batch[*n] = (struct backend_token){
	    .session = r->sess->bs, .token = tok, .want_logits = want_logits};
	(*n)++;
	r->n_in_batch++;
	r->served_tick = s->n_batches;
	if (want_logits)
		r->logits_row = (*rows)++;
}

/* A prompt token whose logits row the input monitor scores against the
 * next input token (at stream index pos); without memory for the list it
 * goes in unscored. */
static void batch_add_scored(struct scheduler *s, size_t *n, int *rows, struct sched_req *r,
                             int32_t tok, int32_t target, uint64_t pos)
{
	if (!sched_monitor_score_room(&s->monitor)) {
		batch_add(s, n, rows, r, tok, false);
		return;
	}
	int row = r->logits_row;
	batch_add(s, n, rows, r, tok, true);
	struct sched_monitor_stream ms = req_monitor_stream(r);
	sched_monitor_score_row(&s->monitor, &ms, r->logits_row, target, pos);
	r->logits_row = row; /* the sampling row stays the request's own */
}

static size_t prefill_chunk_cap(const struct sched_req *r)
{
	const struct cache_geometry *g = &r->sess->geom;
	return g->strategy == CACHE_STRATEGY_SLIDING_WINDOW && g->window_size > 0
	           ? (size_t)g->window_size
	           : (size_t)-1;
}

/* Flow control (the top of this file). */
static bool flow_held(const struct scheduler *s, struct sched_req *r)
{
	return s->max_unsent && r->req.unsent_tokens &&
	       r->req.unsent_tokens(r->req.user) >= s->max_unsent;
}

static int cmp_served(const void *a, const void *b)
{
	const struct sched_req *x = *(struct sched_req *const *)a;
	const struct sched_req *y = *(struct sched_req *const *)b;
	if (x->served_tick != y->served_tick)
		return x->served_tick < y->served_tick ? -1 : 1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Orders r[0..n) least recently served first; the listed order breaks ties. */
static void order_by_service(struct sched_req **r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		r[i]->rank = i;
	qsort(r, n, sizeof(*r), cmp_served);
}

static int cmp_handle(const void *a, const void *b)
{
	uint64_t x = (*(struct sched_req *const *)a)->handle;
	uint64_t y = (*(struct sched_req *const *)b)->handle;
	return x < y ? -1 : x > y;
}

/* Prompt rows a crowded batch keeps for prompts (the top of this file). */
static size_t crowd_prompt_rows(const struct scheduler *s, size_t max_tokens, size_t want)
{
	size_t rows = sched_pace_share(max_tokens);
	if (rows < 1)
		rows = max_tokens > 1 || s->n_batches % 2 ? 1 : 0;
	return rows < want ? rows : want;
}

/* Lists the ready decoders in dec and the prompts in pre, each in its
 * rotation order; counts held decoders and the prompt tokens wanted. */
static void batch_candidates(struct scheduler *s, struct sched_req **act, size_t n_act,
                             struct sched_req **dec, size_t *n_dec, struct sched_req **pre,
                             size_t *n_pre, size_t *want)
{
	*n_dec = *n_pre = *want = 0;
	for (size_t k = 0; k < n_act; k++) {
		struct sched_req *r = act[(s->rr_decode + k) % n_act];
		if (r->state == REQ_DECODE && flow_held(s, r))
			s->n_held++;
		else if (r->state == REQ_DECODE)
			dec[(*n_dec)++] = r;
	}
	s->rr_decode++;
	size_t start = s->rr_prefill++;
	for (size_t k = 0; k < n_act; k++) {
		struct sched_req *r = act[(start + k) % n_act];
		if (r->state == REQ_PREFILL && !r->share_wait) {
			pre[(*n_pre)++] = r;
			*want += r->n_feed - r->n_fed;
		}
	}
}

/* The batch rows, decoders' and prompts', under the pacing (the top of this
 * file): n decoders in the batch already. */
static size_t batch_limit(struct scheduler *s, size_t n, size_t want, size_t max_tokens,
                          struct sched_pace_batch *shape)
{
	/* Measure (or re-measure, as contexts grow) what a decode-only batch
	 * costs: the reference of the pacing. */
	if (n > 0 && want > 0 && sched_pace_wants_decode_only(&s->pace))
		return n;
	if (shape->crowded)
		return max_tokens;
	/* Decoders held by flow control count as decoding: they come back any
	 * moment, and a batch of prompt rows sized for no decoder would stall
	 * them. */
	size_t n_paced = n + s->n_held;
	size_t limit = sched_pace_limit(&s->pace, n_paced, max_tokens, &shape->part_block);
	return limit > n_paced ? limit - s->n_held : n;
}

/* Builds the batch described at the top of this file; returns its size. */
static size_t batch_build(struct scheduler *s, struct sched_req **act, size_t n_act,
                          size_t max_tokens, int *rows, struct sched_pace_batch *shape)
{
	struct sched_req **dec = s->cand, **pre = s->cand + n_act;
	size_t n = 0, n_dec, n_pre, want;
	s->n_batches++;
	batch_candidates(s, act, n_act, dec, &n_dec, pre, &n_pre, &want);
	size_t keep = n_pre ? crowd_prompt_rows(s, max_tokens, want) : 0;
	*shape =
	    (struct sched_pace_batch){.crowded = n_pre && n_dec + s->n_held + keep > max_tokens};
	size_t dec_rows = shape->crowded ? max_tokens - keep : max_tokens;
	if (dec_rows < n_dec)
		order_by_service(dec, n_dec);
	for (size_t i = 0; i < n_dec && n < dec_rows; i++)
		batch_add(s, &n, rows, dec[i], dec[i]->next_token, true);
	shape->n_decode = n;
	size_t limit = batch_limit(s, n, want, max_tokens, shape);
	if (limit - n < n_pre)
		qsort(pre, n_pre, sizeof(*pre), cmp_handle);
	for (size_t k = 0, left = n_pre; k < n_pre; k++, left--) {
		struct sched_req *r = pre[k];
		size_t room = limit - n;
		size_t share = room / left;
		if (share == 0 && room > 0)
			share = 1;
		size_t take = r->n_feed - r->n_fed;
		if (take > share)
			take = share;
		if (take > prefill_chunk_cap(r))
			take = prefill_chunk_cap(r);
		if (r->claim && r->n_fed < r->cut && take > r->cut - r->n_fed)
			take = r->cut - r->n_fed; /* its prefix ends a forward (sched_share.c) */
		for (size_t i = 0; i < take; i++) {
			size_t at = r->n_fed + i;
			bool sample = at + 1 == r->n_feed && r->logits_at_end;
			/* the monitor scores the next input token where it is asked to */
			if (!sample && at + 1 < r->n_feed_all &&
			    sched_monitor_wants_input(&r->sess->ppl_inputs_seen, &s->monitor.set))
				batch_add_scored(s, &n, rows, r, r->feed[at], r->feed[at + 1],
				                 r->feed_base + at + 1);
			else
				batch_add(s, &n, rows, r, r->feed[at], sample);
		}
	}
	shape->n_prefill = n - shape->n_decode;
	return n;
}

/* Advances one request after the forward pass; returns true when finished. */
static bool req_after_forward(struct scheduler *s, struct sched_req *r)
{
	if (r->state == REQ_DECODE)
		return req_sample(s, r);
	r->n_fed += r->n_in_batch;
	sched_share_after_forward(s, r);
	if (r->n_fed < r->n_feed)
		return false;
	struct gen_event ev = {.kind = GEN_EVENT_PROMPT_DONE, .token = -1};
	emit(r, &ev);
	if (!r->logits_at_end) {
		sched_emit_done(s, r, GEN_FINISH_NONE, 0, SCHED_FIELD_NONE, NULL);
		return true;
	}
	return req_sample(s, r);
}

/* ---- the tick ---------------------------------------------------------- */

void sched_ctl_run(struct scheduler *s, struct sched_ctl **jobs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (jobs[i]->kind == SCHED_CTL_TRACE)
			sched_trace_run(s, jobs[i]);
		else
			sched_export_run(s, jobs[i]);
	}
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->ctl_cv);
	pthread_mutex_unlock(&s->mu);
}

/* An append-only request with nothing to forward (a single token, now
 * pending, or a feed the prefix cache held whole) ends at once. */
static void req_finish_if_fed(struct scheduler *s, struct sched_req *r)
{
	if (r->share_wait || r->n_fed < r->n_feed)
		return;
	struct gen_event ev = {.kind = GEN_EVENT_PROMPT_DONE, .token = -1};
	emit(r, &ev);
	sched_emit_done(s, r, GEN_FINISH_NONE, 0, SCHED_FIELD_NONE, NULL);
}

/* A stream that waited for its prefix: shares it now, or computes it. */
static void tick_retry_shared(struct scheduler *s, struct sched_req *r)
{
	char err[SINKD_ERR_LEN];
	int rc = req_start_fresh(s, r, err, sizeof(err));
	if (!rc && r->sess->bs)
		sched_session_set_deferred(s, r->sess, 0);
	if (rc) {
		req_abandon_stream(s, r);
		sched_emit_done(s, r, GEN_FINISH_ERROR, rc, SCHED_FIELD_NONE, err);
	} else if (!r->share_wait) {
		req_finish_if_fed(s, r);
	}
}

/* Cancellations and setup of admitted requests; drops finished ones. */
static void tick_prepare(struct scheduler *s, struct sched_req **act, size_t n_act)
{
	char err[SINKD_ERR_LEN];
	for (size_t i = 0; i < n_act; i++) {
		struct sched_req *r = act[i];
		pthread_mutex_lock(&s->mu);
		bool cancelled = r->cancelled;
		pthread_mutex_unlock(&s->mu);
		if (cancelled) {
			req_abandon_stream(s, r);
			sched_emit_done(s, r, GEN_FINISH_CANCELLED, 0, SCHED_FIELD_NONE, NULL);
			continue;
		}
		if (r->share_wait && r->state == REQ_PREFILL) {
			tick_retry_shared(s, r);
			continue;
		}
		if (r->state != REQ_STARTING)
			continue;
		if (r->req.on_start)
			r->req.on_start(r->req.user);
		enum sched_field field;
		int rc = req_start(s, r, &field, err, sizeof(err));
		if (rc) {
			sched_emit_done(s, r, GEN_FINISH_ERROR, rc, field, err);
			continue;
		}
		req_finish_if_fed(s, r);
	}
}

static void tick_fail_batch(struct scheduler *s, struct sched_req **act, size_t n_act,
                            const char *err)
{
	log_event(s->log, LOG_ERROR, "sched", "forward pass failed",
	          (struct log_field[]){LOG_STR("error", err), LOG_END});
	for (size_t i = 0; i < n_act; i++) {
		struct sched_req *r = act[i];
		if (!r->n_in_batch)
			continue;
		sched_emit_done(s, r, GEN_FINISH_ERROR, -EIO, SCHED_FIELD_NONE, "inference failed");
		if (r->sess->persistent) { /* its cache state is unknown now: drop it */
			pthread_mutex_lock(&s->mu);
			for (size_t k = 0; k < s->n_sessions; k++)
				if (s->sessions[k] == r->sess) {
					sched_ptrs_remove_at((void **)s->sessions, &s->n_sessions,
					                     k);
					r->sess->deleted = true;
					sched_ptrs_push((void ***)&s->dead, &s->n_dead,
					                &s->cap_dead, r->sess);
					break;
				}
			pthread_mutex_unlock(&s->mu);
		}
	}
}

static void tick_account(struct scheduler *s, size_t n_tokens, size_t n_seqs, double seconds,
                         size_t tokens_in)
{
	pthread_mutex_lock(&s->mu);
	s->st.ticks++;
	s->st.tokens_in += tokens_in;
	sched_hist_observe(&s->hist[SCHED_HIST_BATCH_TOKENS], (double)n_tokens);
	sched_hist_observe(&s->hist[SCHED_HIST_BATCH_SEQUENCES], (double)n_seqs);
	sched_hist_observe(&s->hist[SCHED_HIST_TICK_SECONDS], seconds);
	pthread_mutex_unlock(&s->mu);
}

/* Runs the forward pass over the batch and advances every request in it. */
static size_t tick_run(struct scheduler *s, struct sched_req **act, size_t n_act, size_t max_tokens)
{
	char err[SINKD_ERR_LEN];
	int rows = 0;
	size_t n_seqs = 0, tokens_in = 0;
	double t0 = sched_now();
	/* rows of logits: one per request to sample, and with the input
	 * monitor on, one per prompt token it may score */
	size_t n_rows = n_act + (s->monitor.set.input != MONITOR_INPUT_OFF ? max_tokens : 0);
	if (batch_reserve(s, max_tokens, n_rows) != 0) {
		tick_fail_batch(s, act, 0, "out of memory");
		return 0;
	}
	sched_monitor_batch_begin(&s->monitor);
	for (size_t i = 0; i < n_act; i++) {
		act[i]->n_in_batch = 0;
		act[i]->logits_row = -1;
	}
	struct sched_pace_batch shape;
	size_t n = batch_build(s, act, n_act, max_tokens, &rows, &shape);
	if (n == 0)
		return 0;
	if (s->be->ops->forward(s->be, s->batch, n, s->logits, err, sizeof(err)) != 0) {
		tick_fail_batch(s, act, n_act, err);
		return n;
	}
	sched_pace_update(&s->pace, &shape, sched_now() - t0, max_tokens);
	/* Accounted before any event, so that a client that saw DONE reads
	 * counters that include its last tick. */
	for (size_t i = 0; i < n_act; i++) {
		n_seqs += act[i]->n_in_batch > 0;
		if (act[i]->state == REQ_PREFILL)
			tokens_in += act[i]->n_in_batch;
	}
	tick_account(s, n, n_seqs, sched_now() - t0, tokens_in);
	sched_monitor_score_batch(&s->monitor, s->logits);
	for (size_t i = 0; i < n_act; i++) {
		struct sched_req *r = act[i];
		if (r->n_in_batch && req_after_forward(s, r))
			r->state = REQ_FINISHED;
	}
	return n;
}

/* The monitor's NLLs into their histograms ([mu] held). */
static void monitor_observe(void *arg, double nll, bool input)
{
	struct scheduler *s = arg;
	sched_hist_observe(&s->hist[input ? SCHED_HIST_INPUT_NLL : SCHED_HIST_GENERATED_NLL], nll);
}

size_t sched_tick(struct scheduler *s)
{
	/* Snapshot of the active list: only this thread adds (at admission,
	 * before the tick) or removes (retire, below) entries. */
	pthread_mutex_lock(&s->mu);
	size_t n_act = s->n_active;
	size_t max_tokens = (size_t)s->lim.max_batch_tokens;
	s->max_unsent = s->lim.max_unsent_tokens;
	s->monitor.set = (struct sched_monitor_settings){
	    .input = s->lim.monitor_input,
	    .every = s->lim.monitor_every,
	    .alert_ratio = s->lim.alert_ratio,
	};
	s->n_held = 0;
	size_t prefix_max = s->lim.prefix_max_bytes;
	struct cache_geometry geom = s->lim.geom;
	struct sched_req **act = malloc((n_act ? n_act : 1) * sizeof(*act));
	if (act && n_act)
		memcpy(act, s->active, n_act * sizeof(*act));
	pthread_mutex_unlock(&s->mu);
	if (!act)
		return 0;
	sched_share_apply_limits(s, prefix_max, &geom);
	tick_prepare(s, act, n_act);
	size_t n = tick_run(s, act, n_act, max_tokens);
	if (s->n_held) {
		pthread_mutex_lock(&s->mu);
		s->st.flow_held += s->n_held;
		pthread_mutex_unlock(&s->mu);
	}
	for (size_t i = 0; i < n_act; i++)
		if (act[i]->sess)
			session_refresh_stats(s, act[i]->sess);
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < n_act; i++) {
		act[i]->pub_state = act[i]->state;
		act[i]->pub_generated = act[i]->n_generated;
	}
	sched_monitor_flush_locked(&s->monitor, monitor_observe, s, &s->st.perplexity_alerts);
	sched_share_stats_locked(s);
	pthread_mutex_unlock(&s->mu);
	for (size_t i = 0; i < n_act; i++)
		if (act[i]->state == REQ_FINISHED)
			sched_req_retire(s, act[i]);
	free(act);
	return n;
}
