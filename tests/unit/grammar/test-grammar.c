/* The grammar module against what a user sees: accept/reject tables for
 * every supported schema keyword (documents fed byte by byte: valid ones
 * complete, invalid ones refused at the right byte, prefixes accepted but
 * not complete), compile errors with their JSON paths, the grammar cache,
 * and masks on the real stories260K, 32k llama SentencePiece and GPT-2 BPE
 * vocabularies compared with a brute-force check of every token. */
#include <check.h>
#include <limits.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "testutil.h"

static struct tokenizer *load_tok(const char *rel)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f = NULL;
	struct tokenizer *tok = NULL;
	ck_assert_msg(gguf_open(tu_shared_path(rel), &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(tokenizer_new_from_gguf(f, &tok, err, sizeof(err)) == 0, "%s", err);
	gguf_close(f);
	return tok;
}

static struct tokenizer *small_tok;
static struct vocab_trie *small_trie;

static void setup_small(void)
{
	char err[SINKD_ERR_LEN];
	small_tok = load_tok("models/stories260K.gguf");
	ck_assert_msg(vocab_trie_new(small_tok, &small_trie, err, sizeof(err)) == 0, "%s", err);
}

static void teardown_small(void)
{
	vocab_trie_free(small_trie);
	tokenizer_free(small_tok);
}

static struct grammar *compile_text(const char *schema_text)
{
	char err[SINKD_ERR_LEN] = "", path[256] = "";
	struct grammar *g = NULL;
	int rc;
	if (!schema_text) {
		rc = grammar_json_object(&g, err, sizeof(err));
	} else {
		cJSON *s = cJSON_Parse(schema_text);
		ck_assert_msg(s != NULL, "bad test schema %s", schema_text);
		rc = grammar_from_json_schema(s, &g, path, sizeof(path), err, sizeof(err));
		cJSON_Delete(s);
	}
	ck_assert_msg(rc == 0, "%s: %s at %s", schema_text ? schema_text : "json_object", err,
	              path);
	return g;
}

/* ---- accept / reject tables ---- */

#define OK -1     /* the whole document is accepted and complete */
#define PREFIX -2 /* every byte is accepted, but the text is not complete */

struct doc_case {
	const char *doc;
	int expect; /* OK, PREFIX, or the offset of the first byte refused */
};

struct schema_case {
	const char *schema; /* NULL: json_object */
	struct doc_case docs[24];
};

/* Feeds doc one byte at a time and checks where it stops. */
static void check_doc(struct grammar_matcher *m, const char *schema, const struct doc_case *d)
{
	grammar_matcher_reset(m);
	size_t len = strlen(d->doc);
	for (size_t i = 0; i < len; i++) {
		int rc = grammar_matcher_accept_bytes(m, d->doc + i, 1);
		if (rc) {
			ck_assert_msg((int)i == d->expect,
			              "%s: %s refused at byte %zu, expected %d",
			              schema ? schema : "json_object", d->doc, i, d->expect);
			/* a refused byte leaves the state as it was */
			ck_assert_int_eq(grammar_matcher_accept_bytes(m, d->doc + i, 1), rc);
			return;
		}
		if (i + 1 < len && d->expect == OK)
			ck_assert_msg(!grammar_matcher_done(m), "%s: done after %zu bytes of %s",
			              schema ? schema : "json_object", i + 1, d->doc);
	}
	ck_assert_msg(d->expect == OK || d->expect == PREFIX, "%s: %s accepted whole, expected %d",
	              schema ? schema : "json_object", d->doc, d->expect);
	ck_assert_msg(grammar_matcher_can_end(m) == (d->expect == OK), "%s: %s can_end %d",
	              schema ? schema : "json_object", d->doc, grammar_matcher_can_end(m));
	/* the same text in one call */
	grammar_matcher_reset(m);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, d->doc, len), 0);
	ck_assert(grammar_matcher_can_end(m) == (d->expect == OK));
}

