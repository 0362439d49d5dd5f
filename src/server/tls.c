/* Loads, validates and shares the listener's certificate and key.  The files
 * are checked with OpenSSL (clear messages for the common mistakes), then
 * imported once for GnuTLS, so a handshake only takes a reference.  It does
 * not configure protocol versions (TLS_PRIORITIES does, in the listener) and
 * does not watch the files: a reload calls tls_creds_load and tls_store_swap. */
#include "server/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/x509.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/digest.h"
#include "util/errbuf.h"

/* The two PEM files as read, NUL-terminated; key_pem is wiped when freed. */
struct tls_pair {
	char *cert_pem;
	char *key_pem;
};

struct tls_creds {
	atomic_int refs;
	gnutls_pcert_st *pcerts; /* (n_pcerts) the chain, leaf first */
	unsigned n_pcerts;
	gnutls_privkey_t key;
	char fingerprint[TLS_FINGERPRINT_LEN];
};

struct tls_store {
	pthread_mutex_t mu; /* guards cur against a swap between read and ref */
	struct tls_creds *cur;
};

#define TLS_MAX_FILE (1 << 20)

/* Opens path to read it, never blocking: O_NONBLOCK so that a FIFO put in
 * the cert's or key's place cannot hang a reload (the serve loop) in open(),
 * and anything but a regular file is refused before a byte is read. */
static int tls_file_open(const char *what, const char *path, char *err, size_t err_len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		return err_set(err, err_len, -e, "%s: cannot open %s: %s", what, path, strerror(e));
	}
	int e = fstat(fd, &st) != 0 ? errno : 0;
	if (e != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		if (e != 0)
			return err_set(err, err_len, -e, "%s: cannot read %s: %s", what, path,
			               strerror(e));
		return err_set(err, err_len, -EINVAL, "%s: %s is not a regular file", what, path);
	}
	return fd;
}

