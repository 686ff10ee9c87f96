/* outset.c - a job's output as one file or a split set (see outset.h).
 *
 * Each split goes through NEW -> OPEN (begun, being written) -> CLOSED
 * (flushed, fsynced; its descriptor stays open for validation, an unnamed
 * file exists only through it) -> committed. Splits are written in order, so
 * at most one is OPEN and holds a write buffer; the CLOSED ones hold only a
 * descriptor each until the commit, which is why the number of splits one
 * run writes is checked against the open-file limit.
 */
#include "io/outset.h"
#include "io/source_open.h"
#include "common/mem.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SPLIT_NEW, SPLIT_OPEN, SPLIT_CLOSED };

struct pn_outset {
    gguf_split_plan plan;
    size_t n; /* plan.n_splits */
    size_t n_tensors;
    gguf_writer **w; /* n split writers */
    char **path;     /* n targets, or NULL without a dst */
    int *state;      /* n SPLIT_* */
    uint64_t *bytes; /* n file sizes */
    long only;
    bool force;
    size_t n_per_tensor;
    const char *per_tensor_key[PN_OUTSET_MAX_PER_TENSOR];
    const uint32_t *per_tensor_values[PN_OUTSET_MAX_PER_TENSOR];
    uint64_t writeback_bytes, drop_behind_bytes;
    size_t cur; /* the split being written (state OPEN), or SIZE_MAX */
    /* file offsets of the open split: written back from cur_synced on,
     * on the device and dropped before cur_dropped */
    uint64_t cur_synced, cur_dropped;
    bool cur_sized; /* the open split's file has its final size (ftruncate) */
    /* where the open split's data begins: computed once when it opens, since
     * the writer computes it from every key and tensor name, and the readback
     * asks after each tensor written (per tensor, that was quadratic) */
    uint64_t cur_data_offset;
    char *notes;
    char *plan_note;    /* the source's splits the plan left out (keep_split_view) */
    char *split_prefix; /* a split output: PREFIX of PREFIX-%05d-of-%05d.gguf, else NULL */
};

void pn_outset_opts_init(pn_outset_opts *o)
{
    memset(o, 0, sizeof *o);
    o->only = -1;
}

size_t pn_outset_n_splits(const pn_outset *os)
{
    return os->n;
}
const gguf_split_plan *pn_outset_plan(const pn_outset *os)
{
    return &os->plan;
}
const char *pn_outset_path(const pn_outset *os, size_t s)
{
    return s < os->n && os->path ? os->path[s] : NULL;
}
uint64_t pn_outset_split_bytes(const pn_outset *os, size_t s)
{
    return s < os->n ? os->bytes[s] : 0;
}
bool pn_outset_writes(const pn_outset *os, size_t s)
{
    return s < os->n && (os->only < 0 || (size_t)os->only == s);
}
size_t pn_outset_split_of(const pn_outset *os, size_t i)
{
    return gguf_split_plan_split_of(&os->plan, i);
}
bool pn_outset_writes_tensor(const pn_outset *os, size_t i)
{
    return i < os->n_tensors && pn_outset_writes(os, pn_outset_split_of(os, i));
}

uint64_t pn_outset_total_bytes(const pn_outset *os)
{
    uint64_t t = 0;
    for (size_t s = 0; s < os->n; s++)
        t += os->bytes[s];
    return t;
}

uint64_t pn_outset_written_bytes(const pn_outset *os)
{
    uint64_t t = 0;
    for (size_t s = 0; s < os->n; s++)
        if (pn_outset_writes(os, s))
            t += os->bytes[s];
    return t;
}

const char *pn_outset_plan_note(const pn_outset *os)
{
    return os->plan_note;
}

const char *pn_outset_notes(const pn_outset *os)
{
    return os->notes;
}

void pn_outset_free(pn_outset *os)
{
    if (!os)
        return;
    for (size_t s = 0; s < os->n; s++) {
        if (os->w)
            gguf_writer_free(os->w[s]); /* aborts what is not committed */
        if (os->path)
            free(os->path[s]);
    }
    PN_FREE_ALL(os->w, os->path, os->state, os->bytes, os->notes, os->plan_note, os->split_prefix);
    gguf_split_plan_free(&os->plan);
    free(os);
}

