/* The server object on a real TLS listener on 127.0.0.1 (certificate made
 * with the openssl CLI), before any engine is attached: /health answers,
 * /ready and the API say "loading" (503), draining turns /ready to
 * "draining", stop releases the port; start-up errors leave nothing behind.
 * The connection layer: malformed framing, long targets and big header
 * blocks refused with our JSON error before routing, authentication before
 * 404/405, the handshake deadline, the per-address cap, and the reserve
 * that keeps /health answering at server.max_connections. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "server/listen.h"
#include "server/server.h"
#include "testutil.h"

static char dir[] = "/tmp/sinkd-test-http-XXXXXX";
static char cert[256], key[256];

static int make_cert(void)
{
	if (!mkdtemp(dir))
		return -1;
	snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
	         "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
	         "-subj /CN=localhost -keyout %s -out %s 2>/dev/null",
	         key, cert);
	return system(cmd) == 0 ? 0 : -1;
}

static int free_port(void)
{
	int fd, port;
	char err[256];
	ck_assert_int_eq(listen_open("127.0.0.1:0", 1, &fd, &port, err, sizeof(err)), 0);
	close(fd);
	return port;
}

static void config_for(struct sinkd_config *c, int port)
{
	ck_assert_int_eq(config_init_defaults(c), 0);
	char listen[64];
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	free(c->server.listen);
	free(c->server.tls_cert_file);
	free(c->server.tls_key_file);
	c->server.listen = strdup(listen);
	c->server.tls_cert_file = strdup(cert);
	c->server.tls_key_file = strdup(key);
	c->server.tls_enabled = true;
}

/* curl with extra arguments: returns the status; the body into out. */
static int curl_with(int port, const char *args, const char *path, char *out, size_t out_len)
{
	static char cmd[40000];
	snprintf(cmd, sizeof(cmd),
	         "curl -sk --max-time 5 --path-as-is -D %s/hdr -o %s/body -w '%%{http_code}' %s "
	         "'https://127.0.0.1:%d%s'",
	         dir, dir, args, port, path);
	FILE *p = popen(cmd, "r");
	int status = 0;
	if (fscanf(p, "%d", &status) != 1)
		status = -1;
	pclose(p);
	char path_body[300];
	snprintf(path_body, sizeof(path_body), "%s/body", dir);
	FILE *f = fopen(path_body, "r");
	out[0] = '\0';
	if (f) {
		if (!fgets(out, (int)out_len, f))
			out[0] = '\0';
		fclose(f);
	}
	return status;
}

/* curl: returns the status; body (first line) into out. */
static int get(int port, const char *method, const char *path, char *out, size_t out_len)
{
	char args[64];
	snprintf(args, sizeof(args), "-X %s", method);
	return curl_with(port, args, path, out, out_len);
}

START_TEST(test_lifecycle_before_engine)
{
	int port = free_port();
	struct sinkd_config c;
	config_for(&c, port);
	struct server *s = NULL;
	char err[512], body[512];
	ck_assert_int_eq(server_new(&c, NULL, &s, err, sizeof(err)), 0);
	ck_assert_int_eq(server_port(s), port);
	ck_assert_int_eq(get(port, "GET", "/health", body, sizeof(body)), 200);
	ck_assert_str_eq(body, "{\"status\":\"ok\"}");
	ck_assert_int_eq(get(port, "GET", "/ready", body, sizeof(body)), 503);
	ck_assert_str_eq(body, "{\"status\":\"loading\"}");
	ck_assert_int_eq(get(port, "POST", "/v1/completions", body, sizeof(body)), 503);
	ck_assert_ptr_nonnull(strstr(body, "\"code\":\"loading\""));
	ck_assert_int_eq(get(port, "GET", "/v1/models", body, sizeof(body)), 503);
	ck_assert_int_eq(get(port, "GET", "/metrics", body, sizeof(body)), 200);
	ck_assert_int_eq(get(port, "PUT", "/ready", body, sizeof(body)), 405);
	server_drain_begin(s);
	ck_assert_int_eq(get(port, "GET", "/ready", body, sizeof(body)), 503);
	ck_assert_str_eq(body, "{\"status\":\"draining\"}");
	ck_assert_int_eq(get(port, "GET", "/health", body, sizeof(body)), 200);
	server_stop(s);
	ck_assert_int_ne(get(port, "GET", "/health", body, sizeof(body)), 200);
	server_free(s);
	/* The port is free again: a new server binds it. */
	ck_assert_int_eq(server_new(&c, NULL, &s, err, sizeof(err)), 0);
	server_free(s);
	config_deinit(&c);
}
END_TEST

