/* kernels/cpu/conv.c - placeholder until this file's owner lands it; every entry aborts. */
#include "kernels/cpu/cpu.h"
void mpt_cpu_conv2d_forward(mpt_backend *be, const mpt_conv_args *a) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_conv2d_backward_data(mpt_backend *be, const mpt_conv_args *a) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_conv2d_backward_filter(mpt_backend *be, const mpt_conv_args *a) { MPT_ASSERTF(0, "pending"); }
size_t mpt_cpu_conv2d_workspace(mpt_backend *be, const mpt_conv_args *a) { return 0; }
