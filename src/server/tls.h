/* TLS material for the listener: reads the PEM certificate chain and private
 * key named in the config and checks, with OpenSSL, that both parse and that
 * the key matches the certificate, so that a bad file is a clear message and
 * never a half-started daemon.  The handshake itself is libmicrohttpd's (GnuTLS). */
#pragma once

#include <stddef.h>

/* TLS 1.2 and 1.3 only, AEAD ciphers only (GnuTLS priority string). */
#define TLS_PRIORITIES                                                                             \
	"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:"        \
	"+CHACHA20-POLY1305:-MAC-ALL:+AEAD:%SERVER_PRECEDENCE"

struct tls_pair {
	char *cert_pem; /* NUL-terminated file contents */
	char *key_pem;
};

int tls_pair_load(const char *cert_file, const char *key_file, struct tls_pair *out, char *err,
                  size_t err_len);
/* Wipes the key before freeing; safe on a zeroed struct. */
void tls_pair_deinit(struct tls_pair *p);
