/* The configuration table: every key parsed, every default, every error
 * class with its message and location, --set overrides and the example file. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

#include "config/config.h"
#include "config/config_reload.h"
#include "config/config_table.h"
#include "model/model.h"
#include "testutil.h"

static char tmpdir[256];

static const char *write_tmp(const char *name, const char *text)
{
	static char path[512];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	return path;
}

/* Loads text as a file; returns rc and leaves the errors joined in `joined`. */
static int load_text(struct sinkd_config *c, const char *text, const char *const *sets, size_t n,
		     char *joined, size_t joined_len)
{
	struct config_errors errs;
	const char *path = write_tmp("t.yaml", text);
	int rc = config_load(c, path, sets, n, &errs);
	joined[0] = '\0';
	for (size_t i = 0; i < errs.n; i++) {
		strncat(joined, errs.lines[i], joined_len - strlen(joined) - 2);
		strncat(joined, "\n", joined_len - strlen(joined) - 1);
	}
	config_errors_deinit(&errs);
	return rc;
}

static void setup(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sinkd-config-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_defaults)
{
	struct sinkd_config c;
	ck_assert_int_eq(config_init_defaults(&c), 0);
	ck_assert_str_eq(c.server.listen, "127.0.0.1:8443");
	ck_assert(c.server.tls_enabled);
	ck_assert_ptr_null(c.server.tls_cert_file);
	ck_assert_ptr_null(c.server.tls_key_file);
	ck_assert_uint_eq(c.server.n_api_keys, 0);
	ck_assert_int_eq(c.server.max_connections, 4096);
	ck_assert_int_eq(c.server.sse_keepalive_s, 15);
	ck_assert_int_eq(c.server.threads, 2);
	ck_assert_ptr_null(c.model.path);
	ck_assert_ptr_null(c.model.sha256);
	ck_assert_ptr_null(c.model.name);
	ck_assert_int_eq(c.model.backend, MODEL_BACKEND_AUTO);
	ck_assert_int_eq(c.engine.threads, 0);
	ck_assert_int_eq(c.inference.max_context_length, 32768);
	ck_assert_int_eq(c.inference.cache.strategy, CACHE_STRATEGY_SLIDING_WINDOW);
	ck_assert_int_eq(c.inference.cache.window_size, 4096);
	ck_assert_int_eq(c.inference.cache.sink_keep_count, 4);
	ck_assert(c.inference.cache.global_cache_limit_auto);
	ck_assert_double_eq(c.inference.cache.auto_fraction, 0.5);
	ck_assert_int_eq(c.inference.cache.rope_positions, ROPE_POSITIONS_CACHE);
	ck_assert_int_eq(c.inference.attention.dtype, KV_DTYPE_BF16);
	ck_assert(!c.inference.quantization.enabled);
	ck_assert(c.inference.quantization.protect_sink_positions);
	ck_assert_int_eq(c.inference.quantization.bits, 8);
	ck_assert_int_eq(c.inference.quantization.full_precision_recent, 128);
	ck_assert_int_eq(c.scheduler.max_batch_tokens, 512);
	ck_assert_int_eq(c.scheduler.max_queue, 256);
	ck_assert_int_eq(c.scheduler.max_queue_wait_s, 30);
	ck_assert_int_eq(c.scheduler.session_ttl_s, 600);
	ck_assert_int_eq(c.scheduler.session_offload_s, 0);
	ck_assert_int_eq(c.limits.max_body_bytes, 1048576);
	ck_assert_int_eq(c.limits.max_tokens, 4096);
	ck_assert_int_eq(c.logging.level, LOG_INFO);
	ck_assert_int_eq(c.logging.format, LOG_FORMAT_JSON);
	config_deinit(&c);
}
END_TEST

/* The deployment guide's block must load unchanged. */
START_TEST(test_users_guide_block)
{
	struct sinkd_config c;
	char errs[4096];
	const char *text = "inference:\n"
			   "  max_context_length: 32768\n"
			   "  cache:\n"
			   "    strategy: sliding_window      # sliding_window | full\n"
			   "    window_size: 4096\n"
			   "    sink_keep_count: 4\n"
			   "    global_cache_limit: \"8GiB\"    # bytes with KiB/MiB/GiB suffixes, or \"auto\"\n"
			   "  attention:\n"
			   "    dtype: \"bfloat16\"             # bfloat16 | float16 | float32\n"
			   "  quantization:\n"
			   "    enabled: true\n"
			   "    protect_sink_positions: true\n";
	ck_assert_msg(load_text(&c, text, NULL, 0, errs, sizeof(errs)) == 0, "%s", errs);
	ck_assert_int_eq(c.inference.cache.global_cache_limit, 8LL << 30);
	ck_assert(!c.inference.cache.global_cache_limit_auto);
	ck_assert(c.inference.quantization.enabled);
	ck_assert_int_eq(c.inference.attention.dtype, KV_DTYPE_BF16);
	config_deinit(&c);
}
END_TEST

