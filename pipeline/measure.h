/* measure.h - pn-quantize's promotion measurement: obtained from a saved
 * file or measured on the source, then turned into promotions.
 *
 * The measurement itself (sampling rule, sums, file format) is mix/measure.h;
 * this adds the reading of the sample rows from the mapped source, their
 * widening and rotation, the threads, and the saved file's reuse.
 */
#ifndef PN_PIPELINE_MEASURE_H
#define PN_PIPELINE_MEASURE_H

#include "gguf/gguf.h"
#include "mix/measure.h"
#include "mix/plan.h"
#include "pipeline/quantize.h"

/* Loads o->measurement_path when it exists (it must be of this source),
 * else measures every candidate of the plan, and saves to
 * o->measurement_path when one is given. The caller frees *out with
 * pn_measurement_free. */
pn_status pn_job_measure_obtain(const pn_quantize_opts *o, const gguf_reader *src,
                                const pn_plan *plan, int threads, pn_measurement **out,
                                pn_error *err);

#endif
