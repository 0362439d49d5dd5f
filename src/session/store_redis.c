/* The Redis/Valkey backend of the session store (store_backend.h): records
 * in chunks behind a manifest, leases with fencing tokens, the instance
 * registry, all under the "sinkd:" prefix of one database that several
 * instances share.  Everything that must be atomic is one Lua script, and
 * every time in a script is the server's TIME, so the instances' clocks do
 * not matter.  The transport (TLS, AUTH, timeouts, reconnects) is
 * redis_conn.c; policy (owners, quotas, eviction) is store.c's.
 *
 * Keys of record key K:
 *   sinkd:rec:K            manifest "<write-id> <chunks> <bytes> <written-at ms>"
 *   sinkd:chunk:K:<id>:<i> chunk i (at most 1 MiB) of write <id>
 *   sinkd:lease:K          "<fence> <generation> <live-until ms, 0 = free> <instance>"
 *   sinkd:fence:K          the counter fences are drawn from
 * and sinkd:instance:<name> = "<nonce> <description>" per instance name.
 *
 * A put writes its chunks under a fresh write id (with a provisional
 * expiry, so that a put cut short leaves nothing behind for long), then
 * one script checks the fence, swaps the manifest, gives the chunks their
 * final expiry and drops the old write's chunks.  Readers follow the
 * manifest; a chunk gone under a reader means a newer put won, and the
 * reader starts again from the manifest.  One connection serves all
 * threads behind a mutex: none of this is on the token path. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "session/redis_conn.h"
#include "session/store_backend.h"
#include "util/errbuf.h"

#define SR_CHUNK_BYTES (1u << 20)
#define SR_KEY_LEN 128 /* "sinkd:chunk:" + key + ':' + 16 hex + ':' + index, and shorter */
#define SR_TIMEOUT_MS 2000
/* A chunk's expiry until its manifest is in place: a put cut short by a
 * dead connection cannot clean up, so its chunks clean up themselves. */
#define SR_CHUNK_PROVISIONAL_MS 600000
/* Chunks outlive their manifest by this much, so that a reader never finds
 * a chunk expired under a manifest that is still there. */
#define SR_CHUNK_SLACK_MS 60000
#define SR_GET_RETRIES 8
#define SR_NONCE_MAX 64
#define SR_DESCRIPTION_MAX 160

struct store_backend {
	pthread_mutex_t mu; /* one command at a time on conn */
	struct redis_conn *conn;
	char instance[STORE_INSTANCE_MAX + 1];
	char description[SR_DESCRIPTION_MAX]; /* "host:pid", what a rival claim is told */
	long long lease_timeout_ms;
	long long ttl_ms;       /* records and free leases; 0 = never expire */
	long long lease_exp_ms; /* a lease entry's expiry while held; 0 = never */
};

/* ---------------------------------------------------------------- scripts */

/* Redis TIME in ms, the clock every script judges by.  Scripts that read
 * TIME and then write need effects replication: the default from Redis 5,
 * asked for explicitly on older servers (a no-op on 7). */
#define SR_LUA_NOW                                                                                 \
	"if redis.replicate_commands then redis.replicate_commands() end "                         \
	"local t = redis.call('TIME') "                                                            \
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "

/* Sets a key's expiry to exp ms, or none for 0. */
#define SR_LUA_KEEP                                                                                \
	"local function keep(k, exp) "                                                             \
	"  if exp > 0 then redis.call('PEXPIRE', k, exp) else redis.call('PERSIST', k) end "       \
	"end "

/* Drops the chunks of the write a manifest value names. */
#define SR_LUA_DROP_CHUNKS                                                                         \
	"local function drop_chunks(m, prefix, except) "                                           \
	"  local id, n = string.match(m, '^(%x+) (%d+) ') "                                        \
	"  if id and id ~= except then "                                                           \
	"    for i = 0, tonumber(n) - 1 do redis.call('UNLINK', prefix .. id .. ':' .. i) end "    \
	"  end "                                                                                   \
	"end "

/* KEYS: manifest, lease, fence counter, chunks...; ARGV: fence (0: no
 * lease), instance, write id, chunks, bytes, ttl ms, chunk slack ms, chunk
 * key prefix, lease expiry ms.  The fence is checked here, with the swap,
 * so that no take-over can slip between the check and the write. */
static const char SR_LUA_PUT[] = SR_LUA_NOW SR_LUA_KEEP SR_LUA_DROP_CHUNKS
    "if ARGV[1] ~= '0' then "
    "  local l = redis.call('GET', KEYS[2]) "
    "  local f, inst "
    "  if l then f, inst = string.match(l, '^(%d+) %d+ %d+ (.*)$') end "
    "  if f ~= ARGV[1] or inst ~= ARGV[2] then "
    "    for i = 4, #KEYS do redis.call('UNLINK', KEYS[i]) end "
    "    return redis.error_reply('STALE the lease is not this instance\\'s with fence ' "
    "                             .. ARGV[1]) "
    "  end "
    "  if tonumber(ARGV[9]) > 0 then "
    "    keep(KEYS[2], tonumber(ARGV[9])) keep(KEYS[3], tonumber(ARGV[9])) "
    "  end "
    "end "
    "for i = 4, #KEYS do "
    "  if redis.call('EXISTS', KEYS[i]) == 0 then "
    "    return redis.error_reply('LOST a chunk of this write expired before its manifest') "
    "  end "
    "end "
    "local old = redis.call('GET', KEYS[1]) "
    "local ttl = tonumber(ARGV[6]) "
    "redis.call('SET', KEYS[1], ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' ' "
    "           .. string.format('%d', now)) "
    "keep(KEYS[1], ttl) "
    "for i = 4, #KEYS do keep(KEYS[i], ttl > 0 and ttl + tonumber(ARGV[7]) or 0) end "
    "if old then drop_chunks(old, ARGV[8], ARGV[3]) end "
    "return 1";

