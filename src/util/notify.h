/* Notifications to the service manager (systemd's sd_notify protocol,
 * through libsystemd): ready, reloading, stopping, a status line, and the
 * watchdog's keep-alive.  Each call is a no-op without $NOTIFY_SOCKET.  It
 * does not decide when to notify: the daemon's serve loop does. */
#pragma once

#include "util/errbuf.h"

/* READY=1 (the model is loaded and the listener is up; also ends a reload). */
void notify_ready(const char *status);
/* RELOADING=1 with MONOTONIC_USEC= (systemd's notify-reload protocol). */
void notify_reloading(void);
/* STOPPING=1: the drain began. */
void notify_stopping(const char *status);
/* STATUS=<line>: what `systemctl status` shows. */
void notify_status(const char *fmt, ...) SINKD_PRINTF(1, 2);
/* WATCHDOG=1. */
void notify_watchdog(void);
/* The watchdog period asked for by the service manager (WatchdogSec=) in
 * seconds, 0 when there is none. */
double notify_watchdog_period_s(void);
