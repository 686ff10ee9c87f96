/* pn-check: checks a GGUF file holding PN tensors. Parses options and prints
 * the report (text or JSON); the checking is pn_check_file
 * (check/check.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/cli.h"
#include "common/text.h"
#include "check/check.h"
#include "gguf/gguf_split.h"
#include "quant/types.h"

/* What pn_cli_next returns for each option. */
enum {
    OPT_RECIPE = 256,
    OPT_SOURCE,
    OPT_JSON,
    OPT_THREADS,
    OPT_STRICT,
    OPT_VERSION,
    OPT_PROGRESS,
    OPT_KEEP_MTP,
    OPT_TENSOR_TYPE,
    OPT_OUTPUT_TYPE,
    OPT_EMBD_TYPE,
    OPT_DUMP,
    OPT_IMATRIX,
    OPT_QUIET
};

#define MAX_OVERRIDES 64

static const pn_cli_option options[] = {
    { "recipe", required_argument, OPT_RECIPE,
      "  --recipe FILE|NAME  check each tensor's type, the promotions and pn.mix against\n"
      "                    this mix recipe (a file, or a shipped recipe by name)\n" },
    { "tensor-type", required_argument, OPT_TENSOR_TYPE,
      "  --tensor-type PATTERN=TYPE  with --recipe: the override pn-quantize was given\n"
      "                    (repeatable; also --output-tensor-type, --token-embedding-type)\n" },
    { "output-tensor-type", required_argument, OPT_OUTPUT_TYPE,
      "  --output-tensor-type TYPE  with --recipe: as pn-quantize was given it\n" },
    { "token-embedding-type", required_argument, OPT_EMBD_TYPE,
      "  --token-embedding-type TYPE  with --recipe: as pn-quantize was given it\n" },
    { "keep-mtp", no_argument, OPT_KEEP_MTP,
      "  --keep-mtp        the file was made with pn-quantize --keep-mtp: the recipe's\n"
      "                    'mtp drop' is taken as keep\n" },
    { "source", required_argument, OPT_SOURCE,
      "  --source SRC.gguf decode every tensor (PN ones un-rotated) and compare with the\n"
      "                    source (a GGUF or a checkpoint folder, read as pn-quantize\n"
      "                    read it: its MTP layer dropped when the file has none);\n"
      "                    flag errors far above what the type gives\n" },
    { "imatrix", required_argument, OPT_IMATRIX,
      "  --imatrix FILE    whether the file was made with this llama.cpp importance matrix;\n"
      "                    with --source, whether its promotions are the ones it chooses\n" },
    { "dump", no_argument, OPT_DUMP,
      "  --dump            list the file's keys and tensors (type, shape, offset,\n"
      "                    bytes) as gguf-dump does, PN keys readable; no check\n" },
    { "json", no_argument, OPT_JSON,
      "  --json            print the report as JSON instead of text\n" },
    { "threads", required_argument, OPT_THREADS,
      "  --threads N       worker threads (default: all cores)\n" },
    { "progress", no_argument, OPT_PROGRESS,
      "  --progress        progress of the data pass on stderr even when it is not a\n"
      "                    terminal (on a terminal it is shown unless --quiet)\n" },
    { "quiet", no_argument, OPT_QUIET,
      "  --quiet           no progress and no notes on stderr (the report still prints)\n" },
    { "strict", no_argument, OPT_STRICT,
      "  --strict          warnings make the file invalid too\n" },
    { "help", no_argument, 'h', "  -h, --help        this text\n" },
    { "version", no_argument, OPT_VERSION, "  --version         the version\n" },
    { NULL, 0, 0, NULL },
};

