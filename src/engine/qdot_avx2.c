/* The 256-bit qdot kernels (see qdot.h): AVX2 and AVX-VNNI builds of the
 * same code (qdot_avx2_kernels.h), compiled with target attributes as
 * matmul.c's ISA code is, so the library builds for any x86-64 and qdot.c
 * calls them only where the CPU has the features.  Nothing here off x86. */
#include "engine/qdot_impl.h"
#include "util/tuning.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define QX_CAT2(a, b) a##_##b
#define QX_CAT(a, b) QX_CAT2(a, b)

#define QX_TARGET "avx2,fma,f16c"
#define QX_VNNI 0
#define QX(name) QX_CAT(name, avx2)
#include "engine/qdot_avx2_kernels.h"
#undef QX_TARGET
#undef QX_VNNI
#undef QX

#define QX_TARGET "avx2,fma,f16c,avxvnni"
#define QX_VNNI 1
#define QX(name) QX_CAT(name, avxvnni)
#include "engine/qdot_avx2_kernels.h"
#undef QX_TARGET
#undef QX_VNNI
#undef QX

const struct qdot_kernels *qdot_avx2_kernels(enum ggml_type wtype, bool vnni)
{
	return vnni ? kernels_avxvnni(wtype) : kernels_avx2(wtype);
}
#else
const struct qdot_kernels *qdot_avx2_kernels(enum ggml_type wtype, bool vnni)
{
	return NULL;
}
#endif
