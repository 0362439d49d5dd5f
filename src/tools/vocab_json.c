/* tokenizer.json -> GGUF tokenizer keys, as llama.cpp's convert_hf_to_gguf.py
 * writes them: get_vocab_base + SpecialVocab for byte-level BPE (tokens in id
 * order, gaps as [PADi], added tokens CONTROL when special or special-looking
 * and USER_DEFINED otherwise, merges, the pre-tokenizer name of the split
 * regex), _create_vocab_sentencepiece for SentencePiece-style BPE (Gemma 3:
 * byte tokens, added tokens scored -1000, no space prefix), then the special
 * ids, add_bos/add_eos and the chat template from tokenizer_config.json.
 * The SentencePiece scores the converter reads from tokenizer.model are
 * rebuilt from the merges, which Hugging Face wrote in score order.  The
 * config's vocab_size is not read: the vocabulary ends at its largest id.
 * WordPiece and Unigram models and split regexes llama.cpp has no name for
 * are refused. */
#include "tools/vocab_json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum {
	TT_NORMAL = 1,
	TT_UNKNOWN = 2,
	TT_CONTROL = 3,
	TT_USER_DEFINED = 4,
	TT_UNUSED = 5,
	TT_BYTE = 6
};

#define MAX_TOKENS (1 << 24)
#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* Split regexes of tokenizer.json and the name llama.cpp's converter gives
 * the vocabularies that use them (it identifies them by a hash of their
 * tokenization of a test text; these are the families that map to one). */
static const struct {
	const char *regex, *name;
} pre_names[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
    {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:"
     "'"
     "s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}"
     "\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "gpt-4o"},
};

/* SpecialVocab's token kinds: tokenizer_config.json's <kind>_token and the
 * GGUF key of its id (llama.cpp spells "seperator" so). */
static const struct {
	const char *kind, *key;
} special_keys[] = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"}, {"cls", "tokenizer.ggml.cls_token_id"},
    {"mask", "tokenizer.ggml.mask_token_id"},
};

struct hf_vocab {
	const char *path;
	cJSON *json;               /* tokenizer.json */
	cJSON *config;             /* tokenizer_config.json beside it, or NULL */
	const cJSON *model;        /* json.model */
	const cJSON *merges;       /* json.model.merges (array) */
	bool spm;                  /* SentencePiece-style: U+2581 spaces, byte fallback */
	const char *pre;           /* tokenizer.ggml.pre */
	uint32_t n;                /* tokens: the largest id + 1 */
	char **text;               /* (n) token texts, malloc'ed; NULL: a gap */
	int32_t *type;             /* (n) TT_* */
	float *score;              /* (n) SentencePiece scores */
	const char *chat_template; /* written instead of the config's; NULL: the config's */
};

/* A vocabulary entry for bsearch by text. */
struct text_id {
	const char *text;
	uint32_t id;
};

bool vocab_json_is_json(const char *path)
{
	size_t n = strlen(path);
	return n >= 5 && strcmp(path + n - 5, ".json") == 0;
}

static int read_json(const char *path, bool optional, cJSON **out, char *err, size_t err_len)
{
	*out = NULL;
	FILE *f = fopen(path, "rb");
	if (!f)
		return optional && errno == ENOENT
		           ? 0
		           : err_set(err, err_len, -errno, "%s: %s", path, strerror(errno));
	char *buf = NULL;
	long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
	int rc = -EIO;
	if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1)) &&
	    fread(buf, 1, (size_t)len, f) == (size_t)len)
		rc = 0;
	fclose(f);
	if (rc == 0) {
		*out = cJSON_ParseWithLength(buf, (size_t)len);
		if (!*out)
			rc = err_set(err, err_len, -EINVAL, "%s: not valid JSON (near byte %ld)",
			             path, (long)(cJSON_GetErrorPtr() - buf));
	} else {
		rc = err_set(err, err_len, -EIO, "%s: cannot read it", path);
	}
	free(buf);
	return rc;
}