/* Each split this run writes keeps a descriptor from its begin to the
 * commit: refuse a set that the open-file limit cannot hold, before any
 * work, rather than fail after hours. */
static pn_status check_open_files(size_t n_written, pn_error *err)
{
    struct rlimit rl;
    const size_t spare = 64; /* the source's splits, the standard streams, ... */
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        n_written + spare <= rl.rlim_cur)
        return PN_OK;
    return pn_error_set(err, PN_ERR_USAGE,
                        "the plan has %zu splits, each open until the set is committed, but "
                        "this process may open %llu files: raise the limit (ulimit -n) or the "
                        "split size",
                        n_written, (unsigned long long)rl.rlim_cur);
}

/* The split of the set src that its tensor k is in. */
static size_t split_holding(const gguf_reader *src, size_t k)
{
    size_t s = 0;
    while (s + 1 < gguf_reader_n_splits(src) && gguf_reader_split_first(src, s + 1) <= k)
        s++;
    return s;
}

/* --keep-split of a source read without some of its tensors: each of the
 * view's tensors goes to the split its name is in; splits left empty are
 * left out, named in *note (malloc'd). split_of is the view's n tensors'. */
static pn_status plan_of_view(const gguf_writer *model, const pn_outset_opts *o, size_t *split_of,
                              gguf_split_plan *plan, char **note, pn_error *err)
{
    const gguf_reader *set = o->keep_split, *view = o->keep_split_view;
    const size_t n = gguf_writer_n_tensors(model), n_set = gguf_reader_n_splits(set);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = gguf_reader_tensor(view, i)->name;
        long k = gguf_reader_find_tensor(set, name);
        if (k < 0)
            return pn_error_set(err, PN_ERR_USAGE, "--keep-split: tensor %s is not in the set %s",
                                name, gguf_reader_name(set));
        split_of[i] = split_holding(set, (size_t)k);
        if (i && split_of[i] < split_of[i - 1])
            return pn_error_set(err, PN_ERR_USAGE,
                                "--keep-split: tensor %s comes before the tensors of an earlier "
                                "split of %s",
                                name, gguf_reader_name(set));
        m += !i || split_of[i] != split_of[i - 1];
    }
    memset(plan, 0, sizeof *plan);
    plan->n_splits = m ? m : 1;
    plan->first = calloc(plan->n_splits + 1, sizeof *plan->first);
    plan->data_bytes = calloc(plan->n_splits, sizeof *plan->data_bytes);
    if (!plan->first || !plan->data_bytes) {
        gguf_split_plan_free(plan);
        return pn_error_set(err, PN_ERR_NOMEM, "split plan: out of memory");
    }
    size_t s = 0;
    for (size_t i = 0; i < n; i++) {
        if (i && split_of[i] != split_of[i - 1])
            plan->first[++s] = i;
        uint64_t b = gguf_writer_tensor_bytes(model, i), padded;
        if (__builtin_add_overflow(b, 31, &padded) ||
            __builtin_add_overflow(plan->data_bytes[s], padded & ~(uint64_t)31,
                                   &plan->data_bytes[s])) {
            gguf_split_plan_free(plan);
            return pn_error_set(err, PN_ERR_USAGE, "tensor %zu: %llu bytes overflow the split size",
                                i, (unsigned long long)b);
        }
    }
    plan->first[plan->n_splits] = n;
    size_t len = 0;
    FILE *f = m < n_set ? open_memstream(note, &len) : NULL;
    for (size_t k = 0, i = 0; f && k < n_set; k++) {
        while (i < n && split_of[i] < k)
            i++;
        if (i < n && split_of[i] == k)
            continue;
        fprintf(f,
                "%s--keep-split: split %zu of %zu of the source, %s, holds only tensors this "
                "run leaves out",
                len || ftell(f) ? "\n" : "", k + 1, n_set,
                gguf_reader_name(gguf_reader_split(set, k)));
    }
    if (f) {
        fprintf(f, ": the output has %zu split%s\n", plan->n_splits,
                plan->n_splits == 1 ? "" : "s");
        fclose(f);
    }
    return PN_OK;
}

