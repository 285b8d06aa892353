/* engine/train.c - placeholder until the training step lands. */
#include "engine/train.h"
