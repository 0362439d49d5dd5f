/* Tokenizer loading and encoding: reads the vocabulary from GGUF metadata
 * (tokens, scores, types, merges, special ids, flags), builds the hash maps,
 * splits input text around special tokens and hands each plain fragment to
 * the SentencePiece (tokenizer_spm.c) or byte-level BPE (tokenizer_bpe.c)
 * merger.  Decoding lives in detok.c.  WordPiece, Unigram and RWKV
 * vocabularies are not supported and are refused with a message. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "util/errbuf.h"

/* Control tokens that end a turn in the chat formats we know. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>",      "<|end|>",    "<end_of_turn>",         "<|endoftext|>",
    "<EOT>",      "<|end_of_text|>", "<|eom_id|>", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
    NULL};

static int32_t read_id(const struct gguf_file *f, const char *key, uint32_t n_vocab, int32_t dflt)
{
	int64_t v;
	if (gguf_get_int(f, key, &v) < 0)
		v = dflt;
	return v >= 0 && v < (int64_t)n_vocab ? (int32_t)v : -1;
}

static bool read_bool(const struct gguf_file *f, const char *key, bool dflt)
{
	bool v;
	return gguf_get_bool(f, key, &v) == 0 ? v : dflt;
}

/* A NUL-terminated copy of a string value, or NULL when absent. */
static int read_string(const struct gguf_file *f, const char *key, char **out)
{
	const char *s;
	size_t len;
	*out = NULL;
	if (gguf_get_string(f, key, &s, &len) < 0)
		return 0;
	*out = strndup(s, len);
	return *out ? 0 : -ENOMEM;
}

/* Walks a string array through its raw bytes (one key lookup in all, not
 * one per element): 150k tokens load in milliseconds. */
struct str_iter {
	const unsigned char *p, *end;
	uint64_t left;
};

static int str_iter_init(const struct gguf_file *f, const char *key, struct str_iter *it,
                         uint64_t *count)
{
	for (size_t i = 0; i < gguf_n_kv(f); i++) {
		if (strcmp(gguf_kv_key(f, i), key) != 0)
			continue;
		enum gguf_value_type t;
		const void *data;
		size_t len;
		uint32_t et;
		if (gguf_kv_raw(f, i, &t, &data, &len) < 0 || t != GGUF_VALUE_ARRAY || len < 12)
			return -EINVAL;
		memcpy(&et, data, 4);
		memcpy(count, (const char *)data + 4, 8);
		if (et != GGUF_VALUE_STRING)
			return -EINVAL;
		it->p = (const unsigned char *)data + 12;
		it->end = (const unsigned char *)data + len;
		it->left = *count;
		return 0;
	}
	return -ENOENT;
}

static int str_iter_next(struct str_iter *it, const char **s, size_t *len)
{
	uint64_t n;
	if (it->left == 0 || it->end - it->p < 8)
		return -EINVAL;
	memcpy(&n, it->p, 8);
	it->p += 8;
	if (n > (uint64_t)(it->end - it->p))
		return -EINVAL;
	*s = (const char *)it->p;
	*len = (size_t)n;
	it->p += n;
	it->left--;
	return 0;
}

/* Copies a string array into one NUL-separated arena with offsets. */
static int load_string_array(const struct gguf_file *f, const char *key, char **arena,
                             uint32_t **off, uint32_t *count, char *err, size_t err_len)
{
	struct str_iter it, it2;
	uint64_t n, total = 0;
	const char *s;
	size_t len;
	if (str_iter_init(f, key, &it, &n) < 0)
		return err_set(err, err_len, -EINVAL, "%s: missing or not a string array", key);
	if (n > INT32_MAX / 2)
		return err_set(err, err_len, -EINVAL, "%s: %llu strings", key,
		               (unsigned long long)n);
	it2 = it;
	for (uint64_t i = 0; i < n; i++) {
		if (str_iter_next(&it, &s, &len) < 0)
			return err_set(err, err_len, -EINVAL, "%s[%llu] unreadable", key,
			               (unsigned long long)i);
		total += len + 1;
	}
	if (total >= UINT32_MAX)
		return err_set(err, err_len, -EINVAL, "%s: too much text", key);
	*arena = malloc(total + 1);
	*off = malloc((n + 1) * sizeof(**off));
	if (!*arena || !*off)
		return err_set(err, err_len, -ENOMEM, "tokenizer: out of memory");
	uint32_t o = 0;
	for (uint64_t i = 0; i < n; i++) {
		str_iter_next(&it2, &s, &len);
		(*off)[i] = o;
		memcpy(*arena + o, s, len);
		(*arena)[o + len] = '\0';
		o += (uint32_t)len + 1;
	}
	(*off)[n] = o;
	*count = (uint32_t)n;
	return 0;
}

