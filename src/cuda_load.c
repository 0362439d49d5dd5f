/* Loads the CUDA backend module (cuda/cuda_module.h) with dlopen: where it
 * looks, in order, and the checks that the module was built with this
 * sinkd.  The device probe talks to the driver library directly (cuInit,
 * cuDeviceGetCount by dlsym), since the CUDA runtime and cuBLAS come only
 * with the module and loading it maps them (about 150 MB resident).  It
 * does not make the backend: the daemon calls the module's constructor. */
#include "cuda_load.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_module.h"
#include "model/model.h"
#include "util/errbuf.h"

#ifndef SINKD_CUDA_MODULE_DIR
#define SINKD_CUDA_MODULE_DIR "/usr/local/lib/sinkd"
#endif
#ifndef SINKD_CUDA_MODULE_LIBDIR
#define SINKD_CUDA_MODULE_LIBDIR "lib"
#endif
#ifndef SINKD_BUILD_ROOT
#define SINKD_BUILD_ROOT ""
#endif

int cuda_load_probe_devices(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return 0;
	int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
	int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
	int n = 0;
	if (!init || !count || init(0) != 0 || count(&n) != 0)
		n = 0;
	if (n <= 0)
		dlclose(h);
	return n > 0 ? n : 0;
}

/* The directory of the running executable, or "" when unknown. */
static void exe_dir(char *buf, size_t len)
{
	char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
	buf[0] = '\0';
	if (n <= 0)
		return;
	path[n] = '\0';
	char *slash = strrchr(path, '/');
	if (slash)
		*slash = '\0';
	snprintf(buf, len, "%s", path);
}

int cuda_load_search_count(void)
{
	return 5;
}

int cuda_load_search_path(int i, char *buf, size_t len)
{
	char dir[PATH_MAX];
	const char *env = getenv("SINKD_CUDA_MODULE");
	size_t root_len = strlen(SINKD_BUILD_ROOT);
	switch (i) {
	case 0:
		if (!env || !env[0])
			return -1;
		snprintf(buf, len, "%s", env);
		return 0;
	case 1:
		exe_dir(dir, sizeof(dir));
		if (!dir[0])
			return -1;
		snprintf(buf, len, "%s/../lib/sinkd/%s", dir, CUDA_MODULE_FILE);
		return 0;
	case 2:
		/* the install's libdir relative to the binary (lib/<multiarch>),
		 * for an install tree moved as a whole */
		exe_dir(dir, sizeof(dir));
		if (!dir[0] || strcmp(SINKD_CUDA_MODULE_LIBDIR, "lib") == 0 ||
		    SINKD_CUDA_MODULE_LIBDIR[0] == '/')
			return -1;
		snprintf(buf, len, "%s/../%s/sinkd/%s", dir, SINKD_CUDA_MODULE_LIBDIR,
		         CUDA_MODULE_FILE);
		return 0;
	case 3:
		/* only an executable inside the build tree: an installed one
		 * never reads a build folder */
		exe_dir(dir, sizeof(dir));
		if (!root_len || strncmp(dir, SINKD_BUILD_ROOT, root_len) != 0 ||
		    (dir[root_len] != '/' && dir[root_len] != '\0'))
			return -1;
		snprintf(buf, len, "%s/src/%s", SINKD_BUILD_ROOT, CUDA_MODULE_FILE);
		return 0;
	case 4:
		snprintf(buf, len, "%s/%s", SINKD_CUDA_MODULE_DIR, CUDA_MODULE_FILE);
		return 0;
	default:
		return -1;
	}
}

/* Loads the module at path and checks its table. */
static int load_one(const char *path, const struct cuda_module_api **out, char *err, size_t err_len)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return err_set(err, err_len, -ELIBBAD, "CUDA backend module %s: %s", path,
		               dlerror());
	const struct cuda_module_api *(*entry)(void) =
	    (const struct cuda_module_api *(*)(void))dlsym(h, CUDA_MODULE_SYMBOL);
	const struct cuda_module_api *api = entry ? entry() : NULL;
	if (!api || strcmp(api->version, SINKD_VERSION) != 0 ||
	    api->model_size != sizeof(struct model) ||
	    api->options_size != sizeof(struct backend_cuda_options)) {
		dlclose(h);
		return err_set(err, err_len, -ELIBBAD,
		               "CUDA backend module %s: %s (this sinkd is %s); use the module "
		               "built with this sinkd",
		               path,
		               api ? "built from another version of sinkd"
		                   : "no " CUDA_MODULE_SYMBOL " in it",
		               SINKD_VERSION);
	}
	*out = api;
	return 0;
}

int cuda_load_module(const struct cuda_module_api **out, char *err, size_t err_len)
{
	char path[PATH_MAX + 64], looked[1024] = "";
	size_t at = 0;
	*out = NULL;
	/* a path the user named is the only candidate */
	const char *env = getenv("SINKD_CUDA_MODULE");
	int n = env && env[0] ? 1 : cuda_load_search_count();
	for (int i = 0; i < n; i++) {
		struct stat st;
		if (cuda_load_search_path(i, path, sizeof(path)) != 0)
			continue;
		if (stat(path, &st) == 0)
			return load_one(path, out, err, err_len);
		if (at < sizeof(looked))
			at += (size_t)snprintf(looked + at, sizeof(looked) - at, "%s%s",
			                       at ? ", " : "", path);
	}
	return err_set(err, err_len, -ENOENT,
	               "the CUDA backend module %s was not found (looked for %s%s); install "
	               "it beside sinkd (meson install of a build with CUDA) or set "
	               "SINKD_CUDA_MODULE to its path",
	               CUDA_MODULE_FILE, looked, n == 1 ? "" : "; SINKD_CUDA_MODULE is not set");
}