static const struct schema_case cases[] = {
    {NULL, /* compact: no whitespace outside strings */
     {{"{}", OK},
      {"{\"a\":[1,-2.5e3,true,null,\"x \\u00e9\"],\"b\":{\"c\":{}}}", OK},
      {"{\"a b\":\" \\n \"}", OK}, /* strings keep their spaces */
      {"{ \"a\":1}", 1},
      {"{\"a\" :1}", 4},
      {"{\"a\": 1}", 5},
      {"{\"a\":1 }", 6},
      {"{\"a\":1, \"b\":2}", 7},
      {"{\"a\":[1, 2]}", 8},
      {"{\"a\":{\n}}", 6},
      {"{\"a\":[\t]}", 6},
      {"{\r}", 1},
      {"[]", 0},
      {"{\"a\":}", 5},
      {"{\"a\":1,}", 7},
      {"{\"a\" 1}", 4},
      {"{\"a\":01}", 6},
      {"{\"a\":1", PREFIX},
      {" {}", 0},
      {"{}x", 2},
      {"{}\n", 2}}},
    {"{\"type\":\"object\",\"x_sinkd_whitespace\":\"pretty\"}", /* json_object, pretty */
     {{"{}", OK},
      {"{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\"], \"b\": {\"c\": {}}}", OK},
      {"{ \"a\" : 1 }", OK},
      {"{\n\t\"a\":\r\n1}", OK},
      {"{\"a\":[1 2]}", 8},
      {"{     }", 5}, /* at most GRAMMAR_MAX_WS blanks in a row */
      {"{    }", OK},
      {" {}", 0}, /* none around the value */
      {"{} ", 2}}},
    {"{\"type\":\"object\",\"x_sinkd_whitespace\":\"compact\"}", /* as the default */
     {{"{\"a\":[1]}", OK}, {"{ }", 1}, {"{\"a\": 1}", 5}}},
    {"{\"type\":\"string\"}",
     {{"\"\"", OK},
      {"\"hello world\"", OK},
      {"\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00\"", OK},
      {"\"\\uD83D\"", 7}, /* a lone high surrogate */
      {"\"\\uDE00\"", 4}, /* a lone low surrogate */
      {"\"\\x\"", 2},
      {"\"a\nb\"", 2},      /* raw control character */
      {"\"\xc3\xa9\"", OK}, /* é */
      {"\"\xe2\x82\xac\xf0\x9f\x98\x80\"", OK},
      {"\"\xc0\xaf\"", 1},         /* overlong */
      {"\"\xed\xa0\x80\"", 2},     /* UTF-8 surrogate */
      {"\"\xf4\x90\x80\x80\"", 2}, /* above U+10FFFF */
      {"\"\xe2\x82\"", 3},
      {"\"abc", PREFIX},
      {"abc", 0}}},
    {"{\"type\":\"integer\"}",
     {{"0", OK},
      {"-0", OK},
      {"12345", OK},
      {"-", PREFIX},
      {"01", 1},
      {"1.5", 1},
      {"1e3", 1},
      {"+1", 0}}},
    {"{\"type\":\"number\"}",
     {{"0", OK},
      {"-0.5", OK},
      {"1e10", OK},
      {"1E+2", OK},
      {"2.5e-3", OK},
      {"1.", PREFIX},
      {"1e", PREFIX},
      {".5", 0},
      {"1.e3", 2},
      {"00", 1},
      {"-a", 1}}},
    {"{\"type\":\"boolean\"}", {{"true", OK}, {"false", OK}, {"tru", PREFIX}, {"null", 0}}},
    {"{\"type\":\"null\"}", {{"null", OK}, {"nul", PREFIX}, {"0", 0}}},
    {"{\"type\":[\"string\",\"null\"]}", {{"\"a\"", OK}, {"null", OK}, {"1", 0}}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"string\"}},\"required\":[\"a\"]}",
     {{"{\"a\":1}", OK},
      {"{\"a\":1,\"b\":\"x\"}", OK},
      {"{\"a\":1,\"b\":\"x y \"}", OK},
      {"{ \"a\" : 1 , \"b\" : \"x\" }", 1},
      {"{\"a\":1 ,\"b\":\"x\"}", 6},
      {"{\"b\":\"x\"}", 2}, /* a is required and comes first */
      {"{\"b\":\"x\",\"a\":1}", 2},
      {"{\"a\":1,\"a\":2}", 8}, /* at most once */
      {"{\"a\":1,\"c\":2}", 8}, /* only the listed properties */
      {"{}", 1},
      {"{\"a\":\"1\"}", 5}}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"integer\"},\"c\":{\"type\":\"integer\"}}}",
     {{"{}", OK},
      {"{\"b\":1}", OK},
      {"{\"a\":1,\"c\":3}", OK},
      {"{\"c\":3}", OK},
      {"{\"c\":3,\"a\":1}", 6},
      {"{,}", 1},
      {"{\"a\":1,}", 7}}},
    {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"],"
     "\"additionalProperties\":false}",
     {{"{\"x\":5}", OK}, {"{\"x\":5,\"y\":1}", 6}}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
     {{"{}", OK}, {"{\"k\":1,\"other\":2}", OK}, {"{\"k\":\"v\"}", 5}}},
    {"{\"type\":\"object\",\"additionalProperties\":false}", {{"{}", OK}, {"{\"a\":1}", 1}}},
    {"{\"type\":\"object\"}", {{"{\"any\":[{\"x\":null}]}", OK}, {"[]", 0}}},
    {"{\"enum\":[\"red\",\"green\",1,null,{\"a\":[1,2]},\"say \\\"hi\\\"\"]}",
     {{"\"red\"", OK},
      {"\"green\"", OK},
      {"1", OK},
      {"null", OK},
      {"{\"a\":[1,2]}", OK},
      {"\"say \\\"hi\\\"\"", OK},
      {"\"blue\"", 1},
      {"\"gre\"", 4},
      {"{\"a\": [1,2]}", 5}, /* enum values come out compact */
      {"10", 1}}},
    {"{\"type\":\"string\",\"enum\":[\"a\",1,\"b\"]}", {{"\"a\"", OK}, {"1", 0}}},
    {"{\"const\":\"fixed\"}", {{"\"fixed\"", OK}, {"\"fix\"", 4}}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}",
     {{"[]", OK},
      {"[1]", OK},
      {"[1,2,3]", OK},
      {"[1, 2 ,3]", 3},
      {"[1,]", 3},
      {"[\"a\"]", 1},
      {"[1", PREFIX}}},
    {"{\"x_sinkd_whitespace\":\"pretty\",\"type\":\"array\",\"items\":{\"type\":\"integer\"}}",
     {{"[1, 2 ,3]", OK}, {"[ ]", OK}, {"[\n1\n]", OK}, {"[1 , ]", 5}}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
     {{"[1,2]", OK}, {"[1,2,3]", OK}, {"[1]", 2}, {"[]", 1}, {"[1,2,3,4]", 6}}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
     "\"items\":false}",
     {{"[]", OK}, {"[\"a\"]", OK}, {"[\"a\",1]", OK}, {"[\"a\",1,2]", 6}, {"[1]", 1}}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},"
     "\"minItems\":2}",
     {{"[\"a\",true]", OK}, {"[\"a\",true,false]", OK}, {"[\"a\"]", 4}, {"[true]", 1}}},
    {"{\"type\":\"array\",\"maxItems\":0}", {{"[]", OK}, {"[ ]", 1}, {"[1]", 1}}},
    {"{\"type\":\"array\"}", {{"[1,\"a\",{},[]]", OK}}},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"k\":{\"type\":"
     "\"boolean\"}},\"required\":[\"k\"]}]}",
     {{"7", OK}, {"{\"k\":true}", OK}, {"\"s\"", 0}, {"{}", 1}}},
    {"{\"oneOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"string\",\"minLength\":3}]}",
     {{"\"a\"", OK}, {"\"abc\"", OK}, {"\"\"", OK}, {"\"ab\"", 3}}},
    {"{\"allOf\":[{\"type\":\"boolean\"}]}", {{"true", OK}, {"1", 0}}},
    /* beside anyOf / $ref at the root, the option is no keyword of the value */
    {"{\"x_sinkd_whitespace\":\"pretty\",\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\","
     "\"items\":{\"type\":\"integer\"}}]}",
     {{"[1, 2]", OK}, {"7", OK}, {" 7", 0}}},
    {"{\"$defs\":{\"p\":{\"type\":\"array\"}},\"$ref\":\"#/$defs/p\",\"x_sinkd_whitespace\":"
     "\"compact\"}",
     {{"[1,{}]", OK}, {"[1, {}]", 3}}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
     {{"\"ab\"", OK},
      {"\"abc\"", OK},
      {"\"\xc3\xa9\xc3\xa9\"", OK}, /* characters, not bytes */
      {"\"\\n\\t\"", OK},
      {"\"\\uD83D\\uDE00x\"", OK}, /* a surrogate pair is one character */
      {"\"a\"", 2},
      {"\"abcd\"", 4}}},
    {"{\"type\":\"string\",\"pattern\":\"^[a-z]+-[0-9]{2,3}$\"}",
     {{"\"ab-12\"", OK},
      {"\"x-123\"", OK},
      {"\"ab-1\"", 5},
      {"\"ab-1234\"", 7},
      {"\"A-12\"", 1},
      {"\"-12\"", 1}}},
    {"{\"type\":\"string\",\"pattern\":\"^(ab|cd)*\\\\.x?$\"}",
     {{"\".\"", OK}, {"\"abcd.x\"", OK}, {"\"ab.\"", OK}, {"\"ac\"", 2}}},
    {"{\"type\":\"string\",\"pattern\":\"^[^a-c]\\\\d\\\\w\\\\s.$\"}",
     {{"\"d1_ z\"", OK},
      {"\"\xc3\xa9"
       "2a\\t\xe2\x82\xac\"",
       OK},
      {"\"a\"", 1},
      {"\"\\\"1a x\"", OK}, /* '"' is written escaped */
      {"\"d1_ \\n\"", 6}}},
    {"{\"type\":\"string\",\"pattern\":\"ab\"}",
     {{"\"ab\"", OK}, {"\"xxabyy\"", OK}, {"\"a b\"", 4}, {"\"xa\"", 3}, {"\"xa", PREFIX}}},
    {"{\"type\":\"string\",\"pattern\":\"^a{2}b{1,}c{0,1}$\"}",
     {{"\"aab\"", OK}, {"\"aabbbc\"", OK}, {"\"ab\"", 2}, {"\"aabcc\"", 5}}},
    {"{\"type\":\"string\",\"format\":\"date\"}",
     {{"\"2024-02-29\"", OK},
      {"\"1999-12-31\"", OK},
      {"\"2024-13-01\"", 7},
      {"\"2024-04-31\"", 10},
      {"\"2024-02-30\"", 9},
      {"\"24-01-01\"", 3}}},
    {"{\"type\":\"string\",\"format\":\"time\"}",
     {{"\"12:34:56\"", OK},
      {"\"23:59:59.123Z\"", OK},
      {"\"00:00:00+05:30\"", OK},
      {"\"24:00:00\"", 2},
      {"\"12:60:00\"", 4}}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}",
     {{"\"2024-01-02T03:04:05Z\"", OK},
      {"\"2024-01-02T03:04:05.5-08:00\"", OK},
      {"\"2024-01-02T03:04:05\"", 20},
      {"\"2024-01-02 03:04:05Z\"", 11}}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}",
     {{"\"123e4567-e89b-12d3-a456-426614174000\"", OK},
      {"\"123e4567e89b\"", 9},
      {"\"123e4567-e89b-12d3-a456-42661417400g\"", 36}}},
    {"{\"type\":\"string\",\"format\":\"email\"}",
     {{"\"a.b+c@example.co.uk\"", OK},
      {"\"x@y.z\"", OK},
      {"\"x@y\"", 4},
      {"\"@y.z\"", 1},
      {"\"a..b@c.d\"", 3}}},
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
     "\"$ref\":\"#/$defs/node\"}",
     {{"{\"v\":1}", OK},
      {"{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]},{\"v\":4}]}", OK},
      {"{\"v\":1,\"kids\":[{}]}", 16}}},
    {"{\"definitions\":{\"s\":{\"type\":\"string\"}},\"type\":\"object\",\"properties\":{\"a\":"
     "{\"$ref\":\"#/definitions/s\"}},\"required\":[\"a\"]}",
     {{"{\"a\":\"x\"}", OK}, {"{\"a\":1}", 5}}},
    {"{\"type\":\"object\",\"properties\":{\"self\":{\"$ref\":\"#\"}}}",
     {{"{}", OK}, {"{\"self\":{\"self\":{}}}", OK}}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"integer\"},"
     "\"c\":{\"type\":\"integer\"},\"d\":{\"type\":\"integer\"},\"e\":{\"type\":\"integer\"},\"f\":"
     "{\"type\":"
     "\"integer\"},\"g\":{\"type\":\"integer\"},\"h\":{\"type\":\"integer\"}},\"required\":[\"c\","
     "\"f\"]}",
     {{"{\"c\":1,\"f\":2}", OK},
      {"{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6,\"g\":7,\"h\":8}", OK},
      {"{\"b\":0,\"c\":1,\"e\":0,\"f\":2,\"h\":9}", OK},
      {"{\"b\":0, \"c\":1}", 7},
      {"{\"a\":1}", 6},
      {"{\"f\":1}", 2},
      {"{\"c\":1,\"f\":2,\"d\":3}", 14}}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":3,\"maxItems\":5}",
     {{"[1,2,3]", OK}, {"[1,2,3,4,5]", OK}, {"[1,2]", 4}, {"[1,2,3,4,5,6]", 10}}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":4}",
     {{"[true,false,true,true]", OK}, {"[true,false,true,true,false]", OK}, {"[true]", 5}}},
    {"true", {{"1", OK}, {"[\"x\",{}]", OK}, {"{}", OK}}},
    {"{}", {{"\"s\"", OK}, {"null", OK}}},
    {"{\"title\":\"T\",\"description\":\"d\",\"$schema\":\"x\",\"default\":1,\"examples\":[1],"
     "\"type\":\"integer\"}",
     {{"5", OK}}},
    {"{\"properties\":{\"a\":{\"type\":\"null\"}},\"required\":[\"a\"]}", /* no type: object */
     {{"{\"a\":null}", OK}}},
    {"{\"type\":\"object\",\"properties\":{\"q\\\"k\":{\"type\":\"integer\"}},\"required\":"
     "[\"q\\\"k\"]}",
     {{"{\"q\\\"k\":1}", OK}}},
};

