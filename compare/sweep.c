/* sweep.c - pn-compare --sweep (sweep.h): the mixes of one source made in a
 * work folder (the stock types by stock llama.cpp's quantizer in a child,
 * sweep_stock.c), one comparison of all of them, and what is kept. */
#include "compare/sweep.h"
#include "compare/sweep_stock.h"
#include "compare/kl_measure.h"
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/model_check.h"
#include "gguf/pn_keys.h"
#include "io/source_id.h"
#include "io/source_open.h"
#include "mix/recipe.h"
#include "pipeline/quantize.h"

#define MEASUREMENT_NAME "measurement.pnm"
#define KL_MEASUREMENT_NAME "measurement.kl"

static const char *const k_order_names[PN_SWEEP_N_ORDERS] = { "error", "forward", "kl" };

const char *pn_sweep_order_name(pn_sweep_order order)
{
    return (unsigned)order < PN_SWEEP_N_ORDERS ? k_order_names[order] : "?";
}

pn_status pn_sweep_orders_parse(const char *list, pn_sweep_order *out, size_t *n, pn_error *err)
{
    *n = 0;
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        int found = -1;
        for (int k = 0; k < PN_SWEEP_N_ORDERS; k++)
            if (len == strlen(k_order_names[k]) && strncmp(p, k_order_names[k], len) == 0)
                found = k;
        if (found < 0)
            return pn_error_set(err, PN_ERR_USAGE,
                                "--measure: '%.*s' is not an order: expected a list of error, "
                                "forward and kl (error,kl)",
                                (int)(len < 40 ? len : 40), p);
        for (size_t i = 0; i < *n; i++)
            if (out[i] == (pn_sweep_order)found)
                return pn_error_set(err, PN_ERR_USAGE,
                                    "--measure: %s is given twice: each order makes its mixes "
                                    "once",
                                    k_order_names[found]);
        out[(*n)++] = (pn_sweep_order)found;
        p += len;
        if (!*p)
            return PN_OK;
    }
}

/* What an order adds to a mix's file name, its label, and its name when it
 * failed: nothing for the error order (today's names), else the order. */
static const char *const k_order_file[PN_SWEEP_N_ORDERS] = { "", "-forward", "-kl" };
static const char *const k_order_label[PN_SWEEP_N_ORDERS] = { "", " by forward", " by KL" };
static const char *const k_order_failed[PN_SWEEP_N_ORDERS] = { "", " (forward)", " (kl)" };

void pn_sweep_opts_init(pn_sweep_opts *o)
{
    memset(o, 0, sizeof *o);
    pn_compare_opts_init(&o->compare);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool cancelled(const pn_sweep_opts *o)
{
    return o->compare.cancel && *o->compare.cancel;
}

/* ---- the work folder ---- */

typedef struct work {
    char *dir;        /* the private folder */
    bool made_keep;   /* keep_dir was made by this run */
    int keep_fd;      /* keep_dir, locked (flock) while this sweep runs; -1 without */
    char recipe[128]; /* the recipe's mix name (P0k): a kept PN mix's label starts so */
    /* the orders the PN mixes are made in (the options' or the default) */
    pn_sweep_order orders[PN_SWEEP_N_ORDERS];
    size_t n_orders;
    /* the measurements, [0] the error one (MEASUREMENT_NAME: the error and
     * the forward order), [1] the KL one (KL_MEASUREMENT_NAME): needed by
     * some PN mix; found in keep_dir (used, and it stays) */
    bool need_meas[2], kept_meas[2];
    /* --measure kl: the measurement, as promotion takes it by gain and by
     * gain per byte (the --target-size mix) */
    pn_kl_measurement *kl;
    pn_measurement *kl_gain, *kl_per_byte;
} work;

/* Removes the files this run put in the folder (it holds nothing else),
 * then the folder. */
static void work_remove(work *w)
{
    if (!w->dir)
        return;
    pn_remove_folder(w->dir);
    free(w->dir);
    w->dir = NULL;
    pn_kl_measurement_free(w->kl);
    pn_measurement_free(w->kl_gain);
    pn_measurement_free(w->kl_per_byte);
    w->kl = NULL;
    w->kl_gain = w->kl_per_byte = NULL;
}

/* Lets keep_dir go (its lock). */
static void work_unlock(work *w)
{
    if (w->keep_fd >= 0)
        close(w->keep_fd);
    w->keep_fd = -1;
}

/* ---- the report ---- */

void pn_sweep_report_free(pn_sweep_report *rep)
{
    for (size_t i = 0; i < rep->n_mixes; i++)
        free(rep->mixes[i].kept);
    free(rep->mixes);
    free(rep->kept_measurement[0]);
    free(rep->kept_measurement[1]);
    pn_compare_report_free(&rep->compare);
    memset(rep, 0, sizeof *rep);
}

/* Moves name from the work folder into keep_dir without replacing anything;
 * the kept path in *kept. */
static pn_status keep_file(const char *work_dir, const char *keep_dir, const char *name,
                           char **kept, pn_error *err)
{
    char *from = pn_path_join(work_dir, name), *to = pn_path_join(keep_dir, name);
    pn_status st = PN_OK;
    if (!from || !to)
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    else if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) != 0)
        st =
            pn_error_set(err, PN_ERR_IO, "%s: cannot keep it as %s: %s", from, to, strerror(errno));
    free(from);
    if (st == PN_OK)
        *kept = to;
    else
        free(to);
    return st;
}