START_TEST(test_start_errors)
{
	int port = free_port();
	struct sinkd_config c;
	config_for(&c, port);
	struct server *s = NULL, *s2 = NULL;
	char err[512];
	ck_assert_int_eq(server_new(&c, NULL, &s, err, sizeof(err)), 0);
	ck_assert_int_ne(server_new(&c, NULL, &s2, err, sizeof(err)), 0);
	ck_assert_ptr_null(s2);
	ck_assert_ptr_nonnull(strstr(err, "in use"));
	server_free(s);

	free(c.server.tls_key_file);
	c.server.tls_key_file = strdup(cert); /* a certificate is not a key */
	ck_assert_int_ne(server_new(&c, NULL, &s2, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "server.tls.key_file"));
	free(c.server.listen);
	c.server.listen = strdup("[::1]8443");
	free(c.server.tls_key_file);
	c.server.tls_key_file = strdup(key);
	ck_assert_int_ne(server_new(&c, NULL, &s2, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "server.listen"));
	config_deinit(&c);
}
END_TEST


static bool has_code(const char *body, const char *code)
{
	char want[128];
	snprintf(want, sizeof(want), "\"code\":\"%s\"", code);
	return strstr(body, want) && strstr(body, "\"type\":\"invalid_request_error\"") &&
	       strstr(body, "\"message\":");
}

