/* Tokenizers against real vocabularies: the llama.cpp test vectors in
 * ../shared/vocab (every input of every vocabulary that has .inp/.out),
 * stories260K's reference prompt ids, decoding, the streaming detokenizer
 * on split UTF-8, special tokens, and encoding speed. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/gguf.h"
#include "model/gguf_write.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "util/utf8.h"
#include "testutil.h"

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct tokenizer *load_tok(const char *rel)
{
	const char *path = tu_shared_path(rel);
	char err[SINKD_ERR_LEN];
	struct gguf_file *f = NULL;
	struct tokenizer *tok = NULL;
	ck_assert_msg(gguf_open(path, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(tokenizer_new_from_gguf(f, &tok, err, sizeof(err)) == 0, "%s", err);
	gguf_close(f); /* the tokenizer keeps its own copies */
	return tok;
}

static void encode(const struct tokenizer *tok, const char *s, size_t len, bool add_special,
                   bool parse_special, int32_t **ids, size_t *n)
{
	char err[SINKD_ERR_LEN];
	ck_assert_msg(tokenizer_encode(tok, s, len, add_special, parse_special, ids, n, err,
	                               sizeof(err)) == 0,
	              "%s", err);
}

/* Inputs are separated by "\n__ggml_vocab_test__\n"; the file ends with one. */
static size_t split_inputs(char *inp, size_t len, char **items, size_t *lens, size_t max)
{
	static const char sep[] = "\n__ggml_vocab_test__\n";
	size_t n = 0, start = 0;
	for (;;) {
		char *hit = memmem(inp + start, len - start, sep, sizeof(sep) - 1);
		if (!hit)
			break;
		ck_assert_uint_lt(n, max);
		items[n] = inp + start;
		lens[n++] = (size_t)(hit - (inp + start));
		start = (size_t)(hit - inp) + sizeof(sep) - 1;
	}
	ck_assert_uint_eq(start, len); /* nothing after the last separator */
	return n;
}

static bool line_matches(const char *line, const int32_t *ids, size_t n)
{
	size_t k = 0;
	const char *p = line;
	for (;;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		if (k >= n || ids[k] != v)
			return false;
		k++;
		p = end;
	}
	return k == n;
}

/* Runs one vocabulary's vectors; returns passed, sets *total. */
static size_t run_vocab(const char *name, size_t *total)
{
	char rel[256];
	size_t inp_len, out_len;
	snprintf(rel, sizeof(rel), "vocab/ggml-vocab-%s.gguf", name);
	struct tokenizer *tok = load_tok(rel);
	snprintf(rel, sizeof(rel), "vocab/ggml-vocab-%s.gguf.inp", name);
	const char *path = tu_shared_path(rel);
	char *inp = tu_slurp(path, &inp_len);
	snprintf(rel, sizeof(rel), "vocab/ggml-vocab-%s.gguf.out", name);
	path = tu_shared_path(rel);
	char *outs = tu_slurp(path, &out_len);

	char *items[256];
	size_t lens[256], passed = 0;
	size_t n = split_inputs(inp, inp_len, items, lens, 256);
	char *line = outs, *save = NULL;
	for (size_t i = 0; i < n; i++) {
		ck_assert_ptr_nonnull(line);
		char *nl = strchr(line, '\n');
		ck_assert_ptr_nonnull(nl);
		*nl = '\0';
		int32_t *ids;
		size_t n_ids;
		encode(tok, items[i], lens[i], false, false, &ids, &n_ids);
		if (line_matches(line, ids, n_ids))
			passed++;
		else if (getenv("TOK_VERBOSE")) {
			fprintf(stderr, "%s #%zu mismatch\n  want:%s\n  got: ", name, i, line);
			for (size_t k = 0; k < n_ids; k++)
				fprintf(stderr, " %d", ids[k]);
			fprintf(stderr, "\n");
		}
		free(ids);
		line = nl + 1;
	}
	ck_assert_msg(*line == '\0', "%s: more .out lines than inputs", name);
	(void)save;
	*total = n;
	free(inp);
	free(outs);
	tokenizer_free(tok);
	return passed;
}

