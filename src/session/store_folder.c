/* The folder backend of the session store (store_backend.h): files in one
 * directory that several instances share (a local folder or a shared
 * volume):
 *   <key>.snap             a record, replaced atomically (temp, fsync, rename)
 *   <key>.lease            "<instance>\n<fence>\n<generation>\n"; a lease is
 *                          live while its holder refreshes its mtime within
 *                          lease_timeout_s; a free one has an empty instance
 *   <sha16>.instance       "<nonce>\n<instance>\n<host> <pid>\n": the claim
 *                          of an instance name
 *   .<name>.tmp.<16 hex>   a temp file (swept after a minute)
 * Ages are judged by this host's clock, so instances sharing a volume need
 * clocks synchronised well within lease_timeout_s.  The fence check of a
 * put and its rename are two steps: a take-over landing between them can
 * still lose to the old holder's write (a window of one rename; the Redis
 * backend has none).  Every path is built from a checked key and opened
 * relative to the directory's descriptor, never following a symlink. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "session/snapshot.h"
#include "session/store_backend.h"
#include "util/errbuf.h"

#define FOLDER_TEMP_STALE_S 60.0
#define FOLDER_NAME_MAX 96 /* ".<key>.lease.tmp.<16 hex>" and shorter */
#define FOLDER_TRIES 4

struct store_backend {
	char *dir;
	int dir_fd;
	char instance[STORE_INSTANCE_MAX + 1];
	double lease_timeout_s;
	double ttl_s;
	atomic_uint temp_seq; /* mixed into temp names in case getrandom fails */
	char claim_name[FOLDER_NAME_MAX];
	/* Serialises this process's read-modify-write of one lease file. */
	pthread_mutex_t lease_lock;
};

/* ---------------------------------------------------------------- names */

static void snap_name(char *buf, const char *key)
{
	snprintf(buf, FOLDER_NAME_MAX, "%s.snap", key);
}

static void lease_name(char *buf, const char *key)
{
	snprintf(buf, FOLDER_NAME_MAX, "%s.lease", key);
}

/* ".<base>.tmp.<16 hex>": the leading dot and ".tmp." mark a temp file. */
static void temp_name(struct store_backend *b, char *buf, const char *base)
{
	uint64_t r = 0;
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		r = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
	}
	r ^= (uint64_t)atomic_fetch_add(&b->temp_seq, 1) * 0x9e3779b97f4a7c15ULL;
	snprintf(buf, FOLDER_NAME_MAX, ".%s.tmp.%016llx", base, (unsigned long long)r);
}

enum name_kind { NAME_OTHER = 0, NAME_SNAP, NAME_LEASE, NAME_TEMP };

static enum name_kind name_classify(const char *name, char key[SESSION_STORE_KEY_MAX + 1])
{
	if (name[0] == '.')
		return strstr(name, ".tmp.") ? NAME_TEMP : NAME_OTHER;
	const char *dot = strchr(name, '.');
	size_t len = dot ? (size_t)(dot - name) : 0;
	if (len == 0 || len > SESSION_STORE_KEY_MAX)
		return NAME_OTHER;
	memcpy(key, name, len);
	key[len] = '\0';
	if (strspn(key, "0123456789abcdefABCDEF-") != len)
		return NAME_OTHER;
	if (strcmp(dot, ".snap") == 0)
		return NAME_SNAP;
	if (strcmp(dot, ".lease") == 0)
		return NAME_LEASE;
	return NAME_OTHER;
}

/* ---------------------------------------------------------------- small io */

