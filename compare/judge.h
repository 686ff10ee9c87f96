/* judge.h - stock llama.cpp as the judge of float models of one source.
 *
 * pn_judge_open runs llama.cpp once on the source (a GGUF, or a Hugging
 * Face folder converted first to the converter's bf16 GGUF) over the tokens
 * of compare.h (the fixed set, or a text cut by the source's tokenizer) and
 * keeps its logits in an unlinked file of a private folder made in
 * o->tmp_dir. pn_judge_eval then runs llama.cpp on one model of the same
 * vocabulary (a decoded PN mix, a stock quantization, a decoded base with
 * one tensor changed) over the same tokens and compares it position by
 * position with pn_compare_kl. The child protocol with
 * tools/llama/pn-llama-logits.mjs is described in compare.h.
 *
 * The private folder is the caller's too (pn_judge_dir): whatever it puts
 * there is removed with the folder by pn_judge_close, which every path
 * calls (success, error, cancel). Progress goes to o->progress as
 * compare.h describes it, counting n_models models of the tokens' positions
 * each (the source is model 0).
 *
 * Users: pn_compare_run (compare.h) and the KL measurement (kl_measure.h).
 */
#ifndef PN_COMPARE_JUDGE_H
#define PN_COMPARE_JUDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "compare/compare.h"
#include "gguf/gguf.h"

/* The most tokens a vocabulary may have (the harness's answers are input too). */
#define PN_JUDGE_MAX_VOCAB (1u << 26)

typedef struct pn_judge pn_judge;

/* What one model's run gives: KL over every position (mean, its standard
 * error: the sample standard deviation over the positions / sqrt(n), the
 * 99th percentile by nearest rank, the maximum and where it is) and the
 * top-1 agreement. */
typedef struct pn_judge_figures {
    double kl_mean, kl_se, kl_p99, kl_max;
    size_t kl_max_seq, kl_max_pos;
    double top1;
} pn_judge_figures;

/* Opens the judge of o->source_path (n_vocab tokens; open_source in
 * compare.c finds it) and runs the source. llama_cpp and node_llama_cpp (64
 * bytes each) receive the versions the harness names. Errors as
 * pn_compare_run's for the source. */
pn_status pn_judge_open(const pn_compare_opts *o, uint32_t n_vocab, size_t n_models, pn_judge **out,
                        char *llama_cpp, char *node_llama_cpp, pn_error *err);

/* The vocabulary size llama.cpp will see in the model r reads: the length
 * of tokenizer.ggml.tokens, else token_embd's rows; 0 when neither is
 * usable or it is over PN_JUDGE_MAX_VOCAB. */
uint32_t pn_judge_vocab_of(const gguf_reader *r);

/* The versions the harness names (`--version`), without judging anything:
 * what a saved measurement is checked against. */
pn_status pn_judge_versions(const pn_compare_opts *o, char *llama_cpp, char *node_llama_cpp,
                            pn_error *err);

/* The private folder (exists until pn_judge_close). */
const char *pn_judge_dir(const pn_judge *j);
/* The sequences and positions the source was evaluated on. */
size_t pn_judge_n_seqs(const pn_judge *j);
size_t pn_judge_n_positions(const pn_judge *j);

/* Runs llama.cpp on the float or stock GGUF at path as model number model
 * (for progress). shown names it in messages; decoded says path is a
 * decoding of shown ("llama.cpp on the decoding of X"). kl (may be NULL)
 * receives the KL of every position in token order (n_positions doubles).
 * With unlink_after the file is unlinked once llama.cpp holds it, so that
 * nothing is left even if this process is killed. */
pn_status pn_judge_eval(pn_judge *j, size_t model, const char *path, const char *shown,
                        bool decoded, bool unlink_after, pn_judge_figures *fig, double *kl,
                        pn_error *err);

/* The progress callback at the start of the caller's own step ("decoding",
 * "making") of model `model`, and a pn_dequant_opts progress function that
 * reports the step again (ctx: the judge). */
void pn_judge_step(pn_judge *j, const char *what, size_t model, const char *path);
void pn_judge_on_progress(void *ctx, uint64_t done, uint64_t total);

/* Kills nothing (every child is reaped by the call that started it),
 * removes the private folder and all it holds, frees j. NULL is a no-op. */
void pn_judge_close(pn_judge *j);

#endif
