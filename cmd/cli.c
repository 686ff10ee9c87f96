/* cli.c - the option table of a program: parsing with getopt_long and the
 * usage printed from the same table (cli.h). */
#include "cmd/cli.h"

#include <dirent.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The longest table of any program, with room to grow. */
#define PN_CLI_MAX_OPTIONS 64

/* The entry names its own option: it starts "  --name" ("  -h, --help" for
 * -h), so that a table whose text and name disagree is caught on the first
 * --help of the tests rather than shipped. */
static bool help_names_option(const pn_cli_option *o)
{
    const char *at = o->help;
    if (strncmp(at, "  -h, ", 6) == 0 && o->id == 'h')
        at += 6;
    else if (strncmp(at, "  ", 2) == 0)
        at += 2;
    size_t n = strlen(o->name);
    return strncmp(at, "--", 2) == 0 && strncmp(at + 2, o->name, n) == 0 &&
           (at[2 + n] == ' ' || at[2 + n] == '\n');
}

void pn_cli_usage(FILE *f, const pn_cli_program *p)
{
    fputs(p->head, f);
    for (const pn_cli_option *o = p->options; o->name; o++) {
        if (!help_names_option(o)) {
            fprintf(stderr, "%s: internal error: the usage of --%s does not name it\n", p->name,
                    o->name);
            abort();
        }
        fputs(o->help, f);
    }
    fputs(p->tail, f);
}

int pn_cli_next(const pn_cli_program *p, int argc, char **argv)
{
    struct option longopts[PN_CLI_MAX_OPTIONS + 1];
    size_t n = 0;
    for (const pn_cli_option *o = p->options; o->name && n < PN_CLI_MAX_OPTIONS; o++, n++)
        longopts[n] = (struct option){ o->name, o->has_arg, NULL, o->id };
    longopts[n] = (struct option){ NULL, 0, NULL, 0 };
    opterr = 0;
    return getopt_long(argc, argv, "h", longopts, NULL);
}

int pn_cli_help(const pn_cli_program *p, int fail_status)
{
    const char *why;
    pn_cli_usage(stdout, p);
    if (pn_cli_finish_stdout(&why) != 0) {
        fprintf(stderr, "%s: error: cannot write to standard output: %s\n", p->name, why);
        return fail_status;
    }
    return 0;
}

bool pn_cli_long(const char *prog, const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "%s: error: %s: '", prog, opt);
        pn_fput_safe(stderr, v);
        fprintf(stderr, "' is not an integer in [%ld, %ld]\n", lo, hi);
        return false;
    }
    *out = x;
    return true;
}

bool pn_cli_threads(const char *prog, const char *v, int *threads)
{
    long n;
    if (!pn_cli_long(prog, "--threads", v, 1, 4096, &n))
        return false;
    *threads = (int)n;
    return true;
}

int pn_cli_usable_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void pn_cli_cap_threads(const char *prog, const char *opt, int *threads, bool quiet)
{
    int cpus = pn_cli_usable_cpus();
    if (*threads <= cpus)
        return;
    if (!quiet)
        fprintf(stderr, "%s: %s %d: this process may use %d CPU%s; using %d\n", prog, opt, *threads,
                cpus, cpus == 1 ? "" : "s", cpus);
    *threads = cpus;
}

double pn_cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pn_cli_meter_init(pn_cli_meter *m)
{
    *m = (pn_cli_meter){
        .on = true, .tty = isatty(2) != 0, .drawn = false, .last = -1e9, .start = pn_cli_now()
    };
}

void pn_cli_meter_open(pn_cli_meter *m, bool quiet, bool forced)
{
    pn_cli_meter_init(m);
    m->on = !quiet && (m->tty || forced);
}

bool pn_cli_meter_due(pn_cli_meter *m, double elapsed, bool always)
{
    double every = m->tty ? 0.25 : 5.0;
    if (!always && elapsed - m->last < every)
        return false;
    m->last = elapsed;
    return true;
}

void pn_cli_meter_line(pn_cli_meter *m, const char *phase, const char *item, size_t index, size_t n,
                       const char *name, double done, double total, double elapsed,
                       const char *unit)
{
    double rate = elapsed > 0 ? done / elapsed : 0;
    char pct[16] = "    ?", eta[32] = "?";
    if (total > 0)
        snprintf(pct, sizeof pct, "%5.1f", 100.0 * done / total);
    if (total > 0 && done >= total)
        snprintf(eta, sizeof eta, "0s");
    else if (total > 0 && rate > 0)
        snprintf(eta, sizeof eta, "%.0fs", (total - done) / rate);
    fputs(m->tty ? "\r" : "", stderr);
    fputs(phase, stderr);
    if (item)
        fprintf(stderr, " %s %zu/%zu", item, index, n);
    if (name) {
        /* the end of a long name tells most (a file's name, a tensor's
         * block and kind): "..." and its last bytes, whole characters */
        char safe[1024];
        const char *at = pn_safe_text(name, safe, sizeof safe);
        size_t len = strlen(at);
        if (len > 36) {
            at += len - 33;
            while ((*at & 0xC0) == 0x80)
                at++;
        }
        fprintf(stderr, " %s%-*s", len > 36 ? "..." : "", len > 36 ? 33 : 36, at);
    }
    fprintf(stderr, " %s%%  %.3g %s/s  ETA %s%s", pct, rate, unit, eta, m->tty ? "\033[K" : "\n");
    fflush(stderr);
    m->drawn = m->tty;
}

