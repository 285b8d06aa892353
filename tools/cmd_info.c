/*
 * tools/cmd_info.c - `mptrain info`: what this build runs on.
 *
 * Each backend as built / loadable / usable, with the reason when not: the CPU backend is always all three;
 * the CUDA backend is a module loaded at run time (engine/cuda_backend.h mpt_cuda_module_status: whether
 * this build configured it, which file was loaded or why none could be), then whether a GPU is usable
 * (engine/backend.h mpt_cuda_available) with its details (mpt_cuda_device_info: compute capability, SMs,
 * memory, Tensor Core precisions). Library versions come from each library's own get-version call (so they
 * say what is loaded at run time, next to what the build compiled against): the CUDA libraries (CUDA runtime and
 * driver, cuBLASLt, cuDNN, cuRAND, NCCL) through the module (mpt_cuda_library_versions), each with the file it was
 * loaded from, in a section of their own; OpenBLAS's openblas_get_config / openblas_get_corename /
 * openblas_get_num_threads. None of them needs a GPU. Last, the state of NVIDIA_TF32_OVERRIDE, which turns
 * TF32 off in cuBLAS/cuDNN and, in mptrain, in the CPU emulation too (engine/amp/policy.h).
 */
#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "engine/cuda_backend.h"
#include "engine/dist/dist.h"
#include "mpt_config.h"
#include "tools/cli.h"

/* The reason mpt_cuda_available gave, without its "no usable GPU: " lead-in: after "usable: no:" that would
 * say it twice. */
static const char *usable_reason(const char *msg) {
    static const char lead[] = "no usable GPU: ";
    return strncmp(msg, lead, sizeof lead - 1) == 0 ? msg + sizeof lead - 1 : msg;
}

/* The CUDA backend's three lines: built, loadable, usable. Returns whether it is usable. */
static int print_cuda_backend(void) {
    mpt_cuda_module_state m;
    mpt_cuda_module_status(&m);
    printf("  cuda  built:    %s\n", m.built ? "yes (Meson -Dcuda)"
                                             : "no (configured with -Dcuda=disabled, or -Dcuda=auto found no CUDA "
                                               "toolkit; install it and cuDNN 9, then meson setup -Dcuda=enabled)");
    if (m.loadable)
        printf("        loadable: yes, %s\n", m.path);
    else if (m.built || m.path[0])
        printf("        loadable: no: %s%s%s\n", m.path, m.path[0] ? ": " : "", m.why);
    else
        printf("        loadable: no (not built)\n");
    char msg[1024], details[1024];
    int gpu = mpt_cuda_available(msg, sizeof msg);
    if (gpu && mpt_cuda_device_info(details, sizeof details))
        printf("        usable:   yes: %s\n", details);
    else if (gpu)
        printf("        usable:   yes: %s\n", msg);
    else if (m.loadable)
        printf("        usable:   no: %s\n", usable_reason(msg));
    else
        printf("        usable:   no (not loadable)\n");
    return gpu;
}

/* The CPU's own answer (CPUID leaf 7) for the instructions that decide native low-precision math: AVX512-BF16
 * (leaf 7 subleaf 1, EAX bit 5: VDPBF16PS), AMX-BF16 (subleaf 0, EDX bit 22) and AVX512-FP16 (subleaf 0, EDX bit 23);
 * Intel SDM vol. 2, CPUID. -1 when the CPU has no leaf 7. */
static int cpuid_bit(unsigned subleaf, int reg, int bit) {
    unsigned r[4];
    if (!__get_cpuid_count(7, subleaf, &r[0], &r[1], &r[2], &r[3])) return -1;
    return (int)((r[reg] >> bit) & 1u);
}

static const char *yes_no(int v) { return v > 0 ? "yes" : v == 0 ? "no" : "unknown"; }