static double age_s(const struct stat *sb)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	return (double)(now.tv_sec - sb->st_mtim.tv_sec) +
	       (double)(now.tv_nsec - sb->st_mtim.tv_nsec) * 1e-9;
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
static int create_file(struct store_backend *b, const char *name, const void *bytes, size_t n,
                       bool sync)
{
	int fd = openat(b->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
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
		unlinkat(b->dir_fd, name, 0);
	return rc;
}

/* Writes bytes to name through a temp file and a rename. */
static int replace_file(struct store_backend *b, const char *name, const void *bytes, size_t n,
                        bool sync)
{
	char tmp[FOLDER_NAME_MAX];
	int rc = -EEXIST;
	for (int attempt = 0; attempt < FOLDER_TRIES && rc == -EEXIST; attempt++) {
		temp_name(b, tmp, name);
		rc = create_file(b, tmp, bytes, n, sync);
	}
	if (rc < 0)
		return rc;
	if (renameat(b->dir_fd, tmp, b->dir_fd, name) < 0) {
		rc = -errno;
		unlinkat(b->dir_fd, tmp, 0);
		return rc;
	}
	if (sync && fsync(b->dir_fd) < 0)
		return -errno;
	return 0;
}

/* Opens a regular file for reading without following a symlink and without
 * blocking on a FIFO someone put in its place. */
static int open_regular(struct store_backend *b, const char *name, struct stat *sb)
{
	int fd = openat(b->dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
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
			return -EIO; /* shorter than fstat said: truncated in place */
		got += (size_t)r;
	}
	return 0;
}

/* A small file (a lease or a claim) as a string, at most len - 1 bytes. */
static int read_small(struct store_backend *b, const char *name, char *out, size_t len,
                      struct stat *sb)
{
	int fd = open_regular(b, name, sb);
	if (fd < 0)
		return fd;
	size_t got = 0;
	int rc = 0;
	while (got + 1 < len) {
		ssize_t r = read(fd, out + got, len - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			break;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	out[got] = '\0';
	return rc;
}

/* ---------------------------------------------------------------- leases */

static int lease_parse(const char *text, struct store_lease *l)
{
	memset(l, 0, sizeof(*l));
	const char *nl = strchr(text, '\n');
	if (!nl || (size_t)(nl - text) > STORE_INSTANCE_MAX)
		return -EINVAL;
	memcpy(l->instance, text, (size_t)(nl - text));
	l->instance[nl - text] = '\0';
	unsigned long long fence = 0, gen = 0;
	/* an old store's lease holds the instance alone: fence and generation 0 */
	if (nl[1] && sscanf(nl + 1, "%llu\n%llu", &fence, &gen) != 2)
		return -EINVAL;
	l->fence = fence;
	l->generation = gen;
	return 0;
}

static int lease_read(struct store_backend *b, const char *key, struct store_lease *l,
                      struct stat *sb)
{
	char name[FOLDER_NAME_MAX], text[STORE_INSTANCE_MAX + 64];
	lease_name(name, key);
	int rc = read_small(b, name, text, sizeof(text), sb);
	if (rc < 0)
		return rc;
	rc = lease_parse(text, l);
	if (rc == 0)
		l->live = l->instance[0] && age_s(sb) <= b->lease_timeout_s;
	return rc;
}

static int lease_write(struct store_backend *b, const char *key, const char *instance,
                       uint64_t fence, uint64_t generation)
{
	char name[FOLDER_NAME_MAX], text[STORE_INSTANCE_MAX + 64];
	lease_name(name, key);
	int n = snprintf(text, sizeof(text), "%s\n%" PRIu64 "\n%" PRIu64 "\n", instance, fence,
	                 generation);
	return replace_file(b, name, text, (size_t)n, false);
}

static bool ours(const struct store_backend *b, const struct store_lease *l, uint64_t fence)
{
	return strcmp(l->instance, b->instance) == 0 && l->fence == fence;
}

/* Another instance's live lease: -EBUSY with its value. */
static int lease_take_locked(struct store_backend *b, const char *key, struct store_lease *out,
                             char *err, size_t err_len)
{
	char name[FOLDER_NAME_MAX], text[STORE_INSTANCE_MAX + 64];
	lease_name(name, key);
	int n = snprintf(text, sizeof(text), "%s\n1\n0\n", b->instance);
	int rc = create_file(b, name, text, (size_t)n, false);
	if (rc == 0) {
		*out = (struct store_lease){.fence = 1, .live = true};
		snprintf(out->instance, sizeof(out->instance), "%s", b->instance);
		return 0;
	}
	if (rc != -EEXIST)
		return err_set(err, err_len, rc, "%s/%s: %s", b->dir, name, strerror(-rc));
	struct stat sb;
	rc = lease_read(b, key, out, &sb);
	if (rc == -ENOENT)
		return -EAGAIN;
	if (rc < 0)
		return err_set(err, err_len, rc, "%s/%s: %s", b->dir, name,
		               rc == -EINVAL ? "not a lease file" : strerror(-rc));
	if (strcmp(out->instance, b->instance) == 0) {
		if (utimensat(b->dir_fd, name, NULL, AT_SYMLINK_NOFOLLOW) < 0)
			return err_set(err, err_len, -errno, "%s/%s: %s", b->dir, name,
			               strerror(errno));
		out->live = true;
		return 0;
	}
	if (out->live)
		return -EBUSY;
	/* free or stale: ours with the next fence, its generation kept */
	rc = lease_write(b, key, b->instance, out->fence + 1, out->generation);
	if (rc < 0)
		return err_set(err, err_len, rc, "%s/%s: taking over: %s", b->dir, name,
		               strerror(-rc));
	struct store_lease now;
	if (lease_read(b, key, &now, &sb) < 0 || strcmp(now.instance, b->instance) != 0 ||
	    now.fence != out->fence + 1) {
		*out = now;
		return now.live ? -EBUSY : -EAGAIN; /* another instance's rename landed after ours */
	}
	*out = now;
	out->taken_over = true;
	return 0;
}

static int folder_lease_take(struct store_backend *b, const char *key, struct store_lease *out,
                             char *err, size_t err_len)
{
	int rc = -EAGAIN;
	pthread_mutex_lock(&b->lease_lock);
	for (int attempt = 0; attempt < FOLDER_TRIES && rc == -EAGAIN; attempt++)
		rc = lease_take_locked(b, key, out, err, err_len);
	pthread_mutex_unlock(&b->lease_lock);
	if (rc == -EAGAIN)
		return err_set(err, err_len, -EBUSY, "session %s: its lease keeps changing", key);
	if (rc == -EBUSY)
		err_set(err, err_len, -EBUSY, "session %s is leased by another instance", key);
	return rc;
}

/* Reads our lease under the lock: -ESTALE when it is not ours with fence. */
static int lease_check(struct store_backend *b, const char *key, uint64_t fence,
                       struct store_lease *l)
{
	struct stat sb;
	int rc = lease_read(b, key, l, &sb);
	if (rc == -ENOENT || (rc == 0 && !ours(b, l, fence)))
		return -ESTALE;
	return rc;
}

static int folder_lease_refresh(struct store_backend *b, const char *key, uint64_t fence)
{
	struct store_lease l;
	pthread_mutex_lock(&b->lease_lock);
	int rc = lease_check(b, key, fence, &l);
	char name[FOLDER_NAME_MAX];
	lease_name(name, key);
	if (rc == 0 && utimensat(b->dir_fd, name, NULL, AT_SYMLINK_NOFOLLOW) < 0)
		rc = -errno;
	pthread_mutex_unlock(&b->lease_lock);
	return rc;
}

static int folder_lease_set_generation(struct store_backend *b, const char *key, uint64_t fence,
                                       uint64_t generation)
{
	struct store_lease l;
	pthread_mutex_lock(&b->lease_lock);
	int rc = lease_check(b, key, fence, &l);
	if (rc == 0)
		rc = lease_write(b, key, b->instance, fence, generation);
	pthread_mutex_unlock(&b->lease_lock);
	return rc;
}

static int folder_lease_release(struct store_backend *b, const char *key, uint64_t fence)
{
	struct store_lease l;
	pthread_mutex_lock(&b->lease_lock);
	int rc = lease_check(b, key, fence, &l);
	if (rc == 0)
		rc = lease_write(b, key, "", fence, l.generation);
	pthread_mutex_unlock(&b->lease_lock);
	return rc;
}

static int folder_lease_peek(struct store_backend *b, const char *key, struct store_lease *out)
{
	struct stat sb;
	return lease_read(b, key, out, &sb);
}

/* ---------------------------------------------------------------- records */

static int folder_put(struct store_backend *b, const char *key, uint64_t fence, const void *bytes,
                      size_t n, char *err, size_t err_len)
{
	char name[FOLDER_NAME_MAX];
	snap_name(name, key);
	if (fence) {
		struct store_lease l;
		pthread_mutex_lock(&b->lease_lock);
		int rc = lease_check(b, key, fence, &l);
		pthread_mutex_unlock(&b->lease_lock);
		if (rc == -ESTALE)
			return err_set(err, err_len, rc,
			               "session %s: the lease changed hands (now '%s', fence %" PRIu64
			               "); the write is refused",
			               key, l.instance, l.fence);
		if (rc < 0)
			return err_set(err, err_len, rc, "%s/%s.lease: %s", b->dir, key, strerror(-rc));
	}
	int rc = replace_file(b, name, bytes, n, true);
	if (rc < 0)
		return err_set(err, err_len, rc, "%s/%s: %s", b->dir, name, strerror(-rc));
	return 0;
}

static int folder_get(struct store_backend *b, const char *key, size_t max_bytes,
                      unsigned char **out, size_t *n, char *err, size_t err_len)
{
	*out = NULL;
	*n = 0;
	char name[FOLDER_NAME_MAX];
	snap_name(name, key);
	struct stat sb;
	int fd = open_regular(b, name, &sb);
	if (fd == -ENOENT)
		return err_set(err, err_len, fd, "no record of session %s in %s", key, b->dir);
	if (fd == -ELOOP)
		return err_set(err, err_len, fd, "%s/%s: is a symlink", b->dir, name);
	if (fd == -EINVAL)
		return err_set(err, err_len, fd, "%s/%s: not a regular file", b->dir, name);
	if (fd < 0)
		return err_set(err, err_len, fd, "%s/%s: %s", b->dir, name, strerror(-fd));
	int rc = 0;
	if ((uint64_t)sb.st_size > (uint64_t)max_bytes) {
		rc = err_set(err, err_len, -EFBIG, "%s/%s: %lld bytes, more than the %zu allowed",
		             b->dir, name, (long long)sb.st_size, max_bytes);
		goto out;
	}
	size_t size = (size_t)sb.st_size;
	unsigned char *buf = malloc(size ? size : 1);
	if (!buf) {
		rc = err_set(err, err_len, -ENOMEM, "%s/%s: no memory for %zu bytes", b->dir, name,
		             size);
		goto out;
	}
	rc = read_whole(fd, buf, size);
	if (rc < 0) {
		free(buf);
		rc = err_set(err, err_len, rc, "%s/%s: read: %s", b->dir, name, strerror(-rc));
		goto out;
	}
	*out = buf;
	*n = size;
out:
	close(fd);
	return rc;
}

static int folder_remove(struct store_backend *b, const char *key, char *err, size_t err_len)
{
	char name[FOLDER_NAME_MAX];
	snap_name(name, key);
	if (unlinkat(b->dir_fd, name, 0) < 0 && errno != ENOENT)
		return err_set(err, err_len, -errno, "%s/%s: %s", b->dir, name, strerror(errno));
	lease_name(name, key);
	if (unlinkat(b->dir_fd, name, 0) < 0 && errno != ENOENT)
		return err_set(err, err_len, -errno, "%s/%s: %s", b->dir, name, strerror(errno));
	return 0;
}

static int folder_exists(struct store_backend *b, const char *key)
{
	char name[FOLDER_NAME_MAX];
	struct stat sb;
	snap_name(name, key);
	if (fstatat(b->dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	return S_ISREG(sb.st_mode);
}

/* ---------------------------------------------------------------- scans */

struct scan_ctx {
	struct store_entry *items;
	size_t n, cap;
};

static int entry_push(struct scan_ctx *c, const struct store_entry *e)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		void *grown = realloc(c->items, cap * sizeof(*c->items));
		if (!grown)
			return -ENOMEM;
		c->items = grown;
		c->cap = cap;
	}
	c->items[c->n++] = *e;
	return 0;
}

/* Calls fn for each entry of the directory with its kind, key and stat. */
static int scan_dir(struct store_backend *b,
                    int (*fn)(struct store_backend *, enum name_kind, const char *name,
                              const char *key, const struct stat *, void *),
                    void *ctx)
{
	int fd = openat(b->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
		char key[SESSION_STORE_KEY_MAX + 1];
		enum name_kind kind = name_classify(de->d_name, key);
		struct stat sb;
		if (kind == NAME_OTHER ||
		    fstatat(b->dir_fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(sb.st_mode))
			continue;
		rc = fn(b, kind, de->d_name, key, &sb, ctx);
	}
	closedir(d);
	return rc;
}

struct list_ctx {
	struct scan_ctx out;
	const char *prefix;
};

static int list_one(struct store_backend *b, enum name_kind kind, const char *name,
                    const char *key, const struct stat *sb, void *arg)
{
	struct list_ctx *c = arg;
	if (kind != NAME_SNAP || strncmp(key, c->prefix, strlen(c->prefix)))
		return 0;
	struct store_entry e = {.bytes = (uint64_t)sb->st_size, .age_s = age_s(sb)};
	snprintf(e.key, sizeof(e.key), "%s", key);
	struct store_lease l;
	struct stat lsb;
	char lname[FOLDER_NAME_MAX];
	lease_name(lname, key);
	/* a lease untouched for lease_timeout_s is not live: read only the others */
	if (fstatat(b->dir_fd, lname, &lsb, AT_SYMLINK_NOFOLLOW) == 0 &&
	    age_s(&lsb) <= b->lease_timeout_s && lease_read(b, key, &l, &lsb) == 0) {
		e.leased_live = l.live;
		e.leased_us = l.live && strcmp(l.instance, b->instance) == 0;
	}
	return entry_push(&c->out, &e);
}

static int folder_list(struct store_backend *b, const char *prefix, struct store_entry **out,
                       size_t *n, char *err, size_t err_len)
{
	struct list_ctx c = {.prefix = prefix ? prefix : ""};
	int rc = scan_dir(b, list_one, &c);
	if (rc < 0) {
		free(c.out.items);
		*out = NULL;
		*n = 0;
		return err_set(err, err_len, rc, "%s: listing: %s", b->dir, strerror(-rc));
	}
	*out = c.out.items;
	*n = c.out.n;
	return 0;
}

/* Stale temp files, and lease entries without a record that are not live
 * and older than ttl_s (a record's own lease goes with it). */
static int maintain_one(struct store_backend *b, enum name_kind kind, const char *name,
                        const char *key, const struct stat *sb, void *arg)
{
	int *removed = arg;
	if (kind == NAME_TEMP && age_s(sb) > FOLDER_TEMP_STALE_S)
		*removed += unlinkat(b->dir_fd, name, 0) == 0;
	if (kind != NAME_LEASE || b->ttl_s <= 0 || age_s(sb) <= b->ttl_s ||
	    folder_exists(b, key) != 0)
		return 0;
	*removed += unlinkat(b->dir_fd, name, 0) == 0;
	return 0;
}

static int folder_maintain(struct store_backend *b)
{
	int removed = 0;
	int rc = scan_dir(b, maintain_one, &removed);
	return rc < 0 ? rc : removed;
}

/* ---------------------------------------------------------------- instances */

/* Whether host:pid in a claim names a process of this host that is gone. */
static bool claim_dead_here(const char *line)
{
	char host[64] = "", me[64] = "";
	long pid = 0;
	if (sscanf(line, "%63s %ld", host, &pid) != 2 || pid <= 0)
		return false;
	gethostname(me, sizeof(me) - 1);
	return strcmp(host, me) == 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

static int folder_instance_claim(struct store_backend *b, const char *nonce, char *holder,
                                 size_t holder_len, char *err, size_t err_len)
{
	char text[STORE_INSTANCE_MAX + 200], host[64] = "";
	gethostname(host, sizeof(host) - 1);
	int n = snprintf(text, sizeof(text), "%s\n%s\n%s %ld\n", nonce, b->instance, host,
	                 (long)getpid());
	for (int attempt = 0; attempt < FOLDER_TRIES; attempt++) {
		int rc = create_file(b, b->claim_name, text, (size_t)n, false);
		if (rc == 0)
			return 0;
		if (rc != -EEXIST)
			return err_set(err, err_len, rc, "%s/%s: %s", b->dir, b->claim_name,
			               strerror(-rc));
		char seen[STORE_INSTANCE_MAX + 200];
		struct stat sb;
		rc = read_small(b, b->claim_name, seen, sizeof(seen), &sb);
		if (rc == -ENOENT)
			continue;
		if (rc < 0)
			return err_set(err, err_len, rc, "%s/%s: %s", b->dir, b->claim_name,
			               strerror(-rc));
		char *l2 = strchr(seen, '\n'), *l3 = l2 ? strchr(l2 + 1, '\n') : NULL;
		if (l2 && (size_t)(l2 - seen) == strlen(nonce) && !strncmp(seen, nonce, strlen(nonce)))
			return 0;
		if (age_s(&sb) > b->lease_timeout_s || (l3 && claim_dead_here(l3 + 1))) {
			unlinkat(b->dir_fd, b->claim_name, 0); /* stale: the next try creates ours */
			continue;
		}
		char *end = l3 ? strchr(l3 + 1, '\n') : NULL;
		if (end)
			*end = '\0';
		snprintf(holder, holder_len, "%s", l3 ? l3 + 1 : "another process");
		return err_set(err, err_len, -EADDRINUSE,
		               "instance '%s' is already live in this session store (process %s, "
		               "seen %.0f s ago); give each instance its own sessions.instance_id",
		               b->instance, holder, age_s(&sb));
	}
	return err_set(err, err_len, -EBUSY, "%s/%s: the claim keeps changing", b->dir,
	               b->claim_name);
}

static bool claim_is_ours(struct store_backend *b, const char *nonce)
{
	char seen[STORE_INSTANCE_MAX + 200];
	struct stat sb;
	if (read_small(b, b->claim_name, seen, sizeof(seen), &sb) < 0)
		return false;
	char *nl = strchr(seen, '\n');
	return nl && (size_t)(nl - seen) == strlen(nonce) && !strncmp(seen, nonce, strlen(nonce));
}

static int folder_instance_refresh(struct store_backend *b, const char *nonce)
{
	if (!claim_is_ours(b, nonce))
		return -ESTALE;
	return utimensat(b->dir_fd, b->claim_name, NULL, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static void folder_instance_release(struct store_backend *b, const char *nonce)
{
	if (claim_is_ours(b, nonce))
		unlinkat(b->dir_fd, b->claim_name, 0);
}

/* ---------------------------------------------------------------- open/close */

/* Creates the directory when missing and opens it; proves it writable with
 * a probe named like a temp file, so a crash leaves only sweepable junk. */
static int open_dir(struct store_backend *b, char *err, size_t err_len)
{
	if (mkdir(b->dir, 0700) < 0 && errno != EEXIST)
		return err_set(err, err_len, -errno, "session store %s: cannot create: %s", b->dir,
		               strerror(errno));
	b->dir_fd = open(b->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (b->dir_fd < 0)
		return err_set(err, err_len, -errno, "session store %s: %s", b->dir,
		               errno == ENOTDIR ? "not a directory" : strerror(errno));
	char probe[FOLDER_NAME_MAX];
	temp_name(b, probe, "probe");
	int rc = create_file(b, probe, "", 0, false);
	if (rc < 0)
		return err_set(err, err_len, rc, "session store %s: not writable: %s", b->dir,
		               strerror(-rc));
	if (unlinkat(b->dir_fd, probe, 0) < 0)
		return err_set(err, err_len, -errno, "session store %s: cannot delete files: %s",
		               b->dir, strerror(errno));
	return 0;
}

static void folder_close(struct store_backend *b)
{
	if (!b)
		return;
	if (b->dir_fd >= 0)
		close(b->dir_fd);
	pthread_mutex_destroy(&b->lease_lock);
	free(b->dir);
	free(b);
}

static int folder_open(const struct store_backend_options *o, struct store_backend **out,
                       char *err, size_t err_len)
{
	*out = NULL;
	if (!o->dir || !o->dir[0])
		return err_set(err, err_len, -EINVAL, "session store: no directory given");
	struct store_backend *b = calloc(1, sizeof(*b));
	if (!b || !(b->dir = strdup(o->dir))) {
		free(b);
		return err_set(err, err_len, -ENOMEM, "session store: out of memory");
	}
	b->dir_fd = -1;
	pthread_mutex_init(&b->lease_lock, NULL);
	snprintf(b->instance, sizeof(b->instance), "%s", o->instance);
	b->lease_timeout_s = o->lease_timeout_s;
	b->ttl_s = o->ttl_s;
	char sha[65];
	snapshot_sha256_hex(o->instance, strlen(o->instance), sha);
	snprintf(b->claim_name, sizeof(b->claim_name), "%.16s.instance", sha);
	int rc = open_dir(b, err, err_len);
	if (rc < 0) {
		folder_close(b);
		return rc;
	}
	*out = b;
	return 0;
}

const struct store_backend_ops store_folder_ops = {
    .name = "folder",
    .open = folder_open,
    .close = folder_close,
    .put = folder_put,
    .get = folder_get,
    .remove = folder_remove,
    .exists = folder_exists,
    .list = folder_list,
    .lease_take = folder_lease_take,
    .lease_refresh = folder_lease_refresh,
    .lease_set_generation = folder_lease_set_generation,
    .lease_release = folder_lease_release,
    .lease_peek = folder_lease_peek,
    .instance_claim = folder_instance_claim,
    .instance_refresh = folder_instance_refresh,
    .instance_release = folder_instance_release,
    .maintain = folder_maintain,
};