static const pn_cli_program program = {
    "pn-check",
    "usage: pn-check [options] FILE.gguf...\n"
    "\n"
    "Checks a GGUF file that may hold PN tensors (pn3t, pn4t): the GGUF structure,\n"
    "every PN block (finite scale, pn3t reserved bits clear), the pn.* keys, the\n"
    "CRC-32 of every tensor recorded in pn.tensor_crc32; with --recipe, the type of\n"
    "each tensor; with --source, the error of each tensor against the float model it\n"
    "was made from. Prints one line per finding and a final verdict, for each FILE\n"
    "in turn (with --json, an array of the reports when there are several); the\n"
    "exit status is the worst of them.\n"
    "\n"
    "options:\n",
    options,
    "\n"
    "A file of a split set (NAME-00001-of-00003.gguf ...) is checked as the whole\n"
    "set, every finding naming its file; a set that does not open is invalid, with\n"
    "a finding per bad split (missing, unreadable, another set's).\n"
    "\n"
    "Names, keys and messages from the file are printed with control bytes and\n"
    "invalid UTF-8 shown as \\xNN (in JSON, as valid JSON strings).\n"
    "\n"
    "exit status: 0 valid; 1 invalid (findings printed) or unreadable (not GGUF,\n"
    "cut short inside its header, missing, changed during the check: the verdict\n"
    "says so), or a --recipe or --source that cannot be used, or the report could\n"
    "not be written; 2 the command line itself (an unknown option, a bad value, a\n"
    "missing argument)\n",
};

/* The data bytes checked, through the one reporter (cli.h). */
typedef struct progress_state {
    pn_cli_meter meter;
    const char *path;
} progress_state;

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    progress_state *ps = ctx;
    pn_cli_meter_show(&ps->meter, "checking", NULL, 0, 0, ps->path, (double)done / 1e6,
                      (double)total / 1e6, "MB");
}

/* ---- text ---- */

/* Text from the file (names, keys, messages) is printed in the terminal-safe
 * form: no control byte, escape sequence or invalid UTF-8 reaches the
 * terminal, and a name cannot start a line of its own. */
static void print_finding_text(FILE *f, const pn_finding *x, bool name_file)
{
    fprintf(f, "%-7s %s", pn_severity_name(x->severity), x->code);
    if (name_file && x->file) {
        fputs(" file ", f);
        pn_fput_safe(f, x->file);
    }
    if (x->tensor) {
        fputs(" tensor ", f);
        pn_fput_safe(f, x->tensor);
    }
    if (x->key) {
        fputs(" key ", f);
        pn_fput_safe(f, x->key);
    }
    if (x->offset >= 0)
        fprintf(f, " byte %lld", (long long)x->offset);
    fputs(": ", f);
    pn_fput_safe(f, x->message);
    fputc('\n', f);
}

/* The safe form of s, padded with spaces to `width` bytes. */
static void put_padded(FILE *f, const char *s, int width)
{
    size_t cap = 4 * strlen(s) + 4;
    char *buf = malloc(cap);
    if (!buf) {
        pn_fput_safe(f, s);
        return;
    }
    fprintf(f, "%-*s", width, pn_safe_text(s, buf, cap));
    free(buf);
}

static const char *verdict(const pn_check_report *r, int code)
{
    return !r->readable ? "unreadable" : code == 0 ? "valid" : "invalid";
}

