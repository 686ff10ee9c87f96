/* quantize_report.c - pn-quantize's account of a run, from the job's data
 * (pn_quantize_result): the plan table, the totals, the files of a split
 * output and the JSON report (see quantize_report.h). */
#include "cmd/quantize_report.h"

#include <stdio.h>
#include <string.h>

#include "cmd/cli.h"
#include "common/text.h"
#include "mix/imatrix.h"
#include "mix/plan.h"
#include "mix/size.h"
#include "quant/types.h"

static void format_shape(const pn_plan_tensor *t, char *buf, size_t size)
{
    int k = snprintf(buf, size, "%lld", (long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims && k > 0 && (size_t)k < size; d++)
        k += snprintf(buf + k, size - (size_t)k, "x%lld", (long long)t->ne[d]);
}

void quantize_print_plan_table(FILE *f, const pn_quantize_result *r, const kl_cli *kl)
{
    fprintf(f, "%-40s %-16s %-6s %-6s %14s  %s\n", "tensor", "shape", "source", "type", "bytes",
            "note");
    for (size_t i = 0; i < r->plan->n_tensors; i++) {
        const pn_plan_tensor *t = &r->plan->tensors[i];
        char shape[64], name[1024];
        format_shape(t, shape, sizeof shape);
        pn_safe_text(t->name, name, sizeof name);
        char note[112] = "";
        if (t->promoted)
            snprintf(note, sizeof note, "promoted #%d", t->promote_rank + 1);
        if (t->rotated) {
            size_t l = strlen(note);
            snprintf(note + l, sizeof note - l, "%srotated B=%d", l ? ", " : "", t->rotation_block);
        }
        kl_cli_plan_note(kl, t, note, sizeof note);
        if (r->reused && r->reused[i]) {
            size_t l = strlen(note);
            snprintf(note + l, sizeof note - l, "%sfrom PREV", l ? ", " : "");
        }
        /* --imatrix-promotion weighted: whether each candidate's
         * measurement is weighted */
        if (r->imatrix_promotion && t->candidate) {
            size_t l = strlen(note);
            snprintf(note + l, sizeof note - l, "%s%s", l ? ", " : "",
                     pn_imatrix_find(r->imatrix, t->name) ? "imatrix entry" : "no imatrix entry");
        }
        fprintf(f, "%-40s %-16s %-6s %-6s %14llu  %s\n", name, shape, pn_type_name(t->src_type),
                pn_type_name(t->type), (unsigned long long)t->bytes, note);
    }
}

/* How many tensors and bytes come from --reuse PREV, and which tensors were
 * quantized (the first ones; the report has them all, with the reasons). */
static void print_reuse(FILE *f, const pn_quantize_result *r)
{
    if (!r->reused)
        return;
    const pn_quantize_stats *s = r->stats;
    const size_t n = r->plan->n_tensors, max_names = 12;
    fprintf(f, "reuse ");
    pn_fput_safe(f, r->reuse_path);
    fprintf(f, ": %s %zu of %zu tensors, %llu bytes (%.3f GB)",
            r->dry_run ? "would copy" : "copied", s->n_reused, n,
            (unsigned long long)s->reused_bytes, (double)s->reused_bytes / 1e9);
    if (r->dry_run)
        fprintf(f, " (PREV's bytes are checked in a real run)");
    fprintf(f, "; %s %zu", r->dry_run ? "would quantize" : "quantized", n - s->n_reused);
    size_t k = 0;
    for (size_t i = 0; i < n && k < max_names; i++)
        if (!r->reused[i]) {
            fprintf(f, "%s", k++ ? ", " : ": ");
            pn_fput_safe(f, r->plan->tensors[i].name);
        }
    if (n - s->n_reused > max_names)
        fprintf(f, " and %zu more%s", n - s->n_reused - max_names,
                r->dry_run ? "" : " (all in --report)");
    fputc('\n', f);
    if (r->reuse_none_why) {
        fprintf(f, "reuse: nothing copied: ");
        pn_fput_safe(f, r->reuse_none_why);
        fputc('\n', f);
    }
}

void quantize_print_totals(FILE *f, const pn_quantize_result *r)
{
    pn_plan_totals tot;
    pn_plan_totals_get(r->plan, &tot);
    fprintf(f, "plan ");
    pn_fput_safe(f, r->mix_label);
    fprintf(f,
            ": %zu tensors, %llu weights; pn3t %zu, pn4t %zu (%zu promoted of "
            "%zu candidates)\n",
            r->plan->n_tensors, (unsigned long long)tot.n_weights, tot.n_pn3t, tot.n_pn4t,
            tot.n_promoted, tot.n_candidates);
    fprintf(f,
            "file size %llu bytes (%.3f GiB, %.3f GB); %.4f bits/weight over PN tensors, "
            "%.4f over all weights\n",
            (unsigned long long)r->file_bytes, (double)r->file_bytes / 1073741824.0,
            (double)r->file_bytes / 1e9, tot.bpw_pn, tot.bpw_all);
    print_reuse(f, r);
    /* auto found no GPU: a fact of the run, shown with the plan (not a lone
     * line on stderr that reads like an error) */
    /* the driver's own words only where a GPU was asked for (--backend cuda
     * fails with them): a machine without one is no fault */
    if (r->stats->no_gpu_why[0])
        fprintf(f, "no usable GPU; using the CPU, %d thread%s\n", r->stats->threads,
                r->stats->threads == 1 ? "" : "s");
}

/* --reuse: what was copied and what was quantized, and why (docs/reuse.md). */
static void write_report_reuse(FILE *f, const pn_quantize_result *r)
{
    if (!r->reused)
        return;
    const pn_quantize_stats *s = r->stats;
    fprintf(f, "  \"reuse\": {\"from\": ");
    pn_json_put_str(f, r->reuse_path);
    fprintf(f, ", \"tensors\": %zu, \"bytes\": %llu, \"nothing_because\": ", s->n_reused,
            (unsigned long long)s->reused_bytes);
    if (r->reuse_none_why)
        pn_json_put_str(f, r->reuse_none_why);
    else
        fprintf(f, "null");
    fprintf(f, ",\n    \"quantized\": [");
    int k = 0;
    for (size_t i = 0; i < r->plan->n_tensors; i++)
        if (!r->reused[i]) {
            fprintf(f, "%s\n      {\"name\": ", k++ ? "," : "");
            pn_json_put_str(f, r->plan->tensors[i].name);
            fprintf(f, ", \"because\": ");
            pn_json_put_str(f, r->reuse_why[i] ? r->reuse_why[i] : "");
            fprintf(f, "}");
        }
    fprintf(f, "%s]},\n", k ? "\n    " : "");
}

/* The files of a split output: one line each (nothing for one file). */
void quantize_print_files(FILE *f, const pn_quantize_result *r)
{
    /* a dry run always lists the files, one too (split 1/1 DST), so that a
     * script counts them the same way whatever the plan */
    if (!r->dry_run && r->n_splits < 2 && r->split_index < 0)
        return;
    for (size_t s = 0; s < r->n_splits; s++) {
        const size_t lo = r->split_first[s], n = r->split_first[s + 1] - lo;
        fprintf(f, "split %zu/%zu ", s + 1, r->n_splits);
        pn_fput_safe(f, r->split_paths[s] ? r->split_paths[s] : "(no DST given)");
        fprintf(f, ": %zu tensor%s", n, n == 1 ? "" : "s");
        if (n)
            fprintf(f, " (%zu to %zu)", lo, lo + n - 1);
        fprintf(f, ", %llu bytes (%.3f GB)%s\n", (unsigned long long)r->split_bytes[s],
                (double)r->split_bytes[s] / 1e9,
                r->split_index >= 0 && (size_t)r->split_index == s ? "  <- --split-index" : "");
    }
}

static bool tensor_written(const pn_quantize_result *r, size_t i)
{
    return r->split_index < 0 ||
           (i >= r->split_first[r->split_index] && i < r->split_first[r->split_index + 1]);
}

void quantize_write_report_json(FILE *f, const pn_quantize_result *r)
{
    const pn_quantize_stats *s = r->stats;
    fprintf(f, "{\n  \"source\": ");
    pn_json_put_str(f, r->src_path);
    fprintf(f, ",\n  \"output\": ");
    pn_json_put_str(f, r->dst_path ? r->dst_path : "");
    fprintf(f, ",\n  \"mix\": ");
    pn_json_put_str(f, s->mix_name);
    fprintf(f, ",\n  \"backend\": ");
    pn_json_put_str(f, s->backend);
    fprintf(f,
            ",\n  \"threads\": %d,\n  \"dry_run\": %s,\n  \"file_bytes\": %llu,\n"
            "  \"weights\": %llu,\n",
            s->threads, r->dry_run ? "true" : "false", (unsigned long long)s->file_bytes,
            (unsigned long long)s->weights);
    /* the stages overlap: each figure is the time its stage spent on that
     * work (docs/pipeline.md), "total" is the wall time */
    fprintf(f,
            "  \"seconds\": {\"total\": %.3f, \"plan\": %.3f, \"measure\": %.3f, "
            "\"measure_read\": %.3f, \"measure_compute\": %.3f, \"measure_wait_input\": %.3f, "
            "\"read\": %.3f, \"widen\": %.3f, \"rotate\": %.3f, \"quantize\": %.3f, "
            "\"error\": %.3f, \"crc\": %.3f, \"write\": %.3f, \"flush\": %.3f, "
            "\"wait_input\": %.3f, \"wait_output\": %.3f, \"validate\": %.3f, "
            "\"validate_behind\": %.3f, \"source_crc\": %.3f, \"identity\": %.3f, "
            "\"verify\": %.3f, \"reuse_check\": %.3f},\n",
            s->t_total, s->t_plan, s->t_measure, s->t_measure_read, s->t_measure_compute,
            s->t_measure_wait_input, s->t_read, s->t_widen, s->t_rotate, s->t_quantize, s->t_error,
            s->t_crc, s->t_write, s->t_flush, s->t_wait_input, s->t_wait_output, s->t_validate,
            s->t_validate_behind, s->t_source_crc, s->t_identity, s->t_verify, s->t_reuse_check);
    write_report_reuse(f, r);
    fprintf(f, "  \"promoted\": [");
    int k = 0;
    for (size_t i = 0; i < r->plan->n_tensors; i++)
        if (r->plan->tensors[i].promoted) {
            fprintf(f, "%s", k++ ? ", " : "");
            pn_json_put_str(f, r->plan->tensors[i].name);
        }
    fprintf(f, "],\n  \"tensors\": [\n");
    for (size_t i = 0; i < r->plan->n_tensors; i++) {
        const pn_plan_tensor *t = &r->plan->tensors[i];
        fprintf(f, "    {\"name\": ");
        pn_json_put_str(f, t->name);
        fprintf(f, ", \"shape\": [");
        for (uint32_t d = 0; d < t->n_dims; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        fprintf(f, "], \"source_type\": \"%s\", \"type\": \"%s\", \"bytes\": %llu, ",
                pn_type_name(t->src_type), pn_type_name(t->type), (unsigned long long)t->bytes);
        fprintf(f, "\"rotation_block\": %d, \"promoted\": %s, ", t->rotation_block,
                t->promoted ? "true" : "false");
        if (r->reused)
            fprintf(f, "\"reused\": %s, ", r->reused[i] ? "true" : "false");
        if (r->imatrix)
            fprintf(f, "\"imatrix_entry\": %s, ",
                    pn_imatrix_find(r->imatrix, t->name) ? "true" : "false");
        if (r->dry_run || !tensor_written(r, i))
            fprintf(f, "\"relative_error\": null, \"crc32\": null, \"seconds\": null}");
        else if (r->reused && r->reused[i])
            fprintf(f, "\"relative_error\": null, \"crc32\": \"%08x\", \"seconds\": null}",
                    r->crc32[i]);
        else
            fprintf(f, "\"relative_error\": %.6e, \"crc32\": \"%08x\", \"seconds\": %.3f}",
                    r->rel_error[i], r->crc32[i], r->seconds[i]);
        fprintf(f, "%s\n", i + 1 < r->plan->n_tensors ? "," : "");
    }
    /* the files: one, or the splits of a set (split_index: the one this run writes) */
    fprintf(f, "  ],\n  \"split_index\": ");
    if (r->split_index >= 0)
        fprintf(f, "%ld", r->split_index);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"files\": [\n");
    for (size_t s = 0; s < r->n_splits; s++) {
        fprintf(f, "    {\"path\": ");
        if (r->split_paths[s])
            pn_json_put_str(f, r->split_paths[s]);
        else
            fputs("null", f);
        fprintf(
            f, ", \"first_tensor\": %zu, \"tensors\": %zu, \"bytes\": %llu, \"written\": %s}%s\n",
            r->split_first[s], r->split_first[s + 1] - r->split_first[s],
            (unsigned long long)r->split_bytes[s],
            !r->dry_run && (r->split_index < 0 || (size_t)r->split_index == s) ? "true" : "false",
            s + 1 < r->n_splits ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
}
