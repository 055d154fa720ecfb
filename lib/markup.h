/* markup.h - the spans of a text that re-posting adds without adding words:
 * URLs, markdown images and link targets. The fingerprint (fingerprint.md,
 * "skipped spans") and the sketch (sketch.md) skip exactly these, so both
 * read a text the same way; this header is the one definition of the rule.
 *
 * Header-only (static inline): called on the tokenizers' hot paths, at the
 * few bytes where markup can start. Pure: no state, no allocation. */
#ifndef ND_MARKUP_H
#define ND_MARKUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True if s[0, len) starts with the lowercase ASCII literal lit, ASCII
 * case-insensitively. */
static inline bool nd_markup_prefix_ci(const uint8_t *s, size_t len, const char *lit)
{
    size_t i = 0;
    for (; lit[i]; i++) {
        if (i >= len)
            return false;
        uint8_t c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (uint8_t)(c + 32);
        if (c != (uint8_t)lit[i])
            return false;
    }
    return true;
}

/* Bytes that end a URL: ASCII space and controls, quotes, angle brackets,
 * parentheses, square and curly brackets, backquote, and any non-ASCII byte
 * (text in another script usually follows a URL directly). */
static inline bool nd_markup_ends_url(uint8_t c)
{
    return c <= ' ' || c >= 0x80 || c == '"' || c == '\'' || c == '<' || c == '>' || c == '(' ||
           c == ')' || c == '[' || c == ']' || c == '{' || c == '}' || c == '`';
}

/* Returns the index just past the first byte c in s[i, min(len, i + max)),
 * or 0 if a newline or the limit comes first. */
static inline size_t nd_markup_find_on_line(const uint8_t *s, size_t len, size_t i, size_t max,
                                            uint8_t c)
{
    size_t end = len - i > max ? i + max : len;
    for (size_t j = i; j < end && s[j] != '\n'; j++)
        if (s[j] == c)
            return j + 1;
    return 0;
}

/* Markup that re-posting adds without adding words: a markdown image
 * "![alt](target)" (the alt text is mostly "image" or "图片"), and the
 * target of a markdown link "](target)". Returns the length to skip at
 * s[i], or 0. */
static inline size_t nd_markup_link_length(const uint8_t *s, size_t len, size_t i)
{
    size_t j;
    if (s[i] == '!' && i + 1 < len && s[i + 1] == '[') {
        j = nd_markup_find_on_line(s, len, i + 2, 512, ']');
        if (j && j < len && s[j] == '(' && (j = nd_markup_find_on_line(s, len, j + 1, 4096, ')')))
            return j - i;
        return 0;
    }
    if (s[i] == ']' && i + 1 < len && s[i + 1] == '(') {
        j = nd_markup_find_on_line(s, len, i + 2, 4096, ')');
        return j ? j - i : 0;
    }
    return 0;
}

/* Length of the URL or link markup starting at s[i] (i < len), or 0. A URL
 * starts with http://, https://, ftp:// or www. (ASCII case-insensitive)
 * where a word may start (at_word_start), and runs to the first byte for
 * which nd_markup_ends_url() holds. */
static inline size_t nd_markup_skip_length(const uint8_t *s, size_t len, size_t i,
                                           bool at_word_start)
{
    size_t j = nd_markup_link_length(s, len, i);
    uint8_t lower = s[i] | 0x20;
    if (j || !at_word_start || (lower != 'h' && lower != 'w' && lower != 'f'))
        return j;
    const uint8_t *p = s + i;
    size_t rest = len - i;
    if (nd_markup_prefix_ci(p, rest, "https://"))
        j = i + 8;
    else if (nd_markup_prefix_ci(p, rest, "http://"))
        j = i + 7;
    else if (nd_markup_prefix_ci(p, rest, "ftp://"))
        j = i + 6;
    else if (nd_markup_prefix_ci(p, rest, "www."))
        j = i + 4;
    else
        return 0;
    while (j < len && !nd_markup_ends_url(s[j]))
        j++;
    return j - i;
}

#endif
