/* Server building blocks without a listener: listen-address parsing, API-key
 * digests, request parsing with field-naming errors, metrics text, a
 * session's JSON. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <unistd.h>
#include <errno.h>

#include "server/api.h"
#include "server/auth.h"
#include "server/listen.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/request.h"
#include "testutil.h"

START_TEST(test_listen_parse)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char err[256];
	ck_assert_int_eq(listen_parse("127.0.0.1:8443", &ss, &len, err, sizeof(err)), 0);
	ck_assert_int_eq(ss.ss_family, AF_INET);
	ck_assert_int_eq(ntohs(((struct sockaddr_in *)&ss)->sin_port), 8443);
	ck_assert_int_eq(listen_parse("[::1]:9000", &ss, &len, err, sizeof(err)), 0);
	ck_assert_int_eq(ss.ss_family, AF_INET6);
	ck_assert_int_eq(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port), 9000);
	ck_assert_int_eq(listen_parse("0.0.0.0:0", &ss, &len, err, sizeof(err)), 0);
	ck_assert_int_eq(listen_parse("*:8443", &ss, &len, err, sizeof(err)), 0);
	ck_assert_int_eq(listen_parse("localhost:1", &ss, &len, err, sizeof(err)), 0);
	ck_assert_int_eq(ss.ss_family, AF_INET);
	ck_assert_int_ne(listen_parse("127.0.0.1", &ss, &len, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "host:port"));
	ck_assert_int_ne(listen_parse("127.0.0.1:70000", &ss, &len, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "bad port"));
	ck_assert_int_ne(listen_parse("::1:8443", &ss, &len, err, sizeof(err)), 0);
	ck_assert_int_ne(listen_parse("[::1]8443", &ss, &len, err, sizeof(err)), 0);
	ck_assert_int_ne(listen_parse("example.org:80", &ss, &len, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "numeric"));
}
END_TEST

START_TEST(test_listen_in_use)
{
	int fd1 = -1, fd2 = -1, port = 0, port2 = 0;
	char err[256];
	ck_assert_int_eq(listen_open("127.0.0.1:0", 16, &fd1, &port, err, sizeof(err)), 0);
	ck_assert_int_gt(port, 0);
	char spec[64];
	snprintf(spec, sizeof(spec), "127.0.0.1:%d", port);
	ck_assert_int_ne(listen_open(spec, 16, &fd2, &port2, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "in use"));
	close(fd1);
}
END_TEST

static void digest_of(const char *key, char out[72])
{
	unsigned char d[32];
	SHA256((const unsigned char *)key, strlen(key), d);
	strcpy(out, "sha256:");
	for (int i = 0; i < 32; i++)
		sprintf(out + 7 + 2 * i, "%02x", d[i]);
}

START_TEST(test_auth)
{
	char d1[72], d2[72];
	digest_of("secret-one", d1);
	digest_of("secret-two", d2);
	char *keys[] = {d1, d2};
	struct auth_keys k;
	char err[256];
	ck_assert_int_eq(auth_keys_parse(keys, 2, &k, err, sizeof(err)), 0);
	ck_assert(auth_check(&k, "Bearer secret-one"));
	ck_assert(auth_check(&k, "bearer secret-two"));
	ck_assert(!auth_check(&k, "Bearer secret-three"));
	ck_assert(!auth_check(&k, "Bearer "));
	ck_assert(!auth_check(&k, "Basic c2VjcmV0LW9uZQ==")); /* "secret-one": no colon */
	ck_assert(!auth_check(&k, NULL));
	/* Basic (the web console's browser): the password is the key, any user. */
	ck_assert(auth_check(&k, "Basic c2lua2Q6c2VjcmV0LW9uZQ=="));  /* sinkd:secret-one */
	ck_assert(auth_check(&k, "basic  OnNlY3JldC10d28=  "));       /* :secret-two */
	ck_assert(auth_check(&k, "Basic dTpzZWNyZXQtdHdv"));          /* u:secret-two */
	ck_assert(!auth_check(&k, "Basic c2lua2Q6c2VjcmV0LXRocmVl")); /* bad key */
	ck_assert(!auth_check(&k, "Basic c2VjcmV0LW9uZTo="));         /* empty password */
	ck_assert(!auth_check(&k, "Basic c2lua2Q6c2VjcmV0LW9uZQ="));  /* cut: not base64 */
	ck_assert(!auth_check(&k, "Basic c2lua2Q6c2Vj*mV0LW9uZQ==")); /* bad character */
	ck_assert(!auth_check(&k, "Basic c2lu=2Q6c2VjcmV0LW9uZQ==")); /* padding inside */
	ck_assert(!auth_check(&k, "Basic "));
	/* a scheme is what it says: base64 of user:key is no bearer key */
	ck_assert(!auth_check(&k, "Bearer c2lua2Q6c2VjcmV0LW9uZQ=="));
	int idx = -7;
	ck_assert(auth_match(&k, "Basic eDpzZWNyZXQtdHdv", &idx));
	ck_assert_int_eq(idx, 1);
	auth_keys_deinit(&k);
	ck_assert_int_eq(auth_keys_parse(NULL, 0, &k, err, sizeof(err)), 0);
	ck_assert(auth_check(&k, NULL)); /* no keys: auth off */
	char *bad[] = {"sha256:xyz"};
	ck_assert_int_ne(auth_keys_parse(bad, 1, &k, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "server.api_keys[0]"));
}
END_TEST

