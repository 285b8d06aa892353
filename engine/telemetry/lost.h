/*
 * engine/telemetry/lost.h - the lost-update meter (host-side counters).
 *
 * An optimizer step computes, per element, an update delta in FP32 and adds it to the stored weight. When
 * |delta| is below half an ulp of the weight in its storage format, round-to-nearest gives back the old
 * weight: the update is lost ("stale weights"; Micikevicius et al. 2018, section 3.1, the reason for FP32
 * master weights; Zamirai et al. 2020 for BF16).
 *
 *   lost element   delta != 0 and w_new == w_old (compared as numbers, in the storage format)
 *   lost fraction  lost elements / elements with delta != 0
 *   lost mass      sum |delta| over lost elements / sum |delta| over all elements
 *   applied mass   sum (w_new - w_old) sign(delta) / sum |delta|: the share of the intended movement that the
 *                  stored weights made (about 1 - lost mass under round-to-nearest; under stochastic rounding
 *                  about 1 in expectation, although most single updates round back: those that move, move by a
 *                  whole ulp)
 *
 * mpt_lost_count measures it on the storage the update went to (old and new buffers as stored);
 * mpt_lost_counterfactual asks what would have been lost had the same deltas been added to a 16-bit copy
 * (the working copy of an fp16/bf16 run with masters): w_new = round(w_old + delta) with RNE.
 */
#ifndef MPT_ENGINE_TELEMETRY_LOST_H
#define MPT_ENGINE_TELEMETRY_LOST_H

#include <stdint.h>

#include "engine/dtype.h"
#include "engine/telemetry/elem.h"

typedef struct mpt_lost {
    int64_t n;          /* elements counted */
    int64_t nonzero;    /* elements with delta != 0 */
    int64_t lost;       /* of those, the ones that left the stored weight unchanged */
    double mass;        /* sum |delta| */
    double mass_lost;   /* sum |delta| of the lost ones */
    double mass_applied; /* sum (w_new - w_old) sign(delta) */
} mpt_lost;

/* Adds n elements: w_old, w_new host buffers of dtype (F32, F16 or BF16), delta host FP32. Zero *r first. */
void mpt_lost_count(mpt_lost *r, const void *w_old, const void *w_new, mpt_dtype dtype, const float *delta,
                    int64_t n);
/* Adds n elements of the counterfactual: w_old host buffer in `target` (F16 or BF16), delta FP32. */
void mpt_lost_counterfactual(mpt_lost *r, const void *w_old, mpt_dtype target, const float *delta, int64_t n);
/* lost / nonzero and mass_lost / mass (0 when the denominator is 0). */
double mpt_lost_frac(const mpt_lost *r);
double mpt_lost_mass_share(const mpt_lost *r);
/* mass_applied / mass (0 when mass is 0). */
double mpt_lost_applied_share(const mpt_lost *r);

#endif
