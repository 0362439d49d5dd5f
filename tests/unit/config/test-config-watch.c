/* config_watch on real files in a temporary folder with real inotify: every
 * way a config file gets replaced is reported once, after the debounce, and
 * changes that leave the content as it was are not reported; what is not a
 * regular file (a FIFO) or is huge never holds up a poll. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config_watch.h"
#include "util/errbuf.h"
#include "testutil.h"

#define DEBOUNCE_MS 100
/* Long enough for a report to be due, short enough to keep the suite fast. */
#define SETTLE_MS 300

static char tmpdir[256];

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* "$tmpdir/rel" in one of a few rotating static buffers. */
static const char *tp(const char *rel)
{
	static char bufs[4][PATH_MAX];
	static int next;
	char *b = bufs[next++ % 4];
	ck_assert_int_lt(snprintf(b, PATH_MAX, "%s/%s", tmpdir, rel), PATH_MAX);
	return b;
}

/* Writes in place: same inode, truncated and rewritten. */
static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	ck_assert_int_eq(close(fd), 0);
}

/* Writes a temporary file beside path and renames it over path. */
static void write_atomic(const char *path, const char *text)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s.tmp~", path);
	write_file(tmp, text);
	ck_assert_int_eq(rename(tmp, path), 0);
}

/* Points the symlink at path to target by renaming a new link over it. */
static void symlink_swap(const char *target, const char *path)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s.lnk~", path);
	ck_assert_int_eq(symlink(target, tmp), 0);
	ck_assert_int_eq(rename(tmp, path), 0);
}

static struct config_watch *watch_paths(const char *const *paths, size_t n)
{
	struct config_watch *w = NULL;
	char err[SINKD_ERR_LEN] = "";
	int rc = config_watch_new(paths, n, DEBOUNCE_MS, &w, err, sizeof(err));
	ck_assert_msg(rc == 0, "config_watch_new: %s", err);
	ck_assert_ptr_nonnull(w);
	return w;
}

static struct config_watch *watch_one(const char *path)
{
	const char *paths[] = {path};
	return watch_paths(paths, 1);
}

static int poll_once(struct config_watch *w)
{
	char err[SINKD_ERR_LEN] = "";
	int rc = config_watch_poll(w, mono_s(), err, sizeof(err));
	ck_assert_msg(rc >= 0, "config_watch_poll: %s", err);
	return rc;
}

/* Polls every 10 ms for ms like the daemon loop: how many reports came, and
 * the time of the first in *first_s when not NULL. */
static int count_reports(struct config_watch *w, int ms, double *first_s)
{
	int n = 0;
	double end = mono_s() + ms / 1000.0;
	while (mono_s() < end) {
		double t = mono_s();
		if (poll_once(w) == 1 && n++ == 0 && first_s != NULL)
			*first_s = t;
		sleep_ms(10);
	}
	return n;
}

/* A real change after a "nothing to report" case proves the watch was
 * alive all along, so that the silence came from the content check. */