/* Integer bounds: every integer from -1500 to 1500 is complete exactly when
 * it lies in the range (inclusive and exclusive bounds, one side open). */
START_TEST(test_integer_bounds)
{
	static const struct {
		const char *bounds;
		long lo, hi; /* LONG_MIN / LONG_MAX: open */
	} r[] = {
	    {"\"minimum\":0", 0, LONG_MAX},
	    {"\"minimum\":1", 1, LONG_MAX},
	    {"\"minimum\":57", 57, LONG_MAX},
	    {"\"maximum\":99", LONG_MIN, 99},
	    {"\"maximum\":-3", LONG_MIN, -3},
	    {"\"minimum\":-120,\"maximum\":1033", -120, 1033},
	    {"\"minimum\":-1000,\"maximum\":-10", -1000, -10},
	    {"\"exclusiveMinimum\":0,\"exclusiveMaximum\":100", 1, 99},
	    {"\"minimum\":7,\"maximum\":7", 7, 7},
	    {"\"minimum\":10,\"maximum\":999", 10, 999},
	    {"\"minimum\":1.5,\"maximum\":20.5", 2, 20},
	};
	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		char schema[160];
		snprintf(schema, sizeof(schema), "{\"type\":\"integer\",%s}", r[i].bounds);
		struct grammar *g = compile_text(schema);
		struct grammar_matcher *m = NULL;
		ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
		for (long v = -1500; v <= 1500; v++) {
			char text[32];
			snprintf(text, sizeof(text), "%ld", v);
			grammar_matcher_reset(m);
			bool whole = grammar_matcher_accept_bytes(m, text, strlen(text)) == 0;
			bool in = v >= r[i].lo && v <= r[i].hi;
			ck_assert_msg((whole && grammar_matcher_can_end(m)) == in, "%s: %ld %s",
			              schema, v, in ? "refused" : "accepted");
		}
		grammar_matcher_free(m);
		grammar_unref(g);
	}
	/* zod's z.number().int(): the safe integers */
	struct grammar *g = compile_text("{\"type\":\"integer\",\"minimum\":-9007199254740991,"
	                                 "\"maximum\":9007199254740991}");
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
	static const struct doc_case safe[] = {
	    {"9007199254740991", OK},
	    {"-9007199254740991", OK},
	    {"0", OK},
	    {"9007199254740992", 15},
	    {"-9007199254740992", 16},
	    {"12345678901234567", 16},
	    {"01", 1},
	    {"-0", 1},
	};
	for (size_t i = 0; i < sizeof(safe) / sizeof(safe[0]); i++)
		check_doc(m, "safe integers", &safe[i]);
	grammar_matcher_free(m);
	grammar_unref(g);
	/* a number with minimum 0 has no minus sign */
	g = compile_text("{\"type\":\"number\",\"minimum\":0}");
	ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
	static const struct doc_case nonneg[] = {
	    {"0.5", OK}, {"12e-3", OK}, {"0", OK}, {"-1", 0}, {"01", 1},
	};
	for (size_t i = 0; i < sizeof(nonneg) / sizeof(nonneg[0]); i++)
		check_doc(m, "number minimum 0", &nonneg[i]);
	grammar_matcher_free(m);
	grammar_unref(g);
}
END_TEST