/* Every key set to a non-default value through YAML reaches its field. */
START_TEST(test_every_key_parsed)
{
	struct sinkd_config c;
	char errs[4096];
	char model[512], cert[512];
	snprintf(model, sizeof(model), "%s", write_tmp("m.gguf", "x"));
	snprintf(cert, sizeof(cert), "%s", write_tmp("c.pem", "x"));
	char text[4096];
	snprintf(text, sizeof(text),
		 "server:\n  listen: \"[::1]:9000\"\n  threads: 3\n  max_connections: 10\n"
		 "  sse_keepalive_s: 5\n  api_keys: [\"sha256:%064d\"]\n"
		 "  tls: {enabled: false, cert_file: \"%s\", key_file: \"%s\"}\n"
		 "model: {path: \"%s\", sha256: \"%064d\", name: m1, backend: cpu}\n"
		 "engine: {threads: 2}\n"
		 "inference:\n  max_context_length: 1000\n"
		 "  cache: {strategy: full, window_size: 100, sink_keep_count: 0, global_cache_limit: 512MiB,"
		 " auto_fraction: 0.25, rope_positions: original}\n"
		 "  attention: {dtype: float32}\n"
		 "  quantization: {enabled: true, protect_sink_positions: false, bits: 4,"
		 " full_precision_recent: 16}\n"
		 "scheduler: {max_batch_tokens: 64, max_queue: 3, max_queue_wait_s: 2, session_ttl_s: 9,"
		 " session_offload_s: 4}\n"
		 "limits: {max_body_bytes: 2KiB, max_tokens: 77}\n"
		 "logging: {level: debug, format: text}\n",
		 7, cert, cert, model, 1);
	ck_assert_msg(load_text(&c, text, NULL, 0, errs, sizeof(errs)) == 0, "%s", errs);
	ck_assert_str_eq(c.server.listen, "[::1]:9000");
	ck_assert_int_eq(c.server.threads, 3);
	ck_assert_int_eq(c.server.max_connections, 10);
	ck_assert_int_eq(c.server.sse_keepalive_s, 5);
	ck_assert_uint_eq(c.server.n_api_keys, 1);
	ck_assert_int_eq(strncmp(c.server.api_keys[0], "sha256:000", 10), 0);
	ck_assert(!c.server.tls_enabled);
	ck_assert_str_eq(c.server.tls_cert_file, cert);
	ck_assert_str_eq(c.model.path, model);
	ck_assert_int_eq((int)strlen(c.model.sha256), 64);
	ck_assert_str_eq(c.model.name, "m1");
	ck_assert_int_eq(c.model.backend, MODEL_BACKEND_CPU);
	ck_assert_int_eq(c.engine.threads, 2);
	ck_assert_int_eq(c.inference.max_context_length, 1000);
	ck_assert_int_eq(c.inference.cache.strategy, CACHE_STRATEGY_FULL);
	ck_assert_int_eq(c.inference.cache.window_size, 100);
	ck_assert_int_eq(c.inference.cache.sink_keep_count, 0);
	ck_assert_int_eq(c.inference.cache.global_cache_limit, 512LL << 20);
	ck_assert_double_eq(c.inference.cache.auto_fraction, 0.25);
	ck_assert_int_eq(c.inference.cache.rope_positions, ROPE_POSITIONS_ORIGINAL);
	ck_assert_int_eq(c.inference.attention.dtype, KV_DTYPE_F32);
	ck_assert(c.inference.quantization.enabled);
	ck_assert(!c.inference.quantization.protect_sink_positions);
	ck_assert_int_eq(c.inference.quantization.bits, 4);
	ck_assert_int_eq(c.inference.quantization.full_precision_recent, 16);
	ck_assert_int_eq(c.scheduler.max_batch_tokens, 64);
	ck_assert_int_eq(c.scheduler.max_queue, 3);
	ck_assert_int_eq(c.scheduler.max_queue_wait_s, 2);
	ck_assert_int_eq(c.scheduler.session_ttl_s, 9);
	ck_assert_int_eq(c.scheduler.session_offload_s, 4);
	ck_assert_int_eq(c.limits.max_body_bytes, 2048);
	ck_assert_int_eq(c.limits.max_tokens, 77);
	ck_assert_int_eq(c.logging.level, LOG_DEBUG);
	ck_assert_int_eq(c.logging.format, LOG_FORMAT_TEXT);
	config_deinit(&c);
}
END_TEST

struct error_case {
	const char *text;
	const char *expect[4]; /* substrings of the error output */
};

static const struct error_case error_cases[] = {
	{"inference:\n  cache:\n    sink_keep_cont: 4\n",
	 {"t.yaml:3:5:", "inference.cache.sink_keep_cont: unknown key",
	  "did you mean 'inference.cache.sink_keep_count'", NULL}},
	{"inferense:\n  max_context_length: 10\n",
	 {"t.yaml:1:1:", "inferense: unknown key", "did you mean 'inference'", NULL}},
	{"inference:\n  cache:\n    window_size: [1, 2]\n",
	 {"t.yaml:3:5:", "inference.cache.window_size: wrong type", "an integer 1..", NULL}},
	{"inference:\n  cache:\n    window_size: lots\n",
	 {"t.yaml:3:5:", "'lots' is not an integer", NULL}},
	{"server:\n  tls: true\n", {"t.yaml:2:3:", "server.tls: wrong type", "section", NULL}},
	{"inference:\n  cache:\n    window_size: 0\n",
	 {"t.yaml:3:5:", "0 is out of range", "allowed: an integer 1..16777216", NULL}},
	{"inference:\n  cache:\n    global_cache_limit: \"8 GiBs\"\n",
	 {"t.yaml:3:5:", "'8 GiBs' is not a size", "KiB/MiB/GiB", NULL}},
	{"logging:\n  level: info\n  level: debug\n",
	 {"t.yaml:3:3:", "logging.level: duplicate key", NULL}},
	{"logging:\n  level: [info\n", {"t.yaml:", "YAML syntax error", NULL}},
	{"logging:\n  level: loud\n",
	 {"t.yaml:2:3:", "'loud' is not allowed", "debug | info | warn | error", NULL}},
	{"inference:\n  attention:\n    dtype: float8\n",
	 {"'float8' is not allowed", "bfloat16 | float16 | float32", NULL}},
	{"inference:\n  quantization:\n    bits: 3\n", {"'3' is not allowed", "8 | 4", NULL}},
	{"server:\n  listen: localhost\n", {"server.listen:", "host:port", NULL}},
	{"server:\n  api_keys: [\"hunter2\"]\n", {"t.yaml:2:14:", "sha256:", NULL}},
	{"model:\n  sha256: abc\n", {"model.sha256:", "64 hex digits", NULL}},
	{"inference:\n  cache:\n    sink_keep_count: 8\n    window_size: 8\n",
	 {"t.yaml:3:5:", "sink_keep_count: 8 must be smaller than inference.cache.window_size (8",
	  NULL}},
	{"inference:\n  max_context_length: 100\n  cache:\n    window_size: 200\n",
	 {"t.yaml:4:5:", "window_size: 200 is larger than inference.max_context_length (100)", NULL}},
	{"inference:\n  cache:\n    window_size: 64\n  quantization:\n    enabled: true\n"
	 "    full_precision_recent: 65\n",
	 {"full_precision_recent: 65 is larger than inference.cache.window_size (64)", NULL}},
	{"- a\n- b\n", {"t.yaml:1:1:", "mapping of sections", NULL}},
	{"limits:\n  max_tokens:\n", {"limits.max_tokens: needs a value", NULL}},
};

