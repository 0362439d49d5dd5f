/* Tells the daemon that a watched file (its config, the TLS certificate and
 * key) has a new content: inotify on the folders along each path and its
 * symlinks (so in-place writes, rename-over, symlink swaps and Kubernetes
 * ConfigMap "..data" swaps are all seen), debounced, and confirmed by a
 * SHA-256 of the content so that a touch or identical rewrite reports
 * nothing.  It reports only; reloading is the caller's job. */
#pragma once

#include <stddef.h>

/* At most this many files per watch (config, cert, key, ...). */
#define CONFIG_WATCH_MAX_FILES 16
/* Upper bound for debounce_ms. */
#define CONFIG_WATCH_MAX_DEBOUNCE_MS 60000

struct config_watch;

/* Starts watching paths[0..n_paths) (1..CONFIG_WATCH_MAX_FILES; relative
 * paths are taken from the current folder now).  A file need not exist yet,
 * but its folder must.  The content seen now is the baseline: only a later
 * different content is reported.  debounce_ms is 0..CONFIG_WATCH_MAX_DEBOUNCE_MS.
 * Returns 0 and *out, or a negative errno with a message naming the path. */
int config_watch_new(const char *const *paths, size_t n_paths, int debounce_ms,
                     struct config_watch **out, char *err, size_t err_len);

/* The inotify fd (non-blocking, close-on-exec) to poll() for POLLIN. */
int config_watch_fd(const struct config_watch *w);

/* Reads pending events (never blocks).  Returns 1 when some watched file's
 * content differs from the last report (or became unreadable, or readable
 * again) and no relevant event came for debounce_ms before now_s
 * (CLOCK_MONOTONIC seconds); else 0; negative errno with err on failure.
 * Call it at least every tick: events are timed when they are read. */
int config_watch_poll(struct config_watch *w, double now_s, char *err, size_t err_len);

/* Stops watching and frees w; NULL-safe. */
void config_watch_free(struct config_watch *w);
