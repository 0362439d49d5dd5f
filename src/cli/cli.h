/* Sub-commands of the sinkd binary, dispatched by main.c.  Each takes the
 * arguments after the sub-command name (argv[0] is the name itself) and
 * returns the process exit code: 0 ok, 1 runtime failure, 2 usage error. */
#pragma once

int cli_generate(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_eval(int argc, char **argv);