START_TEST(test_error_classes)
{
	const struct error_case *ec = &error_cases[_i];
	struct sinkd_config c;
	char errs[4096];
	ck_assert_int_ne(load_text(&c, ec->text, NULL, 0, errs, sizeof(errs)), 0);
	for (size_t j = 0; ec->expect[j]; j++)
		ck_assert_msg(strstr(errs, ec->expect[j]) != NULL, "case %d: want '%s' in:\n%s", _i,
			      ec->expect[j], errs);
	/* A failed load leaves defaults, never a half-applied config. */
	ck_assert_int_eq(c.inference.cache.window_size, 4096);
	config_deinit(&c);
}
END_TEST

START_TEST(test_every_error_reported)
{
	struct sinkd_config c;
	char errs[4096];
	const char *text = "bogus: 1\nlogging:\n  level: loud\n  format: xml\n";
	ck_assert_int_ne(load_text(&c, text, NULL, 0, errs, sizeof(errs)), 0);
	ck_assert_ptr_nonnull(strstr(errs, "t.yaml:1:1: bogus: unknown key"));
	ck_assert_ptr_nonnull(strstr(errs, "t.yaml:3:3: logging.level"));
	ck_assert_ptr_nonnull(strstr(errs, "t.yaml:4:3: logging.format"));
	config_deinit(&c);
}
END_TEST

START_TEST(test_sink_zero_valid)
{
	struct sinkd_config c;
	char errs[4096];
	const char *text = "inference:\n  cache:\n    sink_keep_count: 0\n    window_size: 256\n";
	ck_assert_msg(load_text(&c, text, NULL, 0, errs, sizeof(errs)) == 0, "%s", errs);
	ck_assert_int_eq(c.inference.cache.sink_keep_count, 0);
	config_deinit(&c);
}
END_TEST

START_TEST(test_set_overrides)
{
	struct sinkd_config c;
	char errs[4096];
	const char *sets[] = {"inference.cache.window_size=252", "logging.format=text",
			      "server.api_keys=sha256:" "0000000000000000000000000000000000000000000000000000000000000000,"
			      "sha256:1111111111111111111111111111111111111111111111111111111111111111"};
	ck_assert_msg(load_text(&c, "inference:\n  cache:\n    window_size: 100\n", sets, 3, errs,
				sizeof(errs)) == 0,
		      "%s", errs);
	ck_assert_int_eq(c.inference.cache.window_size, 252); /* --set wins over the file */
	ck_assert_int_eq(c.logging.format, LOG_FORMAT_TEXT);
	ck_assert_uint_eq(c.server.n_api_keys, 2);
	config_deinit(&c);

	const char *bad[] = {"inference.cache.window_sise=5", "inference.cache.window_size=-1",
			     "nokey", "inference.cache=3"};
	ck_assert_int_ne(load_text(&c, "", bad, 4, errs, sizeof(errs)), 0);
	ck_assert_ptr_nonnull(strstr(errs, "--set inference.cache.window_sise=5: "
					   "inference.cache.window_sise: unknown key (did you mean "
					   "'inference.cache.window_size'?)"));
	ck_assert_ptr_nonnull(strstr(errs, "-1 is out of range"));
	ck_assert_ptr_nonnull(strstr(errs, "--set nokey: expected key.path=value"));
	ck_assert_ptr_nonnull(strstr(errs, "is a section"));
	config_deinit(&c);
}
END_TEST

START_TEST(test_sizes)
{
	int64_t b;
	ck_assert_int_eq(config_parse_size("8GiB", &b), 0);
	ck_assert_int_eq(b, 8LL << 30);
	ck_assert_int_eq(config_parse_size("512 MiB", &b), 0);
	ck_assert_int_eq(b, 512LL << 20);
	ck_assert_int_eq(config_parse_size("4k", &b), 0);
	ck_assert_int_eq(b, 4096);
	ck_assert_int_eq(config_parse_size("1.5KiB", &b), 0);
	ck_assert_int_eq(b, 1536);
	ck_assert_int_eq(config_parse_size("2GB", &b), 0);
	ck_assert_int_eq(b, 2000000000LL);
	ck_assert_int_eq(config_parse_size("1048576", &b), 0);
	ck_assert_int_eq(b, 1048576);
	ck_assert_int_ne(config_parse_size("GiB", &b), 0);
	ck_assert_int_ne(config_parse_size("-1GiB", &b), 0);
	ck_assert_int_ne(config_parse_size("8XiB", &b), 0);
	ck_assert_int_ne(config_parse_size("1.3B", &b), 0);
}
END_TEST

