/* plot.c - a sweep drawn by gnuplot (plot.h): the script written here, the
 * picture gnuplot makes written straight into the output file. */
#include "compare/plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/spawn.h"
#include "common/file.h"
#include "common/outfile.h"
#include "io/source_open.h"

void pn_plot_pareto(const pn_plot_point *p, size_t n, bool *on_front)
{
    for (size_t i = 0; i < n; i++) {
        on_front[i] = true;
        for (size_t j = 0; j < n && on_front[i]; j++) {
            if (j == i)
                continue;
            bool le = p[j].bytes <= p[i].bytes && p[j].kl_mean <= p[i].kl_mean;
            bool better = p[j].bytes < p[i].bytes || p[j].kl_mean < p[i].kl_mean;
            bool same_first = !better && j < i;
            if (le && (better || same_first))
                on_front[i] = false;
        }
    }
}

static bool is_png(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcasecmp(path + n - 4, ".png") == 0;
}

static bool is_svg(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcasecmp(path + n - 4, ".svg") == 0;
}

pn_status pn_plot_check_target(const pn_plot_opts *o, pn_error *err)
{
    if (!o->path || !(is_png(o->path) || is_svg(o->path)))
        return pn_error_set(err, PN_ERR_USAGE, "--plot %s: the name must end in .svg or .png",
                            o->path ? o->path : "(none)");
    if (o->source) {
        pn_status st = pn_source_check_target(o->source, o->path, "--plot", err);
        if (st != PN_OK)
            return st;
    }
    for (size_t i = 0; i < sizeof o->inputs / sizeof o->inputs[0]; i++)
        if (o->inputs[i] && pn_same_file(o->inputs[i], o->path))
            return pn_error_set(err, PN_ERR_USAGE,
                                "--plot %s: that is %s, an input of the sweep; choose another "
                                "path",
                                o->path, o->inputs[i]);
    struct stat sb;
    if (lstat(o->path, &sb) == 0) {
        if (!S_ISREG(sb.st_mode))
            return pn_error_set(err, PN_ERR_USAGE, "--plot %s: not a regular file", o->path);
        if (!o->force)
            return pn_error_set(err, PN_ERR_EXISTS,
                                "--plot %s: the file exists; use --force "
                                "to replace it",
                                o->path);
    }
    return PN_OK;
}

/* A name as the script may hold it inside double quotes. */
static void put_name(FILE *f, const char *s)
{
    fputc('"', f);
    for (size_t i = 0; s[i] && i < 80; i++) {
        unsigned char c = (unsigned char)s[i];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == ' ' || c == '+' || c == '.' || c == '_' || c == '-' || c == '(' ||
                  c == ')' || c == ',';
        fputc(ok ? (int)c : '?', f);
    }
    fputc('"', f);
}

/* The caption inside double quotes: printable ASCII but '"' and '\\', each
 * line break as gnuplot's "\n", at most 4 lines of 160 bytes. */
static void put_caption(FILE *f, const char *s)
{
    fputc('"', f);
    int lines = 1;
    size_t col = 0;
    for (size_t i = 0; s[i] && i < 800; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') {
            if (++lines > 4)
                break;
            fputs("\\n", f);
            col = 0;
            continue;
        }
        if (col++ >= 160)
            continue;
        bool ok = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
        fputc(ok ? (int)c : '?', f);
    }
    fputc('"', f);
}

/* The unit of the size axis: the one that suits the largest size. */
static void size_unit(double max_bytes, double *div, const char **name)
{
    if (max_bytes >= 1e9)
        *div = 1e9, *name = "GB";
    else if (max_bytes >= 1e6)
        *div = 1e6, *name = "MB";
    else
        *div = 1e3, *name = "kB";
}

/* The points of one kind: size, KL, its standard error, name. */
static void put_points(FILE *f, const pn_plot_point *p, size_t n, bool stock, double div)
{
    for (size_t i = 0; i < n; i++)
        if (p[i].stock == stock) {
            fprintf(f, "%.9g %.9g %.9g ", (double)p[i].bytes / div, p[i].kl_mean, p[i].kl_se);
            put_name(f, p[i].name);
            fputc('\n', f);
        }
}

/* Is point p on the curve named c (NULL: the PN points without one)? */
static bool on_curve(const pn_plot_point *p, const char *c)
{
    return !p->stock && (p->curve && c ? strcmp(p->curve, c) == 0 : p->curve == c);
}

/* The PN curves in the order first given (NULL: the points without one);
 * 0 when no PN point names one. More than PN_PLOT_MAX_CURVES: SIZE_MAX. */
