/* pn_fast.h - the exact fast PN row quantizers and how one is chosen.
 *
 * Contract: every path below writes the same bytes as pn_quantize_row_ref
 * (quant/pn.h) for every input, returns the same status and, on an error,
 * the same *bad_col. They differ only in speed:
 *   PN_PATH_REF          the scalar reference itself;
 *   PN_PATH_SCALAR_FAST  portable C (no SIMD flags), always available;
 *   PN_PATH_AVX2         AVX2 + F16C + FMA, chosen when the CPU has them;
 *   PN_PATH_AVX512       AVX-512 F/BW/DQ/VL, chosen when the CPU has them.
 * One path id picks the path of every row operation: the PN quantizers
 * here, the k-quant encoders (quant/kquants.h), the fused quantize-and-sum
 * entry point (quant/quant_row.h) and the rotation
 * (hadamard/hadamard_fast.h). Callers pass the id down; nothing in the
 * library reads the environment. pn_quantize_row (quant/pn.h) runs
 * pn_cpu_path_best(). The programs (cmd/, bench/) let the user force a path
 * with the environment variable named PN_CPU_PATH_ENV, read once and parsed
 * with pn_path_from_name; a name that is unknown, or a path the CPU lacks
 * (pn_path_available), is the program's error to report, naming the
 * variable.
 *
 * Why the fast paths are exact (the argument is in quant/pn_fast_internal.h):
 * they score candidates with w * (1/s) in place of w / s, which can change a
 * code only at an exact half-way point, where both codes give the same error
 * term; the portable path sums every candidate's error in element order in
 * double, exactly as the reference does; the AVX2 and AVX-512 paths score
 * every candidate in float and sum in double, that way, only the candidates
 * whose float score is within its proven error bound of the best (so every
 * candidate that could win or tie is summed exactly); and they compute the
 * winner's codes with the reference's division.
 *
 * Nothing here allocates, prints or keeps state; all functions are
 * thread-safe.
 */
#ifndef PN_QUANT_PN_FAST_H
#define PN_QUANT_PN_FAST_H

#include <stdbool.h>
#include <stdint.h>

#include "common/pn_error.h"

typedef enum pn_cpu_path {
    PN_PATH_REF = 0,
    PN_PATH_SCALAR_FAST = 1,
    PN_PATH_AVX2 = 2,
    PN_PATH_AVX512 = 3,
} pn_cpu_path;

#define PN_PATH_COUNT 4
/* The variable the programs read to force a path (never the library). */
#define PN_CPU_PATH_ENV "PN_CPU_PATH"

/* True when this build and CPU can run the path. */
bool pn_path_available(int path);

/* "ref", "scalar", "avx2", "avx512"; "unknown" for anything else. */
const char *pn_path_name(int path);

/* The path named (as pn_path_name spells it), or -1. */
int pn_path_from_name(const char *name);

/* The fastest path this build and CPU can run: PN_PATH_AVX512, else
 * PN_PATH_AVX2, else PN_PATH_SCALAR_FAST. Asks the CPU on every call (cheap:
 * a read of what the runtime detected at start-up); reads no environment. */
int pn_cpu_path_best(void);

/* pn_quantize_row on a chosen path. PN_ERR_USAGE when the path is unknown or
 * unavailable, or for the reasons pn_quantize_row_ref gives (a type that is
 * not PN among them). */
pn_status pn_quantize_row_path(int type, int path, const float *x, int64_t n, uint8_t *out,
                               int64_t *bad_col);

/* The same with the per-group sums of quant/quant_row.h (blk_err, blk_norm:
 * both NULL or both n/G doubles): every path takes the winner's error from
 * its own search (the reference's sum, bit for bit; a zero group's error is
 * its norm) and sums the norm in element order. pn_quantize_row_sums is the
 * entry point callers use. */
pn_status pn_quantize_row_path_sums(int type, int path, const float *x, int64_t n, uint8_t *out,
                                    int64_t *bad_col, double *blk_err, double *blk_norm);


#endif
