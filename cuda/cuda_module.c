/* The entry of libsinkd-cuda.so: hands the loader (src/engine/cuda_load.c)
 * the backend's constructor and device count.  Only this symbol is exported;
 * the rest of the module (the backend, its kernels, the parts of sinkd's
 * library it calls, cuBLAS and the runtime it links) stays inside. */
#include "cuda_module.h"

#include "cuda_device.h"
#include "model/model.h"

__attribute__((visibility("default"))) const struct cuda_module_api *sinkd_cuda_module_v1(void)
{
	static const struct cuda_module_api api = {
	    .version = SINKD_VERSION,
	    .model_size = sizeof(struct model),
	    .options_size = sizeof(struct backend_cuda_options),
	    .device_count = cuda_device_count,
	    .backend_new = backend_cuda_new,
	};
	return &api;
}