static void assert_still_live(struct config_watch *w, const char *path)
{
	write_file(path, "server:\n  threads: 99\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
}

static void setup(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sinkd-watch-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_in_place_write)
{
	const char *cfg = tp("sinkd.yaml");
	write_file(cfg, "a: 1\n");
	struct config_watch *w = watch_one(cfg);
	ck_assert_int_eq(count_reports(w, 50, NULL), 0); /* no baseline report */
	int fd = config_watch_fd(w);
	ck_assert_int_ge(fd, 0);
	ck_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	ck_assert(fcntl(fd, F_GETFL) & O_NONBLOCK);

	double written = mono_s();
	write_file(cfg, "a: 2\n");
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	ck_assert_int_eq(poll(&pfd, 1, 1000), 1);
	ck_assert_int_eq(poll_once(w), 0); /* just seen: not settled */
	double first = 0;
	ck_assert_int_eq(count_reports(w, SETTLE_MS, &first), 1);
	ck_assert_msg(first - written >= DEBOUNCE_MS / 1000.0, "reported %.3f s after the write",
	              first - written);
	config_watch_free(w);
}
END_TEST

START_TEST(test_burst_is_one_report)
{
	const char *cfg = tp("sinkd.yaml");
	write_file(cfg, "a: 0\n");
	struct config_watch *w = watch_one(cfg);
	char text[32];
	int during = 0;
	double last = 0;
	for (int i = 1; i <= 5; i++) {
		snprintf(text, sizeof(text), "a: %d\n", i);
		write_file(cfg, text);
		last = mono_s();
		during += count_reports(w, 20, NULL);
	}
	ck_assert_int_eq(during, 0);
	double first = 0;
	ck_assert_int_eq(count_reports(w, SETTLE_MS, &first), 1);
	/* The timer restarts with each write, so it runs from the last one. */
	ck_assert_double_ge(first - last, DEBOUNCE_MS / 1000.0);
	config_watch_free(w);
}
END_TEST

START_TEST(test_rename_over)
{
	const char *cfg = tp("sinkd.yaml");
	write_file(cfg, "a: 1\n");
	struct config_watch *w = watch_one(cfg);
	write_atomic(cfg, "a: 2\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	/* The new inode is watched too (through its folder). */
	write_atomic(cfg, "a: 3\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	config_watch_free(w);
}
END_TEST

START_TEST(test_identical_rewrite_and_touch)
{
	const char *cfg = tp("sinkd.yaml");
	write_file(cfg, "a: 1\n");
	struct config_watch *w = watch_one(cfg);
	write_file(cfg, "a: 1\n");
	write_atomic(cfg, "a: 1\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 0);
	ck_assert_int_eq(utimensat(AT_FDCWD, cfg, NULL, 0), 0);
	ck_assert_int_eq(chmod(cfg, 0600), 0);
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 0);
	assert_still_live(w, cfg);
	config_watch_free(w);
}
END_TEST

START_TEST(test_unrelated_file)
{
	const char *cfg = tp("sinkd.yaml");
	write_file(cfg, "a: 1\n");
	struct config_watch *w = watch_one(cfg);
	write_file(tp("other.yaml"), "b: 1\n");
	write_atomic(tp("other.yaml"), "b: 2\n");
	ck_assert_int_eq(unlink(tp("other.yaml")), 0);
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 0);
	assert_still_live(w, cfg);
	config_watch_free(w);
}
END_TEST

/* A Kubernetes ConfigMap update, as kubelet's AtomicWriter does it. */
static void configmap_update(const char *old_ts, const char *new_ts, const char *text)
{
	char path[PATH_MAX];
	ck_assert_int_eq(mkdir(tp(new_ts), 0755), 0);
	snprintf(path, sizeof(path), "%s/sinkd.yaml", new_ts);
	write_file(tp(path), text);
	ck_assert_int_eq(symlink(new_ts, tp("..data_tmp")), 0);
	ck_assert_int_eq(rename(tp("..data_tmp"), tp("..data")), 0);
	snprintf(path, sizeof(path), "%s/sinkd.yaml", old_ts);
	ck_assert_int_eq(unlink(tp(path)), 0);
	ck_assert_int_eq(rmdir(tp(old_ts)), 0);
}

START_TEST(test_configmap_swap)
{
	const char *ts1 = "..2026_12_01_22_00_00.123456789";
	const char *ts2 = "..2026_12_01_22_05_00.000000001";
	const char *ts3 = "..2026_12_01_22_10_00.000000002";
	ck_assert_int_eq(mkdir(tp(ts1), 0755), 0);
	write_file(tp("..2026_12_01_22_00_00.123456789/sinkd.yaml"), "a: 1\n");
	ck_assert_int_eq(symlink(ts1, tp("..data")), 0);
	ck_assert_int_eq(symlink("..data/sinkd.yaml", tp("sinkd.yaml")), 0);
	struct config_watch *w = watch_one(tp("sinkd.yaml"));

	configmap_update(ts1, ts2, "a: 2\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	/* The watch moved to the new timestamped folder: a write there shows. */
	write_file(tp("..2026_12_01_22_05_00.000000001/sinkd.yaml"), "a: 3\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	configmap_update(ts2, ts3, "a: 4\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	/* An update that keeps the bytes is no change. */
	configmap_update(ts3, ts1, "a: 4\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 0);
	config_watch_free(w);
}
END_TEST

START_TEST(test_symlink_swap)
{
	write_file(tp("a.yaml"), "a: 1\n");
	write_file(tp("b.yaml"), "a: 2\n");
	ck_assert_int_eq(symlink("a.yaml", tp("cfg.yaml")), 0);
	struct config_watch *w = watch_one(tp("cfg.yaml"));
	symlink_swap("b.yaml", tp("cfg.yaml"));
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	/* a.yaml is no longer what cfg.yaml opens. */
	write_file(tp("a.yaml"), "a: 3\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 0);
	config_watch_free(w);
}
END_TEST

START_TEST(test_symlink_into_other_folder)
{
	ck_assert_int_eq(mkdir(tp("etc"), 0755), 0);
	ck_assert_int_eq(mkdir(tp("v1"), 0755), 0);
	ck_assert_int_eq(mkdir(tp("v2"), 0755), 0);
	write_file(tp("v1/real.yaml"), "a: 1\n");
	write_file(tp("v2/real.yaml"), "a: 2\n");
	ck_assert_int_eq(symlink(tp("v1/real.yaml"), tp("etc/sinkd.yaml")), 0);
	struct config_watch *w = watch_one(tp("etc/sinkd.yaml"));

	/* Only the target's folder sees this write. */
	write_file(tp("v1/real.yaml"), "a: 10\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	symlink_swap("../v2/real.yaml", tp("etc/sinkd.yaml"));
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	write_atomic(tp("v2/real.yaml"), "a: 20\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	config_watch_free(w);
}
END_TEST

START_TEST(test_delete_and_recreate)
{
	const char *cfg = tp("sinkd.yaml");
	write_file(cfg, "a: 1\n");
	struct config_watch *w = watch_one(cfg);
	ck_assert_int_eq(unlink(cfg), 0);
	write_file(cfg, "a: 2\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	/* Gone for longer than the debounce: unreadable is a change, and the
	 * folder watch still sees it come back. */
	ck_assert_int_eq(unlink(cfg), 0);
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	write_file(cfg, "a: 2\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	config_watch_free(w);
}
END_TEST

START_TEST(test_missing_at_start)
{
	const char *cfg = tp("later.yaml");
	struct config_watch *w = watch_one(cfg);
	ck_assert_int_eq(count_reports(w, 50, NULL), 0);
	write_atomic(cfg, "a: 1\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	config_watch_free(w);
}
END_TEST

START_TEST(test_second_file)
{
	ck_assert_int_eq(mkdir(tp("tls"), 0755), 0);
	write_file(tp("sinkd.yaml"), "a: 1\n");
	write_file(tp("tls/cert.pem"), "cert 1\n");
	write_file(tp("tls/key.pem"), "key 1\n");
	const char *paths[] = {tp("sinkd.yaml"), tp("tls/cert.pem"), tp("tls/key.pem")};
	struct config_watch *w = watch_paths(paths, 3);
	write_atomic(tp("tls/cert.pem"), "cert 2\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	/* A renewal replaces cert and key together: one report. */
	write_atomic(tp("tls/cert.pem"), "cert 3\n");
	write_atomic(tp("tls/key.pem"), "key 3\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	config_watch_free(w);
}
END_TEST

/* What a reload of path says: config_load's first error line, "" when it
 * loads.  The loader is what the daemon runs when the watch reports. */
static void reload_error(const char *path, char *out, size_t len)
{
	struct sinkd_config c;
	struct config_errors errs = {0};
	int rc = config_load(&c, path, NULL, 0, &errs);
	snprintf(out, len, "%s", rc == 0 || errs.n == 0 ? "" : errs.lines[0]);
	config_errors_deinit(&errs);
	config_deinit(&c);
}

/* A FIFO moved into the config's place: open() on it would block the serve
 * loop until some writer came.  The watch reports it (unreadable is a
 * change) without blocking, and the reload refuses it by name. */
START_TEST(test_fifo_replaces_config)
{
	const char *cfg = tp("sinkd.yaml");
	write_file(cfg, "server:\n  threads: 2\n");
	struct config_watch *w = watch_one(cfg);
	ck_assert_int_eq(mkfifo(tp("fifo"), 0644), 0);
	ck_assert_int_eq(rename(tp("fifo"), cfg), 0);
	double t0 = mono_s();
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	double took = mono_s() - t0;
	ck_assert_msg(took < SETTLE_MS / 1000.0 + 0.5, "polls took %.3f s", took);

	char msg[1024];
	t0 = mono_s();
	reload_error(cfg, msg, sizeof(msg));
	ck_assert_double_lt(mono_s() - t0, 0.5);
	ck_assert_msg(strstr(msg, cfg) && strstr(msg, "not a regular file"), "reload said: %s",
	              msg);
	/* A file again: reported, and it loads. */
	ck_assert_int_eq(unlink(cfg), 0);
	write_file(cfg, "server:\n  threads: 2\n");
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	reload_error(cfg, msg, sizeof(msg));
	ck_assert_msg(msg[0] == '\0', "reload said: %s", msg);
	config_watch_free(w);
}
END_TEST

/* A 1 GB sparse file (and a folder) in the config's place: the watch
 * hashes no more than a reload reads, so it settles at once. */
START_TEST(test_huge_file_hashed_quickly)
{
	const char *cfg = tp("sinkd.yaml");
	write_file(cfg, "a: 1\n");
	struct config_watch *w = watch_one(cfg);
	int fd = open(tp("big~"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)1 << 30), 0);
	ck_assert_int_eq(close(fd), 0);
	ck_assert_int_eq(rename(tp("big~"), cfg), 0);
	double t0 = mono_s();
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	double took = mono_s() - t0;
	ck_assert_msg(took < SETTLE_MS / 1000.0 + 0.5, "polls took %.3f s", took);
	t0 = mono_s();
	struct config_watch *w2 = watch_one(cfg); /* the baseline hash, timed alone */
	ck_assert_msg(mono_s() - t0 < 0.5, "hashing 1 GB took %.3f s", mono_s() - t0);
	config_watch_free(w2);
	char msg[1024];
	reload_error(cfg, msg, sizeof(msg));
	ck_assert_msg(strstr(msg, "larger than 4 MiB"), "reload said: %s", msg);
	config_watch_free(w);
}
END_TEST

/* The hash covers one byte past the reload's cap: a file that grows over
 * it is a change, and the reload then says why it refuses it. */
START_TEST(test_growth_over_the_cap)
{
	const char *cfg = tp("sinkd.yaml");
	char *text = malloc(CONFIG_FILE_MAX + 1);
	ck_assert_ptr_nonnull(text);
	memset(text, '#', CONFIG_FILE_MAX);
	text[CONFIG_FILE_MAX] = '\0';
	write_file(cfg, text);
	struct config_watch *w = watch_one(cfg);
	char msg[1024];
	reload_error(cfg, msg, sizeof(msg));
	ck_assert_msg(msg[0] == '\0', "a file of exactly the cap: %s", msg);
	int fd = open(cfg, O_WRONLY | O_APPEND);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "#", 1), 1);
	ck_assert_int_eq(close(fd), 0);
	ck_assert_int_eq(count_reports(w, SETTLE_MS, NULL), 1);
	reload_error(cfg, msg, sizeof(msg));
	ck_assert_msg(strstr(msg, cfg) && strstr(msg, "larger than 4 MiB"), "reload said: %s", msg);
	free(text);
	config_watch_free(w);
}
END_TEST

START_TEST(test_errors)
{
	struct config_watch *w = (struct config_watch *)&w;
	char err[SINKD_ERR_LEN] = "";
	const char *missing[] = {tp("no/such/folder/sinkd.yaml")};
	ck_assert_int_eq(config_watch_new(missing, 1, DEBOUNCE_MS, &w, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_null(w);
	ck_assert_ptr_nonnull(strstr(err, missing[0]));
	ck_assert_ptr_nonnull(strstr(err, strerror(ENOENT)));

	write_file(tp("file"), "x\n");
	const char *not_dir[] = {tp("file/sinkd.yaml")};
	ck_assert_int_eq(config_watch_new(not_dir, 1, DEBOUNCE_MS, &w, err, sizeof(err)), -ENOTDIR);
	const char *ok[] = {tp("sinkd.yaml")};
	ck_assert_int_eq(config_watch_new(ok, 0, DEBOUNCE_MS, &w, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(config_watch_new(ok, 1, -1, &w, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(w);
	config_watch_free(NULL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config_watch");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_in_place_write);
	tcase_add_test(tc, test_burst_is_one_report);
	tcase_add_test(tc, test_rename_over);
	tcase_add_test(tc, test_identical_rewrite_and_touch);
	tcase_add_test(tc, test_unrelated_file);
	tcase_add_test(tc, test_configmap_swap);
	tcase_add_test(tc, test_symlink_swap);
	tcase_add_test(tc, test_symlink_into_other_folder);
	tcase_add_test(tc, test_delete_and_recreate);
	tcase_add_test(tc, test_missing_at_start);
	tcase_add_test(tc, test_second_file);
	tcase_add_test(tc, test_fifo_replaces_config);
	tcase_add_test(tc, test_huge_file_hashed_quickly);
	tcase_add_test(tc, test_growth_over_the_cap);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
