/* quantize_paths.c - the paths of a pn-quantize run checked before any
 * work: SRC, DST (a file, a folder or a split set's name), the measurement
 * file, none taking another's place; and the file name a folder DST gets.
 * The job itself is quantize.c's. */
#include "pipeline/quantize_paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/file.h"
#include "gguf/gguf_split.h"
#include "io/free_space.h"
#include "io/source_open.h"
#include "quant/pn_cuda.h"

/* The output is planned as a split set (a plan of one split is still DST
 * itself). */
bool pn_quantize_split_output(const pn_quantize_opts *o)
{
    return o->split.mode != GGUF_SPLIT_NONE || o->keep_split;
}

bool pn_quantize_is_folder(const char *path)
{
    struct stat sb;
    return path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

pn_status pn_quantize_check_paths(const pn_quantize_opts *o, struct stat *ss, pn_error *err)
{
    struct stat ds;
    if (stat(o->src_path, ss) != 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open source: %s", o->src_path,
                            strerror(errno));
    if (o->backend == PN_BACKEND_CUDA && !o->cuda_emulate && !pn_cuda_build_enabled())
        return pn_error_set(err, PN_ERR_CUDA,
                            "--backend cuda: this pn-quantize was built without CUDA (use "
                            "--backend cpu or auto; docs/usage.md#gpu)");
    /* a dry run refuses what the real run refuses (it saves the measurement too) */
    if (o->measurement_path && stat(o->measurement_path, &ds) != 0) {
        pn_status st = pn_check_parent_folder(o->measurement_path, "the measurement", err);
        if (st != PN_OK)
            return st;
    }
    if (pn_quantize_is_folder(o->dst_path))
        return PN_OK; /* a file in it, named once the plan is made (pn_quantize_dst_in_folder) */
    if (!o->dst_path)
        return o->dry_run ? PN_OK : pn_error_set(err, PN_ERR_USAGE, "no output file given");
    pn_status pst = pn_check_parent_folder(o->dst_path, "the output", err);
    if (pst != PN_OK)
        return pst;
    /* a split output is checked file by file once its plan is made
     * (pn_outset_check_targets): DST itself is only a name then */
    if (pn_quantize_split_output(o))
        return PN_OK;
    if (strcmp(o->src_path, o->dst_path) == 0 ||
        (stat(o->dst_path, &ds) == 0 && ds.st_dev == ss->st_dev && ds.st_ino == ss->st_ino))
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s: the output is the source file; choose another output path",
                            o->dst_path);
    if (o->imatrix_path && pn_same_file(o->imatrix_path, o->dst_path))
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s: the output is the --imatrix file; choose another output path",
                            o->dst_path);
    if (stat(o->dst_path, &ds) == 0 && !o->force)
        return pn_error_set(err, PN_ERR_EXISTS, "%s: output exists; use --force to replace it",
                            o->dst_path);
    return PN_OK;
}

/* DST a folder: the output is <general.name>-<pn.mix>.gguf in it (the
 * source's file name, less .gguf, where it has no general.name), the name
 * made a file name as llama.cpp's converter makes one from general.name:
 * its edges' spaces trimmed, every space, '/' or control byte made '-'
 * ("pn-synth Qwen3.8-shaped test model" gives
 * pn-synth-Qwen3.8-shaped-test-model-P0k+19.gguf). *out is malloc'd. */
