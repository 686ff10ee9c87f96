/* `cmake --install` of this build: every program of cmd/ lands in bin/ (and
 * nothing else does), the recipes in share/pn-quantize/recipes, the README,
 * docs/ and recipes/README.md in share/doc/pn-quantize laid out as in the
 * checkout, every relative link of those pages leading to an installed file; each
 * installed program answers --version with "<program> <version>" on stdout,
 * nothing on stderr and exit 0; and the installed pn-quantize records that
 * same line in pn.quantizer; the quick start's target builds every program
 * the install installs, and the installed pn-compare names the command that
 * installs its llama.cpp in that prefix. Each test installs into its own
 * temporary prefix and removes it. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "test_util.h"

#define MAX_NAMES 64

static char *g_prefix;

/* The prefix's path joined with rel. Caller frees. */
static char *under_prefix(const char *rel)
{
    size_t n = strlen(g_prefix) + strlen(rel) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", g_prefix, rel);
    return p;
}

static void install_into_prefix(void)
{
    g_prefix = tu_mkdtemp();
    /* cmake --install rewrites install_manifest.txt in the build folder:
     * tests that run at the same time take turns. */
    int lock = open(PN_BUILD_DIR, O_RDONLY | O_DIRECTORY);
    cr_assert(lock >= 0, "cannot open the build folder %s", PN_BUILD_DIR);
    cr_assert_eq(flock(lock, LOCK_EX), 0);
    char cmd[4096], *out, *err;
    snprintf(cmd, sizeof cmd, "'%s' --install '%s' --prefix '%s'", PN_CMAKE_COMMAND, PN_BUILD_DIR,
             g_prefix);
    int rc = tu_run(cmd, &out, &err);
    flock(lock, LOCK_UN);
    close(lock);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s%s", cmd, rc, out, err);
    free(out);
    free(err);
}

static void remove_prefix(void)
{
    tu_rm_rf(g_prefix);
    free(g_prefix);
}

/* The names in dir ending in suffix (with the suffix removed when strip),
 * sorted; returns how many. */
static int names_in(const char *dir, const char *suffix, bool strip, char *names[MAX_NAMES])
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot list %s", dir);
    int n = 0;
    struct dirent *e;
    size_t ls = strlen(suffix);
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || l < ls || strcmp(e->d_name + l - ls, suffix) != 0)
            continue;
        cr_assert_lt(n, MAX_NAMES);
        names[n++] = strip ? strndup(e->d_name, l - ls) : strdup(e->d_name);
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    return n;
}

static bool listed(char *names[], int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

static void free_names(char *names[], int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
}

/* The programs the build makes: one per cmd/pn-<name>.c (cmd/cli.c is what
 * they share, no program). */
static int programs(char *names[MAX_NAMES])
{
    int n = names_in(PN_SOURCE_DIR "/cmd", ".c", true, names);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(names[i], "pn-", 3) == 0)
            names[kept++] = names[i];
        else
            free(names[i]);
    n = kept;
    const char *four[] = { "pn-quantize", "pn-check", "pn-dequant", "pn-synth" };
    for (size_t i = 0; i < sizeof four / sizeof four[0]; i++)
        cr_assert(listed(names, n, four[i]), "cmd/%s.c is missing", four[i]);
    return n;
}

/* The file at installed has the bytes of the file at source. */
static void assert_installed_copy(const char *source, const char *installed)
{
    struct stat sb;
    cr_assert(stat(installed, &sb) == 0 && S_ISREG(sb.st_mode), "%s was not installed", installed);
    size_t na, nb;
    void *a = tu_read_file(source, &na), *b = tu_read_file(installed, &nb);
    cr_assert(na == nb && memcmp(a, b, na) == 0, "%s differs from %s", installed, source);
    free(a);
    free(b);
}

/* Every file of source_dir ending in suffix is in installed_dir; returns how
 * many there were. */
static int assert_folder_installed(const char *source_dir, const char *suffix,
                                   const char *installed_dir)
{
    char *names[MAX_NAMES];
    int n = names_in(source_dir, suffix, false, names);
    for (int i = 0; i < n; i++) {
        char src[4096], dst[4096];
        snprintf(src, sizeof src, "%s/%s", source_dir, names[i]);
        snprintf(dst, sizeof dst, "%s/%s", installed_dir, names[i]);
        assert_installed_copy(src, dst);
    }
    free_names(names, n);
    return n;
}