static int load_tokens(struct tokenizer *tok, const struct gguf_file *f, char *err, size_t err_len)
{
	int rc = load_string_array(f, "tokenizer.ggml.tokens", &tok->text, &tok->off, &tok->n_vocab,
	                           err, err_len);
	if (rc < 0)
		return rc;
	if (tok->n_vocab == 0)
		return err_set(err, err_len, -EINVAL, "tokenizer.ggml.tokens: empty");
	tok->score = calloc(tok->n_vocab, sizeof(*tok->score));
	tok->type = malloc(tok->n_vocab);
	tok->attr = calloc(tok->n_vocab, 1);
	if (!tok->score || !tok->type || !tok->attr)
		return err_set(err, err_len, -ENOMEM, "tokenizer: out of memory");
	for (uint32_t i = 0; i < tok->n_vocab; i++)
		if (tok->off[i + 1] - tok->off[i] - 1 > tok->max_piece)
			tok->max_piece = tok->off[i + 1] - tok->off[i] - 1;
	if (tok->max_piece < 8)
		tok->max_piece = 8;
	/* A duplicate text keeps the first id: added tokens come after the base
	 * vocabulary (deepseek-coder re-adds "\xc3\xbd" etc.), and merges must
	 * find the base token, as in the original tokenizer. */
	return strmap_build(&tok->vocab, tok->text, tok->off, tok->n_vocab, false) < 0
	           ? err_set(err, err_len, -ENOMEM, "tokenizer: out of memory")
	           : 0;
}

/* Optional per-token arrays: scores and types; their length must match.
 * The usual element types are read straight from the mapping. */
static int per_token_array(const struct tokenizer *tok, const struct gguf_file *f,
                           const char *key, enum gguf_value_type *et,
                           const unsigned char **raw, char *err, size_t err_len)
{
	uint64_t n;
	if (gguf_get_array_info(f, key, et, &n) < 0)
		return 0; /* absent */
	if (n != tok->n_vocab)
		return err_set(err, err_len, -EINVAL, "%s: %llu values for %u tokens", key,
		               (unsigned long long)n, tok->n_vocab);
	*raw = gguf_get_array_data(f, key);
	return 1;
}

static int load_scores(struct tokenizer *tok, const struct gguf_file *f, char *err, size_t err_len)
{
	static const char key[] = "tokenizer.ggml.scores";
	enum gguf_value_type et;
	const unsigned char *raw = NULL;
	int rc = per_token_array(tok, f, key, &et, &raw, err, err_len);
	if (rc <= 0)
		return rc;
	for (uint32_t i = 0; i < tok->n_vocab; i++) {
		double v = 0;
		if (et == GGUF_VALUE_FLOAT32 && raw)
			memcpy(&tok->score[i], raw + 4 * (size_t)i, 4);
		else if (gguf_get_array_float(f, key, i, &v) < 0)
			return err_set(err, err_len, -EINVAL, "%s: not numbers", key);
		else
			tok->score[i] = (float)v;
	}
	return 0;
}