static pn_status make_plan(const gguf_writer *model, const pn_outset_opts *o, gguf_split_plan *plan,
                           char **note, pn_error *err)
{
    if (!o->keep_split)
        return gguf_split_plan_of_writer(model, o->limit, plan, err);
    if (o->keep_split_view &&
        gguf_writer_n_tensors(model) == gguf_reader_n_tensors(o->keep_split_view)) {
        size_t n = gguf_writer_n_tensors(model);
        size_t *split_of = malloc((n ? n : 1) * sizeof *split_of);
        if (!split_of)
            return pn_error_set(err, PN_ERR_NOMEM, "split plan: out of memory");
        pn_status st = plan_of_view(model, o, split_of, plan, note, err);
        free(split_of);
        return st;
    }
    size_t n = gguf_writer_n_tensors(model);
    if (n != gguf_reader_n_tensors(o->keep_split))
        return pn_error_set(err, PN_ERR_USAGE,
                            "--keep-split: the output has %zu tensors, the source %zu", n,
                            gguf_reader_n_tensors(o->keep_split));
    uint64_t *bytes = malloc((n ? n : 1) * sizeof *bytes);
    if (!bytes)
        return pn_error_set(err, PN_ERR_NOMEM, "split plan: out of memory for %zu tensors", n);
    for (size_t i = 0; i < n; i++)
        bytes[i] = gguf_writer_tensor_bytes(model, i);
    pn_status st = gguf_split_plan_of_reader(o->keep_split, bytes, plan, err);
    free(bytes);
    return st;
}

pn_status pn_outset_make(const gguf_writer *model, const char *dst, const pn_outset_opts *o,
                         pn_outset **out, pn_error *err)
{
    *out = NULL;
    pn_outset *os = calloc(1, sizeof *os);
    if (!os)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    os->only = o->only;
    os->force = o->force;
    if (o->n_per_tensor > PN_OUTSET_MAX_PER_TENSOR) {
        free(os);
        return pn_error_set(err, PN_ERR_USAGE, "output set: %zu per-tensor keys, at most %d",
                            o->n_per_tensor, PN_OUTSET_MAX_PER_TENSOR);
    }
    os->n_per_tensor = o->n_per_tensor;
    for (size_t k = 0; k < o->n_per_tensor; k++) {
        os->per_tensor_key[k] = o->per_tensor_key[k];
        os->per_tensor_values[k] = o->per_tensor_values[k];
    }
    os->writeback_bytes = o->writeback_bytes;
    os->drop_behind_bytes = o->drop_behind_bytes;
    os->cur = SIZE_MAX;
    os->n_tensors = gguf_writer_n_tensors(model);
    pn_status st = make_plan(model, o, &os->plan, &os->plan_note, err);
    if (st) {
        free(os);
        return st;
    }
    os->n = os->plan.n_splits;
    if (os->only >= 0 && (size_t)os->only >= os->n) {
        st = pn_error_set(err, PN_ERR_USAGE,
                          "--split-index %ld: the plan has %zu split%s, numbered 0 to %zu",
                          os->only, os->n, os->n == 1 ? "" : "s", os->n - 1);
        goto fail;
    }
    st = check_open_files(os->only >= 0 ? 1 : os->n, err);
    if (st)
        goto fail;
    os->w = calloc(os->n, sizeof *os->w);
    os->state = calloc(os->n, sizeof *os->state);
    os->bytes = calloc(os->n, sizeof *os->bytes);
    if (dst)
        os->path = calloc(os->n, sizeof *os->path);
    if (!os->w || !os->state || !os->bytes || (dst && !os->path)) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory for %zu splits", os->n);
        goto fail;
    }
    /* the keys the model has (gguf_writer_new_split wants each of them) */
    const char *keys[PN_OUTSET_MAX_PER_TENSOR];
    size_t n_keys = 0;
    for (size_t k = 0; k < os->n_per_tensor; k++)
        if (os->per_tensor_key[k] && gguf_writer_has_kv(model, os->per_tensor_key[k]))
            keys[n_keys++] = os->per_tensor_key[k];
    for (size_t s = 0; s < os->n; s++) {
        st = gguf_writer_new_split(model, &os->plan, s, keys, n_keys, &os->w[s], err);
        if (st)
            goto fail;
        gguf_writer_set_replace(os->w[s], o->force);
        os->bytes[s] = gguf_writer_file_bytes(os->w[s]);
        if (dst) {
            os->path[s] =
                os->n == 1 ? strdup(dst) : gguf_split_path(dst, (uint32_t)s, (uint32_t)os->n);
            if (!os->path[s]) {
                st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for split names", dst);
                goto fail;
            }
        }
    }
    if (dst && (o->limit.mode != GGUF_SPLIT_NONE || o->keep_split)) {
        /* the names of any set under DST's name: PREFIX-%05d-of-%05d.gguf */
        char *first = gguf_split_path(dst, 0, 2);
        const size_t tail = sizeof "-00001-of-00002.gguf" - 1;
        if (!first || strlen(first) <= tail) {
            free(first);
            st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for split names", dst);
            goto fail;
        }
        first[strlen(first) - tail] = '\0';
        os->split_prefix = first;
    }
    *out = os;
    return PN_OK;
