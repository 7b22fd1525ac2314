/* build/train's command line (train_cli.h). */
#include "train_cli.h"

#include <stdio.h>
#include <string.h>

#include "dt_config.h"
#include "dt_trainer.h"

int dt_train_cli(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: build/train CONFIG.cfg [key=value ...]\n       build/train --keys\n");
        if (argc >= 2) dt_config_help(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--keys")) {
        dt_config_help(stdout);
        return 0;
    }
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    if (dt_config_load(&c, argv[1], &err)) {
        fprintf(stderr, "train: error: %s\n", err.msg);
        return 2;
    }
    for (int i = 2; i < argc; i++)
        if (dt_config_set(&c, argv[i], &err)) {
            fprintf(stderr, "train: error: %s\n", err.msg);
            return 2;
        }
    dt_train_result r;
    int rc = dt_train_run(&c, &r, &err);
    if (rc) fprintf(stderr, "train: error: %s\n", err.msg);
    dt_train_result_free(&r);
    return rc;
}
