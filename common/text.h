/* text.h - printing names, keys and messages that come from files.
 *
 * A tensor name or key is whatever bytes a file holds: invalid UTF-8, ESC
 * sequences that retitle or clear a terminal, newlines that forge report
 * lines. Everything the programs echo from a file goes through one of these.
 *
 * Terminal form (pn_fput_safe, pn_safe_text): printable ASCII and valid UTF-8
 * characters of U+00A0 and above are kept; every other byte (C0 controls,
 * DEL, the UTF-8 encodings of the C1 controls U+0080..U+009F, and bytes that
 * are not valid UTF-8) is shown as the four characters \xNN.
 *
 * JSON form (pn_json_put_str): a JSON string literal, quotes included, that
 * is always valid JSON and valid Unicode: '"' and '\' are escaped, control
 * characters (U+0000..U+001F, U+007F..U+009F) become \u00NN, valid UTF-8 is
 * kept, and a byte that is not valid UTF-8 becomes the text \xNN (written
 * "\\xNN"), the same rendering as the terminal form.
 *
 * No state, no allocation; stdio errors are left to the caller's ferror.
 * Here too: the line reader of the text files the programs keep.
 */
#ifndef PN_COMMON_TEXT_H
#define PN_COMMON_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Writes s (NUL-terminated) in the terminal form. */
void pn_fput_safe(FILE *f, const char *s);
/* The terminal form of s into buf (always NUL-terminated; cut with "..."
 * when it does not fit). Returns buf. */
char *pn_safe_text(const char *s, char *buf, size_t cap);
/* Writes the JSON string literal of s (NUL-terminated). */
void pn_json_put_str(FILE *f, const char *s);
/* The same for n bytes that may hold NUL. */
void pn_json_put_strn(FILE *f, const char *s, size_t n);

/* Length of the valid UTF-8 character at s (at most n bytes): 1..4, or 0
 * when s does not start a valid, shortest-form UTF-8 character (a
 * surrogate or a code point above U+10FFFF is invalid too). *cp receives
 * the code point. */
size_t pn_utf8_char(const unsigned char *s, size_t n, unsigned *cp);

/* The text files the programs keep (measurements), read line by line in
 * place: buf holds len bytes, pos and line start at 0. */
typedef struct pn_line_reader {
    char *buf;
    size_t len, pos;
    int line; /* the number of the line last returned (1 for the first) */
} pn_line_reader;
/* The next line, NUL-terminated in place where its '\n' was; NULL after
 * the last. A text that ends in '\n' has no empty line after it. */
char *pn_next_line(pn_line_reader *lr);
/* s split at tabs in place into f[0..]: the number of fields, or max + 1
 * when there are more than max (f then holds the first max). */
int pn_split_tabs(char *s, char **f, int max);
/* A field of such a file read as a real number (strtod's syntax) into *v:
 * false, *v untouched, for an empty field, one that starts with a space or
 * tab, has anything after the number, or is not finite. */
bool pn_field_real(const char *s, double *v);

#endif
