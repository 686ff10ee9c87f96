/* gguf_split.c - split sets: names, split keys, opening a set as one model,
 * the plan of a set to write, the split keys of a writer.
 *
 * Opening a set starts from the file the caller named, already parsed. Its
 * split.no and split.count give the prefix (llama.cpp's rule), from which
 * every other split's name follows; each is opened as a file of its own
 * (regular files only, a short first read so that memory follows the
 * headers), and checked against the given file: the same split.count and
 * split.tensors.count (else it is another set's), split.no its place. Then
 * the tensors of all splits must add up to split.tensors.count, and no name
 * may be in two splits (one sort of every tensor info by name).
 */
#include "gguf/gguf_split.h"
#include "gguf/gguf_split_testing.h"
#include "gguf/gguf_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ */
/* Names                                                               */

static const char GGUF_SUFFIX[] = ".gguf";
#define SUFFIX_LEN (sizeof GGUF_SUFFIX - 1)
/* "-00001-of-00003.gguf": 5 digits each while count <= 65535. */
#define POSTFIX_MAX 32

static bool split_args_ok(uint32_t index, uint32_t count)
{
    return count >= 1 && count <= GGUF_SPLIT_MAX_COUNT && index < count;
}

static void postfix(char *buf, uint32_t index, uint32_t count)
{
    snprintf(buf, POSTFIX_MAX, "-%05u-of-%05u.gguf", index + 1, count);
}

static char *path_of(const char *prefix, size_t prefix_len, uint32_t index, uint32_t count)
{
    char post[POSTFIX_MAX];
    postfix(post, index, count);
    size_t n = strlen(post);
    char *p = malloc(prefix_len + n + 1);
    if (!p)
        return NULL;
    memcpy(p, prefix, prefix_len);
    memcpy(p + prefix_len, post, n + 1);
    return p;
}

char *gguf_split_path_of_prefix(const char *prefix, uint32_t index, uint32_t count)
{
    if (!prefix || !split_args_ok(index, count))
        return NULL;
    return path_of(prefix, strlen(prefix), index, count);
}

char *gguf_split_path(const char *dst, uint32_t index, uint32_t count)
{
    if (!dst || !*dst || !split_args_ok(index, count))
        return NULL;
    size_t n = strlen(dst);
    if (n > SUFFIX_LEN && strcmp(dst + n - SUFFIX_LEN, GGUF_SUFFIX) == 0)
        n -= SUFFIX_LEN;
    return path_of(dst, n, index, count);
}

char *gguf_split_prefix(const char *path, uint32_t index, uint32_t count)
{
    if (!path || !split_args_ok(index, count))
        return NULL;
    char post[POSTFIX_MAX];
    postfix(post, index, count);
    size_t n = strlen(path), k = strlen(post);
    if (n <= k || strcmp(path + n - k, post) != 0)
        return NULL;
    char *p = malloc(n - k + 1);
    if (!p)
        return NULL;
    memcpy(p, path, n - k);
    p[n - k] = '\0';
    return p;
}

/* Whether name is "<base>-00001-of-NNNNN.gguf" (NNNNN five digits). */
static bool first_split_name(const char *name, const char *base, size_t base_len)
{
    static const char head[] = "-00001-of-";
    const size_t hl = sizeof head - 1, n = strlen(name);
    if (n != base_len + hl + 5 + SUFFIX_LEN || strncmp(name, base, base_len) != 0 ||
        strncmp(name + base_len, head, hl) != 0 || strcmp(name + n - SUFFIX_LEN, GGUF_SUFFIX) != 0)
        return false;
    for (size_t i = 0; i < 5; i++)
        if (name[base_len + hl + i] < '0' || name[base_len + hl + i] > '9')
            return false;
    return true;
}

