/* What the programs share at their edges (cmd/cli.h): each one's usage is
 * printed from the table it parses its options with, so every option the
 * usage lists is one the program takes, and each program's table names
 * each of its options in its own lines of the usage. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const char *const k_programs[] = { "pn-quantize", "pn-check", "pn-dequant", "pn-synth",
                                          "pn-compare" };

/* The long options the usage's "options:" section lists, one a line of
 * names (the first word, or the second after "-h,"), in order. */
static int usage_options(const char *usage, char names[][64], int max)
{
    const char *at = strstr(usage, "\noptions:\n");
    cr_assert(at, "no options section:\n%s", usage);
    at += strlen("\noptions:\n");
    int n = 0;
    while (*at && *at != '\n') {
        const char *end = strchr(at, '\n');
        cr_assert(end);
        if (strncmp(at, "  -h, --", 8) == 0 || strncmp(at, "  --", 4) == 0) {
            const char *name = strstr(at, "--") + 2;
            size_t len = strcspn(name, " \n");
            cr_assert(n < max && len < 64);
            memcpy(names[n], name, len);
            names[n][len] = 0;
            n++;
        }
        at = end + 1;
    }
    return n;
}

Test(cli_usage, every_option_a_programs_help_lists_is_one_it_parses, .timeout = 120)
{
    for (size_t p = 0; p < sizeof k_programs / sizeof *k_programs; p++) {
        char *usage, *err;
        int rc = tu_run_program(&usage, &err, k_programs[p], "--help");
        cr_assert_eq(rc, 0, "%s --help: %d %s", k_programs[p], rc, err);
        cr_assert_str_empty(err, "%s", err);
        char names[64][64];
        int n = usage_options(usage, names, 64);
        cr_assert_geq(n, 4, "%s lists %d options", k_programs[p], n);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < i; j++)
                cr_assert_str_neq(names[i], names[j], "%s lists --%s twice", k_programs[p],
                                  names[i]);
            /* an option taken is parsed (a value option takes "--help" as
             * its value, then fails on it or on the missing arguments); an
             * unknown one is refused as unknown */
            char *out, *e2;
            tu_run_program(&out, &e2, k_programs[p], "--%s --help", names[i]);
            cr_assert(!strstr(e2, "unknown"), "%s --%s: %s", k_programs[p], names[i], e2);
            free(out);
            free(e2);
        }
        free(usage);
        free(err);
    }
}

Test(cli_usage, an_option_no_table_holds_is_refused_as_unknown_with_status_2)
{
    for (size_t p = 0; p < sizeof k_programs / sizeof *k_programs; p++) {
        char *out, *err;
        int rc = tu_run_program(&out, &err, k_programs[p], "--no-such-option x");
        cr_assert_eq(rc, 2, "%s: %d %s", k_programs[p], rc, err);
        cr_assert(strstr(err, "unknown"), "%s: %s", k_programs[p], err);
        cr_assert(strstr(err, "--no-such-option"), "%s: %s", k_programs[p], err);
        free(out);
        free(err);
    }
}

Test(cli_usage, an_option_after_the_positional_arguments_is_still_an_option)
{
    /* getopt_long's GNU order, as before the tables: "pn-check FILE --help"
     * is a request for the usage */
    for (size_t p = 0; p < sizeof k_programs / sizeof *k_programs; p++) {
        char *out, *err;
        int rc = tu_run_program(&out, &err, k_programs[p], "some.gguf --help");
        cr_assert_eq(rc, 0, "%s: %d %s", k_programs[p], rc, err);
        cr_assert(strncmp(out, "usage: ", 7) == 0, "%s: %s", k_programs[p], out);
        free(out);
        free(err);
    }
}
