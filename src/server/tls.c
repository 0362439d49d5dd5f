/* Loads and validates the listener's certificate and key (PEM).  It does not
 * configure protocol versions (TLS_PRIORITIES does, in the listener) and does
 * not reload certificates while running: a new certificate needs a restart. */
#include "server/tls.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errbuf.h"

#define TLS_MAX_FILE (1 << 20)

static int read_file(const char *what, const char *path, char **out, char *err, size_t err_len)
{
	if (!path || !*path)
		return err_set(err, err_len, -EINVAL, "%s: no file configured", what);
	FILE *f = fopen(path, "rb");
	if (!f)
		return err_set(err, err_len, -errno, "%s: cannot open %s: %s", what, path,
		               strerror(errno));
	char *buf = malloc(TLS_MAX_FILE + 1);
	size_t n = buf ? fread(buf, 1, TLS_MAX_FILE + 1, f) : 0;
	int bad = ferror(f);
	fclose(f);
	if (!buf)
		return err_set(err, err_len, -ENOMEM, "%s: out of memory", what);
	if (bad || n == 0 || n > TLS_MAX_FILE) {
		free(buf);
		return err_set(err, err_len, -EINVAL, "%s: %s is %s", what, path,
		               bad      ? "unreadable"
		               : n == 0 ? "empty"
		                        : "larger than 1 MiB");
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
	key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
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

int tls_pair_load(const char *cert_file, const char *key_file, struct tls_pair *out, char *err,
                  size_t err_len)
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

void tls_pair_deinit(struct tls_pair *p)
{
	if (p->key_pem)
		OPENSSL_cleanse(p->key_pem, strlen(p->key_pem));
	free(p->cert_pem);
	free(p->key_pem);
	p->cert_pem = p->key_pem = NULL;
}
