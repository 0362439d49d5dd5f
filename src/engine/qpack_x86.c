/* The x86 kernels of the packed block weights (qpack.h): 512-bit builds
 * (AVX-512BW, AVX-512 VNNI) and 256-bit builds (AVX2, AVX-VNNI) of the same
 * code (qpack_kq_kernels.h), compiled with target attributes as qdot's ISA
 * files are; qpack.c calls them only where the CPU has the features.
 * Nothing here off x86. */
#include "engine/qdot_impl.h"
#include "engine/qpack_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define QX_CAT2(a, b) a##_##b
#define QX_CAT(a, b) QX_CAT2(a, b)

#define QX_TARGET "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define QX_VNNI 0
#define QX_512 1
#define QX(name) QX_CAT(name, avx512bw)
#include "engine/qpack_kq_kernels.h"
#undef QX_TARGET
#undef QX_VNNI
#undef QX_512
#undef QX

#define QX_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define QX_VNNI 1
#define QX_512 1
#define QX(name) QX_CAT(name, avx512vnni)
#include "engine/qpack_kq_kernels.h"
#undef QX_TARGET
#undef QX_VNNI
#undef QX_512
#undef QX

#define QX_TARGET "avx2,fma,f16c"
#define QX_VNNI 0
#define QX_512 0
#define QX(name) QX_CAT(name, avx2)
#include "engine/qpack_kq_kernels.h"
#undef QX_TARGET
#undef QX_VNNI
#undef QX_512
#undef QX

#define QX_TARGET "avx2,avxvnni,fma,f16c"
#define QX_VNNI 1
#define QX_512 0
#define QX(name) QX_CAT(name, avxvnni)
#include "engine/qpack_kq_kernels.h"
#undef QX_TARGET
#undef QX_VNNI
#undef QX_512
#undef QX

qpack_rows_fn qpack_avx512_rows(enum ggml_type t, bool vnni)
{
	switch (t) {
	case GGML_TYPE_Q4_K:
	case GGML_TYPE_Q5_K:
	case GGML_TYPE_Q6_K:
		return vnni ? rows_k_avx512vnni : rows_k_avx512bw;
	default:
		return NULL;
	}
}

qpack_rows_fn qpack_avx2_rows(enum ggml_type t, bool vnni)
{
	switch (t) {
	case GGML_TYPE_Q4_K:
	case GGML_TYPE_Q5_K:
	case GGML_TYPE_Q6_K:
		return vnni ? rows_k_avxvnni : rows_k_avx2;
	default:
		return NULL;
	}
}
#else
qpack_rows_fn qpack_avx512_rows(enum ggml_type t, bool vnni)
{
	(void)t, (void)vnni;
	return NULL;
}

qpack_rows_fn qpack_avx2_rows(enum ggml_type t, bool vnni)
{
	(void)t, (void)vnni;
	return NULL;
}
#endif