/* Every vocabulary with test vectors, and how many of its 46 inputs must
 * match at least (SentencePiece and GPT-2 all). */
static const struct {
	const char *name;
	size_t min_pass;
} vocabs[] = {
    {"llama-spm", 46},      {"phi-3", 46},        {"gpt-2", 46}, {"falcon", 46}, {"starcoder", 46},
    {"deepseek-coder", 46}, {"deepseek-llm", 46}, {"mpt", 46},   {"refact", 46},
};

START_TEST(test_vocab_vectors)
{
	size_t total;
	double t0 = now_ms();
	size_t passed = run_vocab(vocabs[_i].name, &total);
	printf("vocab %-15s %zu/%zu passed (%.0f ms incl. load)\n", vocabs[_i].name, passed, total,
	       now_ms() - t0);
	ck_assert_uint_eq(total, 46);
	ck_assert_uint_ge(passed, vocabs[_i].min_pass);
}
END_TEST

/* Pre-tokenizer splits against pretok-cases.json, which Python's re made
 * with the Unicode classes spelled out (gen_pretok_cases.py). */
START_TEST(test_pretokenizer_cases)
{
	const char *src = getenv("SINKD_SOURCE_ROOT");
	ck_assert_ptr_nonnull(src);
	char *path = NULL;
	size_t len;
	ck_assert_int_ge(asprintf(&path, "%s/tests/unit/tokenizer/pretok-cases.json", src), 0);
	char *json = tu_slurp(path, &len);
	cJSON *root = cJSON_Parse(json), *c;
	ck_assert_ptr_nonnull(root);
	struct pretok_buf buf = {0};
	int n_cases = 0, n_failed = 0;
	cJSON_ArrayForEach(c, root)
	{
		const char *pre = cJSON_GetObjectItem(c, "pre")->valuestring;
		const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
		cJSON *pieces = cJSON_GetObjectItem(c, "pieces");
		struct pretok *p;
		struct pretok_flags flags;
		char err[SINKD_ERR_LEN];
		ck_assert_msg(pretok_new(pre, &p, &flags, err, sizeof(err)) == 0, "%s", err);
		ck_assert_msg(flags.known, "%s", pre);
		ck_assert_int_eq(pretok_split(p, text, strlen(text), &buf), 0);
		bool ok = buf.n_ends == (size_t)cJSON_GetArraySize(pieces);
		size_t start = 0;
		for (size_t k = 0; ok && k < buf.n_ends; k++) {
			size_t end = buf.byte_off[buf.ends[k]];
			const char *want = cJSON_GetArrayItem(pieces, (int)k)->valuestring;
			ok = strlen(want) == end - start &&
			     memcmp(want, text + start, end - start) == 0;
			start = end;
		}
		if (!ok && n_failed++ < 5)
			fprintf(stderr, "pre-tokenizer %s splits \"%s\" wrongly\n", pre, text);
		n_cases++;
		pretok_free(p);
	}
	printf("pre-tokenizer cases: %d/%d\n", n_cases - n_failed, n_cases);
	ck_assert_int_gt(n_cases, 500);
	ck_assert_int_eq(n_failed, 0);
	pretok_buf_free(&buf);
	cJSON_Delete(root);
	free(json);
	free(path);
}
END_TEST

