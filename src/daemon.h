/* The serve mode of sinkd: load the config, start the HTTPS listener, load
 * the model, tokenizer, backend and scheduler, serve until asked to stop, and
 * re-read the config on reload.  main.c owns the signal handlers; they only
 * set the flags that daemon_run() polls. */
#pragma once

#include <stddef.h>

#include "util/log.h"

/* Runs the daemon until *stop_flag becomes non-zero (SIGTERM/SIGINT): /ready
 * turns 503 (draining), the listener stops accepting, open streams are
 * finished or cancelled, and the function returns 0.  Whenever *reload_flag
 * is non-zero (SIGHUP) the daemon clears it through reload_ack (may be NULL)
 * and re-reads `config_path` completely: on error the old config stays and
 * the reason is logged; reloadable keys are applied, restart-only keys are
 * logged as "needs restart".
 *
 * `overrides` are "key.path=value" strings (--set), applied at start and on
 * every reload.  `log` is the process logger (its level/format follow the
 * config).  Returns 0 after a clean stop, or a negative errno with a message
 * in err when start-up failed (bad config, cert, port in use, model). */
int daemon_run(const char *config_path, const char *const *overrides, size_t n_overrides,
               struct sinkd_log *log, const volatile int *stop_flag, volatile int *reload_flag,
               char *err, size_t err_len);
