/* Property test of constrained decoding: seeded random schemas of the
 * supported subset (nested objects, arrays, enums, anyOf, $ref with
 * recursion, strings with patterns, lengths and formats, integers, numbers,
 * booleans, null), many masked decodes with random logits on the real
 * stories260K and 32k llama vocabularies.  Every decode that finishes must
 * parse with cJSON and pass the small validator below, which is written
 * from the JSON Schema rules and shares nothing with the compiler (patterns
 * go through libc's POSIX regex).  Decodes that run out of tokens must
 * still be accepted byte by byte by a fresh matcher.  Masks are also
 * checked against every token now and then. */
#include <check.h>
#include <locale.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "testutil.h"

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int rnd(uint64_t *s, int n)
{
	return (int)(rng_next(s) % (uint64_t)n);
}

static double rnd01(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

/* ==== random schemas ==== */

static const char *const names[] = {"id",   "name", "tags", "kind", "value", "items",
                                    "meta", "x",    "when", "ok",   "note",  "a b"};
static const char *const patterns[] = {
    "^[a-z]{1,5}$",     "^[A-Z][a-z]*$", "^(ab|cd)+$", "^[0-9]{3}-[0-9]{4}$",
    "^(yes|no|maybe)$", "^[a-f0-9]+$",   "^x?y+z*$"};
static const char *const formats[] = {"date", "time", "date-time", "uuid", "email"};

static cJSON *gen(uint64_t *r, int depth, int n_defs);

static cJSON *gen_enum(uint64_t *r)
{
	cJSON *e = cJSON_CreateArray();
	int n = 1 + rnd(r, 4);
	for (int i = 0; i < n; i++) {
		switch (rnd(r, 5)) {
		case 0:
			cJSON_AddItemToArray(e, cJSON_CreateNumber(rnd(r, 200) - 50));
			break;
		case 1:
			cJSON_AddItemToArray(e, cJSON_CreateNull());
			break;
		case 2:
			cJSON_AddItemToArray(
			    e, cJSON_CreateString(i % 2 ? "tab\there \"q\"" : "\xc3\xa9t\xc3\xa9"));
			break;
		default: {
			char buf[16];
			snprintf(buf, sizeof(buf), "v%d", rnd(r, 100));
			cJSON_AddItemToArray(e, cJSON_CreateString(buf));
		}
		}
	}
	return e;
}

static cJSON *gen_string(uint64_t *r)
{
	cJSON *s = cJSON_CreateObject();
	cJSON_AddStringToObject(s, "type", "string");
	switch (rnd(r, 5)) {
	case 0: {
		int lo = rnd(r, 3);
		cJSON_AddNumberToObject(s, "minLength", lo);
		cJSON_AddNumberToObject(s, "maxLength", lo + rnd(r, 6));
		break;
	}
	case 1:
		cJSON_AddStringToObject(s, "pattern", patterns[rnd(r, 7)]);
		break;
	case 2:
		cJSON_AddStringToObject(s, "format", formats[rnd(r, 5)]);
		break;
	default:
		break;
	}
	return s;
}

static cJSON *gen_object(uint64_t *r, int depth, int n_defs)
{
	cJSON *o = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
	cJSON_AddStringToObject(o, "type", "object");
	int n = 1 + rnd(r, 4), start = rnd(r, 12);
	for (int i = 0; i < n; i++) {
		const char *name = names[(start + i) % 12];
		cJSON_AddItemToObject(props, name, gen(r, depth + 1, n_defs));
		if (rnd(r, 2))
			cJSON_AddItemToArray(req, cJSON_CreateString(name));
	}
	cJSON_AddItemToObject(o, "properties", props);
	cJSON_AddItemToObject(o, "required", req);
	if (rnd(r, 2))
		cJSON_AddBoolToObject(o, "additionalProperties", false);
	return o;
}

static cJSON *gen_array(uint64_t *r, int depth, int n_defs)
{
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "type", "array");
	int lo = rnd(r, 3);
	if (rnd(r, 4) == 0) {
		cJSON *pre = cJSON_CreateArray();
		int k = 1 + rnd(r, 2);
		for (int i = 0; i < k; i++)
			cJSON_AddItemToArray(pre, gen(r, depth + 1, n_defs));
		cJSON_AddItemToObject(a, "prefixItems", pre);
		if (rnd(r, 2)) {
			cJSON_AddBoolToObject(a, "items", false);
			lo = lo > k ? k : lo; /* room for minItems */
		}
	} else {
		cJSON_AddItemToObject(a, "items", gen(r, depth + 1, n_defs));
	}
	if (rnd(r, 2))
		cJSON_AddNumberToObject(a, "minItems", lo);
	if (rnd(r, 2))
		cJSON_AddNumberToObject(a, "maxItems", lo + rnd(r, 3));
	return a;
}

