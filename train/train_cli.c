/* build/train's command line (train_cli.h). */
#include "train/train_cli.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "train/dt_config.h"
#include "core/dt_device.h"
#include "train/dt_trainer.h"
#include "train/dt_weights.h"

/* SIGINT (Ctrl-C) and SIGTERM (what a scheduler sends before it kills a job): the first asks
 * the run to stop after the step in flight and write its checkpoint; a second one quits at
 * once (the checkpoint last written stays whole: checkpoints are written by rename). Only
 * async-signal-safe calls here. */
static volatile sig_atomic_t g_signals;

static void on_signal(int sig) {
    static const char first[] = "\ntrain: stopping after the step in flight to write a checkpoint (signal again to quit "
                                "at once)\n";
    static const char second[] = "\ntrain: second signal: quitting now, without a checkpoint of this point\n";
    if (g_signals++) {
        (void)!write(2, second, sizeof second - 1);
        _exit(128 + sig);
    }
    (void)!write(2, first, sizeof first - 1);
    dt_train_interrupt(sig);
}

/* An argument as a POSIX shell reads it back: as it is, or in single quotes. */
static void put_shell_word(FILE *f, const char *s) {
    if (*s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=,:@%+-") == strlen(s)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++)
        if (*s == '\'') fputs("'\\''", f);
        else fputc(*s, f);
    fputc('\'', f);
}

/* The command line that continues an interrupted run: this one, less any resume= override,
 * plus resume=CHECKPOINT. */
static void print_resume_command(int argc, char **argv, const char *checkpoint) {
    fputs("train: to resume:", stderr);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i] + strspn(argv[i], " \t");
        if (i >= 2 && !strncmp(a, "resume", 6) && a[6 + strspn(a + 6, " \t")] == '=') continue;
        fputc(' ', stderr);
        put_shell_word(stderr, argv[i]);
    }
    fputs(" resume=", stderr);
    put_shell_word(stderr, checkpoint);
    fputc('\n', stderr);
}

/* After a run that finished: the commands that use what it wrote - the export of its checkpoint,
 * a longer run continuing it (this command line, its run length and any resume= replaced), and
 * a chart of its epochs. */
static void print_next(int argc, char **argv, const dt_train_cfg *c, const dt_train_result *r) {
    if (!r->checkpoint[0]) return;
    const char *ck = r->checkpoint;
    size_t n = strlen(ck);
    int stem = n > 5 && !strcmp(ck + n - 5, ".ckpt") ? (int)(n - 5) : (int)n;
    printf("next: build/train --export %s %.*s.safetensors   (its weights under torchvision's names, for PyTorch)\n", ck,
           stem, ck);
    printf("      ");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i] + strspn(argv[i], " \t");
        int skip = 0;
        static const char *const keys[3] = {"resume", "steps", "epochs"};
        for (int k = 0; k < 3 && i >= 2; k++) {
            size_t kl = strlen(keys[k]);
            skip |= !strncmp(a, keys[k], kl) && a[kl + strspn(a + kl, " \t")] == '=';
        }
        if (skip) continue;
        if (i) putchar(' ');
        put_shell_word(stdout, argv[i]);
    }
    printf(" resume=");
    put_shell_word(stdout, ck);
    printf(" steps=%lld   (trains it further: to twice its %lld steps)\n", (long long)(2 * r->global_step),
           (long long)r->global_step);
    if (c->log[0])
        printf("      awk -F, 'NR>1{print \"epoch \"$1\",\"100*$5}' %s_epochs.csv > %s_top1.csv && build/chart %s_top1.csv "
               "%s_top1.png \"val top-1 %% by epoch\"   (a chart of its accuracy)\n",
               c->log, c->log, c->log, c->log);
}

/* build/train --devices: what `make reproduce` and `make scaling` ask before timing GPU runs. */
static int list_devices(void) {
    if (!dt_built_with_cuda()) {
        printf("no CUDA GPU: deftc was built with CUDA=0\n");
        return 1;
    }
    int n = dt_gpu_count();
    if (n == 0) printf("no CUDA GPU is visible (cudaGetDeviceCount reports 0 or fails)\n");
    else printf("%d CUDA GPU%s visible\n", n, n == 1 ? "" : "s");
    return n ? 0 : 1;
}

/* build/train --export CHECKPOINT OUT.safetensors: a checkpoint's weights for PyTorch, without
 * training and without the dataset (the model is rebuilt from the config it stores). */
static int export_checkpoint(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: build/train --export CHECKPOINT OUT.safetensors\n");
        return 2;
    }
    dt_err err;
    if (dt_weights_export_checkpoint(argv[2], argv[3], &err)) {
        fprintf(stderr, "train: error: %s\n", err.msg);
        return 1;
    }
    printf("train: the weights of %s are in %s (docs/weights.md: loading them in PyTorch)\n", argv[2], argv[3]);
    return 0;
}

int dt_train_cli(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: build/train CONFIG.cfg [key=value ...]\n"
                "       build/train --keys      every key with its range, default and meaning\n"
                "       build/train --devices   the CUDA GPUs this build sees (exit status 1 when none)\n"
                "       build/train --export CHECKPOINT OUT.safetensors   a checkpoint's weights under torchvision's names\n");
        if (argc >= 2) dt_config_help(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--keys")) {
        dt_config_help(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--devices")) return list_devices();
    if (!strcmp(argv[1], "--export")) return export_checkpoint(argc, argv);
    dt_train_cfg c;
    dt_config_defaults(&c);
    dt_err err;
    char note[256];
    if (dt_config_load(&c, argv[1], &err) || dt_config_override(&c, argc - 2, argv + 2, note, sizeof note, &err)) {
        fprintf(stderr, "train: error: %s\n", err.msg);
        return 2;
    }
    if (note[0] && !c.quiet) printf("train: %s\n", note);
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    dt_train_result r;
    int rc = dt_train_run(&c, &r, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (r.interrupted && rc == 128 + r.interrupted) {
        if (r.checkpoint[0]) print_resume_command(argc, argv, r.checkpoint); /* the process that wrote it */
    }
    else if (rc) fprintf(stderr, "train: error: %s\n", err.msg);
    else if (!c.quiet) print_next(argc, argv, &c, &r);
    dt_train_result_free(&r);
    return rc;
}
