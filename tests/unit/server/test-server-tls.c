/* Certificate loading and rotation: tls_creds_load accepts a good pair and a
 * whole chain and refuses a mismatched key, garbage and an expired
 * certificate with messages that name the config key and the file; the
 * store's references keep swapped-out credentials usable; and on a real TLS
 * listener on 127.0.0.1 (files made with the openssl CLI and API, a GnuTLS
 * client here) a reload presents the new certificate to new handshakes while
 * a connection opened before keeps working, and a refused reload changes
 * nothing (certificate and API keys). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "config/config.h"
#include "server/listen.h"
#include "server/server.h"
#include "server/tls.h"
#include "testutil.h"
#include "util/log.h"

static char dir[] = "/tmp/sinkd-test-tls-XXXXXX";

/* dir/name in a static ring of buffers (a few live at once). */
static const char *in_dir(const char *name)
{
	static char bufs[8][300];
	static int next;
	char *b = bufs[next++ % 8];
	snprintf(b, 300, "%s/%s", dir, name);
	return b;
}

static int make_pair(const char *cert, const char *key)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
	         "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
	         "-subj /CN=localhost -keyout %s -out %s 2>/dev/null",
	         key, cert);
	return system(cmd) == 0 ? 0 : -1;
}

/* A leaf signed by a CA of its own; chain.pem is leaf then CA. */
static int make_chain(void)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
	         "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
	         "-days 2 -subj /CN=test-ca -keyout ca.key -out ca.pem 2>/dev/null && "
	         "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "
	         "/CN=localhost -keyout leaf.key -out leaf.csr 2>/dev/null && "
	         "openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
	         "-days 2 -out leaf.pem 2>/dev/null && cat leaf.pem ca.pem > chain.pem",
	         dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The openssl CLI cannot date a certificate in the past; the API can. */
static int make_expired(const char *cert, const char *key)
{
	int rc = -1;
	EVP_PKEY *pk = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	FILE *fc = NULL, *fk = NULL;
	if (!pk || !x)
		goto out;
	X509_set_version(x, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -2 * 86400);
	X509_gmtime_adj(X509_getm_notAfter(x), -86400);
	X509_set_pubkey(x, pk);
	X509_NAME *name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1,
	                           -1, 0);
	X509_set_issuer_name(x, name);
	if (!X509_sign(x, pk, EVP_sha256()))
		goto out;
	fc = fopen(cert, "w");
	fk = fopen(key, "w");
	if (fc && fk && PEM_write_X509(fc, x) &&
	    PEM_write_PrivateKey(fk, pk, NULL, NULL, 0, NULL, NULL))
		rc = 0;
out:
	if (fc)
		fclose(fc);
	if (fk)
		fclose(fk);
	X509_free(x);
	EVP_PKEY_free(pk);
	return rc;
}

static int make_files(void)
{
	if (!mkdtemp(dir))
		return -1;
	FILE *f = fopen(in_dir("garbage.pem"), "w");
	if (!f)
		return -1;
	fputs("this is not a certificate\n", f);
	fclose(f);
	if (make_pair(in_dir("a.pem"), in_dir("a.key")) ||
	    make_pair(in_dir("b.pem"), in_dir("b.key")) || make_chain() ||
	    make_expired(in_dir("old.pem"), in_dir("old.key")))
		return -1;
	return 0;
}

/* The fingerprint as the openssl CLI prints it, normalised to lower-case hex. */
static void cli_fingerprint(const char *cert, char out[TLS_FINGERPRINT_LEN])
{
	char cmd[512], line[256];
	snprintf(cmd, sizeof(cmd), "openssl x509 -in %s -noout -fingerprint -sha256", cert);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), p));
	pclose(p);
	size_t n = 0;
	for (const char *s = strchr(line, '=') + 1; *s && n < TLS_FINGERPRINT_LEN - 1; s++)
		if (*s != ':' && *s != '\n')
			out[n++] = (char)(*s >= 'A' && *s <= 'F' ? *s - 'A' + 'a' : *s);
	out[n] = '\0';
}

static void expect_refused(const char *cert, const char *key, const char *want1, const char *want2)
{
	struct tls_creds *c = (struct tls_creds *)1;
	char err[512] = "";
	ck_assert_int_lt(tls_creds_load(cert, key, &c, err, sizeof(err)), 0);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(err, want1), "'%s' lacks '%s'", err, want1);
	ck_assert_msg(strstr(err, want2), "'%s' lacks '%s'", err, want2);
}