/* With keep_dir, every mix made and the measurement are moved there. */
static pn_status keep_all(const pn_sweep_opts *o, const work *w, pn_sweep_report *rep,
                          pn_error *err)
{
    if (!o->keep_dir)
        return PN_OK;
    pn_status st = PN_OK;
    for (size_t i = 0; i < rep->n_mixes && st == PN_OK; i++)
        if (rep->mixes[i].status == PN_OK && !rep->mixes[i].kept)
            st = keep_file(w->dir, o->keep_dir, rep->mixes[i].file, &rep->mixes[i].kept, err);
    for (int k = 0; k < 2 && st == PN_OK; k++) {
        const char *name = k ? KL_MEASUREMENT_NAME : MEASUREMENT_NAME;
        char *meas = pn_path_join(w->dir, name);
        if (!meas)
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        else if (w->need_meas[k] && !w->kept_meas[k] && access(meas, F_OK) == 0)
            st = keep_file(w->dir, o->keep_dir, name, &rep->kept_measurement[k], err);
        free(meas);
    }
    return st;
}

/* The orders asked for (or the default), each once, kl with a calibration
 * text and a calibration text with kl. */
static pn_status plan_orders(const pn_sweep_opts *o, work *w, pn_error *err)
{
    if (o->n_orders == 0) {
        w->orders[0] = o->calibration_path ? PN_SWEEP_BY_KL : PN_SWEEP_BY_ERROR;
        w->n_orders = 1;
    } else if (o->n_orders > PN_SWEEP_N_ORDERS || !o->orders) {
        return pn_error_set(err, PN_ERR_USAGE, "--measure: %zu orders, at most %d", o->n_orders,
                            PN_SWEEP_N_ORDERS);
    } else {
        for (size_t i = 0; i < o->n_orders; i++) {
            if ((unsigned)o->orders[i] >= PN_SWEEP_N_ORDERS)
                return pn_error_set(err, PN_ERR_USAGE, "--measure: order %d is not one",
                                    (int)o->orders[i]);
            for (size_t j = 0; j < i; j++)
                if (o->orders[j] == o->orders[i])
                    return pn_error_set(err, PN_ERR_USAGE, "--measure: %s is given twice",
                                        pn_sweep_order_name(o->orders[i]));
            w->orders[i] = o->orders[i];
        }
        w->n_orders = o->n_orders;
    }
    bool kl = false;
    for (size_t i = 0; i < w->n_orders; i++)
        kl |= w->orders[i] == PN_SWEEP_BY_KL;
    if (kl && !o->calibration_path)
        return pn_error_set(err, PN_ERR_USAGE,
                            "--measure kl needs --calibration FILE, a text other than --text");
    if (!kl && o->calibration_path)
        return pn_error_set(err, PN_ERR_USAGE, "--calibration goes with --measure kl");
    bool pn_mixes = o->n_promote > 0 || o->target_size;
    for (size_t i = 0; i < w->n_orders && pn_mixes; i++)
        w->need_meas[w->orders[i] == PN_SWEEP_BY_KL] = true;
    return PN_OK;
}

/* The mixes asked for, named and checked before anything runs: the PN mixes
 * order by order, then the stock types. */
