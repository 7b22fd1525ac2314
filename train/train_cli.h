/* train_cli.h: build/train's command line, `CONFIG [key=value ...]` (program code, not in
 * libdeftc; the tests link it too). Returns the process exit status: 0 success, 1 a runtime
 * failure (data, checkpoint), 2 a usage or configuration error, 130 / 143 when SIGINT /
 * SIGTERM stopped the run after writing its checkpoint (it then prints the command line that
 * resumes it); a second signal exits at once with that status. */
#ifndef DT_TRAIN_CLI_H
#define DT_TRAIN_CLI_H

int dt_train_cli(int argc, char **argv);

#endif