static int parse(const char *body, bool chat, struct gen_args *a, struct api_error *e)
{
	return gen_args_parse(body, strlen(body), chat, 256, a, e);
}

START_TEST(test_request_ok)
{
	struct gen_args a;
	struct api_error e;
	ck_assert_int_eq(parse("{\"model\":\"m\",\"prompt\":\"Once\",\"max_tokens\":5,"
	                       "\"temperature\":0,\"top_k\":3,\"top_p\":0.5,\"min_p\":0.1,"
	                       "\"seed\":7,\"stop\":[\"a\",\"bb\"],\"stream\":true,"
	                       "\"stream_options\":{\"include_usage\":true},\"logprobs\":2,"
	                       "\"presence_penalty\":0.5,\"frequency_penalty\":-1,"
	                       "\"repeat_penalty\":1.1,\"unknown_field\":{\"x\":1}}",
	                       false, &a, &e),
	                 0);
	ck_assert_str_eq(a.model, "m");
	ck_assert_str_eq(a.prompt, "Once");
	ck_assert_int_eq(a.max_tokens, 5);
	ck_assert(a.stream && a.include_usage && a.logprobs && a.seed_given);
	ck_assert_int_eq(a.sampling.n_top_logprobs, 2);
	ck_assert_int_eq(a.sampling.top_k, 3);
	ck_assert_int_eq((int)a.sampling.seed, 7);
	ck_assert_int_eq((int)a.n_stops, 2);
	ck_assert_str_eq(a.stops[1], "bb");
	ck_assert(a.sampling.temperature == 0.0f);
	gen_args_deinit(&a);
	/* defaults: completions 16 tokens, chat up to the limit */
	ck_assert_int_eq(parse("{\"prompt\":[1,2,3]}", false, &a, &e), 0);
	ck_assert_int_eq(a.max_tokens, 16);
	ck_assert_int_eq((int)a.n_prompt_ids, 3);
	ck_assert(a.sampling.temperature == 1.0f);
	gen_args_deinit(&a);
	ck_assert_int_eq(
	    parse("{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
	          "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],"
	          "\"logprobs\":true,\"top_logprobs\":3,\"max_completion_tokens\":9}",
	          true, &a, &e),
	    0);
	ck_assert_int_eq((int)a.n_messages, 2);
	ck_assert_str_eq(a.messages[1].content, "hi");
	ck_assert_int_eq(a.max_tokens, 9);
	ck_assert_int_eq(a.sampling.n_top_logprobs, 3);
	gen_args_deinit(&a);
}
END_TEST

