/* pn-compare: how far PN mixes are from their float source in stock
 * llama.cpp (KL divergence of next-token distributions, top-1 agreement,
 * size). Parses options, finds the llama.cpp harness and prints; the work is
 * pn_compare_run (compare/compare.h). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cli.h"
#include "common/text.h"
#include "compare/compare.h"
#include "compare/plot.h"
#include "compare/sweep.h"
#include "mix/size.h"
#include "quant/types.h"

extern char **environ;

/* What pn_cli_next returns for each option. */
enum {
    O_TEXT = 256,
    O_SEQ_LEN,
    O_MAX_SEQS,
    O_THREADS,
    O_DECODE,
    O_KEEP,
    O_TMPDIR,
    O_JSON,
    O_NODE,
    O_SCRIPT,
    O_QUIET,
    O_PROGRESS,
    O_VERSION,
    O_SWEEP,
    O_PROMOTE,
    O_TARGET,
    O_IMATRIX,
    O_STOCK,
    O_KEEP_DIR,
    O_PLOT,
    O_BUDGET,
    O_FORCE,
    O_RECIPE,
    O_QTHREADS,
    O_QUANTIZER,
    O_LIBLLAMA,
    O_GNUPLOT,
    O_MEASURE,
    O_CALIBRATION
};

static const pn_cli_option options[] = {
    { "text", required_argument, O_TEXT,
      "  --text FILE         tokens from this UTF-8 text, cut by the source's tokenizer\n"
      "                      (default: the fixed set, 4 sequences of 64 token ids)\n" },
    { "seq-len", required_argument, O_SEQ_LEN,
      "  --seq-len N         with --text: tokens per sequence (default 512)\n" },
    { "max-seqs", required_argument, O_MAX_SEQS,
      "  --max-seqs N        with --text: at most N sequences (default 16)\n" },
    { "threads", required_argument, O_THREADS,
      "  --threads N         llama.cpp threads, the same for every model (default: all\n"
      "                      cores); also the decoder's\n" },
    { "decode-type", required_argument, O_DECODE,
      "  --decode-type f32|f16|bf16  type of the decoded models (default f32)\n" },
    { "keep-rotation", no_argument, O_KEEP,
      "  --keep-rotation     decode PN tensors without undoing the rotation (an\n"
      "                      experiment: llama.cpp does not rotate activations)\n" },
    { "tmpdir", required_argument, O_TMPDIR,
      "  --tmpdir DIR        folder for the temporary files (default $TMPDIR, or /tmp);\n"
      "                      needs one decoded model (4 bytes per weight in f32) plus\n"
      "                      positions x vocabulary x 4 bytes\n" },
    { "json", no_argument, O_JSON, "  --json              print JSON instead of the table\n" },
    { "node", required_argument, O_NODE,
      "  --node PROG         the Node.js program (default: node, looked up in PATH)\n" },
    { "llama-script", required_argument, O_SCRIPT,
      "  --llama-script FILE the harness (default: ../share/pn-quantize/llama/\n"
      "                      pn-llama-logits.mjs beside this program)\n" },
    { "sweep", no_argument, O_SWEEP,
      "  --sweep             make the mixes the options below name from the one SOURCE,\n"
      "                      then compare them all (see above):\n" },
    { "promote", required_argument, O_PROMOTE,
      "  --promote LIST      PN mixes: promotion counts, comma-separated (0,10,19,40)\n" },
    { "target-size", required_argument, O_TARGET,
      "  --target-size SIZE  one more PN mix: the most promotions within SIZE (12.6GB)\n" },
    { "recipe", required_argument, O_RECIPE,
      "  --recipe FILE|NAME  the PN mixes' recipe: a file, or a shipped recipe by name\n"
      "                      (default: the built-in P0k+19)\n" },
    { "stock", required_argument, O_STOCK,
      "  --stock LIST        stock llama.cpp types made by llama_model_quantize of the\n"
      "                      libllama that judges: Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M\n"
      "                      Q5_K_M Q6_K Q8_0, comma-separated, in either case (q4_k_m)\n" },
    { "imatrix", required_argument, O_IMATRIX,
      "  --imatrix FILE      llama-imatrix's file, for every mix (PN and stock)\n" },
    { "measure", required_argument, O_MEASURE,
      "  --measure LIST      how the PN mixes' promotions are ordered, comma-separated\n"
      "                      (error,kl), each PN mix made once per order: error\n"
      "                      (default), forward (the earliest in the forward pass\n"
      "                      first), kl (one KL measurement on --calibration); as\n"
      "                      pn-quantize --measure (docs/usage.md#kl)\n" },
    { "calibration", required_argument, O_CALIBRATION,
      "  --calibration FILE  --measure kl: the text the candidates are judged on; not\n"
      "                      the --text that judges the mixes\n" },
    { "keep", required_argument, O_KEEP_DIR,
      "  --keep DIR          keep the mixes and the measurement in DIR (made when\n"
      "                      absent; one sweep at a time; nothing there is replaced,\n"
      "                      and a mix an earlier sweep kept there is used: an\n"
      "                      interrupted sweep resumes); default: removed\n" },
    { "plot", required_argument, O_PLOT,
      "  --plot FILE         draw mean KL against size (FILE.svg, or FILE.png) with gnuplot\n" },
    { "budget", required_argument, O_BUDGET,
      "  --budget SIZE       with --plot: a size drawn as a line (16GB)\n" },
    { "force", no_argument, O_FORCE,
      "  --force             with --plot: replace an existing picture\n" },
    { "quantize-threads", required_argument, O_QTHREADS,
      "  --quantize-threads N  threads of the mixes' quantizers (default: --threads)\n" },
    { "llama-quantize", required_argument, O_QUANTIZER,
      "  --llama-quantize PROG  the stock quantizer (default: pn-llama-quantize beside\n"
      "                      this program, or ../libexec/pn-quantize/)\n" },
    { "libllama", required_argument, O_LIBLLAMA,
      "  --libllama FILE     the libllama it calls (default: node-llama-cpp's, beside\n"
      "                      the harness)\n" },
    { "gnuplot", required_argument, O_GNUPLOT,
      "  --gnuplot PROG      the gnuplot program (default: gnuplot, looked up in PATH)\n" },
    { "progress", no_argument, O_PROGRESS,
      "  --progress          progress on stderr even when it is not a terminal (on a\n"
      "                      terminal it is shown unless --quiet): the positions\n"
      "                      llama.cpp has evaluated of all, over its runs\n" },
    { "quiet", no_argument, O_QUIET, "  --quiet             no progress and no notes on stderr\n" },
    { "help", no_argument, 'h', "  -h, --help          this text\n" },
    { "version", no_argument, O_VERSION, "  --version           the version\n" },
    { NULL, 0, 0, NULL },
};

