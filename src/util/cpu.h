/* What the CPU's vector units can run, for the modules that pick a kernel at
 * run time (matmul, panels, the attention kernels, KV row stores): one
 * definition of each level, so that they all switch together. */
#pragma once

#include <stdbool.h>

/* AVX2 with FMA and F16C. */
bool cpu_has_avx2(void);
/* That, and AVX-512 F/BW/VL. */
bool cpu_has_avx512(void);
