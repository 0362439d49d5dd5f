/* Output formats of chat templates: chat_format_detect on the markers of
 * each family's published template, where a rendered prompt leaves the
 * model, the reasoning splitter (<think>, Command-R, harmony) and the tool
 * parser's newer formats (DeepSeek R1 and V3.1, Mistral's [ARGS],
 * Command-R7B, harmony), each run whole, a byte at a time and cut at every
 * position, with partial envelopes and text that only looks like one. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "model/gguf.h"
#include "server/chat_format.h"
#include "server/reasoning.h"
#include "server/tools.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

/* Events as one string: R[...] reasoning, C[...] content, B<i>(name)
 * call begin, A<i>[...] arguments, E<i> call end; adjacent text of one
 * kind merged, so every split of the input gives the same string. */
struct out {
	char s[4096];
	size_t n;
	char kind; /* the open text's kind, 0 when none */
	int index;
};

static void out_putc(struct out *o, char c)
{
	ck_assert_uint_lt(o->n + 1, sizeof(o->s));
	o->s[o->n++] = c;
	o->s[o->n] = '\0';
}

static void out_puts(struct out *o, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out_putc(o, s[i]);
}

static void out_close(struct out *o)
{
	if (o->kind)
		out_putc(o, ']');
	o->kind = 0;
}

static void out_text(struct out *o, char kind, int index, const char *s, size_t n)
{
	if (!n)
		return;
	if (o->kind != kind || o->index != index) {
		out_close(o);
		char head[16];
		int k = kind == 'A' ? snprintf(head, sizeof(head), "A%d[", index)
		                    : snprintf(head, sizeof(head), "%c[", kind);
		out_puts(o, head, (size_t)k);
		o->kind = kind;
		o->index = index;
	}
	out_puts(o, s, n);
}

static void on_tool(void *user, const struct tool_event *ev)
{
	struct out *o = user;
	char head[96];
	switch (ev->kind) {
	case TOOL_EV_CONTENT:
		out_text(o, 'C', -1, ev->text, ev->len);
		return;
	case TOOL_EV_ARGS:
		out_text(o, 'A', ev->index, ev->text, ev->len);
		return;
	case TOOL_EV_CALL_BEGIN:
		ck_assert_int_eq((int)strlen(ev->id), 29);
		out_close(o);
		out_puts(o, head,
		         (size_t)snprintf(head, sizeof(head), "B%d(%s)", ev->index, ev->name));
		return;
	case TOOL_EV_CALL_END:
		out_close(o);
		out_puts(o, head, (size_t)snprintf(head, sizeof(head), "E%d", ev->index));
		return;
	}
}

/* The splitter's content goes through a tool parser when there is one. */
struct chain {
	struct out *o;
	struct tool_parser *tp;
};

static void on_piece(void *user, enum reasoning_piece kind, const char *s, size_t n)
{
	struct chain *c = user;
	if (kind == REASONING_PIECE_REASONING)
		out_text(c->o, 'R', -1, s, n);
	else if (c->tp)
		ck_assert_int_eq(tool_parser_feed(c->tp, s, n, on_tool, c->o), 0);
	else
		out_text(c->o, 'C', -1, s, n);
}

struct setup {
	enum reasoning_syntax syn;
	enum reasoning_start start;
	enum tool_format tools;
	const struct tool_set *ts; /* NULL: no tool parser */
};

/* text through the chain in pieces of `step` bytes (0: whole), or cut in
 * two at `cut`; the events in *o; returns the complete calls. */
static int run(const struct setup *su, const char *text, size_t step, size_t cut, struct out *o)
{
	struct reasoning_splitter *r = NULL;
	struct chain c = {.o = o};
	memset(o, 0, sizeof(*o));
	ck_assert_int_eq(reasoning_splitter_new(su->syn, su->start, &r), 0);
	if (su->ts)
		ck_assert_int_eq(tool_parser_new(su->tools, su->ts, &c.tp), 0);
	size_t len = strlen(text);
	if (cut)
		step = cut;
	for (size_t at = 0; at < len;) {
		size_t n = step && !cut ? step : at ? len - at : (cut ? cut : len);
		if (n > len - at)
			n = len - at;
		ck_assert_int_eq(reasoning_splitter_feed(r, text + at, n, on_piece, &c), 0);
		at += n;
	}
	ck_assert_int_eq(reasoning_splitter_finish(r, on_piece, &c), 0);
	int calls = c.tp ? tool_parser_finish(c.tp, on_tool, o) : 0;
	out_close(o);
	tool_parser_free(c.tp);
	reasoning_splitter_free(r);
	return calls;
}