static pn_status plan_mixes(const pn_sweep_opts *o, const work *w, pn_sweep_report *rep,
                            pn_error *err)
{
    size_t n_pn = o->n_promote + (o->target_size ? 1 : 0);
    size_t n = n_pn * w->n_orders + o->n_stock;
    if (n == 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "--sweep: no mix to make (give --promote, "
                            "--target-size or --stock)");
    if (n > PN_SWEEP_MAX_MIXES)
        return pn_error_set(err, PN_ERR_USAGE, "--sweep: %zu mixes, at most %d", n,
                            PN_SWEEP_MAX_MIXES);
    rep->mixes = calloc(n, sizeof *rep->mixes);
    if (!rep->mixes)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    rep->n_mixes = n;
    size_t k = 0;
    for (size_t r = 0; r < w->n_orders; r++) {
        /* a mix ranked by KL is another mix than the same count by error */
        pn_sweep_order by = w->orders[r];
        for (size_t i = 0; i < o->n_promote; i++, k++) {
            pn_sweep_mix *m = &rep->mixes[k];
            if (o->promote[i] < 0)
                return pn_error_set(err, PN_ERR_USAGE, "--promote: %d is not a count",
                                    o->promote[i]);
            m->order = by;
            m->promote = o->promote[i];
            snprintf(m->name, sizeof m->name, "promote %d%s", o->promote[i], k_order_failed[by]);
            snprintf(m->file, sizeof m->file, "promote-%d%s.gguf", o->promote[i], k_order_file[by]);
        }
        if (o->target_size) {
            pn_sweep_mix *m = &rep->mixes[k++];
            m->order = by;
            m->promote = -1;
            snprintf(m->name, sizeof m->name, "target %llu B%s", (unsigned long long)o->target_size,
                     k_order_failed[by]);
            snprintf(m->file, sizeof m->file, "target-%llu%s.gguf",
                     (unsigned long long)o->target_size, k_order_file[by]);
        }
    }
    for (size_t i = 0; i < o->n_stock; i++, k++) {
        pn_sweep_mix *m = &rep->mixes[k];
        m->kind = PN_SWEEP_STOCK;
        m->promote = -1;
        const char *type = pn_sweep_stock_canonical(o->stock[i], NULL);
        if (!type)
            return pn_error_set(err, PN_ERR_USAGE,
                                "--stock: not a type the stock quantizer takes: '%.40s' (Q3_K_S "
                                "Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_M Q6_K Q8_0)",
                                o->stock[i]);
        snprintf(m->name, sizeof m->name, "stock %s", type);
        snprintf(m->file, sizeof m->file, "stock-%s.gguf", type);
    }
    for (size_t i = 0; i < n; i++) {
        rep->mixes[i].file_index = -1;
        /* until its job says otherwise: what an interrupt leaves */
        rep->mixes[i].status = PN_ERR_INTERRUPTED;
        snprintf(rep->mixes[i].error, sizeof rep->mixes[i].error, "not made (interrupted)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(rep->mixes[i].file, rep->mixes[j].file) == 0)
                return pn_error_set(err, PN_ERR_USAGE, "--sweep: %s is asked for twice",
                                    rep->mixes[i].name);
    }
    return PN_OK;
}

/* Does the file r (a stock quantization) hold the source's tensors, by
 * name and shape? */
static bool same_tensors(const gguf_reader *r, const gguf_reader *src)
{
    if (gguf_reader_n_tensors(r) != gguf_reader_n_tensors(src))
        return false;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        long k = gguf_reader_find_tensor(src, t->name);
        if (k < 0 || gguf_reader_tensor(src, (size_t)k)->n_dims != t->n_dims)
            return false;
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            if (gguf_reader_tensor(src, (size_t)k)->ne[d] != t->ne[d])
                return false;
    }
    return true;
}

/* Is r this sweep's mix m, made by an earlier run of it (one interrupted,
 * or one that finished)? A PN mix: a PN file whose label is the recipe's
 * name and m's promotion count (any count for the target size), made from
 * this source (its recorded header hash: the source read as the file was,
 * without its MTP layer when the file has none); its label becomes m's
 * name. A stock type: a quantization of that type (general.file_type) of
 * the source's tensors. Else false, with what it is in why. */
static bool kept_mix_ok(const pn_sweep_opts *o, const work *w, pn_sweep_mix *m,
                        const gguf_reader *r, char *why, size_t cap)
{
    int promote = m->promote;
    const gguf_kv *fmt = gguf_reader_find_kv(r, PN_KEY_FORMAT);
    pn_source_opts so = { .no_mtp = !gguf_has_mtp_layer(r) };
    gguf_reader *src = NULL;
    pn_error e;
    pn_error_clear(&e);
    if (pn_source_open(o->compare.source_path, &so, &src, &e) != PN_OK) {
        snprintf(why, cap, "the source cannot be read: %.400s", e.msg);
        return false;
    }
    bool ok = false;
    if (m->kind == PN_SWEEP_STOCK) {
        unsigned want = 0;
        pn_sweep_stock_canonical(m->name + strlen("stock "), &want);
        const gguf_kv *ft = gguf_reader_find_kv(r, "general.file_type");
        if (fmt)
            snprintf(why, cap, "a PN file, not a stock quantization");
        else if (!ft || ft->type != GGUF_TYPE_UINT32 || ft->v.u64 != want)
            snprintf(why, cap, "a model of another type");
        else if (!same_tensors(r, src))
            snprintf(why, cap, "not a quantization of this source");
        else
            ok = true;
        gguf_reader_close(src);
        return ok;
    }
    const gguf_kv *mix = gguf_reader_find_kv(r, PN_KEY_MIX);
    char label[96] = "";
    if (mix && mix->type == GGUF_TYPE_STRING && mix->v.str.len < sizeof label)
        for (size_t i = 0; i < mix->v.str.len; i++)
            label[i] =
                mix->v.str.data[i] >= 0x20 && mix->v.str.data[i] < 0x7f ? mix->v.str.data[i] : '?';
    char want[160];
    if (promote >= 0)
        snprintf(want, sizeof want, "%s+%d", w->recipe, promote);
    else
        snprintf(want, sizeof want, "%s+", w->recipe);
    pn_recorded_source rec;
    memset(&rec, 0, sizeof rec);
    uint64_t h = 0;
    if (!fmt || !label[0])
        snprintf(why, cap, "not a PN file");
    else if (promote >= 0 ? strcmp(label, want) != 0 : strncmp(label, want, strlen(want)) != 0)
        snprintf(why, cap, "the mix %s, not %s%s", label, want, promote >= 0 ? "" : "N");
    else if (pn_recorded_source_read(r, &rec, &e) != PN_OK || !rec.present ||
             pn_source_header_hash(src, &h, &e) != PN_OK || h != rec.header_hash)
        snprintf(why, cap, "%s made from another source", label);
    else
        ok = true;
    pn_recorded_source_free(&rec);
    gguf_reader_close(src);
    if (ok)
        snprintf(m->name, sizeof m->name, "%s%s", label, k_order_label[m->order]);
    return ok;
}