pn_status gguf_split_find_sets(const char *dst, char ***firsts, size_t *n, pn_error *err)
{
    *firsts = NULL;
    *n = 0;
    const char *slash = strrchr(dst, '/');
    const char *base = slash ? slash + 1 : dst;
    size_t base_len = strlen(base);
    if (base_len > SUFFIX_LEN && strcmp(base + base_len - SUFFIX_LEN, GGUF_SUFFIX) == 0)
        base_len -= SUFFIX_LEN;
    char *dir = slash ? strndup(dst, (size_t)(slash - dst) + 1) : strdup("./");
    if (!dir)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    DIR *d = opendir(dir);
    if (!d) {
        free(dir);
        return PN_OK; /* no folder: no set either */
    }
    pn_status st = PN_OK;
    for (struct dirent *e; st == PN_OK && (e = readdir(d));) {
        if (!first_split_name(e->d_name, base, base_len))
            continue;
        char **grown = realloc(*firsts, (*n + 1) * sizeof *grown);
        char *path = malloc(strlen(dir) + strlen(e->d_name) + 1);
        if (grown)
            *firsts = grown;
        if (!grown || !path) {
            free(path);
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            break;
        }
        sprintf(path, "%s%s", slash ? dir : "", e->d_name);
        (*firsts)[(*n)++] = path;
    }
    closedir(d);
    free(dir);
    if (st) {
        for (size_t i = 0; i < *n; i++)
            free((*firsts)[i]);
        free(*firsts);
        *firsts = NULL;
        *n = 0;
    }
    /* in name order: a listing the same on every file system */
    for (size_t i = 1; st == PN_OK && i < *n; i++)
        for (size_t j = i; j > 0 && strcmp((*firsts)[j - 1], (*firsts)[j]) > 0; j--) {
            char *t = (*firsts)[j];
            (*firsts)[j] = (*firsts)[j - 1];
            (*firsts)[j - 1] = t;
        }
    return st;
}

/* ------------------------------------------------------------------ */
/* Split keys                                                          */

static pn_status key_of_type(const gguf_reader *r, const char *key, gguf_value_type want,
                             const gguf_kv **out, pn_error *err)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    *out = kv;
    if (!kv || kv->type == want)
        return PN_OK;
    const char *got = kv->type == GGUF_TYPE_ARRAY ? "array" : gguf_value_type_name(kv->type);
    return pn_error_set(err, PN_ERR_FORMAT,
                        "%s: at byte %llu: key '%s' has type %s, expected %s (the type "
                        "llama.cpp's gguf-split and llama-quantize write and its loader "
                        "requires)",
                        gguf_reader_name(r), (unsigned long long)gguf_reader_key_offset_(r, kv),
                        key, got, gguf_value_type_name(want));
}

pn_status gguf_split_read_keys(const gguf_reader *r, gguf_split_keys *k, pn_error *err)
{
    memset(k, 0, sizeof *k);
    const gguf_kv *no, *count, *total;
    pn_status st = key_of_type(r, GGUF_SPLIT_KEY_NO, GGUF_TYPE_UINT16, &no, err);
    if (!st)
        st = key_of_type(r, GGUF_SPLIT_KEY_COUNT, GGUF_TYPE_UINT16, &count, err);
    if (!st)
        st = key_of_type(r, GGUF_SPLIT_KEY_TENSORS_COUNT, GGUF_TYPE_INT32, &total, err);
    if (st)
        return st;
    if ((k->has_no = no != NULL))
        k->no = (uint16_t)no->v.u64;
    if ((k->has_count = count != NULL))
        k->count = (uint16_t)count->v.u64;
    if ((k->has_tensors_count = total != NULL))
        k->tensors_count = (int32_t)total->v.i64;
    return PN_OK;
}

bool gguf_split_keys_in_set(const gguf_split_keys *k)
{
    return k->has_count && k->count >= 2;
}

/* ------------------------------------------------------------------ */
/* Opening a set                                                       */

/* A file of one that says it is split 1 of 1 must say it consistently. */
static pn_status check_set_of_one(const gguf_reader *r, const gguf_split_keys *k, pn_error *err)
{
    const char *name = gguf_reader_name(r);
    if (k->has_no && k->no != 0)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: split.no is %u, but split.count is 1 (a set of one file, "
                            "whose split.no can only be 0)",
                            name, k->no);
    if (k->has_tensors_count && (uint64_t)(int64_t)k->tensors_count != gguf_reader_n_tensors(r))
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: split.tensors.count is %d, but this file, split 1 of 1, holds "
                            "%zu tensors",
                            name, k->tensors_count, gguf_reader_n_tensors(r));
    return PN_OK;
}