/* KEYS: manifest, lease, fence counter; ARGV: chunk key prefix. */
static const char SR_LUA_REMOVE[] =
    SR_LUA_DROP_CHUNKS "local old = redis.call('GET', KEYS[1]) "
                       "if old then drop_chunks(old, ARGV[1], '') end "
                       "redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3]) "
                       "return 1";

/* KEYS: lease, fence counter; ARGV: instance, lease timeout ms, lease
 * expiry ms.  Returns {state, value}: new / takeover (fence drawn from
 * the counter, never below the entry's own), ours (refreshed), busy. */
static const char SR_LUA_TAKE[] = SR_LUA_NOW SR_LUA_KEEP
    "local exp = tonumber(ARGV[3]) "
    "local live_until = string.format('%d', now + tonumber(ARGV[2])) "
    "local v = redis.call('GET', KEYS[1]) "
    "local f, g, live, inst "
    "if v then "
    "  f, g, live, inst = string.match(v, '^(%d+) (%d+) (%d+) (.*)$') "
    "  if not f then return redis.error_reply('ERR malformed lease entry ' .. KEYS[1]) end "
    "end "
    "local state "
    "if v and tonumber(live) >= now then "
    "  if inst ~= ARGV[1] then return {'busy', v} end "
    "  state = 'ours' "
    "  v = f .. ' ' .. g .. ' ' .. live_until .. ' ' .. inst "
    "  redis.call('SET', KEYS[1], v) "
    "else "
    "  local nf = redis.call('INCR', KEYS[2]) "
    "  if f and nf <= tonumber(f) then "
    "    nf = tonumber(f) + 1 redis.call('SET', KEYS[2], string.format('%d', nf)) "
    "  end "
    "  v = string.format('%d', nf) .. ' ' .. (g or '0') .. ' ' .. live_until .. ' ' .. ARGV[1] "
    "  if f then "
    "    state = 'takeover' redis.call('SET', KEYS[1], v) "
    "  elseif exp > 0 then "
    "    state = 'new' redis.call('SET', KEYS[1], v, 'NX', 'PX', exp) "
    "  else "
    "    state = 'new' redis.call('SET', KEYS[1], v, 'NX') "
    "  end "
    "end "
    "keep(KEYS[1], exp) keep(KEYS[2], exp) "
    "return {state, v}";

/* KEYS: lease, fence counter; ARGV: instance, fence, what (refresh, gen,
 * release), lease timeout ms, lease expiry ms, generation, free expiry
 * ms.  A compare-and-set on (instance, fence). */
static const char SR_LUA_LEASE_CAS[] = SR_LUA_NOW SR_LUA_KEEP
    "local v = redis.call('GET', KEYS[1]) "
    "if not v then return redis.error_reply('STALE no lease entry') end "
    "local f, g, live, inst = string.match(v, '^(%d+) (%d+) (%d+) (.*)$') "
    "if f ~= ARGV[2] or inst ~= ARGV[1] then "
    "  return redis.error_reply('STALE the lease is not this instance\\'s with this fence') "
    "end "
    "local exp = tonumber(ARGV[5]) "
    "if ARGV[3] == 'refresh' then live = string.format('%d', now + tonumber(ARGV[4])) "
    "elseif ARGV[3] == 'gen' then g = ARGV[6] "
    "else live = '0' inst = '' exp = tonumber(ARGV[7]) end "
    "redis.call('SET', KEYS[1], f .. ' ' .. g .. ' ' .. live .. ' ' .. inst) "
    "keep(KEYS[1], exp) keep(KEYS[2], exp) "
    "return 1";

/* KEYS: lease; returns {now ms, value or nil}. */
static const char SR_LUA_PEEK[] =
    SR_LUA_NOW "return {string.format('%d', now), redis.call('GET', KEYS[1])}";

/* KEYS: the name's entry; ARGV: nonce, description, timeout ms, what
 * (claim, refresh, release).  Returns {'ok'} or {'busy', description};
 * refresh and claim make a lapsed entry ours again. */
static const char SR_LUA_INSTANCE[] =
    "local v = redis.call('GET', KEYS[1]) "
    "local n, d "
    "if v then n, d = string.match(v, '^(%S+) (.*)$') end "
    "if v and n ~= ARGV[1] then "
    "  if ARGV[4] == 'release' then return {'ok'} end "
    "  return {'busy', d or v} "
    "end "
    "if ARGV[4] == 'release' then redis.call('UNLINK', KEYS[1]) return {'ok'} end "
    "if v then redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3]) "
    "else redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'NX', 'PX', ARGV[3]) end "
    "return {'ok'}";

/* ---------------------------------------------------------------- calls */

/* One command on the shared connection (the caller holds b->mu).  Error
 * replies come back as -EIO with the server's message, or -ESTALE for a
 * script's "STALE" refusal. */
