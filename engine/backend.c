/* engine/backend.c - backend-independent helpers: memory accounting and the workspace. */
#include "engine/backend.h"

#include <stdlib.h>

void mpt_backend_account(mpt_backend *be, mpt_mem mem, int64_t delta_bytes) {
    be->mem_current[mem] = (size_t)((int64_t)be->mem_current[mem] + delta_bytes);
    if (be->mem_current[mem] > be->mem_peak[mem]) be->mem_peak[mem] = be->mem_current[mem];
    size_t total = 0;
    for (int m = 0; m < MPT_MEM_COUNT; m++) total += be->mem_current[m];
    if (total > be->mem_peak_total) be->mem_peak_total = total;
}

mpt_status mpt_backend_reserve_workspace(mpt_backend *be, size_t bytes) {
    if (bytes <= be->workspace_bytes) return MPT_OK;
    bytes = (bytes + 4095) & ~(size_t)4095;
    void *p = be->alloc(be, bytes);
    if (!p) return mpt_errorf(MPT_ERR_NOMEM, "%s backend: cannot allocate %zu bytes of workspace", be->name, bytes);
    if (be->workspace) {
        be->free(be, be->workspace);
        mpt_backend_account(be, MPT_MEM_WORKSPACE, -(int64_t)be->workspace_bytes);
    }
    be->workspace = p;
    be->workspace_bytes = bytes;
    mpt_backend_account(be, MPT_MEM_WORKSPACE, (int64_t)bytes);
    return MPT_OK;
}

void mpt_backend_free(mpt_backend **pbe) {
    mpt_backend *be = *pbe;
    if (!be) return;
    if (be->workspace) {
        be->free(be, be->workspace);
        mpt_backend_account(be, MPT_MEM_WORKSPACE, -(int64_t)be->workspace_bytes);
        be->workspace = NULL;
        be->workspace_bytes = 0;
    }
    be->destroy(be);
    *pbe = NULL;
}
