/* The sweep's picture (compare/plot.h): the Pareto front, and gnuplot's
 * SVG and PNG pictures of one or several curves, with their marks, error
 * bars, names and caption (gnuplot-nox, which scripts/install-deps
 * installs: a missing gnuplot fails these tests).
 *
 * pn-compare --sweep itself, run as a program, is tests/programs/test_sweep.c. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compare/plot.h"
#include "gguf/gguf.h"
#include "gguf/pn_keys.h"
#include "fixtures/scratch.h"
#include "test_util.h"


static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The marks of point type `pt` (gnuplot's SVG "gpPt6", ...) drawn in
 * colour: with error bars gnuplot lays a white mark under each point
 * first, which is no point of its own. */
static size_t marks(const char *svg, const char *pt)
{
    char use[64];
    snprintf(use, sizeof use, "<use xlink:href='#%s' transform=", pt);
    size_t n = 0;
    for (const char *p = svg; (p = strstr(p, use)) != NULL; p += strlen(use)) {
        const char *end = strchr(p, '>');
        const char *white = strstr(p, "color='#FFFFFF'");
        n += !(white && end && white < end);
    }
    return n;
}

/* ---- the picture ---- */

static const pn_plot_point k_points[] = {
    { "P0k+0", false, 1000000000ull, 0.30, 0.011, 3.701, NULL },
    { "P0k+10", false, 1100000000ull, 0.20, 0.009, 4.02, NULL },
    { "P0k+19", false, 1200000000ull, 0.22, 0.008, 4.33, NULL },
    { "P0k+40", false, 1300000000ull, 0.10, 0.004, 4.71, NULL },
    { "stock Q3_K_M", true, 1150000000ull, 0.25, 0.01, 4.125, NULL },
    { "stock Q4_K_M", true, 1500000000ull, 0.05, 0.002, 5.01, NULL },
};
#define N_POINTS (sizeof k_points / sizeof k_points[0])

Test(plot, the_pareto_front_is_the_points_that_nothing_beats)
{
    bool f[N_POINTS];
    pn_plot_pareto(k_points, N_POINTS, f);
    /* +19 is beaten by +10 (smaller and nearer), Q3_K_M by +10 too */
    const bool want[N_POINTS] = { true, true, false, true, false, true };
    for (size_t i = 0; i < N_POINTS; i++)
        cr_expect_eq(f[i], want[i], "%s", k_points[i].name);
    pn_plot_point same[2] = { { "a", false, 5, 0.1, 0, 0, NULL },
                              { "b", true, 5, 0.1, 0, 0, NULL } };
    bool g[2];
    pn_plot_pareto(same, 2, g);
    cr_expect(g[0] && !g[1], "of equal points the first is on the front");
}

static void require_gnuplot(void)
{
    char *out, *err;
    int rc = tu_run("gnuplot --version", &out, &err);
    cr_assert_eq(rc, 0,
                 "gnuplot is needed (apt-get install gnuplot-nox; scripts/install-deps "
                 "installs it): exit %d: %s",
                 rc, err);
    free(out);
    free(err);
}

