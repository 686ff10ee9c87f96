/* plan_build.h - pn-quantize's plan: the mix plan for one source file, with
 * its promotions chosen, the output's metadata and its exact file size.
 *
 * Work is linear in the header (keys and tensors) whatever the options: a
 * promote list is matched through a sorted index, --target-size sizes the
 * file O(log n) times (a binary search over n), and every long loop honours
 * the cancel flag.
 *
 * Ownership: a pn_job_plan owns its recipe, mix plan and per-tensor results;
 * free it with pn_job_plan_free. Tensors are in source order, so tensor i of
 * the plan is tensor i of the source.
 */
#ifndef PN_PIPELINE_PLAN_BUILD_H
#define PN_PIPELINE_PLAN_BUILD_H

#include <stdio.h>

#include "gguf/gguf.h"
#include "mix/imatrix.h"
#include "mix/plan.h"
#include "pipeline/quantize.h"
#include "io/source_id.h"
#include "pipeline/tensor_job.h"

typedef struct pn_job_plan {
    pn_recipe *recipe;
    pn_plan *plan;
    char mix_label[96];    /* "P0k+19" */
    uint64_t header_bytes; /* up to the data section */
    uint64_t file_bytes;   /* header + padded data */
    uint64_t weights;
    uint64_t alignment;          /* of the output */
    double *rel_error;           /* per tensor, filled by the run */
    double *seconds;             /* per tensor, filled by the run */
    uint64_t source_header_hash; /* pn.source.header_fnv1a64 */
    const char *quantizer;       /* pn.quantizer (pn_job_quantizer_name) */
    /* --imatrix: the file read and checked against the plan (NULL without),
     * its path as given, the hash of the entries naming a tensor of the
     * model and their number (pn_imatrix_hash_used) */
    pn_imatrix *imatrix;
    const char *imatrix_path;
    uint64_t imatrix_hash;
    size_t imatrix_used;
    bool imatrix_promotion;              /* --imatrix-promotion weighted: the measurement used it */
    const pn_recipe_override *overrides; /* the run's, recorded in pn.mix.overrides */
    size_t n_overrides;
} pn_job_plan;

/* pn.quantizer of a run: the tests' quantizer_name when set, else
 * "pn-quantize <version>". */
const char *pn_job_quantizer_name(const pn_quantize_opts *o);

/* Whether the run drops the source's MTP layer (pn_quantize_opts.no_mtp,
 * keep_mtp, else the recipe's mtp statement). Reads the recipe, so that a
 * recipe that cannot be used is refused before the source is opened. */
pn_status pn_job_drop_mtp(const pn_quantize_opts *o, bool *drop, pn_error *err);

/* Recipe, types, rotation override, promotions (list, measurement, count or
 * target size) and sizes. sid is the source's identity so far (its header
 * hash at least; a saved measurement is checked against it). Adds the
 * measuring time to stats->t_measure. */
pn_status pn_job_plan_make(const pn_quantize_opts *o, gguf_reader *src, const pn_job_env *env,
                           const pn_source_id *sid, pn_job_plan **out, pn_quantize_stats *stats,
                           pn_error *err);
void pn_job_plan_free(pn_job_plan *p);

/* A writer holding the output's keys and tensor infos (docs/format.md#the-output-file,
 * docs/reuse.md#the-keys). The pn.tensor_crc32, pn.source.sample_crc32 and
 * pn.source.tensor_crc32 arrays are zeros, to be patched after the data. */
pn_status pn_job_plan_writer(const pn_job_plan *p, const gguf_reader *src,
                             volatile sig_atomic_t *cancel, gguf_writer **out, pn_error *err);

#endif
