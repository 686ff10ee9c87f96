/* quantize_report.h - pn-quantize's account of a run, printed or written
 * from the job's result (pipeline/quantize.h): nothing here runs the job.
 * Names from files are printed terminal-safe (common/text.h); the report is
 * JSON written with pn_json_put_str. */
#ifndef PN_CMD_QUANTIZE_REPORT_H
#define PN_CMD_QUANTIZE_REPORT_H

#include <stdio.h>

#include "cmd/quantize_kl.h"
#include "pipeline/quantize.h"

/* The plan, a line per tensor: name, shape, types, bytes and a note
 * (promoted, rotated, the KL gain with --measure kl, from PREV, imatrix
 * entry). */
void quantize_print_plan_table(FILE *f, const pn_quantize_result *r, const kl_cli *kl);

/* The totals: tensors, weights, pn3t/pn4t and promotions, the file size and
 * bits per weight, what --reuse copied, the CPU used when no GPU was. */
void quantize_print_totals(FILE *f, const pn_quantize_result *r);

/* The files of the output, one line each: of a split output, or any on a
 * dry run or with --split-index (nothing for one file otherwise). */
void quantize_print_files(FILE *f, const pn_quantize_result *r);

/* --report FILE.json: the plan, per-tensor errors and times, the phases. */
void quantize_write_report_json(FILE *f, const pn_quantize_result *r);

#endif