static int sr_call(struct store_backend *b, int argc, const char **argv, const size_t *lens,
                   redisReply **reply, char *err, size_t err_len)
{
	size_t own[16];
	if (!lens) {
		for (int i = 0; i < argc && i < 16; i++)
			own[i] = strlen(argv[i]);
		lens = own;
	}
	int rc = redis_conn_call(b->conn, argc, argv, lens, reply, err, err_len);
	if (rc < 0)
		return rc;
	if ((*reply)->type != REDIS_REPLY_ERROR)
		return 0;
	bool stale = strncmp((*reply)->str, "STALE ", 6) == 0;
	rc = err_set(err, err_len, stale ? -ESTALE : -EIO, "redis %s: %s",
	             redis_conn_where(b->conn), stale ? (*reply)->str + 6 : (*reply)->str);
	freeReplyObject(*reply);
	*reply = NULL;
	return rc;
}

/* sr_call with NUL-terminated string arguments, the list ended by NULL
 * (at most 16). */
__attribute__((sentinel)) static int sr_cmd(struct store_backend *b, redisReply **reply, char *err,
                                            size_t err_len, ...)
{
	const char *argv[16];
	int argc = 0;
	va_list ap;
	va_start(ap, err_len);
	for (const char *a = va_arg(ap, const char *); a && argc < 16; a = va_arg(ap, const char *))
		argv[argc++] = a;
	va_end(ap);
	return sr_call(b, argc, argv, NULL, reply, err, err_len);
}

static int sr_bad_reply(struct store_backend *b, const char *what, char *err, size_t err_len)
{
	return err_set(err, err_len, -EPROTO, "redis %s: unexpected reply to %s",
	               redis_conn_where(b->conn), what);
}