static const pn_cli_program program = {
    "pn-compare",
    "usage: pn-compare [options] SOURCE.gguf PN.gguf [PN.gguf ...]\n"
    "       pn-compare --sweep [--promote LIST] [--target-size SIZE] [--stock LIST]\n"
    "                  [--keep DIR] [--plot FILE [--budget SIZE]] [options] SOURCE\n"
    "\n"
    "Decodes each PN file (as pn-dequant does) into a temporary float GGUF, runs\n"
    "stock llama.cpp (node-llama-cpp's prebuilt CPU build) on the source and on each\n"
    "decoded model over the same token sequences, and reports per PN file the KL\n"
    "divergence of its next-token distributions from the source's (mean, 99th\n"
    "percentile, max), the share of positions with the same top-1 token, the file\n"
    "size and bits per weight. Temporary files are always removed. A stock\n"
    "quantization of the source (a GGUF without pn.format whose tensors are\n"
    "quantized, e.g. llama-quantize's Q4_K_M) may stand where a PN file does: it\n"
    "is run as it is, and named \"stock\" and its type in the mix column. SOURCE\n"
    "may be a Hugging Face model folder (docs/hf.md): it is converted to the GGUF\n"
    "that llama.cpp's converter writes (bf16) in the temporary folder first.\n"
    "\n"
    "With --sweep, the mixes are made first, in a work folder: each PN mix with\n"
    "pn-quantize's job (one promotion measurement, each mix reusing the last one\n"
    "made, as --reuse does), each stock type with llama.cpp's own quantizer; a\n"
    "mix that fails is reported as failed and the others are still compared.\n"
    "Everything (the recipe, the text, the stock types, --keep, --plot) is checked\n"
    "before any mix is made. An interrupted sweep leaves nothing but the finished\n"
    "mixes --keep asked for, and the same sweep run again uses them.\n"
    "\n"
    "options:\n",
    options,
    "\n"
    "exit status: 0 compared (--sweep: every mix), 1 what the files hold (message on\n"
    "stderr; --sweep: a mix failed, the others compared), 2 the command line itself,\n"
    "128+N signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP)\n",
};