pn_status gguf_split_check_named(const gguf_reader *r, const gguf_split_keys *k, pn_error *err)
{
    const char *name = gguf_reader_name(r);
    if (!k->has_no)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: split.count is %u but the key split.no is missing (every "
                            "split of a set records its index)",
                            name, k->count);
    if (!k->has_tensors_count)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: split.count is %u but the key split.tensors.count is missing "
                            "(every split of a set records the set's tensor count)",
                            name, k->count);
    if (k->no >= k->count)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: split.no is %u, but split.count is %u: there is no such split "
                            "(split.no counts from 0)",
                            name, k->no, k->count);
    if (k->tensors_count < 0)
        return pn_error_set(err, PN_ERR_FORMAT, "%s: split.tensors.count is %d, below 0", name,
                            k->tensors_count);
    return PN_OK;
}

/* Opens split s of the set that `given` (split g) belongs to and checks its
 * keys against the given file's. */
static pn_status open_member(const gguf_reader *given, const gguf_split_keys *gk,
                             const char *prefix, uint32_t s, bool lenient, gguf_reader **out,
                             pn_error *err)
{
    *out = NULL;
    const char *gname = gguf_reader_name(given);
    char *path = gguf_split_path_of_prefix(prefix, s, gk->count);
    if (!path)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", gname);
    struct stat sb;
    if (stat(path, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
        pn_error_set(err, PN_ERR_IO,
                     "%s: missing: split %u of %u of the set that %s belongs to (split.count "
                     "%u) is not there",
                     path, s + 1, gk->count, gname, gk->count);
        free(path);
        return PN_ERR_IO;
    }
    gguf_reader *r;
    pn_status st = gguf_reader_open_one_(path, lenient, GGUF_READ_FIRST_SPLIT, &r, err);
    free(path);
    if (st)
        return st;
    st = gguf_split_check_member(given, gk, r, s, err);
    if (st) {
        gguf_reader_close(r);
        return st;
    }
    *out = r;
    return PN_OK;
}

pn_status gguf_split_check_member(const gguf_reader *given, const gguf_split_keys *gk,
                                  const gguf_reader *r, uint32_t s, pn_error *err)
{
    const char *gname = gguf_reader_name(given), *path = gguf_reader_name(r);
    gguf_split_keys k;
    pn_status st = gguf_split_read_keys(r, &k, err);
    if (!st && !k.has_count)
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: no split.count key, but %s says its set has %u splits: this "
                          "file is not a split of that set",
                          path, gname, gk->count);
    if (!st && k.count != gk->count)
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: split.count is %u, but %s says %u: this file is not a split of "
                          "that set (another model's split?)",
                          path, k.count, gname, gk->count);
    if (!st && !k.has_tensors_count)
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: no split.tensors.count key, but %s says its set has %d tensors: "
                          "this file is not a split of that set",
                          path, gname, gk->tensors_count);
    if (!st && k.tensors_count != gk->tensors_count)
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: split.tensors.count is %d, but %s says %d: this file is not a "
                          "split of that set (another model's split?)",
                          path, k.tensors_count, gname, gk->tensors_count);
    if (!st && !k.has_no)
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: the key split.no is missing; by its name this is split %u of %u",
                          path, s + 1, gk->count);
    if (!st && k.no != s)
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: split.no is %u (split %u of %u), but by its name this is split "
                          "%u of %u (split.no %u)",
                          path, k.no, k.no + 1u, gk->count, s + 1, gk->count, s);
    return st;
}

static int cmp_info_by_name(const void *a, const void *b)
{
    const gguf_tensor_info *x = *(const gguf_tensor_info *const *)a;
    const gguf_tensor_info *y = *(const gguf_tensor_info *const *)b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    if (x->split != y->split)
        return x->split < y->split ? -1 : 1;
    return (x > y) - (x < y);
}