static bool reply_is_str(const redisReply *r)
{
	return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

/* ---------------------------------------------------------------- keys and values */

static bool key_ok(const char *key)
{
	size_t n = key ? strlen(key) : 0;
	if (n == 0 || n > SESSION_STORE_KEY_MAX)
		return false;
	return strspn(key, "0123456789abcdef-") == n;
}

static int key_refuse(const char *key, char *err, size_t err_len)
{
	return err_set(err, err_len, -EINVAL, "redis store: bad key");
}

static void key_name(char *buf, const char *kind, const char *key)
{
	snprintf(buf, SR_KEY_LEN, "sinkd:%s:%s", kind, key);
}

static void chunk_prefix(char *buf, const char *key)
{
	snprintf(buf, SR_KEY_LEN, "sinkd:chunk:%s:", key);
}

/* The next space-separated unsigned number of *s, *s moved past it. */
static bool take_u64(const char **s, const char *end, uint64_t *out)
{
	const char *p = *s;
	uint64_t v = 0;
	if (p >= end || *p < '0' || *p > '9')
		return false;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (p < end && *p != ' ')
		return false;
	*s = p < end ? p + 1 : p;
	*out = v;
	return true;
}

struct sr_manifest {
	char write_id[17];
	uint64_t chunks, bytes, written_ms;
};

static bool manifest_parse(const redisReply *r, struct sr_manifest *m)
{
	if (!r || r->type != REDIS_REPLY_STRING)
		return false;
	const char *s = r->str, *end = r->str + r->len;
	const char *sp = memchr(s, ' ', r->len);
	if (!sp || sp - s != 16)
		return false;
	memcpy(m->write_id, s, 16);
	m->write_id[16] = '\0';
	s = sp + 1;
	return take_u64(&s, end, &m->chunks) && take_u64(&s, end, &m->bytes) &&
	       take_u64(&s, end, &m->written_ms) && s == end;
}

/* A lease value into out (live judged against now_ms). */
static bool lease_parse(const char *v, size_t len, uint64_t now_ms, struct store_lease *out)
{
	const char *s = v, *end = v + len;
	uint64_t live_until;
	memset(out, 0, sizeof(*out));
	if (!take_u64(&s, end, &out->fence) || !take_u64(&s, end, &out->generation) ||
	    !take_u64(&s, end, &live_until))
		return false;
	size_t n = (size_t)(end - s);
	if (n > STORE_INSTANCE_MAX)
		n = STORE_INSTANCE_MAX;
	memcpy(out->instance, s, n);
	out->instance[n] = '\0';
	out->live = live_until != 0 && live_until >= now_ms && n > 0;
	return true;
}

static void write_id_new(char out[17])
{
	uint64_t r = 0;
	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		/* Unique enough without entropy: a write id only has to differ from
		 * the ids of the same key's other writes. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		r = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 48);
	}
	snprintf(out, 17, "%016" PRIx64, r);
}

/* ---------------------------------------------------------------- records */

/* Writes the chunks of bytes under write id wid; their key names go to
 * names (n_chunks * SR_KEY_LEN). */
static int put_chunks(struct store_backend *b, const char *key, const char *wid,
                      const unsigned char *bytes, size_t n, size_t n_chunks, char *names, char *err,
                      size_t err_len)
{
	char px[24];
	snprintf(px, sizeof(px), "%d", SR_CHUNK_PROVISIONAL_MS);
	for (size_t i = 0; i < n_chunks; i++) {
		char *name = names + i * SR_KEY_LEN;
		snprintf(name, SR_KEY_LEN, "sinkd:chunk:%s:%s:%zu", key, wid, i);
		size_t off = i * SR_CHUNK_BYTES;
		size_t len = n - off < SR_CHUNK_BYTES ? n - off : SR_CHUNK_BYTES;
		const char *argv[5] = {"SET", name, (const char *)bytes + off, "PX", px};
		size_t lens[5] = {3, strlen(name), len, 2, strlen(px)};
		redisReply *r = NULL;
		int rc = sr_call(b, 5, argv, lens, &r, err, err_len);
		freeReplyObject(r);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The manifest swap (SR_LUA_PUT) for the chunks in names. */
static int put_manifest(struct store_backend *b, const char *key, uint64_t fence, const char *wid,
                        size_t n, size_t n_chunks, const char *names, char *err, size_t err_len)
{
	char keys[3][SR_KEY_LEN], prefix[SR_KEY_LEN], sfence[24], schunks[24], sbytes[24], sttl[24],
	    sslack[24], sexp[24], snkeys[24];
	key_name(keys[0], "rec", key);
	key_name(keys[1], "lease", key);
	key_name(keys[2], "fence", key);
	chunk_prefix(prefix, key);
	snprintf(sfence, sizeof(sfence), "%" PRIu64, fence);
	snprintf(schunks, sizeof(schunks), "%zu", n_chunks);
	snprintf(sbytes, sizeof(sbytes), "%zu", n);
	snprintf(sttl, sizeof(sttl), "%lld", b->ttl_ms);
	snprintf(sslack, sizeof(sslack), "%d", SR_CHUNK_SLACK_MS);
	snprintf(sexp, sizeof(sexp), "%lld", b->lease_exp_ms);
	snprintf(snkeys, sizeof(snkeys), "%zu", 3 + n_chunks);
	int argc = 3 + 3 + (int)n_chunks + 9;
	const char **argv = malloc(sizeof(*argv) * (size_t)argc);
	size_t *lens = malloc(sizeof(*lens) * (size_t)argc);
	int rc = -ENOMEM, a = 0;
	if (!argv || !lens) {
		err_set(err, err_len, rc, "redis store: out of memory");
		goto out;
	}
	argv[a++] = "EVAL", argv[a++] = SR_LUA_PUT, argv[a++] = snkeys;
	for (int i = 0; i < 3; i++)
		argv[a++] = keys[i];
	for (size_t i = 0; i < n_chunks; i++)
		argv[a++] = names + i * SR_KEY_LEN;
	const char *args[9] = {sfence, b->instance, wid,    schunks, sbytes,
	                       sttl,   sslack,      prefix, sexp};
	for (int i = 0; i < 9; i++)
		argv[a++] = args[i];
	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	redisReply *r = NULL;
	rc = sr_call(b, argc, argv, lens, &r, err, err_len);
	freeReplyObject(r);
out:
	free(argv);
	free(lens);
	return rc;
}

static int sr_put(struct store_backend *b, const char *key, uint64_t fence, const void *bytes,
                  size_t n, char *err, size_t err_len)
{
	if (!key_ok(key))
		return key_refuse(key, err, err_len);
	size_t n_chunks = (n + SR_CHUNK_BYTES - 1) / SR_CHUNK_BYTES;
	char *names = malloc(n_chunks * SR_KEY_LEN + 1);
	if (!names)
		return err_set(err, err_len, -ENOMEM, "redis store: out of memory");
	char wid[17];
	write_id_new(wid);
	pthread_mutex_lock(&b->mu);
	int rc = put_chunks(b, key, wid, bytes, n, n_chunks, names, err, err_len);
	if (rc == 0)
		rc = put_manifest(b, key, fence, wid, n, n_chunks, names, err, err_len);
	pthread_mutex_unlock(&b->mu);
	free(names);
	return rc;
}

/* The manifest of key: 0, -ENOENT, or a failure. */
static int get_manifest(struct store_backend *b, const char *key, struct sr_manifest *m, char *err,
                        size_t err_len)
{
	char name[SR_KEY_LEN];
	redisReply *r = NULL;
	key_name(name, "rec", key);
	int rc = sr_cmd(b, &r, err, err_len, "GET", name, NULL);
	if (rc < 0)
		return rc;
	if (r->type == REDIS_REPLY_NIL)
		rc = err_set(err, err_len, -ENOENT, "no record %s", key);
	else if (!manifest_parse(r, m))
		rc = err_set(err, err_len, -EIO, "redis %s: record %s has a malformed manifest",
		             redis_conn_where(b->conn), key);
	freeReplyObject(r);
	return rc;
}

/* Reads the chunks m names into buf (m->bytes): 0, -EAGAIN when one is
 * gone (a newer put replaced them), or a failure. */
static int get_chunks(struct store_backend *b, const char *key, const struct sr_manifest *m,
                      unsigned char *buf, char *err, size_t err_len)
{
	uint64_t off = 0;
	for (uint64_t i = 0; i < m->chunks; i++) {
		char name[SR_KEY_LEN];
		redisReply *r = NULL;
		snprintf(name, sizeof(name), "sinkd:chunk:%s:%s:%" PRIu64, key, m->write_id, i);
		int rc = sr_cmd(b, &r, err, err_len, "GET", name, NULL);
		if (rc < 0)
			return rc;
		if (r->type == REDIS_REPLY_NIL) {
			freeReplyObject(r);
			return -EAGAIN;
		}
		if (r->type != REDIS_REPLY_STRING || r->len > m->bytes - off) {
			freeReplyObject(r);
			return err_set(err, err_len, -EIO,
			               "redis %s: record %s: chunk %" PRIu64
			               " does not fit its manifest",
			               redis_conn_where(b->conn), key, i);
		}
		memcpy(buf + off, r->str, r->len);
		off += r->len;
		freeReplyObject(r);
	}
	if (off != m->bytes)
		return err_set(err, err_len, -EIO,
		               "redis %s: record %s: chunks hold %" PRIu64
		               " bytes, the manifest says %" PRIu64,
		               redis_conn_where(b->conn), key, off, m->bytes);
	return 0;
}

/* One attempt of get: -EAGAIN when a chunk vanished and the manifest
 * changed since (start again), -EIO when it vanished under the same one. */
static int get_once(struct store_backend *b, const char *key, size_t max_bytes, unsigned char **out,
                    size_t *n, char *err, size_t err_len)
{
	struct sr_manifest m, again;
	int rc = get_manifest(b, key, &m, err, err_len);
	if (rc < 0)
		return rc;
	if (m.bytes > max_bytes || m.bytes > SIZE_MAX - 1)
		return err_set(err, err_len, -EFBIG, "record %s is %" PRIu64 " bytes, over %zu",
		               key, m.bytes, max_bytes);
	unsigned char *buf = malloc(m.bytes ? (size_t)m.bytes : 1);
	if (!buf)
		return err_set(err, err_len, -ENOMEM, "redis store: out of memory");
	rc = get_chunks(b, key, &m, buf, err, err_len);
	if (rc == -EAGAIN) {
		int again_rc = get_manifest(b, key, &again, err, err_len);
		if (again_rc < 0)
			rc = again_rc;
		else if (strcmp(again.write_id, m.write_id) == 0)
			rc = err_set(err, err_len, -EIO, "redis %s: record %s has lost a chunk",
			             redis_conn_where(b->conn), key);
	}
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*out = buf;
	*n = (size_t)m.bytes;
	return 0;
}

static int sr_get(struct store_backend *b, const char *key, size_t max_bytes, unsigned char **out,
                  size_t *n, char *err, size_t err_len)
{
	*out = NULL;
	*n = 0;
	if (!key_ok(key))
		return key_refuse(key, err, err_len);
	int rc = -EAGAIN;
	pthread_mutex_lock(&b->mu);
	for (int i = 0; i < SR_GET_RETRIES && rc == -EAGAIN; i++)
		rc = get_once(b, key, max_bytes, out, n, err, err_len);
	pthread_mutex_unlock(&b->mu);
	if (rc == -EAGAIN)
		rc =
		    err_set(err, err_len, -EAGAIN, "record %s kept changing while being read", key);
	return rc;
}

static int sr_remove(struct store_backend *b, const char *key, char *err, size_t err_len)
{
	if (!key_ok(key))
		return key_refuse(key, err, err_len);
	char rec[SR_KEY_LEN], lease[SR_KEY_LEN], fence[SR_KEY_LEN], prefix[SR_KEY_LEN];
	key_name(rec, "rec", key);
	key_name(lease, "lease", key);
	key_name(fence, "fence", key);
	chunk_prefix(prefix, key);
	redisReply *r = NULL;
	pthread_mutex_lock(&b->mu);
	int rc = sr_cmd(b, &r, err, err_len, "EVAL", SR_LUA_REMOVE, "3", rec, lease, fence, prefix,
	                NULL);
	pthread_mutex_unlock(&b->mu);
	freeReplyObject(r);
	return rc;
}

static int sr_exists(struct store_backend *b, const char *key)
{
	if (!key_ok(key))
		return -EINVAL;
	char name[SR_KEY_LEN], err[SINKD_ERR_LEN];
	redisReply *r = NULL;
	key_name(name, "rec", key);
	pthread_mutex_lock(&b->mu);
	int rc = sr_cmd(b, &r, err, sizeof(err), "EXISTS", name, NULL);
	pthread_mutex_unlock(&b->mu);
	if (rc == 0)
		rc = r->type == REDIS_REPLY_INTEGER ? r->integer > 0 : -EPROTO;
	freeReplyObject(r);
	return rc;
}

/* ---------------------------------------------------------------- list */

struct sr_keys {
	char (*keys)[SESSION_STORE_KEY_MAX + 1];
	size_t n, cap;
};

static int keys_add(struct sr_keys *k, const char *key)
{
	if (k->n == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 64;
		void *grown = realloc(k->keys, cap * sizeof(*k->keys));
		if (!grown)
			return -ENOMEM;
		k->keys = grown;
		k->cap = cap;
	}
	snprintf(k->keys[k->n++], SESSION_STORE_KEY_MAX + 1, "%s", key);
	return 0;
}

static int key_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The keys of every manifest matching prefix, sorted, each once (SCAN
 * may return a key more than once). */
static int list_scan(struct store_backend *b, const char *prefix, struct sr_keys *k, char *err,
                     size_t err_len)
{
	char match[SR_KEY_LEN], cursor[24] = "0";
	snprintf(match, sizeof(match), "sinkd:rec:%s*", prefix);
	const size_t skip = strlen("sinkd:rec:");
	do {
		redisReply *r = NULL;
		int rc = sr_cmd(b, &r, err, err_len, "SCAN", cursor, "MATCH", match, "COUNT", "500",
		                NULL);
		if (rc < 0)
			return rc;
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    !reply_is_str(r->element[0]) || r->element[1]->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			return sr_bad_reply(b, "SCAN", err, err_len);
		}
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		for (size_t i = 0; i < r->element[1]->elements && rc == 0; i++) {
			const redisReply *e = r->element[1]->element[i];
			if (reply_is_str(e) && e->len > skip && key_ok(e->str + skip))
				rc = keys_add(k, e->str + skip);
		}
		freeReplyObject(r);
		if (rc < 0)
			return err_set(err, err_len, rc, "redis store: out of memory");
	} while (strcmp(cursor, "0") != 0);
	if (k->n) /* qsort of no keys: k->keys may be NULL */
		qsort(k->keys, k->n, sizeof(*k->keys), key_cmp);
	size_t kept = 0;
	for (size_t i = 0; i < k->n; i++)
		if (kept == 0 || strcmp(k->keys[kept - 1], k->keys[i]) != 0)
			memmove(k->keys[kept++], k->keys[i], sizeof(*k->keys));
	k->n = kept;
	return 0;
}

/* The server's clock in ms. */
static int server_now_ms(struct store_backend *b, uint64_t *now, char *err, size_t err_len)
{
	redisReply *r = NULL;
	int rc = sr_cmd(b, &r, err, err_len, "TIME", NULL);
	if (rc < 0)
		return rc;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !reply_is_str(r->element[0]) ||
	    !reply_is_str(r->element[1]))
		rc = sr_bad_reply(b, "TIME", err, err_len);
	else
		*now = strtoull(r->element[0]->str, NULL, 10) * 1000 +
		       strtoull(r->element[1]->str, NULL, 10) / 1000;
	freeReplyObject(r);
	return rc;
}

/* The entry of key as it is now; 1 when filled, 0 when the record went
 * away meanwhile. */
static int list_entry(struct store_backend *b, const char *key, uint64_t now, struct store_entry *e,
                      char *err, size_t err_len)
{
	char rec[SR_KEY_LEN], lease[SR_KEY_LEN];
	key_name(rec, "rec", key);
	key_name(lease, "lease", key);
	redisReply *r = NULL;
	int rc = sr_cmd(b, &r, err, err_len, "MGET", rec, lease, NULL);
	if (rc < 0)
		return rc;
	struct sr_manifest m;
	struct store_lease l;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
		rc = sr_bad_reply(b, "MGET", err, err_len);
	} else if (manifest_parse(r->element[0], &m)) {
		memset(e, 0, sizeof(*e));
		snprintf(e->key, sizeof(e->key), "%s", key);
		e->bytes = m.bytes;
		e->age_s = now > m.written_ms ? (double)(now - m.written_ms) / 1000.0 : 0.0;
		if (r->element[1]->type == REDIS_REPLY_STRING &&
		    lease_parse(r->element[1]->str, r->element[1]->len, now, &l) && l.live) {
			e->leased_live = true;
			e->leased_us = strcmp(l.instance, b->instance) == 0;
		}
		rc = 1;
	}
	freeReplyObject(r);
	return rc;
}

static int list_locked(struct store_backend *b, const char *prefix, struct store_entry **out,
                       size_t *n, char *err, size_t err_len)
{
	struct sr_keys k = {0};
	struct store_entry *entries = NULL;
	uint64_t now = 0;
	int rc = list_scan(b, prefix, &k, err, err_len);
	if (rc == 0)
		rc = server_now_ms(b, &now, err, err_len);
	if (rc < 0)
		goto out;
	entries = calloc(k.n ? k.n : 1, sizeof(*entries));
	if (!entries) {
		rc = err_set(err, err_len, -ENOMEM, "redis store: out of memory");
		goto out;
	}
	size_t filled = 0;
	for (size_t i = 0; i < k.n && rc >= 0; i++) {
		rc = list_entry(b, k.keys[i], now, &entries[filled], err, err_len);
		filled += rc == 1;
	}
	if (rc >= 0) {
		*out = entries;
		*n = filled;
		entries = NULL;
		rc = 0;
	}
out:
	free(entries);
	free(k.keys);
	return rc;
}

static int sr_list(struct store_backend *b, const char *prefix, struct store_entry **out, size_t *n,
                   char *err, size_t err_len)
{
	*out = NULL;
	*n = 0;
	if (!prefix)
		prefix = "";
	/* Keys are [0-9a-f-]; anything else would also be a SCAN pattern. */
	if (strlen(prefix) > SESSION_STORE_KEY_MAX ||
	    strspn(prefix, "0123456789abcdef-") != strlen(prefix))
		return err_set(err, err_len, -EINVAL, "redis store: bad key prefix");
	pthread_mutex_lock(&b->mu);
	int rc = list_locked(b, prefix, out, n, err, err_len);
	pthread_mutex_unlock(&b->mu);
	return rc;
}

/* ---------------------------------------------------------------- leases */

static int sr_lease_take(struct store_backend *b, const char *key, struct store_lease *out,
                         char *err, size_t err_len)
{
	memset(out, 0, sizeof(*out));
	if (!key_ok(key))
		return key_refuse(key, err, err_len);
	char lease[SR_KEY_LEN], fence[SR_KEY_LEN], timeout[24], exp[24];
	key_name(lease, "lease", key);
	key_name(fence, "fence", key);
	snprintf(timeout, sizeof(timeout), "%lld", b->lease_timeout_ms);
	snprintf(exp, sizeof(exp), "%lld", b->lease_exp_ms);
	redisReply *r = NULL;
	pthread_mutex_lock(&b->mu);
	int rc = sr_cmd(b, &r, err, err_len, "EVAL", SR_LUA_TAKE, "2", lease, fence, b->instance,
	                timeout, exp, NULL);
	pthread_mutex_unlock(&b->mu);
	if (rc < 0)
		return rc;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !reply_is_str(r->element[0]) ||
	    !reply_is_str(r->element[1]) ||
	    !lease_parse(r->element[1]->str, r->element[1]->len, 0, out)) {
		rc = sr_bad_reply(b, "the lease script", err, err_len);
	} else {
		out->live = true; /* judged live by the script, on the server's clock */
		if (strcmp(r->element[0]->str, "busy") == 0)
			rc = err_set(err, err_len, -EBUSY, "record %s is leased by instance '%s'",
			             key, out->instance);
	}
	freeReplyObject(r);
	return rc;
}

