/* pn-quantize: float GGUF -> PN GGUF. Parses options and the environment,
 * prints progress and notes, and through quantize_report.h the plan, the
 * totals and the report; the work is pn_quantize_file (pipeline/quantize.h).
 * Everything that comes from a file (tensor names, messages naming them) is
 * printed terminal-safe (common/text.h); the report is JSON written with
 * pn_json_put_str. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/cli.h"
#include "cmd/quantize_kl.h"
#include "cmd/quantize_report.h"
#include "common/file.h"
#include "common/outfile.h"
#include "common/text.h"
#include "io/source_open.h"
#include "mix/plan.h"
#include "mix/size.h"
#include "pipeline/quantize.h"
#include "quant/pn_fast.h"
#include "quant/types.h"

extern char **environ;

/* What pn_cli_next returns for each option. */
enum {
    O_RECIPE = 256,
    O_PROMOTE,
    O_PLIST,
    O_MEAS,
    O_MROWS,
    O_TARGET,
    O_ROT,
    O_THREADS,
    O_BACKEND,
    O_DEVICE,
    O_DRY,
    O_REPORT,
    O_FORCE,
    O_QUIET,
    O_PROGRESS,
    O_VERSION,
    O_SPLIT_SIZE,
    O_SPLIT_TENSORS,
    O_KEEP_SPLIT,
    O_SPLIT_INDEX,
    O_REUSE,
    O_REUSE_VERIFY,
    O_NO_MTP,
    O_KEEP_MTP,
    O_TOKPRE,
    O_TENSOR_TYPE,
    O_OUTPUT_TYPE,
    O_EMBD_TYPE,
    O_IMATRIX,
    O_IMATRIX_MISSING,
    O_IMATRIX_PROMOTION,
    O_KL /* O_KL + KL_OPT_*: the --measure kl options (quantize_kl.h) */
};

/* The most --tensor-type options one run takes. */
#define MAX_OVERRIDES 64

