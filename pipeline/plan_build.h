/* plan_build.h - pn-quantize's plan: the mix plan for one source file, with
 * its promotions chosen, the output's metadata and its exact file size.
 *
 * Ownership: a pn_job_plan owns its recipe, mix plan and per-tensor results;
 * free it with pn_job_plan_free. Tensors are in source order, so tensor i of
 * the plan is tensor i of the source.
 */
#ifndef PN_PIPELINE_PLAN_BUILD_H
#define PN_PIPELINE_PLAN_BUILD_H

#include <stdio.h>

#include "gguf/gguf.h"
#include "mix/plan.h"
#include "pipeline/quantize.h"

typedef struct pn_job_plan {
    pn_recipe *recipe;
    pn_plan *plan;
    size_t n;                 /* plan->n_tensors */
    pn_plan_tensor *t;        /* plan->tensors */
    char mix_label[96];       /* "P0k+19" */
    uint64_t header_bytes;    /* up to the data section */
    uint64_t file_bytes;      /* header + padded data */
    uint64_t weights;
    uint64_t alignment;       /* of the output */
    double *rel_error;        /* per tensor, filled by the run */
    double *seconds;          /* per tensor, filled by the run */
} pn_job_plan;

/* Recipe, types, rotation override, promotions (list, measurement, count or
 * target size) and sizes. Adds the measuring time to stats->t_measure. */
pn_status pn_job_plan_make(const pn_quantize_opts *o, gguf_reader *src, int threads,
                           pn_job_plan **out, pn_quantize_stats *stats, pn_error *err);
void pn_job_plan_free(pn_job_plan *p);

/* A writer holding the output's keys and tensor infos (docs/format.md#the-output-file). The
 * pn.tensor_crc32 array is zeros, to be patched after the data. */
pn_status pn_job_plan_writer(const pn_job_plan *p, const gguf_reader *src, gguf_writer **out,
                             pn_error *err);

/* The plan table (when table) and the totals. */
void pn_job_plan_print(const pn_job_plan *p, FILE *f, bool table);

#endif