/* An int option's value in [lo, hi] (pn_cli_long); -1 after the message. */
static int parse_int(const char *opt, const char *v, long lo, long hi, int *out)
{
    long x;
    if (!pn_cli_long("pn-compare", opt, v, lo, hi, &x))
        return -1;
    *out = (int)x;
    return 0;
}


typedef struct progress_state {
    pn_cli_meter meter;
    const char *unit, *step; /* the measure and the step of the last call */
    size_t model;
} progress_state;

/* Where the comparison stands, through the one reporter (cli.h): a line
 * as each step begins (a few per model), else at the meter's rate; the
 * clock of the rate and the ETA starts again when the measure does (the
 * sweep's mixes, then the positions). */
static void on_progress(const pn_compare_progress *p, void *user)
{
    progress_state *ps = user;
    if (!ps->meter.on)
        return;
    if (!ps->unit || strcmp(ps->unit, p->unit) != 0)
        pn_cli_meter_restart(&ps->meter);
    bool begins = !ps->step || strcmp(ps->step, p->step) != 0 || ps->model != p->model;
    ps->unit = p->unit;
    ps->step = p->step;
    ps->model = p->model;
    double elapsed = pn_cli_now() - ps->meter.start;
    if (pn_cli_meter_due(&ps->meter, elapsed, begins || (p->total > 0 && p->done >= p->total)))
        pn_cli_meter_line(&ps->meter, p->step, p->item, p->model + 1, p->n_models, p->path, p->done,
                          p->total, elapsed, p->unit);
}

/* The table's first lines: the source, the judge and the tokens. */
static void put_table_head(const pn_compare_report *r, const char *decode)
{
    printf("source ");
    pn_fput_safe(stdout, r->source.path);
    printf("\nllama.cpp %s (node-llama-cpp %s, CPU, %d thread%s); %s, %zu sequence%s, %zu "
           "positions, vocabulary %u; decoded as %s\n\n",
           r->llama_cpp, r->node_llama_cpp, r->threads, r->threads == 1 ? "" : "s",
           r->from_text ? "tokens of the text" : "the fixed token set", r->n_seqs,
           r->n_seqs == 1 ? "" : "s", r->n_positions, r->n_vocab, decode);
    /* the mean KL with its standard error, as llama-perplexity's "Mean KLD: x ± y" */
    printf("%14s %8s %7s %10s ± %-7s %10s %10s %7s  %-16s %s\n", "bytes", "bpw", "bpw PN",
           "KL mean", "SE", "KL p99", "KL max", "top-1", "mix", "file");
    printf("%14llu %8.4f %7s %10s   %-7s %10s %10s %7s  %-16s ",
           (unsigned long long)r->source.file_bytes, r->source.bpw, "-", "-", "", "-", "-", "-",
           "(source)");
    pn_fput_safe(stdout, r->source.path);
    putchar('\n');
}

/* One file's row, its mix named `mix`. */
static void put_table_row(const pn_compare_file *f, const char *mix)
{
    char bpw_pn[16];
    snprintf(bpw_pn, sizeof bpw_pn, f->pn_weights ? "%.4f" : "-", f->bpw_pn);
    printf("%14llu %8.4f %7s %10.4g ± %-7.2g %10.4g %10.4g %6.2f%%  %-16s ",
           (unsigned long long)f->file_bytes, f->bpw, bpw_pn, f->kl_mean, f->kl_se, f->kl_p99,
           f->kl_max, 100.0 * f->top1, mix);
    pn_fput_safe(stdout, f->path);
    putchar('\n');
}

static void print_table(const pn_compare_report *r, const char *decode)
{
    put_table_head(r, decode);
    for (size_t i = 0; i < r->n_files; i++)
        put_table_row(&r->files[i], r->files[i].mix ? r->files[i].mix : "?");
    printf("\n%.1f s\n", r->seconds);
}