static const pn_cli_option options[] = {
    { "recipe", required_argument, O_RECIPE,
      "  --recipe FILE|NAME      mix recipe: a file, or a shipped recipe by name\n"
      "                          (qwen3.8-27b-pn3, test-fallback; default: the built-in\n"
      "                          P0k+19, recipes/qwen3.8-27b-pn3.mix)\n" },
    { "tensor-type", required_argument, O_TENSOR_TYPE,
      "  --tensor-type PATTERN=TYPE\n"
      "                          as llama-quantize: tensors in whose name PATTERN, a\n"
      "                          POSIX extended regular expression, is found (with * or\n"
      "                          ?, also those it matches as a glob of the whole name) get\n"
      "                          TYPE, final (never promoted); repeatable, the first\n"
      "                          match wins, before the recipe's rules; one that matches\n"
      "                          no tensor is refused; recorded in pn.mix.overrides\n" },
    { "output-tensor-type", required_argument, O_OUTPUT_TYPE,
      "  --output-tensor-type TYPE  output.weight gets TYPE (after --tensor-type)\n" },
    { "token-embedding-type", required_argument, O_EMBD_TYPE,
      "  --token-embedding-type TYPE  token_embd.weight gets TYPE (after --tensor-type)\n" },
    { "promote", required_argument, O_PROMOTE,
      "  --promote N             number of pn3t -> pn4t promotions (overrides the recipe)\n" },
    { "promote-list", required_argument, O_PLIST,
      "  --promote-list FILE     promote exactly these tensor names, one per line\n" },
    { "measurement", required_argument, O_MEAS,
      "  --measurement FILE      read the promotion measurement from FILE if it exists,\n"
      "                          else measure and save it there\n" },
    { "imatrix", required_argument, O_IMATRIX,
      "  --imatrix FILE          llama.cpp's importance matrix (llama-imatrix, GGUF or .dat):\n"
      "                          weight the q3_K/q4_K search by what the model's\n"
      "                          activations see (docs/usage.md#imatrix)\n" },
    { "imatrix-promotion", required_argument, O_IMATRIX_PROMOTION,
      "  --imatrix-promotion unweighted|weighted\n"
      "                          the promotion measurement: unweighted (default: the imatrix\n"
      "                          does not change which tensors are promoted) or weighted by it\n" },
    { "imatrix-missing", required_argument, O_IMATRIX_MISSING,
      "  --imatrix-missing error|unweighted\n"
      "                          with --imatrix-promotion weighted, a candidate without an\n"
      "                          entry: an error (default), or measured unweighted\n" },
    { "measure", required_argument, O_KL + KL_OPT_MEASURE,
      "  --measure error|forward|kl  how promotion candidates are ranked: error (default:\n"
      "                          the weight error each removes, measured on sampled rows),\n"
      "                          forward (the earliest in the forward pass first, the error\n"
      "                          within one position; docs/usage.md) or kl (each promoted\n"
      "                          alone over the base mix and judged by stock llama.cpp on\n"
      "                          --calibration; docs/usage.md#kl)\n" },
    { "calibration", required_argument, O_KL + KL_OPT_CALIBRATION,
      "  --calibration FILE      --measure kl: the text the candidates are judged on\n" },
    { "seq-len", required_argument, O_KL + KL_OPT_SEQ_LEN,
      "  --seq-len N             --measure kl: tokens per sequence (default 256)\n" },
    { "max-seqs", required_argument, O_KL + KL_OPT_MAX_SEQS,
      "  --max-seqs N            --measure kl: most sequences of the text (default 8)\n" },
    { "measure-part", required_argument, O_KL + KL_OPT_PART,
      "  --measure-part I/N      --measure kl: measure only share I of N into\n"
      "                          --measurement FILE.part-IIIII-of-NNNNN (no DST); a later\n"
      "                          run with --measurement FILE joins the N parts\n" },
    { "judge", no_argument, O_KL + KL_OPT_JUDGE,
      "  --judge                 --measure kl: judge the written mix on the calibration\n"
      "                          text and print its KL beside the base's\n" },
    { "node", required_argument, O_KL + KL_OPT_NODE,
      "  --node PROG             --measure kl: the Node.js program (default: node)\n" },
    { "llama-script", required_argument, O_KL + KL_OPT_SCRIPT,
      "  --llama-script FILE     --measure kl: the llama.cpp harness (default:\n"
      "                          ../share/pn-quantize/llama/ beside the program)\n" },
    { "measure-rows", required_argument, O_MROWS,
      "  --measure-rows N        rows sampled per tensor for the measurement (default 256)\n" },
    { "reuse", required_argument, O_REUSE,
      "  --reuse PREV.gguf       copy from PREV, an earlier output of this source, every\n"
      "                          tensor it holds with the same type, rotation and quantizer\n"
      "                          whose sampled source rows are unchanged; quantize the rest\n"
      "                          (the output is the same bytes; PREV may be DST, with --force)\n" },
    { "reuse-verify", no_argument, O_REUSE_VERIFY,
      "  --reuse-verify          with --reuse: copy only tensors whose whole source bytes\n"
      "                          match PREV's record (reads them, quantizes nothing more)\n" },
    { "target-size", required_argument, O_TARGET,
      "  --target-size SIZE      choose the number of promotions: the most (in measured\n"
      "                          order) whose file still fits SIZE (12.5GiB, 13G, 13e9)\n" },
    { "rotation", required_argument, O_ROT,
      "  --rotation none|hadamard[:CAP]\n"
      "                          override the recipe's rotation (none is for experiments)\n" },
    { "threads", required_argument, O_THREADS,
      "  --threads N             worker threads (default: all cores)\n" },
    { "backend", required_argument, O_BACKEND,
      "  --backend auto|cpu|cuda scale search on the CPU or a CUDA GPU (default auto:\n"
      "                          the GPU when one is usable, else the CPU)\n" },
    { "device", required_argument, O_DEVICE,
      "  --device N              CUDA device index (default 0)\n" },
    { "dry-run", no_argument, O_DRY,
      "  --dry-run               print the plan (tensor, shape, types, bytes, totals; the\n"
      "                          files of a split output) and exit without writing DST,\n"
      "                          which may be omitted (one given is refused where the real\n"
      "                          run would refuse it); the promotion measurement it makes\n"
      "                          is still saved to --measurement FILE, and --report FILE\n"
      "                          written (the plan, without errors or times)\n" },
    { "split-max-size", required_argument, O_SPLIT_SIZE,
      "  --split-max-size SIZE   write DST as a split set, as llama.cpp's gguf-split does:\n"
      "                          NAME.gguf becomes NAME-00001-of-0000N.gguf ... beside it,\n"
      "                          each split at most SIZE of tensor data (50G, 500M as\n"
      "                          gguf-split takes them, or 48GiB, 2.5GB); SRC may be any\n"
      "                          file of a split set too\n" },
    { "split-max-tensors", required_argument, O_SPLIT_TENSORS,
      "  --split-max-tensors N   the same, at most N tensors per split\n" },
    { "keep-split", no_argument, O_KEEP_SPLIT,
      "  --keep-split            split DST the way the split source is split\n" },
    { "no-mtp", no_argument, O_NO_MTP,
      "  --no-mtp                drop the source's MTP layer (blk.L.nextn.*), keys fixed as\n"
      "                          convert_hf_to_gguf.py --no-mtp writes them (docs/hf.md);\n"
      "                          the shipped PN3 recipe drops it already ('mtp drop')\n" },
    { "keep-mtp", no_argument, O_KEEP_MTP,
      "  --keep-mtp              keep the source's MTP layer where the recipe says\n"
      "                          'mtp drop' (Qwen3.8-27B: 866 tensors instead of 851)\n" },
    { "tokenizer-pre", required_argument, O_TOKPRE,
      "  --tokenizer-pre NAME    SRC a folder: tokenizer.ggml.pre where its pattern is unknown\n" },
    { "split-index", required_argument, O_SPLIT_INDEX,
      "  --split-index I         write only split I (from 0) of that plan, under its name\n"
      "                          in a full run and byte for byte that file, given the same\n"
      "                          options and --measurement: one task per split of a batch\n"
      "                          scheduler (docs/split.md)\n" },
    { "report", required_argument, O_REPORT,
      "  --report FILE.json      per-tensor report: name, shape, source type, type, bytes,\n"
      "                          relative error, seconds; and the per-phase times\n"
      "                          (written before DST is committed, in place right after)\n" },
    { "force", no_argument, O_FORCE,
      "  --force                 allow replacing an existing DST (and report, and a\n"
      "                          --measurement FILE of another source)\n" },
    { "quiet", no_argument, O_QUIET,
      "  --quiet                 no progress, no plan totals and no notes (errors still)\n" },
    { "progress", no_argument, O_PROGRESS,
      "  --progress              progress on stderr even when it is not a terminal\n" },
    { "help", no_argument, 'h', "  -h, --help              this text\n" },
    { "version", no_argument, O_VERSION, "  --version               the version\n" },
    { NULL, 0, 0, NULL },
};

