/* Scheduler metrics: fixed-bucket histograms filled by the engine thread
 * (batch sequences, batch tokens, tick seconds, queue wait) and a renderer of
 * every scheduler gauge, counter and histogram in the Prometheus text format,
 * so the server's /metrics handler only has to append our text to its own.
 * It does not serve HTTP and knows nothing about the server's metrics. */
#include "sched/scheduler_impl.h"
#include "session/store.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Bucket upper bounds; the +Inf bucket is implicit (the last entry). */
static const double counts_upper[SCHED_HIST_BUCKETS] = {1,   2,   4,   8,    16,   32,   64,
                                                        128, 256, 512, 1024, 2048, 4096, INFINITY};
static const double tick_upper[SCHED_HIST_BUCKETS] = {
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, INFINITY};
static const double wait_upper[SCHED_HIST_BUCKETS] = {
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, INFINITY};

/* Nats: a token the model was sure of is near 0, the uniform guess over a
 * 32k vocabulary is 10.4. */
static const double nll_upper[SCHED_HIST_BUCKETS] = {0.1, 0.25, 0.5, 0.75, 1, 1.5, 2,
                                                     3,   4,    5,   6,    8, 12, INFINITY};

static const struct {
	const char *name;
	const char *help;
	const double *upper;
} hist_desc[SCHED_HIST_COUNT] = {
    [SCHED_HIST_BATCH_SEQUENCES] = {"sinkd_scheduler_batch_sequences",
                                    "Sessions in one forward pass", counts_upper},
    [SCHED_HIST_BATCH_TOKENS] = {"sinkd_scheduler_batch_tokens",
                                 "Tokens (decode + prefill) in one forward pass", counts_upper},
    [SCHED_HIST_TICK_SECONDS] = {"sinkd_scheduler_tick_seconds",
                                 "Wall time of one batch: building it and the forward pass",
                                 tick_upper},
    [SCHED_HIST_QUEUE_WAIT_SECONDS] = {"sinkd_scheduler_queue_wait_seconds",
                                       "Time from submission to admission", wait_upper},
    [SCHED_HIST_OFFLOAD_SECONDS] = {"sinkd_session_offload_seconds",
                                    "An idle session's export and write to the session store",
                                    wait_upper},
    [SCHED_HIST_INPUT_NLL] = {"sinkd_input_token_nll",
                              "Negative log-likelihood (nats) of scored input tokens "
                              "(monitoring.input_perplexity)",
                              nll_upper},
    [SCHED_HIST_GENERATED_NLL] = {"sinkd_generated_token_nll",
                                  "Negative log-likelihood (nats) of generated tokens under the "
                                  "model's own distribution",
                                  nll_upper},
    [SCHED_HIST_RESTORE_SECONDS] = {"sinkd_session_restore_seconds",
                                    "A snapshot's read, checks and import (API or store)",
                                    wait_upper},
};

void sched_hist_init_all(struct scheduler *s)
{
	for (int i = 0; i < SCHED_HIST_COUNT; i++) {
		memset(&s->hist[i], 0, sizeof(s->hist[i]));
		s->hist[i].n_buckets = SCHED_HIST_BUCKETS;
		s->hist[i].upper = hist_desc[i].upper;
	}
}

void sched_hist_observe(struct sched_hist *h, double v)
{
	int b = 0;
	while (b < h->n_buckets - 1 && v > h->upper[b])
		b++;
	h->count[b]++;
	h->total++;
	h->sum += v;
}

void scheduler_get_histogram(struct scheduler *s, enum sched_hist_id id,
                             struct sched_histogram *out)
{
	memset(out, 0, sizeof(*out));
	if ((int)id < 0 || id >= SCHED_HIST_COUNT)
		return;
	out->name = hist_desc[id].name;
	out->help = hist_desc[id].help;
	pthread_mutex_lock(&s->mu);
	const struct sched_hist *h = &s->hist[id];
	uint64_t cum = 0;
	out->n_buckets = h->n_buckets;
	for (int b = 0; b < h->n_buckets; b++) {
		cum += h->count[b];
		out->upper[b] = h->upper[b];
		out->count[b] = cum;
	}
	out->total = h->total;
	out->sum = h->sum;
	pthread_mutex_unlock(&s->mu);
}

