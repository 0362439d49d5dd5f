/* The engine's side of the views (sched_views.c): what the API and the
 * console see of the scheduler beyond counters.  The lists of sessions and
 * streams and the cache trace request are public (scheduler.h, "Views");
 * this header holds the two calls the engine makes for cache traces.  The
 * views keep no state of their own: they read the session table and the
 * request lists and hand TRACE jobs to the engine through s->ctl.
 *
 * Locking: the lists are copied under the scheduler's `mu` ([mu] fields
 * only: ids, owners, pub_state, pub_generated, stats); a trace is taken on
 * the engine thread, the only one that may touch a backend session, with
 * `mu` held only to find the session and to mark the job done. */
#pragma once

struct scheduler;
struct sched_ctl;
struct sched_session;

/* Runs a TRACE job (engine thread, lock not held). */
void sched_trace_run(struct scheduler *s, struct sched_ctl *c);
/* After the engine made a session's backend session: collection as asked. */
void sched_trace_session_started(struct scheduler *s, struct sched_session *ss);