static const pn_cli_program program = {
    "pn-quantize",
    "usage: pn-quantize [options] SRC DST.gguf\n"
    "       pn-quantize [options] SRC DIR       (writes DIR/<general.name>-<pn.mix>.gguf)\n"
    "\n"
    "Quantizes a float GGUF (F32/F16/BF16) to a PN GGUF: rotates the weights that\n"
    "become pn3t/pn4t, assigns every tensor a type by a mix recipe, runs the\n"
    "36-candidate scale search, writes DST beside itself under a temporary name,\n"
    "re-reads and validates it, then renames it into place. On any error or signal\n"
    "nothing is left at DST; SRC is never modified. SRC may also be a Hugging Face\n"
    "model folder (Qwen3.5: safetensors shards, config.json, tokenizer), its\n"
    "config.json or its index: it is read as the GGUF that llama.cpp's\n"
    "convert_hf_to_gguf.py --outtype bf16 writes from it (docs/hf.md).\n"
    "\n"
    "options:\n",
    options,
    "\n"
    "environment:\n"
    "  PN_CPU_PATH=ref|scalar|avx2|avx512   the CPU path (default: the best this CPU\n"
    "                          runs; every path writes the same bytes)\n"
    "  PN_CHUNK_WEIGHTS=N      weights per chunk (default 4194304; the output does not\n"
    "                          depend on it)\n"
    "  PN_CUDA_EMULATE=1       run the CUDA backend's kernel on the host (tests)\n"
    "\n"
    "exit status: 0 written and validated, 1 what the files hold (message on\n"
    "stderr), 2 the command line itself, 128+N signal N (130 SIGINT, 143 SIGTERM,\n"
    "129 SIGHUP)\n",
};

typedef struct cli_state {
    int show_progress;
    int tty;
    pn_cli_meter meter; /* the progress line (cli.h) */
    int quiet;
    int force_progress; /* --progress: even when stderr is no terminal */
    int force;
    const char *report_path;
    pn_outfile *report; /* the report: opened before the run, written before
                                  the output's commit, committed after it */
    char *totals;       /* the plan totals, printed after a successful run */
    size_t totals_len;
    char *files; /* the files of a split output, printed after it */
    size_t files_len;
    size_t n_splits; /* of the output */
    long split_index;
    char *dst_written;      /* DST, or the file named in DST the folder */
    char recipe_path[4096]; /* --recipe NAME: the shipped file */
    pn_recipe_override overrides[MAX_OVERRIDES];
    size_t n_overrides;
    kl_cli kl; /* --measure kl */
} cli_state;

/* ---- the report file: checked like DST, written through common/outfile ---- */

static void discard_report(cli_state *s)
{
    pn_outfile_free(s->report); /* discards it unless committed */
    s->report = NULL;
}

/* The report path may not name an input or the output, nor replace a file
 * without --force. Returns the exit status to use, or 0. */
static int check_report_path(const cli_state *s, const pn_quantize_opts *o)
{
    const char *rp = s->report_path;
    const char *inputs[] = { o->src_path,         o->recipe_path, o->promote_list_path,
                             o->measurement_path, o->reuse_path,  o->imatrix_path };
    const char *what[] = { "the source",      "the recipe",       "the promote list",
                           "the measurement", "the --reuse file", "the imatrix" };
    for (int i = 0; i < 6; i++)
        if (inputs[i] && pn_same_file(rp, inputs[i])) {
            fprintf(stderr, "pn-quantize: error: --report ");
            pn_fput_safe(stderr, rp);
            fprintf(stderr, ": that is %s; choose another report path\n", what[i]);
            return 2;
        }
    pn_error se = { 0 };
    if (pn_source_check_target(o->src_path, rp, "the report", &se) != PN_OK) {
        fputs("pn-quantize: error: --report: ", stderr);
        pn_fput_safe(stderr, se.msg);
        fputc('\n', stderr);
        return 2;
    }
    if (o->dst_path && pn_same_file(rp, o->dst_path)) {
        fprintf(stderr, "pn-quantize: error: --report ");
        pn_fput_safe(stderr, rp);
        fprintf(stderr, ": that is the output; choose another report path\n");
        return 2;
    }
    struct stat sb;
    if (stat(rp, &sb) == 0) {
        const char *kind = pn_not_regular_kind(rp);
        if (kind || !s->force) {
            fprintf(stderr, "pn-quantize: error: ");
            pn_fput_safe(stderr, rp);
            if (kind)
                fprintf(stderr, ": the report path is %s\n", kind);
            else
                fprintf(stderr, ": the report exists; use --force to replace it\n");
            return 1;
        }
    }
    return 0;
}

