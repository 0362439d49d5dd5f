/* The CUDA backend as a run-time module (libsinkd-cuda.so, loaded with
 * dlopen by src/engine/cuda_load.c): the one symbol it exports and the
 * table behind it.  The module carries cuBLAS and the CUDA runtime, so a
 * process that never loads it maps none of them.  Plain C. */
#pragma once

#include <stddef.h>

#include "backend_cuda.h"

#define CUDA_MODULE_FILE "libsinkd-cuda.so"
#define CUDA_MODULE_SYMBOL "sinkd_cuda_module_v1"

/* What the loader checks before it calls into the module: a module built
 * from another version of sinkd would read the model's structs wrongly. */
struct cuda_module_api {
	const char *version;       /* SINKD_VERSION it was built from */
	size_t model_size;         /* sizeof(struct model) */
	size_t options_size;       /* sizeof(struct backend_cuda_options) */
	int (*device_count)(void); /* cuda_device_count */
	int (*backend_new)(const struct model *m, const struct backend_options *opt,
	                   const struct backend_cuda_options *copt, struct backend **out, char *err,
	                   size_t err_len); /* backend_cuda_new */
};

/* The module's entry (CUDA_MODULE_SYMBOL). */
const struct cuda_module_api *sinkd_cuda_module_v1(void);
