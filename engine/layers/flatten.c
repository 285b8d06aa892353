/* engine/layers/flatten.c - placeholder until this file's owner lands it. */
#include "engine/layers/layers.h"