START_TEST(test_stories260k_reference_ids)
{
	struct tokenizer *tok = load_tok("models/stories260K.gguf");
	ck_assert_int_eq(tokenizer_n_vocab(tok), 512);
	ck_assert_int_eq(tokenizer_bos(tok), 1);
	ck_assert_int_eq(tokenizer_eos(tok), 2);
	ck_assert(tokenizer_add_bos(tok));
	ck_assert(tokenizer_is_eog(tok, 2));
	ck_assert(!tokenizer_is_eog(tok, 1));

	int32_t *ids;
	size_t n;
	encode(tok, "Once upon a time", 16, true, false, &ids, &n);
	const int32_t want[] = {1, 403, 407, 261, 378};
	ck_assert_uint_eq(n, 5);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(ids[i], want[i]);
	free(ids);

	size_t len;
	const char *path = tu_shared_path("reference/stories260K-logits.json");
	char *json = tu_slurp(path, &len);
	cJSON *root = cJSON_Parse(json);
	cJSON *prompts = cJSON_GetObjectItem(root, "prompts"), *p;
	int n_prompts = 0;
	cJSON_ArrayForEach(p, prompts)
	{
		const char *text = cJSON_GetObjectItem(p, "text")->valuestring;
		cJSON *want_ids = cJSON_GetObjectItem(p, "prompt_ids");
		encode(tok, text, strlen(text), true, false, &ids, &n);
		ck_assert_uint_eq(n, (size_t)cJSON_GetArraySize(want_ids));
		for (size_t i = 0; i < n; i++)
			ck_assert_int_eq(ids[i], cJSON_GetArrayItem(want_ids, (int)i)->valueint);
		/* and back: BOS gives no text, the space prefix is stripped */
		char *back;
		size_t back_len;
		char err[SINKD_ERR_LEN];
		ck_assert_int_eq(tokenizer_decode(tok, ids, n, &back, &back_len, err, sizeof(err)),
		                 0);
		ck_assert_str_eq(back, text);
		free(back);
		free(ids);
		n_prompts++;
	}
	ck_assert_int_ge(n_prompts, 2);
	cJSON_Delete(root);
	free(json);
	tokenizer_free(tok);
}
END_TEST

/* The whole dev set, one document per non-empty line with BOS, has the
 * token count the perplexity reference was computed on. */
START_TEST(test_stories260k_dev_set_count)
{
	size_t len, total = 0;
	const char *path = tu_shared_path("reference/stories260K-streaming-ppl.json");
	char *json = tu_slurp(path, &len);
	cJSON *root = cJSON_Parse(json);
	int want = cJSON_GetObjectItem(root, "tokens")->valueint;
	path = tu_shared_path("data/tinystories-dev.txt");
	char *text = tu_slurp(path, &len);
	struct tokenizer *tok = load_tok("models/stories260K.gguf");
	for (char *line = text; *line;) {
		char *nl = strchr(line, '\n');
		size_t l = nl ? (size_t)(nl - line) : strlen(line);
		while (l > 0 && line[l - 1] == '\r')
			l--;
		if (l > 0) {
			int32_t *ids;
			size_t n;
			encode(tok, line, l, true, false, &ids, &n);
			ck_assert_int_eq(ids[0], tokenizer_bos(tok));
			total += n;
			free(ids);
		}
		line = nl ? nl + 1 : line + l;
	}
	ck_assert_int_eq((int)total, want);
	tokenizer_free(tok);
	cJSON_Delete(root);
	free(json);
	free(text);
}
END_TEST

static bool valid_utf8(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < len;) {
		size_t need = u[i] < 0x80                    ? 1
		              : u[i] >= 0xC2 && u[i] <= 0xDF ? 2
		              : u[i] >= 0xE0 && u[i] <= 0xEF ? 3
		              : u[i] >= 0xF0 && u[i] <= 0xF4 ? 4
		                                             : 0;
		if (need == 0 || i + need > len)
			return false;
		for (size_t k = 1; k < need; k++)
			if ((u[i + k] & 0xC0) != 0x80)
				return false;
		i += need;
	}
	return true;
}

