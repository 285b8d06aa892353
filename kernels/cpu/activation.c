/*
 * kernels/cpu/activation.c - the CPU backend's smooth activations (gelu, tanh, sigmoid, leaky ReLU) and average
 * pooling, forward and backward.
 *
 * Contracts: engine/backend.h (act_forward, act_backward, mpt_avgpool_args). Inputs are widened exactly to FP32 in
 * chunks on the stack, the per-element math is engine/numerics.h's (mpt_elem_act, mpt_elem_act_grad), and each output
 * is rounded once to its dtype (an accumulating one as round(old + update)). Element-wise passes split over the OpenMP
 * threads without changing a bit (kernels/cpu/parallel.h). Average pooling sums each window in FP32 in row-major window
 * order and divides by the window's size; its backward gathers, for each input element, the output gradients of the
 * windows covering it (output rows, then columns, ascending), so no element is written twice (no scatter).
 */
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/parallel.h"

enum { ACT_CHUNK = 512 };

static const void *act_at(const void *p, mpt_dtype t, int64_t i) {
    return (const char *)p + (size_t)i * mpt_dtype_size(t);
}

void mpt_cpu_act_forward(mpt_backend *be, mpt_act kind, void *y, const void *x, mpt_dtype dtype, int64_t n,
                         float alpha) {
    (void)be;
    MPT_ASSERTF(mpt_dtype_is_float(dtype) && (unsigned)kind < MPT_ACT_COUNT && n >= 0,
                "act_forward: kind %d, dtype %s, n %lld", (int)kind, mpt_dtype_name(dtype), (long long)n);
    const int64_t chunks = (n + ACT_CHUNK - 1) / ACT_CHUNK;
    MPT_OMP(omp parallel for schedule(static) if (n >= MPT_PAR_MIN))
    for (int64_t c = 0; c < chunks; c++) {
        float v[ACT_CHUNK];
        const int64_t i0 = c * ACT_CHUNK, m = n - i0 < ACT_CHUNK ? n - i0 : ACT_CHUNK;
        mpt_cpu_widen(v, act_at(x, dtype, i0), dtype, m);
        for (int64_t i = 0; i < m; i++) v[i] = mpt_elem_act((int)kind, v[i], alpha);
        mpt_cpu_narrow((void *)act_at(y, dtype, i0), dtype, v, m);
    }
}

void mpt_cpu_act_backward(mpt_backend *be, mpt_act kind, void *dx, const void *dy, const void *x, const void *y,
                          mpt_dtype dtype, int64_t n, float alpha, int accumulate) {
    (void)be;
    MPT_ASSERTF(mpt_dtype_is_float(dtype) && (unsigned)kind < MPT_ACT_COUNT && n >= 0,
                "act_backward: kind %d, dtype %s, n %lld", (int)kind, mpt_dtype_name(dtype), (long long)n);
    const int64_t chunks = (n + ACT_CHUNK - 1) / ACT_CHUNK;
    MPT_OMP(omp parallel for schedule(static) if (n >= MPT_PAR_MIN))
    for (int64_t c = 0; c < chunks; c++) {
        float g[ACT_CHUNK], xv[ACT_CHUNK], yv[ACT_CHUNK];
        const int64_t i0 = c * ACT_CHUNK, m = n - i0 < ACT_CHUNK ? n - i0 : ACT_CHUNK;
        mpt_cpu_widen(g, act_at(dy, dtype, i0), dtype, m);
        mpt_cpu_widen(xv, act_at(x, dtype, i0), dtype, m);
        mpt_cpu_widen(yv, act_at(y, dtype, i0), dtype, m);
        for (int64_t i = 0; i < m; i++) g[i] = mpt_elem_act_grad((int)kind, g[i], xv[i], yv[i], alpha);
        mpt_cpu_accumulate((void *)act_at(dx, dtype, i0), dtype, g, m, accumulate);
    }
}

void mpt_cpu_avgpool_forward(mpt_backend *be, const mpt_avgpool_args *a) {
    (void)be;
    mpt_avgpool_args_check(a, "avgpool_forward");
    const int64_t planes = (int64_t)a->N * a->C;
    const float count = (float)(a->kh * a->kw);
    MPT_OMP(omp parallel for schedule(static) if (planes * a->H * a->W >= MPT_PAR_MIN))
    for (int64_t pl = 0; pl < planes; pl++) {
        const int64_t xin = pl * a->H * a->W, yout = pl * a->P * a->Q;
        for (int p = 0; p < a->P; p++)
            for (int q = 0; q < a->Q; q++) {
                float sum = 0.0f;
                for (int r = 0; r < a->kh; r++)
                    for (int s = 0; s < a->kw; s++)
                        sum += mpt_load_f32(a->x, a->dtype, xin + (int64_t)(p * a->sh + r) * a->W + q * a->sw + s);
                mpt_store_f32(a->y, a->dtype, yout + (int64_t)p * a->Q + q, sum / count);
            }
    }
}

void mpt_cpu_avgpool_backward(mpt_backend *be, const mpt_avgpool_args *a) {
    (void)be;
    mpt_avgpool_args_check(a, "avgpool_backward");
    const int64_t planes = (int64_t)a->N * a->C;
    const float count = (float)(a->kh * a->kw);
    MPT_OMP(omp parallel for schedule(static) if (planes * a->H * a->W >= MPT_PAR_MIN))
    for (int64_t pl = 0; pl < planes; pl++) {
        const int64_t xin = pl * a->H * a->W, yout = pl * a->P * a->Q;
        for (int h = 0; h < a->H; h++) {
            int p0, p1;
            mpt_pool_covering(h, a->sh, 0, a->kh, a->P, &p0, &p1);
            for (int w = 0; w < a->W; w++) {
                int q0, q1;
                mpt_pool_covering(w, a->sw, 0, a->kw, a->Q, &q0, &q1);
                float acc = 0.0f;
                for (int p = p0; p <= p1; p++)
                    for (int q = q0; q <= q1; q++) acc += mpt_load_f32(a->dy, a->dtype, yout + (int64_t)p * a->Q + q);
                const float g = acc / count;
                const int64_t i = xin + (int64_t)h * a->W + w;
                mpt_store_f32(a->dx, a->dtype, i, a->accumulate ? mpt_load_f32(a->dx, a->dtype, i) + g : g);
            }
        }
    }
}