START_TEST(test_accept_reject)
{
	const struct schema_case *c = &cases[_i];
	struct grammar *g = compile_text(c->schema);
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
	for (const struct doc_case *d = c->docs; d->doc; d++)
		check_doc(m, c->schema, d);
	grammar_matcher_free(m);
	grammar_unref(g);
}
END_TEST

/* done: complete and nothing may follow; can_end alone when more may. */
START_TEST(test_done_and_can_end)
{
	struct grammar *g = compile_text("{\"type\":\"integer\"}");
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
	ck_assert(!grammar_matcher_can_end(m));
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "12", 2), 0);
	ck_assert(grammar_matcher_can_end(m));
	ck_assert(!grammar_matcher_done(m)); /* more digits may follow */
	grammar_matcher_free(m);
	grammar_unref(g);

	g = compile_text(NULL);
	ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "{\"a\":[]}", 8), 0);
	ck_assert(grammar_matcher_can_end(m));
	ck_assert(grammar_matcher_done(m));
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, " ", 1), -EINVAL);
	grammar_matcher_reset(m);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "{\"a\":[", 6), 0);
	ck_assert(!grammar_matcher_can_end(m));
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, " ", 1), -EINVAL); /* compact */
	grammar_matcher_reset(m);
	ck_assert(!grammar_matcher_can_end(m));
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "{", 1), 0);
	grammar_matcher_free(m);
	grammar_unref(g);
}
END_TEST

START_TEST(test_wrapped)
{
	char err[SINKD_ERR_LEN], path[128];
	cJSON *s = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
	                       "\"required\":[\"n\"]}");
	struct grammar *g = NULL;
	ck_assert_int_eq(grammar_from_json_schema_wrapped("<tool_call>\n", s, "\n</tool_call>", &g,
	                                                  path, sizeof(path), err, sizeof(err)),
	                 0);
	cJSON_Delete(s);
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
	const struct doc_case docs[] = {{"<tool_call>\n{\"n\":3}\n</tool_call>", OK},
	                                {"<tool_call>\n{\"n\":3}", PREFIX},
	                                {"<tool_call>\n{\"n\": 3}\n</tool_call>", 17},
	                                {"<tool_call>\n{\"n\":3}\n </tool_call>", 20},
	                                {"<tool_call>{", 11},
	                                {"{\"n\":3}", 0}};
	for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
		check_doc(m, "wrapped", &docs[i]);
	grammar_matcher_free(m);
	grammar_unref(g);
}
END_TEST

/* ---- compile errors ---- */

struct error_case {
	const char *schema, *path, *message;
};

