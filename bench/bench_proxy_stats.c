/* bench_proxy_stats - per promotion candidate, the weight statistics a cheap
 * promotion order could be made of (bench/proxy-study.sh, issue 41 item 4).
 *
 *   bench_proxy_stats SRC.gguf MEASUREMENT [IMATRIX]
 *
 * For every candidate of MEASUREMENT (pn-quantize --measurement), the rows
 * that measurement sampled (pn_sample_row) are read from SRC, widened,
 * rotated as its rotation says (pn_hadamard_block_size of its cap) and
 * measured with mix/measurement.h's own sums, three ways:
 *   plain   pn_measure_row: err3, err4, norm (sum w^2 of the rotated row);
 *           E3 = err3/norm must equal the file's E3 (checked: the rows and
 *           rotation are the ones pn-quantize measured);
 *   gain    pn_measure_row_weighted with v_j = g_j^2, g the RMS norm that
 *           scales the tensor's input (blk.N.attn_norm for attn_*,
 *           blk.N.post_attention_norm for ffn_*): the imatrix a weights-only
 *           reader can guess (an RMS-normed input has mean square 1 per
 *           column before the gain);
 *   imatrix with IMATRIX, the same sums with its per-column weights;
 * and the score of mix/promote_score.h from the file's E3, E4 (weighted with
 * an imatrix, as pn-quantize --imatrix measures them).
 * Prints one tab-separated line per candidate, with a header line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "hadamard/hadamard.h"
#include "mix/imatrix.h"
#include "mix/measurement.h"
#include "mix/promote_score.h"
#include "quant/types.h"
#include "quant/widen.h"

typedef struct sums {
    pn_measure_acc acc;
} sums;

/* The norm tensor whose gain multiplies this candidate's input, or NULL. */
static const char *input_norm(const char *name, char *buf, size_t cap, int *block)
{
    int blk = -1, n = 0;
    if (sscanf(name, "blk.%d.%n", &blk, &n) != 1 || n == 0)
        return NULL;
    *block = blk;
    const char *rest = name + n;
    if (strncmp(rest, "attn_", 5) == 0)
        snprintf(buf, cap, "blk.%d.attn_norm.weight", blk);
    else if (strncmp(rest, "ffn_", 4) == 0)
        snprintf(buf, cap, "blk.%d.post_attention_norm.weight", blk);
    else
        return NULL;
    return buf;
}

static int fail(const pn_error *err)
{
    fprintf(stderr, "bench_proxy_stats: %s\n", err->msg);
    return 1;
}

