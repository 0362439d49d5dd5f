/* The CUDA backend as a run-time module (src/cuda_load.c): what a CPU
 * process maps, where the loader looks, and its errors.  argv[1], when
 * given, is the built libsinkd-cuda.so: loading it must work on any
 * machine (no GPU needed: the constructor is not called) and is what maps
 * cuBLAS; before it, nothing of CUDA is mapped, the device probe included. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_load.h"
#include "cuda_module.h"
#include "util/errbuf.h"
#include "testutil.h"

static const char *module_path; /* argv[1] or NULL */

/* Whether a mapping of this process names a file containing `what`. */
static bool maps_file(const char *what)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024];
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

START_TEST(test_cpu_process_maps_no_cuda)
{
	ck_assert(!maps_file("libcublas"));
	ck_assert(!maps_file("libcudart"));
	int n = cuda_load_probe_devices();
	ck_assert_int_ge(n, 0);
	/* the probe asks the driver only */
	ck_assert(!maps_file("libcublas"));
	ck_assert(!maps_file("libcudart"));
	if (n == 0)
		ck_assert(!maps_file("libcuda.so"));
}
END_TEST

START_TEST(test_missing_module_names_where)
{
	char err[SINKD_ERR_LEN] = "";
	const struct cuda_module_api *api = (void *)1;
	setenv("SINKD_CUDA_MODULE", "/nonexistent/dir/libsinkd-cuda.so", 1);
	ck_assert_int_eq(cuda_load_module(&api, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_null(api);
	ck_assert_msg(strstr(err, "/nonexistent/dir/libsinkd-cuda.so") &&
	                  strstr(err, "SINKD_CUDA_MODULE"),
	              "%s", err);
	/* a file that is not a shared object: refused, naming it and why */
	char path[256];
	tu_temp_file(path, sizeof(path), "not-a-module", "hello", 5);
	setenv("SINKD_CUDA_MODULE", path, 1);
	ck_assert_int_eq(cuda_load_module(&api, err, sizeof(err)), -ELIBBAD);
	ck_assert_msg(strstr(err, path) != NULL, "%s", err);
	remove(path);
	ck_assert(!maps_file("libcublas"));
}
END_TEST

START_TEST(test_search_order)
{
	char buf[4096];
	unsetenv("SINKD_CUDA_MODULE");
	ck_assert_int_eq(cuda_load_search_path(0, buf, sizeof(buf)), -1);
	setenv("SINKD_CUDA_MODULE", "/x/y.so", 1);
	ck_assert_int_eq(cuda_load_search_path(0, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/x/y.so");
	ck_assert_int_eq(cuda_load_search_path(1, buf, sizeof(buf)), 0);
	ck_assert_msg(strstr(buf, "/../lib/sinkd/" CUDA_MODULE_FILE) != NULL, "%s", buf);
	/* this test runs from the build tree: its module folder is a candidate */
	ck_assert_int_eq(cuda_load_search_path(3, buf, sizeof(buf)), 0);
	ck_assert_msg(strstr(buf, "/src/" CUDA_MODULE_FILE) != NULL, "%s", buf);
	ck_assert_int_eq(cuda_load_search_path(4, buf, sizeof(buf)), 0);
	ck_assert_msg(strstr(buf, "/sinkd/" CUDA_MODULE_FILE) != NULL, "%s", buf);
	ck_assert_int_eq(cuda_load_search_path(cuda_load_search_count(), buf, sizeof(buf)), -1);
}
END_TEST

START_TEST(test_module_loads_and_brings_cublas)
{
	char err[SINKD_ERR_LEN] = "";
	const struct cuda_module_api *api = NULL;
	setenv("SINKD_CUDA_MODULE", module_path, 1);
	ck_assert(!maps_file("libcublas"));
	ck_assert_msg(cuda_load_module(&api, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(api->version, SINKD_VERSION);
	ck_assert_ptr_nonnull(api->backend_new);
	ck_assert_int_ge(api->device_count(), 0);
	ck_assert(maps_file("libcublas"));
	/* the build tree's module is found without the variable */
	unsetenv("SINKD_CUDA_MODULE");
	ck_assert_msg(cuda_load_module(&api, err, sizeof(err)) == 0, "%s", err);
}
END_TEST

int main(int argc, char **argv)
{
	module_path = argc > 1 ? argv[1] : NULL;
	Suite *s = suite_create("cuda-load");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_cpu_process_maps_no_cuda);
	tcase_add_test(tc, test_missing_module_names_where);
	tcase_add_test(tc, test_search_order);
	if (module_path) /* a build with the CUDA backend */
		tcase_add_test(tc, test_module_loads_and_brings_cublas);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