static void put_file_json(const pn_compare_file *f, bool source)
{
    printf("{\"path\": ");
    pn_json_put_str(stdout, f->path);
    if (!source) {
        printf(", \"mix\": ");
        if (f->mix)
            pn_json_put_str(stdout, f->mix);
        else
            printf("null");
    }
    printf(", \"bytes\": %llu, \"weights\": %llu, \"tensor_bytes\": %llu, "
           "\"bits_per_weight\": %.6f",
           (unsigned long long)f->file_bytes, (unsigned long long)f->weights,
           (unsigned long long)f->tensor_bytes, f->bpw);
    if (!source)
        printf(", \"pn_weights\": %llu, \"bits_per_weight_pn\": %.6f, \"kl_mean\": %.9g, "
               "\"kl_mean_se\": %.9g, \"kl_p99\": %.9g, \"kl_max\": %.9g, \"kl_max_at\": "
               "{\"sequence\": %zu, "
               "\"position\": %zu}, \"top1\": %.6f, \"seconds\": %.3f",
               (unsigned long long)f->pn_weights, f->bpw_pn, f->kl_mean, f->kl_se, f->kl_p99,
               f->kl_max, f->kl_max_seq, f->kl_max_pos, f->top1, f->seconds);
    printf("}");
}

/* The run's JSON after "source": the source file, the judge and the
 * tokens, up to the line break after them: how the report and the sweep's
 * report both begin. */
static void put_run_json(const pn_compare_report *r)
{
    put_file_json(&r->source, true);
    printf(",\n \"llama_cpp\": {\"release\": ");
    pn_json_put_str(stdout, r->llama_cpp);
    printf(", \"node_llama_cpp\": ");
    pn_json_put_str(stdout, r->node_llama_cpp);
    printf(", \"backend\": \"cpu\", \"threads\": %d},\n", r->threads);
    printf(" \"tokens\": {\"set\": \"%s\", \"sequences\": %zu, \"positions\": %zu, "
           "\"vocabulary\": %u},\n",
           r->from_text ? "text" : "fixed", r->n_seqs, r->n_positions, r->n_vocab);
}

static void print_json(const pn_compare_report *r, const char *decode, bool keep_rotation)
{
    printf("{\"source\": ");
    put_run_json(r);
    printf(" \"decode_type\": \"%s\", \"keep_rotation\": %s,\n \"files\": [", decode,
           keep_rotation ? "true" : "false");
    for (size_t i = 0; i < r->n_files; i++) {
        printf(i ? ",\n  " : "\n  ");
        put_file_json(&r->files[i], false);
    }
    printf("\n ],\n \"seconds\": %.3f}\n", r->seconds);
}

/* ---- --sweep ---- */

/* "0,10,19" into counts (at most PN_SWEEP_MAX_MIXES); -1 after the message. */
static int parse_counts(const char *v, int *out, size_t *n)
{
    *n = 0;
    const char *p = v;
    for (;;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > 1000000 || (*end && *end != ',') ||
            *n == PN_SWEEP_MAX_MIXES || *p == '-' || *p == '+' || *p == ' ') {
            fprintf(stderr,
                    "pn-compare: error: --promote: expected counts such as 0,10,19,40, got '");
            pn_fput_safe(stderr, v);
            fprintf(stderr, "'\n");
            return -1;
        }
        out[(*n)++] = (int)x;
        if (!*end)
            return 0;
        p = end + 1;
    }
}

/* "Q3_K_M,Q4_K_M" into names (pointers into a copy kept in *buf). */
static int parse_types(const char *v, char **buf, const char **out, size_t *n)
{
    *n = 0;
    free(*buf);
    *buf = strdup(v);
    if (!*buf)
        return -1;
    for (char *save = NULL, *t = strtok_r(*buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!pn_sweep_stock_type_known(t) || *n == PN_SWEEP_MAX_MIXES) {
            fprintf(stderr, "pn-compare: error: --stock: not a type the stock quantizer takes: '");
            pn_fput_safe(stderr, t);
            fprintf(stderr, "' (Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_M Q6_K Q8_0)\n");
            goto refused;
        }
        out[(*n)++] = t;
    }
    if (*n == 0) {
        fprintf(stderr, "pn-compare: error: --stock: no type given\n");
        goto refused;
    }
    return 0;
refused: /* the program exits at once: nothing may point into the copy */
    free(*buf);
    *buf = NULL;
    *n = 0;
    return -1;
}

static int parse_size_opt(const char *opt, const char *v, uint64_t *out)
{
    pn_error e;
    pn_error_clear(&e);
    if (pn_parse_size(v, out, &e) != PN_OK || *out == 0) {
        fprintf(stderr, "pn-compare: error: %s: '", opt);
        pn_fput_safe(stderr, v);
        fprintf(stderr, "': %s\n", e.msg[0] ? e.msg : "expected a size above 0 (12.6GB, 16GiB)");
        return -1;
    }
    return 0;
}

