/* kernels/cpu/optim.c - placeholder until this file's owner lands it; every entry aborts. */
#include "kernels/cpu/cpu.h"
void mpt_cpu_unscale_check(mpt_backend *be, float *g, int64_t n, mpt_scaler_state *st) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_sum_squares(mpt_backend *be, const float *g, int64_t n, mpt_scaler_state *st) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_clip_coef(mpt_backend *be, mpt_scaler_state *st, float max_norm) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_step_begin(mpt_backend *be, mpt_scaler_state *st) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_optim_step(mpt_backend *be, const mpt_optim_args *a) { MPT_ASSERTF(0, "pending"); }
void mpt_cpu_scaler_update(mpt_backend *be, mpt_scaler_state *st, const mpt_scaler_params *p, int dynamic) { MPT_ASSERTF(0, "pending"); }