/* Whole, byte by byte and at every cut: the same events, equal to want. */
static void expect(const struct setup *su, const char *text, const char *want, int want_calls)
{
	struct out whole, o;
	ck_assert_int_eq(run(su, text, 0, 0, &whole), want_calls);
	ck_assert_msg(!strcmp(whole.s, want), "%s\n got: %s\nwant: %s", text, whole.s, want);
	ck_assert_int_eq(run(su, text, 1, 0, &o), want_calls);
	ck_assert_msg(!strcmp(o.s, want), "bytewise %s\n got: %s", text, o.s);
	for (size_t cut = 1; cut < strlen(text); cut++) {
		ck_assert_int_eq(run(su, text, 0, cut, &o), want_calls);
		ck_assert_msg(!strcmp(o.s, want), "cut %zu of %s\n got: %s", cut, text, o.s);
	}
}

static void two_tools(struct tool_set *ts)
{
	cJSON *req =
	    cJSON_Parse("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
	                "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
	                "\"string\"}}}}},"
	                "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]}");
	struct api_error e = {0};
	ck_assert_int_eq(tool_set_parse(req, false, ts, &e), 0);
	cJSON_Delete(req);
}

/* ---------------------------------------------------------------- detection */

START_TEST(test_detect)
{
	static const struct {
		const char *tmpl;
		enum tool_format tools;
		enum reasoning_syntax reasoning;
	} cases[] = {
	    {NULL, TOOL_FORMAT_GENERIC, REASONING_SYNTAX_NONE},
	    {"{{ '<|im_start|>' + m.content }}", TOOL_FORMAT_HERMES, REASONING_SYNTAX_NONE},
	    {"<|im_start|>{{'<tool_call>\\n'}}{{'<think>\\n\\n</think>\\n\\n'}}",
	     TOOL_FORMAT_HERMES, REASONING_SYNTAX_THINK},
	    {"<|start_header_id|>x<|end_header_id|>", TOOL_FORMAT_LLAMA3, REASONING_SYNTAX_NONE},
	    {"{{'<|python_tag|>'}}", TOOL_FORMAT_LLAMA3, REASONING_SYNTAX_NONE},
	    {"[INST] {{ m }} [/INST]", TOOL_FORMAT_MISTRAL, REASONING_SYNTAX_NONE},
	    {"{{'[TOOL_CALLS]' + name + '[ARGS]'}}{{'[THINK]'}}", TOOL_FORMAT_MISTRAL_ARGS,
	     REASONING_SYNTAX_MISTRAL},
	    {"{{'[TOOL_CALLS][' + calls|tojson + ']'}}", TOOL_FORMAT_MISTRAL,
	     REASONING_SYNTAX_NONE},
	    {"{{'<\uff5cAssistant\uff5c><\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool"
	     "\u2581call\u2581begin\uff5c>'}}{{'```json'}}{{'<think>\\n'}}",
	     TOOL_FORMAT_DEEPSEEK, REASONING_SYNTAX_THINK},
	    {"{{'<\uff5ctool\u2581call\u2581begin\uff5c>' + name + '<\uff5ctool\u2581sep\uff5c>'}}",
	     TOOL_FORMAT_DEEPSEEK_V3_1, REASONING_SYNTAX_NONE},
	    {"<|START_OF_TURN_TOKEN|>{{'<|START_THINKING|>'}}<|START_ACTION|>",
	     TOOL_FORMAT_COMMAND_R, REASONING_SYNTAX_COMMAND_R},
	    {"<|start|>assistant<|channel|>final<|message|>", TOOL_FORMAT_HARMONY,
	     REASONING_SYNTAX_HARMONY},
	    {"<start_of_turn>user", TOOL_FORMAT_GENERIC, REASONING_SYNTAX_NONE},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct chat_format f;
		chat_format_detect(cases[i].tmpl, &f);
		ck_assert_msg(f.tools == cases[i].tools, "case %zu: %s", i,
		              tool_format_name(f.tools));
		ck_assert_msg(f.reasoning == cases[i].reasoning, "case %zu: %s", i,
		              reasoning_syntax_name(f.reasoning));
	}
}
END_TEST