static const cJSON *item(const cJSON *obj, const char *key)
{
	return obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

static const char *str_item(const cJSON *obj, const char *key)
{
	const cJSON *v = item(obj, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The first object in node (itself, or nested in arrays and objects) whose
 * "type" is name, or NULL. */
static const cJSON *find_type(const cJSON *node, const char *name)
{
	if (!node)
		return NULL;
	const char *t = str_item(node, "type");
	if (t && strcmp(t, name) == 0)
		return node;
	const cJSON *c;
	cJSON_ArrayForEach(c, node)
	{
		const cJSON *hit =
		    cJSON_IsObject(c) || cJSON_IsArray(c) ? find_type(c, name) : NULL;
		if (hit)
			return hit;
	}
	return NULL;
}

/* The pre-tokenizer name of a byte-level vocabulary, from its split regex. */
static int set_pre_name(struct hf_vocab *v, char *err, size_t err_len)
{
	const cJSON *pt = item(v->json, "pre_tokenizer");
	const cJSON *split = find_type(pt, "Split");
	const char *re = split ? str_item(item(split, "pattern"), "Regex") : NULL;
	if (!split) {
		const cJSON *use_regex = item(find_type(pt, "ByteLevel"), "use_regex");
		if (cJSON_IsFalse(use_regex))
			return err_set(
			    err, err_len, -ENOTSUP,
			    "%s: a byte-level pre-tokenizer without a split regex is not "
			    "supported",
			    v->path);
		v->pre = "gpt-2"; /* ByteLevel's own regex */
		return 0;
	}
	for (size_t i = 0; re && i < sizeof(pre_names) / sizeof(pre_names[0]); i++)
		if (strcmp(re, pre_names[i].regex) == 0) {
			v->pre = pre_names[i].name;
			return 0;
		}
	return err_set(err, err_len, -ENOTSUP,
	               "%s: pre-tokenizer split regex \"%.80s\" is not one llama.cpp names "
	               "(those of Llama 3, Qwen2/3, gpt-4o/gpt-oss and GPT-2 are known)",
	               v->path, re ? re : "(not a regex)");
}

/* Byte-level BPE or SentencePiece-style BPE; anything else is refused. */
static int detect_family(struct hf_vocab *v, char *err, size_t err_len)
{
	v->model = item(v->json, "model");
	const char *type = str_item(v->model, "type");
	if (!type || strcmp(type, "BPE") != 0)
		return err_set(err, err_len, -ENOTSUP,
		               "%s: model.type \"%s\" is not supported (BPE: byte-level or "
		               "SentencePiece-style)",
		               v->path, type ? type : "(missing)");
	v->merges = item(v->model, "merges");
	if (!cJSON_IsObject(item(v->model, "vocab")) || !cJSON_IsArray(v->merges))
		return err_set(err, err_len, -EINVAL, "%s: model.vocab or model.merges is missing",
		               v->path);
	if (find_type(item(v->json, "pre_tokenizer"), "ByteLevel"))
		return set_pre_name(v, err, err_len);
	if (cJSON_IsTrue(item(v->model, "byte_fallback")) ||
	    find_type(item(v->json, "normalizer"), "Replace") ||
	    find_type(item(v->json, "pre_tokenizer"), "Metaspace")) {
		v->spm = true;
		v->pre = "default";
		return 0;
	}
	return err_set(err, err_len, -ENOTSUP,
	               "%s: neither a byte-level (ByteLevel pre-tokenizer) nor a SentencePiece-"
	               "style (byte_fallback, U+2581 spaces) BPE vocabulary",
	               v->path);
}

/* The id of token `text` (node: its JSON value), a whole number below
 * MAX_TOKENS. */
static int token_id(const cJSON *node, const char *text, const char *path, uint32_t *id, char *err,
                    size_t err_len)
{
	double d = cJSON_IsNumber(node) ? node->valuedouble : -1;
	if (d < 0 || d >= MAX_TOKENS || d != (double)(uint32_t)d) {
		char shown[32];
		if (cJSON_IsNumber(node))
			snprintf(shown, sizeof(shown), "%g", node->valuedouble);
		return err_set(err, err_len, -EINVAL,
		               "%s: token \"%.40s\" has id %s; ids are whole numbers 0..%d", path,
		               text ? text : "(no content)",
		               cJSON_IsNumber(node) ? shown : "(not a number)", MAX_TOKENS - 1);
	}
	*id = (uint32_t)d;
	return 0;
}

/* v->n from the largest id of model.vocab and added_tokens. */
static int count_tokens(struct hf_vocab *v, char *err, size_t err_len)
{
	const cJSON *c;
	uint32_t id, max = 0;
	cJSON_ArrayForEach(c, item(v->model, "vocab"))
	{
		if (token_id(c, c->string, v->path, &id, err, err_len) < 0)
			return -EINVAL;
		max = id > max ? id : max;
	}
	cJSON_ArrayForEach(c, item(v->json, "added_tokens"))
	{
		if (token_id(item(c, "id"), str_item(c, "content"), v->path, &id, err, err_len) < 0)
			return -EINVAL;
		max = id > max ? id : max;
	}
	v->n = max + 1;
	v->text = calloc(v->n, sizeof(*v->text));
	v->type = calloc(v->n, sizeof(*v->type));
	v->score = calloc(v->n, sizeof(*v->score));
	return v->text && v->type && v->score ? 0 : err_set(err, err_len, -ENOMEM, "out of memory");
}

static int set_text(struct hf_vocab *v, uint32_t id, const char *text, size_t len)
{
	free(v->text[id]);
	v->text[id] = strndup(text, len);
	return v->text[id] ? 0 : -ENOMEM;
}

/* SentencePiece's byte pieces <0xNN>. */
static bool is_byte_piece(const char *s)
{
	return strlen(s) == 6 && strncmp(s, "<0x", 3) == 0 && s[5] == '>' &&
	       strchr("0123456789ABCDEF", s[3]) && strchr("0123456789ABCDEF", s[4]);
}

static int load_base_vocab(struct hf_vocab *v)
{
	const cJSON *c;
	const char *unk = str_item(v->model, "unk_token");
	cJSON_ArrayForEach(c, item(v->model, "vocab"))
	{
		uint32_t id = (uint32_t)c->valuedouble;
		if (set_text(v, id, c->string, strlen(c->string)) < 0)
			return -ENOMEM;
		v->type[id] = TT_NORMAL;
		if (v->spm && is_byte_piece(c->string))
			v->type[id] = TT_BYTE;
		else if (v->spm && unk && strcmp(c->string, unk) == 0)
			v->type[id] = TT_UNKNOWN;
	}
	return 0;
}

/* convert_hf_to_gguf.py's does_token_look_special. */
static bool looks_special(const char *t)
{
	size_t n = strlen(t);
	bool ends = n >= 2 && strcmp(t + n - 2, "|>") == 0;
	bool ends_wide = n >= 4 && strcmp(t + n - 4, "\xef\xbd\x9c>") == 0; /* "｜>" */
	return strcmp(t, "<pad>") == 0 || strcmp(t, "<mask>") == 0 || strcmp(t, "<2mass>") == 0 ||
	       strcmp(t, "[@BOS@]") == 0 || (strncmp(t, "<|", 2) == 0 && ends) ||
	       (strncmp(t, "<\xef\xbd\x9c", 4) == 0 && ends_wide) ||
	       (strncmp(t, "<unused", 7) == 0 && n > 7 && t[n - 1] == '>');
}

/* A user-defined token's U+2581 become spaces (the converter pre-normalizes
 * them so llama.cpp matches them in the raw text). */
static int set_added_text(struct hf_vocab *v, uint32_t id, const char *content)
{
	size_t n = strlen(content), k = 0;
	char *s = malloc(n + 1);
	if (!s)
		return -ENOMEM;
	for (size_t i = 0; i < n;) {
		bool mark =
		    v->type[id] == TT_USER_DEFINED && strncmp(content + i, SPACE_MARK, 3) == 0;
		s[k++] = mark ? ' ' : content[i];
		i += mark ? 3 : 1;
	}
	int rc = set_text(v, id, s, k);
	free(s);
	return rc;
}

/* The added tokens: tokenizer_config.json's added_tokens_decoder (what the
 * SentencePiece path reads) or else tokenizer.json's added_tokens. */
static int load_added_tokens(struct hf_vocab *v, char *err, size_t err_len)
{
	const cJSON *dec = item(v->config, "added_tokens_decoder");
	const cJSON *list = cJSON_IsObject(dec) ? dec : item(v->json, "added_tokens");
	const cJSON *c;
	cJSON_ArrayForEach(c, list)
	{
		uint32_t id;
		const char *content = str_item(c, "content");
		int rc = list == dec ? (c->string && *c->string ? 0 : -EINVAL) : 0;
		if (rc == 0 && list == dec) {
			char *end;
			unsigned long u = strtoul(c->string, &end, 10);
			rc = *end || u >= v->n ? -EINVAL : 0;
			id = (uint32_t)u;
		} else if (rc == 0) {
			rc = token_id(item(c, "id"), content, v->path, &id, err, err_len);
		}
		if (rc < 0 || !content)
			return err_set(err, err_len, -EINVAL,
			               "%s: added token \"%s\" has no usable id",
			               list == dec ? "tokenizer_config.json" : v->path,
			               content ? content : "(no content)");
		bool special = cJSON_IsTrue(item(c, "special")) || looks_special(content);
		v->type[id] = special ? TT_CONTROL : TT_USER_DEFINED;
		v->score[id] = -1000.0f;
		if (set_added_text(v, id, content) < 0)
			return err_set(err, err_len, -ENOMEM, "out of memory");
	}
	return 0;
}

static int fill_gaps(struct hf_vocab *v)
{
	for (uint32_t i = 0; i < v->n; i++) {
		if (v->text[i])
			continue;
		char name[32];
		int len = snprintf(name, sizeof(name), "[PAD%u]", i);
		if (set_text(v, i, name, (size_t)len) < 0)
			return -ENOMEM;
		v->type[i] = TT_UNUSED;
		v->score[i] = -10000.0f;
	}
	return 0;
}

static int cmp_text_id(const void *a, const void *b)
{
	return strcmp(((const struct text_id *)a)->text, ((const struct text_id *)b)->text);
}

/* A merge's two halves: "left right" or ["left", "right"]. */
static bool merge_parts(const cJSON *m, char *buf, size_t cap, const char **l, const char **r)
{
	if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
	    cJSON_IsString(cJSON_GetArrayItem(m, 0)) && cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
		*l = cJSON_GetArrayItem(m, 0)->valuestring;
		*r = cJSON_GetArrayItem(m, 1)->valuestring;
		return true;
	}
	const char *sp = cJSON_IsString(m) ? strchr(m->valuestring, ' ') : NULL;
	size_t n = sp ? (size_t)(sp - m->valuestring) : 0;
	if (!sp || n >= cap)
		return false;
	memcpy(buf, m->valuestring, n);
	buf[n] = '\0';
	*l = buf;
	*r = sp + 1;
	return true;
}

/* SentencePiece scores in merge order: -(rank of the first merge that makes
 * the token); tokens no merge makes rank below every merge. */
static int set_scores(struct hf_vocab *v, char *err, size_t err_len)
{
	const cJSON *vocab = item(v->model, "vocab"), *c;
	size_t n = (size_t)cJSON_GetArraySize(vocab), k = 0, rank = 0;
	size_t n_merges = (size_t)cJSON_GetArraySize(v->merges);
	struct text_id *idx = malloc((n ? n : 1) * sizeof(*idx));
	char *buf = malloc(4096), *cat = malloc(8192);
	bool *made = calloc(v->n, 1);
	int rc = idx && buf && cat && made ? 0 : err_set(err, err_len, -ENOMEM, "out of memory");
	cJSON_ArrayForEach(c, vocab) if (rc == 0) idx[k++] =
	    (struct text_id){c->string, (uint32_t)c->valuedouble};
	if (rc == 0)
		qsort(idx, k, sizeof(*idx), cmp_text_id);
	cJSON_ArrayForEach(c, v->merges)
	{
		const char *l, *r;
		if (rc < 0)
			break;
		if (!merge_parts(c, buf, 4096, &l, &r) || strlen(l) + strlen(r) >= 8192) {
			rc = err_set(err, err_len, -EINVAL,
			             "%s: merge %zu is not \"a b\" or [a, b]", v->path, rank);
			break;
		}
		size_t ln = strlen(l);
		memcpy(cat, l, ln);
		strcpy(cat + ln, r);
		struct text_id key = {cat, 0},
		               *hit = bsearch(&key, idx, k, sizeof(*idx), cmp_text_id);
		if (hit && !made[hit->id] && v->type[hit->id] == TT_NORMAL) {
			made[hit->id] = true;
			v->score[hit->id] = rank ? -(float)rank : 0.0f;
		}
		rank++;
	}
	for (uint32_t i = 0; rc == 0 && i < v->n; i++)
		if (v->type[i] == TT_NORMAL && !made[i])
			v->score[i] = -(float)n_merges - 1.0f;
	free(idx);
	free(buf);
	free(cat);
	free(made);
	return rc;
}

/* Copies a merge half to p with each space as U+0120; returns the end. */
static char *put_half(char *p, const char *half)
{
	for (; *half; half++) {
		if (*half == ' ') {
			memcpy(p, "\xc4\xa0", 2);
			p += 2;
		} else {
			*p++ = *half;
		}
	}
	return p;
}

/* The merges as the converter writes them: "left right", a space inside a
 * half written as U+0120. */
static int write_merges(struct gguf_writer *w, const struct hf_vocab *v, char *err, size_t err_len)
{
	size_t n = (size_t)cJSON_GetArraySize(v->merges), k = 0;
	char **out = calloc(n ? n : 1, sizeof(*out));
	char buf[4096];
	int rc = out ? 0 : err_set(err, err_len, -ENOMEM, "out of memory");
	const cJSON *c;
	cJSON_ArrayForEach(c, v->merges)
	{
		const char *l, *r;
		if (rc < 0)
			break;
		if (!merge_parts(c, buf, sizeof(buf), &l, &r)) {
			rc = err_set(err, err_len, -EINVAL,
			             "%s: merge %zu is not \"a b\" or [a, b]", v->path, k);
			break;
		}
		size_t ln = strlen(l), rn = strlen(r);
		char *s = malloc(2 * (ln + rn) + 2), *p = s;
		if (!(out[k++] = s)) {
			rc = err_set(err, err_len, -ENOMEM, "out of memory");
			break;
		}
		p = put_half(p, l);
		*p++ = ' ';
		*put_half(p, r) = '\0';
	}
	if (rc == 0)
		rc = gguf_writer_add_string_array(w, "tokenizer.ggml.merges",
		                                  (const char *const *)out, n);
	for (size_t i = 0; out && i < k; i++)
		free(out[i]);
	free(out);
	return rc;
}

/* The id of an added token by its text, or -1. */
static int64_t added_id(const struct hf_vocab *v, const char *content)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, item(v->json, "added_tokens"))
	{
		const char *t = str_item(c, "content");
		if (t && strcmp(t, content) == 0 && cJSON_IsNumber(item(c, "id")))
			return (int64_t)item(c, "id")->valuedouble;
	}
	return -1;
}