static void print_text(FILE *f, const pn_check_report *r, bool strict)
{
    int code = pn_check_exit_code(r, strict);
    const bool set = r->n_splits > 1;
    pn_fput_safe(f, r->path);
    fputs(": ", f);
    if (set)
        fprintf(f, "a split set of %zu files%s, ", r->n_splits,
                r->set_unopened ? " that does not open (its tensors are not checked)" : "");
    if (r->readable && r->n_tensors)
        fprintf(f, "%zu tensors, %llu bytes, %llu data bytes read in %.2f s\n", r->n_tensors,
                (unsigned long long)r->file_size, (unsigned long long)r->data_bytes, r->seconds);
    else if (!r->readable && !set && r->n_findings && strcmp(r->findings[0].code, "GGUF-IO") == 0)
        fputs("not opened\n", f); /* missing, a folder, a FIFO: it has no size to tell */
    else
        fprintf(f, "%llu bytes\n", (unsigned long long)r->file_size);
    for (size_t s = 0; set && s < r->n_splits; s++) {
        const pn_check_split *sp = &r->splits[s];
        fprintf(f, "  split %zu/%zu ", s + 1, r->n_splits);
        pn_fput_safe(f, sp->path);
        if (!sp->present)
            fputs(": not read\n", f);
        else if (r->set_unopened)
            fprintf(f, ": %llu bytes\n", (unsigned long long)sp->file_size);
        else
            fprintf(f, ": %zu tensor%s, %llu bytes\n", sp->n_tensors, sp->n_tensors == 1 ? "" : "s",
                    (unsigned long long)sp->file_size);
    }
    for (size_t i = 0; i < r->n_findings; i++)
        print_finding_text(f, &r->findings[i], set || r->set_unopened);
    if (r->source_path) {
        fputs("source ", f);
        pn_fput_safe(f, r->source_path);
        fputs(": relative error E = sum (w - dq)^2 / sum w^2 per tensor\n", f);
        fprintf(f, "  %-40s %-5s %11s %11s %11s\n", "tensor", "type", "E", "E_ref", "limit");
        for (size_t i = 0; i < r->n_tensors; i++) {
            const pn_check_tensor *t = &r->tensors[i];
            fputs("  ", f);
            put_padded(f, t->name, 40);
            if (!t->compared) {
                fprintf(f, " %-5s not compared: ", pn_type_name(t->type));
                pn_fput_safe(f, t->note ? t->note : "-");
                fputc('\n', f);
                continue;
            }
            fprintf(f, " %-5s %11.4g ", pn_type_name(t->type), t->rel_error);
            if (isnan(t->expected_error))
                fprintf(f, "%11s", "-");
            else
                fprintf(f, "%11.4g", t->expected_error);
            fprintf(f, " %11.4g%s\n", t->limit, t->rel_error > t->limit ? "  HIGH" : "");
        }
    }
    if (r->recipe_checked) {
        fputs("recipe: mix ", f);
        pn_fput_safe(f, r->recipe_mix);
        fprintf(f, ", %zu promotion%s (recipe default %ld); expected pn.mix \"", r->n_promoted,
                r->n_promoted == 1 ? "" : "s", r->recipe_promote_n);
        pn_fput_safe(f, r->expected_mix ? r->expected_mix : "?");
        fputs("\"\n", f);
        for (size_t i = 0; i < r->n_promoted; i++) {
            fputs("  promoted ", f);
            pn_fput_safe(f, r->promoted[i]);
            fputc('\n', f);
        }
    }
    if (r->imatrix_checked) {
        fprintf(f, "imatrix: entries hash %016llx, %s", (unsigned long long)r->imatrix_hash,
                r->imatrix_same ? "the one the file records" : "not the file's");
        if (r->imatrix_promotions_checked)
            fprintf(f, "; promotions %s it",
                    r->imatrix_promotions_follow ? "follow" : "do not follow");
        fputc('\n', f);
    }
    if (r->header_proof) {
        /* not a finding: a file without the record is no less valid */
        fprintf(f, "header: %s: ", r->header_proof);
        pn_fput_safe(f, r->header_note ? r->header_note : "-");
        fputc('\n', f);
    }
    fprintf(f, "%s (%zu error%s, %zu warning%s)\n", verdict(r, code), r->n_errors,
            r->n_errors == 1 ? "" : "s", r->n_warnings, r->n_warnings == 1 ? "" : "s");
}

/* ---- JSON ---- */

/* A JSON string (always valid JSON: common/text.h), or null. */
static void json_str_or_null(FILE *f, const char *s)
{
    if (s)
        pn_json_put_str(f, s);
    else
        fputs("null", f);
}

static void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

static void json_int_or_null(FILE *f, int64_t v)
{
    if (v < 0)
        fputs("null", f);
    else
        fprintf(f, "%lld", (long long)v);
}