/* Counts, tensor ownership and the name index of an opened set. */
static pn_status index_set(gguf_reader *set, const gguf_split_keys *gk, pn_error *err)
{
    const char *first = set->splits[0]->name;
    set->split_first = malloc((set->n_splits + 1) * sizeof *set->split_first);
    if (!set->split_first)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", first);
    size_t total = 0;
    for (size_t s = 0; s < set->n_splits; s++) {
        gguf_reader *sr = set->splits[s];
        set->split_first[s] = total;
        total += sr->n_tensors; /* each bounded by its file's size: no overflow */
        for (size_t j = 0; j < sr->n_tensors; j++)
            sr->tensors[j].split = (uint32_t)s;
    }
    set->split_first[set->n_splits] = total;
    set->n_tensors = total;
    if (total != (uint64_t)(int64_t)gk->tensors_count)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: the %zu splits of its set hold %zu tensors in all, but "
                            "split.tensors.count says %d (a split of another model, or one "
                            "cut short?)",
                            first, set->n_splits, total, gk->tensors_count);
    if (total == 0)
        return PN_OK;
    set->set_by_name = malloc(total * sizeof *set->set_by_name);
    if (!set->set_by_name)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for %zu tensor names", first,
                            total);
    size_t n = 0;
    for (size_t s = 0; s < set->n_splits; s++)
        for (size_t j = 0; j < set->splits[s]->n_tensors; j++)
            set->set_by_name[n++] = &set->splits[s]->tensors[j];
    qsort(set->set_by_name, total, sizeof *set->set_by_name, cmp_info_by_name);
    for (size_t i = 1; i < total; i++) {
        const gguf_tensor_info *a = set->set_by_name[i - 1], *b = set->set_by_name[i];
        if (strcmp(a->name, b->name) != 0)
            continue;
        const gguf_reader *ra = set->splits[a->split], *rb = set->splits[b->split];
        /* One file never holds a name twice (its reader refused it). */
        return pn_error_set(err, PN_ERR_TENSOR,
                            "%s: at byte %llu: tensor '%s' is also in %s (at byte %llu): a "
                            "tensor in two splits of one set",
                            rb->name, (unsigned long long)b->info_offset, b->name, ra->name,
                            (unsigned long long)a->info_offset);
    }
    return PN_OK;
}

pn_status gguf_split_open_set_(gguf_reader *given, bool lenient, gguf_reader **out, pn_error *err)
{
    *out = NULL;
    gguf_split_keys gk;
    pn_status st = gguf_split_read_keys(given, &gk, err);
    if (!st && gk.has_count && gk.count == 1)
        st = check_set_of_one(given, &gk, err);
    if (st) {
        gguf_reader_close(given);
        return st;
    }
    if (!gguf_split_keys_in_set(&gk)) {
        *out = given; /* no split keys, or a set of one (split.count 0 or 1) */
        return PN_OK;
    }
    const char *gname = given->name;
    st = gguf_split_check_named(given, &gk, err);
    char *prefix = NULL;
    if (!st && !(prefix = gguf_split_prefix(gname, gk.no, gk.count))) {
        char post[POSTFIX_MAX];
        postfix(post, gk.no, gk.count);
        st = pn_error_set(err, PN_ERR_FORMAT,
                          "%s: split.no %u and split.count %u make this file split %u of %u, "
                          "but its name does not end in '%s' after a prefix: the name by which "
                          "llama.cpp finds the other splits of a set",
                          gname, gk.no, gk.count, gk.no + 1u, gk.count, post);
    }
    gguf_reader *set = NULL;
    if (!st) {
        set = calloc(1, sizeof *set);
        if (set)
            set->splits = calloc(gk.count, sizeof *set->splits);
        if (!set || !set->splits) {
            free(set);
            set = NULL;
            st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", gname);
        }
    }
    if (st) {
        free(prefix);
        gguf_reader_close(given);
        return st;
    }
    set->fd = -1;
    set->lenient = lenient;
    set->n_splits = gk.count;
    set->splits[gk.no] = given;
    for (uint32_t s = 0; s < gk.count && !st; s++)
        if (s != gk.no)
            st = open_member(given, &gk, prefix, s, lenient, &set->splits[s], err);
    free(prefix);
    if (!st)
        st = gguf_split_check_set_ids((const gguf_reader *const *)set->splits, set->n_splits, NULL,
                                      err);
    if (!st)
        st = index_set(set, &gk, err);
    if (st) {
        /* Splits not opened are NULL; close them all through the set. */
        for (size_t s = 0; s < set->n_splits; s++)
            gguf_reader_close(set->splits[s]);
        free(set->splits);
        free(set->split_first);
        free(set->set_by_name);
        free(set);
        return st;
    }
    *out = set;
    return PN_OK;
}