/* The compare-and-set of SR_LUA_LEASE_CAS: "refresh", "gen" or "release". */
static int lease_cas(struct store_backend *b, const char *key, uint64_t fence, const char *what,
                     uint64_t generation)
{
	if (!key_ok(key))
		return -EINVAL;
	char lease[SR_KEY_LEN], counter[SR_KEY_LEN], sfence[24], timeout[24], exp[24], gen[24],
	    free_exp[24], err[SINKD_ERR_LEN];
	key_name(lease, "lease", key);
	key_name(counter, "fence", key);
	snprintf(sfence, sizeof(sfence), "%" PRIu64, fence);
	snprintf(timeout, sizeof(timeout), "%lld", b->lease_timeout_ms);
	snprintf(exp, sizeof(exp), "%lld", b->lease_exp_ms);
	snprintf(gen, sizeof(gen), "%" PRIu64, generation);
	snprintf(free_exp, sizeof(free_exp), "%lld", b->ttl_ms);
	redisReply *r = NULL;
	pthread_mutex_lock(&b->mu);
	int rc = sr_cmd(b, &r, err, sizeof(err), "EVAL", SR_LUA_LEASE_CAS, "2", lease, counter,
	                b->instance, sfence, what, timeout, exp, gen, free_exp, NULL);
	pthread_mutex_unlock(&b->mu);
	freeReplyObject(r);
	return rc;
}