/* Pushes ids one at a time; checks each chunk and returns the whole text. */
static char *stream_all(const struct tokenizer *tok, const int32_t *ids, size_t n, bool strip,
                        size_t *n_chunks)
{
	struct detok_stream ds;
	detok_stream_init(&ds, tok, strip);
	size_t cap = 4096, len = 0;
	char *all = calloc(1, cap), chunk[256];
	*n_chunks = 0;
	for (size_t i = 0; i <= n; i++) {
		size_t w = i < n ? detok_stream_push(&ds, ids[i], chunk, sizeof(chunk))
		                 : detok_stream_flush(&ds, chunk, sizeof(chunk));
		ck_assert_uint_eq(strlen(chunk), w);
		ck_assert_msg(valid_utf8(chunk, w), "chunk %zu is not valid UTF-8", i);
		ck_assert_uint_lt(len + w, cap);
		memcpy(all + len, chunk, w);
		len += w;
		*n_chunks += w > 0;
	}
	return all;
}

START_TEST(test_detok_stream_utf8)
{
	struct tokenizer *tok = load_tok("vocab/ggml-vocab-llama-spm.gguf");
	const char *text = "Hello 🦙 world! 你好，世界 🚀 émoji 𝄞 and ☕ done";
	int32_t *ids;
	size_t n, n_chunks;
	encode(tok, text, strlen(text), true, false, &ids, &n);
	ck_assert_int_eq(ids[0], tokenizer_bos(tok));
	/* at least one character must come as several <0xNN> byte tokens */
	size_t n_byte_tokens = 0;
	for (size_t i = 0; i < n; i++) {
		const char *t = tokenizer_token_text(tok, ids[i]);
		n_byte_tokens += strncmp(t, "<0x", 3) == 0;
	}
	ck_assert_uint_ge(n_byte_tokens, 4);
	char *all = stream_all(tok, ids, n, true, &n_chunks);
	ck_assert_str_eq(all, text);
	ck_assert_uint_lt(n_chunks, n); /* split characters were held back */
	free(all);

	/* the byte-level BPE side: gpt-2 maps bytes to code points */
	struct tokenizer *gpt2 = load_tok("vocab/ggml-vocab-gpt-2.gguf");
	int32_t *gids;
	size_t gn;
	encode(gpt2, text, strlen(text), false, false, &gids, &gn);
	all = stream_all(gpt2, gids, gn, false, &n_chunks);
	ck_assert_str_eq(all, text);
	free(all);
	free(gids);
	tokenizer_free(gpt2);

	/* a dangling lead byte is flushed as U+FFFD */
	struct detok_stream ds;
	char out[64];
	detok_stream_init(&ds, tok, false);
	int32_t lead = tokenizer_find_token(tok, "<0xF0>");
	ck_assert_int_ge(lead, 0);
	ck_assert_uint_eq(detok_stream_push(&ds, lead, out, sizeof(out)), 0);
	ck_assert_uint_eq(detok_stream_flush(&ds, out, sizeof(out)), 3);
	ck_assert_str_eq(out, "\xef\xbf\xbd");
	free(ids);
	tokenizer_free(tok);
}
END_TEST

/* A NUL is data: the text after it is encoded, and decoding (whole or
 * streamed, parse_special or not) gives every byte back. */
