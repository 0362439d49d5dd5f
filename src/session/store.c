/* The session snapshot store: files in one directory that several daemon
 * instances share, with leases that say which instance owns a session and a
 * background thread that keeps this instance's leases fresh and sweeps out
 * expired snapshots, stale temp files and stale leases.
 *
 * It does not look inside snapshots, does not serialise sessions, and does
 * not release leases on close: drain code decides which sessions to hand
 * over.  Every path is built from an id that passed session_store_id_valid()
 * and opened relative to the directory's descriptor, never following a
 * symlink at the last component. */
#include "session/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/errbuf.h"

#define STORE_DEFAULT_SWEEP_S 10.0
#define STORE_TEMP_STALE_S 60.0
#define STORE_INSTANCE_MAX 128
#define STORE_NAME_MAX 96 /* ".<id>.lease.tmp.<16 hex>" and shorter */
#define STORE_TAKE_TRIES 4

struct session_store {
	char *dir;
	int dir_fd;
	char *instance;
	uint64_t max_bytes;
	double lease_timeout_s;
	double ttl_s;
	double sweep_interval_s;
	atomic_uint temp_seq; /* mixed into temp names in case getrandom fails */

	pthread_mutex_t lock;                   /* guards everything below */
	char (*held)[SESSION_STORE_ID_MAX + 1]; /* (n_held) ids whose leases we hold */
	size_t n_held, cap_held;
	uint64_t evicted, expired, takeovers;
	bool stop;
	pthread_cond_t wake;

	/* Serialises scans that delete files, so that a put and the thread's
	 * sweep do not both evict for the same excess. */
	pthread_mutex_t scan_lock;
	pthread_t thread;
	bool thread_started;
};

/* ---------------------------------------------------------------- names */

bool session_store_id_valid(const char *id)
{
	if (!id)
		return false;
	size_t i = 0;
	for (; id[i]; i++) {
		char c = id[i];
		bool hex =
		    (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
		if (!hex || i >= SESSION_STORE_ID_MAX)
			return false;
	}
	return i > 0;
}

static int check_id(const char *id, char *err, size_t err_len)
{
	if (session_store_id_valid(id))
		return 0;
	return err_set(err, err_len, -EINVAL, "invalid session id (want 1..%d hex digits)",
	               SESSION_STORE_ID_MAX);
}

static void snap_name(char *buf, const char *id)
{
	snprintf(buf, STORE_NAME_MAX, "%s.snap", id);
}

static void lease_name(char *buf, const char *id)
{
	snprintf(buf, STORE_NAME_MAX, "%s.lease", id);
}

/* ".<base>.tmp.<16 hex>": the leading dot and ".tmp." are what the sweep
 * recognises as a temp file. */
static void temp_name(struct session_store *st, char *buf, const char *base)
{
	uint64_t r = 0;
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		r = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
	}
	r ^= (uint64_t)atomic_fetch_add(&st->temp_seq, 1) * 0x9e3779b97f4a7c15ULL;
	snprintf(buf, STORE_NAME_MAX, ".%s.tmp.%016llx", base, (unsigned long long)r);
}

enum name_kind { NAME_OTHER = 0, NAME_SNAP, NAME_LEASE, NAME_TEMP };

/* What a directory entry is; the id of a snapshot or lease goes to id. */
static enum name_kind name_classify(const char *name, char id[SESSION_STORE_ID_MAX + 1])
{
	if (name[0] == '.')
		return strstr(name, ".tmp.") ? NAME_TEMP : NAME_OTHER;
	const char *dot = strchr(name, '.');
	size_t len = dot ? (size_t)(dot - name) : 0;
	if (len == 0 || len > SESSION_STORE_ID_MAX)
		return NAME_OTHER;
	memcpy(id, name, len);
	id[len] = '\0';
	if (!session_store_id_valid(id))
		return NAME_OTHER;
	if (strcmp(dot, ".snap") == 0)
		return NAME_SNAP;
	if (strcmp(dot, ".lease") == 0)
		return NAME_LEASE;
	return NAME_OTHER;
}