START_TEST(test_serve_rules_and_budget)
{
	struct sinkd_config c;
	struct config_errors errs = {0};
	ck_assert_int_eq(config_init_defaults(&c), 0);
	ck_assert_int_ne(config_check_serve(&c, &errs), 0);
	ck_assert_uint_eq(errs.n, 3); /* model.path, cert, key */
	ck_assert_ptr_nonnull(strstr(errs.lines[0], "model.path"));
	config_errors_deinit(&errs);

	struct model_hparams hp = {.n_layers = 5, .n_heads = 8, .n_kv_heads = 4, .head_dim = 8,
				   .rope_dim = 8, .rope_theta = 10000, .dim = 64};
	c.inference.cache.global_cache_limit_auto = false;
	c.inference.cache.global_cache_limit = 1024;
	ck_assert_int_ne(config_check_budget(&c, &hp, &errs), 0);
	ck_assert_ptr_nonnull(strstr(errs.lines[0], "smaller than one session's cache"));
	config_errors_deinit(&errs);
	c.inference.cache.global_cache_limit = 1LL << 30;
	ck_assert_int_eq(config_check_budget(&c, &hp, &errs), 0);
	config_deinit(&c);
}
END_TEST

/* A missing file is an error for serving, located where it was set; other
 * commands (eval, generate) load the same config without TLS files. */
START_TEST(test_missing_files)
{
	struct sinkd_config c;
	char errs[4096];
	const char *text = "server:\n  tls:\n    cert_file: nope/cert.pem\n    key_file: nope/key.pem\n"
			   "model:\n  path: /nonexistent/model.gguf\n";
	ck_assert_msg(load_text(&c, text, NULL, 0, errs, sizeof(errs)) == 0, "%s", errs);
	ck_assert_uint_eq(c.n_missing_files, 3);
	struct config_errors e = {0};
	ck_assert_int_ne(config_check_serve(&c, &e), 0);
	ck_assert_uint_eq(e.n, 3);
	ck_assert_ptr_nonnull(strstr(e.lines[0], "t.yaml:3:5: server.tls.cert_file: cannot read file"));
	ck_assert_ptr_nonnull(strstr(e.lines[2], "t.yaml:6:3: model.path: cannot read file "
						 "'/nonexistent/model.gguf'"));
	config_errors_deinit(&e);
	config_deinit(&c);

	/* TLS off: its files do not matter; a --set that fixes the model path
	 * replaces the file's missing one. */
	const char *sets[] = {"server.tls.enabled=false", "model.path=/dev/null"};
	ck_assert_int_eq(load_text(&c, text, sets, 2, errs, sizeof(errs)), 0);
	ck_assert_int_eq(config_check_serve(&c, &e), 0);
	ck_assert_uint_eq(e.n, 0);
	config_deinit(&c);
}
END_TEST

START_TEST(test_restart_only_changes)
{
	struct sinkd_config a, b;
	char names[512];
	config_init_defaults(&a);
	config_init_defaults(&b);
	b.inference.cache.window_size = 8;  /* reloadable */
	b.engine.threads = 3;		    /* restart */
	b.model.backend = MODEL_BACKEND_CPU; /* restart */
	/* The reload reports them (and keeps their running values). */
	const struct config_applier_ops *none[CONFIG_N_APPLIERS] = {0};
	struct config_reload_result res;
	ck_assert_int_eq(config_reload_apply(&a, &b, none, &res, names, sizeof(names)), 0);
	ck_assert_int_eq((int)res.n_pending, 2);
	snprintf(names, sizeof(names), "%s, %s", res.pending[0].key, res.pending[1].key);
	ck_assert_str_eq(names, "model.backend, engine.threads");
	config_reload_result_deinit(&res);
	config_deinit(&a);
	config_deinit(&b);
}
END_TEST

#define DIGEST_A "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define DIGEST_B "sha256:0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789abcdef"

/* Every way a user writes two API key digests: YAML lists, and what --set
 * gets from a shell (a flow list, quoted or not, or a comma-separated string). */
static const struct {
	const char *yaml, *set;
} key_forms[] = {
    {"server:\n  api_keys: [\"" DIGEST_A "\", \"" DIGEST_B "\"]\n", NULL},
    {"server:\n  api_keys:\n    - " DIGEST_A "\n    - ' " DIGEST_B " '\n", NULL},
    {"server:\n  api_keys: \"" DIGEST_A ", " DIGEST_B "\"\n", NULL},
    {"", "server.api_keys=[\"" DIGEST_A "\",\"" DIGEST_B "\"]"},
    {"", "server.api_keys=[ '" DIGEST_A "' , '" DIGEST_B "' ]"},
    {"", "server.api_keys=[" DIGEST_A ", " DIGEST_B "]"},
    {"", "server.api_keys=[" DIGEST_A "," DIGEST_B ",]"},
    {"", "server.api_keys=" DIGEST_A "," DIGEST_B},
    {"", "server.api_keys= " DIGEST_A " ,\t" DIGEST_B " "},
    {"", "server.api_keys=\"" DIGEST_A "\",\"" DIGEST_B "\""},
};