START_TEST(test_embedded_nul)
{
	static const char *const names[] = {"models/stories260K.gguf",
	                                    "vocab/ggml-vocab-llama-spm.gguf",
	                                    "vocab/ggml-vocab-gpt-2.gguf",
	                                    "vocab/ggml-vocab-phi-3.gguf",
	                                    "vocab/ggml-vocab-deepseek-llm.gguf",
	                                    "vocab/ggml-vocab-falcon.gguf"};
	static const char text[] = "Once\0 upon a time\0";
	const size_t len = sizeof(text) - 1; /* 18 bytes, two of them NUL */
	for (size_t v = 0; v < sizeof(names) / sizeof(names[0]); v++) {
		struct tokenizer *tok = load_tok(names[v]);
		for (int parse_special = 0; parse_special < 2; parse_special++) {
			int32_t *ids, *head;
			size_t n, n_head;
			encode(tok, text, len, false, parse_special, &ids, &n);
			encode(tok, "Once", 4, false, parse_special, &head, &n_head);
			ck_assert_msg(n >= n_head + 5, "%s: %zu tokens", names[v], n);
			char *out, err[SINKD_ERR_LEN];
			size_t out_len;
			ck_assert_int_eq(
			    tokenizer_decode(tok, ids, n, &out, &out_len, err, sizeof(err)), 0);
			ck_assert_uint_eq(out_len, len);
			ck_assert_mem_eq(out, text, len);
			free(out);
			struct detok_stream ds;
			char piece[64];
			size_t got = 0;
			char all[64];
			detok_stream_init(&ds, tok, true);
			for (size_t i = 0; i < n; i++) {
				size_t k = detok_stream_push(&ds, ids[i], piece, sizeof(piece));
				ck_assert_uint_le(got + k, sizeof(all));
				memcpy(all + got, piece, k);
				got += k;
			}
			got += detok_stream_flush(&ds, all + got, sizeof(all) - got);
			ck_assert_uint_eq(got, len);
			ck_assert_mem_eq(all, text, len);
			free(ids);
			free(head);
		}
		tokenizer_free(tok);
	}
	/* stories260K: "Once" <0x00> "▁upon" "▁a" "▁time" */
	struct tokenizer *tok = load_tok("models/stories260K.gguf");
	int32_t *ids;
	size_t n;
	encode(tok, text, 17, false, false, &ids, &n);
	ck_assert_uint_eq(n, 5);
	ck_assert_int_eq(ids[1], 3);
	ck_assert_int_eq(ids[4], 378);
	char piece[8];
	ck_assert_uint_eq(tokenizer_token_piece(tok, 3, piece, sizeof(piece)), 1);
	ck_assert_int_eq(piece[0], 0);
	free(ids);
	tokenizer_free(tok);
}
END_TEST

START_TEST(test_decode_roundtrip)
{
	static const char *const names[] = {"vocab/ggml-vocab-llama-spm.gguf",
	                                    "vocab/ggml-vocab-gpt-2.gguf",
	                                    "vocab/ggml-vocab-deepseek-llm.gguf"};
	const char *texts[] = {"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
	                       "  leading spaces\tand\ttabs\n\nnew lines   ",
	                       "Ünïcödé façade — naïve"};
	for (size_t v = 0; v < 3; v++) {
		struct tokenizer *tok = load_tok(names[v]);
		for (size_t t = 0; t < 3; t++) {
			int32_t *ids;
			size_t n, len;
			char *back, err[SINKD_ERR_LEN];
			encode(tok, texts[t], strlen(texts[t]), true, false, &ids, &n);
			ck_assert_int_eq(
			    tokenizer_decode(tok, ids, n, &back, &len, err, sizeof(err)), 0);
			ck_assert_msg(strcmp(back, texts[t]) == 0, "%s: \"%s\" came back as \"%s\"",
			              names[v], texts[t], back);
			free(back);
			free(ids);
		}
		tokenizer_free(tok);
	}
}
END_TEST

static uint32_t lcg(uint32_t *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return *seed >> 8;
}

/* Random printable text from several scripts (valid UTF-8), or with
 * `raw_bytes` any bytes at all; every 7th byte a space. */
