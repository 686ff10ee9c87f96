/* promote_score.h - the cheap promotion order: a score from what the error
 * measurement and the tensor's name give, that ranks the candidates like
 * their measured KL gains (issue 41 item 4; docs/usage.md, "Choosing
 * promotions without a KL measurement", has the study).
 *
 * What the study found (bench/proxy-study.sh, generated models of both
 * profiles): a candidate's KL gain falls steeply with how late in the
 * forward pass the tensor acts, block by block and, inside a block, from the
 * attention's input projections to the FFN's; the measured weight error
 * (E3 - E4, relative or made absolute with sum w^2, per byte or not,
 * weighted or not) ranks like noise. So the score is the forward position
 * first, and the measured relative gain only orders tensors at the same
 * position (layers of one role in a block: never two in Qwen3.8, but the
 * rule must say something):
 *
 *   position = PN_SCORE_STAGES * block + stage(role)
 *   score    = log(E3 - E4) - position * log(2)
 *
 * that is log((E3 - E4) * 2^-position): each step later in the forward
 * pass halves the score. E3 - E4 is a relative error gain, below 1 and
 * within a factor of 2 of every other candidate's in practice (with or
 * without an imatrix), so it never moves a candidate past another position;
 * an imatrix can reorder ties only, and cannot make the order worse than
 * without it by more than that. The log keeps 64 and more blocks finite
 * (2^-position would underflow past block 127).
 *
 * block: N of a name "blk.N.<role>..." (N decimal, at most 9 digits); a name
 * without one (token_embd, output, ...) counts as block 0.
 * stage(role), the role being the name's part after "blk.N.":
 *   0  attn_qkv, attn_q, attn_k, attn_v      attention input projections
 *   1  attn_gate                              the output gate (same input)
 *   2  attn_output, ssm_out                   attention's output projection
 *   3  ffn_gate, ffn_gate_exps, ffn_gate_shexp
 *   4  ffn_up, ffn_up_exps, ffn_up_shexp
 *   5  ffn_down, ffn_down_exps, ffn_down_shexp
 *   6  anything else (nextn.*, ssm_*, ...), and names without a block
 * A candidate whose E3 - E4 is not positive (pn4t no better, or no
 * measurement: both 0) scores -INFINITY: promoted last, in tensor order.
 *
 * The score is an order only (larger first; equal scores keep tensor order,
 * as mix/promote.h does): it does not add up over tensors and is no gain in
 * KL. It is a pure function: no state, no allocation, nothing printed.
 */
#ifndef PN_MIX_PROMOTE_SCORE_H
#define PN_MIX_PROMOTE_SCORE_H

#include <stdint.h>

#define PN_SCORE_STAGES 8 /* positions per block (stages 0..6 used) */

/* What the score is made of: the measurement's figures of one candidate. */
typedef struct pn_promote_cand {
    const char *name; /* the tensor's GGUF name */
    double e3, e4;    /* relative pn3t and pn4t errors (mix/measurement.h) */
} pn_promote_cand;

/* The block N of "blk.N.", or -1 for a name without one. */
int64_t pn_promote_block(const char *name);

/* The stage of the name's role inside its block (the table above). */
int pn_promote_stage(const char *name);

/* position = PN_SCORE_STAGES * max(block, 0) + stage. */
double pn_promote_position(const char *name);

/* The score above; larger is promoted first. */
double pn_promote_score(const pn_promote_cand *c);

#endif
