/* The fuzz build's CPU feature probe, in place of src/util/cpu.c (whose
 * __builtin_cpu_supports("f16c") clang-14 does not know): no SIMD levels,
 * so the portable code paths run, which are the ones the parsers reach. */
#include "util/cpu.h"

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

size_t cpu_l2_cache_bytes(void)
{
	return (size_t)1 << 20;
}