Test(install, puts_every_program_in_bin_and_nothing_else, .init = install_into_prefix,
     .fini = remove_prefix)
{
    char *progs[MAX_NAMES];
    int n = programs(progs);
    char *bin = under_prefix("bin");
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", bin, progs[i]);
        struct stat sb;
        cr_assert(stat(path, &sb) == 0 && S_ISREG(sb.st_mode), "%s was not installed", path);
        cr_assert_eq(access(path, X_OK), 0, "%s is not executable", path);
    }
    char *there[MAX_NAMES];
    int m = names_in(bin, "", false, there);
    for (int i = 0; i < m; i++)
        cr_assert(listed(progs, n, there[i]),
                  "%s/%s is not a program of cmd/ (benchmarks and "
                  "tests are not installed)",
                  bin, there[i]);
    cr_assert_eq(m, n);
    free_names(there, m);
    free_names(progs, n);
    free(bin);
}

Test(install, puts_the_recipes_and_the_pages_under_share, .init = install_into_prefix,
     .fini = remove_prefix)
{
    char *recipes = under_prefix("share/pn-quantize/recipes");
    cr_assert_geq(assert_folder_installed(PN_SOURCE_DIR "/recipes", ".mix", recipes), 2);
    char *recipe = under_prefix("share/pn-quantize/recipes/qwen3.8-27b-pn3.mix");
    assert_installed_copy(PN_SOURCE_DIR "/recipes/qwen3.8-27b-pn3.mix", recipe);

    char *docs = under_prefix("share/doc/pn-quantize/docs");
    cr_assert_geq(assert_folder_installed(PN_SOURCE_DIR "/docs", ".md", docs), 10);
    cr_assert_geq(assert_folder_installed(PN_SOURCE_DIR "/docs", ".svg", docs), 1);
    char *format = under_prefix("share/doc/pn-quantize/docs/format.md");
    assert_installed_copy(PN_SOURCE_DIR "/docs/format.md", format);
    char *readme = under_prefix("share/doc/pn-quantize/README.md");
    assert_installed_copy(PN_SOURCE_DIR "/README.md", readme);
    char *recipes_readme = under_prefix("share/doc/pn-quantize/recipes/README.md");
    assert_installed_copy(PN_SOURCE_DIR "/recipes/README.md", recipes_readme);

    char *top[MAX_NAMES];
    int m = names_in(g_prefix, "", false, top);
    cr_assert(m == 3 && strcmp(top[0], "bin") == 0 && strcmp(top[1], "libexec") == 0 &&
                  strcmp(top[2], "share") == 0,
              "the prefix holds more than bin/, libexec/ and share/");
    /* pn-compare --sweep's stock quantizer, beside no user's PATH */
    char *helper = under_prefix("libexec/pn-quantize/pn-llama-quantize");
    cr_assert(access(helper, X_OK) == 0, "%s is not installed", helper);
    free(helper);
    free_names(top, m);
    free(recipes);
    free(recipe);
    free(docs);
    free(format);
    free(readme);
    free(recipes_readme);
}

/* The relative links of the page at path, `[text](TARGET)` with TARGET
 * holding no blank or parenthesis, no scheme (https:, mailto:) and its
 * #anchor cut, each checked to name a file relative to the page's folder;
 * returns how many there were. */
static int assert_links_resolve(const char *path)
{
    size_t len;
    char *text = tu_read_file(path, &len);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    int n = 0;
    for (const char *p = text; (p = strstr(p, "](")) != NULL;) {
        p += 2;
        size_t l = strcspn(p, ")( \n");
        if (p[l] != ')')
            continue;
        size_t t = strcspn(p, "#");
        if (t > l)
            t = l;
        size_t scheme = strspn(p, "abcdefghijklmnopqrstuvwxyz");
        if (t == 0 || (scheme < t && p[scheme] == ':'))
            continue;
        char link[1024], target[sizeof dir + sizeof link];
        cr_assert_lt(t, sizeof link, "%s: a link of %zu characters", path, t);
        memcpy(link, p, t);
        link[t] = '\0';
        snprintf(target, sizeof target, "%s/%s", dir, link);
        struct stat sb;
        cr_expect(stat(target, &sb) == 0, "%s: the link to %s leads to no installed file", path,
                  link);
        n++;
    }
    free(text);
    return n;
}

/* Every *.md under dir (and its folders), each page's links checked;
 * returns the links, *pages the pages. */
static int assert_tree_links_resolve(const char *dir, int *pages)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot list %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        cr_assert_eq(stat(path, &sb), 0, "%s", path);
        size_t l = strlen(e->d_name);
        if (S_ISDIR(sb.st_mode)) {
            n += assert_tree_links_resolve(path, pages);
        } else if (l > 3 && strcmp(e->d_name + l - 3, ".md") == 0) {
            n += assert_links_resolve(path);
            (*pages)++;
        }
    }
    closedir(d);
    return n;
}

