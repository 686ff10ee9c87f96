/* hf_source.c - the folder as a virtual gguf_reader: the header built by
 * gguf_writer from the converted model's keys and tensor infos, the data
 * served by a pool of pn_hf_readers (one per concurrent read). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"

#define POOL_MAX 64
#define READ_BUF ((size_t)1 << 20)

typedef struct source {
    pn_hf_model *m;
    pthread_mutex_t lock;
    pn_hf_reader *free_rd[POOL_MAX];
    size_t n_free;
} source;

static void source_close(void *ctx)
{
    source *s = ctx;
    if (!s)
        return;
    for (size_t i = 0; i < s->n_free; i++)
        pn_hf_reader_close(s->free_rd[i]);
    pthread_mutex_destroy(&s->lock);
    pn_hf_close(s->m);
    free(s);
}

static pn_status source_read(void *ctx, size_t i, uint64_t off, void *dst, size_t n, pn_error *err)
{
    source *s = ctx;
    pn_hf_reader *rd = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->n_free)
        rd = s->free_rd[--s->n_free];
    pthread_mutex_unlock(&s->lock);
    if (!rd) {
        pn_status st = pn_hf_reader_open(s->m, READ_BUF, &rd, err);
        if (st != PN_OK)
            return st;
    }
    pn_status st = pn_hf_read(rd, i, off, dst, n, err);
    pthread_mutex_lock(&s->lock);
    if (s->n_free < POOL_MAX) {
        s->free_rd[s->n_free++] = rd;
        rd = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    pn_hf_reader_close(rd);
    return st;
}

pn_status pn_hf_open_gguf(pn_hf_model *m, gguf_reader **out, pn_error *err)
{
    *out = NULL;
    source *s = calloc(1, sizeof *s);
    if (!s) {
        pn_hf_close(m);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    s->m = m;
    pthread_mutex_init(&s->lock, NULL);
    gguf_writer *w = gguf_writer_new();
    uint8_t *hdr = NULL;
    size_t len = 0;
    pn_status st = w ? PN_OK : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    if (st == PN_OK)
        st = pn_hf_set_keys(m, w, err);
    if (st == PN_OK)
        st = pn_hf_add_tensors(m, w, err);
    if (st == PN_OK)
        st = gguf_writer_header(w, &hdr, &len, err);
    gguf_writer_free(w);
    if (st != PN_OK) {
        source_close(s);
        return st;
    }
    gguf_provider p = { s, source_read, source_close };
    st = gguf_reader_open_virtual(hdr, len, pn_hf_dir(m), &p, out, err);
    free(hdr);
    return st;
}

pn_status pn_hf_open_source(const char *src, const pn_hf_opts *opts, gguf_reader **out,
                            pn_error *err)
{
    *out = NULL;
    pn_hf_model *m = NULL;
    pn_status st = pn_hf_open(src, opts, &m, err);
    if (st != PN_OK)
        return st;
    return pn_hf_open_gguf(m, out, err);
}
