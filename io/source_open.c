/* source_open.c - SRC as a GGUF reader: a GGUF file (or split set), or a
 * Hugging Face folder (hf/), either with its MTP layer dropped on request
 * (for a GGUF: a virtual reader over it, keys fixed as the converter's
 * --no-mtp writes them). */
#include "io/source_open.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "gguf/header_hash.h"
#include "hf/hf.h"

/* A folder is never a GGUF: one without config.json is opened as a Hugging
 * Face folder too, so that the message says config.json is missing. */
bool pn_source_is_hf(const char *path)
{
    struct stat sb;
    return pn_hf_is_source(path) || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
}

/* ---- no output is an input ---- */

/* The folder and the last name of p ("." for a bare name). */
static void split_path(const char *p, char *dir, size_t dir_len, const char **name)
{
    const char *s = strrchr(p, '/');
    *name = s ? s + 1 : p;
    if (!s)
        snprintf(dir, dir_len, ".");
    else if (s == p)
        snprintf(dir, dir_len, "/");
    else
        snprintf(dir, dir_len, "%.*s", (int)(s - p), p);
}

/* Whether writing target could touch `in`: target itself, then each link
 * of its chain in turn (a chain longer than 40 links is taken as touching). */
static bool target_touches(const char *target, const char *in)
{
    char cur[PATH_MAX];
    if (snprintf(cur, sizeof cur, "%s", target) >= (int)sizeof cur)
        return true;
    for (int hop = 0; hop < 40; hop++) {
        if (pn_same_place(cur, in))
            return true;
        struct stat l;
        if (lstat(cur, &l) != 0 || !S_ISLNK(l.st_mode))
            return false;
        char link[PATH_MAX];
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0)
            return false;
        link[n] = '\0';
        char next[PATH_MAX], dir[PATH_MAX];
        const char *name;
        split_path(cur, dir, sizeof dir, &name);
        int w = link[0] == '/' ? snprintf(next, sizeof next, "%s", link)
                               : snprintf(next, sizeof next, "%s/%s", dir, link);
        if (w < 0 || w >= (int)sizeof next)
            return true;
        memcpy(cur, next, (size_t)w + 1);
    }
    return true;
}

pn_status pn_source_check_target(const char *src, const char *target, const char *what,
                                 pn_error *err)
{
    if (!src || !target)
        return PN_OK;
    if (!pn_source_is_hf(src)) {
        if (target_touches(target, src))
            return pn_error_set(err, PN_ERR_USAGE,
                                "%s: %s is a file of the input (%s); choose another path", target,
                                what, src);
        return PN_OK;
    }
    pn_hf_inputs in;
    pn_status st = pn_hf_input_files(src, &in, err);
    if (st != PN_OK)
        return st;
    for (size_t i = 0; i < in.n; i++)
        if (target_touches(target, in.path[i])) {
            st = pn_error_set(err, PN_ERR_USAGE,
                              "%s: %s is a file of the input (%s, of the source %s); choose "
                              "another path",
                              target, what, in.path[i], src);
            break;
        }
    pn_hf_inputs_free(&in);
    return st;
}

typedef struct no_mtp_src {
    gguf_reader *r;
    size_t *map; /* tensor of the view -> tensor of r */
} no_mtp_src;

static pn_status nm_read(void *ctx, size_t i, uint64_t off, void *dst, size_t n, pn_error *err)
{
    no_mtp_src *s = ctx;
    return gguf_reader_read_tensor(s->r, s->map[i], off, dst, n, err);
}

static void nm_close(void *ctx)
{
    no_mtp_src *s = ctx;
    gguf_reader_close(s->r);
    free(s->map);
    free(s);
}

/* The block index of a tensor name "blk.N....", or -1. */
static long block_of(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    char *end;
    long b = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' ? b : -1;
}

/* r without its MTP layer: the blocks from block_count - nextn_predict_layers
 * on dropped, nextn_predict_layers removed, block_count and
 * attention.recurrent_layers cut to the blocks that remain. Takes r. */
