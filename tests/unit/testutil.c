/* Helpers shared by the unit tests (see testutil.h): reference data paths,
 * whole-file reads and the Check runner.  Test code only; it asserts rather
 * than returning errors. */
#include "testutil.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/sinkcache.h"
#include "model/arch.h"
#include "model/gguf_write.h"
#include "model/model.h"
#include "util/errbuf.h"

const char *tu_shared_dir(void)
{
	const char *root = getenv("SINKD_SHARED");
	ck_assert_msg(root != NULL, "SINKD_SHARED is not set");
	return root;
}

const char *tu_shared_path(const char *rel)
{
	static char path[1024];
	snprintf(path, sizeof(path), "%s/%s", tu_shared_dir(), rel);
	return path;
}

char *tu_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	if (len)
		*len = (size_t)n;
	return buf;
}

void tu_temp_file(char *path, size_t len, const char *prefix, const void *data, size_t n)
{
	const char *dir = getenv("TMPDIR");
	if (dir == NULL || dir[0] == '\0')
		dir = "/tmp";
	ck_assert_int_lt(snprintf(path, len, "%s/%s-XXXXXX", dir, prefix), (int)len);
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	if (n)
		ck_assert_int_eq((int)write(fd, data, n), (int)n);
	close(fd);
}

cJSON *tu_load_reference(void)
{
	char *text = tu_slurp(tu_shared_path("reference/stories260K-logits.json"), NULL);
	cJSON *ref = cJSON_Parse(text);
	free(text);
	ck_assert_ptr_nonnull(ref);
	return ref;
}

int tu_suite_failures(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed;
}

/* The process that runs the suite: tests (forked from it) leave their skip
 * reasons in a file named after it.  Test code only: set once in
 * tu_run_suite, before any test runs. */
static pid_t tu_runner_pid;

static void skip_file(pid_t runner, char *path, size_t len)
{
	snprintf(path, len, "/tmp/sinkd-test-skip-%ld", (long)runner);
}

void tu_skip(const char *fmt, ...)
{
	char reason[256], path[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	fprintf(stderr, "skipped: %s\n", reason);
	skip_file(tu_runner_pid ? tu_runner_pid : getpid(), path, sizeof(path));
	FILE *f = fopen(path, "a");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%s\n", reason);
	fclose(f);
}

int tu_run_suite(Suite *s)
{
	char path[64], line[256];
	tu_runner_pid = getpid();
	skip_file(tu_runner_pid, path, sizeof(path));
	unlink(path);
	if (tu_suite_failures(s))
		return EXIT_FAILURE;
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return EXIT_SUCCESS;
	while (fgets(line, sizeof(line), f))
		printf("skipped: %s", line);
	fclose(f);
	unlink(path);
	return 77;
}

struct cache_geometry tu_geometry(int n_layers, int n_kv_heads, int head_dim, int sinks,
                                      int window, bool quant, int bits, int hot)
{
	return (struct cache_geometry){.n_layers = n_layers,
	                                   .n_kv_heads = n_kv_heads,
	                                   .head_dim = head_dim,
	                                   .rope_dim = head_dim,
	                                   .rope_theta = 10000.0,
	                                   .strategy = CACHE_STRATEGY_SLIDING_WINDOW,
	                                   .sink_keep_count = sinks,
	                                   .window_size = window,
	                                   .quant_enabled = quant,
	                                   .quant_bits = bits,
	                                   .protect_sinks = true,
	                                   .full_precision_recent = hot,
	                                   .rope_positions = ROPE_POSITIONS_CACHE,
	                                   .dtype = KV_DTYPE_F32};
}

float tu_frand(unsigned *seed)
{
	return (float)rand_r(seed) / (float)RAND_MAX * 2.0f - 1.0f;
}

void tu_cache_append_random(struct sinkcache *c, unsigned *seed)
{
	const struct cache_geometry *g = sinkcache_geometry(c);
	float k[SINKCACHE_MAX_HEAD_DIM * 16], v[SINKCACHE_MAX_HEAD_DIM * 16];
	char err[SINKD_ERR_LEN];
	int n = g->n_kv_heads * g->head_dim;
	ck_assert_int_le(n, SINKCACHE_MAX_HEAD_DIM * 16);
	for (int j = 0; j < n; j++)
		k[j] = tu_frand(seed), v[j] = tu_frand(seed);
	for (int l = 0; l < g->n_layers; l++)
		ck_assert_msg(sinkcache_append(c, l, k, v, err, sizeof(err)) == 0, "%s", err);
}

struct cache_geometry tu_model_geometry(const struct model_hparams *hp, int window)
{
	struct cache_geometry g =
	    tu_geometry(hp->n_layers, hp->n_kv_heads, hp->head_dim, 4, window, false, 8, window);
	g.rope_dim = hp->rope_dim;
	g.rope_theta = hp->rope_theta;
	g.rope_neox = model_arch_rope_neox(hp->arch);
	cache_geometry_set_rope_scaling(&g, hp);
	/* the model's sliding-window layers their own spans, as the daemon
	 * builds them (a backend refuses a geometry that holds them as global) */
	cache_geometry_set_model_layers(&g, hp);
	return g;
}

/* tu_gguf_with whose key takes str_value, else *f32_value. */
static void gguf_copy_with(const char *src, const char *dst, const char *tensor,
                           const float *values, uint64_t n, const char *key, const char *str_value,
                           const float *f32_value)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f = NULL;
	struct gguf_writer *w = NULL;
	ck_assert_msg(gguf_open(src, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(gguf_writer_new(dst, &w, err, sizeof(err)) == 0, "%s", err);
	for (size_t i = 0; i < gguf_n_kv(f); i++) {
		const char *k = gguf_kv_key(f, i);
		enum gguf_value_type type;
		const void *data;
		size_t len;
		if (strcmp(k, "general.alignment") == 0 || (key && strcmp(k, key) == 0))
			continue;
		ck_assert_int_eq(gguf_kv_raw(f, i, &type, &data, &len), 0);
		ck_assert_int_eq(gguf_writer_add_raw(w, k, type, data, len), 0);
	}
	if (key && str_value)
		ck_assert_int_eq(gguf_writer_add_string(w, key, str_value), 0);
	else if (key)
		ck_assert_int_eq(gguf_writer_add_f32(w, key, *f32_value), 0);
	for (size_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		ck_assert_int_eq(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->dims),
		                 0);
	}
	if (tensor)
		ck_assert_int_eq(gguf_writer_add_tensor(w, tensor, GGML_TYPE_F32, 1, &n), 0);
	ck_assert_msg(gguf_writer_write_header(w, err, sizeof(err)) == 0, "%s", err);
	for (size_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		ck_assert_msg(gguf_writer_write_data(w, t->data, t->n_bytes, err, sizeof(err)) == 0,
		              "%s", err);
	}
	if (tensor)
		ck_assert_msg(
		    gguf_writer_write_data(w, values, n * sizeof(float), err, sizeof(err)) == 0,
		    "%s", err);
	ck_assert_msg(gguf_writer_finish(w, err, sizeof(err)) == 0, "%s", err);
	gguf_writer_free(w);
	gguf_close(f);
}

void tu_gguf_with(const char *src, const char *dst, const char *tensor, const float *values,
                  uint64_t n, const char *key, const char *value)
{
	gguf_copy_with(src, dst, tensor, values, n, key, value, NULL);
}

void tu_gguf_with_f32(const char *src, const char *dst, const char *key, float value)
{
	gguf_copy_with(src, dst, NULL, NULL, 0, key, NULL, &value);
}

int tu_run_quiet(char *const argv[])
{
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	int status;
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