static void print_json(FILE *f, const pn_check_report *r, bool strict)
{
    int code = pn_check_exit_code(r, strict);
    fputs("{\n  \"file\": ", f);
    json_str_or_null(f, r->path);
    fprintf(f, ",\n  \"status\": \"%s\",\n  \"exit_code\": %d,\n  \"strict\": %s,\n",
            verdict(r, code), code, strict ? "true" : "false");
    fprintf(f, "  \"errors\": %zu,\n  \"warnings\": %zu,\n", r->n_errors, r->n_warnings);
    fprintf(f, "  \"file_size\": %llu,\n  \"data_bytes_read\": %llu,\n  \"seconds\": ",
            (unsigned long long)r->file_size, (unsigned long long)r->data_bytes);
    json_num(f, r->seconds);
    fputs(",\n  \"header\": ", f);
    json_str_or_null(f, r->header_proof);
    fputs(", \"header_note\": ", f);
    json_str_or_null(f, r->header_note);
    fputs(",\n  \"findings\": [", f);
    for (size_t i = 0; i < r->n_findings; i++) {
        const pn_finding *x = &r->findings[i];
        fprintf(f, "%s\n    {\"severity\": \"%s\", \"code\": ", i ? "," : "",
                pn_severity_name(x->severity));
        json_str_or_null(f, x->code);
        fputs(", \"tensor\": ", f);
        json_str_or_null(f, x->tensor);
        fputs(", \"key\": ", f);
        json_str_or_null(f, x->key);
        fputs(", \"offset\": ", f);
        json_int_or_null(f, x->offset);
        fputs(", \"row\": ", f);
        json_int_or_null(f, x->row);
        fputs(", \"block\": ", f);
        json_int_or_null(f, x->block);
        fputs(", \"count\": ", f);
        json_int_or_null(f, x->count);
        fputs(", \"index\": ", f);
        json_int_or_null(f, x->index);
        fputs(", \"message\": ", f);
        json_str_or_null(f, x->message);
        fputs(", \"file\": ", f);
        json_str_or_null(f, x->file);
        fputc('}', f);
    }
    fputs(r->n_findings ? "\n  ],\n" : "],\n", f);

    /* the files: the file itself, or every split of a set */
    fprintf(f, "  \"set_opened\": %s,\n  \"splits\": [", r->set_unopened ? "false" : "true");
    for (size_t s = 0; s < r->n_splits; s++) {
        const pn_check_split *sp = &r->splits[s];
        fprintf(f, "%s\n    {\"file\": ", s ? "," : "");
        json_str_or_null(f, sp->path);
        fprintf(f,
                ", \"present\": %s, \"bytes\": %llu, \"first_tensor\": %zu, "
                "\"tensors\": %zu}",
                sp->present ? "true" : "false", (unsigned long long)sp->file_size, sp->first_tensor,
                sp->n_tensors);
    }
    fputs(r->n_splits ? "\n  ],\n" : "],\n", f);

    fputs("  \"tensors\": [", f);
    for (size_t i = 0; i < r->n_tensors; i++) {
        const pn_check_tensor *t = &r->tensors[i];
        fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
        json_str_or_null(f, t->name);
        fprintf(f, ", \"type\": \"%s\", \"ne\": [", pn_type_name(t->type));
        for (uint32_t d = 0; d < t->n_dims; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        fprintf(f,
                "], \"split\": %u, \"offset\": %llu, \"bytes\": %llu, \"in_file\": %s, "
                "\"crc32\": ",
                t->split, (unsigned long long)t->file_offset, (unsigned long long)t->bytes,
                t->in_file ? "true" : "false");
        if (t->crc_computed)
            fprintf(f, "\"0x%08x\"", t->crc32);
        else
            fputs("null", f);
        fputs(", \"crc32_recorded\": ", f);
        if (t->crc_recorded)
            fprintf(f, "\"0x%08x\"", t->crc32_recorded);
        else
            fputs("null", f);
        fprintf(f, ", \"bad_blocks\": %lld, \"rotation_block\": %d, \"source\": ",
                (long long)t->bad_blocks, t->rotation_block);
        if (!r->source_path) {
            fputs("null", f);
        } else {
            fprintf(f, "{\"compared\": %s, \"error\": ", t->compared ? "true" : "false");
            json_num(f, t->rel_error);
            fputs(", \"expected\": ", f);
            json_num(f, t->expected_error);
            fputs(", \"limit\": ", f);
            json_num(f, t->limit);
            fputs(", \"note\": ", f);
            json_str_or_null(f, t->note);
            fputc('}', f);
        }
        fputc('}', f);
    }
    fputs(r->n_tensors ? "\n  ],\n" : "],\n", f);

    fputs("  \"source\": ", f);
    json_str_or_null(f, r->source_path);
    fputs(",\n  \"recipe\": ", f);
    if (!r->recipe_checked) {
        fputs("null", f);
    } else {
        fputs("{\"mix\": ", f);
        json_str_or_null(f, r->recipe_mix);
        fputs(", \"expected_mix\": ", f);
        json_str_or_null(f, r->expected_mix);
        fprintf(f, ", \"recipe_promote\": %ld, \"n_promoted\": %zu, \"promoted\": [",
                r->recipe_promote_n, r->n_promoted);
        for (size_t i = 0; i < r->n_promoted; i++) {
            if (i)
                fputs(", ", f);
            json_str_or_null(f, r->promoted[i]);
        }
        fputs("]}", f);
    }
    fputs(",\n  \"imatrix\": ", f);
    if (!r->imatrix_checked)
        fputs("null", f);
    else {
        fprintf(f,
                "{\"entries_fnv1a64\": \"%016llx\", \"recorded\": %s, \"promotions_follow\": %s}",
                (unsigned long long)r->imatrix_hash, r->imatrix_same ? "true" : "false",
                !r->imatrix_promotions_checked ? "null"
                : r->imatrix_promotions_follow ? "true"
                                               : "false");
    }
    fputs("\n}\n", f);
}

/* ---- --dump: the file's keys and tensors, as gguf-dump lists them ---- */

/* A string of the file, terminal-safe (or as JSON). */
static void put_gstr(FILE *f, const char *p, uint64_t n, bool json)
{
    char *s = strndup(p, (size_t)n);
    if (json)
        pn_json_put_str(f, s ? s : "");
    else
        pn_fput_safe(f, s ? s : "");
    free(s);
}

/* A key's value: scalars as they are; arrays of strings listed when they are
 * PN's (the promoted names, the overrides), other arrays as type x count
 * (pn.tensor_crc32 and pn.source.*: "N values", one per tensor). */
static void put_value(FILE *f, const gguf_kv *kv, bool json)
{
    switch (kv->type) {
    case GGUF_TYPE_STRING: put_gstr(f, kv->v.str.data, kv->v.str.len, json); return;
    case GGUF_TYPE_BOOL: fputs(kv->v.u64 ? "true" : "false", f); return;
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: fprintf(f, "%.9g", kv->v.f64); return;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: fprintf(f, "%lld", (long long)kv->v.i64); return;
    case GGUF_TYPE_ARRAY: break;
    default: fprintf(f, "%llu", (unsigned long long)kv->v.u64); return;
    }
    bool pn = kv->key.len >= 3 && memcmp(kv->key.data, "pn", 2) == 0 && kv->key.data[2] == '.';
    if (pn && kv->arr_type == GGUF_TYPE_STRING && kv->arr_count <= 4096) {
        fputs(json ? "[" : "[", f);
        const uint8_t *at = kv->arr_data, *end = kv->arr_data + kv->arr_bytes;
        for (uint64_t i = 0; i < kv->arr_count && end - at >= 8; i++) {
            uint64_t len;
            memcpy(&len, at, 8);
            if (len > (uint64_t)(end - at - 8))
                break;
            fputs(i ? ", " : "", f);
            put_gstr(f, (const char *)at + 8, len, json);
            at += 8 + len;
        }
        fputc(']', f);
        return;
    }
    char what[96];
    snprintf(what, sizeof what, "[%s x %llu]", gguf_value_type_name(kv->arr_type),
             (unsigned long long)kv->arr_count);
    if (json)
        pn_json_put_str(f, what);
    else
        fputs(what, f);
}

/* The file to read for FILE as given: FILE itself, or, when there is no
 * such file and FILE is the name a split output was given
 * (--split-max-size), the first split of that set (*owned then holds it).
 * NULL, with the sets named on stderr, when FILE names several sets. */
static const char *file_or_set(const char *path, bool quiet, char **owned)
{
    *owned = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 || errno != ENOENT)
        return path;
    char **firsts = NULL;
    size_t n = 0;
    pn_error err = { 0 };
    if (gguf_split_find_sets(path, &firsts, &n, &err) != PN_OK || n == 0) {
        free(firsts);
        return path; /* the reader says it cannot be opened */
    }
    const char *use = NULL;
    if (n == 1) {
        *owned = firsts[0];
        use = *owned;
        if (!quiet) {
            fputs("pn-check: ", stderr);
            pn_fput_safe(stderr, path);
            fputs(" is a split set: checked from its first split, ", stderr);
            pn_fput_safe(stderr, use);
            fputc('\n', stderr);
        }
    } else {
        fputs("pn-check: ", stderr);
        pn_fput_safe(stderr, path);
        fprintf(stderr, ": no such file, and %zu split sets have its name: ", n);
        for (size_t i = 0; i < n; i++) {
            fputs(i ? ", " : "", stderr);
            pn_fput_safe(stderr, firsts[i]);
            free(firsts[i]);
        }
        fputs(" (name the first split of the one to check)\n", stderr);
    }
    free(firsts);
    return use;
}