static int load_types(struct tokenizer *tok, const struct gguf_file *f, char *err, size_t err_len)
{
	static const char key[] = "tokenizer.ggml.token_type";
	enum gguf_value_type et;
	const unsigned char *raw = NULL;
	memset(tok->type, TOK_TYPE_NORMAL, tok->n_vocab);
	int rc = per_token_array(tok, f, key, &et, &raw, err, err_len);
	if (rc <= 0)
		return rc;
	for (uint32_t i = 0; i < tok->n_vocab; i++) {
		int64_t v = 0;
		if (et == GGUF_VALUE_INT32 && raw) {
			int32_t v32;
			memcpy(&v32, raw + 4 * (size_t)i, 4);
			v = v32;
		} else if (gguf_get_array_int(f, key, i, &v) < 0) {
			return err_set(err, err_len, -EINVAL, "%s: not integers", key);
		}
		tok->type[i] = v >= 0 && v <= TOK_TYPE_BYTE ? (uint8_t)v : TOK_TYPE_NORMAL;
	}
	return 0;
}

static int load_merges(struct tokenizer *tok, const struct gguf_file *f, char *err, size_t err_len)
{
	int rc = load_string_array(f, "tokenizer.ggml.merges", &tok->merge_text, &tok->merge_off,
	                           &tok->n_merges, err, err_len);
	if (rc < 0)
		return rc;
	/* The first occurrence of a merge gives its rank. */
	if (strmap_build(&tok->merges, tok->merge_text, tok->merge_off, tok->n_merges, false) < 0)
		return err_set(err, err_len, -ENOMEM, "tokenizer: out of memory");
	return 0;
}

static int cmp_special(const void *a, const void *b, void *arg)
{
	const struct tokenizer *tok = arg;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	size_t lx, ly;
	const char *tx = tok_text(tok, x, &lx), *ty = tok_text(tok, y, &ly);
	if ((unsigned char)tx[0] != (unsigned char)ty[0])
		return (unsigned char)tx[0] < (unsigned char)ty[0] ? -1 : 1;
	if (lx != ly)
		return lx > ly ? -1 : 1;
	return x < y ? -1 : x > y;
}

static bool is_special_type(uint8_t t)
{
	return t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN;
}

/* The tokens matched inside input text, indexed by their first byte. */
static int build_special(struct tokenizer *tok)
{
	size_t len;
	for (uint32_t i = 0; i < tok->n_vocab; i++)
		if (is_special_type(tok->type[i]) && (tok_text(tok, (int32_t)i, &len), len > 0))
			tok->n_special++;
	tok->special = malloc((tok->n_special + 1) * sizeof(*tok->special));
	if (!tok->special)
		return -ENOMEM;
	size_t k = 0;
	for (uint32_t i = 0; i < tok->n_vocab; i++)
		if (is_special_type(tok->type[i]) && (tok_text(tok, (int32_t)i, &len), len > 0))
			tok->special[k++] = (int32_t)i;
	qsort_r(tok->special, tok->n_special, sizeof(*tok->special), cmp_special, tok);
	size_t j = 0;
	for (int b = 0; b <= 256; b++) {
		while (j < tok->n_special &&
		       (unsigned char)tok->text[tok->off[tok->special[j]]] < b)
			j++;
		tok->special_first[b] = (uint32_t)j;
	}
	return 0;
}

static void set_byte_tokens(struct tokenizer *tok)
{
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof(name), "<0x%02X>", b);
		tok->byte_token[b] =
		    tok->kind == TOK_KIND_SPM ? strmap_find(&tok->vocab, name, 6) : -1;
	}
}

static void add_eog(struct tokenizer *tok, int32_t id)
{
	if (id < 0 || tok->n_eog == sizeof(tok->eog) / sizeof(tok->eog[0]))
		return;
	for (size_t i = 0; i < tok->n_eog; i++)
		if (tok->eog[i] == id)
			return;
	tok->eog[tok->n_eog++] = id;
}

static int32_t find_control(const struct tokenizer *tok, const char *text)
{
	int32_t id = strmap_find(&tok->vocab, text, strlen(text));
	return id >= 0 && tok->type[id] == TOK_TYPE_CONTROL ? id : -1;
}

