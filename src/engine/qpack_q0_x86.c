/* The x86 kernels of Q8_0, Q4_0 and MXFP4 packed (layout: qpack_impl.h): 512-bit
 * builds (AVX-512 VNNI, AVX-512BW) and 256-bit builds (AVX-VNNI, AVX2) of
 * the same code (qpack_q0_kernels.h), compiled with target attributes as
 * qdot's ISA files are; qpack.c hands them out only where the CPU has the
 * features.  The tiles are sized per register file: 512-bit builds run 2
 * groups x 4 vectors and decode 4 groups at once (32 registers), 256-bit
 * builds 1 group (two registers per line) x 4 vectors and decode 2 groups
 * (16 registers).  Nothing here off x86. */
#include "engine/qdot_impl.h"
#include "engine/qpack_impl.h"
#include "util/tuning.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define Q0_CAT2(a, b) a##_##b
#define Q0_CAT(a, b) Q0_CAT2(a, b)

#define Q0_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define Q0_VNNI 1
#define Q0_512 1
#define Q0_RG 2
#define Q0_NV 4
#define Q0_DEC_RG 4
#define Q0(name) Q0_CAT(name, avx512vnni)
#include "engine/qpack_q0_kernels.h"

#define Q0_TARGET "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define Q0_VNNI 0
#define Q0_512 1
#define Q0_RG 2
#define Q0_NV 4
#define Q0_DEC_RG 4
#define Q0(name) Q0_CAT(name, avx512bw)
#include "engine/qpack_q0_kernels.h"

#define Q0_TARGET "avx2,avxvnni,fma,f16c"
#define Q0_VNNI 1
#define Q0_512 0
#define Q0_RG 1
#define Q0_NV 4
#define Q0_DEC_RG 2
#define Q0(name) Q0_CAT(name, avxvnni)
#include "engine/qpack_q0_kernels.h"

#define Q0_TARGET "avx2,fma,f16c"
#define Q0_VNNI 0
#define Q0_512 0
#define Q0_RG 1
#define Q0_NV 4
#define Q0_DEC_RG 2
#define Q0(name) Q0_CAT(name, avx2)
#include "engine/qpack_q0_kernels.h"

qpack_rows_fn qpack_q0_avx512_rows(enum ggml_type t, bool vnni)
{
	if (t == GGML_TYPE_Q8_0)
		return vnni ? rows_q8_0_avx512vnni : rows_q8_0_avx512bw;
	if (t == GGML_TYPE_Q4_0)
		return vnni ? rows_q4_0_avx512vnni : rows_q4_0_avx512bw;
	if (t == GGML_TYPE_MXFP4)
		return vnni ? rows_mxfp4_avx512vnni : rows_mxfp4_avx512bw;
	return NULL;
}

qpack_rows_fn qpack_q0_avx2_rows(enum ggml_type t, bool vnni)
{
	if (t == GGML_TYPE_Q8_0)
		return vnni ? rows_q8_0_avxvnni : rows_q8_0_avx2;
	if (t == GGML_TYPE_Q4_0)
		return vnni ? rows_q4_0_avxvnni : rows_q4_0_avx2;
	if (t == GGML_TYPE_MXFP4)
		return vnni ? rows_mxfp4_avxvnni : rows_mxfp4_avx2;
	return NULL;
}
#else
qpack_rows_fn qpack_q0_avx512_rows(enum ggml_type t, bool vnni)
{
	(void)t, (void)vnni;
	return NULL;
}

qpack_rows_fn qpack_q0_avx2_rows(enum ggml_type t, bool vnni)
{
	(void)t, (void)vnni;
	return NULL;
}
#endif