static cJSON *gen_leaf(uint64_t *r)
{
	cJSON *s = cJSON_CreateObject();
	switch (rnd(r, 9)) {
	case 0:
		cJSON_AddStringToObject(s, "type", "integer");
		break;
	case 1:
		cJSON_AddStringToObject(s, "type", "number");
		break;
	case 2:
		cJSON_AddStringToObject(s, "type", "boolean");
		break;
	case 3:
		cJSON_AddStringToObject(s, "type", "null");
		break;
	case 4:
		cJSON_AddItemToObject(s, "enum", gen_enum(r));
		break;
	case 5:
		cJSON_AddStringToObject(s, "const", "fixed");
		break;
	case 6: {
		cJSON *t = cJSON_CreateArray();
		cJSON_AddItemToArray(t, cJSON_CreateString("string"));
		cJSON_AddItemToArray(t, cJSON_CreateString("null"));
		cJSON_AddItemToObject(s, "type", t);
		break;
	}
	default:
		cJSON_Delete(s);
		return gen_string(r);
	}
	return s;
}

static cJSON *gen(uint64_t *r, int depth, int n_defs)
{
	int k = depth >= 3 ? 0 : rnd(r, 10);
	if (k <= 4)
		return gen_leaf(r);
	if (k == 5)
		return gen_object(r, depth, n_defs);
	if (k == 6)
		return gen_array(r, depth, n_defs);
	if (k == 7) {
		cJSON *s = cJSON_CreateObject(), *b = cJSON_CreateArray();
		int n = 2 + rnd(r, 2);
		for (int i = 0; i < n; i++)
			cJSON_AddItemToArray(b, gen(r, depth + 1, n_defs));
		cJSON_AddItemToObject(s, rnd(r, 2) ? "anyOf" : "oneOf", b);
		return s;
	}
	if (k == 8 && n_defs) {
		char ref[64];
		int d = rnd(r, n_defs + 1);
		if (d == n_defs)
			snprintf(ref, sizeof(ref), "#/$defs/tree");
		else
			snprintf(ref, sizeof(ref), "#/$defs/d%d", d);
		cJSON *s = cJSON_CreateObject();
		cJSON_AddStringToObject(s, "$ref", ref);
		return s;
	}
	return gen_leaf(r);
}

static cJSON *gen_root(uint64_t *r)
{
	int n_defs = 1 + rnd(r, 2);
	cJSON *root = rnd(r, 4) ? gen_object(r, 0, n_defs) : gen(r, 0, n_defs);
	cJSON *defs = cJSON_CreateObject();
	for (int i = 0; i < n_defs; i++) {
		char name[8];
		snprintf(name, sizeof(name), "d%d", i);
		cJSON_AddItemToObject(defs, name, gen(r, 2, 0));
	}
	cJSON *tree = cJSON_Parse(
	    "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":"
	    "\"array\",\"items\":{\"$ref\":\"#/$defs/"
	    "tree\"},\"maxItems\":2}},\"required\":[\"v\"]}");
	cJSON_AddItemToObject(defs, "tree", tree);
	cJSON_AddItemToObject(root, "$defs", defs);
	return root;
}

