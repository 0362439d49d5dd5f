/* Pre-tokenizers for byte-level BPE: a table from the tokenizer.ggml.pre name
 * to the regular expressions the original (Hugging Face) tokenizer splits
 * with, and the split itself.  The expressions are the ones llama.cpp uses
 * (case-insensitive groups spelled out as [sS]); they run on our own matcher
 * (regex.c) with real Unicode categories.  This does not byte-map or merge:
 * see tokenizer_bpe.c. */
#include "tokenizer/pretokenize.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/unicode.h"
#include "util/errbuf.h"
#include "util/utf8.h"

#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define LLAMA3_RE                                                                                  \
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
	"\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_RE                                                                                   \
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
	"\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PORO_RE " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+"

static const char *const re_default[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_RE, "\\p{N}+",
                                         "[0-9][0-9][0-9]", NULL};
static const char *const re_gpt2[] = {GPT2_RE, NULL};
static const char *const re_llama3[] = {LLAMA3_RE, NULL};
static const char *const re_qwen2[] = {QWEN2_RE, NULL};
static const char *const re_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_RE, "[0-9][0-9][0-9]",
                                        NULL};
static const char *const re_starcoder[] = {"\\p{N}", GPT2_RE, NULL};
static const char *const re_deepseek_coder[] = {
    "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
    "\\p{N}", NULL};
static const char *const re_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293"
    "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A"
    "\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-"
    "\u13F5"
    "\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-"
    "\u1F15\u1F18-\u1F1D"
    "\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4"
    "\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-"
    "\u1FF4"
    "\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126"
    "\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183"
    "\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B"
    "\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-"
    "\uFF3A\uFF41-\uFF5A"
    "\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-"
    "\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+",
    "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
    "\\s+$",
    "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
    "\\p{N}+",
    NULL};
