/* Chat templates: detection from the real template texts (the phi-3 one
 * read from shared/vocab's GGUF through our GGUF reader and tokenizer), the
 * exact rendering of each family for a system+user+assistant+user
 * conversation (worked out by hand from the reference Jinja templates), the
 * plain fallback that stories260K gets, and the errors. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"
#include "testutil.h"

/* The reference templates (tokenizer_config.json of each model). */
static const char tmpl_llama2[] =
	"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
	"system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% "
	"set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
	"(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
	"roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == "
	"0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
	"'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] "
	"%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() "
	"+ ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
	"eos_token }}{% endif %}{% endfor %}";
static const char tmpl_llama3[] =
	"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
	"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
	"trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
	"endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
	"'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
static const char tmpl_chatml[] =
	"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
	"message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
	"'<|im_start|>assistant\n' }}{% endif %}";
static const char tmpl_mistral[] =
	"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
	"(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
	"user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
	"'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
	"message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
	"roles are supported!') }}{% endif %}{% endfor %}";
static const char tmpl_zephyr[] =
	"{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
	"message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
	"'<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == "
	"'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% "
	"if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor "
	"%}";
static const char tmpl_gemma[] =
	"{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
	"not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
	"'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
	"user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') "
	"%}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
	"'<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% "
	"endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

static const struct chat_message convo[] = {
	{"system", "You are a helpful storyteller."},
	{"user", "Tell me a story."},
	{"assistant", "Once upon a time, there was a cat."},
	{"user", "What was its name?"},
};

