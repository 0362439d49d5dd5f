/* util/cpu: cache sizes read from sysfs-shaped folders the test writes
 * (every way the kernel spells a size, instruction caches left out,
 * missing files), the machine's own reading against what the cpuid leaf
 * and /proc/cpuinfo say, and the AMX answer against the flags the kernel
 * reports. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cpu.h"
#include "testutil.h"

/* Writes dir/index<i>/{level,type,size}; a NULL field is left out. */
static void write_index(const char *dir, int i, const char *level, const char *type,
                        const char *size)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/index%d", dir, i);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	const char *names[3] = {"level", "type", "size"}, *values[3] = {level, type, size};
	for (int k = 0; k < 3; k++) {
		if (!values[k])
			continue;
		snprintf(path, sizeof(path), "%s/index%d/%s", dir, i, names[k]);
		FILE *f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "%s\n", values[k]);
		fclose(f);
	}
}

static void remove_tree(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_sysfs_layouts)
{
	char dir[] = "/tmp/test-cpu-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	write_index(dir, 0, "1", "Data", "48K");
	write_index(dir, 1, "1", "Instruction", "64K"); /* not data: ignored */
	write_index(dir, 2, "2", "Unified", "2048K");
	write_index(dir, 3, "3", "Unified", "105M");
	struct cpu_caches c = {0};
	ck_assert_int_eq(cpu_caches_from_sysfs(dir, &c), 0);
	ck_assert_uint_eq(c.l1d, 48u << 10);
	ck_assert_uint_eq(c.l2, 2048u << 10);
	ck_assert_uint_eq(c.l3, (size_t)105 << 20);
	remove_tree(dir);
}
END_TEST

START_TEST(test_sysfs_partial)
{
	char dir[] = "/tmp/test-cpu-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	/* a unified level 1, a level 2 without its size, no level 3, a gap */
	write_index(dir, 0, "1", "Unified", "16384");
	write_index(dir, 1, "2", "Unified", NULL);
	write_index(dir, 3, "2", "Data", "512K");
	struct cpu_caches c = {.l3 = 7};
	ck_assert_int_eq(cpu_caches_from_sysfs(dir, &c), 0);
	ck_assert_uint_eq(c.l1d, 16384);
	ck_assert_uint_eq(c.l2, 512u << 10);
	ck_assert_uint_eq(c.l3, 7); /* not named: left as it was */
	remove_tree(dir);
	struct cpu_caches none = {0};
	ck_assert_int_eq(cpu_caches_from_sysfs("/nonexistent/cache", &none), -ENOENT);
	ck_assert_uint_eq(none.l1d + none.l2 + none.l3, 0);
}
END_TEST

/* The machine's reading: plausible sizes in order, and where cpuid has the
 * leaf, the levels it names agree with the reading (sysfs is made from
 * the same leaf on x86 Linux). */
START_TEST(test_machine_caches)
{
	struct cpu_caches c = cpu_caches_read();
	ck_assert_uint_ge(c.l1d, 4u << 10);
	ck_assert_uint_le(c.l1d, 4u << 20);
	ck_assert_uint_gt(c.l2, c.l1d);
	ck_assert(c.l3 == 0 || c.l3 >= c.l2);
	ck_assert_uint_eq(cpu_l1d_cache_bytes(), c.l1d);
	ck_assert_uint_eq(cpu_l2_cache_bytes(), c.l2);
	ck_assert_uint_eq(cpu_l3_cache_bytes(), c.l3);
	struct cpu_caches id = {0};
	if (cpu_caches_from_cpuid(&id) != 0) {
		fprintf(stderr,
		        "note: no cpuid cache leaf here; the sysfs reading is not compared\n");
		return;
	}
	struct cpu_caches fs = {0};
	if (cpu_caches_from_sysfs("/sys/devices/system/cpu/cpu0/cache", &fs) == 0) {
		ck_assert_uint_eq(fs.l1d, id.l1d);
		ck_assert_uint_eq(fs.l2, id.l2);
	}
}
END_TEST

/* Whether /proc/cpuinfo's first flags line names flag (a whole word). */
static int cpuinfo_has_flag(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return -1;
	char line[8192];
	int found = -1;
	while (found < 0 && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		found = 0;
		for (char *tok = strtok(strchr(line, ':') + 1, " \n"); tok;
		     tok = strtok(NULL, " \n"))
			found |= strcmp(tok, flag) == 0;
	}
	fclose(f);
	return found;
}

START_TEST(test_amx_matches_flags)
{
	int tile = cpuinfo_has_flag("amx_tile"), int8 = cpuinfo_has_flag("amx_int8");
	if (tile < 0 || int8 < 0) {
		tu_skip("no flags line in /proc/cpuinfo to compare the AMX answer with");
		return;
	}
	bool amx = cpu_has_amx_int8();
	/* the flags say what the CPU and kernel offer; the answer adds the
	 * permission, which a kernel that lists the flags grants */
	ck_assert_int_eq(amx, tile && int8);
	ck_assert_int_eq(cpu_has_amx_int8(), amx); /* asking again changes nothing */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cpu");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_sysfs_layouts);
	tcase_add_test(tc, test_sysfs_partial);
	tcase_add_test(tc, test_machine_caches);
	tcase_add_test(tc, test_amx_matches_flags);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