static size_t random_text(unsigned char *out, size_t cap, bool raw_bytes, uint32_t seed)
{
	static const uint32_t ranges[][2] = {{0x21, 0x7E},       {0xA1, 0x17F},    {0x391, 0x3C9},
	                                     {0x410, 0x44F},     {0x4E00, 0x4FFF}, {0xAC00, 0xAD00},
	                                     {0x1F600, 0x1F64F}, {0x2000, 0x206F}};
	size_t n = 0;
	while (n + 4 < cap) {
		uint32_t r = lcg(&seed);
		if (n % 7 == 0) {
			out[n++] = r % 5 ? ' ' : '\n';
		} else if (raw_bytes) {
			out[n++] = (unsigned char)r;
		} else {
			const uint32_t *rg = ranges[r % 8];
			uint32_t cp = rg[0] + lcg(&seed) % (rg[1] - rg[0] + 1);
			char buf[4];
			size_t l = utf8_encode(cp, buf);
			memcpy(out + n, buf, l);
			n += l;
		}
	}
	return n;
}

/* The pieces of the ids give back exactly the input bytes. */
static void check_lossless(const char *name, const unsigned char *text, size_t len)
{
	struct tokenizer *tok = load_tok(name);
	int32_t *ids;
	size_t n, cap = tokenizer_max_piece_len(tok) + 1, got = 0;
	encode(tok, (const char *)text, len, false, false, &ids, &n);
	char *piece = malloc(cap), *all = malloc(2 * len);
	for (size_t i = 0; i < n; i++) {
		size_t pl = tokenizer_token_piece(tok, ids[i], piece, cap);
		ck_assert_uint_lt(pl, cap);
		ck_assert_uint_le(got + pl, 2 * len);
		memcpy(all + got, piece, pl);
		got += pl;
	}
	/* SentencePiece adds its space prefix to the first piece */
	size_t skip = tokenizer_pre_name(tok) == NULL ? 1 : 0;
	ck_assert_msg(got == len + skip && memcmp(all + skip, text, len) == 0, "%s lost bytes",
	              name);
	free(piece);
	free(all);
	free(ids);
	tokenizer_free(tok);
}

/* Any valid UTF-8 round-trips through every vocabulary; arbitrary bytes
 * (invalid UTF-8, NULs) through those that have all 256 byte tokens. */
START_TEST(test_lossless)
{
	unsigned char text[4000];
	size_t len = random_text(text, sizeof(text), false, 7);
	for (size_t v = 0; v < sizeof(vocabs) / sizeof(vocabs[0]); v++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "vocab/ggml-vocab-%s.gguf", vocabs[v].name);
		check_lossless(rel, text, len);
	}
	len = random_text(text, sizeof(text), true, 12345);
	check_lossless("vocab/ggml-vocab-llama-spm.gguf", text, len);
	check_lossless("vocab/ggml-vocab-gpt-2.gguf", text, len);
}
END_TEST

/* Writes a tiny byte-level BPE vocabulary: "abc" is a token, but the merges
 * only reach it as "a" + "bc". */
static char *write_tiny_bpe(const char *model, const char *pre)
{
	static const char *const tokens[] = {"a",
	                                     "b",
	                                     "c",
	                                     "ab",
	                                     "bc",
	                                     "abc",
	                                     "\xc4\xa0",
	                                     "\xc4\xa0"
	                                     "a",
	                                     "<|begin_of_text|>",
	                                     "<|eot_id|>"};
	static const char *const merges[] = {"b c", "\xc4\xa0 a"};
	const int32_t types[] = {1, 1, 1, 1, 1, 1, 1, 1, 3, 3};
	char *path = malloc(64);
	ck_assert_ptr_nonnull(path);
	tu_temp_file(path, 64, "sinkd-tok", NULL, 0);
	char err[SINKD_ERR_LEN];
	struct gguf_writer *w;
	ck_assert_int_eq(gguf_writer_new(path, &w, err, sizeof(err)), 0);
	gguf_writer_add_string(w, "tokenizer.ggml.model", model);
	if (pre)
		gguf_writer_add_string(w, "tokenizer.ggml.pre", pre);
	gguf_writer_add_string_array(w, "tokenizer.ggml.tokens", tokens, 10);
	gguf_writer_add_array(w, "tokenizer.ggml.token_type", GGUF_VALUE_INT32, 10, types);
	gguf_writer_add_string_array(w, "tokenizer.ggml.merges", merges, 2);
	gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 8);
	gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 9);
	ck_assert_int_eq(gguf_writer_write_header(w, err, sizeof(err)), 0);
	ck_assert_int_eq(gguf_writer_finish(w, err, sizeof(err)), 0);
	gguf_writer_free(w);
	return path;
}