/* Writes the report into its output file (opened before the run). */
static pn_status write_report(cli_state *s, const pn_quantize_result *r, pn_error *err)
{
    FILE *f = pn_outfile_stream(s->report, err);
    if (!f)
        return err->code ? err->code : PN_ERR_IO;
    quantize_write_report_json(f, r);
    return pn_outfile_finish(s->report, err);
}

/* Puts the report in place (common/outfile.h): with --force over whatever
 * is there, else only where nothing is (PN_ERR_EXISTS when a file appeared
 * there during the run). */
static pn_status commit_report(cli_state *s, pn_error *err)
{
    pn_status st = pn_outfile_commit(s->report, err);
    discard_report(s);
    return st;
}

/* The job's result hook: the dry run's plan, the totals for later, and the
 * report under a temporary name (committed once the output is in place). */
static pn_status on_result(const pn_quantize_result *r, void *user, pn_error *err)
{
    cli_state *s = user;
    s->n_splits = r->n_splits;
    s->split_index = r->split_index;
    free(s->dst_written);
    s->dst_written = r->dst_path ? strdup(r->dst_path) : NULL;
    kl_cli_take_plan(&s->kl, r->plan);
    if (r->dry_run) {
        quantize_print_plan_table(stdout, r, &s->kl);
        quantize_print_totals(stdout, r);
        quantize_print_files(stdout, r);
    } else if (!s->quiet) {
        FILE *m = open_memstream(&s->totals, &s->totals_len);
        if (m) {
            quantize_print_totals(m, r);
            fclose(m);
        }
        m = open_memstream(&s->files, &s->files_len);
        if (m) {
            quantize_print_files(m, r);
            fclose(m);
        }
    }
    if (!s->report_path)
        return PN_OK;
    /* DST was checked before the run; the files of a split output are known
     * only now */
    for (size_t k = 0; k < r->n_splits; k++)
        if (r->split_paths[k] && (strcmp(r->split_paths[k], s->report_path) == 0 ||
                                  pn_same_file(r->split_paths[k], s->report_path)))
            return pn_error_set(err, PN_ERR_USAGE,
                                "--report %s: that is split %zu of the output; choose another "
                                "report path",
                                s->report_path, k + 1);
    return write_report(s, r, err);
}

/* ---- progress and notes ------------------------------------------------ */

static const char *phase_name(int phase)
{
    switch (phase) {
    case PN_PHASE_MEASURE: return "measuring";
    case PN_PHASE_VALIDATE: return "validating";
    case PN_PHASE_IDENTITY: return "reading sampled rows";
    case PN_PHASE_REUSE_CHECK: return "checking for --reuse";
    default: return "quantizing";
    }
}

static void on_progress(const pn_progress *p, void *user)
{
    cli_state *s = user;
    if (!s->show_progress)
        return;
    if (!pn_cli_meter_due(&s->meter, p->elapsed_s,
                          p->weights_done >= p->weights_total || p->phase == PN_PHASE_VALIDATE))
        return;
    pn_cli_meter_line(&s->meter, phase_name(p->phase), "tensor",
                      p->tensor_index + (p->phase != PN_PHASE_VALIDATE), p->n_tensors,
                      p->tensor_name, (double)p->weights_done, (double)p->weights_total,
                      p->elapsed_s, "w");
}

/* Prints a message from the library line by line, each line terminal-safe. */
static void put_lines(FILE *f, const char *prefix, const char *msg)
{
    const char *p = msg;
    do {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char *line = strndup(p, n);
        fputs(prefix, f);
        pn_fput_safe(f, line ? line : "");
        fputc('\n', f);
        free(line);
        p = nl ? nl + 1 : NULL;
    } while (p && *p);
}

static void on_note(const char *msg, void *user)
{
    cli_state *s = user;
    if (s->quiet)
        return; /* --quiet: notes too (errors are no notes: they always print) */
    if (s->tty && s->show_progress)
        fputs("\r\033[K", stderr);
    put_lines(stderr, "pn-quantize: ", msg);
}

/* ---- options and the environment --------------------------------------- */

/* The environment variables the program honours, read once here (the
 * library reads none): a bad value is a usage error naming the variable. */
