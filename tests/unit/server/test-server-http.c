/* The server object on a real TLS listener on 127.0.0.1 (certificate made
 * with the openssl CLI), before any engine is attached: /health answers,
 * /ready and the API say "loading" (503), draining turns /ready to
 * "draining", stop releases the port; start-up errors leave nothing behind. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* curl: returns the status; body (first line) into out. */
static int get(int port, const char *method, const char *path, char *out, size_t out_len)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd),
	         "curl -sk --max-time 5 -X %s -D %s/hdr -o %s/body -w '%%{http_code}' "
	         "https://127.0.0.1:%d%s",
	         method, dir, dir, port, path);
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
	suite_add_tcase(su, tc);
	int failed = tu_suite_failures(su);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		failed++;
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
