/* engine/checkpoint.c - placeholder until the checkpoint module lands. */