fail:
    pn_outset_free(os);
    return st;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files under DST's name of another split set than this run's: PREFIX-
 * %05d-of-%05d.gguf in DST's folder that are none of this plan's names (an
 * earlier run's with another --split-max-size, or a run beside this one).
 * Their paths into *found (malloc'd, with *n_found; NULL when none). */
static pn_status other_sets_files(const pn_outset *os, char ***found, size_t *n_found,
                                  pn_error *err)
{
    *found = NULL;
    *n_found = 0;
    if (!os->split_prefix)
        return PN_OK;
    const char *slash = strrchr(os->split_prefix, '/');
    const char *base = slash ? slash + 1 : os->split_prefix;
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s",
             slash ? (int)(slash - os->split_prefix) + (slash == os->split_prefix) : 1,
             slash ? os->split_prefix : ".");
    DIR *d = opendir(dir);
    if (!d)
        return PN_OK; /* the folder is checked, and refused, where the output is made */
    const size_t nb = strlen(base);
    pn_status st = PN_OK;
    for (struct dirent *e; st == PN_OK && (e = readdir(d));) {
        unsigned k = 0, n = 0;
        int used = 0;
        const char *name = e->d_name;
        if (strncmp(name, base, nb) != 0 ||
            strlen(name + nb) != sizeof "-00001-of-00002.gguf" - 1 ||
            sscanf(name + nb, "-%5u-of-%5u.gguf%n", &k, &n, &used) != 2 || used != 20 || k == 0 ||
            k > n)
            continue;
        bool ours = false;
        for (size_t s = 0; os->path && s < os->n && !ours; s++) {
            const char *b = strrchr(os->path[s], '/');
            ours = strcmp(b ? b + 1 : os->path[s], name) == 0;
        }
        if (ours)
            continue;
        char **grown = realloc(*found, (*n_found + 1) * sizeof *grown);
        size_t len = strlen(dir) + strlen(name) + 2;
        char *path = grown ? malloc(len) : NULL;
        if (grown)
            *found = grown;
        if (!path) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            break;
        }
        snprintf(path, len, "%s%s%s", slash ? dir : "", slash ? "/" : "", name);
        (*found)[(*n_found)++] = path;
    }
    closedir(d);
    if (*n_found > 1) /* the message names the first by name, whatever readdir's order */
        qsort(*found, *n_found, sizeof **found, cmp_str);
    return st;
}

