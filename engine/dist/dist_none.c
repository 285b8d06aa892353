/*
 * engine/dist/dist_none.c - engine/dist in a build without MPI: mpt_dist_init says how to get it; nothing
 * else can be reached without a mpt_dist (see engine/dist/dist.h).
 */
#include "engine/dist/dist.h"

int mpt_dist_built(void) { return 0; }

const char *mpt_dist_library_version(void) { return NULL; }

mpt_status mpt_dist_init(mpt_dist **out, mpt_grad_comm comm) {
    (void)comm;
    *out = NULL;
    return mpt_errorf(MPT_ERR_ARG, "data-parallel training needs MPI, and this mptrain was built without it: "
                                   "apt-get install libopenmpi-dev openmpi-bin, then reconfigure "
                                   "(meson setup --reconfigure build -Dmpi=enabled) and rebuild");
}

void mpt_dist_free(mpt_dist **d) { *d = NULL; }
int mpt_dist_finish(mpt_dist **d, int exit_code) {
    *d = NULL;
    return exit_code;
}
int mpt_dist_rank(const mpt_dist *d) { (void)d; return 0; }
int mpt_dist_size(const mpt_dist *d) { (void)d; return 1; }
mpt_grad_comm mpt_dist_comm(const mpt_dist *d) { (void)d; return MPT_GRAD_COMM_FP32; }
void mpt_dist_set_batch(mpt_dist *d, int n_valid_local, int n_valid_global) {
    (void)d; (void)n_valid_local; (void)n_valid_global;
}
mpt_status mpt_dist_select_gpu(mpt_dist *d) {
    (void)d;
    return mpt_dist_init(&d, MPT_GRAD_COMM_FP32);
}
mpt_status mpt_dist_attach(mpt_dist *d, struct mpt_trainer *t) {
    (void)d; (void)t;
    return mpt_dist_init(&d, MPT_GRAD_COMM_FP32);
}
mpt_status mpt_dist_check_identical(mpt_dist *d, const struct mpt_trainer *t, const char *when) {
    (void)d; (void)t; (void)when;
    return MPT_OK;
}
void mpt_dist_allreduce_grads(mpt_dist *d, struct mpt_trainer *t, int measure) { (void)d; (void)t; (void)measure; }
void mpt_dist_broadcast_buffers(mpt_dist *d, struct mpt_trainer *t) { (void)d; (void)t; }
int64_t mpt_dist_comm_error(const mpt_dist *d, const double **rel_l2, double *all) {
    (void)d;
    *rel_l2 = NULL;
    *all = 0.0;
    return 0;
}
int mpt_dist_allreduce_f32(mpt_dist *d, float *x, int64_t n, float weight) {
    (void)d; (void)x; (void)n; (void)weight;
    return 0;
}
double mpt_dist_sum_f64(mpt_dist *d, double x) { (void)d; return x; }
void mpt_dist_set_timeout(mpt_dist *d, double seconds) { (void)d; (void)seconds; }
void mpt_dist_poll(mpt_dist *d) { (void)d; }
mpt_status mpt_dist_agree(mpt_dist *d, const mpt_dist_item *items, int n) {
    (void)d; (void)items; (void)n;
    return MPT_OK;
}
int mpt_dist_any(mpt_dist *d, int x) { (void)d; return x != 0; }
double mpt_dist_comm_seconds(const mpt_dist *d) { (void)d; return 0.0; }
int mpt_dist_local_size(const mpt_dist *d) { (void)d; return 1; }
mpt_status mpt_dist_send(mpt_dist *d, int dest, int tag, const void *buf, int64_t n, const char *what) {
    (void)d; (void)tag; (void)buf; (void)n; (void)what;
    return mpt_errorf(MPT_ERR_ARG, "cannot send to rank %d: this mptrain was built without MPI", dest);
}
mpt_status mpt_dist_recv(mpt_dist *d, int src, int tag, void **buf, int64_t *n, int *from, const char *what) {
    (void)d; (void)tag; (void)from; (void)what;
    *buf = NULL;
    *n = 0;
    return mpt_errorf(MPT_ERR_ARG, "cannot receive from rank %d: this mptrain was built without MPI", src);
}
mpt_status mpt_dist_bcast(mpt_dist *d, int root, void **buf, int64_t *n, const char *what) {
    (void)d; (void)root; (void)buf; (void)n; (void)what;
    return MPT_OK;
}
mpt_status mpt_dist_sum_int(mpt_dist *d, int *x, const char *what) {
    (void)d; (void)x; (void)what;
    return MPT_OK;
}
mpt_status mpt_dist_signal(mpt_dist *d, int tag) { (void)d; (void)tag; return MPT_OK; }
int mpt_dist_signalled(mpt_dist *d, int tag) { (void)d; (void)tag; return 0; }
mpt_status mpt_dist_signal_drain(mpt_dist *d, int tag, int expected) {
    (void)d; (void)tag; (void)expected;
    return MPT_OK;
}
