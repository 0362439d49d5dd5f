/* The Redis/Valkey session-store backend against a real redis-server that
 * each test starts on a free loopback port in a temp directory: chunked
 * records, leases with fencing between two backend objects (two
 * instances), the instance registry, AUTH from a file, a server killed,
 * stopped and restarted under the backend, and rediss:// with a CA and a
 * certificate made by the openssl CLI.  Exits 77 (skip) without
 * redis-server. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "session/redis_conn.h"
#include "session/store_backend.h"
#include "util/errbuf.h"
#include "testutil.h"

/* ---------------------------------------------------------------- the server */

struct fixture {
	char dir[64]; /* the mkdtemp directory: redis's dir, its log, certs */
	int port;
	pid_t pid; /* the running redis-server, or 0 */
	bool tls;  /* port is a TLS port */
	char url[96];
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
	struct timespec ts = {.tv_sec = (time_t)s,
	                      .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static bool port_open(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_port = htons((uint16_t)port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	bool ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

/* Starts redis-server with the common arguments and `extra` (NULL-ended);
 * false when it exits before its port opens (an option it lacks). */
static bool redis_start(struct fixture *f, const char *const *extra)
{
	const char *argv[48] = {"redis-server", "--bind", "127.0.0.1", "--save", "",
	                        "--appendonly", "no",     "--dir",     f->dir};
	char port[16];
	int n = 9;
	snprintf(port, sizeof(port), "%d", f->port);
	argv[n++] = f->tls ? "--tls-port" : "--port";
	argv[n++] = port;
	if (f->tls) {
		argv[n++] = "--port";
		argv[n++] = "0";
	}
	for (int i = 0; extra && extra[i] && n < 46; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	char log[128];
	snprintf(log, sizeof(log), "%s/redis.log", f->dir);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The server dies with the test process, even one that failed. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		execvp("redis-server", (char *const *)argv);
		_exit(127);
	}
	for (double t0 = now_s(); now_s() - t0 < 10;) {
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid)
			return false;
		if (port_open(f->port)) {
			f->pid = pid;
			return true;
		}
		sleep_s(0.02);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return false;
}

static void redis_stop(struct fixture *f)
{
	if (f->pid > 0) {
		kill(f->pid, SIGCONT);
		kill(f->pid, SIGKILL);
		waitpid(f->pid, NULL, 0);
	}
	f->pid = 0;
}

static void fixture_init(struct fixture *f, const char *const *extra)
{
	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/sinkd-redis-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->dir));
	f->port = free_port();
	snprintf(f->url, sizeof(f->url), "redis://127.0.0.1:%d", f->port);
	if (extra != (const char *const *)-1)
		ck_assert_msg(redis_start(f, extra),
		              "redis-server did not start (see %s/redis.log)", f->dir);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void fixture_deinit(struct fixture *f)
{
	redis_stop(f);
	nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static const char *path_in(const struct fixture *f, const char *name)
{
	static char path[4][160];
	static int turn;
	turn = (turn + 1) % 4;
	snprintf(path[turn], sizeof(path[turn]), "%s/%s", f->dir, name);
	return path[turn];
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	fchmod(fd, mode);
	close(fd);
}

/* ---------------------------------------------------------------- backends */

struct bopts {
	const char *url, *instance, *auth_file, *ca_file;
	double lease_timeout_s, ttl_s;
};

static int backend_try(const struct bopts *p, struct store_backend **b, char *err, size_t len)
{
	struct store_backend_options o = {.url = p->url,
	                                  .auth_file = p->auth_file,
	                                  .tls_ca_file = p->ca_file,
	                                  .instance = p->instance ? p->instance : "node-a",
	                                  .lease_timeout_s =
	                                      p->lease_timeout_s > 0 ? p->lease_timeout_s : 30,
	                                  .ttl_s = p->ttl_s};
	*b = NULL;
	err[0] = '\0';
	return store_redis_ops.open(&o, b, err, len);
}

static struct store_backend *backend(const struct fixture *f, const char *instance,
                                     double lease_timeout_s)
{
	struct bopts p = {.url = f->url, .instance = instance, .lease_timeout_s = lease_timeout_s};
	char err[SINKD_ERR_LEN];
	struct store_backend *b;
	int rc = backend_try(&p, &b, err, sizeof(err));
	ck_assert_msg(rc == 0, "open %s: %d %s", f->url, rc, err);
	return b;
}

static void put_ok(struct store_backend *b, const char *key, uint64_t fence, const void *bytes,
                   size_t n)
{
	char err[SINKD_ERR_LEN] = "";
	int rc = store_redis_ops.put(b, key, fence, bytes, n, err, sizeof(err));
	ck_assert_msg(rc == 0, "put %s: %d %s", key, rc, err);
}

static unsigned char *get_ok(struct store_backend *b, const char *key, size_t *n)
{
	char err[SINKD_ERR_LEN] = "";
	unsigned char *out = NULL;
	int rc = store_redis_ops.get(b, key, 1u << 30, &out, n, err, sizeof(err));
	ck_assert_msg(rc == 0, "get %s: %d %s", key, rc, err);
	return out;
}

static unsigned char *pattern(size_t n, unsigned seed)
{
	unsigned char *p = malloc(n);
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
	return p;
}

/* How many keys match pattern, asked over a connection of our own. */
static long long count_keys(const struct fixture *f, const char *pattern_)
{
	struct redis_endpoint ep;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(redis_url_parse(f->url, &ep, err, sizeof(err)), 0);
	struct redis_conn_options o = {.ep = &ep, .timeout_ms = 2000};
	struct redis_conn *c;
	ck_assert_int_eq(redis_conn_new(&o, &c, err, sizeof(err)), 0);
	const char *argv[2] = {"KEYS", pattern_};
	size_t lens[2] = {4, strlen(pattern_)};
	redisReply *r = NULL;
	int rc = redis_conn_call(c, 2, argv, lens, &r, err, sizeof(err));
	ck_assert_msg(rc == 0, "KEYS: %s", err);
	ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
	long long n = (long long)r->elements;
	freeReplyObject(r);
	redis_conn_free(c);
	return n;
}

/* ---------------------------------------------------------------- records */

START_TEST(test_records_chunked_round_trip)
{
	struct fixture f;
	fixture_init(&f, NULL);
	struct store_backend *b = backend(&f, "node-a", 30);
	const size_t big = 3u << 20 | 12345;
	unsigned char *data = pattern(big, 1);
	put_ok(b, "aaaa-1", 0, data, big);
	ck_assert_int_eq(count_keys(&f, "sinkd:chunk:aaaa-1:*"), 4);
	size_t n = 0;
	unsigned char *back = get_ok(b, "aaaa-1", &n);
	ck_assert_uint_eq(n, big);
	ck_assert(memcmp(back, data, big) == 0);
	free(back);

	/* A smaller put replaces the record whole and leaves no old chunk. */
	put_ok(b, "aaaa-1", 0, "small", 5);
	back = get_ok(b, "aaaa-1", &n);
	ck_assert_uint_eq(n, 5);
	ck_assert(memcmp(back, "small", 5) == 0);
	free(back);
	ck_assert_int_eq(count_keys(&f, "sinkd:chunk:aaaa-1:*"), 1);

	/* An empty record is a record. */
	put_ok(b, "aaaa-2", 0, "", 0);
	back = get_ok(b, "aaaa-2", &n);
	ck_assert_uint_eq(n, 0);
	free(back);

	char err[SINKD_ERR_LEN] = "";
	unsigned char *out = (unsigned char *)"untouched";
	ck_assert_int_eq(store_redis_ops.get(b, "cccc", 100, &out, &n, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_null(out);
	put_ok(b, "bbbb-1", 0, data, big);
	ck_assert_int_eq(store_redis_ops.get(b, "bbbb-1", big - 1, &out, &n, err, sizeof(err)),
	                 -EFBIG);
	ck_assert_ptr_null(out);
	ck_assert_int_eq(store_redis_ops.exists(b, "bbbb-1"), 1);
	ck_assert_int_eq(store_redis_ops.exists(b, "cccc"), 0);
	ck_assert_int_eq(store_redis_ops.put(b, "BAD/KEY", 0, "x", 1, err, sizeof(err)), -EINVAL);

	struct store_entry *e = NULL;
	ck_assert_int_eq(store_redis_ops.list(b, "aaaa", &e, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_str_eq(e[0].key, "aaaa-1");
	ck_assert_uint_eq(e[0].bytes, 5);
	ck_assert(e[0].age_s >= 0 && e[0].age_s < 10);
	ck_assert_str_eq(e[1].key, "aaaa-2");
	ck_assert(!e[0].leased_live && !e[0].leased_us);
	free(e);
	ck_assert_int_eq(store_redis_ops.list(b, NULL, &e, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(e[2].bytes, big);
	free(e);
	ck_assert_int_eq(store_redis_ops.list(b, "a*", &e, &n, err, sizeof(err)), -EINVAL);

	ck_assert_int_eq(store_redis_ops.remove(b, "bbbb-1", err, sizeof(err)), 0);
	ck_assert_int_eq(store_redis_ops.remove(b, "bbbb-1", err, sizeof(err)), 0);
	ck_assert_int_eq(store_redis_ops.exists(b, "bbbb-1"), 0);
	ck_assert_int_eq(store_redis_ops.get(b, "bbbb-1", big, &out, &n, err, sizeof(err)),
	                 -ENOENT);
	ck_assert_int_eq(count_keys(&f, "sinkd:chunk:bbbb-1:*"), 0);
	store_redis_ops.close(b);
	free(data);
	fixture_deinit(&f);
}
END_TEST

/* A writer replaces a chunked record while a reader reads it through
 * another connection: every read is one whole record, never a mix, even
 * when the chunks it was reading are dropped under it. */
struct writer {
	struct store_backend *b;
	atomic_bool stop;
	int puts;
};

static void *writer_run(void *arg)
{
	struct writer *w = arg;
	const size_t n = (2u << 20) + 100;
	unsigned char *buf = malloc(n);
	char err[SINKD_ERR_LEN];
	for (unsigned v = 1; !atomic_load(&w->stop); v++) {
		memset(buf, (int)(v & 0xff), n);
		if (store_redis_ops.put(w->b, "abab", 0, buf, n, err, sizeof(err)) == 0)
			w->puts++;
		sleep_s(0.01);
	}
	free(buf);
	return NULL;
}

START_TEST(test_get_while_replaced)
{
	struct fixture f;
	fixture_init(&f, NULL);
	struct store_backend *reader = backend(&f, "node-a", 30);
	struct writer w = {.b = backend(&f, "node-a", 30)};
	put_ok(reader, "abab", 0, "x", 1);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, writer_run, &w), 0);
	int whole = 0;
	for (double t0 = now_s(); now_s() - t0 < 1.5;) {
		char err[SINKD_ERR_LEN];
		unsigned char *out = NULL;
		size_t n = 0;
		int rc = store_redis_ops.get(reader, "abab", 1u << 30, &out, &n, err, sizeof(err));
		ck_assert_msg(rc == 0 || rc == -EAGAIN, "%d %s", rc, err);
		for (size_t i = 1; rc == 0 && i < n; i++)
			ck_assert_msg(out[i] == out[0], "torn record at %zu", i);
		whole += rc == 0;
		free(out);
	}
	atomic_store(&w.stop, true);
	pthread_join(t, NULL);
	ck_assert_int_gt(whole, 0);
	ck_assert_int_gt(w.puts, 5);
	store_redis_ops.close(reader);
	store_redis_ops.close(w.b);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_ttl_is_a_redis_expiry)
{
	struct fixture f;
	fixture_init(&f, NULL);
	struct bopts p = {.url = f.url, .instance = "node-a", .lease_timeout_s = 30, .ttl_s = 1};
	char err[SINKD_ERR_LEN];
	struct store_backend *b;
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), 0);
	put_ok(b, "dddd", 0, "expiring", 8);
	struct store_lease l;
	ck_assert_int_eq(store_redis_ops.lease_take(b, "eeee", &l, err, sizeof(err)), 0);
	ck_assert_int_eq(store_redis_ops.lease_release(b, "eeee", l.fence), 0);
	ck_assert_int_eq(store_redis_ops.exists(b, "dddd"), 1);
	sleep_s(1.3);
	ck_assert_int_eq(store_redis_ops.exists(b, "dddd"), 0);
	ck_assert_int_eq(store_redis_ops.lease_peek(b, "eeee", &l), -ENOENT);
	/* The record's chunks outlive it by the slack only. */
	ck_assert_int_eq(count_keys(&f, "sinkd:rec:*"), 0);
	store_redis_ops.close(b);
	fixture_deinit(&f);
}
END_TEST

/* ---------------------------------------------------------------- leases */

START_TEST(test_lease_fencing_between_instances)
{
	struct fixture f;
	fixture_init(&f, NULL);
	struct store_backend *a = backend(&f, "node-a", 1);
	struct store_backend *b = backend(&f, "node b", 1); /* names may hold spaces */
	char err[SINKD_ERR_LEN] = "";
	struct store_lease l;

	ck_assert_int_eq(store_redis_ops.lease_take(a, "ffff", &l, err, sizeof(err)), 0);
	ck_assert_str_eq(l.instance, "node-a");
	ck_assert(l.live);
	ck_assert_uint_eq(l.generation, 0);
	uint64_t f1 = l.fence;
	ck_assert_uint_gt(f1, 0);
	ck_assert_int_eq(store_redis_ops.lease_take(a, "ffff", &l, err, sizeof(err)), 0);
	ck_assert_uint_eq(l.fence, f1); /* ours: refreshed, same fence */
	ck_assert_int_eq(store_redis_ops.lease_take(b, "ffff", &l, err, sizeof(err)), -EBUSY);
	ck_assert_str_eq(l.instance, "node-a");
	ck_assert_uint_eq(l.fence, f1);
	ck_assert_msg(strstr(err, "node-a") != NULL, "%s", err);
	put_ok(a, "ffff", f1, "from a", 6);
	ck_assert_int_eq(store_redis_ops.lease_set_generation(a, "ffff", f1, 3), 0);
	ck_assert_int_eq(store_redis_ops.lease_refresh(a, "ffff", f1), 0);

	struct store_entry *e = NULL;
	size_t n = 0;
	ck_assert_int_eq(store_redis_ops.list(b, "ffff", &e, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert(e[0].leased_live && !e[0].leased_us);
	free(e);

	/* a stops refreshing: after the timeout b takes over with a greater
	 * fence, and a's late write is refused and leaves no chunk behind. */
	sleep_s(1.3);
	ck_assert_int_eq(store_redis_ops.lease_take(b, "ffff", &l, err, sizeof(err)), 0);
	ck_assert_str_eq(l.instance, "node b");
	ck_assert_uint_gt(l.fence, f1);
	ck_assert_uint_eq(l.generation, 3);
	uint64_t f2 = l.fence;
	unsigned char *late = pattern(1u << 21, 7);
	ck_assert_int_eq(store_redis_ops.put(a, "ffff", f1, late, 1u << 21, err, sizeof(err)),
	                 -ESTALE);
	free(late);
	ck_assert_int_eq(count_keys(&f, "sinkd:chunk:ffff:*"), 1);
	unsigned char *back = get_ok(b, "ffff", &n);
	ck_assert_uint_eq(n, 6);
	free(back);
	put_ok(b, "ffff", f2, "from b", 6);
	ck_assert_int_eq(store_redis_ops.lease_refresh(a, "ffff", f1), -ESTALE);
	ck_assert_int_eq(store_redis_ops.lease_set_generation(a, "ffff", f1, 9), -ESTALE);
	ck_assert_int_eq(store_redis_ops.lease_release(a, "ffff", f1), -ESTALE);
	ck_assert_int_eq(store_redis_ops.lease_set_generation(b, "ffff", f2, 7), 0);

	/* A released lease stays, free, with its fence and generation, and the
	 * next taker gets both (the fence grown). */
	ck_assert_int_eq(store_redis_ops.lease_release(b, "ffff", f2), 0);
	ck_assert_int_eq(store_redis_ops.lease_peek(a, "ffff", &l), 0);
	ck_assert_str_eq(l.instance, "");
	ck_assert(!l.live);
	ck_assert_uint_eq(l.fence, f2);
	ck_assert_uint_eq(l.generation, 7);
	ck_assert_int_eq(store_redis_ops.lease_release(b, "ffff", f2), -ESTALE);
	ck_assert_int_eq(store_redis_ops.lease_take(a, "ffff", &l, err, sizeof(err)), 0);
	ck_assert_uint_gt(l.fence, f2);
	ck_assert_uint_eq(l.generation, 7);
	ck_assert_int_eq(store_redis_ops.lease_peek(b, "ffff", &l), 0);
	ck_assert(l.live);
	ck_assert_str_eq(l.instance, "node-a");

	/* remove drops the lease entry with the record. */
	ck_assert_int_eq(store_redis_ops.remove(a, "ffff", err, sizeof(err)), 0);
	ck_assert_int_eq(store_redis_ops.lease_peek(a, "ffff", &l), -ENOENT);
	ck_assert_int_eq(count_keys(&f, "sinkd:*ffff*"), 0);
	store_redis_ops.close(a);
	store_redis_ops.close(b);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_instance_registry)
{
	struct fixture f;
	fixture_init(&f, NULL);
	struct store_backend *a = backend(&f, "node-a", 30);
	struct store_backend *twin = backend(&f, "node-a", 30);
	char err[SINKD_ERR_LEN] = "", holder[256] = "x";
	ck_assert_int_eq(
	    store_redis_ops.instance_claim(a, "nonce-1", holder, sizeof(holder), err, sizeof(err)),
	    0);
	ck_assert_int_eq(
	    store_redis_ops.instance_claim(a, "nonce-1", holder, sizeof(holder), err, sizeof(err)),
	    0);
	ck_assert_int_eq(store_redis_ops.instance_claim(twin, "nonce-2", holder, sizeof(holder),
	                                                err, sizeof(err)),
	                 -EADDRINUSE);
	char pid[24];
	snprintf(pid, sizeof(pid), ":%ld", (long)getpid());
	ck_assert_msg(strstr(holder, pid) != NULL, "holder '%s'", holder);
	ck_assert_msg(strstr(err, "node-a") && strstr(err, holder), "%s", err);
	ck_assert_int_eq(store_redis_ops.instance_refresh(a, "nonce-1"), 0);
	ck_assert_int_eq(store_redis_ops.instance_refresh(twin, "nonce-2"), -ESTALE);
	store_redis_ops.instance_release(twin, "nonce-2"); /* not its own: left alone */
	ck_assert_int_eq(count_keys(&f, "sinkd:instance:node-a"), 1);
	store_redis_ops.instance_release(a, "nonce-1");
	ck_assert_int_eq(store_redis_ops.instance_claim(twin, "nonce-2", holder, sizeof(holder),
	                                                err, sizeof(err)),
	                 0);
	ck_assert_int_eq(store_redis_ops.instance_claim(a, "bad nonce", holder, sizeof(holder), err,
	                                                sizeof(err)),
	                 -EINVAL);
	store_redis_ops.close(a);
	store_redis_ops.close(twin);
	fixture_deinit(&f);
}
END_TEST

/* ---------------------------------------------------------------- auth and urls */

START_TEST(test_auth_from_file)
{
	struct fixture f;
	const char *const extra[] = {"--requirepass", "s3cret-pw", NULL};
	fixture_init(&f, extra);
	char err[SINKD_ERR_LEN];
	struct store_backend *b;
	struct bopts p = {.url = f.url};

	ck_assert_int_lt(backend_try(&p, &b, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "NOAUTH") != NULL, "%s", err);

	p.auth_file = path_in(&f, "wrong");
	write_file(p.auth_file, "not-it\n", 0600);
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "AUTH") && strstr(err, "127.0.0.1") && !strstr(err, "not-it"),
	              "%s", err);

	p.auth_file = path_in(&f, "open");
	write_file(p.auth_file, "s3cret-pw\n", 0644);
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "readable") && !strstr(err, "s3cret"), "%s", err);
	p.auth_file = f.dir;
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "not a regular file") != NULL, "%s", err);

	p.auth_file = path_in(&f, "right");
	write_file(p.auth_file, "s3cret-pw\r\n", 0600);
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), 0);
	put_ok(b, "abcd", 0, "authed", 6);
	store_redis_ops.close(b);
	p.auth_file = path_in(&f, "user");
	write_file(p.auth_file, "default s3cret-pw\n", 0400);
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), 0);
	size_t n;
	free(get_ok(b, "abcd", &n));
	ck_assert_uint_eq(n, 6);
	store_redis_ops.close(b);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_bad_urls_say_why)
{
	static const struct {
		const char *url, *says;
	} cases[] = {
	    {"http://127.0.0.1", "redis://"},
	    {"redis://", "no host"},
	    {"redis://127.0.0.1:0", "port"},
	    {"redis://127.0.0.1:70000", "port"},
	    {"redis://127.0.0.1:", "port"},
	    {"redis://127.0.0.1/x", "database"},
	    {"redis://127.0.0.1/1?x=2", "database"},
	    {"redis://user:hunter2@127.0.0.1", "auth file"},
	    {"redis://[::1", "]"},
	    {"redis://ho st", "host"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[SINKD_ERR_LEN];
		struct store_backend *b;
		struct bopts p = {.url = cases[i].url};
		ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), -EINVAL);
		ck_assert_msg(strstr(err, cases[i].says) != NULL, "%s: %s", cases[i].url, err);
		ck_assert_msg(strstr(err, "hunter2") == NULL, "%s", err);
	}
	struct redis_endpoint ep;
	char err[SINKD_ERR_LEN];
	ck_assert_int_eq(redis_url_parse("rediss://[::1]:7000/3", &ep, err, sizeof(err)), 0);
	ck_assert_str_eq(ep.host, "::1");
	ck_assert_uint_eq(ep.port, 7000);
	ck_assert_uint_eq(ep.db, 3);
	ck_assert(ep.tls);
	ck_assert_int_eq(redis_url_parse("redis://cache.local", &ep, err, sizeof(err)), 0);
	ck_assert_uint_eq(ep.port, 6379);
	ck_assert_uint_eq(ep.db, 0);
}
END_TEST