START_TEST(test_load_good_and_chain)
{
	struct tls_creds *c = NULL;
	char err[512], want[TLS_FINGERPRINT_LEN];
	ck_assert_int_eq(tls_creds_load(in_dir("a.pem"), in_dir("a.key"), &c, err, sizeof(err)), 0);
	cli_fingerprint(in_dir("a.pem"), want);
	ck_assert_str_eq(tls_creds_fingerprint(c), want);
	gnutls_pcert_st *pcerts;
	unsigned n;
	gnutls_privkey_t key;
	tls_creds_get(c, &pcerts, &n, &key);
	ck_assert_uint_eq(n, 1);
	ck_assert_ptr_nonnull(key);
	tls_creds_unref(c);

	ck_assert_int_eq(
	    tls_creds_load(in_dir("chain.pem"), in_dir("leaf.key"), &c, err, sizeof(err)), 0);
	tls_creds_get(c, &pcerts, &n, &key);
	ck_assert_uint_eq(n, 2); /* the whole chain, not only the leaf */
	cli_fingerprint(in_dir("leaf.pem"), want);
	ck_assert_str_eq(tls_creds_fingerprint(c), want);
	tls_creds_unref(c);
}
END_TEST

START_TEST(test_load_refused)
{
	char want[600];
	snprintf(want, sizeof(want),
	         "server.tls: the key in %s does not match the certificate in %s", in_dir("b.key"),
	         in_dir("a.pem"));
	expect_refused(in_dir("a.pem"), in_dir("b.key"), want, "server.tls");
	expect_refused(in_dir("garbage.pem"), in_dir("a.key"), "server.tls.cert_file",
	               "is not a PEM certificate");
	expect_refused(in_dir("a.pem"), in_dir("garbage.pem"), "server.tls.key_file",
	               in_dir("garbage.pem"));
	expect_refused(in_dir("a.pem"), in_dir("a.pem"), "server.tls.key_file",
	               "not an unencrypted PEM private key");
	expect_refused(in_dir("old.pem"), in_dir("old.key"), "server.tls.cert_file", "has expired");
	expect_refused(in_dir("old.pem"), in_dir("old.key"), in_dir("old.pem"), "expired");
	expect_refused(in_dir("nope.pem"), in_dir("a.key"), "server.tls.cert_file", "No such file");
	expect_refused(NULL, in_dir("a.key"), "server.tls.cert_file", "no file configured");
}
END_TEST

/* A FIFO or a folder in the cert's or key's place: refused at once by its
 * type (a FIFO without a writer would block a plain open()), naming it. */
START_TEST(test_load_not_a_file)
{
	ck_assert_int_eq(mkfifo(in_dir("fifo.pem"), 0600), 0);
	ck_assert_int_eq(mkdir(in_dir("dir.key"), 0700), 0);
	struct timeval t0, t1;
	gettimeofday(&t0, NULL);
	expect_refused(in_dir("fifo.pem"), in_dir("a.key"), "server.tls.cert_file",
	               "not a regular file");
	expect_refused(in_dir("fifo.pem"), in_dir("a.key"), in_dir("fifo.pem"), "cert_file");
	expect_refused(in_dir("a.pem"), in_dir("fifo.pem"), "server.tls.key_file",
	               in_dir("fifo.pem"));
	expect_refused(in_dir("a.pem"), in_dir("dir.key"), "server.tls.key_file",
	               "not a regular file");
	gettimeofday(&t1, NULL);
	ck_assert_int_lt(t1.tv_sec - t0.tv_sec, 2);
	ck_assert_int_eq(unlink(in_dir("fifo.pem")), 0);
	ck_assert_int_eq(rmdir(in_dir("dir.key")), 0);
}
END_TEST

/* Signs with the key: the credentials are alive, not just non-NULL. */
static void assert_usable(struct tls_creds *c)
{
	gnutls_pcert_st *pcerts;
	unsigned n;
	gnutls_privkey_t key;
	tls_creds_get(c, &pcerts, &n, &key);
	gnutls_datum_t data = {(unsigned char *)"hello", 5}, sig = {NULL, 0};
	ck_assert_int_eq(gnutls_privkey_sign_data(key, GNUTLS_DIG_SHA256, 0, &data, &sig), 0);
	ck_assert_int_eq(
	    gnutls_pubkey_verify_data2(pcerts[0].pubkey, GNUTLS_SIGN_ECDSA_SHA256, 0, &data, &sig),
	    0);
	gnutls_free(sig.data);
}