static int sr_lease_refresh(struct store_backend *b, const char *key, uint64_t fence)
{
	return lease_cas(b, key, fence, "refresh", 0);
}

static int sr_lease_set_generation(struct store_backend *b, const char *key, uint64_t fence,
                                   uint64_t generation)
{
	return lease_cas(b, key, fence, "gen", generation);
}

static int sr_lease_release(struct store_backend *b, const char *key, uint64_t fence)
{
	return lease_cas(b, key, fence, "release", 0);
}

static int sr_lease_peek(struct store_backend *b, const char *key, struct store_lease *out)
{
	memset(out, 0, sizeof(*out));
	if (!key_ok(key))
		return -EINVAL;
	char lease[SR_KEY_LEN], err[SINKD_ERR_LEN];
	key_name(lease, "lease", key);
	redisReply *r = NULL;
	pthread_mutex_lock(&b->mu);
	int rc = sr_cmd(b, &r, err, sizeof(err), "EVAL", SR_LUA_PEEK, "1", lease, NULL);
	pthread_mutex_unlock(&b->mu);
	if (rc < 0)
		return rc;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !reply_is_str(r->element[0]))
		rc = -EPROTO;
	else if (r->element[1]->type == REDIS_REPLY_NIL)
		rc = -ENOENT;
	else if (!reply_is_str(r->element[1]) ||
	         !lease_parse(r->element[1]->str, r->element[1]->len,
	                      strtoull(r->element[0]->str, NULL, 10), out))
		rc = -EPROTO;
	freeReplyObject(r);
	return rc;
}