START_TEST(test_framing_and_auth_order)
{
	int port = free_port();
	struct sinkd_config c;
	config_for(&c, port);
	c.server.max_uri_bytes = 1024;
	c.server.max_header_bytes = 4096;
	c.server.max_headers = 20;
	/* The digest of "k1": printf %s k1 | sha256sum. */
	free(c.server.api_keys);
	c.server.api_keys = calloc(1, sizeof(char *));
	c.server.api_keys[0] =
	    strdup("sha256:6ab9f1eb8f7d3388f4f9d586f66e99fd54080df2c446f0e58668b09c08a16dd0");
	c.server.n_api_keys = 1;
	struct server *s = NULL;
	char err[512], body[1024];
	int rc = server_new(&c, NULL, &s, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_int_eq(curl_with(port, "-H 'Host:'", "/health", body, sizeof(body)), 400);
	ck_assert_msg(has_code(body, "malformed_request"), "%s", body);
	ck_assert_int_eq(curl_with(port, "", "/v1/completions%00", body, sizeof(body)), 400);
	ck_assert_msg(has_code(body, "invalid_path"), "%s", body);
	char path[1200] = "/health?";
	memset(path + 8, 'a', 1024 - 8 + 1);
	path[1025] = '\0';
	ck_assert_int_eq(curl_with(port, "", path, body, sizeof(body)), 414);
	ck_assert_msg(has_code(body, "uri_too_long"), "%s", body);
	path[1024] = '\0'; /* exactly max_uri_bytes */
	ck_assert_int_eq(curl_with(port, "", path, body, sizeof(body)), 200);
	char args[5000] = "-H 'X-Pad: ";
	size_t n = strlen(args);
	memset(args + n, 'a', 4096);
	strcpy(args + n + 4096, "'");
	ck_assert_int_eq(curl_with(port, args, "/health", body, sizeof(body)), 431);
	ck_assert_msg(has_code(body, "headers_too_large"), "%s", body);
	args[0] = '\0';
	for (int i = 0; i < 20; i++)
		snprintf(args + strlen(args), sizeof(args) - strlen(args), "-H 'X-H%d: 1' ", i);
	ck_assert_int_eq(curl_with(port, args, "/health", body, sizeof(body)), 431);
	ck_assert_int_eq(curl_with(port, "-H 'Content-Length: 2' -H 'Content-Length: 3' -d '{}'",
	                           "/tokenize", body, sizeof(body)),
	                 400);
	ck_assert_msg(has_code(body, "malformed_request"), "%s", body);
	/* Routes are not told to a client without the key. */
	ck_assert_int_eq(curl_with(port, "", "/v1/nothing", body, sizeof(body)), 401);
	ck_assert_int_eq(curl_with(port, "-X DELETE", "/v1/completions", body, sizeof(body)), 401);
	ck_assert_int_eq(
	    curl_with(port, "-H 'Authorization: Bearer k1'", "/v1/nothing", body, sizeof(body)),
	    404);
	ck_assert_int_eq(curl_with(port, "-X DELETE -H 'Authorization: Bearer k1'",
	                           "/v1/completions", body, sizeof(body)),
	                 405);
	ck_assert_int_eq(curl_with(port, "-X POST", "/health", body, sizeof(body)), 405);
	server_free(s);
	config_deinit(&c);
}
END_TEST

/* A TCP connection to 127.0.0.1:port from `src` that sends nothing. */
static int silent_connect(int port, const char *src)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	inet_pton(AF_INET, src, &a.sin_addr);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	a.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* Seconds until the server closes fd (-1 past `limit`). */
static double seconds_to_close(int fd, double limit)
{
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (poll(&p, 1, (int)(limit * 1000)) <= 0)
		return -1;
	char b[16];
	if (recv(fd, b, sizeof(b), 0) > 0)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

START_TEST(test_handshake_deadline_and_address_cap)
{
	int port = free_port();
	struct sinkd_config c;
	config_for(&c, port);
	c.server.handshake_timeout_s = 1;
	c.server.max_connections_per_address = 2;
	struct server *s = NULL;
	char err[512];
	ck_assert_int_eq(server_new(&c, NULL, &s, err, sizeof(err)), 0);
	int a = silent_connect(port, "127.0.0.2");
	int b = silent_connect(port, "127.0.0.2");
	int over = silent_connect(port, "127.0.0.2");
	double t_over = seconds_to_close(over, 0.5);
	ck_assert_msg(t_over >= 0, "the third connection from one address stays open");
	double t_a = seconds_to_close(a, 5.0);
	ck_assert_msg(t_a >= 0.4 && t_a <= 2.5, "silent connection closed after %.2f s", t_a);
	ck_assert_double_ge(seconds_to_close(b, 2.0), 0);
	close(a);
	close(b);
	close(over);
	server_free(s);
	config_deinit(&c);
}
END_TEST

START_TEST(test_health_reserve)
{
	int port = free_port();
	struct sinkd_config c;
	config_for(&c, port);
	c.server.max_connections = 3;
	struct server *s = NULL;
	char err[512], body[512];
	ck_assert_int_eq(server_new(&c, NULL, &s, err, sizeof(err)), 0);
	ck_assert_int_eq(curl_with(port, "", "/v1/models", body, sizeof(body)), 503);
	ck_assert_ptr_nonnull(strstr(body, "\"code\":\"loading\""));
	int fds[3];
	for (int i = 0; i < 3; i++)
		fds[i] = silent_connect(port, "127.0.0.1");
	usleep(300 * 1000); /* accepted by then */
	ck_assert_int_eq(curl_with(port, "", "/health", body, sizeof(body)), 200);
	ck_assert_int_eq(curl_with(port, "", "/v1/models", body, sizeof(body)), 503);
	ck_assert_msg(strstr(body, "\"code\":\"too_many_connections\""), "%s", body);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	usleep(300 * 1000);
	ck_assert_int_eq(curl_with(port, "", "/v1/models", body, sizeof(body)), 503);
	ck_assert_ptr_nonnull(strstr(body, "\"code\":\"loading\""));
	server_free(s);
	config_deinit(&c);
}
END_TEST

int main(void)
{
	if (make_cert()) {
		fprintf(stderr, "cannot make a certificate with the openssl CLI\n");
		return EXIT_FAILURE;
	}
	Suite *su = suite_create("server-http");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_lifecycle_before_engine);
	tcase_add_test(tc, test_start_errors);
	tcase_add_test(tc, test_framing_and_auth_order);
	tcase_add_test(tc, test_handshake_deadline_and_address_cap);
	tcase_add_test(tc, test_health_reserve);
	suite_add_tcase(su, tc);
	int failed = tu_suite_failures(su);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		failed++;
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