static void free_paths(char **paths, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

/* Refuses (PN_ERR_EXISTS) the files of another set under DST's name
 * without --force, as an existing output is refused; when is what the
 * message says of them ("" before the run). */
static pn_status refuse_other_sets(const pn_outset *os, char **found, size_t n_found,
                                   const char *when, pn_error *err)
{
    if (!n_found || os->force)
        return PN_OK;
    return pn_error_set(err, PN_ERR_EXISTS,
                        "%s: a file of another split set under the name %s.gguf%s (%zu such "
                        "file%s; this run writes %zu split%s); use --force to replace that set "
                        "(its files are removed once this one is in place)",
                        found[0], os->split_prefix, when, n_found, n_found == 1 ? "" : "s", os->n,
                        os->n == 1 ? "" : "s");
}

pn_status pn_outset_check_targets(const pn_outset *os, const gguf_reader *input, pn_error *err)
{
    if (!os->path)
        return pn_error_set(err, PN_ERR_USAGE, "no output file given");
    for (size_t s = 0; s < os->n; s++) {
        if (!pn_outset_writes(os, s))
            continue;
        const char *p = os->path[s];
        /* every file the input is read from (a folder's: each of its files) */
        for (size_t k = 0; input && k < gguf_reader_n_splits(input); k++) {
            pn_status st = pn_source_check_target(gguf_reader_name(gguf_reader_split(input, k)), p,
                                                  "the output", err);
            if (st != PN_OK)
                return st;
        }
        struct stat ts;
        if (stat(p, &ts) != 0)
            continue;
        if (S_ISDIR(ts.st_mode))
            return pn_error_set(err, PN_ERR_IO, "%s: output is a directory", p);
        if (!os->force)
            return pn_error_set(err, PN_ERR_EXISTS, "%s: output exists; use --force to replace it",
                                p);
    }
    char **found = NULL;
    size_t n_found = 0;
    pn_status st = other_sets_files(os, &found, &n_found, err);
    if (st == PN_OK)
        st = refuse_other_sets(os, found, n_found, "", err);
    free_paths(found, n_found);
    return st;
}

static void add_note(pn_outset *os, const char *note)
{
    size_t had = os->notes ? strlen(os->notes) : 0, n = strlen(note);
    char *grown = realloc(os->notes, had + n + 2);
    if (!grown)
        return; /* a note is advice: losing it is not an error */
    if (had)
        grown[had++] = '\n';
    memcpy(grown + had, note, n + 1);
    os->notes = grown;
}

static pn_status begin_split(pn_outset *os, size_t s, pn_error *err)
{
    if (!os->path)
        return pn_error_set(err, PN_ERR_USAGE, "no output file given");
    pn_status st = gguf_writer_begin(os->w[s], os->path[s], err);
    if (st)
        return st;
    if (gguf_writer_note(os->w[s]))
        add_note(os, gguf_writer_note(os->w[s]));
    os->state[s] = SPLIT_OPEN;
    os->cur = s;
    os->cur_synced = os->cur_dropped = 0;
    os->cur_data_offset = gguf_writer_data_offset(os->w[s]);
    /* given its final size, the file can be opened as GGUF while it is
     * written, to read back what is settled (pn_outset_open_settled); the
     * holes are written over in order and the size is the writer's own */
    os->cur_sized =
        os->drop_behind_bytes && os->writeback_bytes &&
        ftruncate(gguf_writer_fd(os->w[s]), (off_t)gguf_writer_file_bytes(os->w[s])) == 0;
    return PN_OK;
}

/* Patches split s's own cut of the per-tensor keys, then closes it. */
static pn_status close_split(pn_outset *os, size_t s, pn_error *err)
{
    const size_t lo = os->plan.first[s], hi = os->plan.first[s + 1];
    pn_status st = PN_OK;
    for (size_t k = 0; k < os->n_per_tensor && !st; k++)
        if (os->per_tensor_key[k] && os->per_tensor_values[k] &&
            gguf_writer_has_kv(os->w[s], os->per_tensor_key[k]))
            st = gguf_writer_patch_arr(os->w[s], os->per_tensor_key[k],
                                       os->per_tensor_values[k] + lo, hi - lo, err);
    if (!st)
        st = gguf_writer_close(os->w[s], err);
    if (st)
        return st;
    os->state[s] = SPLIT_CLOSED;
    os->cur = SIZE_MAX;
    return PN_OK;
}

pn_status pn_outset_begin(pn_outset *os, pn_error *err)
{
    for (size_t s = 0; s < os->n; s++)
        if (pn_outset_writes(os, s))
            return os->state[s] == SPLIT_NEW ? begin_split(os, s, err) : PN_OK;
    return PN_OK;
}

/* The writer of tensor i's split, begun (the split before it closed) when
 * i is its first tensor. */
static pn_status writer_of(pn_outset *os, size_t i, gguf_writer **w, pn_error *err)
{
    size_t s =
        os->cur != SIZE_MAX && i >= os->plan.first[os->cur] && i < os->plan.first[os->cur + 1]
            ? os->cur
            : pn_outset_split_of(os, i);
    if (i >= os->n_tensors || !pn_outset_writes(os, s))
        return pn_error_set(err, PN_ERR_USAGE,
                            "output set: tensor %zu is in split %zu, which this run does not "
                            "write",
                            i, s);
    if (os->state[s] != SPLIT_OPEN) {
        if (os->state[s] == SPLIT_CLOSED)
            return pn_error_set(err, PN_ERR_USAGE, "%s: tensor %zu after the split was closed",
                                os->path ? os->path[s] : "output set", i);
        pn_status st = os->cur != SIZE_MAX ? close_split(os, os->cur, err) : PN_OK;
        if (!st)
            st = begin_split(os, s, err);
        if (st)
            return st;
    }
    *w = os->w[s];
    return PN_OK;
}

/* Starts the writeback of what the open split's writer has handed to the
 * file, and drops what lies drop_behind_bytes behind from the page cache
 * once it is on the device (only clean pages are dropped: nothing written
 * is lost). */
static void written(pn_outset *os, gguf_writer *w)
{
    const uint64_t in_file = gguf_writer_bytes_flushed(w);
    if (!os->writeback_bytes || in_file - os->cur_synced < os->writeback_bytes)
        return;
    const int fd = gguf_writer_fd(w);
    (void)sync_file_range(fd, (off_t)os->cur_synced, (off_t)(in_file - os->cur_synced),
                          SYNC_FILE_RANGE_WRITE);
    os->cur_synced = in_file;
    if (!os->drop_behind_bytes || os->cur_synced < os->drop_behind_bytes)
        return;
    const uint64_t to = os->cur_synced - os->drop_behind_bytes;
    if (to <= os->cur_dropped)
        return;
    const off_t at = (off_t)os->cur_dropped, len = (off_t)(to - os->cur_dropped);
    (void)sync_file_range(fd, at, len,
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER);
    (void)posix_fadvise(fd, at, len, POSIX_FADV_DONTNEED);
    os->cur_dropped = to;
}

size_t pn_outset_settled(const pn_outset *os, uint64_t *bytes)
{
    *bytes = 0;
    if (os->cur == SIZE_MAX || !os->cur_sized)
        return SIZE_MAX;
    *bytes = os->cur_dropped;
    return os->cur;
}

pn_status pn_outset_open_settled(const pn_outset *os, size_t s, gguf_reader **out, pn_error *err)
{
    *out = NULL;
    if (s != os->cur || !os->cur_sized || os->cur_dropped < os->cur_data_offset)
        return pn_error_set(err, PN_ERR_USAGE, "output set: split %zu has nothing settled", s);
    return gguf_reader_open_fd_flags(gguf_writer_fd(os->w[s]), os->path[s], GGUF_OPEN_HEADER_ONLY,
                                     out, err);
}

pn_status pn_outset_write(pn_outset *os, size_t i, const void *data, size_t n, pn_error *err)
{
    gguf_writer *w = NULL;
    pn_status st = writer_of(os, i, &w, err);
    if (!st)
        st = gguf_writer_write(w, data, n, err);
    if (!st)
        written(os, w);
    return st;
}

pn_status pn_outset_copy_from(pn_outset *os, size_t i, int fd, uint64_t at, size_t n,
                              const char *from, pn_error *err)
{
    gguf_writer *w = NULL;
    pn_status st = writer_of(os, i, &w, err);
    if (!st)
        st = gguf_writer_copy_from(w, fd, at, n, from, err);
    if (!st)
        written(os, w);
    return st;
}

pn_status pn_outset_close(pn_outset *os, pn_error *err)
{
    for (size_t s = 0; s < os->n; s++) {
        if (!pn_outset_writes(os, s) || os->state[s] == SPLIT_CLOSED)
            continue;
        pn_status st = os->state[s] == SPLIT_NEW ? begin_split(os, s, err) : PN_OK;
        if (!st)
            st = close_split(os, s, err);
        if (st)
            return st;
    }
    return PN_OK;
}

pn_status pn_outset_open_written(const pn_outset *os, size_t s, gguf_reader **out, pn_error *err)
{
    *out = NULL;
    if (s >= os->n || os->state[s] != SPLIT_CLOSED)
        return pn_error_set(err, PN_ERR_USAGE, "output set: split %zu is not written", s);
    const char *path = os->path[s];
    gguf_reader *r = NULL;
    pn_status st = gguf_reader_open_fd(gguf_writer_fd(os->w[s]), path, &r, err);
    if (st)
        return st;
    const size_t want = os->plan.first[s + 1] - os->plan.first[s];
    gguf_split_keys k;
    st = gguf_split_read_keys(r, &k, err);
    if (!st && gguf_reader_n_tensors(r) != want)
        st = pn_error_set(err, PN_ERR_MISMATCH, "%s: %zu tensors written, %zu expected", path,
                          gguf_reader_n_tensors(r), want);
    if (!st && os->n == 1 && (k.has_no || k.has_count || k.has_tensors_count))
        st = pn_error_set(err, PN_ERR_MISMATCH, "%s: a file of one has split keys", path);
    if (!st && os->n > 1 &&
        (!k.has_no || !k.has_count || !k.has_tensors_count || k.no != s || k.count != os->n ||
         (uint64_t)(int64_t)k.tensors_count != os->n_tensors))
        st = pn_error_set(err, PN_ERR_MISMATCH,
                          "%s: its split keys do not say split %zu of %zu of a set of %zu tensors",
                          path, s, os->n, os->n_tensors);
    if (st) {
        gguf_reader_close(r);
        return st;
    }
    *out = r;
    return PN_OK;
}

pn_status pn_outset_commit(pn_outset *os, pn_error *err)
{
    gguf_writer **ws = calloc(os->n, sizeof *ws);
    if (!ws)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t s = 0; s < os->n; s++)
        if (pn_outset_writes(os, s))
            ws[k++] = os->w[s];
    /* a split set is put in place holding the lock of its folder, after
     * looking again for another set's files under DST's name: of two runs
     * beside each other with other plans, the second to commit loses (with
     * the same plan, its first name already there does), as a single file
     * does; with --force, the other set's files go once this set is in place */
    int lock = -1;
    if (os->split_prefix) {
        const char *slash = strrchr(os->split_prefix, '/');
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s",
                 slash ? (int)(slash - os->split_prefix) + (slash == os->split_prefix) : 1,
                 slash ? os->split_prefix : ".");
        lock = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (lock >= 0)
            flock(lock, LOCK_EX);
    }
    char **found = NULL;
    size_t n_found = 0;
    pn_status st = other_sets_files(os, &found, &n_found, err);
    if (st == PN_OK)
        st = refuse_other_sets(os, found, n_found, ", which appeared during the run", err);
    /* ws[0] is the first split written: put in place last */
    if (st == PN_OK)
        st = gguf_writer_commit_set(ws, k, err);
    else
        pn_outset_abort(os);
    for (size_t i = 0; st == PN_OK && i < n_found; i++)
        unlink(found[i]); /* --force: the earlier set, replaced (a file gone already is fine) */
    if (lock >= 0)
        close(lock); /* releases the lock */
    free_paths(found, n_found);
    free(ws);
    return st;
}

void pn_outset_abort(pn_outset *os)
{
    for (size_t s = 0; os && s < os->n; s++)
        gguf_writer_abort(os->w[s]);
}