pn_status gguf_split_read_set_id(const gguf_reader *r, bool *has, uint64_t *id, pn_error *err)
{
    *has = false;
    *id = 0;
    const gguf_kv *kv = gguf_reader_find_kv(r, GGUF_SPLIT_KEY_SET_ID);
    if (!kv)
        return PN_OK;
    if (kv->type != GGUF_TYPE_UINT64)
        return pn_error_set(err, PN_ERR_FORMAT,
                            "%s: at byte %llu: key %s has type %s, expected uint64 (the "
                            "identity of the split set this file belongs to)",
                            gguf_reader_name(r), (unsigned long long)gguf_reader_key_offset_(r, kv),
                            GGUF_SPLIT_KEY_SET_ID, gguf_value_type_name(kv->type));
    *has = true;
    *id = kv->v.u64;
    return PN_OK;
}

pn_status gguf_split_check_set_ids(const gguf_reader *const *splits, size_t n, size_t *odd,
                                   pn_error *err)
{
    if (n < 2)
        return PN_OK;
    bool *has = calloc(n, sizeof *has);
    uint64_t *id = calloc(n, sizeof *id);
    if (!has || !id) {
        free(has);
        free(id);
        return pn_error_set(err, PN_ERR_NOMEM, "set identity: out of memory for %zu splits", n);
    }
    pn_status st = PN_OK;
    size_t n_has = 0, n_open = 0;
    for (size_t s = 0; s < n && !st; s++) {
        if (!splits[s])
            continue;
        n_open++;
        st = gguf_split_read_set_id(splits[s], &has[s], &id[s], err);
        n_has += has[s];
        if (st && odd)
            *odd = s;
    }
    /* none has one; or only the first (gguf-split's copy of an earlier set's) */
    if (st || n_has == 0 || (n_has == 1 && splits[0] && has[0]))
        goto done;
    /* the set's identity: the one most splits have, the first split's on a tie */
    size_t ref = SIZE_MAX, ref_count = 0;
    for (size_t s = 0; s < n; s++) {
        if (!splits[s])
            continue;
        size_t c = 0;
        for (size_t t = 0; t < n; t++)
            c += splits[t] && has[t] == has[s] && id[t] == id[s];
        if (c > ref_count) {
            ref = s;
            ref_count = c;
        }
    }
    size_t first_odd = SIZE_MAX;
    for (size_t s = 0; s < n; s++)
        if (splits[s] && (has[s] != has[ref] || id[s] != id[ref])) {
            first_odd = s;
            break;
        }
    if (first_odd == SIZE_MAX)
        goto done;
    const char *path = gguf_reader_name(splits[first_odd]);
    const char *ref_path = gguf_reader_name(splits[ref]);
    size_t n_odd = n_open - ref_count;
    char mine[40], theirs[40];
    if (has[first_odd])
        snprintf(mine, sizeof mine, "is 0x%016llx", (unsigned long long)id[first_odd]);
    else
        snprintf(mine, sizeof mine, "is absent");
    if (has[ref])
        snprintf(theirs, sizeof theirs, "0x%016llx", (unsigned long long)id[ref]);
    else
        snprintf(theirs, sizeof theirs, "none");
    st = pn_error_set(err, PN_ERR_FORMAT,
                      "%s: this split is from another run than the rest of its set: its set "
                      "identity (%s) %s, but %zu of the %zu splits have %s (%s among them)%s; "
                      "a set must come from one run (same source, options and plan): make "
                      "split %zu again with the set's options (pn-quantize --split-index %zu "
                      "--force), or the whole set",
                      path, GGUF_SPLIT_KEY_SET_ID, mine, ref_count, n_open, theirs, ref_path,
                      n_odd > 1 ? " (more splits differ)" : "", first_odd + 1, first_odd);
    if (odd)
        *odd = first_odd;
done:
    free(has);
    free(id);
    return st;
}