static int open_tiny(const char *model, const char *pre, struct tokenizer **tok, char *err,
                     size_t err_len)
{
	char *path = write_tiny_bpe(model, pre);
	struct gguf_file *f;
	ck_assert_msg(gguf_open(path, &f, err, err_len) == 0, "%s", err);
	int rc = tokenizer_new_from_gguf(f, tok, err, err_len);
	gguf_close(f);
	unlink(path);
	free(path);
	return rc;
}

/* llama-bpe (Llama 3) takes a word that is a whole token before merging,
 * adds BOS by default and knows <|eot_id|>; gpt-2 merges. */
START_TEST(test_llama_bpe_ignore_merges)
{
	char err[SINKD_ERR_LEN];
	struct tokenizer *tok;
	int32_t *ids;
	size_t n;
	ck_assert_int_eq(open_tiny("gpt2", "llama-bpe", &tok, err, sizeof(err)), 0);
	ck_assert_str_eq(tokenizer_pre_name(tok), "llama-bpe");
	ck_assert(tokenizer_pre_is_exact(tok));
	encode(tok, "abc a", 5, true, false, &ids, &n);
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(ids[0], 8); /* BOS */
	ck_assert_int_eq(ids[1], 5); /* "abc" whole */
	ck_assert_int_eq(ids[2], 7); /* " a" */
	ck_assert(tokenizer_is_eog(tok, 9));
	free(ids);
	tokenizer_free(tok);

	ck_assert_int_eq(open_tiny("gpt2", "gpt-2", &tok, err, sizeof(err)), 0);
	encode(tok, "abc a", 5, true, false, &ids, &n);
	ck_assert_uint_eq(n, 3); /* no BOS by default */
	ck_assert_int_eq(ids[0], 0);
	ck_assert_int_eq(ids[1], 4);
	ck_assert_int_eq(ids[2], 7);
	free(ids);
	tokenizer_free(tok);

	/* an unknown pre-tokenizer name falls back to "default" */
	ck_assert_int_eq(open_tiny("gpt2", "no-such-pre", &tok, err, sizeof(err)), 0);
	ck_assert_str_eq(tokenizer_pre_name(tok), "default");
	ck_assert(!tokenizer_pre_is_exact(tok));
	tokenizer_free(tok);

	tok = NULL;
	ck_assert_int_eq(open_tiny("bert", NULL, &tok, err, sizeof(err)), -ENOTSUP);
	ck_assert_ptr_null(tok);
	ck_assert_ptr_nonnull(strstr(err, "bert"));
}
END_TEST