/* A program beside this one, else in ../libexec/pn-quantize/ (malloc'd). */
static char *beside_exe(const char *name)
{
    char *s = pn_cli_exe_path("/", name);
    if (s && access(s, X_OK) != 0) {
        free(s);
        s = pn_cli_exe_path("/../libexec/pn-quantize/", name);
    }
    return s;
}

static void print_sweep_table(const pn_sweep_report *s, const char *decode)
{
    if (s->compared)
        put_table_head(&s->compare, decode);
    else
        printf("no mix could be made: nothing compared\n\n");
    for (size_t i = 0; i < s->n_mixes; i++) {
        const pn_sweep_mix *m = &s->mixes[i];
        if (m->file_index >= 0 && s->compared) {
            put_table_row(&s->compare.files[m->file_index], m->name);
        } else {
            printf("%14s %8s %7s %10s   %-7s %10s %10s %7s  %-16s ", "failed", "-", "-", "-", "",
                   "-", "-", "-", m->name);
            pn_fput_safe(stdout, m->error);
            putchar('\n');
        }
    }
    for (int k = 0; k < 2; k++)
        if (s->kept_measurement[k]) {
            printf(k && s->kept_measurement[0] ? "measurement kept: " : "\nmeasurement kept: ");
            pn_fput_safe(stdout, s->kept_measurement[k]);
            putchar('\n');
        }
    printf("\n%.1f s (%zu mix%s, %zu failed)\n", s->seconds, s->n_mixes,
           s->n_mixes == 1 ? "" : "es", s->n_failed);
}

static void print_sweep_json(const pn_sweep_report *s, const char *decode)
{
    const pn_compare_report *r = &s->compare;
    printf("{\"sweep\": true, \"compared\": %s", s->compared ? "true" : "false");
    if (s->compared) {
        printf(",\n \"source\": ");
        put_run_json(r);
        printf(" \"decode_type\": \"%s\"", decode);
    }
    printf(",\n \"mixes\": [");
    for (size_t i = 0; i < s->n_mixes; i++) {
        const pn_sweep_mix *m = &s->mixes[i];
        printf(i ? ",\n  " : "\n  ");
        printf("{\"name\": ");
        pn_json_put_str(stdout, m->name);
        printf(", \"kind\": \"%s\", \"file\": ", m->kind == PN_SWEEP_STOCK ? "stock" : "pn");
        pn_json_put_str(stdout, m->file);
        printf(", \"kept\": ");
        if (m->kept)
            pn_json_put_str(stdout, m->kept);
        else
            printf("null");
        if (m->kind == PN_SWEEP_STOCK)
            printf(", \"order\": null");
        else
            printf(", \"order\": \"%s\"", pn_sweep_order_name(m->order));
        printf(", \"make_seconds\": %.3f", m->make_seconds);
        if (m->file_index >= 0 && s->compared) {
            printf(", \"status\": \"ok\", \"result\": ");
            put_file_json(&r->files[m->file_index], false);
        } else {
            printf(", \"status\": \"failed\", \"error\": ");
            pn_json_put_str(stdout, m->error);
        }
        printf("}");
    }
    printf("\n ],\n \"failed\": %zu, \"seconds\": %.3f}\n", s->n_failed, s->seconds);
}

/* What --sweep's options set. */
typedef struct sweep_cli {
    pn_sweep_opts so;
    int on, given, qthreads, force;
    int counts[PN_SWEEP_MAX_MIXES];
    const char *types[PN_SWEEP_MAX_MIXES];
    char *types_buf, *quantizer;
    const char *plot, *gnuplot;
    uint64_t budget;
    int quiet;
    pn_sweep_order orders[PN_SWEEP_N_ORDERS]; /* --measure LIST */
    char recipe_buf[4096];                    /* --recipe NAME: the shipped file */
} sweep_cli;

