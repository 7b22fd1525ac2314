/* build/train CONFIG.cfg [key=value ...]: trains a ResNet-18 (plain or deformable) on one or
 * several devices; see train/dt_config.h for the keys (build/train --keys lists them). */
#include "train/train_cli.h"

int main(int argc, char **argv) { return dt_train_cli(argc, argv); }