/* Reads at most cap bytes of fd into buf; the count, or a negative errno. */
static ssize_t tls_file_read(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	while (n < cap) {
		ssize_t got = read(fd, buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			break;
		n += (size_t)got;
	}
	return (ssize_t)n;
}

static int read_file(const char *what, const char *path, char **out, char *err, size_t err_len)
{
	if (!path || !*path)
		return err_set(err, err_len, -EINVAL, "%s: no file configured", what);
	int fd = tls_file_open(what, path, err, err_len);
	if (fd < 0)
		return fd;
	/* One byte over the cap tells a file that is too large. */
	char *buf = malloc(TLS_MAX_FILE + 1);
	ssize_t n = buf ? tls_file_read(fd, buf, TLS_MAX_FILE + 1) : 0;
	close(fd);
	if (!buf)
		return err_set(err, err_len, -ENOMEM, "%s: out of memory", what);
	if (n <= 0 || n > TLS_MAX_FILE) {
		free(buf);
		return err_set(err, err_len, -EINVAL, "%s: %s is %s%s", what, path,
		               n < 0    ? "unreadable: "
		               : n == 0 ? "empty"
		                        : "larger than 1 MiB",
		               n < 0 ? strerror((int)-n) : "");
	}
	buf[n] = '\0';
	*out = buf;
	return 0;
}

static void openssl_reason(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();
	if (e)
		ERR_error_string_n(e, buf, len);
	else
		snprintf(buf, len, "no PEM data");
	ERR_clear_error();
}

/* An encrypted key fails at once: OpenSSL's default would prompt on the
 * terminal, and a reload must never wait for someone to type. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf, (void)size, (void)rwflag, (void)u;
	return -1;
}

static int check_pair(const struct tls_pair *p, const char *cert_file, const char *key_file,
                      char *err, size_t err_len)
{
	char why[256];
	int rc = 0;
	BIO *cb = BIO_new_mem_buf(p->cert_pem, -1), *kb = BIO_new_mem_buf(p->key_pem, -1);
	X509 *cert = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
	EVP_PKEY *key = NULL;
	if (!cert) {
		openssl_reason(why, sizeof(why));
		rc = err_set(err, err_len, -EINVAL,
		             "server.tls.cert_file: %s is not a PEM certificate (%s)", cert_file,
		             why);
		goto out;
	}
	key = kb ? PEM_read_bio_PrivateKey(kb, NULL, no_passphrase, NULL) : NULL;
	if (!key) {
		openssl_reason(why, sizeof(why));
		rc = err_set(err, err_len, -EINVAL,
		             "server.tls.key_file: %s is not an unencrypted PEM private key (%s)",
		             key_file, why);
		goto out;
	}
	if (X509_check_private_key(cert, key) != 1) {
		ERR_clear_error();
		rc = err_set(err, err_len, -EINVAL,
		             "server.tls: the key in %s does not match the certificate in %s",
		             key_file, cert_file);
		goto out;
	}
	if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
		rc = err_set(err, err_len, -EINVAL, "server.tls.cert_file: %s has expired",
		             cert_file);
		goto out;
	}
out:
	X509_free(cert);
	EVP_PKEY_free(key);
	BIO_free(cb);
	BIO_free(kb);
	return rc;
}

/* Wipes the key before freeing; safe on a zeroed struct. */
static void tls_pair_deinit(struct tls_pair *p)
{
	if (p->key_pem)
		OPENSSL_cleanse(p->key_pem, strlen(p->key_pem));
	free(p->cert_pem);
	free(p->key_pem);
	p->cert_pem = p->key_pem = NULL;
}

/* Reads both files and runs the OpenSSL checks (parse, match, expiry). */
static int tls_pair_load(const char *cert_file, const char *key_file, struct tls_pair *out,
                         char *err, size_t err_len)
{
	memset(out, 0, sizeof(*out));
	int rc = read_file("server.tls.cert_file", cert_file, &out->cert_pem, err, err_len);
	if (!rc)
		rc = read_file("server.tls.key_file", key_file, &out->key_pem, err, err_len);
	if (!rc)
		rc = check_pair(out, cert_file, key_file, err, err_len);
	if (rc)
		tls_pair_deinit(out);
	return rc;
}

/* ---- credentials for GnuTLS ------------------------------------------------ */

static void creds_free(struct tls_creds *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < c->n_pcerts; i++)
		gnutls_pcert_deinit(&c->pcerts[i]);
	free(c->pcerts);
	if (c->key)
		gnutls_privkey_deinit(c->key); /* GnuTLS zeroes the key material */
	free(c);
}

/* Every certificate of the file, in file order: the leaf (the one OpenSSL
 * matched against the key) first, then the intermediates clients need. */
static int import_chain(struct tls_creds *c, const char *pem, const char *cert_file, char *err,
                        size_t err_len)
{
	gnutls_datum_t d = {(unsigned char *)pem, (unsigned)strlen(pem)};
	gnutls_x509_crt_t *crts = NULL;
	unsigned n = 0;
	int rc = 0;
	int g = gnutls_x509_crt_list_import2(&crts, &n, &d, GNUTLS_X509_FMT_PEM, 0);
	if (g < 0 || n == 0)
		return err_set(err, err_len, -EINVAL,
		               "server.tls.cert_file: GnuTLS cannot read the certificate chain in "
		               "%s (%s)",
		               cert_file, g < 0 ? gnutls_strerror(g) : "no certificate");
	c->pcerts = calloc(n, sizeof(*c->pcerts));
	if (!c->pcerts) {
		rc = err_set(err, err_len, -ENOMEM, "server.tls.cert_file: out of memory");
		goto out;
	}
	unsigned n_imported = n;
	g = gnutls_pcert_import_x509_list(c->pcerts, crts, &n_imported, 0);
	if (g < 0) {
		rc = err_set(err, err_len, -EINVAL,
		             "server.tls.cert_file: GnuTLS cannot use the certificates in %s (%s)",
		             cert_file, gnutls_strerror(g));
		goto out;
	}
	c->n_pcerts = n_imported;
out:
	for (unsigned i = 0; i < n; i++)
		gnutls_x509_crt_deinit(crts[i]);
	gnutls_free(crts);
	return rc;
}

