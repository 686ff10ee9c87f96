/* check_source.c - pn-check: the pn.source.* keys (io/source_id.h,
 * docs/reuse.md#the-keys), and with --source whether that source is the one
 * the file was made from.
 *
 * The keys are optional (files made before them, or by another tool, lack
 * them); present, they must all be there and well-formed (PN-META-VALUE
 * otherwise). With --source, before any data is compared: the source's
 * header hash against the recorded one (SRC-HEADER, a warning: keys or
 * tensor infos changed, the weights may not have), then each tensor's
 * source type and the CRC-32 of its sampled rows (SRC-IDENTITY, an error
 * naming the first tensor that differs and counting them: the weights are
 * not the ones the file was made from, so its errors against this source
 * mean little). The sampled rows are 256 per tensor, read in file order.
 *
 * The source is read as pn-quantize read it, which the file's tensors say:
 * without its MTP layer (as --no-mtp reads it, io/source_open.h) when the
 * file holds none, with it when the file holds it, whatever the recipe and
 * --keep-mtp (which concern the recipe's conformance only).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/threads.h"
#include "check/check_internal.h"
#include "gguf/pn_keys.h"
#include "io/source_id.h"
#include "mix/recipe.h"
#include "quant/types.h"

pn_status pn_check_source_drops_mtp(const pn_check_ctx *c, bool *drop, pn_error *err)
{
    (void)err;
    /* the file says how its source was read: with the MTP layer when it
     * holds that layer (pn-quantize --keep-mtp, or a recipe that keeps it),
     * without when it holds none (the recipe's 'mtp drop', --no-mtp) */
    *drop = pn_check_mtp_layer(c->rep) < 0;
    return PN_OK;
}

/* Reads the keys into *rec; false when absent or unusable (reported). */
static bool recorded(pn_check_ctx *c, pn_recorded_source *rec)
{
    pn_error e;
    pn_error_clear(&e);
    if (pn_recorded_source_read(c->r, rec, &e) != PN_OK) {
        pn_check_add(c, PN_SEV_ERROR, "PN-META-VALUE", NULL, PN_KEY_SOURCE_PREFIX "*", -1, "%s",
                     e.msg);
        return false;
    }
    return rec->present;
}

void pn_check_source_keys(pn_check_ctx *c)
{
    pn_recorded_source rec;
    recorded(c, &rec);
    pn_recorded_source_free(&rec);
}

pn_status pn_check_source_identity(pn_check_ctx *c, pn_error *err)
{
    pn_recorded_source rec;
    pn_error e;
    pn_error_clear(&e);
    if (!c->src)
        return PN_OK;
    if (pn_recorded_source_read(c->r, &rec, &e) != PN_OK || !rec.present) {
        pn_recorded_source_free(&rec);
        return PN_OK;
    }
    const char *src_name = gguf_reader_name(c->src);
    uint64_t h = 0;
    pn_status st = pn_source_header_hash(c->src, &h, err);
    if (st != PN_OK) {
        pn_recorded_source_free(&rec);
        return st;
    }
    if (h != rec.header_hash)
        pn_check_add(c, PN_SEV_WARNING, "SRC-HEADER", NULL, PN_KEY_SOURCE_HEADER, -1,
                     "the header of %s (FNV-1a 64 %016" PRIx64 ") is not the one of the source "
                     "this file was made from (%016" PRIx64 "): its keys or tensor infos differ",
                     src_name, h, rec.header_hash);
    if (rec.sample_rows != PN_SOURCE_SAMPLE_ROWS) {
        pn_check_add(c, PN_SEV_WARNING, "SRC-HEADER", NULL, PN_KEY_SOURCE_SAMPLE_ROWS, -1,
                     "%s is %" PRId64 "; this checker compares sampled rows of %d: the tensors' "
                     "identity is not compared",
                     PN_KEY_SOURCE_SAMPLE_ROWS, rec.sample_rows, PN_SOURCE_SAMPLE_ROWS);
        pn_recorded_source_free(&rec);
        return PN_OK;
    }
    /* the file's tensors that the source has, by name */
    const size_t n = c->rep->n_tensors;
    size_t *in_src = malloc((n ? n : 1) * sizeof *in_src);
    size_t *in_file = malloc((n ? n : 1) * sizeof *in_file);
    uint32_t *crc = malloc((n ? n : 1) * sizeof *crc);
    if (!in_src || !in_file || !crc) {
        free(in_src);
        free(in_file);
        free(crc);
        pn_recorded_source_free(&rec);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        long s = gguf_reader_find_tensor(c->src, c->rep->tensors[i].name);
        if (s >= 0) {
            in_src[k] = (size_t)s;
            in_file[k++] = i;
        }
    }
    st = pn_tensor_crcs(c->src, in_src, k, PN_SOURCE_SAMPLE_ROWS,
                        pn_threads_resolve(c->opt.threads), NULL, crc, err);
    if (st == PN_OK) {
        size_t differ = 0, first = 0;
        uint32_t first_got = 0, first_want = 0;
        bool first_type = false;
        for (size_t m = 0; m < k; m++) {
            size_t i = in_file[m];
            const gguf_tensor_info *s = gguf_reader_tensor(c->src, in_src[m]);
            bool type_differs = (uint32_t)s->type != rec.type[i];
            if (!type_differs && crc[m] == rec.sample_crc[i])
                continue;
            if (differ++ == 0) {
                first = i;
                first_type = type_differs;
                first_got = type_differs ? (uint32_t)s->type : crc[m];
                first_want = type_differs ? rec.type[i] : rec.sample_crc[i];
            }
        }
        if (differ > 0) {
            const char *name = c->rep->tensors[first].name;
            char what[160];
            if (first_type) {
                const pn_type_traits *a = pn_type_traits_get((int)first_got);
                const pn_type_traits *b = pn_type_traits_get((int)first_want);
                snprintf(what, sizeof what, "its source type is %s there, %s recorded",
                         a ? a->name : "?", b ? b->name : "?");
            } else {
                snprintf(what, sizeof what,
                         "the CRC-32 of its 256 sampled rows is %08" PRIx32 " there, %08" PRIx32
                         " recorded",
                         first_got, first_want);
            }
            pn_finding *f = pn_check_add(
                c, PN_SEV_ERROR, "SRC-IDENTITY", name, NULL, -1,
                "%s is not the source this file was made from: %zu of %zu tensors differ; the "
                "first is %s: %s",
                src_name, differ, k, name, what);
            if (f)
                f->count = (int64_t)differ;
        }
    }
    free(in_src);
    free(in_file);
    free(crc);
    pn_recorded_source_free(&rec);
    return st;
}