static const char *const re_deepseek3[] = {
    "\\p{N}{1,3}", "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_poro[] = {PORO_RE, NULL};
static const char *const re_viking[] = {PORO_RE, "\\p{N}", NULL};
#define CASED_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define CASED_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define CONTRACTION "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
static const char *const re_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" CASED_UPPER "*" CASED_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" CASED_UPPER
    "+" CASED_LOWER "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" CASED_UPPER "*" CASED_LOWER "+" CONTRACTION
    "?|[^\\r\\n\\p{L}\\p{N}]?" CASED_UPPER "+" CASED_LOWER "*" CONTRACTION
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_seed_coder[] = {
    CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+",
    NULL};
/* The original has possessive quantifiers; greedy ones as in llama.cpp. */
static const char *const re_bailingmoe[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const re_chameleon[] = {"<sentinel:[0-9]+>",
                                           "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                                           "([\\t\\n]|    |  )",
                                           "\\p{N}",
                                           "[\\p{P}!-/:-@\\[-`{-~]",
                                           GPT2_RE,
                                           NULL};

struct pretok_def {
	const char *name;
	const char *const *regexes;
	bool ignore_merges; /* a word that is a token is not merged */
	bool add_bos;       /* BOS by default when the file does not say */
	bool no_bos;        /* the model has no BOS whatever the file says */
	bool nfc;           /* Hugging Face's tokenizer.json normalizes to NFC first */
};

/* First entry: the fallback for a missing or unknown name.  Not supported
 * (they need lookaround or custom splitters): superbpe, kimi-k2, afmoe. */
static const struct pretok_def pretok_defs[] = {
    {"default", re_default},
    {"gpt-2", re_gpt2},
    {"phi-2", re_gpt2},
    {"mpt", re_gpt2},
    {"olmo", re_gpt2},
    {"jais", re_gpt2},
    {"jina-es", re_gpt2},
    {"jina-de", re_gpt2},
    {"jina-v1-en", re_gpt2},
    {"jina-v2-es", re_gpt2},
    {"jina-v2-de", re_gpt2},
    {"jina-v2-code", re_gpt2},
    {"roberta-bpe", re_gpt2},
    {"gigachat", re_gpt2},
    {"trillion", re_gpt2},
    {"a.x-4.0", re_gpt2},
    {"mellum", re_gpt2},
    {"exaone4", re_gpt2},
    {"llama3", re_llama3, .ignore_merges = true, .add_bos = true},
    {"llama-v3", re_llama3, .ignore_merges = true, .add_bos = true},
    {"llama-bpe", re_llama3, .ignore_merges = true, .add_bos = true},
    {"falcon3", re_llama3, .ignore_merges = true, .add_bos = true},
    {"falcon-h1", re_llama3, .ignore_merges = true, .add_bos = true},
    {"pixtral", re_llama3, .ignore_merges = true, .add_bos = true},
    {"midm-2.0", re_llama3, .ignore_merges = true, .add_bos = true},
    {"lfm2", re_llama3, .ignore_merges = true, .add_bos = true},
    {"dbrx", re_llama3},
    {"smaug-bpe", re_llama3},
    {"chatglm-bpe", re_llama3, .no_bos = true},
    {"glm4", re_llama3, .no_bos = true},
    {"qwen2", re_qwen2, .nfc = true},
    {"deepseek-r1-qwen", re_qwen2, .nfc = true},
    {"stablelm2", re_qwen2},
    {"hunyuan", re_qwen2},
    {"megrez", re_qwen2},
    {"grok-2", re_qwen2},
    {"falcon", re_falcon},
    {"starcoder", re_starcoder},
    {"refact", re_starcoder},
    {"command-r", re_starcoder},
    {"smollm", re_starcoder},
    {"codeshell", re_starcoder},
    {"exaone", re_starcoder},
    {"minerva-7b", re_starcoder},
    {"deepseek-coder", re_deepseek_coder},
    {"deepseek-llm", re_deepseek_llm},
    {"deepseek-v3", re_deepseek3},
    {"hunyuan-dense", re_deepseek3},
    {"poro-chat", re_poro},
    {"bloom", re_poro},
    {"gpt3-finnish", re_poro},
    {"viking", re_viking},
    {"tekken", re_tekken, .ignore_merges = true, .add_bos = true},
    {"gpt-4o", re_gpt4o},
    {"llama4", re_gpt4o},
    {"seed-coder", re_seed_coder},
    {"bailingmoe", re_bailingmoe},
    {"llada-moe", re_bailingmoe},
    {"chameleon", re_chameleon, .add_bos = true},
};

struct pretok {
	const struct pretok_def *def;
	struct ure *re[8];
	size_t n_re;
};

int pretok_new(const char *name, struct pretok **out, struct pretok_flags *flags, char *err,
               size_t err_len)
{
	const struct pretok_def *def = &pretok_defs[0];
	memset(flags, 0, sizeof(*flags));
	for (size_t i = 0; name && i < sizeof(pretok_defs) / sizeof(pretok_defs[0]); i++) {
		if (strcmp(name, pretok_defs[i].name) == 0) {
			def = &pretok_defs[i];
			flags->known = true;
			break;
		}
	}
	struct pretok *p = calloc(1, sizeof(*p));
	if (!p)
		return err_set(err, err_len, -ENOMEM, "pre-tokenizer: out of memory");
	p->def = def;
	for (const char *const *r = def->regexes; *r; r++) {
		int rc = ure_compile(*r, &p->re[p->n_re], err, err_len);
		if (rc < 0) {
			pretok_free(p);
			return rc;
		}
		p->n_re++;
	}
	flags->ignore_merges = def->ignore_merges;
	flags->add_bos = def->add_bos;
	flags->no_bos = def->no_bos;
	flags->nfc = def->nfc;
	*out = p;
	return 0;
}

void pretok_free(struct pretok *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_re; i++)
		ure_free(p->re[i]);
	free(p);
}

const char *pretok_name(const struct pretok *p)
{
	return p->def->name;
}

void pretok_buf_free(struct pretok_buf *buf)
{
	free(buf->cp);
	free(buf->cls);
	free(buf->byte_off);
	free(buf->ends);
	free(buf->ends_next);
	ure_scratch_free(&buf->scratch);
	memset(buf, 0, sizeof(*buf));
}

static int reserve_u32(uint32_t **arr, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	uint32_t *p = realloc(*arr, need * 2 * sizeof(*p));
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = need * 2;
	return 0;
}

/* Decodes the text into code points with their classes. */
static int prepare(struct pretok_buf *b, const char *text, size_t len, size_t *n_cp)
{
	if (len + 1 > b->cap_cp) {
		size_t cap = (len + 1) * 2;
		uint32_t *cp = realloc(b->cp, cap * sizeof(*cp));
		if (cp)
			b->cp = cp;
		uint8_t *cls = realloc(b->cls, cap);
		if (cls)
			b->cls = cls;
		uint32_t *off = realloc(b->byte_off, cap * sizeof(*off));
		if (off)
			b->byte_off = off;
		if (!cp || !cls || !off)
			return -ENOMEM;
		b->cap_cp = cap;
	}
	size_t k = 0;
	for (size_t i = 0; i < len; k++) {
		size_t step;
		uint32_t c = utf8_decode((const unsigned char *)text + i, len - i, &step);
		b->cp[k] = c;
		b->cls[k] = (uint8_t)(unicode_category(c) | (unicode_is_whitespace(c) ? 0x80 : 0));
		b->byte_off[k] = (uint32_t)i;
		i += step;
	}
	b->byte_off[k] = (uint32_t)len;
	*n_cp = k;
	return 0;
}

static int push_end(struct pretok_buf *b, size_t *n, uint32_t end)
{
	if (reserve_u32(&b->ends_next, &b->cap_ends_next, *n + 1))
		return -ENOMEM;
	b->ends_next[(*n)++] = end;
	return 0;
}

/* One regex over every current piece: matches and gaps become pieces. */
static int split_once(const struct ure *re, struct pretok_buf *b, const struct ure_text *t)
{
	size_t n_next = 0, start = 0;
	for (size_t k = 0; k < b->n_ends; k++) {
		size_t end = b->ends[k], pos = start, gap = start;
		while (pos < end) {
			long m = ure_match_at(re, &b->scratch, t, pos, end);
			if (m == -ENOMEM)
				return -ENOMEM;
			if (m <= (long)pos) {
				pos++;
				continue;
			}
			if (gap < pos && push_end(b, &n_next, (uint32_t)pos))
				return -ENOMEM;
			if (push_end(b, &n_next, (uint32_t)m))
				return -ENOMEM;
			pos = gap = (size_t)m;
		}
		if (gap < end && push_end(b, &n_next, (uint32_t)end))
			return -ENOMEM;
		start = end;
	}
	uint32_t *tmp = b->ends;
	size_t tcap = b->cap_ends;
	b->ends = b->ends_next;
	b->cap_ends = b->cap_ends_next;
	b->ends_next = tmp;
	b->cap_ends_next = tcap;
	b->n_ends = n_next;
	return 0;
}

int pretok_split(const struct pretok *p, const char *text, size_t len, struct pretok_buf *buf)
{
	size_t n_cp;
	if (len >= UINT32_MAX / 2 || prepare(buf, text, len, &n_cp) < 0)
		return -ENOMEM;
	buf->n_ends = 0;
	if (n_cp == 0)
		return 0;
	if (reserve_u32(&buf->ends, &buf->cap_ends, 1))
		return -ENOMEM;
	buf->ends[0] = (uint32_t)n_cp;
	buf->n_ends = 1;
	struct ure_text t = {buf->cp, buf->cls, n_cp};
	for (size_t i = 0; i < p->n_re; i++) {
		int rc = split_once(p->re[i], buf, &t);
		if (rc < 0)
			return rc;
	}
	return 0;
}
