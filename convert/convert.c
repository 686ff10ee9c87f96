/* convert.c - the conversion job: the converted tensors of a Hugging Face
 * folder streamed into io/'s output set, a chunk at a time, each written
 * file read back before the set is committed. Memory: one chunk and the
 * reader's buffer, whatever the model's size. */
#include "convert/convert.h"

#include <stdlib.h>

#include "io/outset.h"
#include "io/source_open.h"

#define CHUNK ((size_t)8 << 20)

static uint64_t tensor_bytes(const pn_hf_tensor *t)
{
    return t->n_rows * t->row_elems * pn_hf_type_size(t->type);
}

pn_status pn_convert(const pn_hf_model *m, const char *src, const char *dst,
                     const pn_convert_opts *o, pn_convert_result *res, pn_error *err)
{
    if (res)
        *res = (pn_convert_result){ 0 };
    gguf_writer *w = gguf_writer_new();
    if (!w)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    /* the converter's keys, then (unless asked not to) the record that
     * proves them: the same model, tensors and source identity either way */
    gguf_writer_set_header_hash(w, !o->no_header_hash);
    pn_status st = pn_hf_set_keys(m, w, err);
    if (st == PN_OK)
        st = pn_hf_add_tensors(m, w, err);
    pn_outset_opts oo;
    pn_outset_opts_init(&oo);
    oo.limit = o->split;
    oo.force = o->force;
    pn_outset *os = NULL;
    if (st == PN_OK)
        st = pn_outset_make(w, dst, &oo, &os, err);
    /* no target is a file of the folder, before anything is opened */
    for (size_t s = 0; st == PN_OK && s < pn_outset_n_splits(os); s++)
        st = pn_source_check_target(src, pn_outset_path(os, s), "the output", err);
    if (st == PN_OK && res) {
        res->n_files = pn_outset_n_splits(os);
        res->file_bytes = pn_outset_written_bytes(os);
    }
    if (st == PN_OK)
        st = pn_outset_check_targets(os, NULL, err);
    if (o->dry_run) {
        pn_outset_free(os);
        gguf_writer_free(w);
        return st;
    }
    pn_hf_reader *rd = NULL;
    uint8_t *buf = NULL;
    if (st == PN_OK)
        st = pn_hf_reader_open(m, CHUNK, &rd, err);
    if (st == PN_OK && !(buf = malloc(CHUNK)))
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    if (st == PN_OK)
        st = pn_outset_begin(os, err);
    const size_t n_tensors = pn_hf_n_tensors(m);
    uint64_t all = 0, done = 0;
    for (size_t i = 0; i < n_tensors; i++)
        all += tensor_bytes(pn_hf_tensor_at(m, i));
    for (size_t i = 0; st == PN_OK && i < n_tensors; i++) {
        const pn_hf_tensor *t = pn_hf_tensor_at(m, i);
        uint64_t total = tensor_bytes(t);
        for (uint64_t off = 0; st == PN_OK && off < total; off += CHUNK) {
            if (o->cancel && *o->cancel) {
                st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
                break;
            }
            size_t n = total - off < CHUNK ? (size_t)(total - off) : CHUNK;
            st = pn_hf_read(rd, i, off, buf, n, err);
            if (st == PN_OK)
                st = pn_outset_write(os, i, buf, n, err);
            done += n;
            if (st == PN_OK && o->progress)
                o->progress(o->user, i, n_tensors, t->name, done, all);
        }
    }
    if (st == PN_OK)
        st = pn_outset_close(os, err);
    /* each written file is read back as a GGUF (its split keys checked
     * against the plan) before any is committed */
    for (size_t s = 0; st == PN_OK && s < pn_outset_n_splits(os); s++) {
        gguf_reader *chk = NULL;
        st = pn_outset_open_written(os, s, &chk, err);
        gguf_reader_close(chk);
    }
    if (st == PN_OK)
        st = pn_outset_commit(os, err);
    pn_outset_free(os);
    free(buf);
    pn_hf_reader_close(rd);
    gguf_writer_free(w);
    return st;
}