/* The CPU backend's kernel sets (--cpu-kernels) and GEMM engine: what this machine and build can run. */
static void print_cpu_kernels(void) {
    char engine[256], why[256];
    mpt_cpu_engine_describe(engine, sizeof engine);
    printf("CPU kernels (--cpu-kernels):\n");
    printf("  CPU features        avx512_bf16 %s, amx_bf16 %s, avx512_fp16 %s (CPUID)\n", yes_no(cpuid_bit(1, 0, 5)),
           yes_no(cpuid_bit(0, 3, 22)), yes_no(cpuid_bit(0, 3, 23)));
    printf("  GEMM engine         %s\n", engine);
    /* how OpenMP threads wait between parallel regions (tools/main.c sets it when the environment does not) */
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    const char *chosen = getenv("MPT_OMP_WAIT_CHOSEN");
    char wait[160];
    if (policy) snprintf(wait, sizeof wait, "OMP_WAIT_POLICY=%s", policy);
    else if (spin) snprintf(wait, sizeof wait, "GOMP_SPINCOUNT=%s (spin that many rounds, then sleep)", spin);
    else snprintf(wait, sizeof wait, "libgomp's default");
    printf("  OpenMP waiting      %s (%s%s)\n", wait, chosen ? "chosen by mptrain: " : "from the environment",
           chosen ? chosen : "");
    printf("  emulate             available: Tensor Core numerics emulated exactly (the GPU's oracle)\n");
    if (mpt_cpu_native_available(why, sizeof why))
        printf("  native              available: bf16 GEMMs and convolutions on the CPU's BF16 units (fp32, tf32 and "
               "fp16 stay emulated: no native units for them here)\n");
    else
        printf("  native              unavailable: %s\n", why);
    printf("  default set         train: emulate; compare, speedrun: auto (a bf16 run times both sets at its start and "
           "keeps the faster, emulate where native is unavailable); eval: the set the checkpoint trained with\n");
}

int mpt_cmd_info(int argc, char **argv) {
    mpt_cli_opts o;
    mpt_cli_opts_default(&o);
    int rc = mpt_cli_parse(argc, argv, MPT_CMD_INFO, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;

    printf("mptrain %s\n", MPT_VERSION);
    printf("backends:\n");
    printf("  cpu   built: yes; loadable: yes (part of mptrain); usable: yes (Tensor Core numerics emulated)\n");
    int gpu = print_cuda_backend();
    printf("  --device auto will train on %s.\n", gpu ? "the GPU (cuda)" : "the CPU backend");
    char versions[8192];
    if (mpt_cuda_library_versions(versions, sizeof versions)) {
        printf("cuda libraries (loaded by the CUDA module: the version found at run time, then its file):\n");
        fputs(versions, stdout);
    }
    printf("libraries:\n");
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("  OpenBLAS            %s\n", openblas_get_config());
    printf("                      core %s, %d thread(s) (OPENBLAS_NUM_THREADS or --threads to change)\n",
           openblas_get_corename(), openblas_get_num_threads());
    const char *chosen = getenv("MPT_OPENBLAS_CORE_CHOSEN"); /* tools/main.c, openblas_core */
    if (coretype && chosen)
        printf("                      OPENBLAS_CORETYPE=%s (chosen by mptrain: %s)\n", coretype, chosen);
    else if (coretype)
        printf("                      OPENBLAS_CORETYPE=%s (from the environment)\n", coretype);
    else
        printf("                      core as detected by OpenBLAS%s\n",
               mpt_cpu_gemm_on_openblas() ? "" : " (oneDNN runs the GEMMs: mptrain leaves OpenBLAS's choice alone)");

    const char *mpi = mpt_dist_library_version();
    if (mpi)
        printf("  MPI                 %s (--data-parallel under mpirun)\n", mpi);
    else
        printf("  MPI                 not built: --data-parallel is unavailable (apt-get install libopenmpi-dev "
               "openmpi-bin, then meson setup --reconfigure build -Dmpi=enabled)\n");

    print_cpu_kernels();

    char opt_in[512];
    if (mpt_cuda_opt_in_on(opt_in, sizeof opt_in) > 0)
        printf("CUDA opt-in paths:    %s set to 1 (built without a GPU and not yet checked on one: docs/cuda.md)\n",
               opt_in);
    else
        printf("CUDA opt-in paths:    none set (docs/cuda.md lists them)\n");

    const char *ov = getenv("NVIDIA_TF32_OVERRIDE");
    if (!ov)
        printf("NVIDIA_TF32_OVERRIDE: unset (--precision tf32 uses TF32 for GEMMs and convolutions)\n");
    else if (strcmp(ov, "0") == 0)
        printf("NVIDIA_TF32_OVERRIDE=0: TF32 disabled everywhere (--precision tf32 runs in full FP32)\n");
    else
        printf("NVIDIA_TF32_OVERRIDE=%s: no effect (only 0 disables TF32)\n", ov);
    return 0;
}