static int read_environment(pn_quantize_opts *o)
{
    const char *v = getenv(PN_CPU_PATH_ENV);
    if (v) {
        int p = pn_path_from_name(v);
        if (p < 0 || !pn_path_available(p)) {
            char have[128] = "";
            size_t n = 0;
            for (int i = 0; i < PN_PATH_COUNT; i++)
                if (pn_path_available(i))
                    n += (size_t)snprintf(have + n, sizeof have - n, "%s%s", n ? ", " : "",
                                          pn_path_name(i));
            fprintf(stderr, "pn-quantize: error: %s=", PN_CPU_PATH_ENV);
            pn_fput_safe(stderr, v);
            fprintf(stderr, ": %s ref, scalar, avx2 or avx512 (this CPU has: %s)\n",
                    p < 0 ? "expected" : "not available here; expected", have);
            return -1;
        }
        o->cpu_path = p;
    }
    v = getenv("PN_CHUNK_WEIGHTS");
    if (v) {
        char *end;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (errno || end == v || *end || n < PN_CHUNK_WEIGHTS_MIN || n > PN_CHUNK_WEIGHTS_MAX) {
            fprintf(stderr, "pn-quantize: error: PN_CHUNK_WEIGHTS=");
            pn_fput_safe(stderr, v);
            fprintf(stderr, ": expected a number of weights from %lld to %lld\n",
                    (long long)PN_CHUNK_WEIGHTS_MIN, (long long)PN_CHUNK_WEIGHTS_MAX);
            return -1;
        }
        o->chunk_weights = n;
    }
    v = getenv("PN_CUDA_EMULATE");
    if (v) {
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
            fprintf(stderr, "pn-quantize: error: PN_CUDA_EMULATE=");
            pn_fput_safe(stderr, v);
            fprintf(stderr, ": expected 0 or 1\n");
            return -1;
        }
        o->cuda_emulate = v[0] == '1';
    }
    return 0;
}

/* Everything the program printed must have reached stdout. */
static int finish_stdout(int status)
{
    int bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        fprintf(stderr, "pn-quantize: error: cannot write to standard output: %s\n", strerror(e));
        return status ? status : 1;
    }
    return status;
}

/* --rotation's value (none, hadamard or hadamard:CAP) into o->rotation_cap.
 * Returns -1 to go on, or 2 after the message. */
static int take_rotation(const char *arg, pn_quantize_opts *o)
{
    long v;
    if (strcmp(arg, "none") == 0)
        o->rotation_cap = 0;
    else if (strcmp(arg, "hadamard") == 0)
        o->rotation_cap = 1024;
    else if (strncmp(arg, "hadamard:", 9) == 0) {
        if (!pn_cli_long("pn-quantize", "--rotation hadamard:CAP", arg + 9, 1, 4096, &v))
            return 2;
        if (v & (v - 1)) {
            fprintf(stderr, "pn-quantize: error: --rotation: the cap %ld is not a power of two\n",
                    v);
            return 2;
        }
        o->rotation_cap = (int)v;
    } else {
        fprintf(stderr, "pn-quantize: error: --rotation: expected none, hadamard or "
                        "hadamard:CAP, got '");
        pn_fput_safe(stderr, arg);
        fprintf(stderr, "'\n");
        return 2;
    }
    return -1;
}

/* --backend's value (auto, cpu or cuda) into o->backend. Returns -1 to go
 * on, or 2 after the message. */
static int take_backend(const char *arg, pn_quantize_opts *o)
{
    if (strcmp(arg, "auto") == 0)
        o->backend = PN_BACKEND_AUTO;
    else if (strcmp(arg, "cpu") == 0)
        o->backend = PN_BACKEND_CPU;
    else if (strcmp(arg, "cuda") == 0)
        o->backend = PN_BACKEND_CUDA;
    else {
        fprintf(stderr, "pn-quantize: error: --backend: expected auto, cpu or cuda, got '");
        pn_fput_safe(stderr, arg);
        fprintf(stderr, "'\n");
        return 2;
    }
    return -1;
}

/* One option (c, with optarg) into o and cs. Returns -1 to go on, else
 * the exit status: 0 after --help or --version, 2 for a bad value. */
