/* util/digest: SHA-256 of buffers and files against the FIPS 180-2 test
 * vectors, the hex encoder, a bounded fd read, and the errors a missing
 * file gives. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/digest.h"
#include "testutil.h"

#define ABC_SHA256 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

START_TEST(test_hex)
{
	const unsigned char b[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
	char out[2 * sizeof(b) + 1];
	memset(out, 'x', sizeof(out));
	digest_hex(b, sizeof(b), out);
	ck_assert_str_eq(out, "00017f80abff");
	digest_hex(b, 0, out);
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(test_buffer)
{
	char hex[DIGEST_SHA256_HEX_LEN];
	digest_sha256_hex("abc", 3, hex);
	ck_assert_str_eq(hex, ABC_SHA256);
	digest_sha256_hex("", 0, hex);
	ck_assert_str_eq(hex, EMPTY_SHA256);
	unsigned char md[DIGEST_SHA256_BYTES];
	digest_sha256("abc", 3, md);
	ck_assert_uint_eq(md[0], 0xba);
	ck_assert_uint_eq(md[31], 0xad);
}
END_TEST

START_TEST(test_file)
{
	/* Larger than one read, so the streaming loop runs more than once. */
	size_t n = (1u << 17) + 3;
	unsigned char *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (unsigned char)(i * 131 + 7);
	char want[DIGEST_SHA256_HEX_LEN], got[DIGEST_SHA256_HEX_LEN], err[256] = "";
	digest_sha256_hex(data, n, want);
	char path[64];
	tu_temp_file(path, sizeof(path), "test-digest", data, n);
	ck_assert_int_eq(digest_file_sha256_hex(path, got, err, sizeof(err)), 0);
	ck_assert_str_eq(got, want);

	/* A bound stops the read: the digest is that of the prefix. */
	int fd = open(path, O_RDONLY);
	unsigned char md[DIGEST_SHA256_BYTES];
	int read_errno = -1;
	ck_assert_int_eq(digest_sha256_fd(fd, 3, md, &read_errno, err, sizeof(err)), 0);
	ck_assert_int_eq(read_errno, 0);
	close(fd);
	digest_hex(md, sizeof(md), got);
	digest_sha256_hex(data, 3, want);
	ck_assert_str_eq(got, want);
	unlink(path);
	free(data);
}
END_TEST

START_TEST(test_file_errors)
{
	char hex[DIGEST_SHA256_HEX_LEN], err[256] = "";
	ck_assert_int_eq(digest_file_sha256_hex("/nonexistent/x", hex, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x"));
	/* A directory opens but cannot be read: a read error, named. */
	ck_assert_int_eq(digest_file_sha256_hex("/tmp", hex, err, sizeof(err)), -EISDIR);
	ck_assert_ptr_nonnull(strstr(err, "/tmp"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("digest");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_hex);
	tcase_add_test(tc, test_buffer);
	tcase_add_test(tc, test_file);
	tcase_add_test(tc, test_file_errors);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
