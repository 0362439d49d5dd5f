/* The session snapshot store on real files in a temp directory: atomic
 * puts, strict ids, refusals on get, the size bound, leases shared by two
 * store objects (two instances), the refresher, and the sweep. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "session/store.h"
#include "util/errbuf.h"
#include "testutil.h"

/* ---------------------------------------------------------------- helpers */

struct fixture {
	char root[64]; /* the mkdtemp directory */
	char dir[96];  /* root/store: the store's directory */
};

static void fixture_init(struct fixture *f)
{
	snprintf(f->root, sizeof(f->root), "/tmp/sinkd-store-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->root));
	snprintf(f->dir, sizeof(f->dir), "%s/store", f->root);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void fixture_deinit(struct fixture *f)
{
	chmod(f->dir, 0700);
	nftw(f->root, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static struct session_store *store_open(const char *dir, const char *instance, uint64_t max_bytes,
                                        double lease_timeout_s, double ttl_s, double sweep_s)
{
	struct session_store_options o = {.dir = dir,
	                                  .max_bytes = max_bytes,
	                                  .lease_timeout_s = lease_timeout_s,
	                                  .ttl_s = ttl_s,
	                                  .sweep_interval_s = sweep_s,
	                                  .instance = instance};
	struct session_store *st = NULL;
	char err[SINKD_ERR_LEN] = "";
	int rc = session_store_open(&o, &st, err, sizeof(err));
	ck_assert_msg(rc == 0, "open %s: %d %s", dir, rc, err);
	return st;
}

static void put_ok(struct session_store *st, const char *id, const void *bytes, size_t n)
{
	char err[SINKD_ERR_LEN] = "";
	int rc = session_store_put(st, id, 1, bytes, n, err, sizeof(err));
	ck_assert_msg(rc == 0, "put %s: %d %s", id, rc, err);
}

static void put_fill(struct session_store *st, const char *id, size_t n)
{
	unsigned char *buf = malloc(n);
	memset(buf, id[0], n);
	put_ok(st, id, buf, n);
	free(buf);
}

static const char *path_in(const struct fixture *f, const char *name)
{
	static char path[256];
	snprintf(path, sizeof(path), "%s/%s", f->dir, name);
	return path;
}

/* Sets name's mtime to `ago` seconds in the past. */
static void set_age(const struct fixture *f, const char *name, double ago)
{
	struct timespec ts[2];
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec -= (time_t)ago;
	ts[1] = ts[0];
	ck_assert_int_eq(utimensat(AT_FDCWD, path_in(f, name), ts, AT_SYMLINK_NOFOLLOW), 0);
}

static void write_file(const struct fixture *f, const char *name, const char *text)
{
	FILE *fp = fopen(path_in(f, name), "w");
	ck_assert_ptr_nonnull(fp);
	fputs(text, fp);
	fclose(fp);
}

static bool file_exists(const struct fixture *f, const char *name)
{
	struct stat sb;
	return lstat(path_in(f, name), &sb) == 0;
}

/* How many entries of the store directory have names starting with '.'. */
static int count_hidden(const struct fixture *f)
{
	DIR *d = opendir(f->dir);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] == '.' && strcmp(de->d_name, ".") != 0 &&
		     strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n;
}

static void sleep_s(double s)
{
	struct timespec ts = {.tv_sec = (time_t)s,
	                      .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- snapshots */

START_TEST(test_round_trip_and_mode)
{
	struct fixture f;
	fixture_init(&f);
	mode_t old = umask(0);
	struct session_store *st = store_open(f.dir, "node-a", 0, 30, 0, 0);
	struct stat sb;
	ck_assert_int_eq(stat(f.dir, &sb), 0);
	ck_assert_int_eq(sb.st_mode & 07777, 0700);

	const char snapshot[] = "opaque\0bytes\n\xff";
	put_ok(st, "00ff", snapshot, sizeof(snapshot));
	ck_assert(session_store_exists(st, "00ff"));
	ck_assert_int_eq(stat(path_in(&f, "00ff.snap"), &sb), 0);
	ck_assert_int_eq(sb.st_mode & 07777, 0600);

	unsigned char *got = NULL;
	size_t n = 0;
	char err[SINKD_ERR_LEN] = "";
	ck_assert_int_eq(session_store_get(st, "00ff", 1024, &got, &n, NULL, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, sizeof(snapshot));
	ck_assert_mem_eq(got, snapshot, n);
	free(got);

	umask(0277); /* a umask that would strip the owner's write bit */
	put_ok(st, "01", "x", 1);
	ck_assert_int_eq(stat(path_in(&f, "01.snap"), &sb), 0);
	ck_assert_int_eq(sb.st_mode & 07777, 0600);
	umask(0);

	put_ok(st, "e", "", 0); /* an empty snapshot is still a snapshot */
	ck_assert_int_eq(session_store_get(st, "e", 16, &got, &n, NULL, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 0);
	free(got);

	ck_assert_int_eq(session_store_lease_take(st, "00ff", NULL, NULL, 0, err, sizeof(err)), 0);
	ck_assert_int_eq(stat(path_in(&f, "00ff.lease"), &sb), 0);
	ck_assert_int_eq(sb.st_mode & 07777, 0600);
	char *lease = tu_slurp(path_in(&f, "00ff.lease"), NULL);
	/* instance, fence (the put borrowed fence 1), generation (the put's) */
	ck_assert_str_eq(lease, "node-a\n2\n1\n");
	free(lease);

	ck_assert_int_eq(session_store_remove(st, "00ff", err, sizeof(err)), 0);
	ck_assert(!session_store_exists(st, "00ff"));
	ck_assert(!file_exists(&f, "00ff.lease"));
	int rc = session_store_get(st, "00ff", 1024, &got, &n, NULL, err, sizeof(err));
	ck_assert_int_eq(rc, -ENOENT);
	ck_assert_ptr_null(got);
	ck_assert_ptr_nonnull(strstr(err, "00ff"));
	session_store_close(st);
	umask(old);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_put_replaces_whole)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *st = store_open(f.dir, "node-a", 0, 30, 0, 0);
	put_fill(st, "abc", 4096);
	put_ok(st, "abc", "short", 5);
	unsigned char *got = NULL;
	size_t n = 0;
	char err[SINKD_ERR_LEN] = "";
	ck_assert_int_eq(session_store_get(st, "abc", 1 << 20, &got, &n, NULL, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 5);
	ck_assert_mem_eq(got, "short", 5);
	free(got);
	ck_assert_int_eq(count_hidden(&f), 0); /* no temp file (nor probe) left behind */
	struct session_store_usage u;
	session_store_get_usage(st, &u);
	ck_assert_uint_eq(u.files, 1);
	ck_assert_uint_eq(u.bytes, 5 + 16); /* a record: a 16-byte header, then the bytes */
	session_store_close(st);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_bad_ids_refused)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *st = store_open(f.dir, "node-a", 0, 30, 0, 0);
	const char *bad[] = {"../x", "a/b", "abc.snap", "0123456789abcdef0123456789abcdef0",
	                     "",     "g1",  ".",        "..",
	                     " a",   "a\n", "ab-cd"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[SINKD_ERR_LEN] = "";
		unsigned char *got = NULL;
		size_t n = 0;
		ck_assert_msg(!session_key_valid(bad[i]), "'%s' accepted", bad[i]);
		ck_assert_int_eq(session_store_put(st, bad[i], 1, "x", 1, err, sizeof(err)), -EINVAL);
		ck_assert_str_ne(err, "");
		err[0] = '\0';
		ck_assert_int_eq(session_store_get(st, bad[i], 16, &got, &n, NULL, err, sizeof(err)),
		                 -EINVAL);
		ck_assert_str_ne(err, "");
		err[0] = '\0';
		ck_assert_int_eq(session_store_remove(st, bad[i], err, sizeof(err)), -EINVAL);
		ck_assert_str_ne(err, "");
		err[0] = '\0';
		ck_assert_int_eq(session_store_lease_take(st, bad[i], NULL, NULL, 0, err, sizeof(err)),
		                 -EINVAL);
		ck_assert_str_ne(err, "");
		ck_assert_int_eq(session_store_lease_release(st, bad[i]), -EINVAL);
		ck_assert(!session_store_exists(st, bad[i]));
	}
	ck_assert(!session_key_valid(NULL));
	ck_assert(session_key_valid("0123456789abcdefABCDEF0123456789"));
	ck_assert(session_key_valid("a"));
	/* nothing escaped into the parent, nothing was created in the store */
	char path[160];
	snprintf(path, sizeof(path), "%s/x.snap", f.root);
	ck_assert_int_ne(access(path, F_OK), 0);
	struct session_store_usage u;
	session_store_get_usage(st, &u);
	ck_assert_uint_eq(u.files, 0);
	ck_assert_int_eq(count_hidden(&f), 0);
	session_store_close(st);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_get_refuses_links_and_specials)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *st = store_open(f.dir, "node-a", 0, 30, 0, 0);
	char target[160];
	snprintf(target, sizeof(target), "%s/secret", f.root);
	FILE *fp = fopen(target, "w");
	fputs("not a snapshot", fp);
	fclose(fp);
	ck_assert_int_eq(symlink(target, path_in(&f, "abcd.snap")), 0);
	ck_assert_int_eq(mkdir(path_in(&f, "beef.snap"), 0700), 0);
	ck_assert_int_eq(mkfifo(path_in(&f, "cafe.snap"), 0600), 0);

	unsigned char *got = NULL;
	size_t n = 0;
	char err[SINKD_ERR_LEN] = "";
	ck_assert_int_eq(session_store_get(st, "abcd", 1024, &got, &n, NULL, err, sizeof(err)), -ELOOP);
	ck_assert_ptr_null(got);
	ck_assert_ptr_nonnull(strstr(err, "symlink"));
	ck_assert(!session_store_exists(st, "abcd"));
	ck_assert_int_eq(session_store_get(st, "beef", 1024, &got, &n, NULL, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(session_store_get(st, "cafe", 1024, &got, &n, NULL, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(got);
	/* a put replaces the link itself, never writing through it */
	put_ok(st, "abcd", "mine", 4);
	char *text = tu_slurp(target, NULL);
	ck_assert_str_eq(text, "not a snapshot");
	free(text);
	session_store_close(st);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_get_too_large_before_allocating)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *st = store_open(f.dir, "node-a", 0, 30, 0, 0);
	/* A sparse 1 TiB file: reading it under a bound one byte short must say
	 * -EFBIG; an implementation that allocated first would get -ENOMEM. */
	int fd = open(path_in(&f, "b16.snap"), O_WRONLY | O_CREAT, 0600);
	ck_assert_int_ge(fd, 0);
	off_t big = (off_t)1 << 40;
	ck_assert_int_eq(ftruncate(fd, big), 0);
	close(fd);
	unsigned char *got = NULL;
	size_t n = 0;
	char err[SINKD_ERR_LEN] = "";
	int rc = session_store_get(st, "b16", (size_t)big - 17, &got, &n, NULL, err, sizeof(err));
	ck_assert_msg(rc == -EFBIG, "rc %d: %s", rc, err);
	ck_assert_ptr_null(got);
	ck_assert_uint_eq(n, 0);

	put_ok(st, "5a", "four", 4);
	ck_assert_int_eq(session_store_get(st, "5a", 3, &got, &n, NULL, err, sizeof(err)), -EFBIG);
	ck_assert_int_eq(session_store_get(st, "5a", 4, &got, &n, NULL, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 4);
	free(got);
	session_store_close(st);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_size_bound_evicts_oldest)
{
	struct fixture f;
	fixture_init(&f);
	/* records of 100 bytes take 116 with their header: room for three */
	struct session_store *a = store_open(f.dir, "node-a", 348, 30, 0, 0);
	struct session_store *b = store_open(f.dir, "node-b", 0, 30, 0, 0);
	char err[SINKD_ERR_LEN] = "";
	put_fill(a, "a1", 100);
	set_age(&f, "a1.snap", 30);
	put_fill(a, "b2", 100);
	set_age(&f, "b2.snap", 20);
	ck_assert_int_eq(session_store_lease_take(b, "b2", NULL, NULL, 0, err, sizeof(err)), 0);
	put_fill(a, "c3", 100);
	set_age(&f, "c3.snap", 10);

	put_fill(a, "d4", 100); /* 400 > 300: the oldest goes */
	ck_assert(!session_store_exists(a, "a1"));
	ck_assert(session_store_exists(a, "b2") && session_store_exists(a, "c3"));
	put_fill(a, "e5", 100); /* b2 is older but leased live by node-b */
	ck_assert(session_store_exists(a, "b2"));
	ck_assert(!session_store_exists(a, "c3"));
	ck_assert(session_store_exists(a, "d4") && session_store_exists(a, "e5"));
	struct session_store_usage u;
	session_store_get_usage(a, &u);
	ck_assert_uint_eq(u.files, 3);
	ck_assert_uint_eq(u.bytes, 348);
	ck_assert_uint_eq(u.evicted, 2);

	put_fill(a, "f6", 400); /* larger than the bound alone: kept, as is b2 */
	ck_assert(session_store_exists(a, "f6") && session_store_exists(a, "b2"));
	ck_assert(!session_store_exists(a, "d4") && !session_store_exists(a, "e5"));
	session_store_get_usage(a, &u);
	ck_assert_uint_eq(u.evicted, 4);
	ck_assert_uint_eq(u.bytes, 532);
	session_store_close(b);
	session_store_close(a);
	fixture_deinit(&f);
}
END_TEST

/* ---------------------------------------------------------------- leases */

START_TEST(test_lease_busy_then_takeover)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *a = store_open(f.dir, "alpha", 0, 0.5, 0, 0);
	struct session_store *b = store_open(f.dir, "beta", 0, 0.5, 0, 0);
	char err[SINKD_ERR_LEN] = "", holder[64] = "";
	ck_assert_int_eq(session_store_lease_take(a, "5e55", NULL, NULL, 0, err, sizeof(err)), 0);
	ck_assert_int_eq(session_store_lease_take(a, "5e55", NULL, NULL, 0, err, sizeof(err)), 0);
	int rc = session_store_lease_take(b, "5e55", NULL, holder, sizeof(holder), err, sizeof(err));
	ck_assert_int_eq(rc, -EBUSY);
	ck_assert_str_eq(holder, "alpha");
	ck_assert_ptr_nonnull(strstr(err, "alpha"));

	/* a non-holder's release leaves the lease alone */
	ck_assert_int_eq(session_store_lease_release(b, "5e55"), -ENOENT);
	ck_assert(file_exists(&f, "5e55.lease"));

	/* alpha's thread keeps it fresh well past the timeout */
	sleep_s(1.2);
	rc = session_store_lease_take(b, "5e55", NULL, holder, sizeof(holder), err, sizeof(err));
	ck_assert_int_eq(rc, -EBUSY);

	/* alpha stops refreshing (close keeps the lease on disk): beta takes over */
	session_store_close(a);
	ck_assert(file_exists(&f, "5e55.lease"));
	sleep_s(0.8);
	rc = session_store_lease_take(b, "5e55", NULL, holder, sizeof(holder), err, sizeof(err));
	ck_assert_msg(rc == 0, "takeover: %d %s", rc, err);
	char *lease = tu_slurp(path_in(&f, "5e55.lease"), NULL);
	ck_assert_str_eq(lease, "beta\n2\n0\n"); /* the fence grew with the take-over */
	free(lease);
	struct session_store_usage u;
	session_store_get_usage(b, &u);
	ck_assert_uint_eq(u.takeovers, 1);
	ck_assert_int_eq(count_hidden(&f), 0);

	/* alpha, back, now finds beta there */
	a = store_open(f.dir, "alpha", 0, 0.5, 0, 0);
	rc = session_store_lease_take(a, "5e55", NULL, holder, sizeof(holder), err, sizeof(err));
	ck_assert_int_eq(rc, -EBUSY);
	ck_assert_str_eq(holder, "beta");
	ck_assert_int_eq(session_store_lease_release(b, "5e55"), 0);
	lease = tu_slurp(path_in(&f, "5e55.lease"), NULL);
	ck_assert_str_eq(lease, "\n2\n0\n"); /* free, its fence and generation kept */
	free(lease);
	ck_assert_int_eq(session_store_lease_release(b, "5e55"), -ENOENT);
	session_store_close(a);
	session_store_close(b);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_lease_holder_sanitised)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *st = store_open(f.dir, "node-a", 0, 30, 0, 0);
	write_file(&f, "77.lease", "ev\x1bil\x01\n");
	char err[SINKD_ERR_LEN] = "", holder[64] = "";
	int rc = session_store_lease_take(st, "77", NULL, holder, sizeof(holder), err, sizeof(err));
	ck_assert_int_eq(rc, -EBUSY);
	ck_assert_str_eq(holder, "ev?il?");
	ck_assert_ptr_null(strchr(err, '\x1b'));
	char small[4] = "";
	rc = session_store_lease_take(st, "77", NULL, small, sizeof(small), err, sizeof(err));
	ck_assert_int_eq(rc, -EBUSY);
	ck_assert_str_eq(small, "ev?");
	session_store_close(st);
	fixture_deinit(&f);
}
END_TEST


/* ---------------------------------------------------------------- owners, fences */

START_TEST(test_fenced_write_after_takeover)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *a = store_open(f.dir, "alpha", 0, 0.5, 0, 0);
	struct session_store *b = store_open(f.dir, "beta", 0, 0.5, 0, 0);
	char err[SINKD_ERR_LEN] = "";
	ck_assert_int_eq(session_store_lease_take(a, "f00d", NULL, NULL, 0, err, sizeof(err)), 0);
	/* alpha stalls (its lease goes stale: written back as it was a second ago) */
	write_file(&f, "f00d.lease", "alpha\n1\n0\n");
	set_age(&f, "f00d.lease", 5);
	ck_assert_int_eq(session_store_lease_take(b, "f00d", NULL, NULL, 0, err, sizeof(err)), 0);
	put_ok(b, "f00d", "beta's", 6);
	/* alpha wakes up and writes with its old fence: refused, beta's stays */
	int rc = session_store_put(a, "f00d", 9, "alpha's", 7, err, sizeof(err));
	ck_assert_int_eq(rc, -ESTALE);
	ck_assert_ptr_nonnull(strstr(err, "changed hands"));
	unsigned char *got = NULL;
	size_t n = 0;
	ck_assert_int_eq(session_store_get(b, "f00d", 64, &got, &n, NULL, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 6);
	ck_assert_int_eq(memcmp(got, "beta's", 6), 0);
	free(got);
	struct session_store_usage u;
	session_store_get_usage(a, &u);
	ck_assert_uint_eq(u.fenced, 1);
	session_store_close(a);
	session_store_close(b);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_stale_record_refused)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *a = store_open(f.dir, "alpha", 0, 0.5, 0, 0);
	char err[SINKD_ERR_LEN] = "";
	uint64_t gen = 99;
	put_ok(a, "5a1e", "gen1", 4); /* generation 1, its lease let go */
	/* brought back for use: generation 2 from here, then alpha dies unwritten */
	ck_assert_int_eq(session_store_lease_take(a, "5a1e", &gen, NULL, 0, err, sizeof(err)), 0);
	ck_assert_uint_eq(gen, 1);
	ck_assert_int_eq(session_store_lease_set_generation(a, "5a1e", 2, err, sizeof(err)), 0);
	session_store_close(a);
	struct session_store *b = store_open(f.dir, "beta", 0, 0.5, 0, 0);
	sleep_s(0.8);
	ck_assert_int_eq(session_store_lease_take(b, "5a1e", &gen, NULL, 0, err, sizeof(err)), 0);
	ck_assert_uint_eq(gen, 2);
	unsigned char *got = NULL;
	size_t n = 0;
	int rc = session_store_get(b, "5a1e", 64, &got, &n, NULL, err, sizeof(err));
	ck_assert_int_eq(rc, -ESTALE);
	ck_assert_ptr_null(got);
	ck_assert_ptr_nonnull(strstr(err, "generation 1"));
	/* and a record that is current comes back with its generation */
	ck_assert_int_eq(session_store_put(b, "5a1e", 3, "gen3", 4, err, sizeof(err)), 0);
	ck_assert_int_eq(session_store_get(b, "5a1e", 64, &got, &n, &gen, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 4);
	ck_assert_uint_eq(gen, 3);
	free(got);
	session_store_close(b);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_per_key_share_evicts_own_first)
{
	struct fixture f;
	fixture_init(&f);
	/* 10 records of 116 bytes fit; each key's share is 3 */
	struct session_store_options o = {.dir = f.dir,
	                                  .max_bytes = 1160,
	                                  .per_key_bytes = 348,
	                                  .lease_timeout_s = 30,
	                                  .instance = "node-q"};
	struct session_store *st = NULL;
	char err[SINKD_ERR_LEN] = "", key[SESSION_KEY_LEN];
	ck_assert_int_eq(session_store_open(&o, &st, err, sizeof(err)), 0);
	const char *a = "key:aaaaaaaaaaaaaaaa", *b = "key:bbbbbbbbbbbbbbbb";
	ck_assert_int_eq(session_key_make(a, "a1", key), 0);
	ck_assert_str_eq(key, "aaaaaaaaaaaaaaaa-a1");
	put_fill(st, key, 100);
	char name[64];
	snprintf(name, sizeof(name), "%s.snap", key);
	set_age(&f, name, 100); /* A's session is the oldest in the store */
	for (int i = 0; i < 12; i++) {
		char id[8], k[SESSION_KEY_LEN];
		snprintf(id, sizeof(id), "b%d", i);
		ck_assert_int_eq(session_key_make(b, id, k), 0);
		put_fill(st, k, 100);
		snprintf(name, sizeof(name), "%s.snap", k);
		set_age(&f, name, 50 - i);
	}
	ck_assert(session_store_exists(st, key)); /* B's churn evicted only B's own */
	char(*keys)[SESSION_KEY_LEN] = NULL;
	size_t n = 0;
	ck_assert_int_eq(session_store_list(st, b, &keys, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 3);
	free(keys);
	ck_assert_int_eq(session_store_list(st, a, &keys, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(keys[0], key);
	free(keys);
	struct session_store_owner_count oc[4];
	ck_assert_uint_eq(session_store_evictions_by_owner(st, oc, 4), 1);
	ck_assert_str_eq(oc[0].tag, "bbbbbbbbbbbbbbbb");
	ck_assert_uint_eq(oc[0].evicted, 9);
	session_store_close(st);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_instance_name_claimed_once)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *a = store_open(f.dir, "same-name", 0, 30, 0, 0);
	struct session_store_options o = {.dir = f.dir, .lease_timeout_s = 30, .instance = "same-name"};
	struct session_store *b = NULL;
	char err[SINKD_ERR_LEN] = "", host[64] = "";
	gethostname(host, sizeof(host) - 1);
	/* a second live process under the same name is refused, naming the holder */
	int rc = session_store_open(&o, &b, err, sizeof(err));
	ck_assert_int_eq(rc, -EADDRINUSE);
	ck_assert_ptr_null(b);
	ck_assert_ptr_nonnull(strstr(err, "same-name"));
	ck_assert_ptr_nonnull(strstr(err, host));
	/* a claim not refreshed for lease_timeout_s (its process hung or died) is taken */
	DIR *d = opendir(f.dir);
	struct dirent *de;
	char claim[300] = "";
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".instance"))
			snprintf(claim, sizeof(claim), "%s", de->d_name);
	closedir(d);
	ck_assert(claim[0]);
	set_age(&f, claim, 60);
	rc = session_store_open(&o, &b, err, sizeof(err));
	ck_assert_msg(rc == 0, "%d %s", rc, err);
	session_store_close(a); /* not its claim any more: b's stays */
	ck_assert(file_exists(&f, claim));
	session_store_close(b);
	ck_assert(!file_exists(&f, claim));
	fixture_deinit(&f);
}
END_TEST

/* ---------------------------------------------------------------- sweep */

START_TEST(test_sweep_expires_unleased)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *st = store_open(f.dir, "node-s", 0, 30, 1, 100);
	struct session_store *other = store_open(f.dir, "node-o", 0, 30, 0, 100);
	char err[SINKD_ERR_LEN] = "";
	put_fill(st, "a1", 10); /* old, no lease: expires */
	put_fill(st, "b2", 10); /* old, leased live by node-o */
	put_fill(st, "c3", 10); /* old, leased by us */
	put_fill(st, "d4", 10); /* fresh */
	ck_assert_int_eq(session_store_lease_take(other, "b2", NULL, NULL, 0, err, sizeof(err)), 0);
	ck_assert_int_eq(session_store_lease_take(st, "c3", NULL, NULL, 0, err, sizeof(err)), 0);
	set_age(&f, "a1.snap", 100);
	set_age(&f, "b2.snap", 100);
	set_age(&f, "c3.snap", 100);
	write_file(&f, ".a1.snap.tmp.0123456789abcdef", "half");
	set_age(&f, ".a1.snap.tmp.0123456789abcdef", 100);
	write_file(&f, ".d4.snap.tmp.fedcba9876543210", "in flight");
	write_file(&f, "e5.lease", "ghost\n");
	set_age(&f, "e5.lease", 100);

	ck_assert_int_eq(session_store_sweep(st), 3); /* a1, the old temp, e5's lease */
	ck_assert(!session_store_exists(st, "a1"));
	ck_assert(session_store_exists(st, "b2"));
	ck_assert(session_store_exists(st, "c3"));
	ck_assert(session_store_exists(st, "d4"));
	ck_assert(!file_exists(&f, ".a1.snap.tmp.0123456789abcdef"));
	ck_assert(file_exists(&f, ".d4.snap.tmp.fedcba9876543210"));
	ck_assert(!file_exists(&f, "e5.lease"));
	ck_assert(file_exists(&f, "b2.lease") && file_exists(&f, "c3.lease"));
	struct session_store_usage u;
	session_store_get_usage(st, &u);
	ck_assert_uint_eq(u.expired, 1);
	ck_assert_uint_eq(u.files, 3);

	/* once c3's lease is released it is fair game */
	ck_assert_int_eq(session_store_lease_release(st, "c3"), 0);
	ck_assert_int_eq(session_store_sweep(st), 1);
	ck_assert(!session_store_exists(st, "c3"));
	session_store_close(other);
	session_store_close(st);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_thread_sweeps_and_closes_promptly)
{
	struct fixture f;
	fixture_init(&f);
	struct session_store *st = store_open(f.dir, "node-a", 0, 30, 1, 0.1);
	put_fill(st, "a1", 10);
	set_age(&f, "a1.snap", 100);
	for (int i = 0; i < 50 && session_store_exists(st, "a1"); i++)
		sleep_s(0.05);
	ck_assert(!session_store_exists(st, "a1"));
	session_store_close(st);

	/* long periods: close must not wait for them */
	st = store_open(f.dir, "node-a", 0, 600, 0, 600);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	session_store_close(st);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	ck_assert_msg(took < 1.0, "close took %.2f s", took);
	fixture_deinit(&f);
}
END_TEST

/* ---------------------------------------------------------------- open */

START_TEST(test_open_errors_name_the_path)
{
	struct fixture f;
	fixture_init(&f);
	char path[160], err[SINKD_ERR_LEN] = "";
	struct session_store *st = NULL;
	struct session_store_options o = {.lease_timeout_s = 30, .instance = "node-a"};

	snprintf(path, sizeof(path), "%s/missing/store", f.root);
	o.dir = path;
	ck_assert_int_eq(session_store_open(&o, &st, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, path));
	ck_assert_ptr_null(st);

	snprintf(path, sizeof(path), "%s/file", f.root);
	fclose(fopen(path, "w"));
	ck_assert_int_eq(session_store_open(&o, &st, err, sizeof(err)), -ENOTDIR);
	ck_assert_ptr_nonnull(strstr(err, path));
	ck_assert_ptr_nonnull(strstr(err, "not a directory"));

	if (geteuid() != 0) { /* root writes anywhere */
		ck_assert_int_eq(mkdir(f.dir, 0500), 0);
		o.dir = f.dir;
		ck_assert_int_eq(session_store_open(&o, &st, err, sizeof(err)), -EACCES);
		ck_assert_ptr_nonnull(strstr(err, "not writable"));
	}

	o.dir = f.root;
	o.instance = "";
	ck_assert_int_eq(session_store_open(&o, &st, err, sizeof(err)), -EINVAL);
	o.instance = "bad\nname";
	ck_assert_int_eq(session_store_open(&o, &st, err, sizeof(err)), -EINVAL);
	o.instance = "node-a";
	o.lease_timeout_s = 0;
	ck_assert_int_eq(session_store_open(&o, &st, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(st);
	fixture_deinit(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("session-store");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_round_trip_and_mode);
	tcase_add_test(tc, test_put_replaces_whole);
	tcase_add_test(tc, test_bad_ids_refused);
	tcase_add_test(tc, test_get_refuses_links_and_specials);
	tcase_add_test(tc, test_get_too_large_before_allocating);
	tcase_add_test(tc, test_size_bound_evicts_oldest);
	tcase_add_test(tc, test_lease_busy_then_takeover);
	tcase_add_test(tc, test_lease_holder_sanitised);
	tcase_add_test(tc, test_fenced_write_after_takeover);
	tcase_add_test(tc, test_stale_record_refused);
	tcase_add_test(tc, test_per_key_share_evicts_own_first);
	tcase_add_test(tc, test_instance_name_claimed_once);
	tcase_add_test(tc, test_sweep_expires_unleased);
	tcase_add_test(tc, test_thread_sweeps_and_closes_promptly);
	tcase_add_test(tc, test_open_errors_name_the_path);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
