/* What the API and the console see of the scheduler beyond counters: the
 * lists of sessions and streams, and cache traces, which the engine takes
 * between two forward passes (a job like a snapshot's export) because only
 * it may touch a backend session. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sched/scheduler_impl.h"
#include "sched/sched_views.h"
#include "session/session_key.h"

#define PUSH(arr, n, cap, p) sched_ptrs_push((void ***)&(arr), &(n), &(cap), (p))

int scheduler_list_sessions(struct scheduler *s, struct sched_session_ref **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&s->mu);
	size_t m = s->n_sessions;
	struct sched_session_ref *a = calloc(m ? m : 1, sizeof(*a));
	for (size_t i = 0; a && i < m; i++) {
		snprintf(a[i].id, sizeof(a[i].id), "%s", s->sessions[i]->id);
		snprintf(a[i].owner, sizeof(a[i].owner), "%s", s->sessions[i]->owner);
	}
	pthread_mutex_unlock(&s->mu);
	if (!a)
		return -ENOMEM;
	*out = a;
	*n = m;
	return 0;
}

static const char *state_name(enum sched_req_state st)
{
	switch (st) {
	case REQ_QUEUED:
		return "queued";
	case REQ_STARTING:
	case REQ_PREFILL:
		return "prefill";
	case REQ_DECODE:
		return "decode";
	default:
		return "finished";
	}
}

static void stream_info_locked(const struct sched_req *r, double now, struct sched_stream_info *o)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->id, sizeof(o->id), "%s", r->rid);
	snprintf(o->owner, sizeof(o->owner), "%s", r->owner);
	if (r->sess && r->sess->persistent)
		snprintf(o->session_id, sizeof(o->session_id), "%s", session_key_id(r->sess->id));
	o->state = state_name(r->pub_state);
	o->prompt_tokens = (int)r->req.n_prompt;
	o->generated_tokens = r->pub_generated;
	o->age_s = now - r->enqueued_at;
	if (r->sess && r->pub_state != REQ_QUEUED)
		sched_session_info_locked(r->sess, now, &o->cache);
}

int scheduler_list_streams(struct scheduler *s, struct sched_stream_info **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&s->mu);
	size_t m = s->n_active + s->n_queue, k = 0;
	struct sched_stream_info *a = calloc(m ? m : 1, sizeof(*a));
	double now = sched_now();
	/* the running ones were submitted before those still waiting */
	for (size_t i = 0; a && i < s->n_active; i++)
		if (s->active[i]->rid[0] && s->active[i]->pub_state != REQ_FINISHED)
			stream_info_locked(s->active[i], now, &a[k++]);
	for (size_t i = 0; a && i < s->n_queue; i++)
		if (s->queue[i]->rid[0] && !s->queue[i]->cancelled)
			stream_info_locked(s->queue[i], now, &a[k++]);
	pthread_mutex_unlock(&s->mu);
	if (!a)
		return -ENOMEM;
	*out = a;
	*n = k;
	return 0;
}

/* Request ids are scoped per API key: a keyed owner finds only its own
 * streams; clients without keys share one namespace (as for sessions). */
static bool stream_owner_matches(const struct sched_req *r, const char *owner)
{
	if (!owner)
		return true;
	bool keyed = !strncmp(owner, "key:", 4), r_keyed = !strncmp(r->owner, "key:", 4);
	return keyed || r_keyed ? !strcmp(r->owner, owner) : true;
}

static struct sched_req *stream_find_locked(struct scheduler *s, const char *owner,
                                            const char *request_id)
{
	for (size_t i = 0; i < s->n_active; i++)
		if (!strcmp(s->active[i]->rid, request_id) &&
		    stream_owner_matches(s->active[i], owner))
			return s->active[i];
	for (size_t i = 0; i < s->n_queue; i++)
		if (!strcmp(s->queue[i]->rid, request_id) && stream_owner_matches(s->queue[i], owner))
			return s->queue[i];
	return NULL;
}

int scheduler_stream_info(struct scheduler *s, const char *owner, const char *request_id,
                          struct sched_stream_info *out)
{
	memset(out, 0, sizeof(*out));
	if (!request_id || !request_id[0])
		return -ENOENT;
	pthread_mutex_lock(&s->mu);
	struct sched_req *r = stream_find_locked(s, owner, request_id);
	if (r)
		stream_info_locked(r, sched_now(), out);
	pthread_mutex_unlock(&s->mu);
	return r ? 0 : -ENOENT;
}