static void set_eog(struct tokenizer *tok)
{
	add_eog(tok, tok->eos);
	add_eog(tok, tok->eot);
	add_eog(tok, tok->eom);
	for (const char *const *t = eog_texts; *t; t++)
		add_eog(tok, find_control(tok, *t));
	/* gpt-oss (harmony): a reply ends at <|return|> or at a tool call's
	 * <|call|>; <|end|> only closes one message (the analysis before the
	 * final answer), as llama.cpp reads it too. */
	int32_t ret = find_control(tok, "<|return|>"), call = find_control(tok, "<|call|>");
	int32_t end = find_control(tok, "<|end|>");
	if (ret < 0 || call < 0)
		return;
	add_eog(tok, ret);
	add_eog(tok, call);
	for (size_t i = 0; end >= 0 && i < tok->n_eog; i++)
		if (tok->eog[i] == end)
			tok->eog[i--] = tok->eog[--tok->n_eog];
}

/* Control tokens that are output syntax (TOK_ATTR_PRINTED).  Only formats
 * sinkd did not parse before are listed, so the text of other families'
 * replies stays as it was, and Mistral's tool-call markers, which real
 * Mistral GGUFs mark as control: dropped, their calls were never parsed. */
static void set_printed(struct tokenizer *tok)
{
	static const char *const printed[] = {
	    "<|channel|>",
	    "<|message|>",
	    "<|start|>",
	    "<|constrain|>",
	    "<\uff5ctool\u2581calls\u2581begin\uff5c>",
	    "<\uff5ctool\u2581calls\u2581end\uff5c>",
	    "<\uff5ctool\u2581call\u2581begin\uff5c>",
	    "<\uff5ctool\u2581call\u2581end\uff5c>",
	    "<\uff5ctool\u2581sep\uff5c>",
	    "<|START_THINKING|>",
	    "<|END_THINKING|>",
	    "<|START_ACTION|>",
	    "<|END_ACTION|>",
	    "[THINK]",
	    "[/THINK]",
	    "[TOOL_CALLS]",
	    "[ARGS]",
	    "[CALL_ID]",
	};
	for (size_t i = 0; i < sizeof(printed) / sizeof(printed[0]); i++) {
		int32_t id = find_control(tok, printed[i]);
		if (id >= 0 && !tokenizer_is_eog(tok, id))
			tok->attr[id] |= TOK_ATTR_PRINTED;
	}
}

/* Phi-3's added tokens swallow the whitespace after them (as in its
 * tokenizer.json); llama.cpp keys this on the model name, and so do we. */
static void set_strip_attrs(struct tokenizer *tok, const struct gguf_file *f)
{
	const char *name;
	size_t len;
	if (gguf_get_string(f, "general.name", &name, &len) < 0)
		return;
	char lower[64];
	size_t n = len < sizeof(lower) - 1 ? len : sizeof(lower) - 1;
	for (size_t i = 0; i < n; i++)
		lower[i] = (char)tolower((unsigned char)name[i]);
	lower[n] = '\0';
	if (!strstr(lower, "phi-3") && !strstr(lower, "phi3"))
		return;
	for (size_t i = 0; i < tok->n_special; i++)
		tok->attr[tok->special[i]] |= TOK_ATTR_RSTRIP;
	static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
	for (size_t i = 0; i < 3; i++) {
		int32_t id = strmap_find(&tok->vocab, keep[i], strlen(keep[i]));
		if (id >= 0)
			tok->attr[id] &= (uint8_t)~TOK_ATTR_RSTRIP;
	}
}

static int load_kind(struct tokenizer *tok, const struct gguf_file *f, char *err, size_t err_len)
{
	const char *model;
	size_t len;
	if (gguf_get_string(f, "tokenizer.ggml.model", &model, &len) < 0)
		return err_set(err, err_len, -EINVAL, "tokenizer.ggml.model: missing");
	if (len == 5 && memcmp(model, "llama", 5) == 0)
		tok->kind = TOK_KIND_SPM;
	else if (len == 4 && memcmp(model, "gpt2", 4) == 0)
		tok->kind = TOK_KIND_BPE;
	else
		return err_set(err, err_len, -ENOTSUP,
		               "tokenizer model \"%.*s\" is not supported (llama, gpt2)",
		               (int)(len > 32 ? 32 : len), model);
	return 0;
}