static char *apply_ok(enum chat_family fam, const struct chat_message *m, size_t n)
{
	char *out = NULL, err[SINKD_ERR_LEN] = "";
	int rc = chat_template_apply(fam, m, n, &out, NULL, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s: %s", chat_family_name(fam), err);
	return out;
}

static void expect_render(const char *tmpl, enum chat_family fam, const char *want)
{
	ck_assert_int_eq(chat_template_detect(tmpl), fam);
	char *got = apply_ok(fam, convo, 4);
	ck_assert_str_eq(got, want);
	free(got);
}

START_TEST(test_llama2)
{
	expect_render(tmpl_llama2, CHAT_FAMILY_LLAMA2,
		      "[INST] <<SYS>>\nYou are a helpful storyteller.\n<</SYS>>\n\nTell me a story. "
		      "[/INST] Once upon a time, there was a cat. </s><s>[INST] What was its name? "
		      "[/INST]");
}
END_TEST

START_TEST(test_llama3)
{
	expect_render(tmpl_llama3, CHAT_FAMILY_LLAMA3,
		      "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
		      "storyteller.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nTell me a "
		      "story.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nOnce upon a "
		      "time, there was a cat.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat "
		      "was its name?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}
END_TEST

START_TEST(test_chatml)
{
	expect_render(tmpl_chatml, CHAT_FAMILY_CHATML,
		      "<|im_start|>system\nYou are a helpful storyteller.<|im_end|>\n<|im_start|>user\n"
		      "Tell me a story.<|im_end|>\n<|im_start|>assistant\nOnce upon a time, there was a "
		      "cat.<|im_end|>\n<|im_start|>user\nWhat was its name?<|im_end|>\n"
		      "<|im_start|>assistant\n");
}
END_TEST

START_TEST(test_mistral)
{
	/* No system role in the template: folded into the first user turn. */
	expect_render(tmpl_mistral, CHAT_FAMILY_MISTRAL,
		      "[INST] You are a helpful storyteller.\n\nTell me a story. [/INST]Once upon a "
		      "time, there was a cat.</s>[INST] What was its name? [/INST]");
}
END_TEST

START_TEST(test_zephyr)
{
	expect_render(tmpl_zephyr, CHAT_FAMILY_ZEPHYR,
		      "<|system|>\nYou are a helpful storyteller.</s>\n<|user|>\nTell me a "
		      "story.</s>\n<|assistant|>\nOnce upon a time, there was a cat.</s>\n<|user|>\n"
		      "What was its name?</s>\n<|assistant|>\n");
}
END_TEST

START_TEST(test_gemma)
{
	expect_render(tmpl_gemma, CHAT_FAMILY_GEMMA,
		      "<start_of_turn>user\nYou are a helpful storyteller.\n\nTell me a "
		      "story.<end_of_turn>\n<start_of_turn>model\nOnce upon a time, there was a "
		      "cat.<end_of_turn>\n<start_of_turn>user\nWhat was its "
		      "name?<end_of_turn>\n<start_of_turn>model\n");
}
END_TEST

static struct gguf_file *open_shared(const char *rel)
{
	char err[SINKD_ERR_LEN];
	struct gguf_file *f = NULL;
	ck_assert_msg(gguf_open(tu_shared_path(rel), &f, err, sizeof(err)) == 0, "%s", err);
	return f;
}

/* The real Phi-3-mini template, from the phi-3 vocabulary GGUF. */
START_TEST(test_phi3_real_template)
{
	struct gguf_file *f = open_shared("vocab/ggml-vocab-phi-3.gguf");
	struct tokenizer *tok = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(tokenizer_new_from_gguf(f, &tok, err, sizeof(err)) == 0, "%s", err);
	const char *tmpl = tokenizer_chat_template(tok);
	ck_assert_ptr_nonnull(tmpl);
	expect_render(tmpl, CHAT_FAMILY_PHI3,
		      "<|system|>\nYou are a helpful storyteller.<|end|>\n<|user|>\nTell me a "
		      "story.<|end|>\n<|assistant|>\nOnce upon a time, there was a cat.<|end|>\n"
		      "<|user|>\nWhat was its name?<|end|>\n<|assistant|>\n");
	/* What that template itself renders for user/assistant/user (it drops
	 * system messages; we keep them, as the later Phi-3 template does). */
	char *got = apply_ok(CHAT_FAMILY_PHI3, convo + 1, 3);
	ck_assert_str_eq(got, "<|user|>\nTell me a story.<|end|>\n<|assistant|>\nOnce upon a time, "
			      "there was a cat.<|end|>\n<|user|>\nWhat was its name?<|end|>\n"
			      "<|assistant|>\n");
	free(got);
	/* The end-of-turn text is one of the model's tokens. */
	ck_assert_int_ge(tokenizer_find_token(tok, chat_family_end_of_turn(CHAT_FAMILY_PHI3)), 0);
	ck_assert_int_ge(tokenizer_find_token(tok, "<|assistant|>"), 0);
	tokenizer_free(tok);
	gguf_close(f);
}
END_TEST

/* stories260K has no template: the plain fallback lets it continue text. */
START_TEST(test_plain_fallback_stories)
{
	struct gguf_file *f = open_shared("models/stories260K.gguf");
	struct tokenizer *tok = NULL;
	char err[SINKD_ERR_LEN];
	ck_assert_msg(tokenizer_new_from_gguf(f, &tok, err, sizeof(err)) == 0, "%s", err);
	enum chat_family fam = chat_template_detect(tokenizer_chat_template(tok));
	ck_assert_int_eq(fam, CHAT_FAMILY_NONE);
	ck_assert_ptr_null(chat_family_end_of_turn(fam));
	char *got = apply_ok(fam, convo, 4);
	ck_assert_str_eq(got, "You are a helpful storyteller.\nTell me a story.\nOnce upon a time, "
			      "there was a cat.\nWhat was its name?");
	free(got);
	const struct chat_message late_system[] = {
		{"user", "Once upon a time"}, {"system", "Be kind."}, {"user", "there was"}};
	got = apply_ok(fam, late_system, 3);
	ck_assert_str_eq(got, "Be kind.\nOnce upon a time\nthere was");
	free(got);
	got = apply_ok(CHAT_FAMILY_UNKNOWN, late_system, 1);
	ck_assert_str_eq(got, "Once upon a time");
	free(got);
	tokenizer_free(tok);
	gguf_close(f);
}
END_TEST

START_TEST(test_trim_rules)
{
	const struct chat_message m[] = {{"user", "  Hi there \n"}};
	const struct {
		enum chat_family fam;
		const char *want;
	} cases[] = {
		{CHAT_FAMILY_LLAMA3, "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
				     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{CHAT_FAMILY_GEMMA, "<start_of_turn>user\nHi there<end_of_turn>\n"
				    "<start_of_turn>model\n"},
		{CHAT_FAMILY_LLAMA2, "[INST] Hi there [/INST]"},
		{CHAT_FAMILY_CHATML, "<|im_start|>user\n  Hi there \n<|im_end|>\n"
				     "<|im_start|>assistant\n"},
		{CHAT_FAMILY_MISTRAL, "[INST]   Hi there \n [/INST]"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = apply_ok(cases[i].fam, m, 1);
		ck_assert_str_eq(got, cases[i].want);
		free(got);
	}
}
END_TEST

START_TEST(test_detect)
{
	ck_assert_int_eq(chat_template_detect(NULL), CHAT_FAMILY_NONE);
	ck_assert_int_eq(chat_template_detect(""), CHAT_FAMILY_NONE);
	ck_assert_int_eq(chat_template_detect("{% for m in messages %}{{ m.content }}{% endfor %}"),
			 CHAT_FAMILY_UNKNOWN);
	/* Phi-4: ChatML's markers with another separator, not ChatML. */
	ck_assert_int_eq(chat_template_detect("{{'<|im_start|>' + message['role'] + "
					      "'<|im_sep|>' + message['content'] + '<|im_end|>'}}"),
			 CHAT_FAMILY_UNKNOWN);
	enum chat_family fam;
	for (int f = CHAT_FAMILY_NONE; f < CHAT_FAMILY_UNKNOWN; f++) {
		ck_assert_int_eq(chat_family_parse(chat_family_name(f), &fam, NULL, 0), 0);
		ck_assert_int_eq(fam, f);
	}
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(chat_family_parse("vicuna", &fam, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "vicuna"));
	ck_assert_str_eq(chat_family_end_of_turn(CHAT_FAMILY_LLAMA3), "<|eot_id|>");
	ck_assert_str_eq(chat_family_end_of_turn(CHAT_FAMILY_CHATML), "<|im_end|>");
	ck_assert_str_eq(chat_family_end_of_turn(CHAT_FAMILY_GEMMA), "<end_of_turn>");
}
END_TEST

static void expect_error(enum chat_family fam, const struct chat_message *m, size_t n,
			 const char *needle)
{
	char *out = (char *)1, err[SINKD_ERR_LEN] = "";
	ck_assert_int_eq(chat_template_apply(fam, m, n, &out, NULL, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(out);
	ck_assert_msg(strstr(err, needle) != NULL, "'%s' lacks '%s'", err, needle);
}

START_TEST(test_errors)
{
	expect_error(CHAT_FAMILY_CHATML, convo, 0, "empty");
	const struct chat_message tool[] = {{"user", "hi"}, {"tool", "42"}};
	expect_error(CHAT_FAMILY_CHATML, tool, 2, "unknown role 'tool'");
	expect_error(CHAT_FAMILY_NONE, tool, 2, "message 1");
	const struct chat_message nocontent[] = {{"user", NULL}};
	expect_error(CHAT_FAMILY_LLAMA3, nocontent, 1, "no content");
	const struct chat_message twice[] = {{"user", "a"}, {"user", "b"}};
	expect_error(CHAT_FAMILY_MISTRAL, twice, 2, "alternate");
	expect_error(CHAT_FAMILY_GEMMA, convo + 2, 2, "starting with user");
	const struct chat_message late_sys[] = {{"user", "a"}, {"system", "b"}};
	expect_error(CHAT_FAMILY_LLAMA2, late_sys, 2, "only as the first");
	expect_error(CHAT_FAMILY_GEMMA, convo, 1, "needs a user message");
	/* The tagged families take any order. */
	char *out = apply_ok(CHAT_FAMILY_CHATML, twice, 2);
	free(out);
}
END_TEST

/* The pinned prefix (inference.cache.pin_system_prompt): the system part and
 * the template text before the first user turn, per family. */
START_TEST(test_system_end)
{
	static const struct {
		enum chat_family fam;
		const char *prefix;
	} want[] = {
	    {CHAT_FAMILY_LLAMA2, "[INST] <<SYS>>\nYou are a helpful storyteller.\n<</SYS>>\n\n"},
	    {CHAT_FAMILY_LLAMA3,
	     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful storyteller.<|eot_id|>"},
	    {CHAT_FAMILY_CHATML, "<|im_start|>system\nYou are a helpful storyteller.<|im_end|>\n"},
	    {CHAT_FAMILY_MISTRAL, "[INST] You are a helpful storyteller.\n\n"},
	    {CHAT_FAMILY_ZEPHYR, "<|system|>\nYou are a helpful storyteller.</s>\n"},
	    {CHAT_FAMILY_GEMMA, "<start_of_turn>user\nYou are a helpful storyteller.\n\n"},
	    {CHAT_FAMILY_PHI3, "<|system|>\nYou are a helpful storyteller.<|end|>\n"},
	    {CHAT_FAMILY_NONE, "You are a helpful storyteller.\n"},
	};
	char err[SINKD_ERR_LEN];
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char *out = NULL;
		size_t end = 99;
		ck_assert_int_eq(chat_template_apply(want[i].fam, convo, 4, &out, &end, err, sizeof(err)), 0);
		ck_assert_msg(end == strlen(want[i].prefix) && !strncmp(out, want[i].prefix, end),
		              "%s: system part ends at %zu in \"%s\"", chat_family_name(want[i].fam), end,
		              out);
		free(out);
		/* without a system message nothing is pinned */
		size_t none = 99;
		ck_assert_int_eq(chat_template_apply(want[i].fam, convo + 1, 3, &out, &none, err, sizeof(err)), 0);
		ck_assert_uint_eq(none, 0);
		free(out);
	}
	/* two leading system messages: both; one after a user turn: not pinned */
	const struct chat_message two[] = {{"system", "A."}, {"system", "B."}, {"user", "Hi"},
	                                   {"system", "C."}};
	char *out = NULL;
	size_t end = 0;
	ck_assert_int_eq(chat_template_apply(CHAT_FAMILY_CHATML, two, 4, &out, &end, err, sizeof(err)), 0);
	ck_assert_str_eq(out + end, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nC.<|im_end|>\n"
	                            "<|im_start|>assistant\n");
	free(out);
	/* plain: every system text goes first, then the "\n" */
	ck_assert_int_eq(chat_template_apply(CHAT_FAMILY_NONE, two, 4, &out, &end, err, sizeof(err)), 0);
	ck_assert_str_eq(out + end, "Hi");
	ck_assert_uint_eq(end, strlen("A.\nB.\nC.\n"));
	free(out);
	/* a folded system text loses its leading space to the trim, the mark follows */
	const struct chat_message spaced[] = {{"system", "  Be brief."}, {"user", "Hi"}};
	ck_assert_int_eq(chat_template_apply(CHAT_FAMILY_GEMMA, spaced, 2, &out, &end, err, sizeof(err)), 0);
	ck_assert_str_eq(out + end, "Hi<end_of_turn>\n<start_of_turn>model\n");
	free(out);
	/* a system message alone: the whole plain prompt */
	ck_assert_int_eq(chat_template_apply(CHAT_FAMILY_NONE, two, 1, &out, &end, err, sizeof(err)), 0);
	ck_assert_uint_eq(end, strlen(out));
	free(out);
}
END_TEST

/* Without tools, chat_template_apply_tools renders what chat_template_apply
 * does, in every family; it also takes "developer" (as system) and "tool",
 * which chat_template_apply still refuses. */
START_TEST(test_apply_tools_without_tools)
{
	char err[SINKD_ERR_LEN];
	for (int fam = CHAT_FAMILY_NONE; fam <= CHAT_FAMILY_UNKNOWN; fam++) {
		char *a = NULL, *b = NULL;
		size_t end_a = 1, end_b = 2;
		ck_assert_int_eq(chat_template_apply(fam, convo, 4, &a, &end_a, err, sizeof(err)), 0);
		ck_assert_int_eq(chat_template_apply_tools(fam, NULL, convo, 4, &b, &end_b, err,
		                                           sizeof(err)),
		                 0);
		ck_assert_str_eq(a, b);
		ck_assert_uint_eq(end_a, end_b);
		free(b);
		struct chat_message dev[4];
		memcpy(dev, convo, sizeof(dev));
		dev[0].role = "developer";
		ck_assert_int_eq(chat_template_apply_tools(fam, NULL, dev, 4, &b, NULL, err,
		                                           sizeof(err)),
		                 0);
		ck_assert_str_eq(a, b);
		free(a);
		free(b);
	}
	const struct chat_message dev[] = {{"developer", "x"}, {"user", "hi"}};
	expect_error(CHAT_FAMILY_CHATML, dev, 2, "unknown role 'developer'");
	const struct chat_message tool[] = {{"user", "hi"}, {"tool", "42"}};
	char *out = NULL;
	ck_assert_int_eq(chat_template_apply_tools(CHAT_FAMILY_CHATML, NULL, tool, 2, &out, NULL, err,
	                                           sizeof(err)),
	                 0);
	ck_assert_str_eq(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>user\n<tool_response>\n42"
	                      "\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
	free(out);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("chat-template");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_llama2);
	tcase_add_test(tc, test_llama3);
	tcase_add_test(tc, test_chatml);
	tcase_add_test(tc, test_mistral);
	tcase_add_test(tc, test_zephyr);
	tcase_add_test(tc, test_gemma);
	tcase_add_test(tc, test_phi3_real_template);
	tcase_add_test(tc, test_plain_fallback_stories);
	tcase_add_test(tc, test_trim_rules);
	tcase_add_test(tc, test_detect);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_system_end);
	tcase_add_test(tc, test_apply_tools_without_tools);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