static size_t pn_curves(const pn_plot_point *p, size_t n, const char **names)
{
    bool named = false;
    for (size_t i = 0; i < n; i++)
        named |= !p[i].stock && p[i].curve;
    if (!named)
        return 0;
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i].stock)
            continue;
        bool seen = false;
        for (size_t c = 0; c < nc && !seen; c++)
            seen = on_curve(&p[i], names[c]);
        if (seen)
            continue;
        if (nc == PN_PLOT_MAX_CURVES)
            return SIZE_MAX;
        names[nc++] = p[i].curve;
    }
    return nc;
}

/* Indices [0, n) in size order (equal sizes: the order given). */
static void by_size(const pn_plot_point *p, size_t *order, size_t n)
{
    for (size_t a = 1; a < n; a++)
        for (size_t b = a; b > 0 && p[order[b - 1]].bytes > p[order[b]].bytes; b--) {
            size_t t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
}

/* Each curve's points as a data block $pnC (C from 1), in size order. */
static void put_curve_blocks(FILE *f, const pn_plot_point *p, size_t n, const char **names,
                             size_t nc, size_t *order, double div)
{
    for (size_t c = 0; c < nc; c++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (on_curve(&p[i], names[c]))
                order[k++] = i;
        by_size(p, order, k);
        fprintf(f, "$pn%zu << EOD\n", c + 1);
        for (size_t i = 0; i < k; i++) {
            const pn_plot_point *q = &p[order[i]];
            fprintf(f, "%.9g %.9g %.9g ", (double)q->bytes / div, q->kl_mean, q->kl_se);
            put_name(f, q->name);
            fputc('\n', f);
        }
        fprintf(f, "EOD\n");
    }
}

/* The curves' plot clauses: a line through the points with their bars, in
 * the curve's mark and colour, named in the key; the points' names. */
static void put_curve_plots(FILE *f, const char **names, size_t nc)
{
    /* filled circle, triangle, diamond, inverted triangle, pentagon, circle */
    static const int marks[PN_PLOT_MAX_CURVES] = { 7, 9, 13, 11, 15, 6 };
    static const char *const colours[PN_PLOT_MAX_CURVES] = { "#1f4e9c", "#2a8c3c", "#9c1f7a",
                                                             "#6b4c9a", "#008b8b", "#555555" };
    for (size_t c = 0; c < nc; c++) {
        fprintf(f,
                ", \\\n  $pn%zu using 1:2:3 with yerrorlines lw 1.5 pt %d ps 1.4 lc rgb '%s' "
                "title ",
                c + 1, marks[c], colours[c]);
        put_name(f, names[c] ? names[c] : "PN mixes");
        /* above the point, and the next curve's below: where two orders
         * make the same mix (no promotion), both names stay legible */
        fprintf(f, ", \\\n  $pn%zu using 1:2:4 with labels left offset 0.7,%s notitle", c + 1,
                c % 2 ? "-0.8" : "0.6");
    }
}

/* The top axis: each point's bits per weight as the table gives it, a tic
 * above the point (the table's definition, not a scale of the size). */
static void put_bpw_axis(FILE *f, const pn_plot_point *p, size_t n, double div, double x_lo,
                         double x_hi)
{
    bool any_bpw = false;
    for (size_t i = 0; i < n; i++)
        any_bpw |= p[i].bpw > 0;
    if (any_bpw) {
        fprintf(f, "set tmargin 7\nset x2label 'bits per weight of each mix (8 x tensor "
                   "bytes / weights, as in the table)'\n");
        fprintf(f,
                "set x2range [%.9g:%.9g]\nset xtics nomirror\nset x2tics out rotate by 45 "
                "left font ',9' (",
                x_lo, x_hi);
        bool first = true;
        for (size_t i = 0; i < n; i++)
            if (p[i].bpw > 0) {
                fprintf(f, "%s\"%.3f\" %.9g", first ? "" : ", ", p[i].bpw,
                        (double)p[i].bytes / div);
                first = false;
            }
        fprintf(f, ")\n");
    }
}

/* The gnuplot script, into a memory file. */
static pn_status write_script(const pn_plot_opts *o, const pn_plot_point *p, size_t n, int fd,
                              pn_error *err)
{
    const char *curves[PN_PLOT_MAX_CURVES];
    size_t nc = pn_curves(p, n, curves);
    if (nc == SIZE_MAX)
        return pn_error_set(err, PN_ERR_USAGE, "--plot: more than %d curves of PN mixes",
                            PN_PLOT_MAX_CURVES);
    FILE *f = fdopen(dup(fd), "w");
    if (!f)
        return pn_error_set(err, PN_ERR_IO, "cannot write the gnuplot script: %s", strerror(errno));
    bool *front = calloc(n, sizeof *front);
    size_t *order = calloc(n, sizeof *order);
    if (!front || !order) {
        free(front);
        free(order);
        fclose(f);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    pn_plot_pareto(p, n, front);
    double lo = INFINITY, hi = 0, kl_lo = INFINITY, kl_hi = 0, bar_lo = INFINITY, bar_hi = 0;
    bool all_positive = true;
    size_t n_pn = 0, n_stock = 0;
    for (size_t i = 0; i < n; i++) {
        double b = (double)p[i].bytes;
        lo = b < lo ? b : lo;
        hi = b > hi ? b : hi;
        double k = p[i].kl_mean, se = p[i].kl_se > 0 ? p[i].kl_se : 0;
        kl_lo = k < kl_lo ? k : kl_lo;
        kl_hi = k > kl_hi ? k : kl_hi;
        bar_lo = k - se < bar_lo ? k - se : bar_lo;
        bar_hi = k + se > bar_hi ? k + se : bar_hi;
        if (!(k > 0))
            all_positive = false;
        if (p[i].stock)
            n_stock++;
        else
            n_pn++;
    }
    if (o->budget) {
        double b = (double)o->budget;
        lo = b < lo ? b : lo;
        hi = b > hi ? b : hi;
    }
    double div;
    const char *unit;
    size_unit(hi, &div, &unit);
    lo /= div;
    hi /= div;
    double pad = (hi - lo) * 0.08;
    if (!(pad > 0))
        pad = hi > 0 ? hi * 0.05 : 1;
    /* room on the right for the last point's name */
    const double x_lo = lo - pad > 0 ? lo - pad : 0, x_hi = hi + 2.5 * pad;
    fprintf(f, "set encoding utf8\n");
    if (is_png(o->path))
        fprintf(f, "set terminal pngcairo size 1000,650 noenhanced font 'sans,11'\n");
    else
        fprintf(f, "set terminal svg size 1000,650 noenhanced font 'sans,12' background "
                   "rgb 'white'\n");
    fprintf(f, "set output\n"); /* stdout: the output file */
    if (o->title) {
        fprintf(f, "set title ");
        put_name(f, o->title);
        fputc('\n', f);
    }
    fprintf(f, "set xlabel 'file size (%s, 10^%d bytes)'\n", unit,
            div == 1e9   ? 9
            : div == 1e6 ? 6
                         : 3);
    fprintf(f, "set ylabel 'mean KL from the source (nats/token; bar: 1 std. error)'\n");
    fprintf(f, "set xrange [%.9g:%.9g]\n", x_lo, x_hi);
    put_bpw_axis(f, p, n, div, x_lo, x_hi);
    if (all_positive && kl_hi > kl_lo * 10) {
        double b_lo = bar_lo > 0 ? bar_lo : kl_lo;
        fprintf(f, "set logscale y\n");
        fprintf(f, "set yrange [%.9g:%.9g]\n", b_lo / 1.6, bar_hi * 1.6);
    } else {
        /* the points and their bars, with a margin: not from 0, so that
         * near values stay apart */
        double span = bar_hi - bar_lo;
        double m = span > 0 ? span * 0.12 : (bar_hi > 0 ? bar_hi * 0.1 : 1);
        double y_lo = bar_lo - m, y_hi = bar_hi + m;
        fprintf(f, "set yrange [%.9g:%.9g]\n", bar_lo >= 0 && y_lo < 0 ? 0 : y_lo, y_hi);
    }
    fprintf(f, "set grid\nset key top right box opaque\n");
    if (o->caption) {
        fprintf(f, "set bmargin 8\nset label 2 ");
        put_caption(f, o->caption);
        fprintf(f, " at screen 0.01, screen 0.085 left font ',10'\n");
    }
    if (o->budget) {
        double b = (double)o->budget / div;
        fprintf(f,
                "set arrow 1 from %.9g, graph 0 to %.9g, graph 1 nohead dt 2 lw 2 "
                "lc rgb '#c00000'\n",
                b, b);
        fprintf(f,
                "set label 1 'budget %.4g %s' at %.9g, graph 0.03 right offset -0.5,0 "
                "tc rgb '#c00000'\n",
                b, unit, b);
    }
    /* the data: size, KL, its standard error, name */
    if (nc) {
        put_curve_blocks(f, p, n, curves, nc, order, div);
    } else {
        fprintf(f, "$pn << EOD\n");
        put_points(f, p, n, false, div);
        fprintf(f, "EOD\n");
    }
    fprintf(f, "$stock << EOD\n");
    put_points(f, p, n, true, div);
    /* the front, by size */
    size_t nf = 0;
    for (size_t i = 0; i < n; i++)
        if (front[i])
            order[nf++] = i;
    by_size(p, order, nf);
    fprintf(f, "EOD\n$front << EOD\n");
    for (size_t i = 0; i < nf; i++)
        fprintf(f, "%.9g %.9g\n", (double)p[order[i]].bytes / div, p[order[i]].kl_mean);
    fprintf(f, "EOD\n");
    fprintf(f, "plot $front using 1:2 with lines lw 2 lc rgb '#808080' title 'Pareto front'");
    if (nc)
        put_curve_plots(f, curves, nc);
    else if (n_pn)
        fprintf(f, ", \\\n  $pn using 1:2:3 with yerrorbars pt 7 ps 1.4 lc rgb '#1f4e9c' "
                   "title 'PN mixes', \\\n  $pn using 1:2:4 with labels left offset 0.7,0.6 "
                   "notitle");
    if (n_stock)
        fprintf(f, ", \\\n  $stock using 1:2:3 with yerrorbars pt 5 ps 1.4 lc rgb '#d07000' "
                   "title 'stock llama.cpp types', \\\n  $stock using 1:2:4 with labels "
                   "left offset 0.7,-0.8 notitle");
    fprintf(f, "\n");
    free(front);
    free(order);
    if (fclose(f) != 0)
        return pn_error_set(err, PN_ERR_IO, "cannot write the gnuplot script: %s", strerror(errno));
    return PN_OK;
}

pn_status pn_plot_draw(const pn_plot_opts *o, const pn_plot_point *p, size_t n, pn_error *err)
{
    if (n == 0)
        return pn_error_set(err, PN_ERR_USAGE, "--plot: no mix to draw");
    pn_status st = pn_plot_check_target(o, err);
    if (st != PN_OK)
        return st;
    int script = memfd_create("pn-plot-script", MFD_CLOEXEC);
    int log = memfd_create("pn-plot-log", MFD_CLOEXEC);
    if (script < 0 || log < 0) {
        if (script >= 0)
            close(script);
        if (log >= 0)
            close(log);
        return pn_error_set(err, PN_ERR_IO, "cannot make memory files for gnuplot: %s",
                            strerror(errno));
    }
    st = write_script(o, p, n, script, err);
    pn_outfile_opts oo = { 0 };
    oo.force = o->force;
    pn_outfile *out = NULL;
    if (st == PN_OK)
        st = pn_outfile_open(o->path, &oo, &out, err);
    pid_t pid = -1;
    const char *prog = o->gnuplot ? o->gnuplot : "gnuplot";
    if (st == PN_OK) {
        lseek(script, 0, SEEK_SET);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, script, 0);
        posix_spawn_file_actions_adddup2(&fa, pn_outfile_fd(out), 1);
        posix_spawn_file_actions_adddup2(&fa, log, 2);
        posix_spawnattr_t at;
        pn_spawnattr_init_child(&at, 0);
        static char *const no_env[] = { NULL };
        char *const argv[] = { (char *)prog, NULL };
        int rc = posix_spawnp(&pid, prog, &fa, &at, argv, o->envp ? o->envp : no_env);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
        if (rc != 0)
            st = pn_error_set(err, PN_ERR_IO,
                              "--plot: cannot run '%s': %s; the picture is drawn "
                              "by gnuplot (apt-get install gnuplot-nox)",
                              prog, strerror(rc));
    }
    if (st == PN_OK) {
        int status = 0;
        pid_t r;
        while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
        }
        char tail[400];
        pn_child_log_tail(log, tail, sizeof tail);
        if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            st = pn_error_set(err, PN_ERR_IO, "--plot %s: gnuplot failed (%s %d): %s", o->path,
                              r >= 0 && WIFEXITED(status) ? "exit" : "status",
                              r >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : status,
                              tail[0] ? tail : "(no message)");
    }
    if (st == PN_OK) {
        unsigned char head[8] = { 0 };
        ssize_t got = pread(pn_outfile_fd(out), head, sizeof head, 0);
        static const unsigned char png[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
        bool ok = got == 8 &&
                  (is_png(o->path) ? memcmp(head, png, 8) == 0
                                   : memcmp(head, "<?xml", 5) == 0 || memcmp(head, "<svg", 4) == 0);
        if (!ok)
            st = pn_error_set(err, PN_ERR_IO, "--plot %s: gnuplot wrote no %s picture", o->path,
                              is_png(o->path) ? "PNG" : "SVG");
    }
    if (st == PN_OK)
        st = pn_outfile_commit(out, err);
    pn_outfile_free(out);
    close(script);
    close(log);
    return st;
}
