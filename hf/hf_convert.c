/* hf_convert.c - the conversion job: the folder written as the converter's
 * GGUF (one file, or a split set by gguf-split's rules), through the atomic
 * writer: nothing is left at the target unless every file is complete. */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_split.h"
#include "hf/hf.h"
#include "hf/hf_convert.h"

#define CHUNK ((size_t)8 << 20)

static pn_status write_split(const pn_hf_model *m, pn_hf_reader *rd, gguf_writer *w,
                             const char *path, size_t first, size_t end, uint8_t *buf,
                             pn_error *err)
{
    pn_status st = gguf_writer_begin(w, path, err);
    for (size_t i = first; st == PN_OK && i < end; i++) {
        const pn_hf_tensor *t = pn_hf_tensor_at(m, i);
        uint64_t total = t->n_rows * t->row_elems * pn_hf_type_size(t->type);
        for (uint64_t off = 0; st == PN_OK && off < total; off += CHUNK) {
            size_t n = total - off < CHUNK ? (size_t)(total - off) : CHUNK;
            st = pn_hf_read(rd, i, off, buf, n, err);
            if (st == PN_OK) st = gguf_writer_write(w, buf, n, err);
        }
    }
    if (st == PN_OK) st = gguf_writer_close(w, err);
    if (st == PN_OK) {
        /* the written file is read back as a GGUF before it is committed */
        gguf_reader *chk = NULL;
        st = gguf_reader_open_fd(gguf_writer_fd(w), path, &chk, err);
        gguf_reader_close(chk);
    }
    return st;
}

pn_status pn_hf_convert(const pn_hf_model *m, const char *out_path,
                        const pn_hf_convert_opts *o, size_t *n_files, pn_error *err)
{
    if (n_files) *n_files = 0;
    gguf_writer *w = gguf_writer_new();
    if (!w) return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    gguf_writer_set_replace(w, o->force);
    pn_status st = pn_hf_set_keys(m, w, err);
    if (st == PN_OK) st = pn_hf_add_tensors(m, w, err);
    gguf_split_plan plan = {0};
    bool split = o->split.mode != GGUF_SPLIT_NONE;
    if (st == PN_OK && split) st = gguf_split_plan_of_writer(w, o->split, &plan, err);
    pn_hf_reader *rd = NULL;
    uint8_t *buf = NULL;
    if (st == PN_OK) st = pn_hf_reader_open(m, CHUNK, &rd, err);
    if (st == PN_OK && !(buf = malloc(CHUNK))) st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    if (st == PN_OK && !split) {
        st = write_split(m, rd, w, out_path, 0, pn_hf_n_tensors(m), buf, err);
        if (st == PN_OK) st = gguf_writer_commit(w, err);
        if (st == PN_OK && n_files) *n_files = 1;
    } else if (st == PN_OK) {
        size_t ns = plan.n_splits;
        gguf_writer **ws = calloc(ns, sizeof *ws);
        if (!ws) st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        for (size_t s = 0; st == PN_OK && s < ns; s++) {
            st = gguf_writer_new_split(w, &plan, s, NULL, 0, &ws[s], err);
            char *p = NULL;
            if (st == PN_OK) {
                p = ns > 1 ? gguf_split_path(out_path, (uint32_t)s, (uint32_t)ns) : strdup(out_path);
                if (!p) st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            }
            if (st == PN_OK)
                st = write_split(m, rd, ws[s], p, plan.first[s], plan.first[s + 1], buf, err);
            free(p);
        }
        if (st == PN_OK) st = gguf_writer_commit_set(ws, ns, err);
        if (st == PN_OK && n_files) *n_files = ns;
        for (size_t s = 0; ws && s < ns; s++) gguf_writer_free(ws[s]);
        free(ws);
    }
    if (st != PN_OK) gguf_writer_abort(w);
    gguf_split_plan_free(&plan);
    free(buf);
    pn_hf_reader_close(rd);
    gguf_writer_free(w);
    return st;
}
