/* The CUDA backend at run time: finds libsinkd-cuda.so and loads it with
 * dlopen only when a daemon is to run on CUDA, so that a process on the CPU
 * backend maps no CUDA library; and asks the driver whether a device is
 * present without loading the module (model.backend auto). */
#pragma once

#include <stddef.h>

struct cuda_module_api;

/* Devices the CUDA driver (libcuda.so.1) reports; 0 when there is no
 * driver or no device.  Loads neither the CUDA runtime nor cuBLAS, and
 * unloads the driver again when it finds no device. */
int cuda_load_probe_devices(void);

/* Finds the module (cuda_load_search_path) and loads it; it stays loaded
 * until the process ends (CUDA runtimes are not made to be unloaded).
 * -ENOENT when no candidate exists (err names every place looked in),
 * -ELIBBAD when one exists but cannot be loaded or is of another sinkd
 * build (err says why). */
int cuda_load_module(const struct cuda_module_api **out, char *err, size_t err_len);

/* The i-th place cuda_load_module looks, into buf (a file path): env
 * SINKD_CUDA_MODULE (when set, the only one it tries); <the executable's
 * directory>/../lib/sinkd, and ../<libdir>/sinkd when libdir is another
 * relative folder (lib/x86_64-linux-gnu); the build
 * tree (the executable's own directory, when it lies in the build tree this
 * binary was built in); <libdir>/sinkd of the install.  -1 past the last
 * (or when one does not apply: the caller goes on to i + 1 until
 * cuda_load_search_count()). */
int cuda_load_search_path(int i, char *buf, size_t len);
int cuda_load_search_count(void);