Test(plot, an_svg_has_one_mark_per_mix_of_its_kind_the_names_the_front_and_the_budget,
     .init = setup, .fini = teardown)
{
    require_gnuplot();
    char *svg = path_in("m.svg");
    pn_plot_opts o = { .path = svg, .budget = 1400000000ull };
    extern char **environ;
    o.envp = environ;
    pn_error err;
    pn_error_clear(&err);
    cr_assert_eq(pn_plot_draw(&o, k_points, N_POINTS, &err), PN_OK, "%s", err.msg);
    size_t n;
    char *pic = tu_read_file(svg, &n);
    cr_assert(strncmp(pic, "<?xml", 5) == 0 && strstr(pic, "<svg") && strstr(pic, "</svg>"));
    cr_assert_eq(marks(pic, "gpPt6"), 4 + 1, "4 PN circles and the key's");
    cr_assert_eq(marks(pic, "gpPt4"), 2 + 1, "2 stock squares and the key's");
    for (size_t i = 0; i < N_POINTS; i++)
        cr_assert(strstr(pic, k_points[i].name), "%s is named", k_points[i].name);
    cr_assert(strstr(pic, "budget 1.4 GB") && strstr(pic, "Pareto front") &&
                  strstr(pic, "bits per weight"),
              "the budget, the front and the second axis");
    free(pic);
    /* drawn again: refused without force, replaced with it */
    cr_assert_eq(pn_plot_draw(&o, k_points, N_POINTS, &err), PN_ERR_EXISTS);
    o.force = true;
    cr_assert_eq(pn_plot_draw(&o, k_points, 2, &err), PN_OK, "%s", err.msg);
    pic = tu_read_file(svg, &n);
    cr_assert_eq(marks(pic, "gpPt6"), 2 + 1);
    cr_assert_eq(marks(pic, "gpPt4"), 0, "no stock type, no square");
    free(pic);
    cr_assert_eq(tu_count_files(g_dir), 1, "no temporary file is left");
    free(svg);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

Test(plot, a_png_name_gives_a_png_and_another_name_is_refused, .init = setup, .fini = teardown)
{
    require_gnuplot();
    char *png = path_in("m.png"), *pdf = path_in("m.pdf");
    extern char **environ;
    pn_plot_opts o = { .path = png, .envp = environ };
    pn_error err;
    pn_error_clear(&err);
    cr_assert_eq(pn_plot_draw(&o, k_points, N_POINTS, &err), PN_OK, "%s", err.msg);
    size_t n;
    unsigned char *b = tu_read_file(png, &n);
    static const unsigned char sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    cr_assert(n > 33 && memcmp(b, sig, 8) == 0 && memcmp(b + 12, "IHDR", 4) == 0);
    cr_assert_eq(be32(b + 16), 1000);
    cr_assert_eq(be32(b + 20), 650);
    cr_assert(memcmp(b + n - 8, "IEND", 4) == 0, "the PNG ends with IEND");
    free(b);
    o.path = pdf;
    cr_assert_eq(pn_plot_draw(&o, k_points, N_POINTS, &err), PN_ERR_USAGE);
    cr_assert(strstr(err.msg, ".svg or .png"), "%s", err.msg);
    cr_assert(!exists(pdf));
    o.path = png;
    o.force = true;
    o.gnuplot = "/nonexistent/gnuplot";
    cr_assert_eq(pn_plot_draw(&o, k_points, N_POINTS, &err), PN_ERR_IO);
    cr_assert(strstr(err.msg, "gnuplot-nox"), "%s", err.msg);
    free(png);
    free(pdf);
}

/* The script gnuplot is given (a stand-in gnuplot records it): the spread
 * on every point, a caption, the size in the unit that suits the model
 * (MB for a few MB), the KL axis around the points rather than from 0,
 * and each point's bits per weight as the table gives it on the top axis. */
Test(plot, every_point_has_its_error_bar_and_the_picture_its_caption_unit_and_bpw, .init = setup,
     .fini = teardown)
{
    char *svg = path_in("m.svg"), *script = path_in("script.gp"), *fake = path_in("gnuplot.sh");
    char text[4096];
    snprintf(text, sizeof text, "#!/bin/sh\ncat > '%s'\necho '<svg xmlns=\"s\"></svg>'\n", script);
    tu_write_file(fake, text, strlen(text));
    chmod(fake, 0755);
    const pn_plot_point pts[] = {
        { "P0k-fallback+0", false, 1690880, 0.1066, 0.018, 4.2453, NULL },
        { "P0k-fallback+3", false, 1782368, 0.09157, 0.016, 4.4768, NULL },
        { "P0k-fallback+7 (--target-size 2.6 MB)", false, 1882560, 0.02386, 0.0024, 4.7302, NULL },
        { "stock Q8_0", true, 2600000, 0.0051, 0.0004, 8.5, NULL },
    };
    extern char **environ;
    pn_plot_opts o = { .path = svg, .gnuplot = fake, .envp = environ };
    o.caption = "source hf2 (4820484 weights)\njudged on the fixed token set: 4 sequences, 256 "
                "positions\nby stock llama.cpp v0.5.0";
    pn_error err;
    pn_error_clear(&err);
    cr_assert_eq(pn_plot_draw(&o, pts, 3, &err), PN_OK, "%s", err.msg);
    size_t n;
    char *gp = tu_read_file(script, &n);
    cr_assert(gp, "gnuplot was given a script");
    cr_log_info("%s", gp);
    cr_assert(strstr(gp, "set xlabel 'file size (MB, 10^6 bytes)'"), "%s", gp);
    cr_assert(strstr(gp, "1.69088 0.1066 0.018 \"P0k-fallback+0\"\n") &&
                  strstr(gp, "1.88256 0.02386 0.0024 \"P0k-fallback+7 (--target-size 2.6 MB)\"\n"),
              "each point with its standard error and its name:\n%s", gp);
    cr_assert_eq(count(gp, "$pn using 1:2:3 with yerrorbars"), 1, "%s", gp);
    cr_assert(strstr(gp, "set label 2 \"source hf2 (4820484 weights)\\njudged on the fixed token "
                         "set: 4 sequences, 256 positions\\nby stock llama.cpp v0.5.0\" at screen"),
              "the caption:\n%s", gp);
    cr_assert(strstr(gp, "(\"4.245\" 1.69088, \"4.477\" 1.782368, \"4.730\" 1.88256)"),
              "the table's bits per weight above each point:\n%s", gp);
    const char *yr = strstr(gp, "set yrange [");
    cr_assert(yr && !strstr(gp, "logscale"), "%s", gp);
    double y_lo = 0, y_hi = 0;
    cr_assert_eq(sscanf(yr, "set yrange [%lf:%lf]", &y_lo, &y_hi), 2);
    cr_assert(y_lo > 0 && y_lo < 0.02386 - 0.0024 && y_hi > 0.1066 + 0.018,
              "the KL axis holds the bars and does not start at 0: [%g:%g]", y_lo, y_hi);
    free(gp);
    /* with a stock type a few GB away the unit is GB, and its bar drawn too */
    const pn_plot_point big[] = { { "P0k+19", false, 12600000000ull, 0.2, 0.01, 3.73, NULL },
                                  { "stock Q4_K_M", true, 16800000000ull, 0.1, 0.005, 4.9, NULL } };
    o.force = true;
    cr_assert_eq(pn_plot_draw(&o, big, 2, &err), PN_OK, "%s", err.msg);
    gp = tu_read_file(script, &n);
    cr_assert(strstr(gp, "set xlabel 'file size (GB, 10^9 bytes)'"), "%s", gp);
    cr_assert(strstr(gp, "$stock using 1:2:3 with yerrorbars"), "%s", gp);
    cr_assert(strstr(gp, "12.6 0.2 0.01 \"P0k+19\"\n"), "%s", gp);
    free(gp);
    free(svg);
    free(script);
    free(fake);
}

/* Points that name curves (the sweep's promotion orders): one data block
 * and one line per curve, its points in size order, each named in the key
 * with its own mark; the stock types and the front as without curves. */
Test(plot, each_curve_is_its_own_line_in_size_order_named_in_the_key, .init = setup,
     .fini = teardown)
{
    char *svg = path_in("m.svg"), *script = path_in("script.gp"), *fake = path_in("gnuplot.sh");
    char text[4096];
    snprintf(text, sizeof text, "#!/bin/sh\ncat > '%s'\necho '<svg xmlns=\"s\"></svg>'\n", script);
    tu_write_file(fake, text, strlen(text));
    chmod(fake, 0755);
    const char *e = "PN, promotions by error", *k = "PN, promotions by KL";
    const pn_plot_point pts[] = {
        { "P0k+10", false, 1100000000ull, 0.42, 0.01, 4.0, e },
        { "P0k+0", false, 1000000000ull, 0.45, 0.01, 3.7, e },
        { "P0k+10 by KL", false, 1100000000ull, 0.32, 0.01, 4.0, k },
        { "P0k+0 by KL", false, 1000000000ull, 0.45, 0.01, 3.7, k },
        { "P0k+5 by KL", false, 1050000000ull, 0.35, 0.01, 3.9, k },
        { "stock Q3_K_M", true, 1150000000ull, 0.33, 0.01, 4.1, NULL },
    };
    extern char **environ;
    pn_plot_opts o = { .path = svg, .gnuplot = fake, .envp = environ };
    pn_error err;
    pn_error_clear(&err);
    cr_assert_eq(pn_plot_draw(&o, pts, 6, &err), PN_OK, "%s", err.msg);
    size_t n;
    char *gp = tu_read_file(script, &n);
    cr_assert(gp, "gnuplot was given a script");
    cr_log_info("%s", gp);
    cr_assert(strstr(gp, "$pn1 << EOD\n1 0.45 0.01 \"P0k+0\"\n1.1 0.42 0.01 \"P0k+10\"\nEOD\n"),
              "the first curve, by size:\n%s", gp);
    cr_assert(strstr(gp, "$pn2 << EOD\n1 0.45 0.01 \"P0k+0 by KL\"\n1.05 0.35 0.01 \"P0k+5 by "
                         "KL\"\n1.1 0.32 0.01 \"P0k+10 by KL\"\nEOD\n"),
              "the second curve, by size:\n%s", gp);
    const char *c1 = strstr(gp, "$pn1 using 1:2:3 with yerrorlines");
    const char *c2 = strstr(gp, "$pn2 using 1:2:3 with yerrorlines");
    cr_assert(c1 && c2, "%s", gp);
    cr_assert(strstr(c1, "title \"PN, promotions by error\"") < c2 &&
                  strstr(c2, "title \"PN, promotions by KL\""),
              "each curve named in the key:\n%s", gp);
    cr_assert(strstr(c1, " pt 7 ") < c2 && strstr(c2, " pt 9 "), "distinct marks:\n%s", gp);
    cr_assert(!strstr(gp, "'PN mixes'") && !strstr(gp, "$pn using"), "%s", gp);
    cr_assert(strstr(gp, "$stock using 1:2:3 with yerrorbars pt 5"), "%s", gp);
    /* the front over all points: +0 (the first of the two equal), +5 by KL, +10 by KL */
    cr_assert(strstr(gp, "$front << EOD\n1 0.45\n1.05 0.35\n1.1 0.32\nEOD\n"), "%s", gp);
    free(gp);
    free(svg);
    free(script);
    free(fake);
}

/* The curves drawn by the real gnuplot: each curve's marks (filled circles,
 * then filled triangles), one more each in the key, and both names. */
Test(plot, an_svg_of_two_curves_has_each_curves_marks_and_names, .init = setup, .fini = teardown)
{
    require_gnuplot();
    char *svg = path_in("m.svg");
    const char *e = "PN, promotions by error", *k = "PN, promotions by KL";
    const pn_plot_point pts[] = {
        { "P0k+0", false, 1000000000ull, 0.45, 0.01, 3.7, e },
        { "P0k+10", false, 1100000000ull, 0.42, 0.01, 4.0, e },
        { "P0k+5 by KL", false, 1050000000ull, 0.35, 0.01, 3.9, k },
        { "P0k+10 by KL", false, 1100000000ull, 0.32, 0.01, 4.0, k },
        { "P0k+19 by KL", false, 1200000000ull, 0.30, 0.01, 4.3, k },
        { "stock Q4_K_M", true, 1500000000ull, 0.05, 0.002, 5.0, NULL },
    };
    extern char **environ;
    pn_plot_opts o = { .path = svg, .envp = environ };
    pn_error err;
    pn_error_clear(&err);
    cr_assert_eq(pn_plot_draw(&o, pts, 6, &err), PN_OK, "%s", err.msg);
    size_t n;
    char *pic = tu_read_file(svg, &n);
    cr_assert(strncmp(pic, "<?xml", 5) == 0 && strstr(pic, "</svg>"), "not an SVG");
    cr_assert_eq(marks(pic, "gpPt6"), 2 + 1, "the error curve's circles and the key's");
    cr_assert_eq(marks(pic, "gpPt8"), 3 + 1, "the KL curve's triangles and the key's");
    cr_assert_eq(marks(pic, "gpPt4"), 1 + 1, "the stock square and the key's");
    cr_assert(strstr(pic, "PN, promotions by error") && strstr(pic, "PN, promotions by KL") &&
                  strstr(pic, "Pareto front"),
              "the curves and the front are named");
    free(pic);
    free(svg);
}