static const struct error_case errors[] = {
    {"{\"type\":\"integer\",\"multipleOf\":2}", "$.multipleOf", "multipleOf"},
    {"{\"type\":\"number\",\"maximum\":1}", "$.maximum", "maximum"},
    {"{\"type\":\"number\",\"minimum\":0.5}", "$.minimum", "minimum"},
    {"{\"minimum\":1}", "$.minimum", "minimum"},
    {"{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}", "$.minimum", "between"},
    {"{\"type\":\"integer\",\"maximum\":1e30}", "$.maximum", "10^17"},
    {"{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"ipv4\"}}}",
     "$.properties.when.format", "ipv4"},
    {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"string\",\"format\":\"hostname\"}}}}",
     "$.properties.x.items.format", "hostname"},
    {"{\"type\":\"array\",\"uniqueItems\":true}", "$.uniqueItems", "uniqueItems"},
    {"{\"type\":\"object\",\"patternProperties\":{}}", "$.patternProperties", "patternProperties"},
    {"{\"not\":{}}", "$.not", "not"},
    {"{\"$ref\":\"#/$defs/missing\"}", "$.$ref", "missing"},
    {"{\"$ref\":\"http://example.com/s.json\"}", "$.$ref", "$ref"},
    {"{\"type\":\"strin\"}", "$.type", "strin"},
    {"{\"type\":\"string\",\"pattern\":\"^(?=a)b$\"}", "$.pattern", "lookaround"},
    {"{\"type\":\"string\",\"pattern\":\"a\\\\bb\"}", "$.pattern", "\\b"},
    {"{\"type\":\"string\",\"pattern\":\"(a\"}", "$.pattern", "unterminated"},
    {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "$.minLength", "minLength"},
    {"{\"type\":\"string\",\"minLength\":-1}", "$.minLength", "minLength"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "$.minItems", "minItems"},
    {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"number\",\"multipleOf\":2}]}",
     "$.anyOf[1].multipleOf", "multipleOf"},
    {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"number\"}]}", "$.allOf", "allOf"},
    {"{\"type\":\"object\",\"required\":[\"a\"]}", "$.required[0]", "'a'"},
    {"{\"enum\":[]}", "$.enum", "enum"},
    {"{\"type\":\"integer\",\"enum\":[\"a\"]}", "$.enum", "enum"},
    {"false", "$", "false"},
    {"{\"$defs\":{\"a\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\","
     "\"format\":\"uri\"}}}},\"$ref\":\"#/$defs/a\"}",
     "$.$defs.a.properties.x.format", "uri"},
    {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "", "no value"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}", "",
     "no value"},
    {"{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":"
     "\"#/$defs/a\"}",
     "", "without any text"},
    {"{\"type\":\"string\",\"pattern\":\"^(a|b)*a(a|b){20}$\"}", "$.pattern", "too large"},
    {"{\"type\":\"object\",\"x_sinkd_whitespace\":\"loose\"}", "$.x_sinkd_whitespace",
     "\"compact\" or \"pretty\""},
    {"{\"x_sinkd_whitespace\":true}", "$.x_sinkd_whitespace", "\"compact\" or \"pretty\""},
    /* only at the root */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"x_sinkd_whitespace\":"
     "\"pretty\"}}}",
     "$.properties.a.x_sinkd_whitespace", "unsupported keyword"},
};

START_TEST(test_compile_errors)
{
	const struct error_case *c = &errors[_i];
	char err[SINKD_ERR_LEN] = "", path[256] = "";
	struct grammar *g = NULL;
	cJSON *s = cJSON_Parse(c->schema);
	ck_assert_ptr_nonnull(s);
	int rc = grammar_from_json_schema(s, &g, path, sizeof(path), err, sizeof(err));
	cJSON_Delete(s);
	ck_assert_msg(rc == -EINVAL, "%s: rc %d (%s)", c->schema, rc, err);
	ck_assert_ptr_null(g);
	ck_assert_msg(!strcmp(path, c->path), "%s: path '%s', expected '%s' (%s)", c->schema, path,
	              c->path, err);
	ck_assert_msg(strstr(err, c->message), "%s: message '%s' lacks '%s'", c->schema, err,
	              c->message);
}
END_TEST

/* ---- whitespace: compact by default, "pretty" on request ---- */

/* Whether the mask after text allows some token whose piece starts with
 * whitespace (stories260K has " ", "\n" and many " word" pieces). */
static bool blank_token_allowed(struct grammar *g, const char *text)
{
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, text, strlen(text)), 0);
	int n = vocab_trie_n_vocab(small_trie);
	uint32_t *mask = malloc(((size_t)n + 31) / 32 * 4);
	ck_assert_int_eq(grammar_matcher_fill_mask(m, mask), 0);
	bool any = false;
	char piece[256];
	for (int32_t id = 0; id < n && !any; id++)
		if (mask[id / 32] >> (id % 32) & 1 &&
		    tokenizer_token_piece(small_tok, id, piece, sizeof(piece)) > 0)
			any = strchr(" \n\t\r", piece[0]) != NULL;
	free(mask);
	grammar_matcher_free(m);
	return any;
}

/* The masks a decode sees: after every structural token of an object the
 * compact grammar offers no token that starts with a blank, the pretty one
 * does; inside a string both do. */
START_TEST(test_whitespace_masks)
{
	static const char body[] = "\"type\":\"object\",\"properties\":{\"name\":{\"type\":"
	                           "\"string\"},\"age\":{\"type\":\"integer\"}},\"required\":"
	                           "[\"name\",\"age\"]}";
	char compact[256], pretty[256];
	snprintf(compact, sizeof(compact), "{%s", body);
	snprintf(pretty, sizeof(pretty), "{\"x_sinkd_whitespace\":\"pretty\",%s", body);
	struct grammar *gc = compile_text(compact), *gp = compile_text(pretty);
	static const char *const between[] = {"{",
	                                      "{\"name\"",
	                                      "{\"name\":",
	                                      "{\"name\":\"x\"",
	                                      "{\"name\":\"x\",",
	                                      "{\"name\":\"x\",\"age\":"};
	for (size_t i = 0; i < sizeof(between) / sizeof(between[0]); i++) {
		ck_assert_msg(!blank_token_allowed(gc, between[i]), "compact: a blank after %s",
		              between[i]);
		ck_assert_msg(blank_token_allowed(gp, between[i]), "pretty: no blank after %s",
		              between[i]);
	}
	ck_assert(blank_token_allowed(gc, "{\"name\":\"x"));
	ck_assert(blank_token_allowed(gp, "{\"name\":\"x"));
	grammar_unref(gc);
	grammar_unref(gp);
}
END_TEST

/* The option is part of the cache's key: the same schema with and without
 * it are two grammars, each found again. */
START_TEST(test_whitespace_cache_key)
{
	struct grammar_cache *c = NULL;
	char err[SINKD_ERR_LEN], path[128];
	ck_assert_int_eq(grammar_cache_new(8, &c), 0);
	cJSON *plain = cJSON_Parse("{\"type\":\"object\"}");
	cJSON *pretty = cJSON_Parse("{\"type\":\"object\",\"x_sinkd_whitespace\":\"pretty\"}");
	struct grammar *g[4];
	const cJSON *schemas[4] = {plain, pretty, plain, pretty};
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(grammar_cache_get(c, NULL, 0, NULL, schemas[i], NULL, &g[i], NULL,
		                                   path, sizeof(path), err, sizeof(err)),
		                 0);
	ck_assert_ptr_ne(g[0], g[1]);
	ck_assert_ptr_eq(g[0], g[2]);
	ck_assert_ptr_eq(g[1], g[3]);
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g[0], small_trie, &m), 0);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "{ ", 2), -EINVAL);
	grammar_matcher_free(m);
	ck_assert_int_eq(grammar_matcher_new(g[1], small_trie, &m), 0);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "{ }", 3), 0);
	ck_assert(grammar_matcher_done(m));
	grammar_matcher_free(m);
	for (int i = 0; i < 4; i++)
		grammar_unref(g[i]);
	grammar_cache_free(c);
	cJSON_Delete(plain);
	cJSON_Delete(pretty);
}
END_TEST