static void write_one(FILE *out, const char *name, const char *type, const char *help, double v)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* The session store's usage (as its last sweep saw it) and what its policy
 * did, evictions by owner tag ("shared": clients without API keys). */
static void sched_write_store_metrics(struct scheduler *s, FILE *out)
{
	pthread_mutex_lock(&s->mu);
	struct session_store *store = s->store.shared;
	pthread_mutex_unlock(&s->mu);
	struct session_store_usage u;
	if (!store && s->store.park) {
		session_store_get_usage_cached(s->store.park, &u);
		write_one(out, "sinkd_responses_parked", "gauge",
		          "Idle stored responses parked in memory (no KV reservation; as the last "
		          "sweep saw them)",
		          (double)u.files);
		write_one(out, "sinkd_responses_parked_bytes", "gauge",
		          "Bytes of the parked stored responses", (double)u.bytes);
		write_one(out, "sinkd_responses_parked_dropped_total", "counter",
		          "Parked responses dropped for responses.store_max_bytes or store_ttl_s",
		          (double)(u.evicted + u.expired));
	}
	if (!store)
		return;
	session_store_get_usage_cached(store, &u);
	write_one(out, "sinkd_session_store_records", "gauge",
	          "Session records in the store (as the last sweep saw it)", (double)u.files);
	write_one(out, "sinkd_session_store_bytes", "gauge",
	          "Bytes of the session records in the store (as the last sweep saw it)",
	          (double)u.bytes);
	write_one(out, "sinkd_session_store_expired_total", "counter",
	          "Stored sessions this instance deleted for being older than session_ttl_s",
	          (double)u.expired);
	write_one(out, "sinkd_session_store_takeovers_total", "counter",
	          "Stale leases of other instances this instance took over", (double)u.takeovers);
	write_one(out, "sinkd_session_store_stale_total", "counter",
	          "Stored sessions refused for being older than a state that was never written",
	          (double)u.stale);
	write_one(out, "sinkd_session_store_fenced_total", "counter",
	          "Store writes refused because the session's lease had changed hands",
	          (double)u.fenced);
	struct session_store_owner_count oc[64];
	size_t n = session_store_evictions_by_owner(store, oc, 64);
	fprintf(out, "# HELP sinkd_session_store_evictions_total Stored sessions evicted to keep "
	             "within store_max_bytes and per_key_store_bytes, by API key tag\n"
	             "# TYPE sinkd_session_store_evictions_total counter\n");
	for (size_t i = 0; i < n; i++)
		fprintf(out, "sinkd_session_store_evictions_total{owner=\"%s\"} %" PRIu64 "\n",
		        oc[i].tag[0] ? oc[i].tag : "shared", oc[i].evicted);
}

static void write_histogram(FILE *out, const struct sched_histogram *h)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
	for (int b = 0; b < h->n_buckets; b++) {
		if (isinf(h->upper[b]))
			fprintf(out, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", h->name, h->count[b]);
		else
			fprintf(out, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", h->name, h->upper[b],
			        h->count[b]);
	}
	fprintf(out, "%s_sum %.17g\n%s_count %" PRIu64 "\n", h->name, h->sum, h->name, h->total);
}

