/* TLS material for the listener: reads the PEM certificate chain and private
 * key named in the config, checks with OpenSSL that both parse, that the key
 * matches the certificate and that it has not expired (so a bad file is a
 * clear message, never a half-started daemon or a broken reload), and imports
 * them for GnuTLS handshakes.  A store holds the credentials new handshakes
 * get, so that a reload can swap them while old connections keep theirs.
 * The handshake itself is libmicrohttpd's (GnuTLS). */
#pragma once

#include <stddef.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>

/* TLS 1.2 and 1.3 only, AEAD ciphers only, forward-secret key exchange only
 * (TLS 1.2: ECDHE; plain RSA key exchange is off) (GnuTLS priority string). */
#define TLS_PRIORITIES                                                                             \
	"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:"        \
	"+CHACHA20-POLY1305:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:%SERVER_PRECEDENCE"

/* SHA-256 of the leaf certificate's DER as 64 lower-case hex digits. */
#define TLS_FINGERPRINT_LEN 65

/* A certificate chain and its private key, immutable once loaded and shared
 * by reference count (a store, and every connection that handshook with it). */
struct tls_creds;

/* Loads and validates cert_file (PEM chain, leaf first) and key_file (an
 * unencrypted PEM key); *out has one reference.  Error messages name
 * server.tls.cert_file / server.tls.key_file and the file. */
int tls_creds_load(const char *cert_file, const char *key_file, struct tls_creds **out, char *err,
                   size_t err_len);
void tls_creds_ref(struct tls_creds *c);
/* Drops one reference; the last one wipes and frees the key.  NULL is a no-op. */
void tls_creds_unref(struct tls_creds *c);
const char *tls_creds_fingerprint(const struct tls_creds *c);
/* What a gnutls_certificate_retrieve_function2 returns: pointers that stay
 * valid while the caller holds a reference on c. */
void tls_creds_get(const struct tls_creds *c, gnutls_pcert_st **pcerts, unsigned *n_pcerts,
                   gnutls_privkey_t *key);

/* The credentials new handshakes use; thread-safe. */
struct tls_store;

/* Takes the reference on initial, also when it fails (out of memory). */
int tls_store_new(struct tls_creds *initial, struct tls_store **out, char *err, size_t err_len);
/* Installs next (takes its reference) and drops the store's reference on the
 * previous credentials, which live on while anyone else holds them. */
void tls_store_swap(struct tls_store *st, struct tls_creds *next);
/* The current credentials with a new reference (tls_creds_unref it). */
struct tls_creds *tls_store_current(struct tls_store *st);
/* Drops the store's reference; NULL is a no-op. */
void tls_store_free(struct tls_store *st);