/* ---- the cache ---- */

START_TEST(test_cache)
{
	struct grammar_cache *c = NULL;
	char err[SINKD_ERR_LEN], path[128];
	ck_assert_int_eq(grammar_cache_new(2, &c), 0);
	cJSON *a = cJSON_Parse("{\"type\":\"integer\"}"), *b = cJSON_Parse("{\"type\":\"string\"}");
	cJSON *a2 = cJSON_Parse("{ \"type\" : \"integer\" }");
	struct grammar *g1, *g2, *g3, *g4, *g5;
	ck_assert_int_eq(grammar_cache_get(c, NULL, 0, NULL, a, NULL, &g1, NULL, path, sizeof(path),
	                                   err, sizeof(err)),
	                 0);
	ck_assert_int_eq(grammar_cache_get(c, NULL, 0, "", a2, "", &g2, NULL, path, sizeof(path),
	                                   err, sizeof(err)),
	                 0);
	ck_assert_ptr_eq(g1, g2); /* same canonical text; "" and NULL both mean none */
	ck_assert_int_eq(grammar_cache_get(c, NULL, 0, "x", a, NULL, &g3, NULL, path, sizeof(path),
	                                   err, sizeof(err)),
	                 0);
	ck_assert_ptr_ne(g1, g3);
	ck_assert_int_eq(grammar_cache_get(c, NULL, 0, NULL, NULL, NULL, &g4, NULL, path,
	                                   sizeof(path), err, sizeof(err)),
	                 0);
	ck_assert_ptr_ne(g4, g1);
	/* capacity 2: the integer grammar was dropped, a new one comes back */
	ck_assert_int_eq(grammar_cache_get(c, NULL, 0, NULL, a, NULL, &g5, NULL, path, sizeof(path),
	                                   err, sizeof(err)),
	                 0);
	ck_assert_ptr_ne(g5, g1);
	cJSON *bad = cJSON_Parse("{\"type\":\"integer\",\"multipleOf\":3}");
	struct grammar *gb = (struct grammar *)1;
	ck_assert_int_eq(grammar_cache_get(c, NULL, 0, NULL, bad, NULL, &gb, NULL, path,
	                                   sizeof(path), err, sizeof(err)),
	                 -EINVAL);
	ck_assert_str_eq(path, "$.multipleOf");
	ck_assert_ptr_null(gb);
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g4, small_trie, &m), 0);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "{}", 2), 0);
	ck_assert(grammar_matcher_done(m));
	grammar_matcher_free(m);
	grammar_cache_free(c); /* the references we hold stay valid */
	ck_assert_int_eq(grammar_matcher_new(g1, small_trie, &m), 0);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, "42", 2), 0);
	grammar_matcher_free(m);
	grammar_unref(g1);
	grammar_unref(g2);
	grammar_unref(g3);
	grammar_unref(g4);
	grammar_unref(g5);
	grammar_unref(NULL);
	cJSON_Delete(a);
	cJSON_Delete(a2);
	cJSON_Delete(b);
	cJSON_Delete(bad);
}
END_TEST

/* ---- masks against a brute-force check of every token ---- */

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Every token's bit in fill_mask is whether accept_token takes it. */
static void check_mask_brute(struct grammar_matcher *m, struct grammar_matcher *tmp,
                             const struct tokenizer *tok, uint32_t *mask, const char *what)
{
	int n = tokenizer_n_vocab(tok);
	ck_assert_int_eq(grammar_matcher_fill_mask(m, mask), 0);
	int allowed = 0;
	for (int32_t id = 0; id < n; id++) {
		/* plain ifs: every ck_assert writes a checkpoint to a pipe */
		if (grammar_matcher_copy_state(tmp, m))
			ck_abort_msg("copy_state failed");
		bool ok = grammar_matcher_accept_token(tmp, id) == 0;
		bool bit = mask[id / 32] >> (id % 32) & 1;
		if (ok != bit) {
			char piece[256];
			tokenizer_token_piece(tok, id, piece, sizeof(piece));
			ck_abort_msg("%s: token %d '%s': mask %d, accept %d", what, id, piece, bit,
			             ok);
		}
		allowed += ok;
	}
	ck_assert_msg(allowed > 0 || grammar_matcher_done(m), "%s: empty mask", what);
	/* the same mask again comes from the matcher's memory */
	uint32_t *again = malloc(((size_t)n + 31) / 32 * 4);
	ck_assert_int_eq(grammar_matcher_fill_mask(m, again), 0);
	ck_assert(!memcmp(again, mask, ((size_t)n + 31) / 32 * 4));
	free(again);
}

/* Walks doc with the longest allowed token that is a prefix of what is left,
 * checking the mask at every step. */
static int walk_doc_checked(struct grammar *g, const struct tokenizer *tok,
                            const struct vocab_trie *t, const char *doc)
{
	struct grammar_matcher *m = NULL, *tmp = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, t, &m), 0);
	ck_assert_int_eq(grammar_matcher_new(g, t, &tmp), 0);
	int n = tokenizer_n_vocab(tok), steps = 0;
	uint32_t *mask = malloc(((size_t)n + 31) / 32 * 4);
	size_t pos = 0, len = strlen(doc);
	while (pos < len) {
		char what[160];
		snprintf(what, sizeof(what), "%.60s at %zu", doc, pos);
		check_mask_brute(m, tmp, tok, mask, what);
		int32_t best = -1;
		size_t best_len = 0;
		char piece[512];
		for (int32_t id = 0; id < n; id++) {
			if (!(mask[id / 32] >> (id % 32) & 1))
				continue;
			size_t pl = tokenizer_token_piece(tok, id, piece, sizeof(piece));
			if (pl > best_len && pl <= len - pos && !memcmp(piece, doc + pos, pl)) {
				best = id;
				best_len = pl;
			}
		}
		ck_assert_msg(best >= 0, "no allowed token continues %s at %zu", doc, pos);
		ck_assert_int_eq(grammar_matcher_accept_token(m, best), 0);
		pos += best_len;
		steps++;
	}
	ck_assert(grammar_matcher_can_end(m));
	check_mask_brute(m, tmp, tok, mask, "at the end");
	for (size_t i = 0; i < (size_t)n; i++)
		if (tokenizer_is_eog(tok, (int32_t)i))
			ck_assert(mask[i / 32] >> (i % 32) & 1);
	free(mask);
	grammar_matcher_free(m);
	grammar_matcher_free(tmp);
	return steps;
}