START_TEST(test_store_refcounts)
{
	struct tls_creds *a, *b;
	char err[512], fa[TLS_FINGERPRINT_LEN];
	ck_assert_int_eq(tls_creds_load(in_dir("a.pem"), in_dir("a.key"), &a, err, sizeof(err)), 0);
	ck_assert_int_eq(tls_creds_load(in_dir("b.pem"), in_dir("b.key"), &b, err, sizeof(err)), 0);
	snprintf(fa, sizeof(fa), "%s", tls_creds_fingerprint(a));
	ck_assert_str_ne(fa, tls_creds_fingerprint(b));
	struct tls_store *st;
	ck_assert_int_eq(tls_store_new(a, &st, err, sizeof(err)), 0); /* a's ref moves */
	struct tls_creds *held = tls_store_current(st);               /* like a connection */
	ck_assert_ptr_eq(held, a);
	tls_store_swap(st, b);
	/* The store dropped a; the held reference keeps it whole. */
	ck_assert_str_eq(tls_creds_fingerprint(held), fa);
	assert_usable(held);
	struct tls_creds *now = tls_store_current(st);
	ck_assert_ptr_eq(now, b);
	assert_usable(now);
	tls_creds_unref(held); /* last reference to a */
	tls_creds_unref(now);
	tls_store_free(st); /* last reference to b */
	tls_creds_unref(NULL);
	tls_store_free(NULL);
}
END_TEST

struct race {
	struct tls_store *st;
	const char *fa, *fb;
	int bad;
};

static void *race_reader(void *arg)
{
	struct race *r = arg;
	for (int i = 0; i < 20000; i++) {
		struct tls_creds *c = tls_store_current(r->st);
		const char *f = tls_creds_fingerprint(c);
		if (strcmp(f, r->fa) && strcmp(f, r->fb))
			r->bad++;
		tls_creds_unref(c);
	}
	return NULL;
}

/* Handshakes on several threads take references while a reload swaps. */
START_TEST(test_store_threads)
{
	struct tls_creds *a, *b;
	char err[512], fa[TLS_FINGERPRINT_LEN], fb[TLS_FINGERPRINT_LEN];
	ck_assert_int_eq(tls_creds_load(in_dir("a.pem"), in_dir("a.key"), &a, err, sizeof(err)), 0);
	ck_assert_int_eq(tls_creds_load(in_dir("b.pem"), in_dir("b.key"), &b, err, sizeof(err)), 0);
	snprintf(fa, sizeof(fa), "%s", tls_creds_fingerprint(a));
	snprintf(fb, sizeof(fb), "%s", tls_creds_fingerprint(b));
	struct race r = {.fa = fa, .fb = fb};
	tls_creds_ref(a); /* one for the store, one kept here (like b's) */
	ck_assert_int_eq(tls_store_new(a, &r.st, err, sizeof(err)), 0);
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, race_reader, &r);
	for (int i = 0; i < 2000; i++) {
		struct tls_creds *next = i % 2 ? a : b;
		tls_creds_ref(next);
		tls_store_swap(r.st, next);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	ck_assert_int_eq(r.bad, 0);
	tls_store_free(r.st);
	assert_usable(a); /* our own references survived 2,000 swaps */
	assert_usable(b);
	tls_creds_unref(a);
	tls_creds_unref(b);
}
END_TEST

/* ---- a real listener ------------------------------------------------------- */

static const char *key_one = "test-key-1", *key_two = "test-key-2";

static char *key_entry(const char *key)
{
	unsigned char md[32];
	unsigned int n = 0;
	EVP_Digest(key, strlen(key), md, &n, EVP_sha256(), NULL);
	char *s = malloc(8 + 65);
	strcpy(s, "sha256:");
	for (int i = 0; i < 32; i++)
		snprintf(s + 7 + 2 * i, 3, "%02x", md[i]);
	return s;
}

