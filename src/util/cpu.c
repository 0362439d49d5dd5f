/* CPU feature levels and cache sizes (see cpu.h), read from the machine on
 * every call: the callers keep what they need, so nothing here is cached. */
#include "util/cpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
bool cpu_has_avx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	       __builtin_cpu_supports("f16c");
}

bool cpu_has_avx512(void)
{
	return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

bool cpu_has_avx_vnni(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avxvnni");
}

bool cpu_has_avx512_vnni(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512vnni");
}
#else
bool cpu_has_avx2(void)
{
	return false;
}

bool cpu_has_avx512(void)
{
	return false;
}

bool cpu_has_avx_vnni(void)
{
	return false;
}

bool cpu_has_avx512_vnni(void)
{
	return false;
}
#endif

/* ------------------------------------------------------------------ AMX */

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
/* Linux's request for an extended state component, and the component of
 * the tile data (the 8 KiB the kernel saves only for processes that ask). */
#define CPU_ARCH_REQ_XCOMP_PERM 0x1023
#define CPU_XFEATURE_XTILEDATA 18

/* XCR0: which state components the OS saves on a context switch. */
static uint64_t cpu_xcr0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

bool cpu_has_amx_int8(void)
{
	unsigned a, b, c, d;
	if (__get_cpuid_max(0, NULL) < 7)
		return false;
	__cpuid_count(7, 0, a, b, c, d);
	bool tile = d & (1u << 24), int8 = d & (1u << 25);
	if (!tile || !int8)
		return false;
	__cpuid(1, a, b, c, d);
	if (!(c & (1u << 27))) /* OSXSAVE: xgetbv is allowed */
		return false;
	uint64_t tilecfg_and_data = (uint64_t)3 << 17;
	if ((cpu_xcr0() & tilecfg_and_data) != tilecfg_and_data)
		return false;
	return syscall(SYS_arch_prctl, CPU_ARCH_REQ_XCOMP_PERM, CPU_XFEATURE_XTILEDATA) == 0;
}
#else
bool cpu_has_amx_int8(void)
{
	return false;
}
#endif

/* --------------------------------------------------------------- caches */

/* The first line of a small file, without its newline; false when absent. */
static bool read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

/* "32K", "1024K", "32M", "512" -> bytes; 0 when unreadable. */
static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long n = strtoull(s, &end, 10);
	if (end == s)
		return 0;
	switch (*end) {
	case 'K':
	case 'k':
		return (size_t)n << 10;
	case 'M':
	case 'm':
		return (size_t)n << 20;
	case 'G':
	case 'g':
		return (size_t)n << 30;
	default:
		return (size_t)n;
	}
}

/* Stores bytes of a cache of `level` holding data (data: Data or Unified). */
static void note_cache(struct cpu_caches *c, int level, bool data, size_t bytes)
{
	if (!data || bytes == 0)
		return;
	if (level == 1)
		c->l1d = bytes;
	else if (level == 2)
		c->l2 = bytes;
	else if (level == 3)
		c->l3 = bytes;
}

int cpu_caches_from_sysfs(const char *cache_dir, struct cpu_caches *out)
{
	int found = 0;
	for (int i = 0; i < 16; i++) {
		char path[512], level[32], type[32], size[32];
		snprintf(path, sizeof(path), "%s/index%d/level", cache_dir, i);
		if (!read_line(path, level, sizeof(level)))
			continue;
		snprintf(path, sizeof(path), "%s/index%d/type", cache_dir, i);
		if (!read_line(path, type, sizeof(type)))
			continue;
		snprintf(path, sizeof(path), "%s/index%d/size", cache_dir, i);
		if (!read_line(path, size, sizeof(size)))
			continue;
		bool data = !strcasecmp(type, "Data") || !strcasecmp(type, "Unified");
		size_t bytes = parse_size(size);
		note_cache(out, atoi(level), data, bytes);
		found += data && bytes > 0;
	}
	return found ? 0 : -ENOENT;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The deterministic cache leaf (4 on Intel, 0x8000001D on AMD, same
 * layout): per sub-leaf, type and level in eax, ways, partitions and line
 * size in ebx, sets in ecx.  Fields it names are set. */
static bool caches_from_leaf(unsigned leaf, struct cpu_caches *c)
{
	bool any = false;
	for (unsigned i = 0; i < 16; i++) {
		unsigned a, b, cx, d;
		__cpuid_count(leaf, i, a, b, cx, d);
		unsigned type = a & 31, level = (a >> 5) & 7;
		if (type == 0)
			break;
		size_t bytes = (size_t)((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1) *
		               ((b & 0xfff) + 1) * ((size_t)cx + 1);
		/* type 1 data, 3 unified (2 is instructions) */
		note_cache(c, (int)level, type == 1 || type == 3, bytes);
		any = true;
	}
	return any;
}

int cpu_caches_from_cpuid(struct cpu_caches *out)
{
	if (__get_cpuid_max(0, NULL) >= 4 && caches_from_leaf(4, out))
		return 0;
	if (__get_cpuid_max(0x80000000, NULL) >= 0x8000001D && caches_from_leaf(0x8000001D, out))
		return 0;
	return -ENOTSUP;
}
#else
int cpu_caches_from_cpuid(struct cpu_caches *out)
{
	(void)out;
	return -ENOTSUP;
}
#endif

/* Fields of c still 0 from cpuid. */
static void caches_from_cpuid(struct cpu_caches *c)
{
	struct cpu_caches got = {0};
	cpu_caches_from_cpuid(&got);
	c->l1d = c->l1d ? c->l1d : got.l1d;
	c->l2 = c->l2 ? c->l2 : got.l2;
	c->l3 = c->l3 ? c->l3 : got.l3;
}

#ifdef _SC_LEVEL1_DCACHE_SIZE
static size_t sysconf_bytes(int name)
{
	long n = sysconf(name);
	return n > 0 ? (size_t)n : 0;
}
#endif

struct cpu_caches cpu_caches_read(void)
{
	struct cpu_caches c = {0};
	cpu_caches_from_sysfs("/sys/devices/system/cpu/cpu0/cache", &c);
	if (!c.l1d || !c.l2 || !c.l3)
		caches_from_cpuid(&c);
#ifdef _SC_LEVEL1_DCACHE_SIZE
	c.l1d = c.l1d ? c.l1d : sysconf_bytes(_SC_LEVEL1_DCACHE_SIZE);
	c.l2 = c.l2 ? c.l2 : sysconf_bytes(_SC_LEVEL2_CACHE_SIZE);
	c.l3 = c.l3 ? c.l3 : sysconf_bytes(_SC_LEVEL3_CACHE_SIZE);
#endif
	c.l1d = c.l1d ? c.l1d : (size_t)32 << 10;
	c.l2 = c.l2 ? c.l2 : (size_t)1 << 20;
	return c;
}

size_t cpu_l1d_cache_bytes(void)
{
	return cpu_caches_read().l1d;
}

size_t cpu_l2_cache_bytes(void)
{
	return cpu_caches_read().l2;
}

size_t cpu_l3_cache_bytes(void)
{
	return cpu_caches_read().l3;
}
