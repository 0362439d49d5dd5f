/* sd_notify wrappers: the message formats of the service-manager protocol in
 * one place.  libsystemd does the socket work (and nothing when the daemon
 * was not started by a service manager).  No state is kept here. */
#include "util/notify.h"
#include "util/monotime.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>
#include <time.h>

static void send_state(const char *state, const char *status)
{
	if (status && status[0])
		sd_notifyf(0, "%s\nSTATUS=%s", state, status);
	else
		sd_notify(0, state);
}

void notify_ready(const char *status)
{
	send_state("READY=1", status);
}

void notify_reloading(void)
{
	unsigned long long usec = (unsigned long long)monotime_us();
	sd_notifyf(0, "RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC=%llu", usec);
}

void notify_stopping(const char *status)
{
	send_state("STOPPING=1", status);
}

void notify_status(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	sd_notifyf(0, "STATUS=%s", line);
}

void notify_watchdog(void)
{
	sd_notify(0, "WATCHDOG=1");
}

double notify_watchdog_period_s(void)
{
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) <= 0)
		return 0;
	return (double)usec * 1e-6;
}