START_TEST(test_database_selected)
{
	struct fixture f;
	fixture_init(&f, NULL);
	char url[128];
	snprintf(url, sizeof(url), "%s/2", f.url);
	struct bopts p = {.url = url};
	char err[SINKD_ERR_LEN];
	struct store_backend *b;
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), 0);
	put_ok(b, "abcd", 0, "in db 2", 7);
	ck_assert_int_eq(count_keys(&f, "sinkd:*"), 0); /* count_keys looks at db 0 */
	store_redis_ops.close(b);
	snprintf(url, sizeof(url), "%s/99", f.url);
	ck_assert_int_lt(backend_try(&p, &b, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "SELECT") != NULL, "%s", err);
	fixture_deinit(&f);
}
END_TEST

/* ---------------------------------------------------------------- a server that goes away */

START_TEST(test_restart_between_puts)
{
	struct fixture f;
	fixture_init(&f, NULL);
	struct store_backend *b = backend(&f, "node-a", 30);
	put_ok(b, "abcd", 0, "before", 6);

	redis_stop(&f);
	char err[SINKD_ERR_LEN] = "";
	double t0 = now_s();
	int rc = store_redis_ops.put(b, "abcd", 0, "during", 6, err, sizeof(err));
	ck_assert_int_lt(rc, 0);
	ck_assert_msg(now_s() - t0 < 3, "took %.1f s", now_s() - t0);
	char where[32];
	snprintf(where, sizeof(where), "127.0.0.1:%d", f.port);
	ck_assert_msg(strstr(err, where) != NULL, "%s", err);
	ck_assert_int_lt(store_redis_ops.exists(b, "abcd"), 0);

	ck_assert(redis_start(&f, NULL));
	put_ok(b, "abcd", 0, "after", 5);
	size_t n;
	unsigned char *back = get_ok(b, "abcd", &n);
	ck_assert_uint_eq(n, 5);
	free(back);

	/* Restarted while idle: the next call notices the old connection's end
	 * and works at once. */
	redis_stop(&f);
	ck_assert(redis_start(&f, NULL));
	put_ok(b, "abcd", 0, "again", 5);

	/* A server that stops answering: an error within the timeout, no hang. */
	kill(f.pid, SIGSTOP);
	t0 = now_s();
	rc = store_redis_ops.put(b, "abcd", 0, "stopped", 7, err, sizeof(err));
	ck_assert_int_eq(rc, -ETIMEDOUT);
	ck_assert_msg(now_s() - t0 < 3, "took %.1f s", now_s() - t0);
	kill(f.pid, SIGCONT);
	put_ok(b, "abcd", 0, "resumed", 7);
	store_redis_ops.close(b);
	fixture_deinit(&f);
}
END_TEST