static int load_bpe(struct tokenizer *tok, const struct gguf_file *f, char *err, size_t err_len)
{
	char *pre = NULL;
	struct pretok_flags flags;
	int rc = load_merges(tok, f, err, err_len);
	if (rc < 0)
		return rc;
	if (read_string(f, "tokenizer.ggml.pre", &pre) < 0)
		return err_set(err, err_len, -ENOMEM, "tokenizer: out of memory");
	rc = pretok_new(pre, &tok->pre, &flags, err, err_len);
	tok->ignore_merges = flags.ignore_merges;
	tok->pre_bos = flags.add_bos;
	tok->pre_no_bos = flags.no_bos;
	tok->pre_exact = flags.known;
	tok->nfc = flags.nfc;
	free(pre);
	bpe_init_byte_map(tok);
	return rc;
}

static int load_flags(struct tokenizer *tok, const struct gguf_file *f)
{
	bool spm = tok->kind == TOK_KIND_SPM;
	uint32_t n = tok->n_vocab;
	tok->bos = read_id(f, "tokenizer.ggml.bos_token_id", n, spm ? 1 : -1);
	if (tok->pre_no_bos)
		tok->bos = -1;
	tok->eos = read_id(f, "tokenizer.ggml.eos_token_id", n, spm ? 2 : -1);
	tok->unk = read_id(f, "tokenizer.ggml.unknown_token_id", n, spm ? 0 : -1);
	tok->eot = read_id(f, "tokenizer.ggml.eot_token_id", n, -1);
	tok->eom = read_id(f, "tokenizer.ggml.eom_token_id", n, -1);
	bool bos_default = spm || tok->pre_bos; /* Llama 3, Tekken, Chameleon */
	tok->add_bos = read_bool(f, "tokenizer.ggml.add_bos_token", bos_default);
	tok->add_eos = read_bool(f, "tokenizer.ggml.add_eos_token", false);
	tok->add_space_prefix = spm && read_bool(f, "tokenizer.ggml.add_space_prefix", true);
	return read_string(f, "tokenizer.chat_template", &tok->chat_template);
}

int tokenizer_new_from_gguf(const struct gguf_file *f, struct tokenizer **out, char *err,
                            size_t err_len)
{
	*out = NULL;
	struct tokenizer *tok = calloc(1, sizeof(*tok));
	if (!tok)
		return err_set(err, err_len, -ENOMEM, "tokenizer: out of memory");
	int rc = load_kind(tok, f, err, err_len);
	if (rc == 0)
		rc = load_tokens(tok, f, err, err_len);
	if (rc == 0)
		rc = load_scores(tok, f, err, err_len);
	if (rc == 0)
		rc = load_types(tok, f, err, err_len);
	if (rc == 0 && tok->kind == TOK_KIND_BPE)
		rc = load_bpe(tok, f, err, err_len);
	if (rc == 0 && (load_flags(tok, f) < 0 || build_special(tok) < 0))
		rc = err_set(err, err_len, -ENOMEM, "tokenizer: out of memory");
	if (rc < 0) {
		tokenizer_free(tok);
		return rc;
	}
	set_byte_tokens(tok);
	set_eog(tok);
	set_strip_attrs(tok, f);
	set_printed(tok);
	*out = tok;
	return 0;
}

void tokenizer_free(struct tokenizer *tok)
{
	if (!tok)
		return;
	strmap_free(&tok->vocab);
	strmap_free(&tok->merges);
	pretok_free(tok->pre);
	free(tok->text);
	free(tok->off);
	free(tok->score);
	free(tok->type);
	free(tok->attr);
	free(tok->merge_text);
	free(tok->merge_off);
	free(tok->special);
	free(tok->chat_template);
	free(tok);
}

int tokenizer_n_vocab(const struct tokenizer *tok)
{
	return (int)tok->n_vocab;
}
int32_t tokenizer_bos(const struct tokenizer *tok)
{
	return tok->bos;
}
int32_t tokenizer_eos(const struct tokenizer *tok)
{
	return tok->eos;
}
bool tokenizer_add_bos(const struct tokenizer *tok)
{
	return tok->add_bos && tok->bos >= 0;
}
const char *tokenizer_chat_template(const struct tokenizer *tok)
{
	return tok->chat_template;
}

bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id)
{
	for (size_t i = 0; i < tok->n_eog; i++)
		if (tok->eog[i] == id)
			return true;
	return false;
}

