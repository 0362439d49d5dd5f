// Device discovery for the CUDA backend.  Never aborts: a machine without a
// driver or GPU reports zero devices.
#include "cuda_device.h"

#include <cstdio>
#include <cuda_runtime.h>

extern "C" int cuda_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

extern "C" int cuda_device_describe(int index, char *name, size_t name_len, size_t *total_bytes,
                                    size_t *free_bytes, char *err, size_t err_len)
{
	cudaDeviceProp prop;
	cudaError_t rc = cudaGetDeviceProperties(&prop, index);
	if (rc == cudaSuccess)
		rc = cudaSetDevice(index);
	if (rc == cudaSuccess)
		rc = cudaMemGetInfo(free_bytes, total_bytes);
	if (rc != cudaSuccess) {
		if (err && err_len)
			snprintf(err, err_len, "cuda device %d: %s", index, cudaGetErrorString(rc));
		return -19;
	}
	if (name && name_len)
		snprintf(name, name_len, "%s", prop.name);
	return 0;
}