/* ==== an independent validator of the subset ==== */

static bool rx_match(const char *re, const char *s)
{
	regex_t rx;
	ck_assert_msg(regcomp(&rx, re, REG_EXTENDED | REG_NOSUB) == 0, "bad test regex %s", re);
	bool ok = regexec(&rx, s, 0, NULL, 0) == 0;
	regfree(&rx);
	return ok;
}

static bool valid_date(const char *s)
{
	if (!rx_match("^[0-9]{4}-[0-9]{2}-[0-9]{2}$", s))
		return false;
	int m = atoi(s + 5), d = atoi(s + 8);
	static const int days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	return m >= 1 && m <= 12 && d >= 1 && d <= days[m - 1];
}

static bool valid_time(const char *s, bool need_offset)
{
	const char *re = need_offset ? "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-"
	                               "]([01][0-9]|2[0-3]):[0-5][0-9])$"
	                             : "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-"
	                               "]([01][0-9]|2[0-3]):[0-5][0-9])?$";
	return rx_match(re, s);
}

static bool valid_email(const char *s)
{
	const char *at = strchr(s, '@');
	if (!at || at == s || strchr(at + 1, '@') || !strchr(at + 1, '.'))
		return false;
	if (s[0] == '.' || at[-1] == '.' || strstr(s, ".."))
		return false;
	const char *dom = at + 1;
	return dom[0] != '.' && dom[0] != '-' && dom[strlen(dom) - 1] != '.' &&
	       rx_match("^[A-Za-z0-9.-]+$", dom);
}

static bool valid_format(const char *f, const char *s)
{
	if (!strcmp(f, "date"))
		return valid_date(s);
	if (!strcmp(f, "time"))
		return valid_time(s, false);
	if (!strcmp(f, "date-time")) {
		const char *t = strchr(s, 'T');
		if (!t || t - s != 10)
			return false;
		char d[11];
		memcpy(d, s, 10);
		d[10] = 0;
		return valid_date(d) && valid_time(t + 1, true);
	}
	if (!strcmp(f, "uuid"))
		return rx_match("^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$", s);
	if (!strcmp(f, "email"))
		return valid_email(s);
	return false;
}

static size_t utf8_chars(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += ((unsigned char)*s & 0xC0) != 0x80;
	return n;
}

static bool has_type(const cJSON *v, const char *t)
{
	if (!strcmp(t, "string"))
		return cJSON_IsString(v);
	if (!strcmp(t, "integer"))
		return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
	if (!strcmp(t, "number"))
		return cJSON_IsNumber(v);
	if (!strcmp(t, "boolean"))
		return cJSON_IsBool(v);
	if (!strcmp(t, "null"))
		return cJSON_IsNull(v);
	if (!strcmp(t, "object"))
		return cJSON_IsObject(v);
	if (!strcmp(t, "array"))
		return cJSON_IsArray(v);
	return false;
}

static bool validate(const cJSON *root, const cJSON *s, const cJSON *v);

static bool validate_object(const cJSON *root, const cJSON *s, const cJSON *v)
{
	const cJSON *props = cJSON_GetObjectItem(s, "properties");
	const cJSON *add = cJSON_GetObjectItem(s, "additionalProperties");
	for (const cJSON *r = cJSON_GetObjectItem(s, "required")
	                          ? cJSON_GetObjectItem(s, "required")->child
	                          : NULL;
	     r; r = r->next)
		if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring))
			return false;
	for (const cJSON *m = v->child; m; m = m->next) {
		for (const cJSON *o = v->child; o != m; o = o->next)
			if (!strcmp(o->string, m->string))
				return false; /* a property twice */
		const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, m->string) : NULL;
		if (ps ? !validate(root, ps, m)
		       : (cJSON_IsFalse(add) || (cJSON_IsObject(add) && !validate(root, add, m))))
			return false;
	}
	return true;
}

