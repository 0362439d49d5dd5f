/* The types of the configuration: the struct that every key of the table
 * (config_table.c) lives in, and the subsystems a reload applies keys by.
 * Apart from config.h so that the table can describe the struct while the
 * loader (config.c) reads the table. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/geometry.h"
#include "util/log.h"

enum model_backend_kind { MODEL_BACKEND_AUTO = 0, MODEL_BACKEND_CPU, MODEL_BACKEND_CUDA };

/* monitoring.input_perplexity: which input (prompt and appended) tokens
 * the model scores as it reads them. */
enum monitor_input { MONITOR_INPUT_OFF = 0, MONITOR_INPUT_SAMPLE, MONITOR_INPUT_ALL };

struct sinkd_config {
	struct {
		char *listen;		/* "host:port", "[v6]:port" */
		bool tls_enabled;
		char *tls_cert_file;
		char *tls_key_file;
		char **api_keys;	/* "sha256:<64 hex>" each */
		size_t n_api_keys;
		int64_t max_connections;
		int64_t sse_keepalive_s;
		int64_t threads;	/* HTTP worker threads */
		int64_t drain_grace_s;	/* SIGTERM: 503s before the listener closes */
		int64_t drain_timeout_s; /* then: time running streams get */
		int64_t handshake_timeout_s; /* accept to the end of the TLS handshake */
		int64_t request_timeout_s;   /* a whole request (line, headers, body) */
		int64_t idle_timeout_s;	     /* a kept-alive connection between requests */
		int64_t max_connections_per_address; /* 0 = no cap */
		int64_t max_uri_bytes;	     /* request target */
		int64_t max_header_bytes;    /* all header lines together */
		int64_t max_headers;	     /* header lines */
	} server;
	struct {
		bool watch; /* reload on file changes (inotify) */
	} config;
	struct {
		char *path;
		char *sha256;		/* NULL or 64 hex */
		char *name;		/* served model name; NULL = file name without .gguf */
		enum model_backend_kind backend;
		char *chat_template;	/* a template file, or the text itself; NULL: the GGUF's */
	} model;
	struct {
		int64_t threads;	/* cpu backend threads, 0 = one per core */
	} engine;
	struct {
		int64_t max_context_length;
		struct {
			enum cache_strategy strategy;
			int64_t window_size;
			int64_t sink_keep_count;
			bool pin_system_prompt;	    /* chat: pin the system prompt */
			int64_t max_pinned_tokens;  /* the most tokens a stream pins */
			int64_t global_cache_limit; /* bytes; 0 when auto */
			bool global_cache_limit_auto;
			double auto_fraction;	    /* share of free memory "auto" takes */
			enum rope_positions rope_positions;
			struct {
				bool enabled;
				int64_t max_tokens;	    /* per layer */
				double promote_threshold;   /* a softmax weight */
				int64_t demote_after_steps;
			} anchors;
		} cache;
		struct {
			enum kv_dtype dtype;
		} attention;
		struct {
			bool enabled;
			bool protect_sink_positions;
			int64_t bits;
			int64_t full_precision_recent;
		} quantization;
		struct {
			int64_t max_bytes; /* K/V of recent prompt prefixes; 0: off */
		} prefix_cache;
	} inference;
	struct {
		int64_t max_batch_tokens;
		int64_t max_queue;
		int64_t max_queue_wait_s;
		int64_t session_ttl_s;
		int64_t session_empty_ttl_s; /* sessions no request ran on */
		int64_t session_offload_s; /* 0 = never */
		int64_t max_unsent_tokens; /* 0 = no flow control */
	} scheduler;
	struct {
		char *store_dir;         /* "" = no session store (or store is set) */
		char *store;             /* "redis://..." / "rediss://...": the Redis store */
		char *store_auth_file;   /* its AUTH password ("" = none) */
		char *store_tls_ca_file; /* rediss: CA bundle ("" = the system's) */
		int64_t store_max_bytes; /* 0 = unbounded */
		int64_t per_key_store_bytes; /* 0 = store_max_bytes / 8 */
		int64_t lease_timeout_s;
		char *instance_id;       /* "" = host name and process id */
	} sessions;
	struct {
		int64_t store_ttl_s;     /* an idle stored response is kept this long */
		int64_t store_max_bytes; /* the park's bound without a session store */
	} responses;
	struct {
		int64_t max_body_bytes;
		int64_t max_tokens;
		int64_t max_prompt_tokens; /* one request's prompt; 0 = max_context_length */
		int64_t max_sessions;      /* persistent sessions in total; 0 = unlimited */
		struct {                   /* per API key, or per client address without keys */
			int64_t max_sessions;  /* 0 = unlimited, each */
			int64_t max_streams;
			int64_t max_queued;
			int64_t prompt_tokens_per_minute;
		} per_key;
	} limits;
	struct {
		enum log_level level;
		enum log_format format;
	} logging;
	struct {
		int input_perplexity;          /* enum monitor_input: off, sample, all */
		int64_t input_perplexity_every; /* sample: every K-th input token */
		double perplexity_alert_ratio;
	} monitoring;
	/* Files named by path keys that could not be read when loaded, each a
	 * located message ("file:line:col: key: cannot read file ...").  Only
	 * serving needs them (config_check_serve reports them); `generate`,
	 * `eval` and `tokenize` take a config without TLS files. */
	struct config_missing_file *missing_files;
	size_t n_missing_files;
	/* SHA-256 (hex) of the file's bytes as parsed; "" without a file. */
	char source_sha256[65];
};

/* The subsystems a key can be applied by (a bit each in config_key.apply). */
enum config_applier {
	CONFIG_APPLY_SERVER = 0, /* HTTP layer: keys, body and token limits, keep-alive */
	CONFIG_APPLY_TLS,        /* certificate and key (files re-read at every reload) */
	CONFIG_APPLY_SCHEDULER,  /* geometry of new sessions, KV budget, queue, TTL */
	CONFIG_APPLY_LOGGING,    /* level and format */
	CONFIG_APPLY_DAEMON,     /* the serve loop: file watch, drain timings */
	CONFIG_N_APPLIERS
};
#define CONFIG_APPLIES(a) (1u << (a))