/* The recipe's mix name (the start of every PN mix's label). */
static pn_status recipe_name(const pn_sweep_opts *o, work *w, pn_error *err)
{
    pn_recipe *rc = NULL;
    pn_status st = o->recipe_path
                       ? pn_recipe_load(o->recipe_path, &rc, err)
                       : pn_recipe_parse(pn_default_recipe_text, strlen(pn_default_recipe_text),
                                         pn_default_recipe_name, &rc, err);
    if (st != PN_OK)
        return st;
    snprintf(w->recipe, sizeof w->recipe, "%s", rc->name);
    pn_recipe_free(rc);
    return PN_OK;
}

/* What keep_dir holds under a mix's name: that mix from an earlier run of
 * this sweep, used as it is (m->kept), or else a refusal. */
static pn_status check_kept(const pn_sweep_opts *o, const work *w, pn_sweep_mix *m, char *path,
                            pn_error *err)
{
    char why[600] = "not a regular file";
    struct stat sb;
    gguf_reader *r = NULL;
    pn_error e;
    pn_error_clear(&e);
    bool ok = false;
    if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        if (gguf_reader_open(path, &r, &e) != PN_OK)
            snprintf(why, sizeof why, "not a model: %.400s", e.msg);
        else
            ok = kept_mix_ok(o, w, m, r, why, sizeof why);
        gguf_reader_close(r);
    }
    if (!ok) {
        pn_status st = pn_error_set(err, PN_ERR_EXISTS,
                                    "--keep %s: %s is there already and is not this sweep's %s "
                                    "(%s); the sweep replaces nothing (another folder, or "
                                    "remove it)",
                                    o->keep_dir, m->file, m->name, why);
        free(path);
        return st;
    }
    m->kept = path;
    m->status = PN_OK;
    m->error[0] = 0;
    return PN_OK;
}

/* keep_dir: a folder (made when absent), locked for this sweep alone, where
 * each name is absent or is that mix from an earlier run of the sweep
 * (which is used: an interrupted sweep resumes). A measurement there is
 * used and stays. */