static pn_status read_f32(const gguf_reader *r, const char *name, int64_t K, float *out,
                          pn_error *err)
{
    long i = gguf_reader_find_tensor(r, name);
    if (i < 0)
        return pn_error_set(err, PN_ERR_FORMAT, "no tensor %s", name);
    const gguf_tensor_info *t = gguf_reader_tensor(r, (size_t)i);
    if (t->ne[0] != K || t->type != PN_TYPE_F32)
        return pn_error_set(err, PN_ERR_FORMAT, "%s: not an f32 vector of %lld", name,
                            (long long)K);
    return gguf_reader_read_tensor(r, (size_t)i, 0, out, (size_t)K * sizeof(float), err);
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: bench_proxy_stats SRC.gguf MEASUREMENT [IMATRIX]\n");
        return 2;
    }
    pn_error err = { 0 };
    gguf_reader *r = NULL;
    pn_measurement *m = NULL;
    pn_imatrix *im = NULL;
    if (gguf_reader_open(argv[1], &r, &err) != PN_OK)
        return fail(&err);
    if (pn_measurement_load(argv[2], &m, NULL, &err) != PN_OK)
        return fail(&err);
    if (argc == 4 && pn_imatrix_load(argv[3], &im, &err) != PN_OK)
        return fail(&err);
    printf("name\tkind\tblock\tK\trows\tweights\tsampled\tscore\te3\te4\tnorm\te3g\te4g\tnormg%s\n",
           im ? "\te3i\te4i\tnormi" : "");
    for (size_t c = 0; c < m->n; c++) {
        const char *name = m->entries[c].name;
        long ti = gguf_reader_find_tensor(r, name);
        if (ti < 0) {
            fprintf(stderr, "bench_proxy_stats: %s: no tensor %s\n", argv[1], name);
            return 1;
        }
        const gguf_tensor_info *t = gguf_reader_tensor(r, (size_t)ti);
        const int64_t K = t->ne[0];
        int64_t R = 1;
        for (uint32_t d = 1; d < t->n_dims; d++)
            R *= t->ne[d];
        const int B =
            m->params.rotation_cap ? pn_hadamard_block_size(K, m->params.rotation_cap) : 1;
        const size_t row_bytes = (size_t)pn_type_row_bytes(t->type, K);
        uint8_t *raw = malloc(row_bytes);
        float *orig = malloc((size_t)K * sizeof(float)), *rot = malloc((size_t)K * sizeof(float));
        float *vg = malloc((size_t)K * sizeof(float));
        void *scratch = malloc(pn_measure_weighted_scratch_bytes(K) + pn_measure_scratch_bytes(K));
        if (!raw || !orig || !rot || !vg || !scratch) {
            fprintf(stderr, "bench_proxy_stats: out of memory\n");
            return 1;
        }
        char nbuf[256];
        int block = -1;
        const char *nn = input_norm(name, nbuf, sizeof nbuf, &block);
        if (nn) {
            if (read_f32(r, nn, K, vg, &err) != PN_OK)
                return fail(&err);
            for (int64_t j = 0; j < K; j++)
                vg[j] = vg[j] * vg[j];
        } else {
            for (int64_t j = 0; j < K; j++)
                vg[j] = 1.0f;
        }
        const float *vi = im ? pn_imatrix_weights_for(im, name) : NULL;
        if (im && !vi) {
            fprintf(stderr, "bench_proxy_stats: %s: no imatrix entry for %s\n", argv[3], name);
            return 1;
        }
        pn_measure_acc plain = { 0 }, gain = { 0 }, imx = { 0 };
        const int64_t ns = pn_sample_count(R, m->params.sample_max_rows);
        for (int64_t s = 0; s < ns; s++) {
            const int64_t row = pn_sample_row(R, m->params.sample_max_rows, s);
            double e3, e4, nrm;
            if (gguf_reader_read_tensor(r, (size_t)ti, (uint64_t)row * row_bytes, raw, row_bytes,
                                        &err) != PN_OK)
                return fail(&err);
            if (pn_widen_row(t->type, raw, orig, K) != PN_OK) {
                fprintf(stderr, "bench_proxy_stats: %s: %s is not f32, f16 or bf16\n", argv[1],
                        name);
                return 1;
            }
            memcpy(rot, orig, (size_t)K * sizeof(float));
            if (B > 1)
                pn_hadamard_rotate_row(rot, K, B);
            if (pn_measure_row(rot, K, scratch, &e3, &e4, &nrm, &err) != PN_OK)
                return fail(&err);
            pn_measure_acc_add(&plain, e3, e4, nrm);
            if (pn_measure_row_weighted(orig, rot, K, B, vg, scratch, &e3, &e4, &nrm, &err) !=
                PN_OK)
                return fail(&err);
            pn_measure_acc_add(&gain, e3, e4, nrm);
            if (vi) {
                if (pn_measure_row_weighted(orig, rot, K, B, vi, scratch, &e3, &e4, &nrm, &err) !=
                    PN_OK)
                    return fail(&err);
                pn_measure_acc_add(&imx, e3, e4, nrm);
            }
        }
        double E3, E4;
        pn_measure_acc_result(&plain, &E3, &E4);
        /* an imatrix measurement's file holds the weighted figures */
        double F3 = E3, F4 = E4;
        if (vi)
            pn_measure_acc_result(&imx, &F3, &F4);
        if (F3 != m->entries[c].e3 || F4 != m->entries[c].e4) {
            fprintf(stderr,
                    "bench_proxy_stats: %s: E3/E4 %.17g %.17g differ from the measurement's "
                    "%.17g %.17g: not the rows or rotation pn-quantize measured\n",
                    name, F3, F4, m->entries[c].e3, m->entries[c].e4);
            return 1;
        }
        char kind[64] = "";
        const char *dot = strchr(name + (block >= 0 ? 4 : 0), '.');
        snprintf(kind, sizeof kind, "%s", dot ? dot + 1 : name);
        char *w = strstr(kind, ".weight");
        if (w)
            *w = 0;
        const pn_promote_cand pc = { .name = name, .e3 = F3, .e4 = F4 };
        printf(
            "%s\t%s\t%d\t%lld\t%lld\t%lld\t%lld\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g\t%.17g",
            name, kind, block, (long long)K, (long long)R, (long long)(K * R), (long long)ns,
            pn_promote_score(&pc), plain.err3, plain.err4, plain.norm, gain.err3, gain.err4,
            gain.norm);
        if (im)
            printf("\t%.17g\t%.17g\t%.17g", imx.err3, imx.err4, imx.norm);
        printf("\n");
        free(raw);
        free(orig);
        free(rot);
        free(vg);
        free(scratch);
    }
    pn_imatrix_free(im);
    pn_measurement_free(m);
    gguf_reader_close(r);
    return 0;
}