/* A --sweep option: 1 taken, 0 not one of them, -1 refused (message out). */
static int sweep_option(int c, sweep_cli *w)
{
    int bad = 0;
    switch (c) {
    case O_SWEEP: w->on = 1; return 1;
    case O_FORCE: w->force = 1; return 1;
    case O_PROMOTE:
        bad = parse_counts(optarg, w->counts, &w->so.n_promote);
        w->so.promote = w->counts;
        break;
    case O_TARGET: bad = parse_size_opt("--target-size", optarg, &w->so.target_size); break;
    case O_RECIPE:
        /* a file, or a shipped recipe by name, as pn-quantize takes it */
        w->so.recipe_path =
            pn_cli_recipe_path("pn-compare", optarg, w->recipe_buf, sizeof w->recipe_buf);
        bad = !w->so.recipe_path;
        break;
    case O_STOCK:
        bad = parse_types(optarg, &w->types_buf, w->types, &w->so.n_stock);
        w->so.stock = w->types;
        break;
    case O_IMATRIX: w->so.imatrix_path = optarg; break;
    case O_KEEP_DIR: w->so.keep_dir = optarg; break;
    case O_PLOT: w->plot = optarg; break;
    case O_BUDGET: bad = parse_size_opt("--budget", optarg, &w->budget); break;
    case O_QTHREADS: bad = parse_int("--quantize-threads", optarg, 1, 4096, &w->qthreads); break;
    case O_QUANTIZER:
        free(w->quantizer);
        w->quantizer = strdup(optarg);
        break;
    case O_LIBLLAMA: w->so.libllama = optarg; break;
    case O_GNUPLOT: w->gnuplot = optarg; break;
    case O_MEASURE: {
        pn_error e;
        pn_error_clear(&e);
        if (pn_sweep_orders_parse(optarg, w->orders, &w->so.n_orders, &e) != PN_OK) {
            fputs("pn-compare: error: ", stderr);
            pn_fput_safe(stderr, e.msg);
            fputc('\n', stderr);
            bad = 1;
        }
        w->so.orders = w->orders;
        break;
    }
    case O_CALIBRATION: w->so.calibration_path = optarg; break;
    default: return 0;
    }
    w->given = 1;
    return bad ? -1 : 1;
}

/* The usage rules of --sweep: 0, or 2 after the message. */
static int sweep_usage(const sweep_cli *w, int n_args)
{
    const char *why = NULL;
    bool kl = false;
    for (size_t i = 0; i < w->so.n_orders; i++)
        kl |= w->orders[i] == PN_SWEEP_BY_KL;
    if (!w->on && w->given)
        why = "--promote, --target-size, --stock, --imatrix, --keep, --plot and the like go "
              "with --sweep";
    else if (w->on && n_args != 1)
        why = "--sweep: expected one SOURCE (the mixes are made from it)\nTry 'pn-compare "
              "--help'.";
    else if (w->on && !w->so.n_promote && !w->so.target_size && !w->so.n_stock)
        why = "--sweep: no mix to make: give --promote, --target-size or --stock";
    else if (w->budget && !w->plot)
        why = "--budget is a line of the --plot picture";
    else if (kl != (w->so.calibration_path != NULL))
        why = kl ? "--measure kl needs --calibration FILE, a text other than --text"
                 : "--calibration goes with --measure kl";
    if (!why)
        return 0;
    fprintf(stderr, "pn-compare: error: %s\n", why);
    return 2;
}

/* The sweep's picture: every mix compared, with its standard error and its
 * bits per weight as the table gives them, and a caption that says what
 * was judged, on what and by what. */
static pn_status draw_sweep(const pn_sweep_report *srep, pn_plot_opts *po, const pn_compare_opts *o,
                            const char *decode, size_t n_orders, pn_error *err)
{
    /* more than one order: each its own curve, named in the key */
    static const char *const curves[PN_SWEEP_N_ORDERS] = { "PN, promotions by error",
                                                           "PN, promotions by forward position",
                                                           "PN, promotions by KL" };
    pn_plot_point pts[PN_SWEEP_MAX_MIXES];
    size_t np = 0;
    for (size_t i = 0; i < srep->n_mixes; i++) {
        const pn_sweep_mix *m = &srep->mixes[i];
        if (m->file_index < 0)
            continue;
        const pn_compare_file *f = &srep->compare.files[m->file_index];
        pts[np] = (pn_plot_point){ .name = m->name,
                                   .stock = m->kind == PN_SWEEP_STOCK,
                                   .bytes = f->file_bytes,
                                   .kl_mean = f->kl_mean,
                                   .kl_se = f->kl_se,
                                   .bpw = f->bpw };
        if (n_orders > 1 && m->kind == PN_SWEEP_PN)
            pts[np].curve = curves[m->order];
        np++;
    }
    const pn_compare_report *r = &srep->compare;
    char tokens[1200], caption[2400];
    if (r->from_text)
        snprintf(tokens, sizeof tokens,
                 "judged on the text %.600s: %zu sequences of at most %d tokens, %zu positions",
                 o->text_path, r->n_seqs, o->seq_len, r->n_positions);
    else
        snprintf(tokens, sizeof tokens,
                 "judged on the fixed token set: %zu sequences, %zu positions", r->n_seqs,
                 r->n_positions);
    snprintf(caption, sizeof caption,
             "source %.600s (%llu weights)\n%s\nby stock llama.cpp %s (node-llama-cpp %s, CPU, "
             "%d thread%s), the PN mixes decoded as %s; bars: the mean's standard error over "
             "the positions",
             r->source.path, (unsigned long long)r->source.weights, tokens, r->llama_cpp,
             r->node_llama_cpp, r->threads, r->threads == 1 ? "" : "s", decode);
    po->caption = caption;
    return pn_plot_draw(po, pts, np, err);
}

