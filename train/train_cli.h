/* train_cli.h: build/train's command line, `CONFIG [key=value ...]` (program code, not in
 * libdeftc; the tests link it too). Returns the process exit status: 0 success, 1 a runtime
 * failure (data, checkpoint), 2 a usage or configuration error. */
#ifndef DT_TRAIN_CLI_H
#define DT_TRAIN_CLI_H

int dt_train_cli(int argc, char **argv);

#endif
