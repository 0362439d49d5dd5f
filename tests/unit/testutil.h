/* Helpers shared by the unit tests: where the reference data is
 * ($SINKD_SHARED), whole-file reads, the stories260K reference logits, and
 * running a Check suite, the cache geometries the tests build.  They fail the current test (ck_assert) instead of
 * returning errors.  Not for library code. */
#pragma once

#include <check.h>
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/geometry.h"

/* 1 when the test is built with AddressSanitizer (GCC defines the first,
 * clang answers the second), whose shadow memory changes what resident
 * memory a test sees. */
#if defined(__SANITIZE_ADDRESS__)
#define TU_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_UNDER_ASAN 1
#endif
#endif
#ifndef TU_UNDER_ASAN
#define TU_UNDER_ASAN 0
#endif

struct model_hparams;
struct sinkcache;

/* The shared data folder ($SINKD_SHARED, set by tests/meson.build). */
const char *tu_shared_dir(void);
/* "$SINKD_SHARED/rel", in a static buffer valid until the next call. */
const char *tu_shared_path(const char *rel);
/* The whole file, NUL-terminated (free it); *len its size when len is not
 * NULL. */
char *tu_slurp(const char *path, size_t *len);
/* Creates /tmp/<prefix>-XXXXXX holding data[0..n) (n may be 0); its name
 * in path (len bytes, at least strlen(prefix) + 13).  The caller unlinks. */
void tu_temp_file(char *path, size_t len, const char *prefix, const void *data, size_t n);
/* shared/reference/stories260K-logits.json, parsed (cJSON_Delete it). */
cJSON *tu_load_reference(void);
/* Runs the suite (forking, normal output) and frees it: how many tests
 * failed. */
int tu_suite_failures(Suite *s);
/* tu_suite_failures as an exit status: EXIT_FAILURE when any failed, else
 * 77 (what meson reports as SKIP) when a test called tu_skip, else
 * EXIT_SUCCESS. */
int tu_run_suite(Suite *s);

/* A sliding-window cache geometry of n_layers x n_kv_heads x head_dim (RoPE
 * over the whole head, theta 10000, by cache rank), protected f32 sinks:
 * sinks, window, quantization on or off with `bits`, `hot` full-precision
 * recent tokens.  Tests change the other fields on the copy. */
struct cache_geometry tu_geometry(int n_layers, int n_kv_heads, int head_dim, int sinks,
                                      int window, bool quant, int bits, int hot);
/* The geometry of a model's shape and RoPE with 4 sinks and an unquantized
 * window of `window` tokens. */
struct cache_geometry tu_model_geometry(const struct model_hparams *hp, int window);
/* A uniform float in [-1, 1] from rand_r(seed). */
float tu_frand(unsigned *seed);
/* Appends one token to every layer of c: the same random key and value
 * (tu_frand, keys then values of each element in turn) in each. */
void tu_cache_append_random(struct sinkcache *c, unsigned *seed);
/* Writes dst: a copy of the GGUF model src (every key and tensor) with a
 * model-level F32 tensor `tensor` of n values appended (tensor NULL: none)
 * and, when key is not NULL, the string key=value added (a key src has is
 * replaced).  For files a converter would write beside the ones we have:
 * stories260K with llama3's rope_freqs.weight, a rope.scaling.type. */
void tu_gguf_with(const char *src, const char *dst, const char *tensor, const float *values,
                  uint64_t n, const char *key, const char *value);
/* The same with a float key (no tensor added). */
void tu_gguf_with_f32(const char *src, const char *dst, const char *key, float value);

/* Marks the run as skipped: a test whose prerequisite is missing (a tool,
 * a CPU feature, a server option) calls this and returns, and
 * tu_run_suite then exits 77 instead of passing.  Works from Check's
 * forked test processes.  The reason goes to stderr. */
void tu_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Runs the program argv[0] with argv, its output to /dev/null; its exit
 * status, or -1 when it did not exit (a signal). */
int tu_run_quiet(char *const argv[]);
