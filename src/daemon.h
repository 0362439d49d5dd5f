/* The serve mode of sinkd: load the config, start the HTTPS listener, load
 * the model, tokenizer, backend and scheduler, serve until asked to stop, and
 * re-read the config on reload.  main.c owns the signal handlers; they only
 * set the flags that daemon_run() polls. */
#pragma once

#include <stddef.h>

#include "util/log.h"

/* Runs the daemon until *stop_flag becomes non-zero (SIGTERM/SIGINT), then
 * drains: /ready turns 503, new requests get 503 for server.drain_grace_s,
 * the listener closes, running streams get server.drain_timeout_s, the rest
 * end with a server_shutdown error event; returns 0.  *force_flag non-zero
 * (a second signal) skips the drain's waits.  Whenever *reload_flag is
 * non-zero (SIGHUP) the daemon clears it and reloads `config_path` as one
 * transaction: on any error the old config stays and the reason is logged;
 * restart-only keys are reported at every reload until a restart.  With
 * config.watch the file's changes reload it too.  Under systemd it sends
 * READY=1, RELOADING=1/READY=1, STOPPING=1, STATUS= and WATCHDOG=1.
 *
 * `overrides` are "key.path=value" strings (--set), applied at start and on
 * every reload.  `log` is the process logger (its level/format follow the
 * config).  Returns 0 after a clean stop, or a negative errno with a message
 * in err when start-up failed (bad config, cert, port in use, model). */
int daemon_run(const char *config_path, const char *const *overrides, size_t n_overrides,
               struct sinkd_log *log, const volatile int *stop_flag, const volatile int *force_flag,
               volatile int *reload_flag, char *err, size_t err_len);