/* --dump's tensors: each with its offset, in the file that holds it (for a
 * split of a set: every tensor of the set, the file named). */
static void dump_tensors(FILE *f, const gguf_reader *r, bool json)
{
    const bool set = gguf_reader_n_splits(r) > 1;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        char shape[96];
        int k = snprintf(shape, sizeof shape, "%lld", (long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims && k > 0 && (size_t)k < sizeof shape; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%lld", json ? ", " : " x ",
                          (long long)t->ne[d]);
        const uint64_t off = gguf_reader_tensor_file_offset(r, i);
        const char *in = gguf_reader_name(gguf_reader_split(r, t->split));
        if (json) {
            fprintf(f, "%s\n  {\"name\": ", i ? "," : "");
            pn_json_put_str(f, t->name);
            fprintf(f, ", \"type\": \"%s\", \"shape\": [%s], \"offset\": %llu, \"bytes\": %llu",
                    pn_type_name(t->type), shape, (unsigned long long)off,
                    (unsigned long long)t->size);
            if (set) {
                fputs(", \"file\": ", f);
                pn_json_put_str(f, in);
            }
            fputc('}', f);
        } else {
            fprintf(f, "%5zu: %-6s %-22s offset %12llu %12llu bytes  ", i + 1,
                    pn_type_name(t->type), shape, (unsigned long long)off,
                    (unsigned long long)t->size);
            pn_fput_safe(f, t->name);
            if (set) {
                fputs("  in ", f);
                pn_fput_safe(f, in);
            }
            fputc('\n', f);
        }
    }
}