/* tokenizer_config.json's <kind>_token: a string or {"content": ...}. */
static const char *config_token(const struct hf_vocab *v, const char *kind)
{
	char key[32];
	snprintf(key, sizeof(key), "%s_token", kind);
	const cJSON *t = item(v->config, key);
	return cJSON_IsString(t) ? t->valuestring : str_item(t, "content");
}

static int write_special_ids(struct gguf_writer *w, const struct hf_vocab *v)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < sizeof(special_keys) / sizeof(special_keys[0]); i++) {
		const char *t = config_token(v, special_keys[i].kind);
		int64_t id = t ? added_id(v, t) : -1;
		if (id >= 0 && id < v->n)
			rc = gguf_writer_add_u32(w, special_keys[i].key, (uint32_t)id);
	}
	return rc;
}

/* add_bos/add_eos: the post-processor's template (its first or last item a
 * special token), then the config's add_bos_token/add_eos_token. */
static int write_add_flags(struct gguf_writer *w, const struct hf_vocab *v)
{
	int add_bos = -1, add_eos = -1, rc = 0;
	const cJSON *tmpl =
	    item(find_type(item(v->json, "post_processor"), "TemplateProcessing"), "single");
	int n = cJSON_IsArray(tmpl) ? cJSON_GetArraySize(tmpl) : 0;
	if (n > 1) {
		const char *first =
		    str_item(item(cJSON_GetArrayItem(tmpl, 0), "SpecialToken"), "id");
		const char *last =
		    str_item(item(cJSON_GetArrayItem(tmpl, n - 1), "SpecialToken"), "id");
		const char *bos = config_token(v, "bos"), *eos = config_token(v, "eos");
		if (first)
			add_bos = bos && strcmp(first, bos) == 0;
		if (last)
			add_eos = eos && strcmp(last, eos) == 0;
	}
	const cJSON *cb = item(v->config, "add_bos_token"), *ce = item(v->config, "add_eos_token");
	if (cJSON_IsBool(cb))
		add_bos = cJSON_IsTrue(cb);
	if (cJSON_IsBool(ce))
		add_eos = cJSON_IsTrue(ce);
	if (add_bos >= 0)
		rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
	if (rc == 0 && add_eos >= 0)
		rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", add_eos);
	return rc;
}

