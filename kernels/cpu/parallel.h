/*
 * kernels/cpu/parallel.h - the CPU kernels' element-wise passes on several cores (internal to kernels/cpu).
 *
 * OpenMP (libgomp, the runtime Debian's oneDNN runs on, so the GEMMs and these passes share one pool of threads)
 * where the build has it (Meson: dependency 'openmp'); without it the pragmas vanish and every pass runs on one
 * thread. The thread count is the GEMMs' (mpt_cpu_set_threads, --threads).
 *
 * A pass is split only into pieces whose results do not depend on the split: every element is computed by the same
 * function of its own inputs (cast, ReLU, the optimizer's update, the batch gather, the GEMM's operand conversions
 * and epilogue rows), and the one reduction split here, found_inf, is an OR. Sums keep their fixed order on one
 * thread (bias gradients, the loss, the clipping norm). So every pass gives the same bits on any number of threads
 * (tests/test_cpu_kernels.c compares 1 and 2).
 *
 * A pass is split only when it is large enough to gain: below MPT_PAR_MIN elements (or rows x row length) the
 * fork/join of a parallel region, a few microseconds on an idle core and tens when the cores are busy, costs more
 * than the second core saves.
 */
#ifndef MPT_KERNELS_CPU_PARALLEL_H
#define MPT_KERNELS_CPU_PARALLEL_H

#ifdef _OPENMP
#define MPT_OMP(directive) _Pragma(#directive)
#else
#define MPT_OMP(directive)
#endif

/* Elements below which a pass runs on one thread: 2^16 elements (256 KiB of FP32) take ~10-30 us on one core. */
#define MPT_PAR_MIN 65536

#endif
