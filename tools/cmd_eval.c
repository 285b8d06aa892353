/*
 * tools/cmd_eval.c - `mptrain eval --checkpoint CKPT`: rebuilds the model and precision recorded in the
 * checkpoint's metadata (a built-in model or a spec, for the data shape it records), loads its FP32 master weights (the
 * working copy in the run's precision is rewritten from them, exactly as during training) and batch norm's running
 * statistics, and prints the test loss and accuracy. The evaluation runs in the checkpoint's precision, in evaluation
 * mode (dropout off, batch norm from its running statistics): the same numerics the run was evaluated with after
 * each epoch. With --quantize, post-training quantization instead (tools/ptq.c).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/layers/layers.h"
#include "models/models.h"
#include "tools/ptq.h"
#include "tools/run.h"

int mpt_cmd_eval(int argc, char **argv) {
    mpt_cli_opts cli;
    mpt_cli_opts_default(&cli);
    int rc = mpt_cli_parse(argc, argv, MPT_CMD_EVAL, &cli);
    if (rc != 0) return rc < 0 ? 0 : rc;
    if (!cli.checkpoint[0]) {
        fprintf(stderr, "mptrain eval: --checkpoint CKPT is required (see mptrain eval --help)\n");
        return MPT_CLI_EXIT_USAGE;
    }
    if (cli.quantize >= 0) return mpt_ptq_command(&cli); /* post-training quantization: tools/ptq.c */
    mpt_cli_opts o;
    mpt_cli_opts_default(&o);
    mpt_run_state rs;
    mpt_status s = mpt_run_checkpoint_read_config(cli.checkpoint, &o, &rs);
    if (s != MPT_OK) return mpt_cli_fail("eval", s);
    if (mpt_cli_given(&cli, MPT_OPT_BATCH_SIZE)) o.batch = cli.batch;
    mpt_cpu_set_threads(cli.threads);
    s = mpt_guard_blas_ready();
    if (s != MPT_OK) return mpt_cli_fail("eval", s);

    mpt_cli_data cd; /* the labels with the network's class count; one training row (nothing reads them) */
    s = mpt_run_checkpoint_data_load(&cd, cli.checkpoint, &rs, cli.data, 1, cli.limit_test, cli.data_layout);
    if (s != MPT_OK) return mpt_cli_fail("eval", s);
    mpt_backend *be = NULL;
    char why[640];
    s = mpt_run_backend_create(cli.device, &be, why, sizeof why);
    if (s != MPT_OK) {
        mpt_cli_data_free(&cd);
        return mpt_cli_fail("eval", s);
    }
    printf("device: %s\n", why);
    if (be->device == MPT_DEVICE_CPU) { /* the kernel set: --cpu-kernels, else the one the checkpoint trained with */
        const int given = mpt_cli_given(&cli, MPT_OPT_CPU_KERNELS) && !cli.cpu_kernels_auto; /* auto: as trained */
        const mpt_cpu_kernels k = given ? cli.cpu_kernels : o.cpu_kernels;
        s = mpt_backend_cpu_set_kernels(be, k);
        if (s != MPT_OK && !given) {
            printf("note: the checkpoint trained with --cpu-kernels %s, unavailable here (%s): evaluating with "
                   "emulate\n", mpt_cpu_kernels_name(k), mpt_last_error());
            s = MPT_OK;
        }
        if (s != MPT_OK) {
            mpt_backend_free(&be);
            mpt_cli_data_free(&cd);
            return mpt_cli_fail("eval", s);
        }
        printf("CPU kernels: %s\n", mpt_cpu_kernels_name(mpt_backend_cpu_kernels(be)));
        /* the summation model the checkpoint trained with (--accum-model), so that the CPU evaluates as it trained */
        if (o.accum_model != MPT_ACCUM_MODEL_IEEE) s = mpt_backend_cpu_set_accum(be, o.accum_model);
        if (s == MPT_OK && o.accum_model != MPT_ACCUM_MODEL_IEEE)
            printf("summation: as %s Tensor Cores (--accum-model %s, the checkpoint's)\n",
                   mpt_accum_model_gpus(o.accum_model), mpt_accum_model_name(o.accum_model));
        if (s != MPT_OK) {
            mpt_backend_free(&be);
            mpt_cli_data_free(&cd);
            return mpt_cli_fail("eval", s);
        }
    } else if (o.accum_model != MPT_ACCUM_MODEL_IEEE) {
        printf("note: the checkpoint trained on the CPU with --accum-model %s; here the GPU's Tensor Cores sum for "
               "themselves\n", mpt_accum_model_name(o.accum_model));
    }
    if (rs.batch == 0)
        printf("checkpoint %s: model %s, precision %s, step %lld, after %lld epoch(s)\n", cli.checkpoint, o.model,
               mpt_precision_name(o.precision), (long long)rs.iteration, (long long)rs.epoch);
    else
        printf("checkpoint %s: model %s, precision %s, step %lld, in epoch %lld after %lld batches\n", cli.checkpoint,
               o.model, mpt_precision_name(o.precision), (long long)rs.iteration, (long long)rs.epoch + 1,
               (long long)rs.batch);

    mpt_cli_device_data dd;
    mpt_trainer *t = NULL;
    int32_t *idx = NULL;
    size_t idx_bytes = 0;
    s = mpt_cli_data_upload(&dd, be, &cd.d);
    /* the recorded TF32 switches too (--tf32-matmul, --tf32-conv): the numerics the run evaluated with */
    mpt_policy policy = mpt_policy_make_switches(o.precision, o.tf32_matmul, o.tf32_conv);
    policy.fp8 = o.fp8;
    /* --norm-stats: layer norm computes its statistics in evaluation too (batch norm reads its running ones), so the
     * CPU evaluates with the checkpoint's; the GPU runs FP32 statistics only */
    if (be->device == MPT_DEVICE_CPU) policy.norm_stats = o.norm_stats;
    else if (o.norm_stats != MPT_NORM_STATS_FP32)
        printf("note: the checkpoint trained with --norm-stats %s, which the %s backend does not run: its layer norms "
               "(if any) evaluate with FP32 statistics\n", mpt_norm_stats_name(o.norm_stats), be->name);
    if (s == MPT_OK && mpt_policy_is_fp8(&policy)) s = mpt_run_fp8_device_check(be, o.precision, &policy.fp8, "");
    if (s == MPT_OK) {
        if (policy.tf32_override && (o.tf32_matmul || o.tf32_conv))
            printf("NVIDIA_TF32_OVERRIDE=0 is set: TF32 is disabled, evaluating in full FP32\n");
        mpt_graph *g = mpt_graph_create(be, &policy, o.batch);
        mpt_tensor *logits = NULL;
        s = mpt_model_build_for(g, o.model, &rs.data, &logits);
        if (s == MPT_OK) {
            mpt_softmax_xent(g, logits, "loss");
            /* eval does not train: the recorded schedule (whose cosine horizon needs the training data's batches
             * per epoch) is not built, nor checked */
            o.lr_schedule = MPT_LR_CONSTANT;
            mpt_train_config cfg = mpt_cli_train_config(&o, 1);
            s = mpt_trainer_create(&t, g, &cfg);
        } else {
            mpt_graph_free(&g);
        }
    }
    if (s == MPT_OK) s = mpt_run_checkpoint_load(cli.checkpoint, t);
    if (s == MPT_OK) {
        int64_t n = cd.d.n_test;
        int64_t cnt = (n + o.batch - 1) / o.batch * o.batch;
        idx_bytes = (size_t)cnt * sizeof(int32_t);
        idx = be->alloc(be, idx_bytes);
        int32_t *h = malloc(idx_bytes);
        if (!idx || !h) {
            s = mpt_errorf(MPT_ERR_NOMEM, "cannot allocate %zu bytes of test indices", idx_bytes);
        } else {
            mpt_backend_account(be, MPT_MEM_DATA, (int64_t)idx_bytes);
            for (int64_t i = 0; i < cnt; i++) h[i] = i < n ? (int32_t)i : -1;
            be->from_host(be, idx, h, idx_bytes);
            be->synchronize(be);
            double loss, acc;
            mpt_run_evaluate(t, dd.test_images, dd.test_labels, idx, n, cd.d.dim, rs.mean, rs.inv_std, &loss, &acc);
            printf("test loss %.4f  test accuracy %.2f%% (%lld images, %s)\n", mpt_cli_nan_plain(loss), 100.0 * acc,
                   (long long)n, cd.dir);
        }
        free(h);
    }
    if (idx) {
        be->free(be, idx);
        mpt_backend_account(be, MPT_MEM_DATA, -(int64_t)idx_bytes);
    }
    mpt_trainer_free(&t);
    mpt_cli_data_release(&dd);
    mpt_backend_free(&be);
    mpt_cli_data_free(&cd);
    if (s != MPT_OK) return mpt_cli_fail("eval", s);
    return 0;
}
