/* Change detection for the files the daemon reloads (config, TLS cert/key).
 *
 * inotify watches folders, never the files: a watch on a file follows its
 * inode, which rename-over editors, symlink swaps and Kubernetes ConfigMap
 * updates replace.  Each path is resolved one component at a time and every
 * folder entry that decides what the path opens (each symlink on the way and
 * the final name) becomes an "interest": a (folder watch, name) pair.  An
 * event on an interest, or on a watched folder itself, restarts the debounce
 * timer and re-resolves the paths, since a swap can move the target to a new
 * folder.  Once the timer runs out, the files are hashed and only a content
 * different from the last report is reported.
 *
 * It does not watch renames of real (non-symlink) parent folders above the
 * watched ones, and it does not read or apply the config. */
#include "config/config_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "util/digest.h"
#include "util/errbuf.h"

/* Symlinks followed per path before it counts as unreadable (the kernel's
 * own limit is 40; config paths that need more are a mistake). */
#define CW_MAX_FOLLOWS 16
/* Interests per path: one per symlink followed, one for the final name. */
#define CW_MAX_LINKS (CW_MAX_FOLLOWS + 1)
/* Enough for every interest of every path, so adding one never fails. */
#define CW_MAX_INTERESTS (CONFIG_WATCH_MAX_FILES * CW_MAX_LINKS)
#define CW_MAX_DIRS 64
/* One read takes many events; the read count is bounded so that a storm of
 * writes cannot keep one poll busy (the rest is read on the next one). */
#define CW_EVENT_BUF 16384
#define CW_MAX_READS 16