START_TEST(test_api_key_forms)
{
	struct sinkd_config c;
	char errs[4096];
	const char *sets[] = {key_forms[_i].set};
	int rc = load_text(&c, key_forms[_i].yaml, sets, sets[0] ? 1 : 0, errs, sizeof(errs));
	ck_assert_msg(rc == 0, "form %d: %s", _i, errs);
	ck_assert_uint_eq(c.server.n_api_keys, 2);
	ck_assert_str_eq(c.server.api_keys[0], DIGEST_A);
	ck_assert_str_eq(c.server.api_keys[1], DIGEST_B);
	config_deinit(&c);

	/* An empty list turns authentication off, as no key does. */
	const char *empty[] = {"server.api_keys=[]"};
	ck_assert_int_eq(load_text(&c, key_forms[_i].yaml, empty, 1, errs, sizeof(errs)), 0);
	ck_assert_uint_eq(c.server.n_api_keys, 0);
	config_deinit(&c);
}
END_TEST

/* A wrong item is named by its number and what is allowed; a raw key is
 * never echoed: its first 4 characters and its length only. */
START_TEST(test_api_key_errors)
{
	struct sinkd_config c;
	char errs[4096];
	const char *raw = "s3cr3tK3yThatMustNotLeak0123456789";
	char set[256];
	snprintf(set, sizeof(set), "server.api_keys=[\"%s\", \"%s\"]", DIGEST_A, raw);
	const char *sets[] = {set};
	ck_assert_int_ne(load_text(&c, "", sets, 1, errs, sizeof(errs)), 0);
	ck_assert_ptr_null(strstr(errs, "K3yThat"));
	ck_assert_msg(strstr(errs, "server.api_keys: item 2: 's3cr...' (34 characters) is not an "
				   "API key digest") != NULL, "%s", errs);
	ck_assert_ptr_nonnull(strstr(errs, "'sha256:' followed by 64 hex digits"));
	ck_assert_ptr_nonnull(strstr(errs, "--set server.api_keys=(a secret: not shown)"));
	config_deinit(&c);

	/* The same in a YAML file: the item's line and column too. */
	char yaml[256];
	snprintf(yaml, sizeof(yaml), "server:\n  api_keys:\n    - %s\n    - %s\n", DIGEST_A, raw);
	ck_assert_int_ne(load_text(&c, yaml, NULL, 0, errs, sizeof(errs)), 0);
	ck_assert_ptr_null(strstr(errs, "K3yThat"));
	ck_assert_msg(strstr(errs, "t.yaml:4:7: server.api_keys: item 2: 's3cr...' (34 characters)") !=
		      NULL, "%s", errs);
	config_deinit(&c);

	/* A digest cut short, and one pasted with sha256sum's "  -". */
	const char *short_set[] = {"server.api_keys=sha256:abcdef"};
	ck_assert_int_ne(load_text(&c, "", short_set, 1, errs, sizeof(errs)), 0);
	ck_assert_msg(strstr(errs, "after 'sha256:' come 6 characters, 6 of them hex digits"), "%s",
		      errs);
	config_deinit(&c);
	const char *dash_set[] = {"server.api_keys=\"" DIGEST_A "  -\""};
	ck_assert_int_ne(load_text(&c, "", dash_set, 1, errs, sizeof(errs)), 0);
	ck_assert_msg(strstr(errs, "drop the '  -' that sha256sum prints"), "%s", errs);
	config_deinit(&c);

	/* A misspelt secret key is not echoed either; broken list syntax. */
	char near[128];
	snprintf(near, sizeof(near), "server.api_key=%s", raw);
	const char *bad[] = {near, "server.api_keys=[" DIGEST_A, "server.api_keys=\"" DIGEST_A};
	ck_assert_int_ne(load_text(&c, "", bad, 3, errs, sizeof(errs)), 0);
	ck_assert_ptr_null(strstr(errs, "K3yThat"));
	ck_assert_ptr_nonnull(strstr(errs, "did you mean 'server.api_keys'"));
	ck_assert_ptr_nonnull(strstr(errs, "must close with ']'"));
	ck_assert_ptr_nonnull(strstr(errs, "item 1: a quote is not closed"));
	config_deinit(&c);
}
END_TEST

START_TEST(test_print_masks_secrets)
{
	struct sinkd_config c;
	char errs[4096];
	const char *sets[] = {"server.api_keys=sha256:"
			      "abababababababababababababababababababababababababababababababab"};
	ck_assert_int_eq(load_text(&c, "", sets, 1, errs, sizeof(errs)), 0);
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	config_print(&c, mem);
	fclose(mem);
	ck_assert_ptr_null(strstr(buf, "abab"));
	ck_assert_ptr_nonnull(strstr(buf, "api_keys: [\"***\"]"));
	ck_assert_ptr_nonnull(strstr(buf, "inference:\n  max_context_length: 32768\n  cache:\n"));
	/* The printed config is itself a valid config. */
	const char *path = write_tmp("printed.yaml", buf);
	struct config_errors e;
	struct sinkd_config again;
	/* The masked key is not a digest: everything else must load. */
	int rc = config_load(&again, path, NULL, 0, &e);
	ck_assert_int_ne(rc, 0);
	ck_assert_uint_eq(e.n, 1);
	ck_assert_ptr_nonnull(strstr(e.lines[0], "server.api_keys"));
	config_errors_deinit(&e);
	config_deinit(&again);
	free(buf);
	config_deinit(&c);
}
END_TEST

