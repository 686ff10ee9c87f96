/* measure_job.h - pn-quantize's promotion measurement: obtained from a saved
 * file or measured on the source, then turned into promotions.
 *
 * The measurement itself (sampling rule, sums, file format) is mix/measurement.h;
 * this adds the reading of the sampled rows from the source, their widening
 * and rotation, the threads, and the saved file's reuse. The rows are read
 * as a stream (pipeline/stream.h): a reader thread reads them in file order,
 * with read-ahead advice for the next candidate's rows, while the compute
 * team measures the rows read before. A row longer than the chunk size is
 * measured in pieces, its sums carried from piece to piece, so the figures
 * are those of pn_measure_row bit for bit and memory stays a few chunks.
 */
#ifndef PN_PIPELINE_MEASURE_H
#define PN_PIPELINE_MEASURE_H

#include "gguf/gguf.h"
#include "mix/imatrix.h"
#include "mix/measurement.h"
#include "mix/plan.h"
#include "pipeline/quantize.h"
#include "io/source_id.h"
#include "pipeline/tensor_job.h"

/* Seconds of the measurement's stages: reading and widening (reader
 * thread), computing (the team), the team waiting for rows. */
typedef struct pn_measure_times {
    double read, compute, wait_input;
} pn_measure_times;

/* Loads o->measurement_path when it exists and is the measurement this run
 * would make (pn_measurement_check_params, then the CRC-32 of the rows it
 * measured: sid's sampled rows when they are known and the rule is the
 * same, else read now); otherwise, or when there is no file, measures
 * every candidate of the plan, recording the CRC-32 of the rows it reads,
 * and saves to o->measurement_path when one is given. A stale file (of
 * another source, rotation, row count, quantizer or candidate set, or of
 * format 1) is not used: a note names what differs, and the new
 * measurement replaces it. Any other unreadable file is an error. The
 * caller frees *out with pn_measurement_free. times (may be NULL) is
 * filled when measured. */
/* With im (not NULL) every candidate that has an entry is measured
 * weighted by it (mix/measurement.h), the others unweighted (the caller
 * has checked that o->imatrix_missing_unweighted allows them); im_hash is
 * pn_imatrix_hash_used, recorded in the file and checked on reuse. */
pn_status pn_job_measure_obtain(const pn_quantize_opts *o, const gguf_reader *src,
                                const pn_plan *plan, const pn_job_env *env, const pn_source_id *sid,
                                const char *quantizer, const pn_imatrix *im, uint64_t im_hash,
                                pn_measurement **out, pn_measure_times *times, pn_error *err);

#endif
