/* Text as each output wants it: names for a terminal's table, JSON's and
 * the Prometheus text format's, sizes for a reader.  A process name is
 * whatever bytes the process chose, cut by the kernel after 15 of them,
 * maybe inside a character. */
#include <stdbool.h>
#include <stdio.h>

#include "stat_tool.h"

/* The character at s: its length in bytes, and its code point in *cp, or
 * -1 (length 1) for a byte that starts no valid UTF-8 sequence: a stray
 * continuation byte, a sequence cut short, an overlong form, a surrogate,
 * a code point past U+10FFFF. */
static size_t utf8_next(const unsigned char *s, long *cp)
{
    static const long least[] = { 0, 0, 0x80, 0x800, 0x10000 };
    unsigned char b = s[0];
    size_t n = b < 0x80                ? 1
               : b >= 0xc2 && b < 0xe0 ? 2
               : b >= 0xe0 && b < 0xf0 ? 3
               : b >= 0xf0 && b < 0xf5 ? 4
                                       : 0;
    *cp = n == 1 ? b : -1;
    if (n < 2)
        return 1;
    long v = b & (0x3f >> (n - 1));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) /* the terminating NUL too */
            return 1;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < least[n] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 1;
    *cp = v;
    return n;
}

/* C0, DEL and C1: what a terminal or a line-oriented reader acts on. */
static bool control(long cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}

void json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        long cp;
        size_t n = utf8_next(p, &cp);
        if (cp < 0)
            fputs("\\ufffd", stdout);
        else if (cp == '"' || cp == '\\')
            printf("\\%c", (int)cp);
        else if (control(cp))
            printf("\\u%04lx", cp);
        else
            fwrite(p, 1, n, stdout);
        p += n;
    }
    putchar('"');
}

void prometheus_label(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        long cp;
        size_t n = utf8_next(p, &cp);
        if (cp < 0)
            fputs("\xef\xbf\xbd", stdout); /* U+FFFD */
        else if (cp == '"' || cp == '\\')
            printf("\\%c", (int)cp);
        else if (cp == '\n')
            fputs("\\n", stdout);
        else if (control(cp))
            for (size_t i = 0; i < n; i++)
                printf("\\\\x%02x", p[i]);
        else
            fwrite(p, 1, n, stdout);
        p += n;
    }
    putchar('"');
}

const char *printable(const char *s, char *out, size_t n)
{
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && k + 5 < n; p++) {
        if (*p < 0x20 || *p >= 0x7f || *p == '\\')
            k += (size_t)snprintf(out + k, n - k, "\\x%02x", *p);
        else
            out[k++] = (char)*p;
    }
    out[k] = '\0';
    return out;
}

const char *size_text(uint64_t v, char *buf, size_t n)
{
    static const char units[] = "BKMGTP";
    double x = (double)v;
    int u = 0;
    while (x >= 1024 && units[u + 1]) {
        x /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.1f%c" : "%.0f%c", x, units[u]);
    return buf;
}
