/* sinkd-gguf-dump: prints a GGUF file's metadata and tensor table after the
 * same validation the daemon does, so a file that dumps is a file sinkd can
 * open.  Long arrays are shown by count and first elements only.  It does
 * not check that the tensors form a model (sinkd --check-model does). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "model/gguf.h"
#include "util/errbuf.h"

static void print_scalar(const struct gguf_file *f, const char *key, enum gguf_value_type t)
{
	int64_t i;
	double d;
	bool b;
	const char *s;
	size_t len;
	if (t == GGUF_VALUE_STRING && gguf_get_string(f, key, &s, &len) == 0)
		printf("\"%.*s\"", (int)(len > 200 ? 200 : len), s);
	else if (t == GGUF_VALUE_BOOL && gguf_get_bool(f, key, &b) == 0)
		printf("%s", b ? "true" : "false");
	else if ((t == GGUF_VALUE_FLOAT32 || t == GGUF_VALUE_FLOAT64) &&
	         gguf_get_float(f, key, &d) == 0)
		printf("%g", d);
	else if (gguf_get_int(f, key, &i) == 0)
		printf("%" PRId64, i);
	else
		printf("(unprintable)");
}

static void print_array(const struct gguf_file *f, const char *key)
{
	enum gguf_value_type et;
	uint64_t n;
	gguf_get_array_info(f, key, &et, &n);
	printf("[%s x %" PRIu64 "]", gguf_value_type_name(et), n);
	for (uint64_t i = 0; i < n && i < 8; i++) {
		const char *s;
		size_t len;
		double d;
		if (et == GGUF_VALUE_STRING && gguf_get_array_string(f, key, i, &s, &len) == 0)
			printf(" \"%.*s\"", (int)(len > 40 ? 40 : len), s);
		else if (gguf_get_array_float(f, key, i, &d) == 0)
			printf(" %g", d);
	}
	if (n > 8)
		printf(" ...");
}

int main(int argc, char **argv)
{
	if (argc != 2 || strcmp(argv[1], "--help") == 0) {
		fprintf(stderr, "usage: sinkd-gguf-dump FILE.gguf\n");
		return 2;
	}
	char err[SINKD_ERR_LEN];
	struct gguf_file *f;
	if (gguf_open(argv[1], &f, err, sizeof(err)) != 0) {
		fprintf(stderr, "sinkd-gguf-dump: %s\n", err);
		return 1;
	}
	printf("GGUF v%" PRIu32
	       ", %zu keys, %zu tensors, alignment %zu, data at %zu of %zu bytes\n",
	       gguf_version(f), gguf_n_kv(f), gguf_n_tensors(f), gguf_alignment(f),
	       gguf_data_offset(f), gguf_file_size(f));
	for (size_t i = 0; i < gguf_n_kv(f); i++) {
		const char *key = gguf_kv_key(f, i);
		enum gguf_value_type t;
		const void *raw;
		size_t len;
		gguf_kv_raw(f, i, &t, &raw, &len);
		printf("  %-45s ", key);
		if (t == GGUF_VALUE_ARRAY)
			print_array(f, key);
		else
			print_scalar(f, key, t);
		printf("\n");
	}
	for (size_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		printf("  %-32s %-5s [", t->name, ggml_type_name(t->type));
		for (uint32_t d = 0; d < t->n_dims; d++)
			printf("%s%" PRIu64, d ? ", " : "", t->dims[d]);
		printf("] %" PRIu64 " bytes at %zu\n", t->n_bytes,
		       (size_t)((const char *)t->data - (const char *)gguf_tensor_at(f, 0)->data) +
		           gguf_data_offset(f));
	}
	gguf_close(f);
	return 0;
}