static pn_status check_keep(const pn_sweep_opts *o, pn_sweep_report *rep, work *w, pn_error *err)
{
    if (!o->keep_dir)
        return PN_OK;
    struct stat sb;
    if (stat(o->keep_dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return pn_error_set(err, PN_ERR_USAGE, "--keep %s: not a folder", o->keep_dir);
    } else if (errno != ENOENT) {
        return pn_error_set(err, PN_ERR_IO, "--keep %s: %s", o->keep_dir, strerror(errno));
    } else {
        if (mkdir(o->keep_dir, 0777) != 0)
            return pn_error_set(err, PN_ERR_IO, "--keep %s: cannot make it: %s", o->keep_dir,
                                strerror(errno));
        w->made_keep = true;
    }
    /* two sweeps keeping into one folder would both run for hours and the
     * second lose every mix at the end: the second is refused now (the lock
     * goes with the process, however it ends) */
    w->keep_fd = open(o->keep_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->keep_fd < 0)
        return pn_error_set(err, PN_ERR_IO, "--keep %s: %s", o->keep_dir, strerror(errno));
    if (flock(w->keep_fd, LOCK_EX | LOCK_NB) != 0)
        return pn_error_set(err, PN_ERR_EXISTS,
                            "--keep %s: another sweep is keeping its mixes there now; one sweep "
                            "at a time per folder (wait for it, or give another folder)",
                            o->keep_dir);
    pn_status st = recipe_name(o, w, err);
    for (size_t i = 0; st == PN_OK && i < rep->n_mixes + 2; i++) {
        size_t k = i - rep->n_mixes; /* a measurement's index past the mixes */
        if (i >= rep->n_mixes && !w->need_meas[k])
            continue;
        const char *name = i < rep->n_mixes ? rep->mixes[i].file
                           : k              ? KL_MEASUREMENT_NAME
                                            : MEASUREMENT_NAME;
        char *p = pn_path_join(o->keep_dir, name);
        if (!p)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        if (lstat(p, &sb) != 0) {
            free(p);
        } else if (i >= rep->n_mixes) {
            w->kept_meas[k] = S_ISREG(sb.st_mode);
            free(p);
            if (!w->kept_meas[k])
                st = pn_error_set(err, PN_ERR_EXISTS,
                                  "--keep %s: %s is there already and is not a file; the sweep "
                                  "replaces nothing (another folder, or remove it)",
                                  o->keep_dir, name);
        } else {
            st = check_kept(o, w, &rep->mixes[i], p, err);
        }
    }
    return st;
}

/* The measurement kept by an earlier run, copied into the work folder, so
 * that the quantize job reads it there and the kept one is never written. */
static pn_status copy_kept_measurement(const pn_sweep_opts *o, const work *w, int k, pn_error *err)
{
    if (!w->kept_meas[k])
        return PN_OK;
    const char *name = k ? KL_MEASUREMENT_NAME : MEASUREMENT_NAME;
    char *from = pn_path_join(o->keep_dir, name), *to = pn_path_join(w->dir, name);
    char *data = NULL;
    size_t n = 0;
    pn_status st = from && to
                       ? pn_read_small_file(from, (size_t)1 << 30, "measurement", &data, &n, err)
                       : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    if (st == PN_OK) {
        int fd = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, data, n) != (ssize_t)n)
            st = pn_error_set(err, PN_ERR_IO, "%s: cannot copy the kept measurement: %s", to,
                              strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    free(data);
    free(from);
    free(to);
    return st;
}

/* Where the sweep stands, for the progress callback: step `step` of mix k
 * of n (named name). */
typedef struct sweep_at {
    const pn_sweep_opts *o;
    const char *step, *name;
    size_t k, n;
} sweep_at;

/* The callback, `part` (0 to 1) of mix k made. */
static void progress_at(const sweep_at *a, double part)
{
    if (!a->o->compare.progress)
        return;
    pn_compare_progress p = { a->step,      a->name, "mix", a->k, a->n, (double)a->k + part,
                              (double)a->n, "mixes" };
    a->o->compare.progress(&p, a->o->compare.user);
}

/* pn-quantize's progress as the making's: the share of the weights
 * quantized (the other phases say nothing of how far it is). */
static void on_quantized(const pn_progress *p, void *user)
{
    if (p->phase == PN_PHASE_QUANTIZE && p->weights_total)
        progress_at(user, (double)p->weights_done / (double)p->weights_total);
}

/* The quantize job's options every mix of the sweep shares: this source
 * and recipe into dst, on the CPU, with the sweep's threads and cancel. */
static void quantize_opts(const pn_sweep_opts *o, const char *dst, pn_quantize_opts *q)
{
    pn_quantize_opts_init(q);
    q->src_path = o->compare.source_path;
    q->dst_path = dst;
    q->recipe_path = o->recipe_path;
    q->threads = o->quantize_threads > 0 ? o->quantize_threads : 0;
    q->backend = PN_BACKEND_CPU;
    q->cancel = o->compare.cancel;
}

static pn_status make_pn(const pn_sweep_opts *o, const work *w, pn_sweep_mix *m, uint64_t target,
                         const char *prev, const sweep_at *at, pn_error *err)
{
    bool kl = m->order == PN_SWEEP_BY_KL;
    char *dst = pn_path_join(w->dir, m->file), *meas = pn_path_join(w->dir, MEASUREMENT_NAME);
    if (!dst || !meas) {
        free(dst);
        free(meas);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    pn_quantize_opts q;
    quantize_opts(o, dst, &q);
    q.promote = target ? -1 : m->promote;
    q.target_size = target;
    q.measurement_path = kl ? NULL : meas;
    q.measurement = kl ? (target ? w->kl_per_byte : w->kl_gain) : NULL;
    q.forward_order = m->order == PN_SWEEP_BY_FORWARD;
    q.reuse_path = prev;
    q.imatrix_path = o->imatrix_path;
    if (o->compare.progress) {
        q.progress = on_quantized;
        q.user = (void *)at;
    }
    pn_quantize_stats stats;
    memset(&stats, 0, sizeof stats);
    pn_error qe;
    pn_error_clear(&qe);
    pn_status st = pn_quantize_file(&q, &stats, &qe);
    free(dst);
    free(meas);
    if (st == PN_ERR_INTERRUPTED || cancelled(o))
        return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted while making %s", m->name);
    m->status = st;
    m->error[0] = 0;
    if (st == PN_OK && stats.mix_name[0])
        snprintf(m->name, sizeof m->name, "%.80s%s", stats.mix_name, k_order_label[m->order]);
    else if (st != PN_OK)
        snprintf(m->error, sizeof m->error, "%s", qe.msg[0] ? qe.msg : pn_strerror(st));
    return PN_OK;
}

/* A size as the picture and the labels give it: decimal units. */
static void format_size(uint64_t bytes, char *buf, size_t cap)
{
    double b = (double)bytes;
    if (b >= 1e9)
        snprintf(buf, cap, "%.4g GB", b / 1e9);
    else if (b >= 1e6)
        snprintf(buf, cap, "%.4g MB", b / 1e6);
    else if (b >= 1e3)
        snprintf(buf, cap, "%.4g kB", b / 1e3);
    else
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
}

/* The calibration text of --measure kl is held out: not the judging text
 * (a mix chosen on the text that judges it is flattered), nor another name
 * of it. Its own checks are the measurement's. */
static pn_status check_calibration(const pn_sweep_opts *o, pn_error *err)
{
    struct stat a, b;
    if (stat(o->calibration_path, &a) != 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open the calibration text: %s",
                            o->calibration_path, strerror(errno));
    if (o->compare.text_path && stat(o->compare.text_path, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s: the calibration text is the judging text (--text %s): mixes "
                            "chosen on the text that judges them are flattered; measure on "
                            "another text",
                            o->calibration_path, o->compare.text_path);
    return PN_OK;
}

/* The text the mixes are judged on: a readable regular file within the
 * comparison's bound, checked before any mix is made. */
static pn_status check_text(const char *path, pn_error *err)
{
    if (!path)
        return PN_OK;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open the text: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return pn_error_set(err, PN_ERR_IO, "%s: the text is not a regular file", path);
    if (sb.st_size > ((off_t)64 << 20))
        return pn_error_set(err, PN_ERR_FORMAT, "%s: the text has %lld bytes, at most %lld", path,
                            (long long)sb.st_size, (long long)64 << 20);
    if (sb.st_size == 0)
        return pn_error_set(err, PN_ERR_FORMAT, "%s: the text is empty: no token to judge on",
                            path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open the text: %s", path, strerror(errno));
    close(fd);
    return PN_OK;
}

/* The recipe on this source, planned as a dry run of the quantize job
 * (no promotion: no measurement), so that a recipe that cannot type the
 * model is refused before any mix is made, not once per mix. */
static pn_status check_recipe(const pn_sweep_opts *o, const work *w, pn_error *err)
{
    if (o->n_promote == 0 && !o->target_size)
        return PN_OK;
    char *dst = pn_path_join(w->dir, "recipe-check.gguf");
    if (!dst)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_quantize_opts q;
    quantize_opts(o, dst, &q);
    q.promote = 0;
    q.dry_run = true;
    pn_quantize_stats stats;
    memset(&stats, 0, sizeof stats);
    pn_status st = pn_quantize_file(&q, &stats, err);
    free(dst);
    if (st != PN_OK && st != PN_ERR_INTERRUPTED)
        pn_error_prefix(err, "--sweep: no PN mix can be made");
    return st;
}

/* Everything checked before anything runs: the mixes, the stock quantizer
 * and its libllama, the text, the recipe (read, and planned on the source),
 * --keep (locked; mixes an earlier run kept there are used); the work
 * folder made. */
static pn_status prepare(const pn_sweep_opts *o, pn_sweep_report *rep, work *w, char **lib,
                         pn_error *err)
{
    const char *src = o->compare.source_path;
    pn_status st = plan_orders(o, w, err);
    if (st == PN_OK)
        st = plan_mixes(o, w, rep, err);
    if (st == PN_OK && o->n_stock && pn_source_is_hf(src))
        st = pn_error_set(err, PN_ERR_USAGE,
                          "%s: --stock needs a GGUF source (llama.cpp's "
                          "quantizer reads GGUF): convert it first with pn-convert",
                          src);
    if (st == PN_OK && o->n_stock && (!o->quantizer || access(o->quantizer, X_OK) != 0))
        st = pn_error_set(err, PN_ERR_IO,
                          "%s: the stock quantizer pn-llama-quantize is not "
                          "there: build it (cmake --build build --target pn-llama-quantize)",
                          o->quantizer ? o->quantizer : "(none)");
    if (st == PN_OK && o->n_stock) {
        *lib = o->libllama ? strdup(o->libllama) : pn_sweep_default_libllama(o->compare.script);
        if (!*lib)
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        else if (access(*lib, R_OK) != 0) {
            /* the harness's folder: the checkout's tools/llama or a prefix's */
            const char *script = o->compare.script, *slash = strrchr(script, '/');
            st = pn_error_set(err, PN_ERR_IO,
                              "%s: the libllama that judges is missing (%s): run 'cd %.*s && "
                              "NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts "
                              "--omit=optional' (in a checkout, scripts/install-deps does the "
                              "same)",
                              *lib, strerror(errno), slash ? (int)(slash - script) : 1,
                              slash ? script : ".");
        }
    }
    if (st == PN_OK)
        st = check_text(o->compare.text_path, err);
    if (st == PN_OK && o->calibration_path)
        st = check_calibration(o, err);
    if (st == PN_OK)
        st = recipe_name(o, w, err);
    if (st == PN_OK)
        st = check_keep(o, rep, w, err);
    if (st == PN_OK) {
        char *tmpl =
            pn_path_join(o->keep_dir ? o->keep_dir : o->compare.tmp_dir, ".pn-sweep.XXXXXX");
        if (tmpl && mkdtemp(tmpl)) {
            w->dir = tmpl;
        } else {
            st = pn_error_set(err, PN_ERR_IO, "%s: cannot make the work folder: %s",
                              o->keep_dir ? o->keep_dir : o->compare.tmp_dir, strerror(errno));
            free(tmpl);
        }
    }
    if (st == PN_OK)
        st = check_recipe(o, w, err);
    for (int k = 0; k < 2 && st == PN_OK; k++)
        st = copy_kept_measurement(o, w, k, err);
    return st;
}

static void name_mixes_in_error(const pn_sweep_opts *o, const work *w, pn_error *err);

/* --measure kl: the measurement the PN mixes are chosen by, made (or read
 * from the work folder, where a kept one was copied) before the first mix. */
static pn_status measure_kl(const pn_sweep_opts *o, work *w, pn_error *err)
{
    if (!w->need_meas[1])
        return PN_OK;
    char *path = pn_path_join(w->dir, KL_MEASUREMENT_NAME);
    if (!path)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_kl_opts k;
    memset(&k, 0, sizeof k);
    pn_quantize_opts_init(&k.q);
    k.q.src_path = o->compare.source_path;
    k.q.recipe_path = o->recipe_path;
    k.q.threads = o->quantize_threads > 0 ? o->quantize_threads : 0;
    k.q.backend = PN_BACKEND_CPU;
    k.q.cancel = o->compare.cancel;
    k.q.imatrix_path = o->imatrix_path;
    k.c = o->compare;
    k.c.text_path = o->calibration_path;
    k.c.progress = NULL;
    k.c.decode_type = 0; /* the source's own precision */
    k.path = path;
    progress_at(&(sweep_at){ o, "measuring by KL", o->calibration_path, 0, 1 }, 0);
    pn_status st = pn_kl_measure(&k, &w->kl, err);
    free(path);
    if (st != PN_OK && w->kept_meas[1]) {
        /* the kept file, named where it is; the sweep replaces nothing */
        name_mixes_in_error(o, w, err);
        char *force = strstr(err->msg, "; give --force");
        if (st == PN_ERR_EXISTS && force)
            snprintf(force, sizeof err->msg - (size_t)(force - err->msg),
                     "; the sweep replaces nothing: remove it to measure again");
    }
    if (st == PN_OK)
        st = pn_kl_as_measurement(w->kl, false, &w->kl_gain, err);
    if (st == PN_OK)
        st = pn_kl_as_measurement(w->kl, true, &w->kl_per_byte, err);
    return st == PN_OK ? st : pn_error_prefix(err, "--measure kl");
}

/* Each mix not kept already: the PN mixes, each reusing the last one made
 * (or kept), then the stock types. */
static pn_status make_all(const pn_sweep_opts *o, const work *w, pn_sweep_report *rep,
                          const char *lib, pn_error *err)
{
    pn_status st = PN_OK;
    const char *prev = NULL;
    char *prev_path = NULL;
    size_t k = 0;
    for (; st == PN_OK && k < rep->n_mixes - o->n_stock; k++) {
        pn_sweep_mix *m = &rep->mixes[k];
        bool target = m->promote < 0;
        if (!m->kept) {
            sweep_at at = { o, "making", m->name, k, rep->n_mixes };
            progress_at(&at, 0);
            double t = now_s();
            st = make_pn(o, w, m, target ? o->target_size : 0, prev, &at, err);
            m->make_seconds = now_s() - t;
        }
        if (st == PN_OK && m->status == PN_OK) {
            free(prev_path);
            prev_path = m->kept ? strdup(m->kept) : pn_path_join(w->dir, m->file);
            prev = prev_path;
        }
        if (st == PN_OK && m->status == PN_OK && target && !strstr(m->name, "--target-size")) {
            /* the mix the size chose, labelled as such */
            char size[24], name[sizeof m->name];
            format_size(o->target_size, size, sizeof size);
            snprintf(name, sizeof name, "%.50s (--target-size %.20s)", m->name, size);
            memcpy(m->name, name, sizeof name);
        }
    }
    free(prev_path);
    for (size_t i = 0; st == PN_OK && i < o->n_stock; i++, k++) {
        pn_sweep_mix *m = &rep->mixes[k];
        if (m->kept)
            continue;
        progress_at(&(sweep_at){ o, "quantizing with llama.cpp", m->name, k, rep->n_mixes }, 0);
        char *dst = pn_path_join(w->dir, m->file);
        if (!dst)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        double t = now_s();
        st = pn_sweep_run_stock(o, lib, o->compare.source_path, dst, m->name + strlen("stock "), m,
                                err);
        m->make_seconds = now_s() - t;
        free(dst);
    }
    return st;
}

/* An error of the comparison names a mix by its path in the work folder,
 * which is gone by the time it is read: every such path is given as the
 * path the mix was kept under instead, or, not kept, as its file name with
 * a word that it was removed. */
static void name_mixes_in_error(const pn_sweep_opts *o, const work *w, pn_error *err)
{
    size_t n = strlen(w->dir);
    char msg[sizeof err->msg];
    size_t len = 0;
    bool named = false;
    for (const char *p = err->msg; *p && len + 1 < sizeof msg;) {
        if (strncmp(p, w->dir, n) == 0 && p[n] == '/') {
            int k = o->keep_dir ? snprintf(msg + len, sizeof msg - len, "%s/", o->keep_dir) : 0;
            len += k > 0 ? (size_t)k : 0;
            len = len < sizeof msg - 1 ? len : sizeof msg - 1;
            p += n + 1;
            named = true;
        } else {
            msg[len++] = *p++;
        }
    }
    msg[len] = 0;
    if (named && !o->keep_dir)
        snprintf(err->msg, sizeof err->msg,
                 "%.700s (the sweep's mixes were removed: --keep DIR keeps them)", msg);
    else if (named)
        snprintf(err->msg, sizeof err->msg, "%s", msg);
}

/* One comparison of every mix made or kept. */
static pn_status compare_all(const pn_sweep_opts *o, const work *w, pn_sweep_report *rep,
                             pn_error *err)
{
    const char **paths = calloc(rep->n_mixes, sizeof *paths);
    if (!paths)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_status st = PN_OK;
    size_t n_made = 0;
    for (size_t i = 0; st == PN_OK && i < rep->n_mixes; i++) {
        pn_sweep_mix *m = &rep->mixes[i];
        if (m->status != PN_OK) {
            rep->n_failed++;
            continue;
        }
        paths[n_made] = m->kept ? strdup(m->kept) : pn_path_join(w->dir, m->file);
        if (!paths[n_made])
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        m->file_index = (long)n_made++;
    }
    if (st == PN_OK && n_made > 0) {
        pn_compare_opts c = o->compare;
        c.pn_paths = paths;
        c.n_pn = n_made;
        c.tmp_dir = w->dir;
        st = pn_compare_run(&c, &rep->compare, err);
        rep->compared = st == PN_OK;
        if (st != PN_OK)
            name_mixes_in_error(o, w, err);
    }
    for (size_t i = 0; i < n_made; i++)
        free((void *)paths[i]);
    free(paths);
    return st;
}

pn_status pn_sweep_run(const pn_sweep_opts *o, pn_sweep_report *rep, pn_error *err)
{
    memset(rep, 0, sizeof *rep);
    const double t0 = now_s();
    if (!o->compare.source_path || !o->compare.tmp_dir || !o->compare.script)
        return pn_error_set(err, PN_ERR_USAGE,
                            "sweep: a source, a folder and the harness are "
                            "needed");
    work w = { .keep_fd = -1 };
    char *lib = NULL;
    pn_status st = prepare(o, rep, &w, &lib, err);
    if (st == PN_OK)
        st = measure_kl(o, &w, err);
    if (st == PN_OK)
        st = make_all(o, &w, rep, lib, err);
    free(lib);
    bool made = st == PN_OK;
    if (st == PN_OK)
        st = compare_all(o, &w, rep, err);
    /* what is kept: the mixes made, whether the comparison went well or
     * not, and those finished before an interrupt */
    if (w.dir && (made || st == PN_ERR_INTERRUPTED) && o->keep_dir) {
        pn_error ke;
        pn_error_clear(&ke);
        pn_status kst = keep_all(o, &w, rep, &ke);
        if (kst != PN_OK && st == PN_OK) {
            st = kst;
            *err = ke;
        }
    }
    if (st == PN_OK && rep->compared) {
        for (size_t i = 0; i < rep->n_mixes; i++) {
            pn_sweep_mix *m = &rep->mixes[i];
            if (m->file_index < 0)
                continue;
            pn_compare_file *f = &rep->compare.files[m->file_index];
            free(f->path);
            f->path = strdup(m->kept ? m->kept : m->file);
            if (!f->path)
                st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        }
    }
    work_remove(&w);
    work_unlock(&w);
    if (st != PN_OK) {
        /* nothing but what --keep asked for */
        if (w.made_keep)
            rmdir(o->keep_dir); /* fails, as it should, when an interrupt kept mixes in it */
        pn_sweep_report_free(rep);
        return st;
    }
    rep->seconds = now_s() - t0;
    return PN_OK;
}
