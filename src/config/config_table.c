/* The configuration table (Redis config.c style): every key, its type,
 * default, bounds and flags.  Defaults exist only here; the parser reads
 * them through the same code path as YAML values. */
#include "config/config_table.h"

#include <stddef.h>

#include "config/config_validate.h"

#define OFF(field) offsetof(struct sinkd_config, field)
#define NO_AUX 0

static const char *const strategy_names[] = {"sliding_window", "full", NULL};
static const int strategy_values[] = {CACHE_STRATEGY_SLIDING_WINDOW, CACHE_STRATEGY_FULL};
static const char *const rope_names[] = {"cache", "original", NULL};
static const int rope_values[] = {ROPE_POSITIONS_CACHE, ROPE_POSITIONS_ORIGINAL};
static const char *const dtype_names[] = {"bfloat16", "float16", "float32", NULL};
static const int dtype_values[] = {KV_DTYPE_BF16, KV_DTYPE_F16, KV_DTYPE_F32};
static const char *const backend_names[] = {"auto", "cpu", "cuda", NULL};
static const int backend_values[] = {MODEL_BACKEND_AUTO, MODEL_BACKEND_CPU, MODEL_BACKEND_CUDA};
static const char *const level_names[] = {"debug", "info", "warn", "error", NULL};
static const int level_values[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};
static const char *const format_names[] = {"json", "text", NULL};
static const int format_values[] = {LOG_FORMAT_JSON, LOG_FORMAT_TEXT};
static const char *const monitor_names[] = {"off", "sample", "all", NULL};
static const int monitor_values[] = {MONITOR_INPUT_OFF, MONITOR_INPUT_SAMPLE, MONITOR_INPUT_ALL};
static const char *const bits_names[] = {"8", "4", NULL};
static const int bits_values[] = {8, 4};

#define S CONFIG_SECRET
#define SERVER CONFIG_APPLIES(CONFIG_APPLY_SERVER)
#define TLS CONFIG_APPLIES(CONFIG_APPLY_TLS)
#define SCHED CONFIG_APPLIES(CONFIG_APPLY_SCHEDULER)
#define LOGGING CONFIG_APPLIES(CONFIG_APPLY_LOGGING)
#define DAEMON CONFIG_APPLIES(CONFIG_APPLY_DAEMON)
#define KB 1024LL
#define MB (1024LL * KB)
#define TB (1024LL * 1024LL * MB)