void pn_cli_meter_show(pn_cli_meter *m, const char *phase, const char *item, size_t index, size_t n,
                       const char *name, double done, double total, const char *unit)
{
    if (!m->on)
        return;
    double elapsed = pn_cli_now() - m->start;
    if (pn_cli_meter_due(m, elapsed, total > 0 && done >= total))
        pn_cli_meter_line(m, phase, item, index, n, name, done, total, elapsed, unit);
}

void pn_cli_meter_restart(pn_cli_meter *m)
{
    m->start = pn_cli_now();
    m->last = -1e9;
}

void pn_cli_meter_end(pn_cli_meter *m)
{
    if (m->drawn)
        fputs("\r\033[K", stderr);
    m->drawn = false;
}

/* A unit of a size written apart from its number: B, K, M, G, T, with or
 * without i and B, any case (GB, GiB, gb, M). */
static bool is_unit_word(const char *w)
{
    if (!*w || !strchr("bBkKmMgGtT", w[0]))
        return false;
    if ((w[0] == 'b' || w[0] == 'B') && !w[1])
        return true;
    const char *r = w + 1;
    if (*r == 'i')
        r++;
    if (*r == 'b' || *r == 'B')
        r++;
    return *r == '\0';
}

/* The edit distance of a and b (at most 63 bytes each; longer: far). */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb)
{
    if (na > 63 || nb > 63)
        return 64;
    size_t row[64];
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

/* "--name" or "--name=value" that getopt_long refused: the options whose
 * name starts with it (an ambiguous prefix: every one listed), or else the
 * nearest by edit distance, as a suggestion. */
static void refuse_long(const pn_cli_program *p, const char *arg)
{
    const char *name = arg + 2;
    size_t n = strcspn(name, "=");
    size_t matches = 0;
    for (const pn_cli_option *o = p->options; o->name; o++)
        matches += strncmp(o->name, name, n) == 0;
    if (matches > 1 && n > 0) {
        fprintf(stderr, "%s: error: option '--%.*s' is ambiguous; it is the start of", p->name,
                (int)n, name);
        for (const pn_cli_option *o = p->options; o->name; o++)
            if (strncmp(o->name, name, n) == 0)
                fprintf(stderr, " --%s", o->name);
        fputc('\n', stderr);
        return;
    }
    const pn_cli_option *best = NULL;
    size_t best_d = SIZE_MAX;
    for (const pn_cli_option *o = p->options; o->name; o++) {
        size_t d = edit_distance(name, n, o->name, strlen(o->name));
        if (d < best_d) {
            best_d = d;
            best = o;
        }
    }
    fprintf(stderr, "%s: error: unknown option '", p->name);
    pn_fput_safe(stderr, arg);
    fputc('\'', stderr);
    /* a slip of a letter or two, not another word */
    if (best && best_d <= (n >= 6 ? 2 : 1))
        fprintf(stderr, "; did you mean '--%s'?", best->name);
    fputc('\n', stderr);
}

int pn_cli_refuse_option(const pn_cli_program *p, char **argv)
{
    /* optopt is the short option's letter, 0 for an unknown or ambiguous
     * long one, or an id (256 and up, or 'h') for a known one whose value
     * is missing or was not expected */
    const char *arg = argv[optind - 1];
    const pn_cli_option *known = NULL;
    for (const pn_cli_option *o = p->options; o->name && optopt; o++)
        if (o->id == optopt)
            known = o;
    if (known && strncmp(arg, "--", 2) == 0) {
        fprintf(stderr, "%s: error: option '--%s' %s\n", p->name, known->name,
                known->has_arg == required_argument ? "needs a value" : "takes no value");
    } else if (strncmp(arg, "--", 2) == 0) {
        refuse_long(p, arg);
    } else {
        fprintf(stderr, "%s: error: unknown option '-%c'\n", p->name, optopt ? optopt : '?');
    }
    return pn_cli_try_help(p->name);
}

bool pn_cli_stray_size_unit(const char *prog, int argc, char **argv)
{
    static const char *const opts[] = { "--target-size", "--split-max-size", "--shard-size" };
    for (int i = 1; i + 2 < argc + 1 && i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        for (size_t k = 0; k < sizeof opts / sizeof *opts; k++) {
            size_t l = strlen(opts[k]);
            bool joined = strncmp(argv[i], opts[k], l) == 0 && argv[i][l] == '=';
            if (!joined && strcmp(argv[i], opts[k]) != 0)
                continue;
            const char *value = joined ? argv[i] + l + 1 : i + 1 < argc ? argv[i + 1] : NULL;
            const char *next =
                joined ? (i + 1 < argc ? argv[i + 1] : NULL) : (i + 2 < argc ? argv[i + 2] : NULL);
            if (!value || !next || !is_unit_word(next) || !*value ||
                !strchr("0123456789.", value[strlen(value) - 1]))
                continue;
            fprintf(stderr, "%s: error: %s ", prog, opts[k]);
            pn_fput_safe(stderr, value);
            fputs(" '", stderr);
            pn_fput_safe(stderr, next);
            fprintf(stderr, "': a size is one word, its unit joined to the number (%s ", opts[k]);
            pn_fput_safe(stderr, value);
            pn_fput_safe(stderr, next);
            fputs("); the stray '", stderr);
            pn_fput_safe(stderr, next);
            fputs("' would be read as another argument\n", stderr);
            pn_cli_try_help(prog);
            return true;
        }
    }
    return false;
}

int pn_cli_try_help(const char *prog)
{
    fprintf(stderr, "Try '%s --help'.\n", prog);
    return 2;
}

bool pn_cli_positional(const char *prog, int argc, char **argv, int min, int max, const char *names)
{
    const int n = argc - optind;
    if (n >= min && (max < 0 || n <= max))
        return true;
    fprintf(stderr, "%s: error: expected %s: ", prog, names);
    if (n < min) {
        /* the first word of names not given */
        const char *w = names;
        for (int i = 0; i < n && w; i++) {
            w = strchr(w, ' ');
            if (w)
                w++;
        }
        size_t len = w ? strcspn(w, " ") : 0;
        if (n == 0)
            fputs("no arguments were given\n", stderr);
        else
            fprintf(stderr, "%.*s is missing\n", (int)len, w ? w : "an argument");
    } else {
        fputc('\'', stderr);
        pn_fput_safe(stderr, argv[optind + max]);
        fprintf(stderr, "' is %s too many (options start with --)\n",
                n - max == 1 ? "one argument" : "the first of the arguments");
    }
    pn_cli_try_help(prog);
    return false;
}

/* <dir of the program>/../share/pn-quantize/recipes into buf; false when
 * /proc/self/exe cannot be read. */
static bool shipped_recipes_dir(char *buf, size_t size)
{
    char *dir = pn_cli_exe_path("/../share/pn-quantize/recipes", "");
    int k = dir ? snprintf(buf, size, "%s", dir) : -1;
    free(dir);
    return k > 0 && (size_t)k < size;
}

const char *pn_cli_recipe_path(const char *prog, const char *arg, char *buf, size_t size)
{
    struct stat sb;
    size_t n = strlen(arg);
    if (stat(arg, &sb) == 0 || strchr(arg, '/') || (n > 4 && strcmp(arg + n - 4, ".mix") == 0))
        return arg; /* a file: opened (and refused, naming it) by the job */
    char dir[PATH_MAX] = "";
    if (shipped_recipes_dir(dir, sizeof dir)) {
        int k = snprintf(buf, size, "%s/%s.mix", dir, arg);
        if (k > 0 && (size_t)k < size && stat(buf, &sb) == 0 && S_ISREG(sb.st_mode))
            return buf;
    }
    fprintf(stderr, "%s: error: --recipe ", prog);
    pn_fput_safe(stderr, arg);
    fputs(": no such file, nor a shipped recipe of that name; shipped:", stderr);
    DIR *d = dir[0] ? opendir(dir) : NULL;
    int listed = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".mix") == 0) {
            fprintf(stderr, " %.*s", (int)(l - 4), e->d_name);
            listed++;
        }
    }
    if (d)
        closedir(d);
    fputs(listed ? "\n" : " none found beside this program\n", stderr);
    return NULL;
}

int pn_cli_close_stdout(const char *prog)
{
    if (ferror(stdout) | (fclose(stdout) != 0)) {
        fprintf(stderr, "%s: error: writing to standard output: %s\n", prog, strerror(errno));
        return 1;
    }
    return 0;
}

char *pn_cli_exe_path(const char *rel, const char *name)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = 0;
    const char *dir = dirname(exe);
    size_t len = strlen(dir) + strlen(rel) + strlen(name) + 1;
    char *s = malloc(len);
    if (s)
        snprintf(s, len, "%s%s%s", dir, rel, name);
    return s;
}

char *pn_cli_llama_script(void)
{
    return pn_cli_exe_path("/../share/pn-quantize/llama/", "pn-llama-logits.mjs");
}

/* The number of the signal that asked the run to stop (pn_cli_trap_signals). */
static volatile sig_atomic_t g_signal_caught = 0;

static void on_stop_signal(int sig)
{
    g_signal_caught = sig; /* non-zero: the run stops; the exit status names it */
}

void pn_cli_ignore_write_signals(void)
{
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
}

volatile sig_atomic_t *pn_cli_trap_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal; /* no SA_RESTART (see cli.h) */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    pn_cli_ignore_write_signals();
    return &g_signal_caught;
}