/* Each bad body names its field and says why. */
START_TEST(test_request_errors)
{
	static const struct {
		const char *body;
		bool chat;
		const char *param;
		const char *code;
	} cases[] = {
	    {"{\"prompt\":\"x\"", false, "", "invalid_json"},
	    {"", false, "", "invalid_json"},
	    {"[1,2]", false, "", "invalid_json"},
	    {"{}", false, "prompt", "missing_field"},
	    {"{\"prompt\":5}", false, "prompt", "invalid_type"},
	    {"{\"prompt\":[\"a\",\"b\"]}", false, "prompt", "invalid_value"},
	    {"{\"prompt\":[1,-2]}", false, "prompt", "invalid_type"},
	    {"{\"prompt\":\"x\",\"max_tokens\":0}", false, "max_tokens", "invalid_value"},
	    {"{\"prompt\":\"x\",\"max_tokens\":257}", false, "max_tokens", "invalid_value"},
	    {"{\"prompt\":\"x\",\"max_tokens\":\"5\"}", false, "max_tokens", "invalid_type"},
	    {"{\"prompt\":\"x\",\"max_tokens\":1.5}", false, "max_tokens", "invalid_type"},
	    {"{\"prompt\":\"x\",\"temperature\":\"hot\"}", false, "temperature", "invalid_type"},
	    {"{\"prompt\":\"x\",\"temperature\":3}", false, "temperature", "invalid_value"},
	    {"{\"prompt\":\"x\",\"top_p\":0}", false, "top_p", "invalid_value"},
	    {"{\"prompt\":\"x\",\"stream\":1}", false, "stream", "invalid_type"},
	    {"{\"prompt\":\"x\",\"stop\":7}", false, "stop", "invalid_type"},
	    {"{\"prompt\":\"x\",\"stop\":[\"\"]}", false, "stop", "invalid_value"},
	    {"{\"prompt\":\"x\",\"n\":2}", false, "n", "unsupported_parameter"},
	    {"{\"prompt\":\"x\",\"model\":3}", false, "model", "invalid_type"},
	    {"{\"prompt\":\"x\",\"logprobs\":21}", false, "logprobs", "invalid_value"},
	    {"{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", false,
	     "stream_options", "invalid_value"},
	    {"{\"messages\":[]}", true, "messages", "invalid_type"},
	    {"{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", true, "messages",
	     "invalid_value"},
	    {"{\"messages\":[{\"content\":\"x\"}]}", true, "messages", "invalid_type"},
	    {"{\"messages\":[{\"role\":\"user\",\"content\":5}]}", true, "messages",
	     "invalid_type"},
	    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", true,
	     "top_logprobs", "invalid_value"},
	    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":2}", true,
	     "logprobs", "invalid_type"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gen_args a;
		struct api_error e;
		ck_assert_msg(parse(cases[i].body, cases[i].chat, &a, &e) == -EINVAL, "case %zu",
		              i);
		ck_assert_int_eq(e.status, 400);
		ck_assert_msg(!strcmp(e.param, cases[i].param), "case %zu: param %s", i, e.param);
		ck_assert_msg(!strcmp(e.code, cases[i].code), "case %zu: code %s", i, e.code);
		ck_assert(strlen(e.message) > 10);
		if (cases[i].param[0])
			ck_assert_msg(strstr(e.message, cases[i].param), "case %zu: %s", i,
			              e.message);
	}
}
END_TEST

START_TEST(test_tokenize_args)
{
	struct tokenize_args t;
	struct api_error e;
	const char *b = "{\"content\":\"Hello\",\"add_special\":false}";
	ck_assert_int_eq(tokenize_args_parse(b, strlen(b), &t, &e), 0);
	ck_assert_str_eq(t.content, "Hello");
	ck_assert(!t.add_special);
	free(t.content);
	b = "{\"content\":1}";
	ck_assert_int_ne(tokenize_args_parse(b, strlen(b), &t, &e), 0);
	ck_assert_str_eq(e.param, "content");
	int32_t *ids;
	size_t n;
	b = "{\"tokens\":[1,2,300]}";
	ck_assert_int_eq(detokenize_args_parse(b, strlen(b), &ids, &n, &e), 0);
	ck_assert_int_eq((int)n, 3);
	ck_assert_int_eq(ids[2], 300);
	free(ids);
	b = "{\"tokens\":[1,\"x\"]}";
	ck_assert_int_ne(detokenize_args_parse(b, strlen(b), &ids, &n, &e), 0);
	ck_assert_str_eq(e.param, "tokens");
}
END_TEST

