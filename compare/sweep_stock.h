/* sweep_stock.h - the stock types of pn-compare --sweep (sweep.h): the
 * names llama-quantize takes, and the child that makes one. */
#ifndef PN_COMPARE_SWEEP_STOCK_H
#define PN_COMPARE_SWEEP_STOCK_H

#include "compare/sweep.h"

/* The name as llama-quantize spells it (it takes q4_k_m too), or NULL;
 * *ftype (may be NULL) receives its general.file_type. */
const char *pn_sweep_stock_canonical(const char *name, unsigned *ftype);

/* Makes dst, stock type `type` of src, with o->quantizer (pn-llama-quantize)
 * on libllama `lib` in a child, its output into a memory file: a failure of
 * the child is m's status and message (PN_OK returned); a cancel kills the
 * child, removes dst and is PN_ERR_INTERRUPTED. */
pn_status pn_sweep_run_stock(const pn_sweep_opts *o, const char *lib, const char *src,
                             const char *dst, const char *type, pn_sweep_mix *m, pn_error *err);

#endif