static int take_option(int c, pn_quantize_opts *o, cli_state *cs, char **argv)
{
    long v;
    switch (c) {
    case O_RECIPE:
        if (!(o->recipe_path = pn_cli_recipe_path("pn-quantize", optarg, cs->recipe_path,
                                                  sizeof cs->recipe_path)))
            return 1;
        break;
    case O_TENSOR_TYPE:
    case O_OUTPUT_TYPE:
    case O_EMBD_TYPE:
        if (cs->n_overrides == MAX_OVERRIDES) {
            fprintf(stderr, "pn-quantize: error: at most %d type overrides\n", MAX_OVERRIDES);
            return 2;
        }
        cs->overrides[cs->n_overrides++] =
            (pn_recipe_override){ c == O_TENSOR_TYPE   ? PN_OVERRIDE_TENSOR_TYPE
                                  : c == O_OUTPUT_TYPE ? PN_OVERRIDE_OUTPUT
                                                       : PN_OVERRIDE_TOKEN_EMBD,
                                  optarg };
        o->overrides = cs->overrides;
        o->n_overrides = cs->n_overrides;
        break;
    case O_PROMOTE:
        if (!pn_cli_long("pn-quantize", "--promote", optarg, 0, 1000000, &v))
            return 2;
        o->promote = (int)v;
        break;
    case O_PLIST: o->promote_list_path = optarg; break;
    case O_MEAS: o->measurement_path = optarg; break;
    case O_IMATRIX: o->imatrix_path = optarg; break;
    case O_IMATRIX_PROMOTION:
        if (strcmp(optarg, "unweighted") == 0)
            o->imatrix_promotion = false;
        else if (strcmp(optarg, "weighted") == 0)
            o->imatrix_promotion = true;
        else {
            fprintf(stderr, "pn-quantize: error: --imatrix-promotion: '");
            pn_fput_safe(stderr, optarg);
            fprintf(stderr, "' is neither unweighted nor weighted\n");
            return 2;
        }
        break;
    case O_IMATRIX_MISSING:
        if (strcmp(optarg, "error") == 0)
            o->imatrix_missing_unweighted = false;
        else if (strcmp(optarg, "unweighted") == 0)
            o->imatrix_missing_unweighted = true;
        else {
            fprintf(stderr, "pn-quantize: error: --imatrix-missing: '");
            pn_fput_safe(stderr, optarg);
            fprintf(stderr, "' is neither error nor unweighted\n");
            return 2;
        }
        break;
    case O_MROWS:
        if (!pn_cli_long("pn-quantize", "--measure-rows", optarg, 1, 1L << 30, &v))
            return 2;
        o->measure_rows = (uint64_t)v;
        break;
    case O_TARGET: {
        const char *why = "";
        if (!(o->target_size = pn_cli_split_size(optarg, &why))) {
            fprintf(stderr, "pn-quantize: error: --target-size: '");
            pn_fput_safe(stderr, optarg);
            fprintf(stderr, "': %s\n", why);
            return 2;
        }
        break;
    }
    case O_ROT: return take_rotation(optarg, o);
    case O_THREADS:
        if (!pn_cli_threads("pn-quantize", optarg, &o->threads))
            return 2;
        break;
    case O_BACKEND: return take_backend(optarg, o);
    case O_DEVICE:
        if (!pn_cli_long("pn-quantize", "--device", optarg, 0, 1024, &v))
            return 2;
        o->device = (int)v;
        break;
    case O_DRY: o->dry_run = true; break;
    case O_REPORT: cs->report_path = optarg; break;
    case O_FORCE: o->force = true; break;
    case O_QUIET: cs->quiet = 1; break;
    case O_PROGRESS: cs->force_progress = 1; break;
    case O_SPLIT_SIZE: {
        const char *why = "";
        if (o->split.mode != GGUF_SPLIT_NONE && o->split.mode != GGUF_SPLIT_MAX_SIZE) {
            fprintf(stderr,
                    "pn-quantize: error: give --split-max-size or --split-max-tensors, not both\n");
            return 2;
        }
        o->split.mode = GGUF_SPLIT_MAX_SIZE;
        if (!(o->split.max = pn_cli_split_size(optarg, &why))) {
            fprintf(stderr, "pn-quantize: error: --split-max-size: '");
            pn_fput_safe(stderr, optarg);
            fprintf(stderr, "': %s\n", why);
            return 2;
        }
        break;
    }
    case O_SPLIT_TENSORS:
        if (o->split.mode != GGUF_SPLIT_NONE && o->split.mode != GGUF_SPLIT_MAX_TENSORS) {
            fprintf(stderr,
                    "pn-quantize: error: give --split-max-size or --split-max-tensors, not both\n");
            return 2;
        }
        if (!pn_cli_long("pn-quantize", "--split-max-tensors", optarg, 1, 1L << 31, &v))
            return 2;
        o->split.mode = GGUF_SPLIT_MAX_TENSORS;
        o->split.max = (uint64_t)v;
        break;
    case O_KEEP_SPLIT: o->keep_split = true; break;
    case O_NO_MTP: o->no_mtp = true; break;
    case O_KEEP_MTP: o->keep_mtp = true; break;
    case O_TOKPRE: o->tokenizer_pre = optarg; break;
    case O_SPLIT_INDEX:
        if (!pn_cli_long("pn-quantize", "--split-index", optarg, 0, 65534, &v))
            return 2;
        o->split_index = v;
        break;
    case 'h': pn_cli_usage(stdout, &program); return 0;
    case O_VERSION: printf("pn-quantize %s\n", PN_VERSION); return 0;
    case O_REUSE: o->reuse_path = optarg; break;
    case O_REUSE_VERIFY: o->reuse_verify = true; break;
    default:
        if (c >= O_KL && c < O_KL + KL_OPT_COUNT)
            return kl_cli_take(&cs->kl, c - O_KL, optarg);
        return pn_cli_refuse_option(&program, argv);
    }
    return -1;
}

/* The options that cannot go together. Returns 0, or 2 after the message. */
static int check_combinations(const pn_quantize_opts *o)
{
    if (o->promote_list_path && (o->promote >= 0 || o->target_size)) {
        fprintf(stderr, "pn-quantize: error: --promote-list cannot be combined with --promote or "
                        "--target-size\n");
        return 2;
    }
    if (o->target_size && o->promote >= 0) {
        fprintf(stderr,
                "pn-quantize: error: --target-size chooses the number of promotions; do not give "
                "--promote too\n");
        return 2;
    }
    if (o->keep_split && o->split.mode != GGUF_SPLIT_NONE) {
        fprintf(stderr, "pn-quantize: error: --keep-split follows the source's splits; do not give "
                        "--split-max-size or --split-max-tensors too\n");
        return 2;
    }
    if (o->split_index >= 0 && o->split.mode == GGUF_SPLIT_NONE && !o->keep_split) {
        fprintf(stderr, "pn-quantize: error: --split-index needs a split output: --split-max-size, "
                        "--split-max-tensors or --keep-split\n");
        return 2;
    }
    if (o->no_mtp && o->keep_mtp) {
        fprintf(stderr, "pn-quantize: error: give --no-mtp or --keep-mtp, not both\n");
        return 2;
    }
    if (o->reuse_verify && !o->reuse_path) {
        fprintf(stderr, "pn-quantize: error: --reuse-verify needs --reuse PREV.gguf\n");
        return 2;
    }
    return 0;
}

