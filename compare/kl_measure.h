/* kl_measure.h - the promotion measurement by KL: what promoting each
 * candidate alone does to the model's output, as stock llama.cpp sees it.
 *
 * The base mix is the run's recipe with no promotion (P0k+0: the same
 * recipe, overrides, rotation and imatrix). For each promotion candidate c
 * (mix/plan.h) the base with c alone promoted to pn4t is compared with the
 * source over the calibration text (judge.h: the source's logits once, KL
 * position by position), and
 *   gain(c) = KL(base) - KL(base + c)
 * each KL the mean over the positions, summed in position order in double.
 * Its standard error is that of the mean of the per-position differences
 * KL_base[p] - KL_c[p] (sample deviation / sqrt(n)): both models are judged
 * on the same positions, so the pairing removes the text's own spread.
 *
 * Cost: the base and the all-promoted mix are quantized once (the second
 * reusing the first's tensors) and decoded once each, in the source's own
 * precision (bf16 for a bf16 source, else f32; decode_type says); each
 * candidate then costs one llama.cpp run: its tensor's bytes are copied from
 * the all-promoted decoding into the base decoding in place, llama.cpp runs,
 * and the base bytes are put back. PN quantization is per tensor, so the
 * tensor copied is byte for byte the one base + c would hold. Disk: two
 * decoded models and one tensor; memory: one copy buffer.
 *
 * Division: part I of N measures the candidates [floor((I-1) C / N),
 * floor(I C / N)) of the C in tensor order and writes a part file;
 * pn_kl_assemble joins N part files, all present and of one source, text,
 * judge and base. After each candidate the file at o->path is rewritten
 * (atomically) with what is done, so an interrupted measurement resumes
 * with the candidates it has: the base is judged again (its per-position
 * KLs are not kept) and every figure is the same as an uninterrupted run's.
 *
 * The file (text, UTF-8, '\n', fields separated by one tab):
 *   pn-measure-kl	1
 *   source	header-fnv1a64	<16 hex>      the source's header hash (io/source_id.h)
 *   quantizer	<text>                      pn.quantizer of the run
 *   base	<label>	plan-fnv1a64	<16 hex>  the base mix: FNV-1a 64 over every
 *                                        tensor's name (with its NUL), type and
 *                                        rotation block (u32 LE each), in order
 *   imatrix	none | imatrix	fnv1a64	<16 hex>    the imatrix file's bytes
 *   calibration	fnv1a64	<16 hex>	<bytes>   the text's bytes
 *   positions	<seq-len>	<max-seqs>	<positions judged>
 *   judge	<llama.cpp>	<node-llama-cpp>	<f32|bf16|f16>   the versions and the decoding
 *   kl-base	<mean>	<standard error>
 *   part	<I>	<N>	<first>	<count>	<total>   this file's share: candidates
 *                                        first .. first+count-1 of total
 *   <name>	<KL>	<gain>	<se>	<extra bytes>	<sample CRC-32>   one line per
 *                                        candidate measured, in tensor order
 *   end
 * Figures %.17g. A file with fewer candidate lines than its count is an
 * interrupted one. The sample CRC-32 is the source's sampled rows
 * (PN_SOURCE_SAMPLE_ROWS rule), checked when the file is used again.
 */
#ifndef PN_COMPARE_KL_MEASURE_H
#define PN_COMPARE_KL_MEASURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"
#include "compare/compare.h"
#include "mix/measurement.h"
#include "pipeline/quantize.h"

#define PN_KL_FORMAT_VERSION 1
#define PN_KL_TEXT_MAX 256

typedef struct pn_kl_params {
    uint64_t source_header_hash;
    char quantizer[PN_KL_TEXT_MAX];
    char base_label[96];
    uint64_t base_hash;
    bool weighted;
    uint64_t imatrix_hash;
    uint64_t text_hash, text_bytes;
    int seq_len, max_seqs;
    char llama_cpp[64], node_llama_cpp[64];
    int decode_type; /* PN_TYPE_F32, PN_TYPE_BF16 or PN_TYPE_F16 */
} pn_kl_params;

