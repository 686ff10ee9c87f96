/* quantize_kl.h - pn-quantize's promotion measurement by KL (--measure kl):
 * its options, the measurement made before the quantize job
 * (compare/kl_measure.h), its progress, what the plan shows of it, and the
 * chosen mix judged after the run (--judge). Part of pn-quantize only. */
#ifndef PN_CMD_QUANTIZE_KL_H
#define PN_CMD_QUANTIZE_KL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "compare/kl_measure.h"
#include "mix/plan.h"
#include "pipeline/quantize.h"

typedef struct kl_cli {
    bool kl;                 /* --measure kl (false: error, the default) */
    bool forward;            /* --measure forward */
    const char *calibration; /* --calibration FILE */
    long seq_len, max_seqs;  /* --seq-len, --max-seqs */
    int part, n_parts;       /* --measure-part I/N */
    const char *node;        /* --node */
    const char *script;      /* --llama-script, else the harness beside the program */
    bool judge;              /* --judge: the chosen mix on the calibration text */
    bool quiet, progress;
    pn_kl_measurement *m;
    pn_measurement *as; /* m as promotion takes it */
    char *script_found;
    char *promoted;  /* the promotions with their gains, one line each */
    double gain_sum; /* of the promotions' single gains */
    size_t n_promoted;
} kl_cli;

void kl_cli_init(kl_cli *k);
void kl_cli_free(kl_cli *k);

/* The options, as pn-quantize numbers them (its O_KL + these). */
enum {
    KL_OPT_MEASURE,     /* --measure error|kl */
    KL_OPT_CALIBRATION, /* --calibration FILE */
    KL_OPT_SEQ_LEN,     /* --seq-len N */
    KL_OPT_MAX_SEQS,    /* --max-seqs N */
    KL_OPT_PART,        /* --measure-part I/N */
    KL_OPT_JUDGE,       /* --judge */
    KL_OPT_NODE,        /* --node PROG */
    KL_OPT_SCRIPT,      /* --llama-script FILE */
    KL_OPT_COUNT
};

/* Option `which` (KL_OPT_*) with its value: -1 when taken, 2 after a message. */
int kl_cli_take(kl_cli *k, int which, const char *arg);
/* The combinations with the quantize options: 0, or 2 after a message. */
int kl_cli_check(const kl_cli *k, const pn_quantize_opts *o, bool have_dst);

/* Measures (or reads) before the quantize job and hands the result to o.
 * -1 to go on with the job; else the exit status (0 after a part is
 * measured: a part run writes no model). */
int kl_cli_obtain(kl_cli *k, pn_quantize_opts *o, char **envp, volatile sig_atomic_t *cancel);

/* The plan table's note for tensor t: its KL gain and standard error, or
 * that it is within noise. Appended to note (cap bytes). */
void kl_cli_plan_note(const kl_cli *k, const pn_plan_tensor *t, char *note, size_t cap);

/* From the job's result: the promoted tensors in order with their gains,
 * and the sum of those gains. */
void kl_cli_take_plan(kl_cli *k, const pn_plan *plan);
/* Prints what kl_cli_take_plan kept (nothing without --measure kl, or when
 * quiet). */
void kl_cli_print_promoted(const kl_cli *k, bool quiet);

/* --judge: the written DST judged on the calibration text beside the base
 * and what the single gains add up to. The exit status (0, or 1 after a
 * message). */
int kl_cli_judge(kl_cli *k, const pn_quantize_opts *o, char **envp, volatile sig_atomic_t *cancel);

#endif