START_TEST(test_prompt_start)
{
	struct chat_format think = {TOOL_FORMAT_HERMES, REASONING_SYNTAX_THINK};
	struct chat_format none = {TOOL_FORMAT_HERMES, REASONING_SYNTAX_NONE};
	const char *open = "<|im_start|>assistant\n<think>\n";
	const char *off = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
	const char *plain = "<|im_start|>assistant\n";
	ck_assert_int_eq(chat_format_prompt_start(&think, open, strlen(open)),
	                 REASONING_START_INSIDE);
	ck_assert_int_eq(chat_format_prompt_start(&think, off, strlen(off)), REASONING_START_OFF);
	ck_assert_int_eq(chat_format_prompt_start(&think, plain, strlen(plain)),
	                 REASONING_START_BEFORE);
	ck_assert_int_eq(chat_format_prompt_start(&none, open, strlen(open)),
	                 REASONING_START_BEFORE);
}
END_TEST

/* ---------------------------------------------------------------- reasoning */

START_TEST(test_think)
{
	struct setup su = {REASONING_SYNTAX_THINK, REASONING_START_BEFORE, 0, NULL};
	expect(&su, "<think>\nLet me see.\nYes.\n</think>\n\nParis.",
	       "R[Let me see.\nYes.]C[Paris.]", 0);
	expect(&su, "\n<think>a</think>b", "R[a]C[b]", 0);
	expect(&su, "<think>\nunfinished", "R[unfinished]", 0);
	expect(&su, "<think>a </thinking> b</think>", "R[a </thinking> b]", 0);
	expect(&su, "<think>a <</think>b", "R[a <]C[b]", 0);
	expect(&su, "<thi", "C[<thi]", 0);
	expect(&su, "<thinker>", "C[<thinker>]", 0);
	expect(&su, "No thinking. <think>x</think>", "C[No thinking. <think>x</think>]", 0);
	expect(&su, "  text", "C[  text]", 0);
	expect(&su, "<think>\n\n</think>\n\nDone.", "C[Done.]", 0);
	su.start = REASONING_START_INSIDE;
	expect(&su, "Hmm.\n</think>\n\nOK", "R[Hmm.]C[OK]", 0);
	expect(&su, "all reasoning </thin", "R[all reasoning </thin]", 0);
	su.start = REASONING_START_OFF;
	expect(&su, "<think>x</think>y", "C[<think>x</think>y]", 0);
	su.syn = REASONING_SYNTAX_NONE;
	su.start = REASONING_START_BEFORE;
	expect(&su, "<think>x</think>y", "C[<think>x</think>y]", 0);
}
END_TEST

START_TEST(test_command_r_thinking)
{
	struct setup su = {REASONING_SYNTAX_COMMAND_R, REASONING_START_BEFORE, 0, NULL};
	expect(&su, "<|START_THINKING|>plan<|END_THINKING|>answer", "R[plan]C[answer]", 0);
	expect(&su, "<think>no</think>", "C[<think>no</think>]", 0);
	su.syn = REASONING_SYNTAX_MISTRAL;
	expect(&su, "[THINK]hm[/THINK]ok", "R[hm]C[ok]", 0);
	expect(&su, "[TOOL_CALLS]x", "C[[TOOL_CALLS]x]", 0);
}
END_TEST