/* The sweep, its picture and its table: the exit status. */
static int run_sweep(sweep_cli *w, const pn_compare_opts *o, int json, const char *decode)
{
    pn_sweep_opts so = w->so;
    char *quantizer = w->quantizer;
    w->quantizer = NULL; /* freed here */
    const char *plot = w->plot;
    pn_error err;
    pn_error_clear(&err);
    pn_plot_opts po = { 0 };
    po.path = plot;
    po.gnuplot = w->gnuplot;
    po.envp = environ;
    po.budget = w->budget;
    po.force = w->force;
    po.source = o->source_path;
    po.inputs[0] = o->text_path;
    po.inputs[1] = w->so.imatrix_path;
    po.inputs[2] = w->so.recipe_path;
    pn_status st = plot ? pn_plot_check_target(&po, &err) : PN_OK;
    if (st == PN_OK) {
        so.compare = *o;
        so.quantize_threads = w->qthreads ? w->qthreads : o->threads;
        if (!quantizer)
            quantizer = beside_exe("pn-llama-quantize");
        so.quantizer = quantizer;
    }
    pn_sweep_report srep;
    memset(&srep, 0, sizeof srep);
    if (st == PN_OK)
        st = pn_sweep_run(&so, &srep, &err);
    pn_cli_meter_end(&((progress_state *)o->user)->meter);
    free(quantizer);
    if (st == PN_OK && plot && srep.compared) {
        st = draw_sweep(&srep, &po, o, decode, w->so.n_orders, &err);
        if (st == PN_OK && !w->quiet) {
            fputs("wrote ", stderr);
            pn_fput_safe(stderr, plot);
            fputc('\n', stderr);
        }
    }
    if (st != PN_OK) {
        fputs("pn-compare: error: ", stderr);
        pn_fput_safe(stderr, err.msg[0] ? err.msg : pn_strerror(st));
        fputc('\n', stderr);
        pn_sweep_report_free(&srep);
        return pn_cli_exit_status_signal(st, *o->cancel);
    }
    if (plot && !srep.compared)
        fprintf(stderr, "pn-compare: no picture: no mix could be made\n");
    if (json)
        print_sweep_json(&srep, decode);
    else
        print_sweep_table(&srep, decode);
    for (size_t i = 0; i < srep.n_mixes; i++)
        if (srep.mixes[i].status != PN_OK) {
            fprintf(stderr, "pn-compare: error: %s failed: ", srep.mixes[i].name);
            pn_fput_safe(stderr, srep.mixes[i].error);
            fputc('\n', stderr);
        }
    size_t failed = srep.n_failed;
    pn_sweep_report_free(&srep);
    int rc = pn_cli_close_stdout("pn-compare");
    return rc ? rc : failed ? 1 : 0;
}

static int compare_main(int argc, char **argv, sweep_cli *w, char **script);

/* What the options allocated is freed here, on every path. */
int main(int argc, char **argv)
{
    sweep_cli w;
    memset(&w, 0, sizeof w);
    char *script = NULL;
    int rc = compare_main(argc, argv, &w, &script);
    free(w.types_buf);
    free(w.quantizer);
    free(script);
    return rc;
}