/* A string, or a list of {name, template} ("default" is the plain key). */
static int write_chat_template(struct gguf_writer *w, const struct hf_vocab *v)
{
	const cJSON *t = item(v->config, "chat_template"), *c;
	if (v->chat_template)
		return gguf_writer_add_string(w, "tokenizer.chat_template", v->chat_template);
	if (cJSON_IsString(t))
		return gguf_writer_add_string(w, "tokenizer.chat_template", t->valuestring);
	const cJSON *list = cJSON_IsArray(t) ? t : NULL;
	int rc = 0;
	cJSON_ArrayForEach(c, list)
	{
		const char *name = str_item(c, "name"), *body = str_item(c, "template");
		char key[160];
		if (!name || !body || rc < 0)
			continue;
		if (strcmp(name, "default") == 0)
			snprintf(key, sizeof(key), "tokenizer.chat_template");
		else
			snprintf(key, sizeof(key), "tokenizer.chat_template.%.120s", name);
		rc = gguf_writer_add_string(w, key, body);
	}
	return rc;
}

/* SentencePiece: a space prefix only when the normalizer prepends U+2581
 * or a Metaspace pre-tokenizer does (Gemma's tokenizer.json does neither). */
static bool spm_space_prefix(const struct hf_vocab *v)
{
	const cJSON *meta = find_type(item(v->json, "pre_tokenizer"), "Metaspace");
	const char *scheme = str_item(meta, "prepend_scheme");
	return find_type(item(v->json, "normalizer"), "Prepend") ||
	       (meta && !cJSON_IsFalse(item(meta, "add_prefix_space")) &&
	        !(scheme && strcmp(scheme, "never") == 0));
}