START_TEST(test_harmony)
{
	struct setup su = {REASONING_SYNTAX_HARMONY, REASONING_START_BEFORE, 0, NULL};
	expect(&su,
	       "<|channel|>analysis<|message|>User asks. Answer.<|end|><|start|>assistant"
	       "<|channel|>final<|message|>Hi there.<|return|>",
	       "R[User asks. Answer.]C[Hi there.]", 0);
	expect(&su, "Plain text <| not a marker", "C[Plain text <| not a marker]", 0);
	expect(&su, "<|channel|>analysis<|message|>a < b<|channel|>final<|message|>c",
	       "R[a < b]C[c]", 0);
	expect(&su, "<|channel|>analysis<|message|>cut sh", "R[cut sh]", 0);
	expect(&su, "<|channel|>analys", "C[<|channel|>analys]", 0);
}
END_TEST

/* ---------------------------------------------------------------- tool formats */

#define DS_CALL(n) "<\uff5ctool\u2581call\u2581begin\uff5c>" n
#define DS_SEP "<\uff5ctool\u2581sep\uff5c>"
#define DS_END "<\uff5ctool\u2581call\u2581end\uff5c>"
#define DS_BEGIN_ALL "<\uff5ctool\u2581calls\u2581begin\uff5c>"
#define DS_END_ALL "<\uff5ctool\u2581calls\u2581end\uff5c>"

START_TEST(test_deepseek)
{
	struct tool_set ts;
	two_tools(&ts);
	struct setup su = {REASONING_SYNTAX_THINK, REASONING_START_BEFORE, TOOL_FORMAT_DEEPSEEK,
	                   &ts};
	/* R1 / V3: the type first, fenced JSON */
	expect(&su,
	       "<think>check</think>\n\nLooking." DS_BEGIN_ALL
	           DS_CALL("function" DS_SEP "get_weather\n```json\n{\"city\": "
	                                     "\"Oslo\"}\n```" DS_END) "\n" DS_CALL(
	               "function" DS_SEP "ping\n```json\n{}\n```" DS_END) DS_END_ALL,
	       "R[check]C[Looking.]B0(get_weather)A0[{\"city\": \"Oslo\"}]E0B1(ping)A1[{}]E1", 2);
	/* V3.1: the name first, bare JSON */
	expect(&su, DS_BEGIN_ALL DS_CALL("ping" DS_SEP "{\"a\": 1}" DS_END) DS_END_ALL,
	       "B0(ping)A0[{\"a\": 1}]E0", 1);
	/* not calls */
	expect(&su, DS_CALL("launch" DS_SEP "{}") DS_END,
	       "C[" DS_CALL("launch" DS_SEP "{}") DS_END "]", 0);
	expect(&su, DS_CALL("ping and more"), "C[" DS_CALL("ping and more") "]", 0);
	expect(&su, "```python\nprint(1)\n```", "C[```python\nprint(1)\n```]", 0);
	expect(&su, DS_CALL("ping" DS_SEP "{\"a\":"), "B0(ping)A0[{\"a\":]E0", 0);
	tool_set_deinit(&ts);
}
END_TEST

START_TEST(test_mistral_args)
{
	struct tool_set ts;
	two_tools(&ts);
	struct setup su = {REASONING_SYNTAX_NONE, REASONING_START_BEFORE, TOOL_FORMAT_MISTRAL, &ts};
	expect(&su, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]ping[ARGS]{}",
	       "B0(get_weather)A0[{\"city\": \"Rome\"}]E0B1(ping)A1[{}]E1", 2);
	expect(&su, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}]", "B0(ping)A0[{}]E0", 1);
	expect(&su, "[TOOL_CALLS]ping{}", "C[[TOOL_CALLS]ping{}]", 0);
	expect(&su, "[TOOL_CALLS]ping[ARG", "C[[TOOL_CALLS]ping[ARG]", 0);
	tool_set_deinit(&ts);
}
END_TEST

START_TEST(test_command_r_calls)
{
	struct tool_set ts;
	two_tools(&ts);
	struct setup su = {REASONING_SYNTAX_COMMAND_R, REASONING_START_BEFORE,
	                   TOOL_FORMAT_COMMAND_R, &ts};
	expect(&su,
	       "<|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[\n"
	       "    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": "
	       "{\"city\": \"Lima\"}},\n    {\"tool_call_id\": \"1\", \"tool_name\": \"ping\", "
	       "\"parameters\": {}}\n]<|END_ACTION|>",
	       "R[I will look it up.]B0(get_weather)A0[{\"city\": \"Lima\"}]E0B1(ping)A1[{}]E1", 2);
	expect(&su, "<|START_ACTION|>[{\"name\": \"ping\", \"parameters\": {}}]<|END_ACTION|>",
	       "C[<|START_ACTION|>[{\"name\": \"ping\", \"parameters\": {}}]<|END_ACTION|>]", 0);
	tool_set_deinit(&ts);
}
END_TEST