START_TEST(test_session_args)
{
	struct session_create_args c;
	struct append_args a;
	struct api_error e;
	ck_assert_int_eq(session_create_args_parse("", 0, &c, &e), 0);
	ck_assert_int_eq(c.window_size, 0);
	ck_assert_int_eq(c.sink_keep_count, -1);
	const char *b = "{\"window_size\":64,\"sink_keep_count\":0}";
	ck_assert_int_eq(session_create_args_parse(b, strlen(b), &c, &e), 0);
	ck_assert_int_eq(c.window_size, 64);
	ck_assert_int_eq(c.sink_keep_count, 0);
	b = "{\"window_size\":-3}";
	ck_assert_int_ne(session_create_args_parse(b, strlen(b), &c, &e), 0);
	ck_assert_str_eq(e.param, "window_size");

	b = "{\"text\":\"hello\",\"revise_last_tokens\":2}";
	ck_assert_int_eq(append_args_parse(b, strlen(b), 100, &a, &e), 0);
	ck_assert_str_eq(a.text, "hello");
	ck_assert_int_eq((int)a.revise_last_tokens, 2);
	ck_assert(!a.generate);
	append_args_deinit(&a);
	b = "{\"text\":\"x\",\"generate\":{\"max_tokens\":7,\"temperature\":0}}";
	ck_assert_int_eq(append_args_parse(b, strlen(b), 100, &a, &e), 0);
	ck_assert(a.generate && !a.gen.stream); /* whole JSON by default, as completions */
	ck_assert_int_eq(a.gen.max_tokens, 7);
	append_args_deinit(&a);
	b = "{\"text\":\"x\",\"generate\":{\"max_tokens\":700}}";
	ck_assert_int_ne(append_args_parse(b, strlen(b), 100, &a, &e), 0);
	ck_assert_str_eq(e.param, "generate.max_tokens");
	b = "{\"revise_last_tokens\":0}";
	ck_assert_int_ne(append_args_parse(b, strlen(b), 100, &a, &e), 0);
	ck_assert_str_eq(e.param, "text");
	b = "{\"text\":3}";
	ck_assert_int_ne(append_args_parse(b, strlen(b), 100, &a, &e), 0);
	ck_assert_str_eq(e.code, "invalid_type");
	struct gen_args g;
	b = "{\"prompt\":\"x\",\"session_id\":\"abc\"}";
	ck_assert_int_eq(gen_args_parse(b, strlen(b), false, 10, &g, &e), 0);
	ck_assert_str_eq(g.session_id, "abc");
	gen_args_deinit(&g);
}
END_TEST