/* ---------------------------------------------------------------- instances */

static bool nonce_ok(const char *nonce)
{
	size_t n = nonce ? strlen(nonce) : 0;
	if (n == 0 || n > SR_NONCE_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)nonce[i] <= 0x20 || nonce[i] == 0x7f)
			return false;
	return true;
}

/* SR_LUA_INSTANCE: 0, or -EADDRINUSE with the rival's description in
 * holder. */
static int instance_op(struct store_backend *b, const char *nonce, const char *what, char *holder,
                       size_t holder_len, char *err, size_t err_len)
{
	if (!nonce_ok(nonce))
		return err_set(err, err_len, -EINVAL, "redis store: bad instance nonce");
	char name[SR_KEY_LEN + STORE_INSTANCE_MAX], timeout[24];
	snprintf(name, sizeof(name), "sinkd:instance:%s", b->instance);
	snprintf(timeout, sizeof(timeout), "%lld", b->lease_timeout_ms);
	redisReply *r = NULL;
	pthread_mutex_lock(&b->mu);
	int rc = sr_cmd(b, &r, err, err_len, "EVAL", SR_LUA_INSTANCE, "1", name, nonce,
	                b->description, timeout, what, NULL);
	pthread_mutex_unlock(&b->mu);
	if (rc < 0)
		return rc;
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || !reply_is_str(r->element[0]))
		rc = sr_bad_reply(b, "the instance script", err, err_len);
	else if (strcmp(r->element[0]->str, "busy") == 0) {
		const char *who =
		    r->elements > 1 && reply_is_str(r->element[1]) ? r->element[1]->str : "?";
		if (holder && holder_len)
			snprintf(holder, holder_len, "%s", who);
		rc = err_set(err, err_len, -EADDRINUSE,
		             "instance name '%s' is in use by another process (%s)", b->instance,
		             who);
	}
	freeReplyObject(r);
	return rc;
}