/* Collects the full key paths of a YAML file, and whether each key line is
 * commented (on the line itself or the line above). */
static int yaml_paths(const char *file, char paths[][128], int *path_lines, int max,
		      int *uncommented, char *bad, size_t bad_len)
{
	FILE *f = fopen(file, "rb");
	ck_assert_ptr_nonnull(f);
	char lines[400][256];
	int n_lines = 0;
	while (n_lines < 400 && fgets(lines[n_lines], 256, f))
		n_lines++;
	rewind(f);
	yaml_parser_t p;
	yaml_parser_initialize(&p);
	yaml_parser_set_input_file(&p, f);
	char stack[8][64];
	int depth = 0, n = 0, expect_key[8] = {0};
	*uncommented = 0;
	for (;;) {
		yaml_event_t ev;
		ck_assert(yaml_parser_parse(&p, &ev));
		if (ev.type == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			break;
		}
		if (ev.type == YAML_MAPPING_START_EVENT) {
			depth++;
			expect_key[depth] = 1;
		} else if (ev.type == YAML_MAPPING_END_EVENT) {
			depth--;
			if (depth > 0)
				expect_key[depth] = 1;
		} else if (ev.type == YAML_SCALAR_EVENT && depth > 0 && expect_key[depth]) {
			snprintf(stack[depth], 64, "%s", (char *)ev.data.scalar.value);
			expect_key[depth] = 0;
			int line = (int)ev.start_mark.line;
			int commented = strchr(lines[line], '#') != NULL ||
					(line > 0 && strchr(lines[line - 1], '#') != NULL);
			char path[128] = "";
			for (int d = 1; d <= depth; d++)
				snprintf(path + strlen(path), sizeof(path) - strlen(path), "%s%s",
					 d > 1 ? "." : "", stack[d]);
			if (n < max) {
				path_lines[n] = line;
				snprintf(paths[n++], 128, "%s", path);
			}
			int is_leaf = 0;
			for (size_t i = 0; i < config_n_keys; i++)
				is_leaf |= strcmp(config_keys[i].path, path) == 0;
			if (is_leaf && !commented) {
				(*uncommented)++;
				snprintf(bad, bad_len, "%s", path);
			}
		} else if (depth > 0 && !expect_key[depth]) {
			/* the value of a key: a scalar, sequence, or nested mapping start */
			if (ev.type == YAML_SCALAR_EVENT)
				expect_key[depth] = 1;
			else if (ev.type == YAML_SEQUENCE_START_EVENT) {
				yaml_event_t e2;
				do {
					ck_assert(yaml_parser_parse(&p, &e2));
					int t = e2.type;
					yaml_event_delete(&e2);
					if (t == YAML_SEQUENCE_END_EVENT)
						break;
				} while (1);
				expect_key[depth] = 1;
			}
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	fclose(f);
	return n;
}

START_TEST(test_example_file_matches_table)
{
	char example[512];
	snprintf(example, sizeof(example), "%s/config/sinkd.yaml", getenv("SINKD_SOURCE_ROOT"));
	static char paths[200][128];
	static int path_lines[200];
	int uncommented;
	char bad[128] = "";
	int n = yaml_paths(example, paths, path_lines, 200, &uncommented, bad, sizeof(bad));
	ck_assert_msg(uncommented == 0, "key without a comment: %s", bad);
	/* Every table key is in the file ... */
	for (size_t i = 0; i < config_n_keys; i++) {
		int found = 0;
		for (int j = 0; j < n; j++)
			found |= strcmp(paths[j], config_keys[i].path) == 0;
		ck_assert_msg(found, "config/sinkd.yaml lacks %s", config_keys[i].path);
	}
	/* ... and every leaf in the file is a table key or a section. */
	for (int j = 0; j < n; j++) {
		int known = 0;
		size_t len = strlen(paths[j]);
		for (size_t i = 0; i < config_n_keys; i++)
			known |= strcmp(paths[j], config_keys[i].path) == 0 ||
				 (strncmp(paths[j], config_keys[i].path, len) == 0 &&
				  config_keys[i].path[len] == '.');
		ck_assert_msg(known, "config/sinkd.yaml has unknown key %s", paths[j]);
	}
	/* ... and its comment says "reload" or "restart" as the table does. */
	FILE *f = fopen(example, "rb");
	static char lines[400][256];
	int n_lines = 0;
	while (f && n_lines < 400 && fgets(lines[n_lines], 256, f))
		n_lines++;
	if (f)
		fclose(f);
	for (int j = 0; j < n; j++) {
		const struct config_key *k = NULL;
		for (size_t i = 0; i < config_n_keys; i++)
			if (strcmp(paths[j], config_keys[i].path) == 0)
				k = &config_keys[i];
		if (!k || path_lines[j] == 0)
			continue;
		const char *want = k->apply ? " reload\n" : " restart\n";
		const char *above = lines[path_lines[j] - 1];
		size_t la = strlen(above), lw = strlen(want);
		ck_assert_msg(la >= lw && strcmp(above + la - lw, want) == 0,
			      "config/sinkd.yaml: the comment above %s should end with '%.*s'",
			      k->path, (int)lw - 1, want);
	}
}
END_TEST

/* The example file loads as is, laid out as in the repository (tls/ beside
 * it, ../../shared/models/ for the model). */
START_TEST(test_example_file_loads)
{
	const char *shared = getenv("SINKD_SHARED");
	const char *root = getenv("SINKD_SOURCE_ROOT");
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p '%s/repo/config/tls' && cp '%s/config/sinkd.yaml' '%s/repo/config/' && "
		 "touch '%s/repo/config/tls/cert.pem' '%s/repo/config/tls/key.pem' && "
		 "ln -s \"$(realpath '%s')\" '%s/shared'",
		 tmpdir, root, tmpdir, tmpdir, tmpdir, shared, tmpdir);
	ck_assert_int_eq(system(cmd), 0);
	char path[600];
	snprintf(path, sizeof(path), "%s/repo/config/sinkd.yaml", tmpdir);
	struct sinkd_config c;
	struct config_errors errs;
	int rc = config_load(&c, path, NULL, 0, &errs);
	char first[1024] = "";
	if (errs.n)
		snprintf(first, sizeof(first), "%s", errs.lines[0]);
	ck_assert_msg(rc == 0, "%s", first);
	ck_assert_int_eq(config_check_serve(&c, &errs), 0);
	ck_assert_ptr_nonnull(strstr(c.model.path, "shared/models/stories260K.gguf"));
	ck_assert_ptr_nonnull(strstr(c.server.tls_cert_file, "repo/config/tls/cert.pem"));
	ck_assert(c.inference.quantization.enabled);
	config_deinit(&c);
}
END_TEST

/* Seconds since an arbitrary start (CLOCK_MONOTONIC). */
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Text of `prefix` + n copies of open + n copies of close + "\n" (free it). */
static char *nested_text(const char *prefix, const char *open, const char *close, int n)
{
	size_t lo = strlen(open), lc = strlen(close), lp = strlen(prefix);
	char *t = malloc(lp + (size_t)n * (lo + lc) + 2);
	ck_assert_ptr_nonnull(t);
	char *p = t;
	memcpy(p, prefix, lp);
	p += lp;
	for (int i = 0; i < n; i++, p += lo)
		memcpy(p, open, lo);
	for (int i = 0; i < n; i++, p += lc)
		memcpy(p, close, lc);
	strcpy(p, "\n");
	return t;
}

/* libyaml's cost per token grows with the flow nesting depth: 100,000
 * levels took 42 s before the depth cap.  Now the 17th level is refused
 * where it opens, whatever node it is in. */
START_TEST(test_deep_nesting_refused)
{
	static const struct {
		const char *prefix, *open, *close, *where;
	} cases[] = {
	    {"server: ", "[", "]", "t.yaml:1:24: "},   /* a section's value */
	    {"bogus: ", "{a: ", "}", "t.yaml:1:68: "}, /* an unknown key's, skipped */
	    {"", "[", "]", "t.yaml:1:1: "},            /* the file is a list */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *text = nested_text(cases[i].prefix, cases[i].open, cases[i].close, 100000);
		struct sinkd_config c;
		char errs[4096];
		double t0 = now_s();
		ck_assert_int_ne(load_text(&c, text, NULL, 0, errs, sizeof(errs)), 0);
		double took = now_s() - t0;
		ck_assert_msg(took < 5.0, "case %zu: %.1f s", i, took);
		ck_assert_msg(strstr(errs, cases[i].where) != NULL, "case %zu: %s", i, errs);
		if (cases[i].prefix[0])
			ck_assert_msg(strstr(errs, "nested deeper than 16 levels") != NULL, "%s",
			              errs);
		config_deinit(&c);
		free(text);
	}
	/* Block style: the 17th level of mappings, on line 17. */
	char text[4096] = "";
	for (int d = 0; d < 20; d++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "%*sk%d:\n", d, "", d);
	struct sinkd_config c;
	char errs[4096];
	ck_assert_int_ne(load_text(&c, text, NULL, 0, errs, sizeof(errs)), 0);
	ck_assert_msg(strstr(errs, "t.yaml:17:17: YAML nested deeper than 16 levels") != NULL, "%s",
	              errs);
	config_deinit(&c);
	/* 16 levels are still parsed (and reported as unknown keys). */
	char *ok = nested_text("bogus: ", "[", "]", 15);
	ck_assert_int_ne(load_text(&c, ok, NULL, 0, errs, sizeof(errs)), 0);
	ck_assert_msg(strstr(errs, "bogus: unknown key") != NULL && !strstr(errs, "nested"), "%s",
	              errs);
	config_deinit(&c);
	free(ok);
}
END_TEST

/* A file of 100,000 unknown keys (each gets a spelling suggestion) stops
 * after 100 problems instead of taking minutes. */
START_TEST(test_too_many_problems)
{
	size_t cap = 100000 * 24 + 16, used = 0;
	char *text = malloc(cap);
	ck_assert_ptr_nonnull(text);
	used += (size_t)snprintf(text, cap, "server:\n");
	for (int i = 0; i < 100000; i++)
		used += (size_t)snprintf(text + used, cap - used, "  listen%06d: 1\n", i);
	struct sinkd_config c;
	struct config_errors errs;
	const char *path = write_tmp("t.yaml", text);
	double t0 = now_s();
	ck_assert_int_ne(config_load(&c, path, NULL, 0, &errs), 0);
	ck_assert_msg(now_s() - t0 < 5.0, "%.1f s", now_s() - t0);
	ck_assert_uint_eq(errs.n, 101);
	ck_assert_ptr_nonnull(
	    strstr(errs.lines[0], "t.yaml:2:3: server.listen000000: unknown key"));
	ck_assert_ptr_nonnull(strstr(errs.lines[100], "t.yaml: too many problems: stopped after "
	                                              "the first 100"));
	config_errors_deinit(&errs);
	config_deinit(&c);
	free(text);
}
END_TEST

/* True when s has a byte below 0x20, DEL, C1 (U+0080..U+009F), U+2028/9, or
 * is not valid UTF-8. */
static int has_raw_control(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p == 0x7F || *p == 0xFF || *p == 0xC3)
			return 1;
		if (p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F)
			return 1;
		if (p[0] == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9))
			return 1;
	}
	return 0;
}