static int write_keys(struct gguf_writer *w, struct hf_vocab *v, char *err, size_t err_len)
{
	int rc = gguf_writer_add_string(w, "tokenizer.ggml.model", v->spm ? "llama" : "gpt2");
	rc = rc ? rc : gguf_writer_add_string(w, "tokenizer.ggml.pre", v->pre);
	rc = rc ? rc
	        : gguf_writer_add_string_array(w, "tokenizer.ggml.tokens",
	                                       (const char *const *)v->text, v->n);
	if (rc == 0 && v->spm)
		rc = gguf_writer_add_array(w, "tokenizer.ggml.scores", GGUF_VALUE_FLOAT32, v->n,
		                           v->score);
	rc = rc ? rc
	        : gguf_writer_add_array(w, "tokenizer.ggml.token_type", GGUF_VALUE_INT32, v->n,
	                                v->type);
	if (rc == 0 && !v->spm)
		rc = write_merges(w, v, err, err_len);
	rc = rc ? rc : write_special_ids(w, v);
	rc = rc ? rc : write_add_flags(w, v);
	rc = rc ? rc : write_chat_template(w, v);
	if (rc == 0 && v->spm)
		rc =
		    gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", spm_space_prefix(v));
	if (rc < 0 && (!err || !*err))
		err_set(err, err_len, rc, "%s: cannot add the tokenizer keys", v->path);
	return rc;
}

