/* Sizes as the options take them (mix/size.h): bytes, decimal and binary
 * units, exact, and junk refused quoting it. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hadamard/hadamard.h"
#include "mix/glob.h"
#include "mix/measurement.h"
#include "mix/measurement_testing.h"
#include "mix/plan.h"
#include "mix/plan_testing.h"
#include "mix/promote.h"
#include "synth/qwen38_shapes.h"
#include "synth/qwen38_shapes_testing.h"
#include "mix/recipe.h"
#include "mix/size.h"
#include "quant/pn.h"
#include "quant/types.h"
#include "test_util.h"


/* ---- sizes ---- */

typedef struct size_case {
    char text[40];
    uint64_t bytes;
} size_case;

ParameterizedTestParameters(size, parses_bytes_decimal_and_binary_units_exactly)
{
    static size_case cases[] = {
        { "4096", 4096 },
        { "0", 0 },
        { "12B", 12 },
        { "12.5GiB", 13421772800ull },
        { "12.5 GiB", 13421772800ull },
        { "13GB", 13000000000ull },
        { "12.47GB", 12470000000ull },
        { "1.5KiB", 1536 },
        { "1kB", 1000 },
        { "1KB", 1000 },
        { "2MiB", 2097152 },
        { "3MB", 3000000 },
        { "1TiB", 1099511627776ull },
        { "1TB", 1000000000000ull },
        { "0.1B", 0 },
        { "0.0009765625KiB", 1 },
        { "1.9999B", 1 },
        { "18446744073709551615", UINT64_MAX },
        { "16777215.999999999999TiB", 18446744073709551614ull },
        /* gguf-split's single letters, powers of 1000, decimals exact */
        { "50G", 50000000000ull },
        { "500M", 500000000ull },
        { "13G", 13000000000ull },
        { "1.5G", 1500000000ull },
        { "0.05GB", 50000000ull },
        { "2k", 2000 },
        { "2K", 2000 },
        { "1T", 1000000000000ull },
        /* exponents, as the help's 13e9 */
        { "13e9", 13000000000ull },
        { "1.25e3", 1250 },
        { "1e0", 1 },
        { "2e3 KiB", 2048000 },
    };
    return cr_make_param_array(size_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(size_case *c, size, parses_bytes_decimal_and_binary_units_exactly)
{
    uint64_t v = 1;
    pn_error err = { 0 };
    cr_assert_eq(pn_parse_size(c->text, &v, &err), PN_OK, "'%s': %s", c->text, err.msg);
    cr_assert_eq(v, c->bytes, "'%s' gave %" PRIu64 ", expected %" PRIu64, c->text, v, c->bytes);
}

ParameterizedTestParameters(size, refuses_junk_quoting_it)
{
    static size_case cases[] = {
        { "", 0 },
        { "GiB", 0 },
        { "1.GiB", 0 },
        { ".5GiB", 0 },
        { "-1", 0 },
        { "+1", 0 },
        { "1e", 0 },
        { "12.5 gib", 0 },
        { "12x", 0 },
        { "12 ", 0 },
        { "1e-3", 0 },
        { "1e20", 0 },
        { "1e100", 0 },
        { "1E9", 0 },
        { "12g", 0 },
        { "1m", 0 },
        { "5GG", 0 },
        { " 12", 0 },
        { "12  GB", 0 },
        { "12Gb", 0 },
        { "12EiB", 0 },
        { "1,000", 0 },
        { "18446744073709551616", 0 },
        { "17179869184GiB", 0 },
        { "123456789012345678901", 0 },
    };
    return cr_make_param_array(size_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(size_case *c, size, refuses_junk_quoting_it)
{
    uint64_t v = 7;
    pn_error err = { 0 };
    cr_assert_eq(pn_parse_size(c->text, &v, &err), PN_ERR_USAGE, "'%s' should be refused", c->text);
    cr_assert_eq(v, 7, "nothing written on error");
    char quoted[64];
    snprintf(quoted, sizeof quoted, "'%s'", c->text);
    cr_assert_not_null(strstr(err.msg, quoted), "'%s' should quote the input", err.msg);
}