#define NESTED_SCHEMA_BODY                                                                         \
	"\"type\":\"object\",\"properties\":{"                                                     \
	"\"name\":{\"type\":\"string\"},"                                                          \
	"\"age\":{\"type\":\"integer\"},"                                                          \
	"\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",\"blue\"]}},"         \
	"\"orders\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"           \
	"\"id\":{\"type\":\"integer\"},\"item\":{\"type\":\"string\",\"maxLength\":12},"           \
	"\"price\":{\"type\":\"number\"},\"when\":{\"type\":\"string\",\"format\":\"date\"}},"     \
	"\"required\":[\"id\",\"item\"]}},"                                                        \
	"\"note\":{\"type\":[\"string\",\"null\"]},"                                               \
	"\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]+$\"}},"                       \
	"\"required\":[\"name\",\"age\",\"orders\"]}"

static const char nested_schema[] = "{" NESTED_SCHEMA_BODY;
static const char nested_schema_pretty[] = "{\"x_sinkd_whitespace\":\"pretty\"," NESTED_SCHEMA_BODY;

static const char nested_doc_compact[] =
    "{\"name\":\"Ada Lovelace\",\"age\":36,\"tags\":[\"red\",\"blue\"],\"orders\":[{\"id\":1,"
    "\"item\":\"pen\\n\\u00e9\",\"price\":2.5,\"when\":\"2024-01-31\"},{\"id\":22,\"item\":"
    "\"ink\"}],\"note\":null,\"code\":\"AB-12\"}";

static const char *const nested_docs_pretty[] = {
    "{\"name\": \"Ada Lovelace\", \"age\": 36, \"tags\": [\"red\", \"blue\"], \"orders\": "
    "[{\"id\": 1, \"item\": \"pen\\n\\u00e9\", \"price\": 2.5, \"when\": \"2024-01-31\"}, "
    "{\"id\": 22, \"item\": \"ink\"}], \"note\": null, \"code\": \"AB-12\"}",
    "{\n  \"name\": \"Bob \\\"the\\\" builder \xc3\xa9\xe2\x82\xac\",\n  \"age\": -3,\n  "
    "\"orders\": []\n}",
};

static void mask_vocab_test(const char *vocab)
{
	char err[SINKD_ERR_LEN];
	struct tokenizer *tok = load_tok(vocab);
	struct vocab_trie *t = NULL;
	ck_assert_msg(vocab_trie_new(tok, &t, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(vocab_trie_n_vocab(t), tokenizer_n_vocab(tok));
	struct grammar *g = compile_text(nested_schema);
	walk_doc_checked(g, tok, t, nested_doc_compact);
	grammar_unref(g);
	g = compile_text(nested_schema_pretty);
	for (size_t i = 0; i < sizeof(nested_docs_pretty) / sizeof(nested_docs_pretty[0]); i++)
		walk_doc_checked(g, tok, t, nested_docs_pretty[i]);
	grammar_unref(g);
	g = compile_text(NULL);
	walk_doc_checked(g, tok, t,
	                 "{\"a\":[1,-2.5e+3,{\"b\":true},null],\"c\":\"\\ud83d\\ude00 x\"}");
	grammar_unref(g);
	vocab_trie_free(t);
	tokenizer_free(tok);
}

START_TEST(test_mask_stories)
{
	mask_vocab_test("models/stories260K.gguf");
}
END_TEST

START_TEST(test_mask_llama_spm)
{
	mask_vocab_test("vocab/ggml-vocab-llama-spm.gguf");
}
END_TEST

START_TEST(test_mask_gpt2_bpe)
{
	mask_vocab_test("vocab/ggml-vocab-gpt-2.gguf");
}
END_TEST

/* Random masked decodes on a real vocabulary, each state checked by brute
 * force: states off the paths a valid document takes. */
START_TEST(test_mask_random_states)
{
	char err[SINKD_ERR_LEN];
	struct tokenizer *tok = load_tok("vocab/ggml-vocab-llama-spm.gguf");
	struct vocab_trie *t = NULL;
	ck_assert_msg(vocab_trie_new(tok, &t, err, sizeof(err)) == 0, "%s", err);
	struct grammar *g = compile_text(nested_schema);
	struct grammar_matcher *m = NULL, *tmp = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, t, &m), 0);
	ck_assert_int_eq(grammar_matcher_new(g, t, &tmp), 0);
	int n = tokenizer_n_vocab(tok), checked = 0;
	uint32_t *mask = malloc(((size_t)n + 31) / 32 * 4);
	int32_t *allowed = malloc((size_t)n * sizeof(*allowed));
	uint64_t rng = 12345;
	for (int step = 0; step < 120; step++) {
		check_mask_brute(m, tmp, tok, mask, "random decode");
		checked++;
		int k = 0;
		for (int32_t id = 0; id < n; id++)
			if (mask[id / 32] >> (id % 32) & 1)
				allowed[k++] = id;
		int32_t pick = allowed[rng_next(&rng) % (uint64_t)k];
		if (tokenizer_is_eog(tok, pick) || grammar_matcher_done(m)) {
			grammar_matcher_reset(m);
			continue;
		}
		ck_assert_int_eq(grammar_matcher_accept_token(m, pick), 0);
	}
	ck_assert_int_eq(checked, 120);
	free(mask);
	free(allowed);
	grammar_matcher_free(m);
	grammar_matcher_free(tmp);
	grammar_unref(g);
	vocab_trie_free(t);
	tokenizer_free(tok);
}
END_TEST

/* apply: -inf exactly where the mask is clear; logits elsewhere untouched. */
START_TEST(test_apply)
{
	struct grammar *g = compile_text("{\"enum\":[\"yes\",\"no\"]}");
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
	int n = vocab_trie_n_vocab(small_trie);
	float *logits = malloc((size_t)n * sizeof(*logits));
	uint32_t *mask = malloc(((size_t)n + 31) / 32 * 4);
	for (int i = 0; i < n; i++)
		logits[i] = (float)i;
	ck_assert_int_eq(grammar_matcher_fill_mask(m, mask), 0);
	ck_assert_int_eq(grammar_matcher_apply(m, logits), 0);
	int kept = 0;
	for (int i = 0; i < n; i++) {
		bool bit = mask[i / 32] >> (i % 32) & 1;
		ck_assert(bit ? logits[i] == (float)i : isinf(logits[i]) && logits[i] < 0);
		kept += bit;
	}
	ck_assert_int_gt(kept, 0);
	free(logits);
	free(mask);
	grammar_matcher_free(m);
	grammar_unref(g);
}
END_TEST

