/*
 * tools/stats_json.h - the statistics of tools/stats.h as JSON (jansson), for the files that report them over seeds:
 * compare.json (compare_seeds.c) and speedrun.json (speedrun_report.c). Each function returns a new reference.
 * Key names are the files' documented schema (docs/outputs.md); NAN and infinities become null (JSON has neither).
 */
#ifndef MPT_TOOLS_STATS_JSON_H
#define MPT_TOOLS_STATS_JSON_H

#include <math.h>

#include <jansson.h>

#include "tools/stats.h"

/* v, or null when it is not finite. */
static inline json_t *mpt_stats_json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* {"mean", "sd", "min", "max"} of a summary over seeds. */
static inline json_t *mpt_stats_json_summary(const mpt_stats_summary *s) {
    json_t *j = json_object();
    json_object_set_new(j, "mean", mpt_stats_json_num(s->mean));
    json_object_set_new(j, "sd", mpt_stats_json_num(s->sd));
    json_object_set_new(j, "min", mpt_stats_json_num(s->min));
    json_object_set_new(j, "max", mpt_stats_json_num(s->max));
    return j;
}

/* {"mean", "sd", "ci_level", "ci_low", "ci_high", "t_quantile"} of a t interval of a mean (mean and sd: of the
 * values, or of the paired differences). */
static inline json_t *mpt_stats_json_interval(double mean, double sd, double level, double lo, double hi,
                                              double t_crit) {
    json_t *j = json_object();
    json_object_set_new(j, "mean", mpt_stats_json_num(mean));
    json_object_set_new(j, "sd", mpt_stats_json_num(sd));
    json_object_set_new(j, "ci_level", mpt_stats_json_num(level));
    json_object_set_new(j, "ci_low", mpt_stats_json_num(lo));
    json_object_set_new(j, "ci_high", mpt_stats_json_num(hi));
    json_object_set_new(j, "t_quantile", mpt_stats_json_num(t_crit));
    return j;
}

#endif