int32_t tokenizer_find_token(const struct tokenizer *tok, const char *text)
{
	return strmap_find(&tok->vocab, text, strlen(text));
}

bool tokenizer_is_control(const struct tokenizer *tok, int32_t id)
{
	return id >= 0 && (uint32_t)id < tok->n_vocab && tok->type[id] == TOK_TYPE_CONTROL &&
	       !(tok->attr[id] & TOK_ATTR_PRINTED);
}

const char *tokenizer_token_text(const struct tokenizer *tok, int32_t id)
{
	size_t len;
	return id >= 0 && (uint32_t)id < tok->n_vocab ? tok_text(tok, id, &len) : NULL;
}

const char *tokenizer_pre_name(const struct tokenizer *tok)
{
	return tok->pre ? pretok_name(tok->pre) : NULL;
}

bool tokenizer_pre_is_exact(const struct tokenizer *tok)
{
	return !tok->pre || tok->pre_exact;
}

/* The special token that starts at text[i], longest first, or -1. */
static int32_t match_special(const struct tokenizer *tok, const char *text, size_t len, size_t i,
                             bool parse_special, size_t *mlen)
{
	unsigned char b = (unsigned char)text[i];
	for (uint32_t k = tok->special_first[b]; k < tok->special_first[b + 1]; k++) {
		int32_t id = tok->special[k];
		if (!parse_special && tok->type[id] != TOK_TYPE_USER_DEFINED)
			continue;
		size_t tl;
		const char *t = tok_text(tok, id, &tl);
		if (tl <= len - i && memcmp(text + i, t, tl) == 0) {
			*mlen = tl;
			return id;
		}
	}
	return -1;
}

static int encode_fragment(const struct tokenizer *tok, const char *text, size_t len,
                           bool *prev_special, struct idvec *out)
{
	if (len == 0)
		return 0;
	bool prefix = tok->add_space_prefix && *prev_special;
	*prev_special = false;
	return tok->kind == TOK_KIND_SPM ? spm_encode(tok, text, len, prefix, out)
	                                 : bpe_encode(tok, text, len, out);
}

static int encode_all(const struct tokenizer *tok, const char *text, size_t len, bool parse_special,
                      struct idvec *out)
{
	bool prev_special = true; /* SentencePiece: the first fragment gets the space prefix */
	size_t frag = 0, i = 0, mlen = 0;
	while (i < len) {
		int32_t id =
		    tok->n_special ? match_special(tok, text, len, i, parse_special, &mlen) : -1;
		if (id < 0) {
			i++;
			continue;
		}
		size_t fend = i;
		if (tok->attr[id] & TOK_ATTR_LSTRIP)
			while (fend > frag && isspace((unsigned char)text[fend - 1]))
				fend--;
		int rc = encode_fragment(tok, text + frag, fend - frag, &prev_special, out);
		if (rc < 0 || (rc = idvec_push(out, id)) < 0)
			return rc;
		prev_special = true;
		i += mlen;
		if (tok->attr[id] & TOK_ATTR_RSTRIP)
			while (i < len && isspace((unsigned char)text[i]))
				i++;
		frag = i;
	}
	return encode_fragment(tok, text + frag, len - frag, &prev_special, out);
}

int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t **ids, size_t *n_ids, char *err, size_t err_len)
{
	struct idvec out = {0};
	int rc = 0;
	*ids = NULL;
	*n_ids = 0;
	if (add_special && tok->add_bos && tok->bos >= 0)
		rc = idvec_push(&out, tok->bos);
	if (rc == 0)
		rc = encode_all(tok, text, len, parse_special, &out);
	if (rc == 0 && add_special && tok->add_eos && tok->eos >= 0)
		rc = idvec_push(&out, tok->eos);
	if (rc == 0 && !out.v)
		rc = idvec_push(&out, 0), out.n = 0; /* a valid pointer even for no ids */
	if (rc < 0) {
		free(out.v);
		return err_set(err, err_len, rc, "tokenize %zu bytes: %s", len,
		               rc == -ENOMEM ? "out of memory" : "text too long");
	}
	*ids = out.v;
	*n_ids = out.n;
	return 0;
}