void scheduler_write_prefix_metrics(const struct scheduler_stats *st, FILE *out)
{
	static const struct {
		const char *name, *type, *help;
	} m[] = {
	    {"sinkd_prefix_cache_hits_total", "counter",
	     "New streams that took a prompt prefix from the prefix cache (shared or copied)"},
	    {"sinkd_prefix_cache_misses_total", "counter",
	     "New streams that could have taken a prefix from the prefix cache and found none"},
	    {"sinkd_prefix_cache_tokens_reused_total", "counter",
	     "Prompt tokens that prefix cache hits did not compute"},
	    {"sinkd_prefix_cache_bytes", "gauge",
	     "Bytes the prefix cache's entries hold (shared ones counted once)"},
	    {"sinkd_prefix_cache_shared_sessions", "gauge",
	     "Sessions whose sink tier is a prefix cache entry's rows"},
	    {"sinkd_prefix_cache_entries", "gauge", "Prefixes the prefix cache holds"},
	};
	const double v[] = {(double)st->prefix_hits,
	                    (double)st->prefix_misses,
	                    (double)st->prefix_tokens_reused,
	                    (double)st->prefix_bytes,
	                    (double)st->prefix_shared_sessions,
	                    (double)st->prefix_entries};
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
		write_one(out, m[i].name, m[i].type, m[i].help, v[i]);
}