Test(install, every_relative_link_of_the_installed_pages_leads_to_an_installed_file,
     .init = install_into_prefix, .fini = remove_prefix)
{
    char *doc = under_prefix("share/doc/pn-quantize");
    int pages = 0;
    int links = assert_tree_links_resolve(doc, &pages);
    char *names[MAX_NAMES];
    const int n_docs = names_in(PN_SOURCE_DIR "/docs", ".md", false, names);
    free_names(names, n_docs);
    /* the README, docs/, recipes/README.md, the golden files' SOURCE.md */
    cr_assert_eq(pages, n_docs + 3, "%d pages installed under %s, %d expected", pages, doc,
                 n_docs + 3);
    cr_assert_gt(links, 50, "only %d links found in the installed pages", links);
    free(doc);
}

Test(install, every_installed_program_prints_its_name_and_version, .init = install_into_prefix,
     .fini = remove_prefix)
{
    cr_assert_gt(strlen(PN_VERSION), 0);
    char *progs[MAX_NAMES];
    int n = programs(progs);
    for (int i = 0; i < n; i++) {
        char cmd[4096], want[256], *out, *err;
        snprintf(cmd, sizeof cmd, "'%s/bin/%s' --version", g_prefix, progs[i]);
        snprintf(want, sizeof want, "%s %s\n", progs[i], PN_VERSION);
        int rc = tu_run(cmd, &out, &err);
        /* expect, not assert: one report names every program that fails */
        cr_expect_eq(rc, 0, "%s: exit %d", cmd, rc);
        cr_expect_str_eq(out, want, "%s printed \"%s\"", cmd, out);
        cr_expect_str_empty(err, "%s wrote to stderr: %s", cmd, err);
        free(out);
        free(err);
    }
    free_names(progs, n);
}

Test(install, the_installed_pn_quantize_records_its_version_line_in_pn_quantizer,
     .init = install_into_prefix, .fini = remove_prefix)
{
    char cmd[8192], *out, *err;
    snprintf(cmd, sizeof cmd, "'%s/bin/pn-quantize' --version", g_prefix);
    cr_assert_eq(tu_run(cmd, &out, &err), 0, "%s: %s", cmd, err);
    size_t len = strlen(out);
    cr_assert(len > 1 && out[len - 1] == '\n', "%s printed \"%s\"", cmd, out);
    out[len - 1] = '\0';
    cr_assert_str_eq(out, "pn-quantize " PN_VERSION);
    free(err);

    char *dst = under_prefix("tiny.pn.gguf");
    char *qout, *qerr;
    /* a model stock llama.cpp loads (pn-check --strict judges that too):
     * the installed pn-synth's */
    char *src = under_prefix("tiny.gguf");
    snprintf(cmd, sizeof cmd,
             "'%s/bin/pn-synth' --quiet --layers 2 --width-scale 16 --vocab 300 --threads 2 '%s'",
             g_prefix, src);
    int rc = tu_run(cmd, &qout, &qerr);
    cr_assert_eq(rc, 0, "%s: exit %d: %s", cmd, rc, qerr);
    free(qout);
    free(qerr);
    snprintf(cmd, sizeof cmd,
             "'%s/bin/pn-quantize' --quiet --backend cpu --promote 0 "
             "--recipe '%s/share/pn-quantize/recipes/test-fallback.mix' '%s' '%s'",
             g_prefix, g_prefix, src, dst);
    rc = tu_run(cmd, &qout, &qerr);
    cr_assert_eq(rc, 0, "%s: exit %d: %s", cmd, rc, qerr);
    cr_assert_str_empty(qout);
    cr_assert_str_empty(qerr);
    free(qout);
    free(qerr);
    /* the same recipe by name: the installed share folder beside bin/ */
    char *by_name = under_prefix("by-name.pn.gguf");
    snprintf(cmd, sizeof cmd,
             "'%s/bin/pn-quantize' --quiet --backend cpu --promote 0 --recipe test-fallback "
             "'%s' '%s' && cmp '%s' '%s' && '%s/bin/pn-check' --strict --recipe test-fallback '%s'",
             g_prefix, src, by_name, by_name, dst, g_prefix, by_name);
    rc = tu_run(cmd, &qout, &qerr);
    cr_assert_eq(rc, 0, "--recipe NAME from the installed prefix: %s: exit %d: %s%s", cmd, rc, qout,
                 qerr);
    free(by_name);
    free(src);

    gguf_reader *r;
    pn_error e;
    cr_assert_eq(gguf_reader_open(dst, &r, &e), PN_OK, "%s", e.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, "pn.quantizer");
    cr_assert_not_null(kv, "%s has no pn.quantizer", dst);
    cr_assert_eq(kv->type, GGUF_TYPE_STRING);
    cr_assert(kv->v.str.len == strlen(out) && memcmp(kv->v.str.data, out, kv->v.str.len) == 0,
              "pn.quantizer is \"%.*s\", --version printed \"%s\"", (int)kv->v.str.len,
              kv->v.str.data, out);
    gguf_reader_close(r);
    free(out);
    free(qout);
    free(qerr);
    free(dst);
}