pn_status pn_quantize_dst_in_folder(const char *folder, const gguf_reader *src,
                                    const char *src_path, const char *mix_label, char **out,
                                    pn_error *err)
{
    char name[256];
    const gguf_kv *kv = gguf_reader_find_kv(src, "general.name");
    if (kv && kv->type == GGUF_TYPE_STRING && kv->v.str.len > 0) {
        snprintf(name, sizeof name, "%.*s", (int)(kv->v.str.len < 200 ? kv->v.str.len : 200),
                 kv->v.str.data);
    } else {
        size_t n = strlen(src_path);
        while (n > 1 && src_path[n - 1] == '/')
            n--;
        size_t b = n;
        while (b > 0 && src_path[b - 1] != '/')
            b--;
        if (n - b > 5 && strncmp(src_path + n - 5, ".gguf", 5) == 0)
            n -= 5;
        snprintf(name, sizeof name, "%.*s", (int)(n - b < 200 ? n - b : 200), src_path + b);
    }
    size_t end = strlen(name), start = 0;
    while (end > 0 && name[end - 1] == ' ')
        name[--end] = '\0';
    while (name[start] == ' ')
        start++;
    memmove(name, name + start, end - start + 1);
    for (char *p = name; *p; p++)
        if (*p == '/' || *p == ' ' || (unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '-';
    size_t len = strlen(folder) + strlen(name) + strlen(mix_label) + 8;
    *out = malloc(len);
    if (!*out)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    snprintf(*out, len, "%s%s%s-%s.gguf", folder,
             folder[0] && folder[strlen(folder) - 1] == '/' ? "" : "/",
             name[0] && strcmp(name, ".") && strcmp(name, "..") ? name : "model", mix_label);
    return PN_OK;
}

/* Whether path is the name of a split (any K of any N) of the split output
 * DST: PREFIX-0000K-of-0000N.gguf with DST's prefix (gguf_split_path). */
static bool is_split_of(const char *path, const char *dst)
{
    size_t n = strlen(path);
    const size_t tail = sizeof "-00001-of-00002.gguf" - 1;
    unsigned k = 0, count = 0;
    char end[8] = "";
    if (n <= tail || sscanf(path + n - tail, "-%5u-of-%5u%7s", &k, &count, end) != 3 ||
        strcmp(end, ".gguf") != 0 || k == 0 || count == 0 || k > count)
        return false;
    char *mine = gguf_split_prefix(path, k - 1, count);
    char *first = gguf_split_path(dst, 0, 2); /* PREFIX-00001-of-00002.gguf */
    bool same = false;
    if (mine && first && strlen(first) > tail) {
        first[strlen(first) - tail] = '\0';
        same = pn_same_place(mine, first);
    }
    free(mine);
    free(first);
    return same;
}

/* --measurement FILE is read when it is there and written when it is not:
 * it may not be the source (or a split of it), DST or a file of the output
 * set, or the --reuse file, whose places it would take. */
pn_status pn_quantize_check_measurement_path(const pn_quantize_opts *o, const gguf_reader *src,
                                             pn_error *err)
{
    const char *m = o->measurement_path;
    if (!m)
        return PN_OK;
    const char *what = NULL;
    for (size_t k = 0; !what && k < gguf_reader_n_splits(src); k++)
        if (pn_same_place(m, gguf_reader_name(gguf_reader_split(src, k))))
            what = gguf_reader_n_splits(src) > 1 ? "a file of the source" : "the source";
    if (!what && pn_same_place(m, o->src_path))
        what = "the source";
    if (!what && o->dst_path && pn_same_place(m, o->dst_path))
        what = "the output (DST)";
    if (!what && o->dst_path && pn_quantize_split_output(o) && is_split_of(m, o->dst_path))
        what = "a file of the output set";
    if (!what && pn_source_check_target(o->src_path, m, "the measurement", err) != PN_OK)
        return pn_error_prefix(err, "--measurement");
    if (!what && o->reuse_path && pn_same_place(m, o->reuse_path))
        what = "the --reuse file";
    if (!what && o->recipe_path && pn_same_place(m, o->recipe_path))
        what = "the recipe";
    if (!what && o->promote_list_path && pn_same_place(m, o->promote_list_path))
        what = "the promote list";
    if (!what)
        return PN_OK;
    return pn_error_set(err, PN_ERR_USAGE,
                        "--measurement %s: that is %s; choose another measurement path", m, what);
}
