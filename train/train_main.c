/* build/train CONFIG.cfg [key=value ...]: trains a ResNet-18 (plain or deformable) on one or
 * several devices; see train/dt_config.h for the keys (build/train --keys lists them). */
#include <stdlib.h>
#include <unistd.h>

#include "core/dt_common.h"
#include "core/dt_dist.h"
#include "train/train_cli.h"

int main(int argc, char **argv) {
    /* The program's policy (the library never ends the process): a failure outside a guarded
     * call exits 1; a replica stuck inside NCCL after an abort cannot be joined, so _exit. */
    dt_set_fatal_handler(exit);
    dt_dist_set_stuck_handler(_exit);
    return dt_train_cli(argc, argv);
}