void scheduler_write_metrics(struct scheduler *s, FILE *out)
{
	struct scheduler_stats st;
	scheduler_get_stats(s, &st);
	write_one(out, "sinkd_scheduler_queue_depth", "gauge", "Requests waiting for admission",
	          (double)st.queue_depth);
	write_one(out, "sinkd_scheduler_running", "gauge", "Requests admitted and running",
	          (double)st.running);
	write_one(out, "sinkd_sessions", "gauge", "Persistent sessions alive", (double)st.sessions);
	write_one(out, "sinkd_kv_bytes_reserved", "gauge", "KV cache bytes reserved (cache bounds)",
	          (double)st.kv_bytes_reserved);
	write_one(out, "sinkd_kv_bytes_resident", "gauge", "KV cache bytes holding tokens",
	          (double)st.kv_bytes_resident);
	write_one(out, "sinkd_kv_bytes_budget", "gauge", "Global KV cache budget in bytes",
	          (double)st.kv_bytes_budget);
	write_one(out, "sinkd_scheduler_admissions_total", "counter", "Requests admitted",
	          (double)st.admitted);
	fprintf(out, "# HELP sinkd_scheduler_rejections_total Requests refused, by reason\n"
	             "# TYPE sinkd_scheduler_rejections_total counter\n");
	const struct {
		const char *reason;
		uint64_t v;
	} rej[] = {{"queue_full", st.rejected_queue_full},
	           {"queue_timeout", st.rejected_timeout},
	           {"over_budget", st.rejected_budget},
	           {"session_busy", st.rejected_busy},
	           {"max_sessions", st.rejected_sessions},
	           {"per_key_max_sessions", st.rejected_owner_sessions}};
	for (size_t i = 0; i < sizeof(rej) / sizeof(rej[0]); i++)
		fprintf(out, "sinkd_scheduler_rejections_total{reason=\"%s\"} %" PRIu64 "\n",
		        rej[i].reason, rej[i].v);
	fprintf(out,
	        "# HELP sinkd_scheduler_requests_finished_total Requests finished, by outcome\n"
	        "# TYPE sinkd_scheduler_requests_finished_total counter\n"
	        "sinkd_scheduler_requests_finished_total{outcome=\"completed\"} %" PRIu64 "\n"
	        "sinkd_scheduler_requests_finished_total{outcome=\"cancelled\"} %" PRIu64 "\n"
	        "sinkd_scheduler_requests_finished_total{outcome=\"error\"} %" PRIu64 "\n",
	        st.completed, st.cancelled, st.errors);
	write_one(out, "sinkd_scheduler_flow_control_holds_total", "counter",
	          "Decode steps a stream sat out because its client had not taken its tokens",
	          (double)st.flow_held);
	write_one(out, "sinkd_scheduler_ticks_total", "counter", "Engine ticks (forward passes)",
	          (double)st.ticks);
	write_one(out, "sinkd_tokens_prompt_total", "counter", "Prompt tokens put into caches",
	          (double)st.tokens_in);
	write_one(out, "sinkd_tokens_generated_total", "counter", "Tokens sampled",
	          (double)st.tokens_out);
	write_one(out, "sinkd_sessions_created_total", "counter", "Persistent sessions created",
	          (double)st.sessions_created);
	write_one(out, "sinkd_sessions_expired_total", "counter",
	          "Persistent sessions expired (TTL)", (double)st.sessions_expired);
	write_one(out, "sinkd_sessions_expired_empty_total", "counter",
	          "Persistent sessions expired that no request ever ran on "
	          "(scheduler.session_empty_ttl_s)",
	          (double)st.sessions_expired_empty);
	fprintf(out,
	        "# HELP sinkd_kv_evictions_total Tokens leaving a cache tier\n"
	        "# TYPE sinkd_kv_evictions_total counter\n"
	        "sinkd_kv_evictions_total{tier=\"window\"} %" PRIu64 "\n"
	        "sinkd_kv_evictions_total{tier=\"hot\"} %" PRIu64 "\n",
	        st.evicted_window, st.moved_to_compressed);
	write_one(out, "sinkd_sessions_resident", "gauge",
	          "Persistent sessions held by this instance", (double)st.sessions);
	write_one(out, "sinkd_sessions_offloading", "gauge",
	          "Persistent sessions being written to the session store",
	          (double)st.sessions_offloading);
	write_one(out, "sinkd_session_snapshots_total", "counter",
	          "Session snapshots served by GET /v1/sessions/{id}/snapshot", (double)st.snapshots);
	fprintf(out,
	        "# HELP sinkd_session_restores_total Sessions created from a snapshot, by source\n"
	        "# TYPE sinkd_session_restores_total counter\n"
	        "sinkd_session_restores_total{source=\"api\"} %" PRIu64 "\n"
	        "sinkd_session_restores_total{source=\"store\"} %" PRIu64 "\n",
	        st.restores_api, st.restores_store);
	write_one(out, "sinkd_session_offloads_total", "counter",
	          "Idle sessions written to the session store and freed here", (double)st.offloads);
	write_one(out, "sinkd_session_offload_failures_total", "counter",
	          "Session store writes that failed (the session stayed resident)",
	          (double)st.offload_failures);
	sched_write_store_metrics(s, out);
	write_one(out, "sinkd_perplexity_alerts_total", "counter",
	          "Sessions whose running perplexity rose more than "
	          "monitoring.perplexity_alert_ratio above their first full window",
	          (double)st.perplexity_alerts);
	write_one(out, "sinkd_session_snapshot_bytes_total", "counter",
	          "Bytes of every session snapshot made (API and store)", (double)st.snapshot_bytes);
	scheduler_write_prefix_metrics(&st, out);
	for (int i = 0; i < SCHED_HIST_COUNT; i++) {
		struct sched_histogram h;
		scheduler_get_histogram(s, (enum sched_hist_id)i, &h);
		write_histogram(out, &h);
	}
	/* The three gauges that inference gateways (Gateway API inference
	 * extension, llm-d) read, named in the colon style of their defaults. */
	write_one(out, "sinkd:num_requests_waiting", "gauge",
	          "Requests waiting for admission (gateway queue length)", (double)st.queue_depth);
	write_one(out, "sinkd:num_requests_running", "gauge",
	          "Requests admitted and running (gateway running requests)", (double)st.running);
	double usage =
	    st.kv_bytes_budget ? (double)st.kv_bytes_reserved / (double)st.kv_bytes_budget : 0.0;
	write_one(out, "sinkd:kv_cache_usage_perc", "gauge",
	          "KV cache budget in use, 0-1: bytes reserved over the budget",
	          usage > 1.0 ? 1.0 : usage); /* above 1 only while a smaller budget drains */
}
