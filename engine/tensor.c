/* engine/tensor.c - tensor bookkeeping (no allocation: tensors are views into arenas). */
#include "engine/tensor.h"

#include <stdio.h>
#include <string.h>

#include "engine/status.h"

int64_t mpt_tensor_numel(const mpt_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t mpt_tensor_nbytes(const mpt_tensor *t) {
    return (size_t)mpt_tensor_numel(t) * mpt_dtype_size(t->dtype);
}

void mpt_tensor_set(mpt_tensor *t, const char *name, mpt_dtype dtype, mpt_device device, mpt_mem mem,
                    int ndim, const int64_t *shape) {
    MPT_ASSERT(ndim >= 1 && ndim <= MPT_MAX_DIMS);
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
    t->ndim = ndim;
    for (int i = 0; i < MPT_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 1;
    for (int i = 0; i < ndim; i++) MPT_ASSERTF(shape[i] > 0, "tensor %s: dim %d is %lld", t->name, i, (long long)shape[i]);
    t->dtype = dtype;
    t->device = device;
    t->mem = mem;
}

const char *mpt_mem_name(mpt_mem m) {
    static const char *names[MPT_MEM_COUNT] = {"master", "weight", "grad", "optim",
                                               "act", "act_grad", "workspace", "data", "twin",
                                               "telemetry"};
    return (unsigned)m < MPT_MEM_COUNT ? names[m] : "?";
}
