/* Sub-commands of the sinkd binary, dispatched by main.c.  Each takes the
 * arguments after the sub-command name (argv[0] is the name itself) and
 * returns the process exit code: 0 ok, 1 runtime failure, 2 usage error. */
#pragma once

int cli_generate(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_eval(int argc, char **argv);
/* Exit codes 3-5 for a template that does not parse, raises or fails: see its --help. */
int cli_chat_template(int argc, char **argv);