void scheduler_cache_trace_free(struct cache_trace_step *t)
{
	cache_trace_step_free(t);
}

/* The engine's side: the session (by job or by the stream found now), its
 * collection turned on, its trace filled. */
void sched_trace_run(struct scheduler *s, struct sched_ctl *c)
{
	struct sched_session *ss = c->ss;
	pthread_mutex_lock(&s->mu);
	if (!ss) {
		struct sched_req *r = stream_find_locked(s, c->owner, c->request_id);
		ss = r && r->state != REQ_QUEUED && r->state != REQ_FINISHED ? r->sess : NULL;
	}
	bool gone = !ss || ss->deleted;
	pthread_mutex_unlock(&s->mu);
	c->rc = 0;
	if (gone) {
		c->rc = err_set(c->err, sizeof(c->err), -ENOENT, "no %s %.80s",
		                c->ss ? "session" : "running stream",
		                c->ss ? session_key_id(c->ss->id) : c->request_id);
		goto done;
	}
	ss->trace_wanted = true;
	c->trace = cache_trace_step_new(&ss->geom);
	if (!c->trace) {
		c->rc = err_set(c->err, sizeof(c->err), -ENOMEM, "out of memory for a cache trace");
		goto done;
	}
	if (!ss->bs) { /* no request ran on it yet: an empty cache */
		cache_trace_geometry_of(&ss->geom, &c->trace->geometry);
		c->trace->stream_pos = -1;
		goto done;
	}
	c->rc = s->be->ops->session_trace_enable(s->be, ss->bs, true, c->err, sizeof(c->err));
	if (!c->rc)
		c->rc = s->be->ops->session_trace(s->be, ss->bs, c->trace, c->err, sizeof(c->err));
done:
	if (c->rc) {
		scheduler_cache_trace_free(c->trace);
		c->trace = NULL;
	}
	pthread_mutex_lock(&s->mu);
	c->done = true;
	if (c->ss)
		c->ss->ctl_refs--;
	pthread_cond_broadcast(&s->ctl_cv);
	pthread_mutex_unlock(&s->mu);
}

void sched_trace_session_started(struct scheduler *s, struct sched_session *ss)
{
	if (!ss->trace_wanted || !ss->bs || !s->be->ops->session_trace_enable)
		return;
	char err[SINKD_ERR_LEN];
	/* out of memory: the next GET of its cache says so */
	(void)s->be->ops->session_trace_enable(s->be, ss->bs, true, err, sizeof(err));
}

int scheduler_cache_trace(struct scheduler *s, const char *session_id, const char *owner,
                          const char *request_id, struct cache_trace_step **out, char *err,
                          size_t err_len)
{
	struct sched_ctl c = {.kind = SCHED_CTL_TRACE, .request_id = request_id, .owner = owner};
	*out = NULL;
	if (!s->be->ops->session_trace)
		return err_set(err, err_len, -ENOTSUP, "the %s backend does not trace its caches",
		               s->be->ops->name);
	pthread_mutex_lock(&s->mu);
	if (session_id) {
		c.ss = sched_session_find_locked(s, session_id);
		if (!c.ss) {
			pthread_mutex_unlock(&s->mu);
			return err_set(err, err_len, -ENOENT, "no session %.40s",
			               session_key_id(session_id));
		}
	} else if (!request_id || !stream_find_locked(s, owner, request_id)) {
		pthread_mutex_unlock(&s->mu);
		return err_set(err, err_len, -ENOENT, "no running stream %.80s",
		               request_id ? request_id : "");
	}
	if (PUSH(s->ctl, s->n_ctl, s->cap_ctl, &c)) {
		pthread_mutex_unlock(&s->mu);
		return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	if (c.ss)
		c.ss->ctl_refs++;
	pthread_cond_signal(&s->cv);
	while (!c.done)
		pthread_cond_wait(&s->ctl_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	if (c.rc)
		return err_set(err, err_len, c.rc, "%s", c.err);
	*out = c.trace;
	return 0;
}
