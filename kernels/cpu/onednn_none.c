/*
 * kernels/cpu/onednn_none.c - the oneDNN interface of kernels/cpu/onednn.h in a build without oneDNN (Meson feature
 * 'onednn' disabled or libdnnl-dev not found): nothing is available, so gemm.c runs every GEMM on OpenBLAS and the
 * native kernel set is refused with the reason.
 */
#include <stdio.h>

#include "engine/status.h"
#include "kernels/cpu/onednn.h"

int mpt_onednn_available(void) { return 0; }

int mpt_onednn_native_bf16(char *why, size_t n) {
    if (why)
        snprintf(why, n, "this build has no oneDNN (install libdnnl-dev and reconfigure: meson setup --reconfigure, "
                 "Meson feature 'onednn')");
    return 0;
}

const char *mpt_onednn_version(void) { return "none"; }
const char *mpt_onednn_isa(void) { return "none"; }
void mpt_onednn_set_threads(int n) { (void)n; }
int mpt_onednn_threads(void) { return 1; }
int64_t mpt_onednn_primitives_created(void) { return 0; }
const char *mpt_onednn_gemm_impl(const mpt_onednn_gemm *g) {
    (void)g;
    return "none";
}

int mpt_onednn_gemm_prepare(const mpt_onednn_gemm *g, size_t *scratch_bytes) {
    (void)g;
    *scratch_bytes = 0;
    return 0;
}

mpt_onednn_state mpt_onednn_gemm_lookup(const mpt_onednn_gemm *g, size_t *scratch_bytes) {
    (void)g;
    *scratch_bytes = 0;
    return MPT_ONEDNN_REFUSED;
}

void mpt_onednn_gemm_describe(const mpt_onednn_gemm *g, char *buf, size_t n) {
    snprintf(buf, n, "%lldx%lldx%lld matmul (M x N x K), op(A) %s, op(B) %s, %s operands, alpha %g, beta %g",
             (long long)g->M, (long long)g->N, (long long)g->K, g->trans_a ? "A^T" : "A", g->trans_b ? "B^T" : "B",
             mpt_dtype_name(g->ab_dtype), (double)g->alpha, (double)g->beta);
}

void mpt_onednn_gemm_run(const mpt_onednn_gemm *g, const void *A, const void *B, float *C, void *scratch,
                         size_t scratch_bytes) {
    (void)g, (void)A, (void)B, (void)C, (void)scratch, (void)scratch_bytes;
    MPT_ASSERTF(0, "mpt_onednn_gemm_run: this build has no oneDNN");
}