/* Text with a NUL byte (a byte token 0x00) goes out whole, as \u0000. */
START_TEST(test_output_nul)
{
	struct oa_ctx c = {.chat = false, .id = "cmpl-1", .model = "m", .created = 1};
	static const char text[] = "Once\0 upon \"a\"\n\x01time";
	cJSON *o = oa_final(&c, text, sizeof(text) - 1, NULL, "stop", 6, 0, 1);
	char *s = cJSON_PrintUnformatted(o);
	ck_assert_ptr_nonnull(strstr(s, "\"text\":\"Once\\u0000 upon \\\"a\\\"\\n\\u0001time\""));
	cJSON *back = cJSON_Parse(s);
	ck_assert_ptr_nonnull(back); /* still valid JSON */
	cJSON_Delete(back);
	free(s);
	cJSON_Delete(o);
	c.chat = true;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	ck_assert_int_eq(sse_append(&buf, &len, &cap, oa_chunk(&c, "\0x", 2, true, NULL, NULL)), 0);
	ck_assert_ptr_nonnull(strstr(buf, "\"content\":\"\\u0000x\""));
	ck_assert_uint_eq(strlen(buf), len);
	free(buf);
	/* text without a NUL stays a plain cJSON string */
	cJSON *j = oa_string_n("abc", 2);
	ck_assert(cJSON_IsString(j));
	ck_assert_str_eq(j->valuestring, "ab");
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_metrics_text)
{
	struct metrics *m;
	ck_assert_int_eq(metrics_new(&m), 0);
	metrics_request(m, EP_COMPLETIONS, 200);
	metrics_request(m, EP_COMPLETIONS, 200);
	metrics_request(m, EP_COMPLETIONS, 400);
	metrics_tokens(m, 10, 5);
	metrics_ttft(m, 0.003);
	metrics_inter_token(m, 0.0007);
	metrics_streams_add(m, 2);
	metrics_streams_add(m, -1);
	metrics_deadline_close(m, DEADLINE_REQUEST);
	metrics_deadline_close(m, DEADLINE_REQUEST);
	metrics_deadline_close(m, DEADLINE_COUNT); /* not a deadline: ignored */
	size_t len;
	char *t = metrics_render(m, 1, &len);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq((int)strlen(t), (int)len);
	ck_assert_ptr_nonnull(strstr(t, "sinkd_http_requests_total{endpoint=\"/v1/completions\","
	                                "status=\"200\"} 2\n"));
	ck_assert_ptr_nonnull(strstr(t, "status=\"400\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(t, "sinkd_tokens_in_total 10\n"));
	ck_assert_ptr_nonnull(strstr(t, "sinkd_tokens_out_total 5\n"));
	ck_assert_ptr_nonnull(
	    strstr(t, "sinkd_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"));
	ck_assert_ptr_nonnull(
	    strstr(t, "sinkd_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(t, "sinkd_inter_token_latency_seconds_count 1\n"));
	ck_assert_ptr_nonnull(strstr(t, "sinkd_open_streams 1\n"));
	ck_assert_ptr_nonnull(strstr(t, "# TYPE sinkd_http_requests_total counter\n"));
	ck_assert_ptr_nonnull(
	    strstr(t, "sinkd_http_deadline_closes_total{deadline=\"handshake\"} 0\n"));
	ck_assert_ptr_nonnull(
	    strstr(t, "sinkd_http_deadline_closes_total{deadline=\"request\"} 2\n"));
	ck_assert_ptr_nonnull(strstr(t, "sinkd_http_deadline_closes_total{deadline=\"idle\"} 0\n"));
	free(t);
	metrics_free(m);
}
END_TEST

/* GET /v1/sessions/{id}: shared_prefix_tokens beside pinned_tokens, as the
 * scheduler reports them (0 for a session that shares nothing). */
START_TEST(test_session_json_shared_prefix)
{
	struct sched_session_info in = {.n_seen = 900,
	                                .n_sink = 700,
	                                .pinned_tokens = 690,
	                                .sink_keep_count = 700,
	                                .shared_prefix_tokens = 700};
	for (int shared = 700; shared >= 0; shared -= 700) {
		in.shared_prefix_tokens = shared;
		cJSON *o = api_session_json("0123456789abcdef-s1", &in);
		ck_assert_str_eq(cJSON_GetObjectItem(o, "id")->valuestring, "s1");
		ck_assert_double_eq(cJSON_GetObjectItem(o, "pinned_tokens")->valuedouble, 690);
		cJSON *v = cJSON_GetObjectItem(o, "shared_prefix_tokens");
		ck_assert(cJSON_IsNumber(v));
		ck_assert_double_eq(v->valuedouble, shared);
		cJSON_Delete(o);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("server-parts");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_listen_parse);
	tcase_add_test(tc, test_listen_in_use);
	tcase_add_test(tc, test_auth);
	tcase_add_test(tc, test_request_ok);
	tcase_add_test(tc, test_request_errors);
	tcase_add_test(tc, test_tokenize_args);
	tcase_add_test(tc, test_session_args);
	tcase_add_test(tc, test_output_nul);
	tcase_add_test(tc, test_metrics_text);
	tcase_add_test(tc, test_session_json_shared_prefix);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