static bool validate_array(const cJSON *root, const cJSON *s, const cJSON *v)
{
	const cJSON *items = cJSON_GetObjectItem(s, "items"),
	            *pre = cJSON_GetObjectItem(s, "prefixItems");
	const cJSON *mn = cJSON_GetObjectItem(s, "minItems"),
	            *mx = cJSON_GetObjectItem(s, "maxItems");
	int n = cJSON_GetArraySize(v), k = pre ? cJSON_GetArraySize(pre) : 0, i = 0;
	if ((mn && n < mn->valueint) || (mx && n > mx->valueint))
		return false;
	for (const cJSON *e = v->child; e; e = e->next, i++) {
		const cJSON *es = i < k ? cJSON_GetArrayItem(pre, i) : items;
		if (cJSON_IsFalse(es) || (es && cJSON_IsObject(es) && !validate(root, es, e)))
			return false;
	}
	return true;
}

static bool validate_string(const cJSON *s, const cJSON *v)
{
	const cJSON *mn = cJSON_GetObjectItem(s, "minLength"),
	            *mx = cJSON_GetObjectItem(s, "maxLength");
	const cJSON *pat = cJSON_GetObjectItem(s, "pattern"),
	            *fmt = cJSON_GetObjectItem(s, "format");
	size_t n = utf8_chars(v->valuestring);
	if ((mn && n < (size_t)mn->valueint) || (mx && n > (size_t)mx->valueint))
		return false;
	if (pat && !rx_match(pat->valuestring, v->valuestring))
		return false;
	return !fmt || valid_format(fmt->valuestring, v->valuestring);
}

static bool validate(const cJSON *root, const cJSON *s, const cJSON *v)
{
	if (cJSON_IsTrue(s))
		return true;
	const cJSON *k;
	if ((k = cJSON_GetObjectItem(s, "$ref"))) {
		const char *name = strrchr(k->valuestring, '/');
		const cJSON *target =
		    !strcmp(k->valuestring, "#")
		        ? root
		        : cJSON_GetObjectItem(cJSON_GetObjectItem(root, "$defs"), name + 1);
		ck_assert_ptr_nonnull(target);
		return validate(root, target, v);
	}
	if ((k = cJSON_GetObjectItem(s, "anyOf")) || (k = cJSON_GetObjectItem(s, "oneOf"))) {
		for (const cJSON *b = k->child; b; b = b->next)
			if (validate(root, b, v))
				return true;
		return false;
	}
	if ((k = cJSON_GetObjectItem(s, "enum"))) {
		for (const cJSON *e = k->child; e; e = e->next)
			if (cJSON_Compare(e, v, true))
				return true;
		return false;
	}
	if ((k = cJSON_GetObjectItem(s, "const")))
		return cJSON_Compare(k, v, true);
	if ((k = cJSON_GetObjectItem(s, "type"))) {
		bool ok = false;
		if (cJSON_IsString(k))
			ok = has_type(v, k->valuestring);
		for (const cJSON *t = cJSON_IsArray(k) ? k->child : NULL; t; t = t->next)
			ok |= has_type(v, t->valuestring);
		if (!ok)
			return false;
	}
	if (cJSON_IsObject(v))
		return validate_object(root, s, v);
	if (cJSON_IsArray(v))
		return validate_array(root, s, v);
	if (cJSON_IsString(v))
		return validate_string(s, v);
	return true;
}