static void config_set(struct sinkd_config *c, const char *cert, const char *key,
                       const char *api_key)
{
	free(c->server.tls_cert_file);
	free(c->server.tls_key_file);
	c->server.tls_cert_file = strdup(cert);
	c->server.tls_key_file = strdup(key);
	for (size_t i = 0; i < c->server.n_api_keys; i++)
		free(c->server.api_keys[i]);
	free(c->server.api_keys);
	c->server.api_keys = malloc(sizeof(char *));
	c->server.api_keys[0] = key_entry(api_key);
	c->server.n_api_keys = 1;
}

static void config_for(struct sinkd_config *c, int *port)
{
	int fd;
	char err[256], listen[64];
	ck_assert_int_eq(listen_open("127.0.0.1:0", 1, &fd, port, err, sizeof(err)), 0);
	close(fd);
	ck_assert_int_eq(config_init_defaults(c), 0);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", *port);
	free(c->server.listen);
	c->server.listen = strdup(listen);
	c->server.tls_enabled = true;
	c->server.threads = 2;
	config_set(c, in_dir("a.pem"), in_dir("a.key"), key_one);
}

/* A TLS client (GnuTLS, no verification: we compare fingerprints). */
struct client {
	int fd;
	gnutls_session_t session;
	gnutls_certificate_credentials_t cred;
	char fingerprint[TLS_FINGERPRINT_LEN]; /* of the certificate the server sent */
	unsigned n_certs;
};