#define CW_DIR_MASK                                                                                \
	(IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE | IN_MOVED_FROM |          \
	 IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

/* One folder entry to resolve a path through, found by chain_resolve. */
struct cw_link {
	char dir[PATH_MAX];
	char name[NAME_MAX + 1];
};

struct cw_interest {
	int wd;
	char name[NAME_MAX + 1];
};

/* What a file held when last reported. */
struct cw_state {
	int read_errno; /* 0 when readable, then digest is valid */
	unsigned char digest[32];
};

struct cw_file {
	char *path; /* absolute */
	struct cw_state state;
};

struct config_watch {
	int fd;
	int debounce_ms;
	bool pending; /* a relevant event came since the last settle */
	double last_event_s;
	size_t n_files;
	struct cw_file files[CONFIG_WATCH_MAX_FILES];
	size_t n_dirs;
	int dirs[CW_MAX_DIRS]; /* watch descriptors */
	size_t n_interests;
	struct cw_interest interests[CW_MAX_INTERESTS];
	/* Scratch for watch_rearm, here to keep ~100 KiB off the stack. */
	struct cw_interest next_interests[CW_MAX_INTERESTS];
	struct cw_link chain[CW_MAX_LINKS];
	_Alignas(struct inotify_event) char evbuf[CW_EVENT_BUF];
};

/* ---- path resolution ---------------------------------------------------- */

static void link_set(struct cw_link *l, const char *prefix, const char *name)
{
	snprintf(l->dir, sizeof(l->dir), "%s", prefix[0] ? prefix : "/");
	snprintf(l->name, sizeof(l->name), "%s", name);
}

static bool only_slashes(const char *s)
{
	while (*s == '/')
		s++;
	return *s == '\0';
}

/* Pops the next component of *cur into name; false when none is left or it
 * is too long to be a name. */
static bool component_next(char **cur, char name[NAME_MAX + 1])
{
	while (**cur == '/')
		(*cur)++;
	char *end = strchrnul(*cur, '/');
	size_t len = (size_t)(end - *cur);
	if (len == 0 || len > NAME_MAX)
		return false;
	memcpy(name, *cur, len);
	name[len] = '\0';
	*cur = end;
	return true;
}

/* Replaces what is left to resolve with "target/rest"; false if too long. */
static bool rest_splice(const char *symlink_path, char *rest, size_t rest_len, const char *cur)
{
	char target[PATH_MAX];
	char next[PATH_MAX];
	ssize_t n = readlink(symlink_path, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = '\0';
	int len = snprintf(next, sizeof(next), "%s/%s", target, cur);
	if (len < 0 || (size_t)len >= rest_len)
		return false;
	memcpy(rest, next, (size_t)len + 1);
	return true;
}

/* Follows the absolute path like the kernel does and records each folder
 * entry whose change can change what the path opens: every symlink on the
 * way and the final name.  It stops at the first missing entry (the name to
 * wait for).  Returns the number of links. */
static size_t chain_resolve(const char *path, struct cw_link *links)
{
	char prefix[PATH_MAX] = ""; /* resolved, free of symlinks; "" is "/" */
	char rest[PATH_MAX];
	char cand[PATH_MAX];
	char name[NAME_MAX + 1];
	size_t n_links = 0;
	int n_follows = 0;
	snprintf(rest, sizeof(rest), "%s", path);
	char *cur = rest;
	while (n_links < CW_MAX_LINKS && component_next(&cur, name)) {
		bool last = only_slashes(cur);
		if (strcmp(name, ".") == 0)
			continue;
		if (strcmp(name, "..") == 0) {
			char *slash = strrchr(prefix, '/');
			if (slash != NULL)
				*slash = '\0';
			continue;
		}
		if ((size_t)snprintf(cand, sizeof(cand), "%s/%s", prefix, name) >= sizeof(cand))
			break;
		struct stat st;
		bool exists = lstat(cand, &st) == 0;
		bool is_link = exists && S_ISLNK(st.st_mode);
		bool is_dir = exists && S_ISDIR(st.st_mode);
		if (!exists || is_link || last || !is_dir)
			link_set(&links[n_links++], prefix, name);
		if (!is_link && (!is_dir || last))
			break;
		if (!is_link) {
			memcpy(prefix, cand, strlen(cand) + 1);
			continue;
		}
		if (++n_follows > CW_MAX_FOLLOWS || !rest_splice(cand, rest, sizeof(rest), cur))
			break;
		if (rest[0] == '/')
			prefix[0] = '\0';
		cur = rest;
	}
	return n_links;
}

/* ---- watches ------------------------------------------------------------ */

static bool wd_in(const int *wds, size_t n, int wd)
{
	for (size_t i = 0; i < n; i++)
		if (wds[i] == wd)
			return true;
	return false;
}

/* Watches dir and adds its wd to next[] once.  Returns 1 and *wd, 0 when the
 * folder vanished meanwhile (the event that removed it re-arms again), or a
 * negative errno. */
static int dir_watch(struct config_watch *w, const char *dir, int *next, size_t *n_next, int *wd,
                     char *err, size_t err_len)
{
	*wd = inotify_add_watch(w->fd, dir, CW_DIR_MASK);
	if (*wd < 0) {
		int e = errno;
		if (e == ENOENT || e == ENOTDIR)
			return 0;
		if (e == ENOSPC)
			return err_set(err, err_len, -e,
			               "folder %s: %s (inotify watch limit reached: raise sysctl "
			               "fs.inotify.max_user_watches)",
			               dir, strerror(e));
		return err_set(err, err_len, -e, "folder %s: %s", dir, strerror(e));
	}
	if (wd_in(next, *n_next, *wd))
		return 1;
	if (*n_next == CW_MAX_DIRS) {
		if (!wd_in(w->dirs, w->n_dirs, *wd))
			inotify_rm_watch(w->fd, *wd);
		return err_set(err, err_len, -E2BIG, "folder %s: more than %d folders to watch",
		               dir, CW_MAX_DIRS);
	}
	next[(*n_next)++] = *wd;
	return 1;
}

static void interest_add(struct cw_interest *set, size_t *n, int wd, const char *name)
{
	for (size_t i = 0; i < *n; i++)
		if (set[i].wd == wd && strcmp(set[i].name, name) == 0)
			return;
	set[*n].wd = wd;
	snprintf(set[*n].name, sizeof(set[*n].name), "%s", name);
	(*n)++;
}

/* Removes the watches in from[] that are not in keep[]. */
static void dirs_unwatch(struct config_watch *w, const int *from, size_t n_from, const int *keep,
                         size_t n_keep)
{
	for (size_t i = 0; i < n_from; i++)
		if (!wd_in(keep, n_keep, from[i]))
			inotify_rm_watch(w->fd, from[i]);
}

/* Re-resolves every path and makes the watches and interests match; on
 * failure the previous set stays in force. */
static int watch_rearm(struct config_watch *w, char *err, size_t err_len)
{
	int next[CW_MAX_DIRS];
	size_t n_next = 0;
	size_t n_interests = 0;
	char what[PATH_MAX + 8];
	int rc = 0;
	for (size_t f = 0; f < w->n_files; f++) {
		size_t n_links = chain_resolve(w->files[f].path, w->chain);
		snprintf(what, sizeof(what), "watch %s", w->files[f].path);
		for (size_t i = 0; i < n_links; i++) {
			int wd;
			rc = dir_watch(w, w->chain[i].dir, next, &n_next, &wd, err, err_len);
			if (rc < 0)
				goto fail;
			if (rc == 1)
				interest_add(w->next_interests, &n_interests, wd, w->chain[i].name);
		}
	}
	dirs_unwatch(w, w->dirs, w->n_dirs, next, n_next);
	memcpy(w->dirs, next, n_next * sizeof(next[0]));
	w->n_dirs = n_next;
	memcpy(w->interests, w->next_interests, n_interests * sizeof(w->interests[0]));
	w->n_interests = n_interests;
	return 0;
fail:
	dirs_unwatch(w, next, n_next, w->dirs, w->n_dirs);
	err_prefix(err, err_len, what);
	return rc;
}

/* ---- events ------------------------------------------------------------- */

static bool interest_has(const struct config_watch *w, int wd, const char *name)
{
	for (size_t i = 0; i < w->n_interests; i++)
		if (w->interests[i].wd == wd && strcmp(w->interests[i].name, name) == 0)
			return true;
	return false;
}

/* Whether ev can change what a watched path opens. */
static bool event_relevant(struct config_watch *w, const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW)
		return true; /* events were lost: assume the worst */
	size_t i = 0;
	while (i < w->n_dirs && w->dirs[i] != ev->wd)
		i++;
	if (i == w->n_dirs)
		return false; /* a watch already dropped by watch_rearm */
	if (ev->mask & IN_IGNORED) {
		/* The kernel dropped it (folder deleted): forget the wd. */
		w->dirs[i] = w->dirs[--w->n_dirs];
		return true;
	}
	if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF))
		return true;
	return ev->len > 0 && interest_has(w, ev->wd, ev->name);
}

