/* Value checks used by the configuration table for string-shaped keys. */
#pragma once

#include <stddef.h>

/* "host:port", "[v6]:port", "*:port"; port 1..65535. */
int config_validate_listen(const char *value, char *msg, size_t msg_len);
/* 64 hex digits. */
int config_validate_sha256(const char *value, char *msg, size_t msg_len);
/* "sha256:" + 64 hex digits. */
int config_validate_key_digest(const char *value, char *msg, size_t msg_len);

/* Splits "host:port" / "[v6]:port" / "*:port" into host (brackets removed,
 * "" for *) and port.  Returns 0 or -EINVAL. */
int config_split_listen(const char *value, char *host, size_t host_len, int *port);