START_TEST(test_unreachable_at_open)
{
	struct fixture f;
	fixture_init(&f, (const char *const *)-1); /* no server */
	struct bopts p = {.url = f.url};
	char err[SINKD_ERR_LEN];
	struct store_backend *b;
	double t0 = now_s();
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), -ECONNREFUSED);
	ck_assert(now_s() - t0 < 3);
	ck_assert_msg(strstr(err, "cannot connect") != NULL, "%s", err);
	fixture_deinit(&f);
}
END_TEST

/* ---------------------------------------------------------------- TLS */

static bool make_certs(const struct fixture *f)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd),
	         "cd %s && "
	         "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
	         "-subj /CN=sinkd-test-ca -keyout ca.key -out ca.pem && "
	         "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
	         "-subj /CN=other-ca -keyout other.key -out other.pem && "
	         "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
	         "-subj /CN=localhost -keyout srv.key -out srv.csr && "
	         "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext && "
	         "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
	         "-extfile ext -out srv.pem",
	         f->dir);
	char quiet[2200];
	snprintf(quiet, sizeof(quiet), "(%s) >/dev/null 2>&1", cmd);
	return system(quiet) == 0;
}

START_TEST(test_tls)
{
	struct fixture f;
	fixture_init(&f, (const char *const *)-1);
	ck_assert_msg(make_certs(&f), "openssl could not make the certificates");
	const char *const extra[] = {"--tls-cert-file",
	                             path_in(&f, "srv.pem"),
	                             "--tls-key-file",
	                             path_in(&f, "srv.key"),
	                             "--tls-ca-cert-file",
	                             path_in(&f, "ca.pem"),
	                             "--tls-auth-clients",
	                             "no",
	                             "--bind",
	                             "127.0.0.1",
	                             "127.0.0.2",
	                             NULL};
	f.tls = true;
	if (!redis_start(&f, extra)) {
		tu_skip("test_tls: redis-server does not start with TLS");
		fixture_deinit(&f);
		return;
	}
	char url[96], err[SINKD_ERR_LEN];
	struct store_backend *b;
	snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", f.port);
	struct bopts p = {.url = url, .ca_file = path_in(&f, "ca.pem")};
	int rc = backend_try(&p, &b, err, sizeof(err));
	ck_assert_msg(rc == 0, "%d %s", rc, err);
	const size_t big = 2u << 20 | 77;
	unsigned char *data = pattern(big, 3);
	put_ok(b, "abcd", 0, data, big);
	size_t n;
	unsigned char *back = get_ok(b, "abcd", &n);
	ck_assert_uint_eq(n, big);
	ck_assert(memcmp(back, data, big) == 0);
	free(back);
	free(data);
	store_redis_ops.close(b);

	/* The host name is checked too: localhost is in the certificate. */
	snprintf(url, sizeof(url), "rediss://localhost:%d", f.port);
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), 0);
	store_redis_ops.close(b);

	p.ca_file = path_in(&f, "other.pem");
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), -EPROTO);
	ck_assert_msg(strstr(err, "not trusted") != NULL, "%s", err);
	p.ca_file = NULL; /* the system's CAs do not know ours */
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), -EPROTO);
	ck_assert_msg(strstr(err, "not trusted") != NULL, "%s", err);

	/* The right CA but another name: 127.0.0.2 is not in the certificate. */
	snprintf(url, sizeof(url), "rediss://127.0.0.2:%d", f.port);
	p.ca_file = path_in(&f, "ca.pem");
	ck_assert_int_eq(backend_try(&p, &b, err, sizeof(err)), -EPROTO);
	ck_assert_msg(strstr(err, "not trusted") && strstr(err, "name"), "%s", err);

	/* Plain RESP to a TLS port fails within the timeout, not a hang. */
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", f.port);
	p.ca_file = NULL;
	double t0 = now_s();
	ck_assert_int_lt(backend_try(&p, &b, err, sizeof(err)), 0);
	ck_assert(now_s() - t0 < 3);
	fixture_deinit(&f);
}
END_TEST

int main(void)
{
	if (system("command -v redis-server >/dev/null 2>&1") != 0) {
		fprintf(stderr, "test-store-redis: redis-server not found, skipping\n");
		return 77;
	}
	Suite *s = suite_create("session-store-redis");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_records_chunked_round_trip);
	tcase_add_test(tc, test_get_while_replaced);
	tcase_add_test(tc, test_ttl_is_a_redis_expiry);
	tcase_add_test(tc, test_lease_fencing_between_instances);
	tcase_add_test(tc, test_instance_registry);
	tcase_add_test(tc, test_auth_from_file);
	tcase_add_test(tc, test_bad_urls_say_why);
	tcase_add_test(tc, test_database_selected);
	tcase_add_test(tc, test_restart_between_puts);
	tcase_add_test(tc, test_unreachable_at_open);
	tcase_add_test(tc, test_tls);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
