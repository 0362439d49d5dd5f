/* What the CPU's vector units can run, for the modules that pick a kernel at
 * run time (matmul, panels, the attention kernels, KV row stores): one
 * definition of each level, so that they all switch together. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* AVX2 with FMA and F16C. */
bool cpu_has_avx2(void);
/* That, and AVX-512 F/BW/VL. */
bool cpu_has_avx512(void);
/* The 8-bit dot-product instructions: AVX-VNNI (256-bit, with AVX2) and
 * AVX-512 VNNI (with the AVX-512 level). */
bool cpu_has_avx_vnni(void);
bool cpu_has_avx512_vnni(void);

/* Bytes of one core's level-2 cache (sysconf), or 1 MiB when the system
 * does not say. */
size_t cpu_l2_cache_bytes(void);

/* The first min(n, 16) lanes of a 16-lane (512-bit) step: the mask of the
 * masked loads and stores of a row's last step (an __mmask16). */
static inline uint16_t cpu_lanes16_mask(int n)
{
	return n >= 16 ? (uint16_t)0xffff : (uint16_t)((1u << n) - 1u);
}