pn_status gguf_reader_per_tensor_u32(const gguf_reader *r, const char *key, uint32_t *out,
                                     pn_error *err)
{
    size_t at = 0;
    for (size_t s = 0; s < gguf_reader_n_splits(r); s++) {
        const gguf_reader *sr = gguf_reader_split(r, s);
        size_t n = gguf_reader_n_tensors(sr);
        const gguf_kv *kv = gguf_reader_find_kv(sr, key);
        if (!kv)
            return pn_error_set(err, PN_ERR_FORMAT, "%s: no key '%s' (one per tensor)",
                                gguf_reader_name(sr), key);
        if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_UINT32 || kv->arr_count != n)
            return pn_error_set(
                err, PN_ERR_FORMAT,
                "%s: at byte %llu: key '%s' should be an array of %zu uint32, "
                "one per tensor of this file; it is %s%s of %llu",
                gguf_reader_name(sr), (unsigned long long)gguf_reader_key_offset_(sr, kv), key, n,
                kv->type == GGUF_TYPE_ARRAY ? "an array of " : "a ",
                kv->type == GGUF_TYPE_ARRAY ? gguf_value_type_name(kv->arr_type)
                                            : gguf_value_type_name(kv->type),
                (unsigned long long)(kv->type == GGUF_TYPE_ARRAY ? kv->arr_count : 1));
        for (size_t j = 0; j < n; j++)
            out[at + j] = (uint32_t)gguf_kv_arr_u64(kv, j);
        at += n;
    }
    return PN_OK;
}

/* ------------------------------------------------------------------ */
/* The plan                                                            */

#define PLAN_PAD GGUF_DEFAULT_ALIGNMENT

static const char *limit_option(gguf_split_mode m)
{
    return m == GGUF_SPLIT_MAX_SIZE ? "--split-max-size" : "--split-max-tensors";
}

void gguf_split_plan_free(gguf_split_plan *p)
{
    if (!p)
        return;
    free(p->first);
    free(p->data_bytes);
    memset(p, 0, sizeof *p);
}

/* Bytes of a tensor as --split-max-size counts them; false on overflow. */
static bool padded(uint64_t n, uint64_t *out)
{
    return !__builtin_add_overflow(n, (uint64_t)(PLAN_PAD - 1), out) &&
           ((*out -= *out % PLAN_PAD), true);
}

/* Where the splits start, by gguf-split's rules; first may be NULL (count
 * only). Returns the number of splits, or 0 with err set. */
static size_t walk_plan(const uint64_t *bytes, size_t n, gguf_split_limit lim, size_t *first,
                        uint64_t *data, pn_error *err)
{
    size_t n_splits = 1, cur_first = 0; /* the split being filled starts at cur_first */
    uint64_t cur = 0;
    if (first)
        first[0] = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = 0;
        bool start = false;
        if (lim.mode == GGUF_SPLIT_MAX_TENSORS) {
            start = i > 0 && i % lim.max == 0;
        } else if (lim.mode == GGUF_SPLIT_MAX_SIZE) {
            uint64_t next;
            if (!padded(bytes[i], &b) || __builtin_add_overflow(cur, b, &next)) {
                pn_error_set(err, PN_ERR_USAGE,
                             "tensor %zu: %llu bytes overflow the split size count", i,
                             (unsigned long long)bytes[i]);
                return 0;
            }
            /* i > cur_first: never an empty split. */
            start = next > lim.max && i > cur_first;
            cur = start ? b : next;
        }
        if (start) {
            cur_first = i;
            if (first)
                first[n_splits] = i;
            n_splits++;
        }
        if (data)
            data[n_splits - 1] += b;
    }
    if (first)
        first[n_splits] = n;
    return n_splits;
}