/* Reads what is queued; *relevant tells whether any event mattered. */
static int watch_drain(struct config_watch *w, bool *relevant, char *err, size_t err_len)
{
	*relevant = false;
	for (int n_reads = 0; n_reads < CW_MAX_READS; n_reads++) {
		ssize_t n = read(w->fd, w->evbuf, sizeof(w->evbuf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n < 0) {
			int e = errno;
			return err_set(err, err_len, -e, "inotify read: %s", strerror(e));
		}
		for (char *p = w->evbuf; p < w->evbuf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			if (event_relevant(w, ev))
				*relevant = true;
			p += sizeof(*ev) + ev->len;
		}
	}
	return 0;
}

/* ---- content ------------------------------------------------------------ */

/* Hashes path into *st.  A file that cannot be read, or is not a regular
 * file, is a state, not an error (read_errno); only a failing digest is. */
static int file_hash(const char *path, struct cw_state *st, char *err, size_t err_len)
{
	struct stat sb;
	int rc = 0;
	memset(st, 0, sizeof(*st));
	/* O_NONBLOCK so that a FIFO put in the file's place cannot hang the
	 * serve loop in open(); it is then refused by its type, unread. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		st->read_errno = errno;
		return 0;
	}
	if (fstat(fd, &sb) != 0) {
		st->read_errno = errno;
		goto out;
	}
	if (!S_ISREG(sb.st_mode)) {
		st->read_errno = EINVAL;
		goto out;
	}
	/* No more than a reload reads (one byte over its cap still changes the
	 * digest, and the reload then says the file is too large): a huge or
	 * sparse file must not keep the serve loop hashing for seconds. */
	rc = digest_sha256_fd(fd, CONFIG_FILE_MAX + 1, st->digest, &st->read_errno, err, err_len);
	if (rc < 0)
		err_prefix(err, err_len, path);
out:
	close(fd);
	return rc;
}

static bool state_differs(const struct cw_state *a, const struct cw_state *b)
{
	if ((a->read_errno == 0) != (b->read_errno == 0))
		return true;
	return a->read_errno == 0 && memcmp(a->digest, b->digest, sizeof(a->digest)) != 0;
}

/* Hashes every file and keeps the new states; 1 when any differed. */
static int files_rehash(struct config_watch *w, char *err, size_t err_len)
{
	int changed = 0;
	for (size_t i = 0; i < w->n_files; i++) {
		struct cw_state now;
		int rc = file_hash(w->files[i].path, &now, err, err_len);
		if (rc < 0)
			return rc;
		if (state_differs(&w->files[i].state, &now))
			changed = 1;
		w->files[i].state = now;
	}
	return changed;
}

/* ---- public ------------------------------------------------------------- */

/* Stores path as an absolute one and checks that its folder exists. */
static int file_init(struct cw_file *f, const char *path, char *err, size_t err_len)
{
	char abs[PATH_MAX];
	char cwd[PATH_MAX] = "";
	struct stat st;
	if (path == NULL || path[0] == '\0')
		return err_set(err, err_len, -EINVAL, "watch: empty path");
	size_t len = strlen(path);
	if (path[len - 1] == '/')
		return err_set(err, err_len, -EISDIR, "watch %s: names a folder, not a file", path);
	if (path[0] != '/' && getcwd(cwd, sizeof(cwd)) == NULL) {
		int e = errno;
		return err_set(err, err_len, -e, "watch %s: current folder: %s", path, strerror(e));
	}
	int n = snprintf(abs, sizeof(abs), "%s%s%s", cwd, path[0] == '/' ? "" : "/", path);
	if (n < 0 || (size_t)n >= sizeof(abs))
		return err_set(err, err_len, -ENAMETOOLONG, "watch %s: path too long", path);
	char *slash = strrchr(abs, '/');
	*slash = '\0';
	const char *dir = slash == abs ? "/" : abs;
	int e = stat(dir, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
	if (e != 0)
		return err_set(err, err_len, -e, "watch %s: folder %s: %s", path, dir, strerror(e));
	*slash = '/';
	f->path = strdup(abs);
	if (f->path == NULL)
		return err_set(err, err_len, -ENOMEM, "watch %s: out of memory", path);
	return 0;
}

int config_watch_new(const char *const *paths, size_t n_paths, int debounce_ms,
                     struct config_watch **out, char *err, size_t err_len)
{
	struct config_watch *w = NULL;
	int rc;
	if (out == NULL)
		return err_set(err, err_len, -EINVAL, "config watch: no result pointer");
	*out = NULL;
	if (paths == NULL || n_paths == 0 || n_paths > CONFIG_WATCH_MAX_FILES)
		return err_set(err, err_len, -EINVAL, "config watch: %zu paths (1 to %d allowed)",
		               n_paths, CONFIG_WATCH_MAX_FILES);
	if (debounce_ms < 0 || debounce_ms > CONFIG_WATCH_MAX_DEBOUNCE_MS)
		return err_set(err, err_len, -EINVAL,
		               "config watch: debounce %d ms (0 to %d allowed)", debounce_ms,
		               CONFIG_WATCH_MAX_DEBOUNCE_MS);
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return err_set(err, err_len, -ENOMEM, "config watch: out of memory");
	w->fd = -1;
	w->debounce_ms = debounce_ms;
	for (size_t i = 0; i < n_paths; i++) {
		rc = file_init(&w->files[i], paths[i], err, err_len);
		if (rc < 0)
			goto fail;
		w->n_files++;
	}
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0) {
		int e = errno;
		rc = err_set(err, err_len, -e, "inotify_init1: %s%s", strerror(e),
		             e == EMFILE ? " (raise sysctl fs.inotify.max_user_instances, or the "
		                           "open-file limit)"
		                         : "");
		goto fail;
	}
	rc = watch_rearm(w, err, err_len);
	if (rc < 0)
		goto fail;
	rc = files_rehash(w, err, err_len);
	if (rc < 0)
		goto fail;
	*out = w;
	return 0;
fail:
	config_watch_free(w);
	return rc;
}

int config_watch_fd(const struct config_watch *w)
{
	return w->fd;
}

int config_watch_poll(struct config_watch *w, double now_s, char *err, size_t err_len)
{
	bool relevant;
	int rc = watch_drain(w, &relevant, err, err_len);
	if (rc < 0)
		return rc;
	if (relevant) {
		w->pending = true;
		w->last_event_s = now_s;
		rc = watch_rearm(w, err, err_len);
		if (rc < 0)
			return rc;
	}
	if (!w->pending || now_s - w->last_event_s < w->debounce_ms / 1000.0)
		return 0;
	w->pending = false;
	/* Again, in case a folder was mid-swap at the last event; any write
	 * after this is seen by the new watches, any before by the hash. */
	rc = watch_rearm(w, err, err_len);
	if (rc < 0)
		return rc;
	return files_rehash(w, err, err_len);
}

void config_watch_free(struct config_watch *w)
{
	if (w == NULL)
		return;
	if (w->fd >= 0)
		close(w->fd); /* drops every watch with it */
	for (size_t i = 0; i < w->n_files; i++)
		free(w->files[i].path);
	free(w);
}