static int sr_instance_claim(struct store_backend *b, const char *nonce, char *holder,
                             size_t holder_len, char *err, size_t err_len)
{
	if (holder && holder_len)
		holder[0] = '\0';
	return instance_op(b, nonce, "claim", holder, holder_len, err, err_len);
}

static int sr_instance_refresh(struct store_backend *b, const char *nonce)
{
	char err[SINKD_ERR_LEN];
	int rc = instance_op(b, nonce, "refresh", NULL, 0, err, sizeof(err));
	return rc == -EADDRINUSE ? -ESTALE : rc;
}

static void sr_instance_release(struct store_backend *b, const char *nonce)
{
	char err[SINKD_ERR_LEN];
	instance_op(b, nonce, "release", NULL, 0, err, sizeof(err));
}

/* ---------------------------------------------------------------- open and close */

static int options_check(const struct store_backend_options *o, char *err, size_t err_len)
{
	size_t n = o->instance ? strlen(o->instance) : 0;
	if (n == 0 || n > STORE_INSTANCE_MAX)
		return err_set(err, err_len, -EINVAL,
		               "redis store: the instance name must be 1 to %d "
		               "characters",
		               STORE_INSTANCE_MAX);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)o->instance[i] < 0x20 || o->instance[i] == 0x7f)
			return err_set(err, err_len, -EINVAL,
			               "redis store: the instance name has a control character");
	if (!(o->lease_timeout_s > 0) || o->lease_timeout_s > 1e9)
		return err_set(err, err_len, -EINVAL, "redis store: the lease timeout must be > 0");
	if (!(o->ttl_s >= 0) || o->ttl_s > 1e9)
		return err_set(err, err_len, -EINVAL, "redis store: the ttl must be >= 0");
	return 0;
}

static void backend_times(struct store_backend *b, const struct store_backend_options *o)
{
	b->lease_timeout_ms = (long long)(o->lease_timeout_s * 1000.0 + 0.5);
	if (b->lease_timeout_ms < 1)
		b->lease_timeout_ms = 1;
	b->ttl_ms = o->ttl_s > 0 ? (long long)(o->ttl_s * 1000.0 + 0.5) : 0;
	if (o->ttl_s > 0 && b->ttl_ms < 1)
		b->ttl_ms = 1;
	/* A held lease must not expire between refreshes, whatever the ttl. */
	b->lease_exp_ms = b->ttl_ms;
	if (b->ttl_ms > 0 && b->lease_exp_ms < 2 * b->lease_timeout_ms)
		b->lease_exp_ms = 2 * b->lease_timeout_ms;
}

static void sr_close(struct store_backend *b)
{
	if (!b)
		return;
	redis_conn_free(b->conn);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

static int sr_open(const struct store_backend_options *o, struct store_backend **out, char *err,
                   size_t err_len)
{
	struct redis_endpoint ep;
	struct store_backend *b = NULL;
	*out = NULL;
	int rc = options_check(o, err, err_len);
	if (rc == 0)
		rc = redis_url_parse(o->url, &ep, err, err_len);
	if (rc < 0)
		return rc;
	b = calloc(1, sizeof(*b));
	if (!b)
		return err_set(err, err_len, -ENOMEM, "redis store: out of memory");
	pthread_mutex_init(&b->mu, NULL);
	snprintf(b->instance, sizeof(b->instance), "%s", o->instance);
	char host[64] = "?";
	gethostname(host, sizeof(host) - 1);
	snprintf(b->description, sizeof(b->description), "%s:%ld", host, (long)getpid());
	backend_times(b, o);
	struct redis_conn_options co = {.ep = &ep,
	                                .auth_file = o->auth_file,
	                                .tls_ca_file = o->tls_ca_file,
	                                .timeout_ms = SR_TIMEOUT_MS};
	rc = redis_conn_new(&co, &b->conn, err, err_len);
	/* A first round trip, so that a wrong address, password or certificate
	 * shows at open and not at the first offload. */
	redisReply *r = NULL;
	if (rc == 0)
		rc = sr_cmd(b, &r, err, err_len, "PING", NULL);
	freeReplyObject(r);
	if (rc < 0) {
		sr_close(b);
		return rc;
	}
	*out = b;
	return 0;
}

const struct store_backend_ops store_redis_ops = {
    .name = "redis",
    .open = sr_open,
    .close = sr_close,
    .put = sr_put,
    .get = sr_get,
    .remove = sr_remove,
    .exists = sr_exists,
    .list = sr_list,
    .lease_take = sr_lease_take,
    .lease_refresh = sr_lease_refresh,
    .lease_set_generation = sr_lease_set_generation,
    .lease_release = sr_lease_release,
    .lease_peek = sr_lease_peek,
    .instance_claim = sr_instance_claim,
    .instance_refresh = sr_instance_refresh,
    .instance_release = sr_instance_release,
};