static void client_open(struct client *cl, int port)
{
	memset(cl, 0, sizeof(*cl));
	cl->fd = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = {5, 0};
	setsockopt(cl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(cl->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(gnutls_certificate_allocate_credentials(&cl->cred), 0);
	ck_assert_int_eq(gnutls_init(&cl->session, GNUTLS_CLIENT), 0);
	ck_assert_int_eq(gnutls_set_default_priority(cl->session), 0);
	gnutls_credentials_set(cl->session, GNUTLS_CRD_CERTIFICATE, cl->cred);
	gnutls_transport_set_int(cl->session, cl->fd);
	gnutls_handshake_set_timeout(cl->session, 5000);
	int r;
	do
		r = gnutls_handshake(cl->session);
	while (r < 0 && !gnutls_error_is_fatal(r));
	ck_assert_msg(r == 0, "handshake: %s", gnutls_strerror(r));
	const gnutls_datum_t *peers = gnutls_certificate_get_peers(cl->session, &cl->n_certs);
	ck_assert_ptr_nonnull(peers);
	unsigned char md[32];
	size_t md_len = sizeof(md);
	ck_assert_int_eq(gnutls_fingerprint(GNUTLS_DIG_SHA256, &peers[0], md, &md_len), 0);
	for (size_t i = 0; i < md_len; i++)
		snprintf(cl->fingerprint + 2 * i, 3, "%02x", md[i]);
}

/* One keep-alive request on the open connection: the status code. */
static int client_get(struct client *cl, const char *path, const char *api_key)
{
	char req[512], buf[4096];
	snprintf(req, sizeof(req),
	         "GET %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\n\r\n", path,
	         api_key ? api_key : "-");
	ck_assert_int_eq(gnutls_record_send(cl->session, req, strlen(req)), (ssize_t)strlen(req));
	size_t n = 0;
	/* Headers, then a Content-Length body; our answers are small. */
	for (;;) {
		ssize_t r = gnutls_record_recv(cl->session, buf + n, sizeof(buf) - 1 - n);
		if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED)
			continue;
		ck_assert_msg(r > 0, "recv: %s", r < 0 ? gnutls_strerror((int)r) : "closed");
		n += (size_t)r;
		buf[n] = '\0';
		const char *end = strstr(buf, "\r\n\r\n");
		const char *cl_hdr = strcasestr(buf, "Content-Length:");
		if (end && cl_hdr && n >= (size_t)(end + 4 - buf) + strtoul(cl_hdr + 15, NULL, 10))
			break;
	}
	int status = 0;
	ck_assert_int_eq(sscanf(buf, "HTTP/1.1 %d", &status), 1);
	return status;
}

static void client_close(struct client *cl)
{
	gnutls_bye(cl->session, GNUTLS_SHUT_WR);
	gnutls_deinit(cl->session);
	gnutls_certificate_free_credentials(cl->cred);
	close(cl->fd);
}

static char *slurp_log(FILE *f)
{
	fflush(f);
	long n = ftell(f);
	char *s = calloc(1, (size_t)n + 1);
	rewind(f);
	ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
	return s;
}

/* What the daemon's reload does to the server: prepare both parts (either
 * may fail, changing nothing), then commit both. */
static int reload_server(struct server *s, const struct sinkd_config *c, char *err, size_t len)
{
	struct tls_creds *creds = NULL;
	struct server_prepared *p = NULL;
	int rc = server_tls_prepare(s, c, &creds, err, len);
	if (rc)
		return rc;
	rc = server_prepare(s, c, &p, err, len);
	if (rc) {
		server_tls_discard(creds);
		return rc;
	}
	server_tls_commit(s, c, creds);
	server_commit(s, p);
	return 0;
}

START_TEST(test_rotation_on_listener)
{
	char fa[TLS_FINGERPRINT_LEN], fb[TLS_FINGERPRINT_LEN], err[512];
	cli_fingerprint(in_dir("a.pem"), fa);
	cli_fingerprint(in_dir("b.pem"), fb);
	int port;
	struct sinkd_config c;
	config_for(&c, &port);
	FILE *logf = fopen(in_dir("server.log"), "w+");
	struct sinkd_log *log = log_new(logf, LOG_INFO, LOG_FORMAT_JSON);
	struct server *s = NULL;
	ck_assert_int_eq(server_new(&c, log, &s, err, sizeof(err)), 0);

	struct client before, after, third;
	client_open(&before, port);
	ck_assert_str_eq(before.fingerprint, fa);
	ck_assert_int_eq(client_get(&before, "/health", NULL), 200);

	/* New files (and a new API key) in one reload. */
	config_set(&c, in_dir("b.pem"), in_dir("b.key"), key_two);
	ck_assert_int_eq(reload_server(s, &c, err, sizeof(err)), 0);
	client_open(&after, port);
	ck_assert_str_eq(after.fingerprint, fb);
	ck_assert_int_eq(client_get(&after, "/health", NULL), 200);
	/* The connection that handshook with a still works, after a's store
	 * reference is gone. */
	ck_assert_int_eq(client_get(&before, "/health", NULL), 200);
	ck_assert_int_eq(client_get(&before, "/v1/models", key_two), 503); /* loading */
	client_close(&before);

	/* A key that does not match: refused, nothing changes (not even the
	 * API key that came with it). */
	config_set(&c, in_dir("a.pem"), in_dir("b.key"), key_one);
	ck_assert_int_ne(reload_server(s, &c, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "does not match"));
	client_open(&third, port);
	ck_assert_str_eq(third.fingerprint, fb);
	ck_assert_int_eq(client_get(&third, "/v1/models", key_two), 503);
	ck_assert_int_eq(client_get(&third, "/v1/models", key_one), 401); /* then it closes */
	ck_assert_int_eq(client_get(&after, "/health", NULL), 200);
	client_close(&third);

	/* The chain goes out whole. */
	config_set(&c, in_dir("chain.pem"), in_dir("leaf.key"), key_two);
	ck_assert_int_eq(reload_server(s, &c, err, sizeof(err)), 0);
	client_open(&third, port);
	ck_assert_uint_eq(third.n_certs, 2);
	client_close(&third);
	client_close(&after);
	server_free(s);
	log_free(log);

	char *text = slurp_log(logf);
	fclose(logf);
	ck_assert_msg(strstr(text, "TLS certificate reloaded") && strstr(text, fb),
	              "no reload line with the new fingerprint in:\n%s", text);
	ck_assert_msg(!strstr(text, "TLS handshakes fail"), "%s", text);
	free(text);
	config_deinit(&c);
}
END_TEST

int main(void)
{
	if (make_files()) {
		fprintf(stderr, "cannot make certificates with the openssl CLI\n");
		return EXIT_FAILURE;
	}
	Suite *su = suite_create("server-tls");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_load_good_and_chain);
	tcase_add_test(tc, test_load_refused);
	tcase_add_test(tc, test_load_not_a_file);
	tcase_add_test(tc, test_store_refcounts);
	tcase_add_test(tc, test_store_threads);
	tcase_add_test(tc, test_rotation_on_listener);
	suite_add_tcase(su, tc);
	int failed = tu_suite_failures(su);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		failed++;
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
