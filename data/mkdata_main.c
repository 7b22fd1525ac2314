/* build/mkdata: writes the procedurally drawn shapes dataset (dt_synth.h).
 *   build/mkdata --out data/shapes                       # 10 classes, 12k 80x80 JPEGs
 *   build/mkdata --out /tmp/inet --classes 10 --train 200 --val 0 --width 500 --height 375
 */
#include <stdlib.h>

#include "core/dt_common.h"
#include <stdio.h>

#include "data/dt_synth.h"

int main(int argc, char **argv) {
    dt_set_fatal_handler(exit); /* a failure outside a guarded call ends this program (dt_common.h) */
    dt_synth_opts o;
    dt_synth_default_opts(&o);
    dt_err err;
    int rc = dt_synth_parse_args(argc, argv, &o, &err);
    if (rc == 1) {
        fputs(dt_synth_usage(), stdout);
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "mkdata: %s\n(mkdata --help for the usage)\n", err.msg);
        return 2;
    }
    dt_synth_report rep;
    if (dt_synth_write(&o, &rep, &err) != 0) {
        fprintf(stderr, "mkdata: %s\n", err.msg);
        return 1;
    }
    if (!o.quiet)
        printf("mkdata: wrote %lld images (%d classes, %dx%d, %.1f MB, %.1f KB/image) to %s in %.2f s (%.0f images/s)\n",
               (long long)rep.images, o.classes, o.width, o.height, rep.bytes / 1048576.0,
               rep.bytes / 1024.0 / (double)(rep.images ? rep.images : 1), o.out, rep.seconds,
               rep.images / (rep.seconds > 0 ? rep.seconds : 1e-9));
    return 0;
}