/* The quick start (scripts/demo) builds one target; cmake --install then
 * installs every program of bin/ and libexec/pn-quantize/, so that target
 * must build each of them: a fresh configure of the checkout, asked what
 * that target would build (make -n -k: nothing is compiled), names each
 * installed program's objects. */
Test(install, the_quick_starts_target_builds_every_program_the_install_installs,
     .init = install_into_prefix, .fini = remove_prefix, .timeout = 240)
{
    char cmd[8192], *out, *err;
    snprintf(cmd, sizeof cmd,
             "grep -o -- '--target [A-Za-z_-]*' '%s/scripts/demo' | head -1 | cut -d' ' -f2",
             PN_SOURCE_DIR);
    cr_assert_eq(tu_run(cmd, &out, &err), 0);
    char target[128];
    cr_assert_eq(sscanf(out, "%127s", target), 1, "scripts/demo names no --target: %s", out);
    free(out);
    free(err);
    char *fresh = under_prefix("fresh-build");
    snprintf(cmd, sizeof cmd,
             "'%s' -G 'Unix Makefiles' -DPN_TESTS=OFF -S '%s' -B '%s' > /dev/null && "
             "'%s' --build '%s' --target %s -- -n -k 2>&1",
             PN_CMAKE_COMMAND, PN_SOURCE_DIR, fresh, PN_CMAKE_COMMAND, fresh, target);
    tu_run(cmd, &out, &err); /* make -n stops at the libraries it did not make: -k goes on */
    const char *dirs[] = { "bin", "libexec/pn-quantize" };
    int n_progs = 0;
    for (int d = 0; d < 2; d++) {
        char *dir = under_prefix(dirs[d]), *names[MAX_NAMES];
        int n = names_in(dir, "", false, names);
        for (int i = 0; i < n; i++) {
            char needle[256];
            snprintf(needle, sizeof needle, "CMakeFiles/%s.dir/", names[i]);
            cr_expect(strstr(out, needle), "scripts/demo's --target %s does not build %s/%s",
                      target, dirs[d], names[i]);
            n_progs++;
        }
        free_names(names, n);
        free(dir);
    }
    cr_assert_geq(n_progs, 7, "the programs and pn-llama-quantize");
    free(out);
    free(err);
    free(fresh);
}

/* The installed pn-compare, before its llama.cpp is installed, names the
 * command that installs it for this prefix (not the checkout's
 * scripts/install-deps); once that command has run (here: its result, the
 * checkout's node_modules, put where it puts them) it compares. */
Test(install, the_installed_pn_compare_names_the_command_that_installs_its_llama_cpp,
     .init = install_into_prefix, .fini = remove_prefix, .timeout = 240)
{
    char cmd[8192], *out, *err;
    snprintf(cmd, sizeof cmd,
             "cd '%s' && bin/pn-synth --quiet --layers 2 --width-scale 16 --vocab 300 src.gguf && "
             "bin/pn-quantize --quiet --recipe test-fallback src.gguf pn.gguf && "
             "bin/pn-compare src.gguf pn.gguf",
             g_prefix);
    int rc = tu_run(cmd, &out, &err);
    char want[4096];
    snprintf(want, sizeof want,
             "run 'cd %s/share/pn-quantize/llama && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci "
             "--ignore-scripts --omit=optional'",
             g_prefix);
    cr_assert_eq(rc, 1, "%s: exit %d\n%s%s", cmd, rc, out, err);
    cr_assert(strstr(err, want), "the command for this prefix, '%s', in:\n%s", want, err);
    cr_assert_str_empty(out);
    free(out);
    free(err);
    /* the docs give that command (README.md, docs/usage.md) */
    snprintf(cmd, sizeof cmd,
             "grep -c 'cd PREFIX/share/pn-quantize/llama && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true' "
             "'%s/share/doc/pn-quantize/docs/usage.md'",
             g_prefix);
    cr_assert_eq(tu_run(cmd, &out, &err), 0, "docs/usage.md gives no command for a prefix");
    free(out);
    free(err);
    const char *modules = PN_SOURCE_DIR "/tools/llama/node_modules";
    TU_REQUIRE_LLAMA(PN_SOURCE_DIR "/tools/llama/pn-llama-logits.mjs", NULL);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ln -s '%s' share/pn-quantize/llama/node_modules && "
             "bin/pn-compare src.gguf pn.gguf",
             g_prefix, modules);
    rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s%s", cmd, rc, out, err);
    cr_assert(strstr(out, "P0k-fallback+") && strstr(out, "pn.gguf"), "%s", out);
    free(out);
    free(err);
}