/* Quoted input (values, keys, the file name) cannot forge a line of error
 * output: control characters and bytes that are not UTF-8 are escaped. */
START_TEST(test_errors_escape_control_characters)
{
	struct sinkd_config c;
	struct config_errors errs;
	const char *sets[] = {"logging.level=loud\nsinkd.yaml:1:1: forged",
	                      "logging.format=\x1b[31mred\xff\xc3", "bo\rgus\xc2\x85=1"};
	const char *path = write_tmp("t\nx.yaml", "logging:\n  format: \"a\\nb\\u2028c\\tq\\\\n\"\n"
	                                          "  \"lev\\x07el\": info\n");
	ck_assert_int_ne(config_load(&c, path, sets, 3, &errs), 0);
	ck_assert_uint_eq(errs.n, 5);
	for (size_t i = 0; i < errs.n; i++)
		ck_assert_msg(!has_raw_control(errs.lines[i]), "line %zu: %s", i, errs.lines[i]);
	ck_assert_ptr_nonnull(strstr(errs.lines[0], "t\\nx.yaml:2:3: logging.format: "
	                                            "'a\\nb\\u2028c\\tq\\n' is not allowed"));
	ck_assert_ptr_nonnull(
	    strstr(errs.lines[1], "t\\nx.yaml:3:3: logging.lev\\x07el: unknown key"));
	ck_assert_ptr_nonnull(strstr(errs.lines[2], "'loud\\nsinkd.yaml:1:1: forged' is not"));
	ck_assert_ptr_nonnull(strstr(errs.lines[3], "'\\x1b[31mred\\xff\\xc3' is not allowed"));
	ck_assert_ptr_nonnull(strstr(errs.lines[4], "bo\\rgus\\u0085: unknown key"));
	config_errors_deinit(&errs);
	config_deinit(&c);
	/* An unreadable path is kept for the serve rules; its message too. */
	const char *file_sets[] = {"server.tls.cert_file=/nonexistent/a\nb.pem"};
	ck_assert_int_eq(config_load(&c, NULL, file_sets, 1, &errs), 0);
	ck_assert_int_ne(config_check_serve(&c, &errs), 0);
	int found = 0;
	for (size_t i = 0; i < errs.n; i++) {
		ck_assert_msg(!has_raw_control(errs.lines[i]), "%s", errs.lines[i]);
		found |= strstr(errs.lines[i], "'/nonexistent/a\\nb.pem'") != NULL;
	}
	ck_assert(found);
	config_errors_deinit(&errs);
	config_deinit(&c);
}
END_TEST