static pn_status drop_mtp(gguf_reader *r, const char *path, gguf_reader **out, pn_error *err)
{
    const gguf_kv *arch = gguf_reader_find_kv(r, "general.architecture");
    char k_blocks[160], k_nextn[160], k_rec[160];
    if (!arch || arch->type != GGUF_TYPE_STRING || arch->v.str.len > 100) {
        gguf_reader_close(r);
        return pn_error_set(err, PN_ERR_FORMAT, "%s: --no-mtp: no general.architecture", path);
    }
    int al = (int)arch->v.str.len;
    snprintf(k_blocks, sizeof k_blocks, "%.*s.block_count", al, arch->v.str.data);
    snprintf(k_nextn, sizeof k_nextn, "%.*s.nextn_predict_layers", al, arch->v.str.data);
    snprintf(k_rec, sizeof k_rec, "%.*s.attention.recurrent_layers", al, arch->v.str.data);
    const gguf_kv *kb = gguf_reader_find_kv(r, k_blocks), *kn = gguf_reader_find_kv(r, k_nextn);
    if (!kn) {
        *out = r;
        return PN_OK;
    } /* no MTP layer: the source as it is */
    if (!kb || kb->type != GGUF_TYPE_UINT32 || kn->type != GGUF_TYPE_UINT32 ||
        kn->v.u64 > kb->v.u64) {
        gguf_reader_close(r);
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: --no-mtp: keys %s and %s are not uint32 "
                            "with the MTP layers among the blocks",
                            path, k_blocks, k_nextn);
    }
    const uint64_t L = kb->v.u64 - kn->v.u64;
    no_mtp_src *s = calloc(1, sizeof *s);
    size_t nt = gguf_reader_n_tensors(r);
    if (s)
        s->map = calloc(nt ? nt : 1, sizeof *s->map);
    gguf_writer *w = gguf_writer_new();
    pn_status st = (s && s->map && w) ? PN_OK : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == PN_OK && i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        /* the record proves the keys of the file, which this view changes */
        if (gguf_str_eq(kv->key, k_nextn) ||
            (kv->key.len >= 6 && memcmp(kv->key.data, "split.", 6) == 0) ||
            gguf_header_hash_is_record_key(kv->key))
            continue;
        if (gguf_str_eq(kv->key, k_blocks)) {
            st = gguf_writer_set_u32(w, k_blocks, (uint32_t)L);
        } else if (gguf_str_eq(kv->key, k_rec) && kv->type == GGUF_TYPE_ARRAY &&
                   kv->arr_type == GGUF_TYPE_BOOL && kv->arr_count >= L) {
            st = gguf_writer_set_arr(w, k_rec, GGUF_TYPE_BOOL, kv->arr_data, L);
        } else {
            st = gguf_writer_copy_kv(w, kv);
        }
        if (st != PN_OK)
            st = pn_error_set(err, st, "%s: --no-mtp: %s", path,
                              gguf_writer_last_error(w) ? gguf_writer_last_error(w) : "a key");
    }
    size_t n = 0;
    for (size_t i = 0; st == PN_OK && i < nt; i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        long b = block_of(t->name);
        if (b >= 0 && (uint64_t)b >= L)
            continue;
        st = gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, err);
        s->map[n++] = i;
    }
    uint8_t *hdr = NULL;
    size_t len = 0;
    if (st == PN_OK)
        st = gguf_writer_header(w, &hdr, &len, err);
    gguf_writer_free(w);
    if (st != PN_OK) {
        if (s)
            free(s->map);
        free(s);
        gguf_reader_close(r);
        return st;
    }
    s->r = r;
    gguf_provider p = { s, nm_read, nm_close };
    st = gguf_reader_open_virtual(hdr, len, path, &p, out, err);
    free(hdr);
    return st;
}

pn_status pn_source_open(const char *path, const pn_source_opts *opts, gguf_reader **out,
                         pn_error *err)
{
    *out = NULL;
    if (!pn_source_is_hf(path)) {
        gguf_reader *r = NULL;
        pn_status st = gguf_reader_open(path, &r, err);
        if (st != PN_OK || !opts || !opts->no_mtp) {
            *out = r;
            return st;
        }
        return drop_mtp(r, path, out, err);
    }
    pn_hf_opts ho = { 0 };
    ho.outtype = PN_HF_OUT_BF16;
    if (opts) {
        ho.no_mtp = opts->no_mtp;
        ho.tokenizer_pre = opts->tokenizer_pre;
    }
    return pn_hf_open_source(path, &ho, out, err);
}