pn_status gguf_split_plan_make(const uint64_t *tensor_bytes, size_t n_tensors,
                               gguf_split_limit limit, gguf_split_plan *plan, pn_error *err)
{
    memset(plan, 0, sizeof *plan);
    if (limit.mode != GGUF_SPLIT_NONE && limit.mode != GGUF_SPLIT_MAX_SIZE &&
        limit.mode != GGUF_SPLIT_MAX_TENSORS)
        return pn_error_set(err, PN_ERR_USAGE, "split plan: unknown mode %d", (int)limit.mode);
    if (limit.mode != GGUF_SPLIT_NONE && limit.max == 0)
        return pn_error_set(err, PN_ERR_USAGE, "%s must be at least 1, not 0",
                            limit_option(limit.mode));
    if (limit.mode == GGUF_SPLIT_MAX_SIZE && n_tensors && !tensor_bytes)
        return pn_error_set(err, PN_ERR_USAGE, "split plan: no tensor sizes for %s",
                            limit_option(limit.mode));
    size_t n_splits;
    if (limit.mode == GGUF_SPLIT_NONE)
        n_splits = 1;
    else if (limit.mode == GGUF_SPLIT_MAX_TENSORS)
        n_splits = n_tensors ? (size_t)((n_tensors - 1) / limit.max + 1) : 1;
    else if (!(n_splits = walk_plan(tensor_bytes, n_tensors, limit, NULL, NULL, err)))
        return PN_ERR_USAGE;
    if (n_splits > GGUF_SPLIT_MAX_COUNT)
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s %llu gives %zu splits of %zu tensors, but split.count (a "
                            "uint16) holds at most %u: raise the limit",
                            limit_option(limit.mode), (unsigned long long)limit.max, n_splits,
                            n_tensors, GGUF_SPLIT_MAX_COUNT);
    if (n_splits > 1 && n_tensors > GGUF_SPLIT_MAX_SET_TENSORS)
        return pn_error_set(err, PN_ERR_USAGE,
                            "a set of %zu tensors: split.tensors.count (an int32) holds at most "
                            "%llu",
                            n_tensors, GGUF_SPLIT_MAX_SET_TENSORS);
    plan->first = calloc(n_splits + 1, sizeof *plan->first);
    plan->data_bytes = calloc(n_splits, sizeof *plan->data_bytes);
    if (!plan->first || !plan->data_bytes) {
        gguf_split_plan_free(plan);
        return pn_error_set(err, PN_ERR_NOMEM, "split plan: out of memory for %zu splits",
                            n_splits);
    }
    plan->n_splits = n_splits;
    if (limit.mode == GGUF_SPLIT_MAX_SIZE) {
        walk_plan(tensor_bytes, n_tensors, limit, plan->first, plan->data_bytes, err);
        return PN_OK;
    }
    for (size_t s = 0; s < n_splits; s++)
        plan->first[s] = limit.mode == GGUF_SPLIT_NONE ? 0 : (size_t)(s * limit.max);
    plan->first[n_splits] = n_tensors;
    for (size_t s = 0; s < n_splits && tensor_bytes; s++)
        for (size_t i = plan->first[s]; i < plan->first[s + 1]; i++) {
            uint64_t b;
            if (!padded(tensor_bytes[i], &b) ||
                __builtin_add_overflow(plan->data_bytes[s], b, &plan->data_bytes[s])) {
                gguf_split_plan_free(plan);
                return pn_error_set(err, PN_ERR_USAGE,
                                    "tensor %zu: %llu bytes overflow the split size count", i,
                                    (unsigned long long)tensor_bytes[i]);
            }
        }
    return PN_OK;
}

pn_status gguf_split_plan_of_writer(const gguf_writer *w, gguf_split_limit limit,
                                    gguf_split_plan *plan, pn_error *err)
{
    size_t n = gguf_writer_n_tensors(w);
    uint64_t *bytes = malloc((n ? n : 1) * sizeof *bytes);
    if (!bytes) {
        memset(plan, 0, sizeof *plan);
        return pn_error_set(err, PN_ERR_NOMEM, "split plan: out of memory for %zu tensors", n);
    }
    for (size_t i = 0; i < n; i++)
        bytes[i] = gguf_writer_tensor_bytes(w, i);
    pn_status st = gguf_split_plan_make(bytes, n, limit, plan, err);
    free(bytes);
    return st;
}