/* llama-quantize's positional type (Q4_K_M, q8_0, F16, BF16, IQ4_XS, COPY):
 * one a user of it types out of habit after DST. */
static bool looks_like_llama_type(const char *a)
{
    static const char *const heads[] = { "q", "iq", "f", "bf", "tq", "mxfp" };
    if (strcasecmp(a, "copy") == 0)
        return true;
    for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
        size_t n = strlen(heads[i]);
        if (strncasecmp(a, heads[i], n) == 0 && a[n] >= '0' && a[n] <= '9' &&
            strspn(a, "0123456789_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") ==
                strlen(a))
            return true;
    }
    return false;
}

/* The options, the environment and SRC [DST] into o and cs. Returns -1 to
 * go on, else the exit status. */
static int parse_arguments(int argc, char **argv, pn_quantize_opts *o, cli_state *cs)
{
    int c, rc;
    if (pn_cli_stray_size_unit("pn-quantize", argc, argv))
        return 2;
    while ((c = pn_cli_next(&program, argc, argv)) != -1)
        if ((rc = take_option(c, o, cs, argv)) >= 0)
            return rc;
    int npos = argc - optind;
    if (npos == 3 && looks_like_llama_type(argv[optind + 2])) {
        fprintf(stderr, "pn-quantize: error: expected SRC DST.gguf: '");
        pn_fput_safe(stderr, argv[optind + 2]);
        fprintf(stderr, "' is one argument too many: pn-quantize takes no type as llama-quantize "
                        "does; the mix is a recipe's (--recipe FILE|NAME, default the built-in "
                        "P0k+19) with its promotions (--promote N or --target-size SIZE) and any "
                        "--tensor-type PATTERN=TYPE\n");
        return pn_cli_try_help("pn-quantize");
    }
    if (!pn_cli_positional("pn-quantize", argc, argv, o->dry_run || cs->kl.n_parts ? 1 : 2, 2,
                           o->dry_run ? "SRC [DST.gguf]" : "SRC DST.gguf"))
        return 2;
    if (check_combinations(o) != 0 || kl_cli_check(&cs->kl, o, npos == 2) != 0 ||
        read_environment(o) != 0)
        return 2;
    o->src_path = argv[optind];
    o->dst_path = npos == 2 ? argv[optind + 1] : NULL;
    return -1;
}

static int run_parsed(pn_quantize_opts *op, cli_state *cs);

static int run(int argc, char **argv)
{
    pn_quantize_opts o;
    pn_quantize_opts_init(&o);
    cli_state cs;
    memset(&cs, 0, sizeof cs);
    cs.tty = isatty(2);
    pn_cli_meter_init(&cs.meter);
    kl_cli_init(&cs.kl);
    int rc = parse_arguments(argc, argv, &o, &cs);
    if (rc < 0)
        rc = run_parsed(&o, &cs);
    /* what the result hook kept (run_parsed returns from several places) */
    free(cs.totals);
    free(cs.files);
    free(cs.dst_written);
    kl_cli_free(&cs.kl);
    return rc;
}

