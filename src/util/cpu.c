/* CPU feature levels (see cpu.h). */
#include "util/cpu.h"

#include <unistd.h>

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

size_t cpu_l2_cache_bytes(void)
{
#ifdef _SC_LEVEL2_CACHE_SIZE
	long n = sysconf(_SC_LEVEL2_CACHE_SIZE);
	if (n > 0)
		return (size_t)n;
#endif
	return (size_t)1 << 20;
}
