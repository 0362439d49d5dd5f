/* C view of the CUDA runtime for the rest of sinkd: device discovery.
 * src/ never includes CUDA headers; it calls these functions. */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices, 0 when there is none or no driver. */
int cuda_device_count(void);
/* Name and total/free memory of device `index`; 0 on success. */
int cuda_device_describe(int index, char *name, size_t name_len, size_t *total_bytes,
                         size_t *free_bytes, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
