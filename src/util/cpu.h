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

/* AMX with 8-bit integer tiles (TDPBSSD and kin): the CPU has AMX-TILE and
 * AMX-INT8, the OS saves the tile state, and (Linux) the kernel granted
 * this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked here;
 * granting is per process and idempotent).  A cpuid and a system call:
 * callers ask once and keep the answer. */
bool cpu_has_amx_int8(void);

/* The data caches one core sees, in bytes. */
struct cpu_caches {
	size_t l1d; /* level 1, data */
	size_t l2;  /* level 2 (a core's own on current x86) */
	size_t l3;  /* level 3, shared by the cores of a die; 0 when there is none */
};

/* The machine's caches: sysfs (cpu0/cache/index*), else cpuid (leaf 4 on
 * Intel, 0x8000001D on AMD), else sysconf, else 32 KiB / 1 MiB / 0.  Reads
 * files: callers ask once (a backend at start) and keep the answer. */
struct cpu_caches cpu_caches_read(void);
/* The sizes that folder (laid out as /sys/devices/system/cpu/cpu0/cache)
 * names: level 1 Data or Unified into l1d, levels 2 and 3 into l2 and l3;
 * the others are left as they are.  0, or -ENOENT when it names none. */
int cpu_caches_from_sysfs(const char *cache_dir, struct cpu_caches *out);
/* The sizes cpuid's deterministic cache leaf names (as above: fields it
 * names are set); -ENOTSUP where the CPU has no such leaf. */
int cpu_caches_from_cpuid(struct cpu_caches *out);
/* One field of cpu_caches_read(), each a full read. */
size_t cpu_l1d_cache_bytes(void);
size_t cpu_l2_cache_bytes(void);
size_t cpu_l3_cache_bytes(void);

/* The first min(n, 16) lanes of a 16-lane (512-bit) step: the mask of the
 * masked loads and stores of a row's last step (an __mmask16). */
static inline uint16_t cpu_lanes16_mask(int n)
{
	return n >= 16 ? (uint16_t)0xffff : (uint16_t)((1u << n) - 1u);
}
