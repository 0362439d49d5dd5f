/* sinkd entry point: parses the command line, owns the process-wide state
 * (the logger and the signal flags, the only mutable globals of sinkd) and
 * hands off to the serve loop or a sub-command.  Exit codes: 0 success,
 * 1 runtime failure, 2 usage or configuration error. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "daemon.h"
#include "model/model.h"
#include "util/errbuf.h"
#include "util/log.h"

/* Set by signal handlers only; read by the serve loop. */
static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t force_stop_requested; /* a second stop signal */
static volatile sig_atomic_t reload_requested;

static void on_stop_signal(int sig)
{
	(void)sig;
	if (stop_requested)
		force_stop_requested = 1;
	stop_requested = 1;
}

static void on_reload_signal(int sig)
{
	(void)sig;
	reload_requested = 1;
}

static void print_usage(FILE *out)
{
	fprintf(out,
		"usage: sinkd --config FILE [--set key.path=value ...]   serve the API\n"
		"       sinkd --check-config FILE [--set key.path=value ...]\n"
		"                                  validate, print the effective config (exit 0) or\n"
		"                                  every error (exit 2)\n"
		"       sinkd generate --model FILE --prompt TEXT [options]   run the model once\n"
		"       sinkd tokenize --model FILE < text                  print token ids\n"
		"       sinkd eval --config FILE --text FILE [options]      streaming perplexity\n"
		"       sinkd chat-template --model FILE --context FILE     render the chat template\n"
		"       sinkd --version | --help\n"
		"\n"
		"Each sub-command takes --help.  --set overrides any config key, e.g.\n"
		"  --set inference.cache.window_size=252 --set logging.format=text\n");
}

struct serve_args {
	const char *config_path;
	int check_only;
	const char **sets;
	size_t n_sets;
};

static int parse_serve_args(int argc, char **argv, struct serve_args *a)
{
	a->sets = calloc((size_t)argc, sizeof(char *));
	if (a->sets == NULL)
		return -ENOMEM;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		int has_value = i + 1 < argc;
		if ((strcmp(arg, "--config") == 0 || strcmp(arg, "--check-config") == 0) &&
		    has_value) {
			a->check_only |= strcmp(arg, "--check-config") == 0;
			a->config_path = argv[++i];
		} else if (strcmp(arg, "--set") == 0 && has_value) {
			a->sets[a->n_sets++] = argv[++i];
		} else if (strncmp(arg, "--set=", 6) == 0) {
			a->sets[a->n_sets++] = arg + 6;
		} else {
			fprintf(stderr, "sinkd: unknown or incomplete argument '%s'\n", arg);
			return -EINVAL;
		}
	}
	if (a->config_path == NULL) {
		fprintf(stderr, "sinkd: --config FILE or --check-config FILE is required\n");
		return -EINVAL;
	}
	return 0;
}

/* --check-config: every problem, including the model-dependent budget rule. */
static int check_config(const struct serve_args *a)
{
	struct sinkd_config cfg;
	struct config_errors errs = {0};
	int rc = config_load(&cfg, a->config_path, a->sets, a->n_sets, &errs);
	if (rc == 0)
		config_check_serve(&cfg, &errs);
	if (errs.n == 0 && cfg.model.path) {
		struct model *m = NULL;
		char err[SINKD_ERR_LEN];
		struct model_load_options opt = {.expected_sha256 = cfg.model.sha256};
		if (model_load(cfg.model.path, &opt, &m, err, sizeof(err)) != 0) {
			fprintf(stderr, "%s: model.path: %s\n", a->config_path, err);
			config_deinit(&cfg);
			return 2;
		}
		config_check_budget(&cfg, &m->hp, &errs);
		model_free(m);
	}
	if (errs.n) {
		config_errors_print(&errs, stderr);
		fprintf(stderr, "%s: %zu error%s\n", a->config_path, errs.n, errs.n == 1 ? "" : "s");
		config_errors_deinit(&errs);
		config_deinit(&cfg);
		return 2;
	}
	config_print(&cfg, stdout);
	config_deinit(&cfg);
	return 0;
}

static int serve(const struct serve_args *a)
{
	struct sigaction sa = {0};
	sa.sa_handler = on_stop_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = on_reload_signal;
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct sinkd_log *log = log_new(stderr, LOG_INFO, LOG_FORMAT_JSON);
	if (log == NULL)
		return 1;
	char err[SINKD_ERR_LEN] = "";
	int rc = daemon_run(a->config_path, a->sets, a->n_sets, log, &stop_requested,
			    &force_stop_requested, &reload_requested, err, sizeof(err));
	if (rc != 0 && err[0])
		log_msg(log, LOG_ERROR, "main", "%s", err);
	log_free(log);
	return rc == 0 ? 0 : (rc == -EINVAL ? 2 : 1);
}

struct subcommand {
	const char *name;
	int (*run)(int argc, char **argv);
};

static const struct subcommand subcommands[] = {
	{"generate", cli_generate},
	{"tokenize", cli_tokenize},
	{"eval", cli_eval},
	{"chat-template", cli_chat_template},
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		print_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("sinkd %s\n", SINKD_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		print_usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		if (strcmp(argv[1], subcommands[i].name) == 0)
			return subcommands[i].run(argc - 1, argv + 1);
	if (argv[1][0] != '-') {
		fprintf(stderr, "sinkd: unknown command '%s' (allowed: generate, tokenize, eval, "
				"chat-template, or "
				"--config FILE)\n", argv[1]);
		return 2;
	}
	struct serve_args a = {0};
	int rc = parse_serve_args(argc, argv, &a);
	if (rc == 0)
		rc = a.check_only ? check_config(&a) : serve(&a);
	else
		rc = 2;
	free(a.sets);
	return rc;
}
