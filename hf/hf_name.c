/* hf_name.c - the model's name (general.name) from its folder's path, the
 * same however the path is typed: X, X/, ./X/, /abs/X and a hub-cache
 * snapshot of the repository X give one name, so the header hash of the
 * source identity (io/source_id.h) is one too (docs/hf.md#the-models-name). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"

/* Copies [s, s + n) into out (NUL-ended); false when it does not fit. */
static bool put(const char *s, size_t n, char *out, size_t out_len)
{
    if (n + 1 > out_len)
        return false;
    memcpy(out, s, n);
    out[n] = 0;
    return true;
}

/* The last component of path, read lexically: trailing slashes and "."
 * components skipped. Sets *at and *n; false when that component is
 * empty, "." or ".." (the path must be resolved to know the name). */
static bool lexical_base(const char *path, const char **at, size_t *n)
{
    size_t end = strlen(path);
    for (;;) {
        while (end > 0 && path[end - 1] == '/')
            end--;
        size_t start = end;
        while (start > 0 && path[start - 1] != '/')
            start--;
        if (end - start == 1 && path[start] == '.' && start > 0) {
            end = start; /* "X/." is X */
            continue;
        }
        *at = path + start;
        *n = end - start;
        return !(*n == 0 || (*n == 1 && path[start] == '.') ||
                 (*n == 2 && path[start] == '.' && path[start + 1] == '.'));
    }
}

/* The repository's name when the resolved folder is a hub-cache snapshot,
 * ".../models--ORG--NAME/snapshots/REVISION" (the hub writes a repository
 * id ORG/NAME as models--ORG--NAME; "--" is not allowed inside a name). */
static bool hub_repo_name(const char *real, const char **at, size_t *n)
{
    const char *rev = strrchr(real, '/');
    if (!rev || rev == real)
        return false;
    const char *snap = rev;
    while (snap > real && snap[-1] != '/')
        snap--;
    if ((size_t)(rev - snap) != 9 || memcmp(snap, "snapshots", 9) != 0 || snap == real)
        return false;
    const char *repo_end = snap - 1, *repo = repo_end;
    while (repo > real && repo[-1] != '/')
        repo--;
    if (repo_end - repo <= 8 || memcmp(repo, "models--", 8) != 0)
        return false;
    const char *name = repo + 8;
    for (const char *p = name; p + 1 < repo_end; p++)
        if (p[0] == '-' && p[1] == '-')
            name = p + 2;
    if (name >= repo_end)
        return false;
    *at = name;
    *n = (size_t)(repo_end - name);
    return true;
}

pn_status pn_hf_model_name(const char *dir, char *out, size_t out_len, pn_error *err)
{
    const char *at;
    size_t n;
    char *real = realpath(dir, NULL);
    bool ok;
    if (real && hub_repo_name(real, &at, &n))
        ok = put(at, n, out, out_len);
    else if (lexical_base(dir, &at, &n))
        ok = put(at, n, out, out_len);
    else if (real && lexical_base(real, &at, &n))
        ok = put(at, n, out, out_len);
    else
        ok = put("", 0, out, out_len); /* the root folder, or one that cannot be resolved */
    free(real);
    if (!ok)
        return pn_error_set(err, PN_ERR_FORMAT, "%s: the folder's name is longer than %zu bytes",
                            dir, out_len - 1);
    return PN_OK;
}