static int load_config(struct hf_vocab *v, char *err, size_t err_len)
{
	const char *slash = strrchr(v->path, '/');
	size_t dir = slash ? (size_t)(slash - v->path) + 1 : 0;
	char *cfg = malloc(dir + sizeof("tokenizer_config.json"));
	if (!cfg)
		return err_set(err, err_len, -ENOMEM, "out of memory");
	memcpy(cfg, v->path, dir);
	strcpy(cfg + dir, "tokenizer_config.json");
	int rc = read_json(cfg, true, &v->config, err, err_len);
	free(cfg);
	return rc;
}

int vocab_json_write(struct gguf_writer *w, const char *path, const char *chat_template,
                     int *n_vocab, char *err, size_t err_len)
{
	struct hf_vocab v = {.path = path, .chat_template = chat_template};
	if (err && err_len)
		err[0] = '\0';
	int rc = read_json(path, false, &v.json, err, err_len);
	rc = rc ? rc : load_config(&v, err, err_len);
	rc = rc ? rc : detect_family(&v, err, err_len);
	rc = rc ? rc : count_tokens(&v, err, err_len);
	if (rc == 0 && load_base_vocab(&v) < 0)
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
	rc = rc ? rc : load_added_tokens(&v, err, err_len);
	if (rc == 0 && v.spm)
		rc = set_scores(&v, err, err_len);
	if (rc == 0 && fill_gaps(&v) < 0)
		rc = err_set(err, err_len, -ENOMEM, "out of memory");
	rc = rc ? rc : write_keys(w, &v, err, err_len);
	if (rc == 0)
		*n_vocab = (int)v.n;
	for (uint32_t i = 0; v.text && i < v.n; i++)
		free(v.text[i]);
	free(v.text);
	free(v.type);
	free(v.score);
	cJSON_Delete(v.json);
	cJSON_Delete(v.config);
	return rc;
}