/* the validator itself, on known answers */
START_TEST(test_validator)
{
	cJSON *s =
	    cJSON_Parse("{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\","
	                "\"format\":\"date\"},\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"],"
	                "\"additionalProperties\":false}");
	const char *good[] = {"{\"n\":1}", "{\"n\":-3,\"d\":\"2024-02-29\"}"};
	const char *bad[] = {"{}",
	                     "{\"n\":1.5}",
	                     "{\"n\":1,\"d\":\"2024-02-30\"}",
	                     "{\"n\":1,\"z\":0}",
	                     "{\"n\":1,\"n\":2}",
	                     "[]"};
	for (size_t i = 0; i < 2; i++) {
		cJSON *v = cJSON_Parse(good[i]);
		ck_assert_msg(validate(s, s, v), "%s", good[i]);
		cJSON_Delete(v);
	}
	for (size_t i = 0; i < 6; i++) {
		cJSON *v = cJSON_Parse(bad[i]);
		ck_assert_msg(!validate(s, s, v), "%s", bad[i]);
		cJSON_Delete(v);
	}
	cJSON_Delete(s);
}
END_TEST

/* ==== decoding ==== */

struct vocab {
	struct tokenizer *tok;
	struct vocab_trie *trie;
	int n;
	float *close_bonus; /* (n) how much a token ends structures: quotes and brackets */
};

static void vocab_load(struct vocab *v, const char *rel)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f = NULL;
	ck_assert_msg(gguf_open(tu_shared_path(rel), &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(tokenizer_new_from_gguf(f, &v->tok, err, sizeof(err)) == 0, "%s", err);
	gguf_close(f);
	ck_assert_msg(vocab_trie_new(v->tok, &v->trie, err, sizeof(err)) == 0, "%s", err);
	v->n = tokenizer_n_vocab(v->tok);
	v->close_bonus = calloc((size_t)v->n, sizeof(float));
	for (int32_t id = 0; id < v->n; id++) {
		char piece[256];
		size_t len = tokenizer_token_piece(v->tok, id, piece, sizeof(piece));
		for (size_t i = 0; i < len && i < sizeof(piece) - 1; i++)
			if (strchr("\"]},", piece[i]))
				v->close_bonus[id] += 1;
		if (tokenizer_is_eog(v->tok, id))
			v->close_bonus[id] = 3;
	}
}

static void vocab_free(struct vocab *v)
{
	vocab_trie_free(v->trie);
	tokenizer_free(v->tok);
	free(v->close_bonus);
}

struct tally {
	int decodes, finished, budget, schemas;
};

/* One masked decode: sample from the softmax of random logits over the
 * allowed tokens, pulled towards tokens that close things as it goes. */
static void decode_one(struct vocab *v, struct grammar *g, const cJSON *schema, uint64_t *r,
                       int budget, int brute_every, struct tally *t)
{
	struct grammar_matcher *m = NULL, *tmp = NULL, *fresh = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, v->trie, &m), 0);
	ck_assert_int_eq(grammar_matcher_new(g, v->trie, &tmp), 0);
	uint32_t *mask = malloc(((size_t)v->n + 31) / 32 * 4);
	int32_t *ids = malloc((size_t)v->n * sizeof(*ids));
	double *w = malloc((size_t)v->n * sizeof(*w));
	char *text = malloc(65536);
	size_t len = 0;
	bool finished = false;
	for (int step = 0; step < budget && !finished; step++) {
		ck_assert_int_eq(grammar_matcher_fill_mask(m, mask), 0);
		int k = 0;
		for (int32_t id = 0; id < v->n; id++)
			if (mask[id / 32] >> (id % 32) & 1)
				ids[k++] = id;
		ck_assert_msg(k > 0, "empty mask after %.*s", (int)len, text);
		if (brute_every && step % brute_every == 0)
			for (int32_t id = 0, j = 0; id < v->n; id++) {
				/* plain ifs: every ck_assert writes a checkpoint to a pipe */
				if (grammar_matcher_copy_state(tmp, m))
					ck_abort_msg("copy_state failed");
				bool ok = grammar_matcher_accept_token(tmp, id) == 0;
				bool bit = j < k && ids[j] == id;
				j += bit;
				if (ok != bit)
					ck_abort_msg("token %d: mask %d accept %d after %.*s", id,
					             bit, ok, (int)len, text);
			}
		double pull = 0.5 + step * 0.08, max = -1e9, sum = 0;
		for (int j = 0; j < k; j++) {
			w[j] = 3.0 * rnd01(r) + pull * v->close_bonus[ids[j]];
			max = w[j] > max ? w[j] : max;
		}
		for (int j = 0; j < k; j++)
			sum += (w[j] = exp(w[j] - max));
		double u = rnd01(r) * sum;
		int pick = 0;
		while (pick < k - 1 && (u -= w[pick]) > 0)
			pick++;
		int32_t id = ids[pick];
		if (tokenizer_is_eog(v->tok, id)) {
			ck_assert(grammar_matcher_can_end(m));
			finished = true;
			break;
		}
		ck_assert_int_eq(grammar_matcher_accept_token(m, id), 0);
		char piece[512];
		size_t pl = tokenizer_token_piece(v->tok, id, piece, sizeof(piece));
		ck_assert_uint_lt(len + pl, 65536);
		memcpy(text + len, piece, pl);
		len += pl;
		finished = grammar_matcher_done(m);
	}
	text[len] = '\0';
	t->decodes++;
	if (finished) {
		t->finished++;
		const char *end = NULL;
		cJSON *val = cJSON_ParseWithLengthOpts(text, len, &end, false);
		char *st = cJSON_PrintUnformatted(schema);
		ck_assert_msg(val && end == text + len, "does not parse: %s\nschema %s", text, st);
		ck_assert_msg(validate(schema, schema, val), "not valid: %s\nschema %s", text, st);
		cJSON_free(st);
		cJSON_Delete(val);
	} else {
		t->budget++;
		/* the same bytes, fed as bytes to a fresh matcher */
		ck_assert_int_eq(grammar_matcher_new(g, v->trie, &fresh), 0);
		ck_assert_int_eq(grammar_matcher_accept_bytes(fresh, text, len), 0);
		grammar_matcher_free(fresh);
	}
	free(mask);
	free(ids);
	free(w);
	free(text);
	grammar_matcher_free(m);
	grammar_matcher_free(tmp);
}