typedef struct pn_kl_entry {
    char *name;
    double kl;            /* mean KL of the base with this candidate promoted */
    double gain, se;      /* KL(base) - kl, and its standard error */
    uint64_t extra_bytes; /* data bytes promoting it adds */
    uint32_t sample_crc;  /* the source's sampled rows */
} pn_kl_entry;

typedef struct pn_kl_measurement {
    pn_kl_params params;
    size_t n_positions;
    double kl_base, kl_base_se;
    int part, n_parts;    /* 1 1: the whole measurement */
    size_t first, count;  /* the share: candidates first .. first+count-1 */
    size_t total;         /* candidates of the whole measurement */
    size_t n;             /* entries measured (n < count: interrupted) */
    pn_kl_entry *entries; /* n, in tensor order */
} pn_kl_measurement;

void pn_kl_measurement_free(pn_kl_measurement *m);
pn_status pn_kl_save(const pn_kl_measurement *m, const char *path, pn_error *err);
pn_status pn_kl_load(const char *path, pn_kl_measurement **out, pn_error *err);
/* The same of len bytes held in memory (the fuzz target's door); path names
 * them in messages. */
pn_status pn_kl_parse(const char *data, size_t len, const char *path, pn_kl_measurement **out,
                      pn_error *err);
/* PN_ERR_MISMATCH naming the first of the params that differs, both values. */
pn_status pn_kl_params_check(const pn_kl_params *got, const pn_kl_params *want, const char *path,
                             pn_error *err);
/* The name of part I of N of path: PATH.part-IIIII-of-NNNNN. */
char *pn_kl_part_path(const char *path, int part, int n_parts);
/* Joins parts PATH.part-*-of-NNNNN (n_parts of them) into one measurement:
 * each present, complete, of the same params and base KL, their shares
 * adjoining. An error names the part missing or the one that differs. */
pn_status pn_kl_assemble(const char *path, int n_parts, pn_kl_measurement **out, pn_error *err);

/* The measurement as promotion takes it (mix/measurement.h): each entry's
 * gain the KL gain. With per_byte the gain per extra byte orders them
 * (--target-size). */
pn_status pn_kl_as_measurement(const pn_kl_measurement *m, bool per_byte, pn_measurement **out,
                               pn_error *err);

/* What the progress callback sees while measuring. */
typedef struct pn_kl_progress {
    const char *step;        /* "judging the source", "quantizing", "decoding", "judging" */
    const char *name;        /* the candidate (bytes from the file: print safely), or NULL */
    size_t done, total;      /* candidates of this share measured */
    double elapsed_s, eta_s; /* eta_s < 0 while unknown */
} pn_kl_progress;

typedef struct pn_kl_opts {
    pn_quantize_opts q; /* the run's options (source, recipe, overrides, rotation, mtp,
                           imatrix, threads, backend); promotions, output and reuse
                           are set here */
    pn_compare_opts c;  /* the judge: node, script, envp, tmp_dir, threads, cancel; its
                           text_path, seq_len and max_seqs are the calibration; its
                           decode_type 0 means the source's own precision */
    const char *path;   /* the measurement file: used when it matches, resumed when
                           interrupted, written; NULL: none (nothing resumable) */
    int part, n_parts;  /* 0 0: the whole; else part I (1-based) of N */
    bool force;         /* replace a file at path of another source, text or base */
    void (*progress)(const pn_kl_progress *p, void *user);
    void (*note)(const char *msg, void *user);
    void *user;
} pn_kl_opts;

/* Obtains the measurement: the file at o->path when it is complete and
 * matches this run (or the parts of it, all present), else measures (what
 * is not done yet) and saves. A file at path of another source, text,
 * judge or base is refused (PN_ERR_EXISTS naming what differs) without
 * force. Errors name the file: the calibration text empty, not UTF-8, not a
 * regular file, over 64 MiB or shorter than one sequence; a damaged file. */
pn_status pn_kl_measure(const pn_kl_opts *o, pn_kl_measurement **out, pn_error *err);

#endif