/* Several threads decode with one fresh grammar at once (racing to fill its
 * mask caches) and see the masks a single thread sees. */
struct thread_run {
	struct grammar *g;
	const struct vocab_trie *t;
	uint64_t seed;
	uint64_t sums[150];
	int rc;
};

static uint64_t mask_sum(const uint32_t *mask, size_t n_words)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n_words; i++)
		h = (h ^ mask[i]) * 1099511628211ull;
	return h;
}

static void *thread_decode(void *arg)
{
	struct thread_run *r = arg;
	struct grammar_matcher *m = NULL;
	int n = vocab_trie_n_vocab(r->t);
	size_t n_words = ((size_t)n + 31) / 32;
	uint32_t *mask = malloc(n_words * 4);
	uint64_t rng = r->seed;
	r->rc = grammar_matcher_new(r->g, r->t, &m);
	for (int step = 0; step < 150 && !r->rc; step++) {
		r->rc = grammar_matcher_fill_mask(m, mask);
		r->sums[step] = mask_sum(mask, n_words);
		int k = 0;
		for (size_t i = 0; i < n_words; i++)
			k += __builtin_popcount(mask[i]);
		int want = k ? (int)(rng_next(&rng) % (uint64_t)k) : 0;
		int32_t pick = -1;
		for (int32_t id = 0; id < n && pick < 0; id++)
			if ((mask[id / 32] >> (id % 32) & 1) && want-- == 0)
				pick = id;
		if (grammar_matcher_done(m) || pick < 0 || grammar_matcher_accept_token(m, pick))
			grammar_matcher_reset(m);
	}
	grammar_matcher_free(m);
	free(mask);
	return NULL;
}

START_TEST(test_threads)
{
	char err[SINKD_ERR_LEN];
	struct tokenizer *tok = load_tok("vocab/ggml-vocab-llama-spm.gguf");
	struct vocab_trie *t = NULL;
	ck_assert_msg(vocab_trie_new(tok, &t, err, sizeof(err)) == 0, "%s", err);
	struct thread_run runs[4], ref;
	struct grammar *shared = compile_text(nested_schema);
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		runs[i] = (struct thread_run){.g = shared, .t = t, .seed = 77 + (uint64_t)(i % 2)};
		ck_assert_int_eq(pthread_create(&th[i], NULL, thread_decode, &runs[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int s = 0; s < 2; s++) {
		ref = (struct thread_run){
		    .g = compile_text(nested_schema), .t = t, .seed = 77 + (uint64_t)s};
		thread_decode(&ref);
		ck_assert_int_eq(ref.rc, 0);
		for (int i = s; i < 4; i += 2) {
			ck_assert_int_eq(runs[i].rc, 0);
			ck_assert(!memcmp(runs[i].sums, ref.sums, sizeof(ref.sums)));
		}
		grammar_unref(ref.g);
	}
	grammar_unref(shared);
	vocab_trie_free(t);
	tokenizer_free(tok);
}
END_TEST

/* A whole-text regex (structured outputs): the text itself, unescaped,
 * matched as a whole; bad ones name the position. */
START_TEST(test_regex_raw)
{
	static const struct {
		const char *regex, *text;
		bool ok;
	} r[] = {
	    {"<think>\n[a-z ]+\n</think>\n\n[A-Z][a-z]+\\.",
	     "<think>\nlet me see\n</think>\n\nParis.", true},
	    {"<think>\n[a-z ]+\n</think>\n\n[A-Z][a-z]+\\.", "<think>\nx\n</think>\n\nparis.",
	     false},
	    {"a\"b\\\\c", "a\"b\\c", true},
	    {"^(yes|no)$", "yes", true},
	    {"^(yes|no)$", "yes!", false},
	    {"(yes|no)", "so yes", false}, /* whole text: no implicit .* */
	    {"caf\u00e9 .", "caf\u00e9 \u00fc", true},
	    {"\\d{2,3}", "1234", false},
	};
	char err[SINKD_ERR_LEN];
	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		struct grammar *g = NULL;
		ck_assert_msg(grammar_from_regex(r[i].regex, &g, err, sizeof(err)) == 0, "%s", err);
		struct grammar_matcher *m = NULL;
		ck_assert_int_eq(grammar_matcher_new(g, small_trie, &m), 0);
		bool whole = grammar_matcher_accept_bytes(m, r[i].text, strlen(r[i].text)) == 0 &&
		             grammar_matcher_can_end(m);
		ck_assert_msg(whole == r[i].ok, "%s on %s", r[i].regex, r[i].text);
		grammar_matcher_free(m);
		grammar_unref(g);
	}
	struct grammar *g = NULL;
	ck_assert_int_eq(grammar_from_regex("ab(c", &g, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "unterminated (") && strstr(err, "offset 4"), "%s", err);
	ck_assert_int_eq(grammar_from_regex("a(?=b)", &g, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "offset"), "%s", err);
}
END_TEST

static Suite *grammar_suite(void)
{
	Suite *s = suite_create("grammar");
	TCase *tc = tcase_create("core");
	tcase_add_unchecked_fixture(tc, setup_small, teardown_small);
	tcase_add_loop_test(tc, test_accept_reject, 0, sizeof(cases) / sizeof(cases[0]));
	tcase_add_test(tc, test_done_and_can_end);
	tcase_add_test(tc, test_wrapped);
	tcase_add_loop_test(tc, test_compile_errors, 0, sizeof(errors) / sizeof(errors[0]));
	tcase_add_test(tc, test_cache);
	tcase_add_test(tc, test_whitespace_masks);
	tcase_add_test(tc, test_whitespace_cache_key);
	tcase_add_test(tc, test_integer_bounds);
	tcase_add_test(tc, test_apply);
	tcase_add_test(tc, test_regex_raw);
	suite_add_tcase(s, tc);
	TCase *tm = tcase_create("mask");
	tcase_set_timeout(tm, 300);
	tcase_add_test(tm, test_mask_stories);
	tcase_add_test(tm, test_mask_llama_spm);
	tcase_add_test(tm, test_mask_gpt2_bpe);
	tcase_add_test(tm, test_mask_random_states);
	tcase_add_test(tm, test_threads);
	suite_add_tcase(s, tm);
	return s;
}

int main(void)
{
	return tu_run_suite(grammar_suite());
}