static int import_key(struct tls_creds *c, const char *pem, const char *key_file, char *err,
                      size_t err_len)
{
	gnutls_datum_t d = {(unsigned char *)pem, (unsigned)strlen(pem)};
	int g = gnutls_privkey_init(&c->key);
	if (g < 0) {
		c->key = NULL;
		return err_set(err, err_len, -ENOMEM, "server.tls.key_file: %s",
		               gnutls_strerror(g));
	}
	g = gnutls_privkey_import_x509_raw(c->key, &d, GNUTLS_X509_FMT_PEM, NULL, 0);
	if (g < 0)
		return err_set(err, err_len, -EINVAL,
		               "server.tls.key_file: GnuTLS cannot use the key in %s (%s)",
		               key_file, gnutls_strerror(g));
	return 0;
}

static int leaf_fingerprint(struct tls_creds *c, const char *cert_file, char *err, size_t err_len)
{
	unsigned char md[32];
	size_t md_len = sizeof(md);
	int g = gnutls_fingerprint(GNUTLS_DIG_SHA256, &c->pcerts[0].cert, md, &md_len);
	if (g < 0 || md_len != sizeof(md))
		return err_set(err, err_len, -EINVAL,
		               "server.tls.cert_file: cannot hash the certificate in %s (%s)",
		               cert_file, g < 0 ? gnutls_strerror(g) : "short digest");
	digest_hex(md, md_len, c->fingerprint);
	return 0;
}

int tls_creds_load(const char *cert_file, const char *key_file, struct tls_creds **out, char *err,
                   size_t err_len)
{
	*out = NULL;
	struct tls_pair pair;
	int rc = tls_pair_load(cert_file, key_file, &pair, err, err_len);
	if (rc)
		return rc;
	struct tls_creds *c = calloc(1, sizeof(*c));
	if (!c) {
		rc = err_set(err, err_len, -ENOMEM, "server.tls: out of memory");
		goto out;
	}
	atomic_init(&c->refs, 1);
	rc = import_chain(c, pair.cert_pem, cert_file, err, err_len);
	if (!rc)
		rc = import_key(c, pair.key_pem, key_file, err, err_len);
	if (!rc)
		rc = leaf_fingerprint(c, cert_file, err, err_len);
	if (rc) {
		creds_free(c);
		goto out;
	}
	*out = c;
out:
	tls_pair_deinit(&pair);
	return rc;
}

void tls_creds_ref(struct tls_creds *c)
{
	atomic_fetch_add(&c->refs, 1);
}

void tls_creds_unref(struct tls_creds *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1)
		creds_free(c);
}

const char *tls_creds_fingerprint(const struct tls_creds *c)
{
	return c->fingerprint;
}

void tls_creds_get(const struct tls_creds *c, gnutls_pcert_st **pcerts, unsigned *n_pcerts,
                   gnutls_privkey_t *key)
{
	*pcerts = c->pcerts;
	*n_pcerts = c->n_pcerts;
	*key = c->key;
}

/* ---- the store ---------------------------------------------------------------- */

int tls_store_new(struct tls_creds *initial, struct tls_store **out, char *err, size_t err_len)
{
	*out = NULL;
	struct tls_store *st = calloc(1, sizeof(*st));
	if (!st) {
		tls_creds_unref(initial);
		return err_set(err, err_len, -ENOMEM, "server.tls: out of memory");
	}
	pthread_mutex_init(&st->mu, NULL);
	st->cur = initial;
	*out = st;
	return 0;
}

void tls_store_swap(struct tls_store *st, struct tls_creds *next)
{
	pthread_mutex_lock(&st->mu);
	struct tls_creds *old = st->cur;
	st->cur = next;
	pthread_mutex_unlock(&st->mu);
	tls_creds_unref(old);
}

struct tls_creds *tls_store_current(struct tls_store *st)
{
	pthread_mutex_lock(&st->mu);
	struct tls_creds *c = st->cur;
	if (c)
		tls_creds_ref(c);
	pthread_mutex_unlock(&st->mu);
	return c;
}

void tls_store_free(struct tls_store *st)
{
	if (!st)
		return;
	tls_creds_unref(st->cur);
	pthread_mutex_destroy(&st->mu);
	free(st);
}