/* --dump FILE: every key of FILE itself (name, type, value) and every
 * tensor (name, type, shape, offset in its file, bytes): of a split of a
 * set that opens, the set's, each naming its file. Returns the exit
 * status. */
static int dump_file(const char *given, bool json, bool quiet)
{
    char *owned = NULL;
    const char *path = file_or_set(given, quiet, &owned);
    if (!path)
        return 1;
    gguf_reader *one = NULL, *set = NULL;
    pn_error err = { 0 };
    pn_status st = gguf_reader_open_flags(path, GGUF_OPEN_ONE_FILE, &one, &err);
    if (st) {
        pn_cli_error("pn-check", err.msg);
        free(owned);
        return pn_cli_exit_status(st);
    }
    /* a split whose set does not open is dumped alone */
    pn_error serr = { 0 };
    if (gguf_reader_open(path, &set, &serr) == PN_OK && gguf_reader_n_splits(set) < 2) {
        gguf_reader_close(set);
        set = NULL;
    }
    const gguf_reader *tr = set ? set : one;
    FILE *f = stdout;
    const size_t nk = gguf_reader_n_kv(one), nt = gguf_reader_n_tensors(tr);
    if (json) {
        fputs("{\"file\": ", f);
        pn_json_put_str(f, path);
        fprintf(f, ", \"version\": %u, ", gguf_reader_version(one));
        if (set)
            fprintf(f, "\"splits\": %zu, ", gguf_reader_n_splits(set));
        fputs("\"keys\": [", f);
    } else {
        pn_fput_safe(f, path);
        fprintf(f, ": GGUF v%u, %zu keys, %zu tensors", gguf_reader_version(one), nk, nt);
        if (set)
            fprintf(f,
                    " (its keys; the tensors of its set of %zu files, each offset in the file "
                    "named)",
                    gguf_reader_n_splits(set));
        fputc('\n', f);
    }
    for (size_t i = 0; i < nk; i++) {
        const gguf_kv *kv = gguf_reader_kv(one, i);
        if (json) {
            fprintf(f, "%s\n  {\"key\": ", i ? "," : "");
            put_gstr(f, kv->key.data, kv->key.len, true);
            fprintf(f, ", \"type\": \"%s\", \"value\": ", gguf_value_type_name(kv->type));
            put_value(f, kv, true);
            fputc('}', f);
        } else {
            fprintf(f, "%5zu: %-7s ", i + 1, gguf_value_type_name(kv->type));
            put_gstr(f, kv->key.data, kv->key.len, false);
            fputs(" = ", f);
            put_value(f, kv, false);
            fputc('\n', f);
        }
    }
    fputs(json ? "],\n \"tensors\": [" : "", f);
    dump_tensors(f, tr, json);
    fputs(json ? "]}\n" : "", f);
    if (set)
        gguf_reader_close(set);
    gguf_reader_close(one);
    free(owned);
    return 0;
}