pn_status gguf_split_plan_of_reader(const gguf_reader *src, const uint64_t *tensor_bytes,
                                    gguf_split_plan *plan, pn_error *err)
{
    memset(plan, 0, sizeof *plan);
    size_t n_splits = gguf_reader_n_splits(src);
    plan->first = calloc(n_splits + 1, sizeof *plan->first);
    plan->data_bytes = calloc(n_splits, sizeof *plan->data_bytes);
    if (!plan->first || !plan->data_bytes) {
        gguf_split_plan_free(plan);
        return pn_error_set(err, PN_ERR_NOMEM, "split plan: out of memory for %zu splits",
                            n_splits);
    }
    plan->n_splits = n_splits;
    for (size_t s = 0; s <= n_splits; s++)
        plan->first[s] = gguf_reader_split_first(src, s);
    for (size_t s = 0; s < n_splits; s++)
        for (size_t i = plan->first[s]; i < plan->first[s + 1]; i++) {
            uint64_t b;
            uint64_t raw = tensor_bytes ? tensor_bytes[i] : gguf_reader_tensor(src, i)->size;
            if (!padded(raw, &b) ||
                __builtin_add_overflow(plan->data_bytes[s], b, &plan->data_bytes[s])) {
                gguf_split_plan_free(plan);
                return pn_error_set(err, PN_ERR_USAGE,
                                    "tensor %zu: %llu bytes overflow the split size count", i,
                                    (unsigned long long)raw);
            }
        }
    return PN_OK;
}

size_t gguf_split_plan_split_of(const gguf_split_plan *p, size_t i)
{
    size_t lo = 0, hi = p->n_splits; /* first[lo] <= i < first[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->first[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

pn_status gguf_split_parse_size(const char *text, uint64_t *bytes, pn_error *err)
{
    const char *s = text ? text : "";
    uint64_t v = 0;
    size_t digits = 0;
    bool overflow = false;
    for (; *s >= '0' && *s <= '9'; s++, digits++)
        overflow |= __builtin_mul_overflow(v, 10, &v) ||
                    __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v);
    uint64_t unit = strcmp(s, "M") == 0 ? 1000000ull : strcmp(s, "G") == 0 ? 1000000000ull : 0;
    if (!digits || !unit)
        return pn_error_set(err, PN_ERR_USAGE,
                            "--split-max-size: expected a whole number and M (10^6 bytes) or G "
                            "(10^9 bytes), as gguf-split takes it (50G), found '%s'",
                            text ? text : "");
    if (v == 0)
        return pn_error_set(err, PN_ERR_USAGE, "--split-max-size: '%s' is zero", text);
    if (overflow || __builtin_mul_overflow(v, unit, &v))
        return pn_error_set(err, PN_ERR_USAGE, "--split-max-size: '%s' is too large", text);
    *bytes = v;
    return PN_OK;
}

/* ------------------------------------------------------------------ */
/* Split keys of a writer                                              */

static void remove_split_keys(gguf_writer *w)
{
    gguf_writer_remove_kv(w, GGUF_SPLIT_KEY_NO);
    gguf_writer_remove_kv(w, GGUF_SPLIT_KEY_COUNT);
    gguf_writer_remove_kv(w, GGUF_SPLIT_KEY_TENSORS_COUNT);
}

void gguf_split_remove_keys(gguf_writer *w)
{
    remove_split_keys(w);
    gguf_writer_remove_kv(w, GGUF_SPLIT_KEY_SET_ID);
}

pn_status gguf_split_set_keys(gguf_writer *w, uint32_t index, uint32_t count, uint64_t n_tensors,
                              pn_error *err)
{
    if (!w || !split_args_ok(index, count))
        return pn_error_set(err, PN_ERR_USAGE,
                            "split keys: split %u of %u (split.count is 1 to %u, split.no "
                            "below it)",
                            index, count, GGUF_SPLIT_MAX_COUNT);
    if (n_tensors > GGUF_SPLIT_MAX_SET_TENSORS)
        return pn_error_set(err, PN_ERR_USAGE,
                            "split keys: %llu tensors, but split.tensors.count (an int32) holds "
                            "at most %llu",
                            (unsigned long long)n_tensors, GGUF_SPLIT_MAX_SET_TENSORS);
    remove_split_keys(w);
    pn_status st = gguf_writer_set_u16(w, GGUF_SPLIT_KEY_NO, (uint16_t)index);
    if (!st)
        st = gguf_writer_set_u16(w, GGUF_SPLIT_KEY_COUNT, (uint16_t)count);
    if (!st)
        st = gguf_writer_set_i32(w, GGUF_SPLIT_KEY_TENSORS_COUNT, (int32_t)n_tensors);
    if (st)
        return pn_error_set(err, st, "%s", gguf_writer_last_error(w));
    return PN_OK;
}
