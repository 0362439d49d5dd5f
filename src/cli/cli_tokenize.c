/* `sinkd tokenize`: reads UTF-8 text from stdin and prints its token ids,
 * space-separated on one line.  Opens the GGUF file for its vocabulary only
 * (gguf_open + tokenizer_new_from_gguf), so vocabulary-only files work.  By
 * default no BOS is added and control-token texts are plain text, which is
 * how the ggml-vocab test vectors are written; --bos and --parse-special
 * change that.  The input is tokenized exactly as read (a trailing newline
 * counts). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_common.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/errbuf.h"

static void tokenize_usage(FILE *out)
{
	fprintf(out, "usage: sinkd tokenize --model FILE [--bos] [--parse-special] < text\n"
	             "Prints the token ids of stdin, space-separated, on one line.\n");
}

static int tokenize_run(const char *path, bool bos, bool parse_special, char *err, size_t err_len)
{
	struct gguf_file *f = NULL;
	struct tokenizer *tok = NULL;
	char *text = NULL;
	int32_t *ids = NULL;
	size_t len = 0, n_ids = 0;
	int rc = gguf_open(path, &f, err, err_len);
	if (rc)
		goto out;
	if ((rc = tokenizer_new_from_gguf(f, &tok, err, err_len)))
		goto out;
	if ((rc = cli_read_stream(stdin, &text, &len))) {
		err_set(err, err_len, rc, "cannot read stdin");
		goto out;
	}
	if ((rc = tokenizer_encode(tok, text, len, bos, parse_special, &ids, &n_ids, err, err_len)))
		goto out;
	for (size_t i = 0; i < n_ids; i++)
		printf(i ? " %d" : "%d", (int)ids[i]);
	printf("\n");
out:
	free(ids);
	free(text);
	tokenizer_free(tok);
	gguf_close(f);
	return rc;
}

int cli_tokenize(int argc, char **argv)
{
	const char *path = NULL;
	bool bos = false, parse_special = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--model") && i + 1 < argc) {
			path = argv[++i];
		} else if (!strcmp(argv[i], "--bos")) {
			bos = true;
		} else if (!strcmp(argv[i], "--parse-special")) {
			parse_special = true;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			tokenize_usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "sinkd tokenize: unknown or incomplete argument '%s'\n",
			        argv[i]);
			tokenize_usage(stderr);
			return 2;
		}
	}
	if (!path) {
		fprintf(stderr, "sinkd tokenize: --model FILE is required\n");
		return 2;
	}
	char err[SINKD_ERR_LEN] = "";
	int rc = tokenize_run(path, bos, parse_special, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "sinkd tokenize: %s\n", err);
		return 1;
	}
	return 0;
}