/* ---------------------------------------------------------------- small io */

/* Seconds since mtime by this host's clock. */
static double age_of(const struct timespec *mtime)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	return (double)(now.tv_sec - mtime->tv_sec) + (double)(now.tv_nsec - mtime->tv_nsec) * 1e-9;
}

static double age_s(const struct stat *sb)
{
	return age_of(&sb->st_mtim);
}

static int write_all(int fd, const void *bytes, size_t n)
{
	const unsigned char *p = bytes;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Creates name exclusively (0600 whatever the umask) holding bytes; on
 * failure nothing is left behind except when the failure is -EEXIST. */
static int create_file(struct session_store *st, const char *name, const void *bytes, size_t n,
                       bool sync)
{
	int fd =
	    openat(st->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (fchmod(fd, 0600) < 0)
		rc = -errno;
	if (rc == 0)
		rc = write_all(fd, bytes, n);
	if (rc == 0 && sync && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		unlinkat(st->dir_fd, name, 0);
	return rc;
}

/* Opens a regular file for reading without following a symlink and without
 * blocking on a FIFO someone put in its place. */
static int open_regular(struct session_store *st, const char *name, struct stat *sb)
{
	int fd = openat(st->dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, sb) < 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	if (!S_ISREG(sb->st_mode)) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

/* ---------------------------------------------------------------- held set */

static ssize_t held_find(const struct session_store *st, const char *id)
{
	for (size_t i = 0; i < st->n_held; i++)
		if (strcmp(st->held[i], id) == 0)
			return (ssize_t)i;
	return -1;
}

static int held_add(struct session_store *st, const char *id)
{
	int rc = 0;
	pthread_mutex_lock(&st->lock);
	if (held_find(st, id) >= 0)
		goto out;
	if (st->n_held == st->cap_held) {
		size_t cap = st->cap_held ? st->cap_held * 2 : 16;
		void *grown = realloc(st->held, cap * sizeof(*st->held));
		if (!grown) {
			rc = -ENOMEM;
			goto out;
		}
		st->held = grown;
		st->cap_held = cap;
	}
	snprintf(st->held[st->n_held++], SESSION_STORE_ID_MAX + 1, "%s", id);
out:
	pthread_mutex_unlock(&st->lock);
	return rc;
}

static void held_remove(struct session_store *st, const char *id)
{
	pthread_mutex_lock(&st->lock);
	ssize_t i = held_find(st, id);
	if (i >= 0)
		memmove(st->held[i], st->held[--st->n_held], sizeof(*st->held));
	pthread_mutex_unlock(&st->lock);
}

static bool held_contains(struct session_store *st, const char *id)
{
	pthread_mutex_lock(&st->lock);
	bool found = held_find(st, id) >= 0;
	pthread_mutex_unlock(&st->lock);
	return found;
}

static void count(struct session_store *st, uint64_t *counter)
{
	pthread_mutex_lock(&st->lock);
	(*counter)++;
	pthread_mutex_unlock(&st->lock);
}

/* ---------------------------------------------------------------- leases */

/* The holder named in lease file `name` (up to the first newline, at most
 * who_len - 1 bytes) and the file's stat. */
static int lease_read(struct session_store *st, const char *name, char *who, size_t who_len,
                      struct stat *sb)
{
	int fd = open_regular(st, name, sb);
	if (fd < 0)
		return fd;
	size_t got = 0;
	while (got + 1 < who_len) {
		ssize_t r = read(fd, who + got, who_len - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int rc = -errno;
			close(fd);
			return rc;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	who[got] = '\0';
	char *nl = strchr(who, '\n');
	if (nl)
		*nl = '\0';
	return 0;
}

static bool names_us(const struct session_store *st, const char *who)
{
	return strcmp(who, st->instance) == 0;
}

/* Whether the lease of id belongs to another instance that refreshed it
 * within lease_timeout_s. */
static bool lease_live_other(struct session_store *st, const char *id)
{
	char name[STORE_NAME_MAX], who[STORE_INSTANCE_MAX + 2];
	struct stat sb;
	lease_name(name, id);
	if (lease_read(st, name, who, sizeof(who), &sb) < 0)
		return false;
	return !names_us(st, who) && age_s(&sb) <= st->lease_timeout_s;
}

/* Held by us, or refreshed by anyone within lease_timeout_s. */
static bool lease_live(struct session_store *st, const char *id)
{
	if (held_contains(st, id))
		return true;
	char name[STORE_NAME_MAX];
	struct stat sb;
	lease_name(name, id);
	if (fstatat(st->dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode))
		return false;
	return age_s(&sb) <= st->lease_timeout_s;
}

static void sanitise(char *out, size_t out_len, const char *in)
{
	if (out_len == 0)
		return;
	size_t i = 0;
	for (; in[i] && i + 1 < out_len; i++)
		out[i] = (in[i] >= 0x20 && in[i] < 0x7f) ? in[i] : '?';
	out[i] = '\0';
}

/* Replaces the stale lease (as seen in `seen`) by one naming us.  -EAGAIN
 * when the lease changed since it was judged stale. */
static int lease_takeover(struct session_store *st, const char *id, const struct stat *seen,
                          char *who, size_t who_len)
{
	char name[STORE_NAME_MAX], tmp[STORE_NAME_MAX], line[STORE_INSTANCE_MAX + 2];
	lease_name(name, id);
	temp_name(st, tmp, name);
	int n = snprintf(line, sizeof(line), "%s\n", st->instance);
	int rc = create_file(st, tmp, line, (size_t)n, false);
	if (rc < 0)
		return rc;
	/* Checked again right before the rename, so that we do not replace a
	 * lease another instance has just taken over or refreshed. */
	struct stat now;
	if (fstatat(st->dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) < 0 ||
	    now.st_ino != seen->st_ino || now.st_mtim.tv_sec != seen->st_mtim.tv_sec ||
	    now.st_mtim.tv_nsec != seen->st_mtim.tv_nsec) {
		unlinkat(st->dir_fd, tmp, 0);
		return -EAGAIN;
	}
	if (renameat(st->dir_fd, tmp, st->dir_fd, name) < 0) {
		rc = -errno;
		unlinkat(st->dir_fd, tmp, 0);
		return rc;
	}
	struct stat sb;
	rc = lease_read(st, name, who, who_len, &sb);
	if (rc == -ENOENT)
		return -EAGAIN;
	if (rc < 0)
		return rc;
	if (!names_us(st, who))
		return -EBUSY; /* another instance's rename landed after ours */
	count(st, &st->takeovers);
	return held_add(st, id);
}

static int lease_busy(struct session_store *st, const char *id, const char *who, char *holder,
                      size_t holder_len, char *err, size_t err_len)
{
	char clean[STORE_INSTANCE_MAX + 2];
	sanitise(clean, sizeof(clean), who);
	sanitise(holder, holder_len, clean);
	held_remove(st, id);
	return err_set(err, err_len, -EBUSY, "session %s is leased by instance '%s'", id, clean);
}

/* One attempt of lease_take: -EAGAIN when the lease changed under us. */
static int lease_take_once(struct session_store *st, const char *id, char *holder,
                           size_t holder_len, char *err, size_t err_len)
{
	char name[STORE_NAME_MAX], line[STORE_INSTANCE_MAX + 2], who[STORE_INSTANCE_MAX + 2];
	lease_name(name, id);
	int n = snprintf(line, sizeof(line), "%s\n", st->instance);
	int rc = create_file(st, name, line, (size_t)n, false);
	if (rc == 0)
		return held_add(st, id);
	if (rc != -EEXIST)
		return err_set(err, err_len, rc, "%s/%s: %s", st->dir, name, strerror(-rc));
	struct stat sb;
	rc = lease_read(st, name, who, sizeof(who), &sb);
	if (rc == -ENOENT)
		return -EAGAIN;
	if (rc < 0)
		return err_set(err, err_len, rc, "%s/%s: %s", st->dir, name,
		               rc == -EINVAL ? "not a regular file" : strerror(-rc));
	if (names_us(st, who)) {
		if (utimensat(st->dir_fd, name, NULL, AT_SYMLINK_NOFOLLOW) < 0)
			return err_set(err, err_len, -errno, "%s/%s: %s", st->dir, name,
			               strerror(errno));
		return held_add(st, id);
	}
	if (age_s(&sb) <= st->lease_timeout_s)
		return lease_busy(st, id, who, holder, holder_len, err, err_len);
	rc = lease_takeover(st, id, &sb, who, sizeof(who));
	if (rc == -EBUSY)
		return lease_busy(st, id, who, holder, holder_len, err, err_len);
	if (rc < 0 && rc != -EAGAIN)
		return err_set(err, err_len, rc, "%s/%s: taking over: %s", st->dir, name,
		               strerror(-rc));
	return rc;
}

int session_store_lease_take(struct session_store *st, const char *id, char *holder,
                             size_t holder_len, char *err, size_t err_len)
{
	if (holder_len > 0)
		holder[0] = '\0';
	int rc = check_id(id, err, err_len);
	if (rc < 0)
		return rc;
	for (int attempt = 0; attempt < STORE_TAKE_TRIES; attempt++) {
		rc = lease_take_once(st, id, holder, holder_len, err, err_len);
		if (rc != -EAGAIN)
			return rc;
	}
	return err_set(err, err_len, -EBUSY, "session %s: its lease keeps changing", id);
}

int session_store_lease_release(struct session_store *st, const char *id)
{
	if (!session_store_id_valid(id))
		return -EINVAL;
	char name[STORE_NAME_MAX], who[STORE_INSTANCE_MAX + 2];
	struct stat sb;
	lease_name(name, id);
	int rc = lease_read(st, name, who, sizeof(who), &sb);
	if (rc == 0 && !names_us(st, who))
		rc = -EPERM;
	if (rc == 0 && unlinkat(st->dir_fd, name, 0) < 0)
		rc = -errno;
	held_remove(st, id);
	return rc;
}

/* Touches every lease we hold; forgets those that vanished or that another
 * instance took over meanwhile. */
static void leases_refresh(struct session_store *st)
{
	pthread_mutex_lock(&st->lock);
	size_t n = st->n_held;
	char(*ids)[SESSION_STORE_ID_MAX + 1] = n ? malloc(n * sizeof(*ids)) : NULL;
	if (ids)
		memcpy(ids, st->held, n * sizeof(*ids));
	pthread_mutex_unlock(&st->lock);
	if (!ids)
		return;
	for (size_t i = 0; i < n; i++) {
		char name[STORE_NAME_MAX], who[STORE_INSTANCE_MAX + 2];
		struct stat sb;
		lease_name(name, ids[i]);
		int rc = lease_read(st, name, who, sizeof(who), &sb);
		if (rc == 0 && names_us(st, who))
			utimensat(st->dir_fd, name, NULL, AT_SYMLINK_NOFOLLOW);
		else if (rc == 0 || rc == -ENOENT || rc == -EINVAL)
			held_remove(st, ids[i]);
	}
	free(ids);
}

/* ---------------------------------------------------------------- scans */

struct snap_entry {
	char id[SESSION_STORE_ID_MAX + 1];
	uint64_t size;
	struct timespec mtime;
};

struct snap_list {
	struct snap_entry *items; /* (n) */
	size_t n, cap;
	uint64_t bytes; /* sum of items' sizes */
};

static int snap_list_push(struct snap_list *l, const char *id, const struct stat *sb)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		void *grown = realloc(l->items, cap * sizeof(*l->items));
		if (!grown)
			return -ENOMEM;
		l->items = grown;
		l->cap = cap;
	}
	struct snap_entry *e = &l->items[l->n++];
	snprintf(e->id, sizeof(e->id), "%s", id);
	e->size = (uint64_t)sb->st_size;
	e->mtime = sb->st_mtim;
	l->bytes += e->size;
	return 0;
}

/* Deletes what the sweep deletes on sight: temp files older than a minute,
 * and leases nobody holds that are older than ttl_s.  How many it deleted. */
static int sweep_entry(struct session_store *st, enum name_kind kind, const char *name,
                       const char *id, const struct stat *sb)
{
	if (kind == NAME_TEMP && age_s(sb) > STORE_TEMP_STALE_S)
		return unlinkat(st->dir_fd, name, 0) == 0;
	if (kind != NAME_LEASE || st->ttl_s <= 0 || age_s(sb) <= st->ttl_s || held_contains(st, id))
		return 0;
	return unlinkat(st->dir_fd, name, 0) == 0;
}

/* Lists the regular .snap files; with sweep, also deletes stale temp files
 * and leases (adding how many to *removed). */
static int store_scan(struct session_store *st, struct snap_list *l, bool sweep, int *removed)
{
	int fd = openat(st->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d)) != NULL) {
		char id[SESSION_STORE_ID_MAX + 1];
		enum name_kind kind = name_classify(de->d_name, id);
		struct stat sb;
		if (kind == NAME_OTHER || (kind != NAME_SNAP && !sweep))
			continue;
		if (fstatat(st->dir_fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(sb.st_mode))
			continue;
		if (kind == NAME_SNAP)
			rc = snap_list_push(l, id, &sb);
		else
			*removed += sweep_entry(st, kind, de->d_name, id, &sb);
	}
	closedir(d);
	return rc;
}

static int snap_older(const void *a, const void *b)
{
	const struct snap_entry *x = a, *y = b;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->id, y->id);
}

/* 1 deleted, 0 already gone (another instance got there first), -1 failed. */
static int snap_unlink(struct session_store *st, const char *id)
{
	char name[STORE_NAME_MAX];
	snap_name(name, id);
	if (unlinkat(st->dir_fd, name, 0) == 0)
		return 1;
	return errno == ENOENT ? 0 : -1;
}

/* Deletes the oldest snapshots (not keep_id, not leased live by another
 * instance) while the list exceeds max_bytes.  How many it deleted. */
static int enforce_bound(struct session_store *st, struct snap_list *l, const char *keep_id)
{
	if (st->max_bytes == 0 || l->bytes <= st->max_bytes)
		return 0;
	qsort(l->items, l->n, sizeof(*l->items), snap_older);
	int removed = 0;
	for (size_t i = 0; i < l->n && l->bytes > st->max_bytes; i++) {
		struct snap_entry *e = &l->items[i];
		if ((keep_id && strcmp(e->id, keep_id) == 0) || lease_live_other(st, e->id))
			continue;
		int rc = snap_unlink(st, e->id);
		if (rc > 0) {
			count(st, &st->evicted);
			removed++;
		}
		if (rc >= 0)
			l->bytes -= e->size;
	}
	return removed;
}

/* Deletes the snapshots older than ttl_s whose lease is not live, and drops
 * them from the list.  How many it deleted. */
static int expire_old(struct session_store *st, struct snap_list *l)
{
	if (st->ttl_s <= 0)
		return 0;
	int removed = 0;
	size_t kept = 0;
	for (size_t i = 0; i < l->n; i++) {
		struct snap_entry *e = &l->items[i];
		if (age_of(&e->mtime) > st->ttl_s && !lease_live(st, e->id)) {
			int rc = snap_unlink(st, e->id);
			if (rc > 0) {
				count(st, &st->expired);
				removed++;
			}
			if (rc >= 0) {
				l->bytes -= e->size;
				continue;
			}
		}
		l->items[kept++] = *e;
	}
	l->n = kept;
	return removed;
}

int session_store_sweep(struct session_store *st)
{
	struct snap_list l = {0};
	int removed = 0;
	pthread_mutex_lock(&st->scan_lock);
	int rc = store_scan(st, &l, true, &removed);
	if (rc == 0) {
		removed += expire_old(st, &l);
		removed += enforce_bound(st, &l, NULL);
	}
	pthread_mutex_unlock(&st->scan_lock);
	free(l.items);
	return rc < 0 ? rc : removed;
}

void session_store_get_usage(struct session_store *st, struct session_store_usage *out)
{
	struct snap_list l = {0};
	int removed = 0;
	memset(out, 0, sizeof(*out));
	if (store_scan(st, &l, false, &removed) == 0) {
		out->files = l.n;
		out->bytes = l.bytes;
	}
	free(l.items);
	pthread_mutex_lock(&st->lock);
	out->evicted = st->evicted;
	out->expired = st->expired;
	out->takeovers = st->takeovers;
	pthread_mutex_unlock(&st->lock);
}

/* ---------------------------------------------------------------- snapshots */

int session_store_put(struct session_store *st, const char *id, const void *bytes, size_t n,
                      char *err, size_t err_len)
{
	int rc = check_id(id, err, err_len);
	if (rc < 0)
		return rc;
	char name[STORE_NAME_MAX], tmp[STORE_NAME_MAX];
	snap_name(name, id);
	for (int attempt = 0; attempt < STORE_TAKE_TRIES; attempt++) {
		temp_name(st, tmp, name);
		rc = create_file(st, tmp, bytes, n, true);
		if (rc != -EEXIST)
			break;
	}
	if (rc < 0)
		return err_set(err, err_len, rc, "%s/%s: %s", st->dir, tmp, strerror(-rc));
	if (renameat(st->dir_fd, tmp, st->dir_fd, name) < 0) {
		rc = err_set(err, err_len, -errno, "%s/%s: rename: %s", st->dir, name,
		             strerror(errno));
		unlinkat(st->dir_fd, tmp, 0);
		return rc;
	}
	if (fsync(st->dir_fd) < 0)
		return err_set(err, err_len, -errno, "%s: fsync: %s", st->dir, strerror(errno));
	if (st->max_bytes == 0)
		return 0;
	struct snap_list l = {0};
	int removed = 0;
	pthread_mutex_lock(&st->scan_lock);
	rc = store_scan(st, &l, false, &removed);
	if (rc == 0)
		enforce_bound(st, &l, id);
	pthread_mutex_unlock(&st->scan_lock);
	free(l.items);
	if (rc < 0)
		return err_set(err, err_len, rc, "%s: listing: %s", st->dir, strerror(-rc));
	return 0;
}

static int read_whole(int fd, unsigned char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO; /* shorter than fstat said: someone truncated it in place */
		got += (size_t)r;
	}
	return 0;
}

int session_store_get(struct session_store *st, const char *id, size_t max_bytes,
                      unsigned char **out, size_t *n, char *err, size_t err_len)
{
	*out = NULL;
	*n = 0;
	int rc = check_id(id, err, err_len);
	if (rc < 0)
		return rc;
	char name[STORE_NAME_MAX];
	snap_name(name, id);
	struct stat sb;
	int fd = open_regular(st, name, &sb);
	if (fd == -ENOENT)
		return err_set(err, err_len, fd, "no snapshot of session %s in %s", id, st->dir);
	if (fd == -ELOOP)
		return err_set(err, err_len, fd, "%s/%s: is a symlink", st->dir, name);
	if (fd == -EINVAL)
		return err_set(err, err_len, fd, "%s/%s: not a regular file", st->dir, name);
	if (fd < 0)
		return err_set(err, err_len, fd, "%s/%s: %s", st->dir, name, strerror(-fd));
	if ((uint64_t)sb.st_size > (uint64_t)max_bytes) {
		rc = err_set(err, err_len, -EFBIG, "%s/%s: %lld bytes, more than the %zu allowed",
		             st->dir, name, (long long)sb.st_size, max_bytes);
		goto out;
	}
	size_t size = (size_t)sb.st_size;
	unsigned char *buf = malloc(size ? size : 1);
	if (!buf) {
		rc = err_set(err, err_len, -ENOMEM, "%s/%s: no memory for %zu bytes", st->dir, name,
		             size);
		goto out;
	}
	rc = read_whole(fd, buf, size);
	if (rc < 0) {
		free(buf);
		rc = err_set(err, err_len, rc, "%s/%s: read: %s", st->dir, name, strerror(-rc));
		goto out;
	}
	*out = buf;
	*n = size;
out:
	close(fd);
	return rc;
}

int session_store_remove(struct session_store *st, const char *id, char *err, size_t err_len)
{
	int rc = check_id(id, err, err_len);
	if (rc < 0)
		return rc;
	char name[STORE_NAME_MAX];
	snap_name(name, id);
	if (unlinkat(st->dir_fd, name, 0) < 0 && errno != ENOENT)
		return err_set(err, err_len, -errno, "%s/%s: %s", st->dir, name, strerror(errno));
	rc = session_store_lease_release(st, id);
	if (rc < 0 && rc != -ENOENT && rc != -EPERM) {
		lease_name(name, id);
		return err_set(err, err_len, rc, "%s/%s: %s", st->dir, name, strerror(-rc));
	}
	return 0;
}

bool session_store_exists(struct session_store *st, const char *id)
{
	if (!session_store_id_valid(id))
		return false;
	char name[STORE_NAME_MAX];
	struct stat sb;
	snap_name(name, id);
	return fstatat(st->dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
}

/* ---------------------------------------------------------------- thread */

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct timespec mono_deadline(double at)
{
	struct timespec ts;
	ts.tv_sec = (time_t)at;
	ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static void *store_thread(void *arg)
{
	struct session_store *st = arg;
	double refresh_every = st->lease_timeout_s / 3.0;
	double next_refresh = mono_s() + refresh_every;
	double next_sweep = mono_s() + st->sweep_interval_s;
	pthread_mutex_lock(&st->lock);
	while (!st->stop) {
		double now = mono_s();
		if (now >= next_refresh) {
			pthread_mutex_unlock(&st->lock);
			leases_refresh(st);
			pthread_mutex_lock(&st->lock);
			next_refresh = now + refresh_every;
			continue;
		}
		if (now >= next_sweep) {
			pthread_mutex_unlock(&st->lock);
			session_store_sweep(st);
			pthread_mutex_lock(&st->lock);
			next_sweep = mono_s() + st->sweep_interval_s;
			continue;
		}
		struct timespec until =
		    mono_deadline(next_refresh < next_sweep ? next_refresh : next_sweep);
		pthread_cond_timedwait(&st->wake, &st->lock, &until);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/* ---------------------------------------------------------------- open/close */

static int check_options(const struct session_store_options *o, char *err, size_t err_len)
{
	if (!o->dir || !o->dir[0])
		return err_set(err, err_len, -EINVAL, "session store: no directory given");
	if (!(o->lease_timeout_s > 0))
		return err_set(err, err_len, -EINVAL, "session store: lease_timeout_s must be > 0");
	if (!(o->ttl_s >= 0) || !(o->sweep_interval_s >= 0))
		return err_set(err, err_len, -EINVAL,
		               "session store: ttl_s and sweep_interval_s must be >= 0");
	size_t len = o->instance ? strlen(o->instance) : 0;
	if (len == 0 || len > STORE_INSTANCE_MAX)
		return err_set(err, err_len, -EINVAL,
		               "session store: instance name must be 1..%d characters",
		               STORE_INSTANCE_MAX);
	for (size_t i = 0; i < len; i++)
		if (o->instance[i] < 0x20 || o->instance[i] >= 0x7f)
			return err_set(err, err_len, -EINVAL,
			               "session store: instance name must be printable ASCII");
	return 0;
}

/* Creates the directory when missing and opens it; proves it writable with
 * a probe file named like a temp file, so a crash leaves only sweepable junk. */
static int open_dir(struct session_store *st, char *err, size_t err_len)
{
	if (mkdir(st->dir, 0700) < 0 && errno != EEXIST)
		return err_set(err, err_len, -errno, "session store %s: cannot create: %s", st->dir,
		               strerror(errno));
	st->dir_fd = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->dir_fd < 0)
		return err_set(err, err_len, -errno, "session store %s: %s", st->dir,
		               errno == ENOTDIR ? "not a directory" : strerror(errno));
	char probe[STORE_NAME_MAX];
	temp_name(st, probe, "probe");
	int rc = create_file(st, probe, "", 0, false);
	if (rc < 0)
		return err_set(err, err_len, rc, "session store %s: not writable: %s", st->dir,
		               strerror(-rc));
	if (unlinkat(st->dir_fd, probe, 0) < 0)
		return err_set(err, err_len, -errno, "session store %s: cannot delete files: %s",
		               st->dir, strerror(errno));
	return 0;
}

static int init_sync(struct session_store *st)
{
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca) != 0)
		return -ENOMEM;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(&st->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (rc != 0)
		return -rc;
	pthread_mutex_init(&st->lock, NULL);
	pthread_mutex_init(&st->scan_lock, NULL);
	return 0;
}

int session_store_open(const struct session_store_options *o, struct session_store **out, char *err,
                       size_t err_len)
{
	*out = NULL;
	int rc = check_options(o, err, err_len);
	if (rc < 0)
		return rc;
	struct session_store *st = calloc(1, sizeof(*st));
	if (!st)
		return err_set(err, err_len, -ENOMEM, "session store: out of memory");
	st->dir_fd = -1;
	st->dir = strdup(o->dir);
	st->instance = strdup(o->instance);
	st->max_bytes = o->max_bytes;
	st->lease_timeout_s = o->lease_timeout_s;
	st->ttl_s = o->ttl_s;
	st->sweep_interval_s =
	    o->sweep_interval_s > 0 ? o->sweep_interval_s : STORE_DEFAULT_SWEEP_S;
	if (!st->dir || !st->instance) {
		free(st->dir);
		free(st->instance);
		free(st);
		return err_set(err, err_len, -ENOMEM, "session store: out of memory");
	}
	rc = init_sync(st);
	if (rc < 0) {
		free(st->dir);
		free(st->instance);
		free(st);
		return err_set(err, err_len, rc, "session store: %s", strerror(-rc));
	}
	rc = open_dir(st, err, err_len);
	if (rc == 0) {
		rc = -pthread_create(&st->thread, NULL, store_thread, st);
		st->thread_started = rc == 0;
		if (rc < 0)
			err_set(err, err_len, rc, "session store: starting its thread: %s",
			        strerror(-rc));
	}
	if (rc < 0) {
		session_store_close(st);
		return rc;
	}
	*out = st;
	return 0;
}

void session_store_close(struct session_store *st)
{
	if (!st)
		return;
	if (st->thread_started) {
		pthread_mutex_lock(&st->lock);
		st->stop = true;
		pthread_cond_signal(&st->wake);
		pthread_mutex_unlock(&st->lock);
		pthread_join(st->thread, NULL);
	}
	if (st->dir_fd >= 0)
		close(st->dir_fd);
	pthread_cond_destroy(&st->wake);
	pthread_mutex_destroy(&st->lock);
	pthread_mutex_destroy(&st->scan_lock);
	free(st->held);
	free(st->dir);
	free(st->instance);
	free(st);
}