const struct config_key config_keys[] = {
	{"server.listen", CONFIG_STRING, OFF(server.listen), NO_AUX, 0, 0, 0, 0, NULL, NULL,
	 "127.0.0.1:8443", 0, "address to listen on: host:port, [ipv6]:port, or *:port for all",
	 .validate = config_validate_listen,
	 .apply = 0 /* restart */},
	{"server.tls.enabled", CONFIG_BOOL, OFF(server.tls_enabled), NO_AUX, 0, 0, 0, 0, NULL, NULL,
	 "true", 0, "serve HTTPS; false serves plain HTTP and logs a warning",
	 .apply = 0 /* restart */},
	{"server.tls.cert_file", CONFIG_PATH, OFF(server.tls_cert_file), NO_AUX, 0, 0, 0, 0, NULL,
	 NULL, "", 0, "PEM certificate chain (required when tls.enabled)",
	 .apply = TLS},
	{"server.tls.key_file", CONFIG_PATH, OFF(server.tls_key_file), NO_AUX, 0, 0, 0, 0, NULL, NULL,
	 "", 0, "PEM private key (required when tls.enabled)",
	 .apply = TLS},
	{"server.api_keys", CONFIG_STRLIST, OFF(server.api_keys), OFF(server.n_api_keys), 0, 0, 0, 0,
	 NULL, NULL, "", S, "accepted bearer keys as sha256:<64 hex> digests; empty = no auth",
	 .validate = config_validate_key_digest,
	 .apply = SERVER},
	{"server.max_connections", CONFIG_INT, OFF(server.max_connections), NO_AUX, 1, 100000, 0, 0,
	 NULL, NULL, "4096", 0,
	 "open connections at most (SSE streams included); 32 more are accepted for /health "
	 "and /ready",
	 .apply = 0 /* restart */},
	{"server.sse_keepalive_s", CONFIG_INT, OFF(server.sse_keepalive_s), NO_AUX, 1, 3600, 0, 0,
	 NULL, NULL, "15", 0, "seconds between ': keep-alive' comments on idle streams",
	 .apply = SERVER},
	{"server.threads", CONFIG_INT, OFF(server.threads), NO_AUX, 1, 64, 0, 0, NULL, NULL, "2", 0,
	 "HTTP event-loop threads (streams do not need a thread each)",
	 .apply = 0 /* restart */},
	{"server.drain_grace_s", CONFIG_INT, OFF(server.drain_grace_s), NO_AUX, 0, 3600, 0, 0, NULL,
	 NULL, "5", 0,
	 "on SIGTERM: seconds new requests still get 503 (Connection: close) before the "
	 "listener closes, so health checks see the drain",
	 .apply = DAEMON},
	{"server.drain_timeout_s", CONFIG_INT, OFF(server.drain_timeout_s), NO_AUX, 0, 86400, 0, 0,
	 NULL, NULL, "30", 0,
	 "after the listener closes: seconds running streams may take to finish before they "
	 "get a server_shutdown error event",
	 .apply = DAEMON},
	{"server.handshake_timeout_s", CONFIG_INT, OFF(server.handshake_timeout_s), NO_AUX, 1, 3600,
	 0, 0, NULL, NULL, "10", 0,
	 "a TLS handshake not finished this many seconds after the accept is closed",
	 .apply = SERVER},
	{"server.request_timeout_s", CONFIG_INT, OFF(server.request_timeout_s), NO_AUX, 1, 86400, 0,
	 0, NULL, NULL, "30", 0,
	 "a request whose line, headers and body have not all arrived this many seconds after "
	 "the handshake (on a kept-alive connection: after its request line) is closed; the "
	 "answer, a stream included, has no such limit",
	 .apply = SERVER},
	{"server.idle_timeout_s", CONFIG_INT, OFF(server.idle_timeout_s), NO_AUX, 1, 120, 0, 0,
	 NULL, NULL, "60", 0,
	 "a kept-alive connection that sends no new request line this many seconds after the "
	 "last answer is closed (at most 120: a connection on which nothing moves for 120 s is "
	 "closed in any case)",
	 .apply = SERVER},
	{"server.max_connections_per_address", CONFIG_INT, OFF(server.max_connections_per_address),
	 NO_AUX, 0, 100000, 0, 0, NULL, NULL, "1024", 0,
	 "open connections from one client address at most (more are refused at accept); 0 = "
	 "no cap (behind a balancer every connection has its address)",
	 .apply = 0 /* restart */},
	{"server.max_uri_bytes", CONFIG_SIZE, OFF(server.max_uri_bytes), NO_AUX, 256, 64 * KB, 0, 0,
	 NULL, NULL, "8KiB", 0, "longest request target (path and query); longer gets 414",
	 .apply = 0 /* restart */},
	{"server.max_header_bytes", CONFIG_SIZE, OFF(server.max_header_bytes), NO_AUX, 1 * KB,
	 256 * KB, 0, 0, NULL, NULL, "16KiB", 0,
	 "most bytes of all request header lines together; more gets 431",
	 .apply = 0 /* restart */},
	{"server.max_headers", CONFIG_INT, OFF(server.max_headers), NO_AUX, 1, 10000, 0, 0, NULL,
	 NULL, "100", 0, "most request header lines; more gets 431",
	 .apply = 0 /* restart */},
	{"config.watch", CONFIG_BOOL, OFF(config.watch), NO_AUX, 0, 0, 0, 0, NULL, NULL, "false", 0,
	 "reload when this file or the TLS files change (inotify; edits, renames, symlink swaps "
	 "as in Kubernetes ConfigMaps)",
	 .apply = DAEMON},
	{"model.path", CONFIG_PATH, OFF(model.path), NO_AUX, 0, 0, 0, 0, NULL, NULL, "", 0,
	 "GGUF model file (required to serve); relative paths are relative to this file",
	 .apply = 0 /* restart */},
	{"model.sha256", CONFIG_STRING, OFF(model.sha256), NO_AUX, 0, 0, 0, 0, NULL, NULL, "", 0,
	 "expected SHA-256 of the model file (64 hex); checked at load when set",
	 .validate = config_validate_sha256,
	 .apply = 0 /* restart */},
	{"model.name", CONFIG_STRING, OFF(model.name), NO_AUX, 0, 0, 0, 0, NULL, NULL, "", 0,
	 "model id served in the API; default: the file name without .gguf",
	 .apply = 0 /* restart */},
	{"model.backend", CONFIG_ENUM, OFF(model.backend), NO_AUX, 0, 0, 0, 0, backend_names,
	 backend_values, "auto", 0, "auto (cuda when a GPU is present, else cpu) | cpu | cuda",
	 .apply = 0 /* restart */},
	{"model.chat_template", CONFIG_PATH, OFF(model.chat_template), NO_AUX, 0, 0, 0, 0, NULL, NULL,
	 "", CONFIG_INLINE_TEMPLATE,
	 "the chat template: a Jinja file, or the template text itself when the value holds {{ "
	 "or {%; empty = the model's own (tokenizer.chat_template)",
	 .apply = SERVER},
	{"engine.threads", CONFIG_INT, OFF(engine.threads), NO_AUX, 0, 1024, 0, 0, NULL, NULL, "0", 0,
	 "CPU backend compute threads; 0 = one per core",
	 .apply = 0 /* restart */},
	{"inference.max_context_length", CONFIG_INT, OFF(inference.max_context_length), NO_AUX, 16,
	 16 * MB, 0, 0, NULL, NULL, "32768", 0,
	 "the most tokens a strategy=full cache holds; the default of limits.max_prompt_tokens",
	 .apply = SCHED},
	{"inference.cache.strategy", CONFIG_ENUM, OFF(inference.cache.strategy), NO_AUX, 0, 0, 0, 0,
	 strategy_names, strategy_values, "sliding_window", 0,
	 "sliding_window (sinks + recent window, unbounded streams) | full",
	 .apply = SCHED},
	{"inference.cache.window_size", CONFIG_INT, OFF(inference.cache.window_size), NO_AUX, 1,
	 16 * MB, 0, 0, NULL, NULL, "4096", 0,
	 "recent tokens kept besides the sinks, in global attention layers (a model's sliding-window "
	 "layers keep exactly its window)",
	 .apply = SCHED},
	{"inference.cache.sink_keep_count", CONFIG_INT, OFF(inference.cache.sink_keep_count), NO_AUX,
	 0, 1024, 0, 0, NULL, NULL, "4", 0,
	 "first tokens of a stream kept forever (attention sinks); 0 = window only",
	 .apply = SCHED},
	{"inference.cache.pin_system_prompt", CONFIG_BOOL, OFF(inference.cache.pin_system_prompt),
	 NO_AUX, 0, 0, 0, 0, NULL, NULL, "false", 0,
	 "keep a chat's system message(s) and the template text before the first user turn in "
	 "the sink tier",
	 .apply = SERVER},
	{"inference.cache.max_pinned_tokens", CONFIG_INT, OFF(inference.cache.max_pinned_tokens),
	 NO_AUX, 0, 1 * MB, 0, 0, NULL, NULL, "512", 0,
	 "the most tokens a stream may pin (a system prompt, pin_prefix_tokens); at most "
	 "window_size - 1",
	 .apply = SCHED},
	{"inference.cache.global_cache_limit", CONFIG_SIZE, OFF(inference.cache.global_cache_limit),
	 OFF(inference.cache.global_cache_limit_auto), 1 * MB, 64 * TB, 0, 0, NULL, NULL, "auto", 0,
	 "KV memory budget for all sessions: bytes (KiB/MiB/GiB suffixes) or auto",
	 .apply = SCHED},
	{"inference.cache.auto_fraction", CONFIG_DOUBLE, OFF(inference.cache.auto_fraction), NO_AUX, 0,
	 0, 0.01, 0.95, NULL, NULL, "0.5", 0,
	 "with global_cache_limit auto: share of free memory (after weights) to use",
	 .apply = SCHED},
	{"inference.cache.rope_positions", CONFIG_ENUM, OFF(inference.cache.rope_positions), NO_AUX, 0,
	 0, 0, 0, rope_names, rope_values, "cache", 0,
	 "cache (rank in the cache, StreamingLLM) | original (stream index; ablation only)",
	 .apply = SCHED},
	{"inference.cache.anchors.enabled", CONFIG_BOOL, OFF(inference.cache.anchors.enabled),
	 NO_AUX, 0, 0, 0, 0, NULL, NULL, "false", 0,
	 "keep window tokens that received heavy attention as anchors when they leave the "
	 "window (sliding_window only)",
	 .apply = SCHED},
	{"inference.cache.anchors.max_tokens", CONFIG_INT, OFF(inference.cache.anchors.max_tokens),
	 NO_AUX, 1, 4096, 0, 0, NULL, NULL, "16", 0,
	 "the most anchors per layer (full precision, in each session's reserved bound)",
	 .apply = SCHED},
	{"inference.cache.anchors.promote_threshold", CONFIG_DOUBLE,
	 OFF(inference.cache.anchors.promote_threshold), NO_AUX, 0, 0, 0.0001, 1.0, NULL, NULL,
	 "0.05", 0,
	 "moving average of the attention a leaving window token received (its largest over the "
	 "heads of a layer, a softmax weight) that makes it an anchor",
	 .apply = SCHED},
	{"inference.cache.anchors.demote_after_steps", CONFIG_INT,
	 OFF(inference.cache.anchors.demote_after_steps), NO_AUX, 1, 16 * MB, 0, 0, NULL, NULL,
	 "64", 0, "an anchor that receives less than promote_threshold for this many steps in a "
	 "row is dropped",
	 .apply = SCHED},
	{"inference.attention.dtype", CONFIG_ENUM, OFF(inference.attention.dtype), NO_AUX, 0, 0, 0, 0,
	 dtype_names, dtype_values, "bfloat16", 0,
	 "precision of full-precision KV tiers: bfloat16 | float16 | float32",
	 .apply = SCHED},
	{"inference.quantization.enabled", CONFIG_BOOL, OFF(inference.quantization.enabled), NO_AUX, 0,
	 0, 0, 0, NULL, NULL, "false", 0, "quantize older window tokens (the compressed tier)",
	 .apply = SCHED},
	{"inference.quantization.protect_sink_positions", CONFIG_BOOL,
	 OFF(inference.quantization.protect_sink_positions), NO_AUX, 0, 0, 0, 0, NULL, NULL, "true", 0,
	 "keep the sink tokens in full precision",
	 .apply = SCHED},
	{"inference.quantization.bits", CONFIG_ENUM, OFF(inference.quantization.bits), NO_AUX, 0, 0, 0,
	 0, bits_names, bits_values, "8", 0, "bits per quantized value: 8 | 4",
	 .apply = SCHED},
	{"inference.quantization.full_precision_recent", CONFIG_INT,
	 OFF(inference.quantization.full_precision_recent), NO_AUX, 0, 16 * MB, 0, 0, NULL, NULL,
	 "128", 0, "newest window tokens kept unquantized (the hot tier)",
	 .apply = SCHED},
	{"inference.prefix_cache.max_bytes", CONFIG_SIZE, OFF(inference.prefix_cache.max_bytes),
	 NO_AUX, 0, 64 * TB, 0, 0, NULL, NULL, "256MiB", 0,
	 "K/V of recently computed prompt prefixes kept for new streams that start with them "
	 "(pinned prefixes shared, others copied); least recently used out first; 0 = off",
	 .apply = SCHED},
	{"scheduler.max_batch_tokens", CONFIG_INT, OFF(scheduler.max_batch_tokens), NO_AUX, 1, 65536,
	 0, 0, NULL, NULL, "512", 0, "tokens per forward pass (decode tokens + prefill chunks)",
	 .apply = SCHED},
	{"scheduler.max_queue", CONFIG_INT, OFF(scheduler.max_queue), NO_AUX, 0, 1000000, 0, 0, NULL,
	 NULL, "256", 0, "requests waiting for admission at most; beyond: 503 + Retry-After",
	 .apply = SCHED},
	{"scheduler.max_queue_wait_s", CONFIG_INT, OFF(scheduler.max_queue_wait_s), NO_AUX, 0, 3600, 0,
	 0, NULL, NULL, "30", 0, "seconds a request may wait for admission before 503",
	 .apply = SCHED},
	{"scheduler.session_ttl_s", CONFIG_INT, OFF(scheduler.session_ttl_s), NO_AUX, 1, 604800, 0, 0,
	 NULL, NULL, "600", 0, "idle persistent sessions expire after this many seconds",
	 .apply = SCHED},
	{"scheduler.session_empty_ttl_s", CONFIG_INT, OFF(scheduler.session_empty_ttl_s), NO_AUX, 1,
	 604800, 0, 0, NULL, NULL, "60", 0,
	 "a persistent session that no request ran on expires this many seconds after its "
	 "creation (at most session_ttl_s), releasing its KV reservation",
	 .apply = SCHED},
	{"scheduler.session_offload_s", CONFIG_INT, OFF(scheduler.session_offload_s), NO_AUX, 0,
	 604800, 0, 0, NULL, NULL, "0", 0,
	 "idle seconds before a persistent session is written to the session store "
	 "(sessions.store_dir) and freed here; 0 = never (drain still writes them)",
	 .apply = SCHED},
	{"scheduler.max_unsent_tokens", CONFIG_INT, OFF(scheduler.max_unsent_tokens), NO_AUX, 0,
	 65536, 0, 0, NULL, NULL, "16", 0,
	 "a stream with this many tokens its connection has not taken yet skips decode steps "
	 "until it does; 0 = never",
	 .apply = SCHED},
	{"sessions.store_dir", CONFIG_STRING, OFF(sessions.store_dir), NO_AUX, 0, 0, 0, 0, NULL, NULL,
	 "", 0,
	 "folder of session snapshots (a local one, or a volume every instance mounts): idle "
	 "sessions are offloaded there, drain writes every session there, and a session this "
	 "instance does not hold is looked up there; empty = none",
	 .apply = 0 /* restart */},
	{"sessions.store", CONFIG_STRING, OFF(sessions.store), NO_AUX, 0, 0, 0, 0, NULL, NULL, "", 0,
	 "the session store as a Redis or Valkey server: redis://host[:port][/db] or "
	 "rediss://host[:port][/db] (TLS); instead of sessions.store_dir; empty = none",
	 .apply = 0 /* restart */},
	{"sessions.store_auth_file", CONFIG_STRING, OFF(sessions.store_auth_file), NO_AUX, 0, 0, 0,
	 0, NULL, NULL, "", 0,
	 "file holding the Redis AUTH password (\"password\" or \"user password\"); empty = no AUTH",
	 .apply = 0 /* restart */},
	{"sessions.store_tls_ca_file", CONFIG_STRING, OFF(sessions.store_tls_ca_file), NO_AUX, 0, 0,
	 0, 0, NULL, NULL, "", 0,
	 "CA bundle that signs the rediss:// server's certificate; empty = the system's",
	 .apply = 0 /* restart */},
	{"sessions.per_key_store_bytes", CONFIG_SIZE, OFF(sessions.per_key_store_bytes), NO_AUX, 0,
	 1LL << 50, 0, 0, NULL, NULL, "0", 0,
	 "bytes of the store one API key's sessions may take before its own oldest are evicted "
	 "(never another key's while it is over); 0 = store_max_bytes / 8",
	 .apply = 0 /* restart */},
	{"sessions.store_max_bytes", CONFIG_SIZE, OFF(sessions.store_max_bytes), NO_AUX, 0, 1LL << 50,
	 0, 0, NULL, NULL, "4GiB", 0,
	 "bytes the store's snapshots may take; beyond, the oldest are deleted; 0 = unbounded",
	 .apply = 0 /* restart */},
	{"sessions.lease_timeout_s", CONFIG_INT, OFF(sessions.lease_timeout_s), NO_AUX, 1, 3600, 0, 0,
	 NULL, NULL, "30", 0,
	 "an instance refreshes the leases of the sessions it holds; a lease not refreshed for "
	 "this long (its instance died) is taken over",
	 .apply = 0 /* restart */},
	{"sessions.instance_id", CONFIG_STRING, OFF(sessions.instance_id), NO_AUX, 0, 0, 0, 0, NULL,
	 NULL, "", 0, "this instance's name in leases; empty = host name and process id",
	 .apply = 0 /* restart */},
	{"responses.store_ttl_s", CONFIG_INT, OFF(responses.store_ttl_s), NO_AUX, 1, 604800, 0, 0,
	 NULL, NULL, "600", 0,
	 "seconds an idle stored response (store: true) can be continued with "
	 "previous_response_id; it holds no KV reservation while idle (parked as bytes, or in "
	 "the session store when one is set, where the store's expiry applies)",
	 .apply = 0 /* restart */},
	{"responses.store_max_bytes", CONFIG_SIZE, OFF(responses.store_max_bytes), NO_AUX, 0,
	 1LL << 40, 0, 0, NULL, NULL, "256MiB", 0,
	 "memory the parked stored responses may take without a session store; beyond, the "
	 "oldest are dropped; 0 = unbounded",
	 .apply = 0 /* restart */},
	{"limits.max_body_bytes", CONFIG_SIZE, OFF(limits.max_body_bytes), NO_AUX, 1 * KB, 256 * MB, 0,
	 0, NULL, NULL, "1MiB", 0, "largest request body; larger gets 413",
	 .apply = SERVER},
	{"limits.max_tokens", CONFIG_INT, OFF(limits.max_tokens), NO_AUX, 1, 16 * MB, 0, 0, NULL, NULL,
	 "4096", 0, "largest max_tokens a request may ask for",
	 .apply = SERVER | SCHED},
	{"limits.max_prompt_tokens", CONFIG_INT, OFF(limits.max_prompt_tokens), NO_AUX, 0, 16 * MB,
	 0, 0, NULL, NULL, "0", 0,
	 "most prompt tokens one request (or session append) may send, under every strategy; "
	 "0 = inference.max_context_length",
	 .apply = SCHED},
	{"limits.max_sessions", CONFIG_INT, OFF(limits.max_sessions), NO_AUX, 0, 1000000, 0, 0, NULL,
	 NULL, "1024", 0, "persistent sessions alive at most, all clients together; beyond: 503; 0 = "
	 "unlimited",
	 .apply = SCHED},
	{"limits.per_key.max_sessions", CONFIG_INT, OFF(limits.per_key.max_sessions), NO_AUX, 0,
	 1000000, 0, 0, NULL, NULL, "0", 0,
	 "persistent sessions one API key (or client address without keys) may hold; beyond: 429; "
	 "0 = unlimited",
	 .apply = SERVER},
	{"limits.per_key.max_streams", CONFIG_INT, OFF(limits.per_key.max_streams), NO_AUX, 0,
	 1000000, 0, 0, NULL, NULL, "0", 0,
	 "generations (waiting or running) one API key (or client address) may have at once; "
	 "beyond: 429; 0 = unlimited",
	 .apply = SERVER},
	{"limits.per_key.max_queued", CONFIG_INT, OFF(limits.per_key.max_queued), NO_AUX, 0, 1000000,
	 0, 0, NULL, NULL, "0", 0,
	 "of those, waiting for admission at most; beyond: 429; 0 = unlimited",
	 .apply = SERVER},
	{"limits.per_key.prompt_tokens_per_minute", CONFIG_INT,
	 OFF(limits.per_key.prompt_tokens_per_minute), NO_AUX, 0, 1LL << 40, 0, 0, NULL, NULL, "0",
	 0,
	 "prompt tokens one API key (or client address) may send per minute (a bucket that "
	 "refills continuously); beyond: 429; 0 = unlimited",
	 .apply = SERVER},
	{"monitoring.input_perplexity", CONFIG_ENUM, OFF(monitoring.input_perplexity), NO_AUX, 0, 0,
	 0, 0, monitor_names, monitor_values, "off", 0,
	 "off | sample | all: score the input tokens (prompt and appended text) as the model "
	 "reads them, for the streaming-perplexity monitor; costs an output projection per "
	 "scored token (generated tokens are always scored)",
	 .apply = SCHED},
	{"monitoring.input_perplexity_every", CONFIG_INT, OFF(monitoring.input_perplexity_every),
	 NO_AUX, 1, 1000000, 0, 0, NULL, NULL, "16", 0,
	 "with input_perplexity sample: score every K-th input token",
	 .apply = SCHED},
	{"monitoring.perplexity_alert_ratio", CONFIG_DOUBLE, OFF(monitoring.perplexity_alert_ratio),
	 NO_AUX, 0, 0, 1.0, 1000.0, NULL, NULL, "1.05", 0,
	 "a session whose running perplexity (every scored token after its first full window) "
	 "rises more than this factor above its first full window gets a warning log line and "
	 "counts in sinkd_perplexity_alerts_total",
	 .apply = SCHED},
	{"logging.level", CONFIG_ENUM, OFF(logging.level), NO_AUX, 0, 0, 0, 0, level_names,
	 level_values, "info", 0, "debug | info | warn | error",
	 .apply = LOGGING},
	{"logging.format", CONFIG_ENUM, OFF(logging.format), NO_AUX, 0, 0, 0, 0, format_names,
	 format_values, "json", 0, "json | text (lines on stderr)",
	 .apply = LOGGING},
};

const size_t config_n_keys = sizeof(config_keys) / sizeof(config_keys[0]);