START_TEST(test_special_tokens)
{
	struct tokenizer *tok = load_tok("vocab/ggml-vocab-llama-spm.gguf");
	int32_t *ids;
	size_t n;
	const char *s = "<s>hi</s>";
	encode(tok, s, strlen(s), false, true, &ids, &n);
	ck_assert_uint_ge(n, 3);
	ck_assert_int_eq(ids[0], 1);
	ck_assert_int_eq(ids[n - 1], 2);
	free(ids);
	encode(tok, s, strlen(s), false, false, &ids, &n); /* plain text: no control ids */
	for (size_t i = 0; i < n; i++)
		ck_assert(ids[i] != 1 && ids[i] != 2);
	free(ids);
	tokenizer_free(tok);

	tok = load_tok("vocab/ggml-vocab-phi-3.gguf");
	int32_t user = tokenizer_find_token(tok, "<|user|>"),
	        end = tokenizer_find_token(tok, "<|end|>");
	ck_assert_int_ge(user, 0);
	ck_assert(tokenizer_is_control(tok, user));
	ck_assert(tokenizer_is_eog(tok, end));
	ck_assert_ptr_nonnull(tokenizer_chat_template(tok));
	s = "<|user|>\nHi<|end|>\n<|assistant|>";
	encode(tok, s, strlen(s), true, true, &ids, &n);
	ck_assert_int_eq(ids[0], tokenizer_bos(tok));
	ck_assert_int_eq(ids[1], user);
	ck_assert_int_eq(ids[n - 1], tokenizer_find_token(tok, "<|assistant|>"));
	char *text, err[SINKD_ERR_LEN];
	size_t len;
	ck_assert_int_eq(tokenizer_decode(tok, ids, n, &text, &len, err, sizeof(err)), 0);
	ck_assert_str_eq(text, "Hi"); /* control tokens print nothing; rstrip ate the newlines */
	free(text);
	free(ids);
	tokenizer_free(tok);
}
END_TEST

START_TEST(test_unsupported_model_refused)
{
	/* every shared vocab loads, and reports a sane pre-tokenizer */
	struct tokenizer *tok = load_tok("vocab/ggml-vocab-gpt-neox.gguf");
	ck_assert_str_eq(tokenizer_pre_name(tok), "default");
	tokenizer_free(tok);
	tok = load_tok("vocab/ggml-vocab-baichuan.gguf");
	ck_assert_ptr_null(tokenizer_pre_name(tok));
	int32_t *ids;
	size_t n;
	encode(tok, "百川 tokenizer", strlen("百川 tokenizer"), true, false, &ids, &n);
	ck_assert_uint_ge(n, 3);
	free(ids);
	tokenizer_free(tok);
}
END_TEST

/* ~30 KB of real text through a 32k SentencePiece and a 100k BPE vocab. */
START_TEST(test_encode_speed)
{
	size_t len;
	const char *path = tu_shared_path("data/tinystories-dev.txt");
	char *text = tu_slurp(path, &len);
	if (len > 30000)
		len = 30000;
	static const char *const names[] = {"vocab/ggml-vocab-llama-spm.gguf",
	                                    "vocab/ggml-vocab-deepseek-llm.gguf"};
	for (size_t v = 0; v < 2; v++) {
		double t0 = now_ms();
		struct tokenizer *tok = load_tok(names[v]);
		double t1 = now_ms();
		int32_t *ids;
		size_t n;
		encode(tok, text, len, false, false, &ids, &n);
		double t2 = now_ms();
		printf("%s: load %.1f ms (%d tokens), encode %zu bytes -> %zu ids in %.1f ms\n",
		       names[v], t1 - t0, tokenizer_n_vocab(tok), len, n, t2 - t1);
		ck_assert_uint_gt(n, len / 8);
		ck_assert_msg(t2 - t1 < 500, "encoding took %.0f ms", t2 - t1);
		ck_assert_msg(t1 - t0 < 2000, "loading took %.0f ms", t1 - t0);
		free(ids);
		tokenizer_free(tok);
	}
	free(text);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tokenizer");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_vocab_vectors, 0, (int)(sizeof(vocabs) / sizeof(vocabs[0])));
	tcase_add_test(tc, test_pretokenizer_cases);
	tcase_add_test(tc, test_stories260k_reference_ids);
	tcase_add_test(tc, test_stories260k_dev_set_count);
	tcase_add_test(tc, test_detok_stream_utf8);
	tcase_add_test(tc, test_embedded_nul);
	tcase_add_test(tc, test_decode_roundtrip);
	tcase_add_test(tc, test_lossless);
	tcase_add_test(tc, test_llama_bpe_ignore_merges);
	tcase_add_test(tc, test_special_tokens);
	tcase_add_test(tc, test_unsupported_model_refused);
	tcase_add_test(tc, test_encode_speed);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