int main(int argc, char **argv)
{
    pn_check_options o;
    pn_check_options_default(&o);
    bool json = false, strict = false, progress = false, dump = false, quiet = false;
    char recipe_buf[4096];
    pn_recipe_override overrides[MAX_OVERRIDES];
    size_t n_overrides = 0;
    const char *why;
    /* a write past a file size limit or to a closed pipe is reported like
     * any write error; the stop signals keep their own action, which ends
     * the check leaving nothing (no file is written, there is no cancel) */
    pn_cli_ignore_write_signals();
    int c;
    while ((c = pn_cli_next(&program, argc, argv)) != -1) {
        switch (c) {
        case OPT_RECIPE:
            if (!(o.recipe_path =
                      pn_cli_recipe_path("pn-check", optarg, recipe_buf, sizeof recipe_buf)))
                return 1;
            break;
        case OPT_TENSOR_TYPE:
        case OPT_OUTPUT_TYPE:
        case OPT_EMBD_TYPE:
            if (n_overrides == MAX_OVERRIDES) {
                fprintf(stderr, "pn-check: error: at most %d type overrides\n", MAX_OVERRIDES);
                return 2;
            }
            overrides[n_overrides++] =
                (pn_recipe_override){ c == OPT_TENSOR_TYPE   ? PN_OVERRIDE_TENSOR_TYPE
                                      : c == OPT_OUTPUT_TYPE ? PN_OVERRIDE_OUTPUT
                                                             : PN_OVERRIDE_TOKEN_EMBD,
                                      optarg };
            o.overrides = overrides;
            o.n_overrides = n_overrides;
            break;
        case OPT_SOURCE: o.source_path = optarg; break;
        case OPT_IMATRIX: o.imatrix_path = optarg; break;
        case OPT_KEEP_MTP: o.keep_mtp = true; break;
        case OPT_JSON: json = true; break;
        case OPT_DUMP: dump = true; break;
        case OPT_STRICT: strict = true; break;
        case OPT_PROGRESS: progress = true; break;
        case OPT_QUIET: quiet = true; break;
        case OPT_THREADS:
            if (!pn_cli_threads("pn-check", optarg, &o.threads))
                return 2;
            break;
        case 'h': return pn_cli_help(&program, 1);
        case OPT_VERSION: printf("pn-check %s\n", PN_VERSION); return 0;
        default: return pn_cli_refuse_option(&program, argv);
        }
    }
    if (!pn_cli_positional("pn-check", argc, argv, 1, -1, "FILE.gguf..."))
        return 2;
    /* the overrides are rules before a recipe's: without one they would
     * check nothing, silently */
    if (n_overrides && !o.recipe_path) {
        fprintf(stderr,
                "pn-check: %s needs --recipe: the type overrides a file was made with are "
                "checked with the recipe they stood before (give the recipe, or leave them "
                "out)\n",
                overrides[0].kind == PN_OVERRIDE_TENSOR_TYPE ? "--tensor-type"
                : overrides[0].kind == PN_OVERRIDE_OUTPUT    ? "--output-tensor-type"
                                                             : "--token-embedding-type");
        return 2;
    }
    pn_cli_cap_threads("pn-check", "--threads", &o.threads, quiet);
    /* several files, as llama.cpp users list them: one report and verdict
     * each (a JSON array of the reports with --json), the worst status */
    const int n_files = argc - optind;
    int code = 0;
    for (int k = 0; dump && k < n_files; k++) {
        int c1 = dump_file(argv[optind + k], json, quiet);
        code = c1 > code ? c1 : code;
    }
    if (dump)
        return pn_cli_finish_stdout(&why) != 0 ? 1 : code;
    if (json && n_files > 1)
        fputs("[\n", stdout);
    for (int k = 0; k < n_files; k++) {
        char *owned = NULL;
        const char *path = file_or_set(argv[optind + k], quiet, &owned);
        if (!path) {
            code = code > 1 ? code : 1;
            continue;
        }
        progress_state ps = { .path = path };
        pn_cli_meter_open(&ps.meter, quiet, progress);
        if (ps.meter.on) {
            o.progress = on_progress;
            o.progress_ctx = &ps;
        }
        pn_check_report *r = NULL;
        pn_error err = { 0 };
        pn_status st = pn_check_file(path, &o, &r, &err);
        pn_cli_meter_end(&ps.meter);
        if (st) {
            pn_cli_error("pn-check", err.msg);
            free(owned);
            int s = pn_cli_exit_status(st);
            if (s > code)
                code = s;
            if (st == PN_ERR_USAGE || st == PN_ERR_NOMEM || st == PN_ERR_INTERRUPTED)
                break;
            continue;
        }
        if (json) {
            if (n_files > 1 && k > 0)
                fputs(",\n", stdout);
            print_json(stdout, r, strict);
        } else {
            if (k > 0)
                fputc('\n', stdout);
            print_text(stdout, r, strict);
        }
        int c1 = pn_check_exit_code(r, strict);
        if (c1 > code)
            code = c1;
        /* the report names why the file is unreadable: once, on stdout */
        pn_check_report_free(r);
        free(owned);
    }
    if (json && n_files > 1)
        fputs("]\n", stdout);
    if (pn_cli_finish_stdout(&why) != 0) {
        fprintf(stderr, "pn-check: error: cannot write the report to standard output: %s\n", why);
        return 1;
    }
    return code;
}