/* The printed config quotes strings as YAML: one line per key, and the same
 * value when read back. */
START_TEST(test_print_escapes_strings)
{
	struct sinkd_config c, again;
	char errs[4096];
	const char *name = "a\"b\\c\nserver:\n  listen: \"0.0.0.0:1\"\t\xc2\x85\x7f";
	char set[256];
	snprintf(set, sizeof(set), "model.name=%s", name);
	const char *sets[] = {set};
	ck_assert_msg(load_text(&c, "", sets, 1, errs, sizeof(errs)) == 0, "%s", errs);
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	config_print(&c, mem);
	fclose(mem);
	ck_assert_ptr_nonnull(strstr(buf, "  name: \"a\\\"b\\\\c\\nserver:\\n  listen: "
	                                  "\\\"0.0.0.0:1\\\"\\t\\u0085\\x7f\"  # restart\n"));
	ck_assert_ptr_null(strstr(buf, "listen: \"0.0.0.0:1\""));
	ck_assert_msg(load_text(&again, buf, NULL, 0, errs, sizeof(errs)) == 0, "%s", errs);
	ck_assert_str_eq(again.model.name, name);
	ck_assert_str_eq(again.server.listen, c.server.listen);
	config_deinit(&again);
	config_deinit(&c);
	free(buf);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_users_guide_block);
	tcase_add_test(tc, test_every_key_parsed);
	tcase_add_loop_test(tc, test_error_classes, 0,
			    (int)(sizeof(error_cases) / sizeof(error_cases[0])));
	tcase_add_test(tc, test_every_error_reported);
	tcase_add_test(tc, test_sink_zero_valid);
	tcase_add_test(tc, test_set_overrides);
	tcase_add_test(tc, test_sizes);
	tcase_add_test(tc, test_serve_rules_and_budget);
	tcase_add_test(tc, test_missing_files);
	tcase_add_test(tc, test_restart_only_changes);
	tcase_add_loop_test(tc, test_api_key_forms, 0, sizeof(key_forms) / sizeof(key_forms[0]));
	tcase_add_test(tc, test_api_key_errors);
	tcase_add_test(tc, test_print_masks_secrets);
	tcase_add_test(tc, test_example_file_matches_table);
	tcase_add_test(tc, test_example_file_loads);
	tcase_add_test(tc, test_deep_nesting_refused);
	tcase_add_test(tc, test_too_many_problems);
	tcase_add_test(tc, test_errors_escape_control_characters);
	tcase_add_test(tc, test_print_escapes_strings);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
