/* build/train CONFIG.cfg [key=value ...]: trains a ResNet-18 (plain or deformable); see
 * train/dt_config.h for the keys (build/train --keys lists them). */
#include "dt_trainer.h"

int main(int argc, char **argv) { return dt_train_cli(argc, argv); }