static int compare_main(int argc, char **argv, sweep_cli *w, char **script)
{
    pn_compare_opts o;
    pn_compare_opts_init(&o);
    o.threads = 0;
    int json = 0, quiet = 0, progress = 0, text_opts = 0, tmp_given = 0;
    const char *decode = pn_type_name(PN_TYPE_F32);
    pn_sweep_opts_init(&w->so);
    int c;
    while ((c = pn_cli_next(&program, argc, argv)) != -1) {
        int taken = sweep_option(c, w);
        if (taken < 0)
            return 2;
        if (taken)
            continue;
        switch (c) {
        case O_TEXT: o.text_path = optarg; break;
        case O_SEQ_LEN:
            if (parse_int("--seq-len", optarg, 1, 1 << 20, &o.seq_len))
                return 2;
            text_opts = 1;
            break;
        case O_MAX_SEQS:
            if (parse_int("--max-seqs", optarg, 1, 1 << 20, &o.max_seqs))
                return 2;
            text_opts = 1;
            break;
        case O_THREADS:
            if (parse_int("--threads", optarg, 1, 4096, &o.threads))
                return 2;
            break;
        case O_DECODE:
            o.decode_type = pn_float_type_from_name(optarg);
            if (o.decode_type < 0) {
                fprintf(stderr,
                        "pn-compare: error: --decode-type: expected f32, f16 or bf16, got '%s'\n",
                        optarg);
                return 2;
            }
            decode = optarg;
            break;
        case O_KEEP: o.keep_rotation = true; break;
        case O_TMPDIR:
            o.tmp_dir = optarg;
            tmp_given = 1;
            break;
        case O_JSON: json = 1; break;
        case O_NODE: o.node = optarg; break;
        case O_SCRIPT:
            free(*script);
            *script = strdup(optarg);
            break;
        case O_QUIET:
            quiet = 1;
            w->quiet = 1;
            break;
        case O_PROGRESS: progress = 1; break;
        case 'h': pn_cli_usage(stdout, &program); return pn_cli_close_stdout("pn-compare");
        case O_VERSION:
            printf("pn-compare %s\n", PN_VERSION);
            return pn_cli_close_stdout("pn-compare");
        default: return pn_cli_refuse_option(&program, argv);
        }
    }
    if (sweep_usage(w, argc - optind))
        return 2;
    if (!w->on && !pn_cli_positional("pn-compare", argc, argv, 2, -1, "SOURCE.gguf PN.gguf..."))
        return 2;
    if (!o.text_path && text_opts) {
        fprintf(stderr,
                "pn-compare: error: --seq-len and --max-seqs cut a --text; the fixed set is "
                "4 sequences of 64\n");
        return 2;
    }
    if (o.threads == 0)
        o.threads = pn_cli_usable_cpus();
    pn_cli_cap_threads("pn-compare", "--threads", &o.threads, quiet);
    pn_cli_cap_threads("pn-compare", "--quantize-threads", &w->qthreads, quiet);
    o.dequant_threads = o.threads;
    if (!tmp_given) {
        const char *t = getenv("TMPDIR");
        o.tmp_dir = t && *t ? t : "/tmp";
    }
    if (!*script)
        *script = pn_cli_llama_script();
    if (!*script) {
        fprintf(stderr, "pn-compare: error: cannot tell where this program is (/proc/self/exe); "
                        "give --llama-script\n");
        return 1;
    }
    o.script = *script;
    o.envp = environ;
    o.source_path = argv[optind];
    o.pn_paths = (const char *const *)&argv[optind + 1];
    o.n_pn = (size_t)(argc - optind - 1);
    volatile sig_atomic_t *cancel = pn_cli_trap_signals();
    o.cancel = cancel;
    progress_state ps = { 0 };
    pn_cli_meter_open(&ps.meter, quiet, progress);
    o.progress = on_progress;
    o.user = &ps;

    pn_error err;
    pn_error_clear(&err);
    if (w->on)
        return run_sweep(w, &o, json, decode);
    pn_compare_report rep;
    pn_status st = pn_compare_run(&o, &rep, &err);
    pn_cli_meter_end(&ps.meter);
    if (st != PN_OK) {
        fputs("pn-compare: error: ", stderr);
        pn_fput_safe(stderr, err.msg[0] ? err.msg : pn_strerror(st));
        fputc('\n', stderr);
        return pn_cli_exit_status_signal(st, *cancel);
    }
    if (json)
        print_json(&rep, decode, o.keep_rotation);
    else
        print_table(&rep, decode);
    pn_compare_report_free(&rep);
    return pn_cli_close_stdout("pn-compare");
}