/* The run once its options are parsed. */
static int run_parsed(pn_quantize_opts *op, cli_state *cs)
{
    pn_quantize_opts o = *op;
    int rc;
    pn_cli_cap_threads("pn-quantize", "--threads", &o.threads, cs->quiet);
    cs->force = o.force;
    if (cs->report_path && (rc = check_report_path(cs, &o)) != 0)
        return rc;
    if (cs->report_path) {
        pn_outfile_opts ro = { .force = cs->force != 0 };
        pn_error re;
        if (pn_outfile_open(cs->report_path, &ro, &cs->report, &re) != PN_OK) {
            put_lines(stderr, "pn-quantize: error: ", re.msg);
            if (o.dst_path && !o.dry_run) {
                fprintf(stderr, "pn-quantize: nothing was written to ");
                pn_fput_safe(stderr, o.dst_path);
                fputc('\n', stderr);
            }
            return 1;
        }
        /* stale temporary files of a killed run beside the report */
        const char *note = pn_outfile_note(cs->report);
        if (note && !cs->quiet)
            put_lines(stderr, "pn-quantize: ", note);
    }
    cs->show_progress = !cs->quiet && (cs->tty || cs->force_progress);
    o.progress = on_progress;
    o.note = on_note;
    o.result = on_result;
    o.user = cs;
    volatile sig_atomic_t *cancel = pn_cli_trap_signals();
    o.cancel = cancel;

    cs->kl.quiet = cs->quiet;
    cs->kl.progress = !cs->quiet;
    if ((rc = kl_cli_obtain(&cs->kl, &o, environ, cancel)) >= 0)
        return rc;
    pn_quantize_stats stats;
    pn_error err;
    pn_error_clear(&err);
    pn_status st = pn_quantize_file(&o, &stats, &err);
    if (cs->show_progress && cs->tty)
        fprintf(stderr, "\r\033[K");
    if (st != PN_OK) {
        discard_report(cs);
        put_lines(stderr, "pn-quantize: error: ", err.msg[0] ? err.msg : pn_strerror(st));
        if (st == PN_ERR_NOSPACE || (st == PN_ERR_IO && strstr(err.msg, strerror(EFBIG))))
            fprintf(stderr, "pn-quantize: the disk is full, or a file-size limit (ulimit -f) "
                            "was reached\n");
        if (o.dst_path && !o.dry_run) {
            fprintf(stderr, "pn-quantize: %snothing was written to ",
                    st == PN_ERR_INTERRUPTED ? "interrupted: " : "");
            pn_fput_safe(stderr, o.dst_path);
            if (o.split.mode != GGUF_SPLIT_NONE || o.keep_split)
                fprintf(stderr, " (nor to any split of it)");
            /* an interrupted run: DST (replaced with --force, or PREV) is as it was */
            if (st == PN_ERR_INTERRUPTED)
                fprintf(stderr, "; what was there is as it was");
            fputc('\n', stderr);
        }
        return pn_cli_exit_status_signal(st, *cancel);
    }
    if (cs->report_path) {
        pn_error re;
        pn_status rs = commit_report(cs, &re);
        if (rs != PN_OK) {
            if (o.dry_run) {
                fprintf(stderr, "pn-quantize: error: ");
            } else {
                fprintf(stderr, "pn-quantize: error: wrote ");
                pn_fput_safe(stderr, o.dst_path);
                fprintf(stderr, ", but the report could not be written: ");
            }
            if (rs == PN_ERR_EXISTS) {
                pn_fput_safe(stderr, cs->report_path);
                fprintf(stderr, ": it appeared during the run; use --force to replace it\n");
            } else {
                put_lines(stderr, "", re.msg); /* the message names the report path */
            }
            return 1;
        }
    }
    if (cs->totals)
        fputs(cs->totals, stdout);
    if (cs->files)
        fputs(cs->files, stdout);
    if (!o.dry_run && !cs->quiet) {
        printf("wrote ");
        if (cs->split_index >= 0)
            printf("split %ld of %zu of ", cs->split_index + 1, cs->n_splits);
        else if (cs->n_splits > 1)
            printf("%zu splits of ", cs->n_splits);
        pn_fput_safe(stdout, cs->dst_written ? cs->dst_written : o.dst_path);
        printf(": ");
        pn_fput_safe(stdout, stats.mix_name);
        printf(", %llu bytes, %.1f s, %.3g weights/s, backend %s\n",
               (unsigned long long)stats.file_bytes, stats.t_total,
               stats.t_total > 0 ? (double)stats.weights / stats.t_total : 0.0, stats.backend);
        printf("stage seconds (they overlap): plan %.1f, measure %.1f (read %.1f, compute %.1f, "
               "waiting %.1f), read %.1f, widen %.1f, rotate %.1f, quantize %.1f, error %.1f, "
               "crc %.1f, write %.1f, flush %.1f, validate %.1f (%.1f behind the writer), source "
               "crc %.1f; compute "
               "waited %.1f for input, reader %.1f for buffers\n",
               stats.t_plan, stats.t_measure, stats.t_measure_read, stats.t_measure_compute,
               stats.t_measure_wait_input, stats.t_read, stats.t_widen, stats.t_rotate,
               stats.t_quantize, stats.t_error, stats.t_crc, stats.t_write, stats.t_flush,
               stats.t_validate, stats.t_validate_behind, stats.t_source_crc, stats.t_wait_input,
               stats.t_wait_output);
        if (o.reuse_path)
            printf("reuse seconds: sampled rows %.1f, --reuse-verify %.1f, PREV checked %.1f\n",
                   stats.t_identity, stats.t_verify, stats.t_reuse_check);
    }
    kl_cli_print_promoted(&cs->kl, cs->quiet);
    return o.dry_run ? 0 : kl_cli_judge(&cs->kl, &o, environ, cancel);
}

/* libgomp reads OMP_WAIT_POLICY once, when it is loaded (before main), and
 * by default a team thread that runs out of work spins for a while before
 * it sleeps: at the end of every chunk's loops and between them. On a
 * machine with few cores, where the team shares them with the reader and
 * the writer threads, the spinning thread holds a core that the thread it
 * waits for needs: on 2 cores it was a quarter of the process's CPU time
 * (bench/bench-stage.sh, WAIT=active against passive; docs/pipeline.md).
 * So unless the user chose a policy, the program runs itself again, once,
 * with OMP_WAIT_POLICY=passive and the same arguments; if that fails it
 * goes on as it is (the same bytes either way). */
static void openmp_wait_passive(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0)
        return;
    execv("/proc/self/exe", argv);
}

int main(int argc, char **argv)
{
    openmp_wait_passive(argv);
    return finish_stdout(run(argc, argv));
}