START_TEST(test_harmony_calls)
{
	struct tool_set ts;
	two_tools(&ts);
	struct setup su = {REASONING_SYNTAX_HARMONY, REASONING_START_BEFORE, TOOL_FORMAT_HARMONY,
	                   &ts};
	expect(&su,
	       "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
	       "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Kyiv\"}"
	       "<|call|>",
	       "R[Need weather.]B0(get_weather)A0[{\"city\":\"Kyiv\"}]E0", 1);
	/* the recipient before the channel, as gpt-oss also writes it */
	expect(&su,
	       "<|start|>assistant to=functions.ping<|channel|>commentary json<|message|>{}"
	       "<|call|>",
	       "B0(ping)A0[{}]E0", 1);
	expect(&su, "<|channel|>final<|message|>Say to=functions.ping to call it.",
	       "C[Say to=functions.ping to call it.]", 0);
	expect(&su,
	       "<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}<|call|>",
	       "C[to=functions.nope<|message|>{}<|call|>]", 0);
	tool_set_deinit(&ts);
}
END_TEST

/* ---------------------------------------------------------------- forced calls */

/* A forced call to get_weather in format f: the constraint's text with
 * the arguments {"city":"Oslo"} is what its grammar accepts whole, and the
 * parser (after the splitter of that family) reads it back as the call. */
static void forced_round_trip(enum tool_format f, enum reasoning_syntax syn,
                              struct grammar_cache *cache, const struct vocab_trie *trie)
{
	struct tool_set ts;
	two_tools(&ts);
	ts.choice = TOOL_CHOICE_NAMED;
	ts.named = 0;
	struct tool_constraint c;
	char err[SINKD_ERR_LEN], path[128];
	ck_assert_int_eq(tool_constraint_build(f, &ts, &c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.n, 1);
	struct grammar_alt alt = {c.prefix[0], c.schema[0], c.suffix[0]};
	struct grammar *g = NULL;
	ck_assert_msg(grammar_cache_get_alts(cache, NULL, 0, &alt, 1, &g, NULL, path, sizeof(path),
	                                     err, sizeof(err)) == 0,
	              "%s", err);
	const char *args = "{\"city\":\"Oslo\"}";
	char body[256], text[512];
	if (f == TOOL_FORMAT_DEEPSEEK || f == TOOL_FORMAT_HARMONY ||
	    f == TOOL_FORMAT_MISTRAL_ARGS || f == TOOL_FORMAT_DEEPSEEK_V3_1)
		snprintf(body, sizeof(body), "%s", args);
	else if (f == TOOL_FORMAT_COMMAND_R)
		snprintf(body, sizeof(body),
		         "{\"tool_call_id\":\"0\",\"tool_name\":\"get_weather\",\"parameters\":%s}",
		         args);
	else
		snprintf(body, sizeof(body), "{\"name\":\"get_weather\",\"%s\":%s}",
		         f == TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments", args);
	snprintf(text, sizeof(text), "%s%s%s", c.prefix[0], body, c.suffix[0]);
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, trie, &m), 0);
	ck_assert_msg(grammar_matcher_accept_bytes(m, text, strlen(text)) == 0 &&
	                  grammar_matcher_can_end(m),
	              "%s: grammar refuses %s", tool_format_name(f), text);
	grammar_matcher_free(m);
	grammar_unref(g);
	struct setup su = {syn, REASONING_START_BEFORE, f, &ts};
	char want[128];
	snprintf(want, sizeof(want), "B0(get_weather)A0[%s]E0", args);
	expect(&su, text, want, 1);
	tool_constraint_deinit(&c);
	tool_set_deinit(&ts);
}

