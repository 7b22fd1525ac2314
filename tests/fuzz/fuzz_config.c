/* libFuzzer target: the config parser (dt_config_parse, then the cross-key checks) on any
 * bytes, and the same bytes as one command-line override; whatever either accepts must come
 * back unchanged through the text a checkpoint stores (dt_config_write, then the parser). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/dt_config.h"

static char *config_text(const dt_train_cfg *c) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) abort();
    dt_config_write(c, f);
    fclose(f);
    return text;
}

/* The written text of c parses, and writes again the same: every value read back exactly. */
static void expect_round_trip(const dt_train_cfg *c) {
    char *text = config_text(c);
    dt_train_cfg back;
    dt_err err;
    dt_config_defaults(&back);
    if (dt_config_parse(&back, text, strlen(text), "stored", &err)) {
        fprintf(stderr, "the written config does not parse: %s\n%s", err.msg, text);
        abort();
    }
    char *again = config_text(&back);
    if (strcmp(text, again)) {
        fprintf(stderr, "the written config reads back differently:\n%s\nvs\n%s", text, again);
        abort();
    }
    free(again);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_train_cfg c;
    dt_err err;
    dt_config_defaults(&c);
    if (dt_config_parse(&c, (const char *)data, size, "fuzz.cfg", &err) == 0) {
        dt_config_check(&c, &err);
        expect_round_trip(&c);
    }
    /* An override is a C string: cut at the first NUL, as argv would be. */
    char *arg = malloc(size + 1);
    memcpy(arg, data, size);
    arg[size] = 0;
    dt_config_defaults(&c);
    if (dt_config_set(&c, arg, &err) == 0) expect_round_trip(&c);
    free(arg);
    return 0;
}
