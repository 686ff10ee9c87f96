/* plot.h - a sweep drawn (pn-compare --sweep --plot FILE): mean KL against
 * file size, by gnuplot (Debian's gnuplot-nox), not by a plotter of our own.
 *
 * The picture: x the file size in the unit that suits the largest (GB,
 * 10^9 bytes, from 1 GB; MB, 10^6, from 1 MB; else kB), y the mean KL from
 * the source with its standard error over the positions drawn as a bar on
 * every point (log scale when every KL is above 0 and they span more than a
 * factor of 10; else linear over the points and their bars, not forced to
 * start at 0), on the top axis each point's bits per weight as pn-compare's
 * table gives it (8 x tensor data bytes / weights: a tic above the point,
 * one definition for both), each point named by its mix, PN mixes as filled
 * circles and stock llama.cpp types as filled squares, the Pareto front
 * (pn_plot_pareto, over all the points) as a line through its points. PN
 * points that name a curve (pn_plot_point.curve: the sweep's promotion
 * orders) are drawn curve by curve instead: each curve's points joined by a
 * line in size order, with its own mark and colour (filled circles, then
 * triangles, diamonds, ...) and its name in the key; a PN point without a
 * curve among them is the curve "PN mixes". A budget (a size the user
 * gives, e.g. a 16 GB card's) as a dashed vertical line, and under it all a
 * caption (the source, the tokens judged on and their positions, the
 * llama.cpp release) so that the picture can be read alone. SVG, or PNG
 * (pngcairo) when the name ends in .png.
 *
 * gnuplot runs as a child (posix_spawnp of the program named, looked up in
 * PATH): the script on its stdin, the picture from its stdout straight into
 * the output file (common/outfile.h: a temporary file committed onto the
 * target once gnuplot exited 0 and the file starts as an SVG or a PNG does),
 * its messages into a memory file quoted on error. Names are written into
 * the script with every byte outside [A-Za-z0-9 +._-(),] as '?', the
 * caption with every byte outside printable ASCII, and '"' and '\\', as '?'.
 */
#ifndef PN_COMPARE_PLOT_H
#define PN_COMPARE_PLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"

typedef struct pn_plot_point {
    const char *name; /* the mix: "P0k+19", "stock Q4_K_M" */
    bool stock;       /* a stock llama.cpp type (the second mark) */
    uint64_t bytes;   /* file size */
    double kl_mean;
    double kl_se; /* its standard error (a bar from kl_mean - kl_se to + kl_se) */
    double bpw;   /* bits per weight as the table gives it; 0: no tic */
    /* a PN point's curve, its name in the key ("PN, promotions by KL");
     * NULL: none (when no point names one, the PN points are one set of
     * marks, "PN mixes", not joined) */
    const char *curve;
} pn_plot_point;

#define PN_PLOT_MAX_CURVES 6

typedef struct pn_plot_opts {
    const char *path;    /* .svg, or .png */
    const char *gnuplot; /* the program (default "gnuplot", in PATH) */
    char *const *envp;   /* its environment */
    uint64_t budget;     /* bytes; 0: no line */
    const char *title;   /* NULL: none */
    const char *caption; /* lines (separated by '\n', at most 4) under the plot; NULL: none */
    bool force;          /* replace an existing file */
    /* What the sweep reads, which the picture may never be, whatever force
     * says: the source (every file of a folder, io/source_open.h) and the
     * other inputs (the text, the imatrix, the recipe); NULL where none. */
    const char *source;
    const char *inputs[3];
} pn_plot_opts;

/* on_front[i]: no other point is at most as large and at most as far
 * (KL), and better in one of the two; of equal points the first given. */
void pn_plot_pareto(const pn_plot_point *p, size_t n, bool *on_front);

/* Checks what can be checked before a long sweep: the name's format and
 * that the target may be written (an existing file only with force). */
pn_status pn_plot_check_target(const pn_plot_opts *o, pn_error *err);

/* Draws the points (at least one). Errors: PN_ERR_USAGE (the name, no
 * point, more than PN_PLOT_MAX_CURVES curves), PN_ERR_EXISTS, PN_ERR_IO (gnuplot missing or failing: its last
 * messages quoted; the output not a picture), the outfile's. */
pn_status pn_plot_draw(const pn_plot_opts *o, const pn_plot_point *p, size_t n, pn_error *err);

#endif