START_TEST(test_forced_calls)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *gf = NULL;
	struct tokenizer *tok = NULL;
	struct vocab_trie *trie = NULL;
	struct grammar_cache *cache = NULL;
	ck_assert_msg(gguf_open(tu_shared_path("models/stories260K.gguf"), &gf, err, sizeof(err)) ==
	                  0,
	              "%s", err);
	ck_assert_msg(tokenizer_new_from_gguf(gf, &tok, err, sizeof(err)) == 0, "%s", err);
	gguf_close(gf);
	ck_assert_msg(vocab_trie_new(tok, &trie, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(grammar_cache_new(16, &cache), 0);
	forced_round_trip(TOOL_FORMAT_HERMES, REASONING_SYNTAX_THINK, cache, trie);
	forced_round_trip(TOOL_FORMAT_GENERIC, REASONING_SYNTAX_NONE, cache, trie);
	forced_round_trip(TOOL_FORMAT_LLAMA3, REASONING_SYNTAX_NONE, cache, trie);
	forced_round_trip(TOOL_FORMAT_MISTRAL, REASONING_SYNTAX_NONE, cache, trie);
	forced_round_trip(TOOL_FORMAT_DEEPSEEK, REASONING_SYNTAX_THINK, cache, trie);
	forced_round_trip(TOOL_FORMAT_COMMAND_R, REASONING_SYNTAX_COMMAND_R, cache, trie);
	forced_round_trip(TOOL_FORMAT_HARMONY, REASONING_SYNTAX_HARMONY, cache, trie);
	forced_round_trip(TOOL_FORMAT_MISTRAL_ARGS, REASONING_SYNTAX_MISTRAL, cache, trie);
	forced_round_trip(TOOL_FORMAT_DEEPSEEK_V3_1, REASONING_SYNTAX_THINK, cache, trie);
	/* required, several tools, a name outside the JSON: one alternative each */
	struct tool_set ts;
	two_tools(&ts);
	ts.choice = TOOL_CHOICE_REQUIRED;
	struct tool_constraint c;
	ck_assert_int_eq(tool_constraint_build(TOOL_FORMAT_HARMONY, &ts, &c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.n, 2);
	ck_assert(strstr(c.prefix[1], "to=functions.ping "));
	struct grammar_alt alts[2] = {{c.prefix[0], c.schema[0], c.suffix[0]},
	                              {c.prefix[1], c.schema[1], c.suffix[1]}};
	struct grammar *g = NULL;
	ck_assert_int_eq(
	    grammar_cache_get_alts(cache, NULL, 0, alts, 2, &g, NULL, NULL, 0, err, sizeof(err)),
	    0);
	struct grammar_matcher *m = NULL;
	ck_assert_int_eq(grammar_matcher_new(g, trie, &m), 0);
	char text[256];
	snprintf(text, sizeof(text), "%s{}%s", c.prefix[1], c.suffix[1]);
	ck_assert_int_eq(grammar_matcher_accept_bytes(m, text, strlen(text)), 0);
	ck_assert(grammar_matcher_can_end(m));
	grammar_matcher_reset(m);
	snprintf(text, sizeof(text), "%s{\"city\":5}%s", c.prefix[0], c.suffix[0]);
	ck_assert_int_ne(grammar_matcher_accept_bytes(m, text, strlen(text)), 0);
	grammar_matcher_free(m);
	grammar_unref(g);
	tool_constraint_deinit(&c);
	tool_set_deinit(&ts);
	grammar_cache_free(cache);
	vocab_trie_free(trie);
	tokenizer_free(tok);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("output-formats");
	TCase *tc = tcase_create("formats");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_detect);
	tcase_add_test(tc, test_prompt_start);
	tcase_add_test(tc, test_think);
	tcase_add_test(tc, test_command_r_thinking);
	tcase_add_test(tc, test_harmony);
	tcase_add_test(tc, test_deepseek);
	tcase_add_test(tc, test_mistral_args);
	tcase_add_test(tc, test_command_r_calls);
	tcase_add_test(tc, test_harmony_calls);
	tcase_add_test(tc, test_forced_calls);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