static void property_run(const char *rel, uint64_t seed, int n_schemas, int per_schema, int budget,
                         int brute_every)
{
	struct vocab v = {0};
	struct tally t = {0};
	vocab_load(&v, rel);
	uint64_t r = seed;
	for (int i = 0; i < n_schemas; i++) {
		cJSON *schema = gen_root(&r);
		char err[SINKD_ERR_LEN] = "", path[256] = "";
		struct grammar *g = NULL;
		int rc = grammar_from_json_schema(schema, &g, path, sizeof(path), err, sizeof(err));
		char *st = cJSON_PrintUnformatted(schema);
		ck_assert_msg(rc == 0, "schema %d does not compile: %s at %s\n%s", i, err, path,
		              st);
		cJSON_free(st);
		t.schemas++;
		for (int d = 0; d < per_schema; d++)
			decode_one(&v, g, schema, &r, budget, brute_every, &t);
		grammar_unref(g);
		cJSON_Delete(schema);
	}
	fprintf(stderr,
	        "property %s: %d schemas, %d decodes, %d finished and valid, %d hit the "
	        "%d-token budget (valid prefixes)\n",
	        rel, t.schemas, t.decodes, t.finished, t.budget, budget);
	ck_assert_int_gt(t.finished, t.decodes / 2);
	vocab_free(&v);
}

START_TEST(test_property_stories)
{
	property_run("models/stories260K.gguf", 0x9e3779b97f4a7c15ull, 800, 10, 400, 5);
}
END_TEST

START_TEST(test_property_llama_spm)
{
	property_run("vocab/ggml-vocab-llama-spm.gguf", 0x2545f4914f6cdd1dull, 300, 6, 300, 40);
}
END_TEST

int main(void)
{
	setlocale(LC_ALL, "C.UTF-8");
	Suite *s = suite_create("grammar-property");
	TCase *tc = tcase_create("property");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_validator);
	tcase_add_test(tc, test_property_stories);
	tcase_add_test(tc, test_property_llama_spm);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
