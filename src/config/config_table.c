/* The configuration table (Redis config.c style): every key, its type,
 * default, bounds and flags.  Defaults exist only here; the parser reads
 * them through the same code path as YAML values. */
#include "config/config_table.h"

#include <stddef.h>

#include "config/config.h"
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
static const char *const bits_names[] = {"8", "4", NULL};
static const int bits_values[] = {8, 4};

#define R CONFIG_RELOADABLE
#define X CONFIG_RESTART
#define S CONFIG_SECRET
#define KB 1024LL
#define MB (1024LL * KB)
#define TB (1024LL * 1024LL * MB)

const struct config_key config_keys[] = {
	{"server.listen", CONFIG_STRING, OFF(server.listen), NO_AUX, 0, 0, 0, 0, NULL, NULL,
	 "127.0.0.1:8443", X, "address to listen on: host:port, [ipv6]:port, or *:port for all",
	 .validate = config_validate_listen},
	{"server.tls.enabled", CONFIG_BOOL, OFF(server.tls_enabled), NO_AUX, 0, 0, 0, 0, NULL, NULL,
	 "true", X, "serve HTTPS; false serves plain HTTP and logs a warning"},
	{"server.tls.cert_file", CONFIG_PATH, OFF(server.tls_cert_file), NO_AUX, 0, 0, 0, 0, NULL,
	 NULL, "", X, "PEM certificate chain (required when tls.enabled)"},
	{"server.tls.key_file", CONFIG_PATH, OFF(server.tls_key_file), NO_AUX, 0, 0, 0, 0, NULL, NULL,
	 "", X, "PEM private key (required when tls.enabled)"},
	{"server.api_keys", CONFIG_STRLIST, OFF(server.api_keys), OFF(server.n_api_keys), 0, 0, 0, 0,
	 NULL, NULL, "", R | S, "accepted bearer keys as sha256:<64 hex> digests; empty = no auth",
	 .validate = config_validate_key_digest},
	{"server.max_connections", CONFIG_INT, OFF(server.max_connections), NO_AUX, 1, 100000, 0, 0,
	 NULL, NULL, "4096", X, "open connections at most (SSE streams included)"},
	{"server.sse_keepalive_s", CONFIG_INT, OFF(server.sse_keepalive_s), NO_AUX, 1, 3600, 0, 0,
	 NULL, NULL, "15", R, "seconds between ': keep-alive' comments on idle streams"},
	{"server.threads", CONFIG_INT, OFF(server.threads), NO_AUX, 1, 64, 0, 0, NULL, NULL, "2", X,
	 "HTTP event-loop threads (streams do not need a thread each)"},
	{"model.path", CONFIG_PATH, OFF(model.path), NO_AUX, 0, 0, 0, 0, NULL, NULL, "", X,
	 "GGUF model file (required to serve); relative paths are relative to this file"},
	{"model.sha256", CONFIG_STRING, OFF(model.sha256), NO_AUX, 0, 0, 0, 0, NULL, NULL, "", X,
	 "expected SHA-256 of the model file (64 hex); checked at load when set",
	 .validate = config_validate_sha256},
	{"model.name", CONFIG_STRING, OFF(model.name), NO_AUX, 0, 0, 0, 0, NULL, NULL, "", X,
	 "model id served in the API; default: the file name without .gguf"},
	{"model.backend", CONFIG_ENUM, OFF(model.backend), NO_AUX, 0, 0, 0, 0, backend_names,
	 backend_values, "auto", X, "auto (cuda when a GPU is present, else cpu) | cpu | cuda"},
	{"engine.threads", CONFIG_INT, OFF(engine.threads), NO_AUX, 0, 1024, 0, 0, NULL, NULL, "0", X,
	 "CPU backend compute threads; 0 = one per core"},
	{"inference.max_context_length", CONFIG_INT, OFF(inference.max_context_length), NO_AUX, 16,
	 16 * MB, 0, 0, NULL, NULL, "32768", R,
	 "longest prompt accepted; the most tokens a strategy=full cache holds"},
	{"inference.cache.strategy", CONFIG_ENUM, OFF(inference.cache.strategy), NO_AUX, 0, 0, 0, 0,
	 strategy_names, strategy_values, "sliding_window", R,
	 "sliding_window (sinks + recent window, unbounded streams) | full"},
	{"inference.cache.window_size", CONFIG_INT, OFF(inference.cache.window_size), NO_AUX, 1,
	 16 * MB, 0, 0, NULL, NULL, "4096", R, "recent tokens kept besides the sinks"},
	{"inference.cache.sink_keep_count", CONFIG_INT, OFF(inference.cache.sink_keep_count), NO_AUX,
	 0, 1024, 0, 0, NULL, NULL, "4", R,
	 "first tokens of a stream kept forever (attention sinks); 0 = window only"},
	{"inference.cache.global_cache_limit", CONFIG_SIZE, OFF(inference.cache.global_cache_limit),
	 OFF(inference.cache.global_cache_limit_auto), 1 * MB, 64 * TB, 0, 0, NULL, NULL, "auto", X,
	 "KV memory budget for all sessions: bytes (KiB/MiB/GiB suffixes) or auto"},
	{"inference.cache.auto_fraction", CONFIG_DOUBLE, OFF(inference.cache.auto_fraction), NO_AUX, 0,
	 0, 0.01, 0.95, NULL, NULL, "0.5", X,
	 "with global_cache_limit auto: share of free memory (after weights) to use"},
	{"inference.cache.rope_positions", CONFIG_ENUM, OFF(inference.cache.rope_positions), NO_AUX, 0,
	 0, 0, 0, rope_names, rope_values, "cache", R,
	 "cache (rank in the cache, StreamingLLM) | original (stream index; ablation only)"},
	{"inference.attention.dtype", CONFIG_ENUM, OFF(inference.attention.dtype), NO_AUX, 0, 0, 0, 0,
	 dtype_names, dtype_values, "bfloat16", R,
	 "precision of full-precision KV tiers: bfloat16 | float16 | float32"},
	{"inference.quantization.enabled", CONFIG_BOOL, OFF(inference.quantization.enabled), NO_AUX, 0,
	 0, 0, 0, NULL, NULL, "false", R, "quantize older window tokens (the compressed tier)"},
	{"inference.quantization.protect_sink_positions", CONFIG_BOOL,
	 OFF(inference.quantization.protect_sink_positions), NO_AUX, 0, 0, 0, 0, NULL, NULL, "true", R,
	 "keep the sink tokens in full precision"},
	{"inference.quantization.bits", CONFIG_ENUM, OFF(inference.quantization.bits), NO_AUX, 0, 0, 0,
	 0, bits_names, bits_values, "8", R, "bits per quantized value: 8 | 4"},
	{"inference.quantization.full_precision_recent", CONFIG_INT,
	 OFF(inference.quantization.full_precision_recent), NO_AUX, 0, 16 * MB, 0, 0, NULL, NULL,
	 "128", R, "newest window tokens kept unquantized (the hot tier)"},
	{"scheduler.max_batch_tokens", CONFIG_INT, OFF(scheduler.max_batch_tokens), NO_AUX, 1, 65536,
	 0, 0, NULL, NULL, "512", R, "tokens per forward pass (decode tokens + prefill chunks)"},
	{"scheduler.max_queue", CONFIG_INT, OFF(scheduler.max_queue), NO_AUX, 0, 1000000, 0, 0, NULL,
	 NULL, "256", R, "requests waiting for admission at most; beyond: 503 + Retry-After"},
	{"scheduler.max_queue_wait_s", CONFIG_INT, OFF(scheduler.max_queue_wait_s), NO_AUX, 0, 3600, 0,
	 0, NULL, NULL, "30", R, "seconds a request may wait for admission before 503"},
	{"scheduler.session_ttl_s", CONFIG_INT, OFF(scheduler.session_ttl_s), NO_AUX, 1, 604800, 0, 0,
	 NULL, NULL, "600", R, "idle persistent sessions expire after this many seconds"},
	{"scheduler.session_offload_s", CONFIG_INT, OFF(scheduler.session_offload_s), NO_AUX, 0,
	 604800, 0, 0, NULL, NULL, "0", R,
	 "idle seconds before a session's cache moves to host memory; 0 = never"},
	{"scheduler.max_unsent_tokens", CONFIG_INT, OFF(scheduler.max_unsent_tokens), NO_AUX, 0,
	 65536, 0, 0, NULL, NULL, "16", R,
	 "a stream with this many tokens its connection has not taken yet skips decode steps "
	 "until it does; 0 = never"},
	{"limits.max_body_bytes", CONFIG_SIZE, OFF(limits.max_body_bytes), NO_AUX, 1 * KB, 256 * MB, 0,
	 0, NULL, NULL, "1MiB", R, "largest request body; larger gets 413"},
	{"limits.max_tokens", CONFIG_INT, OFF(limits.max_tokens), NO_AUX, 1, 16 * MB, 0, 0, NULL, NULL,
	 "4096", R, "largest max_tokens a request may ask for"},
	{"logging.level", CONFIG_ENUM, OFF(logging.level), NO_AUX, 0, 0, 0, 0, level_names,
	 level_values, "info", R, "debug | info | warn | error"},
	{"logging.format", CONFIG_ENUM, OFF(logging.format), NO_AUX, 0, 0, 0, 0, format_names,
	 format_values, "json", R, "json | text (lines on stderr)"},
};

const size_t config_n_keys = sizeof(config_keys) / sizeof(config_keys[0]);
