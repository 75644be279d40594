/* A growable list of owned strings: search paths, collected messages. */
#ifndef TYTO_RUNTIME_STRLIST_H
#define TYTO_RUNTIME_STRLIST_H

#include <stdarg.h>
#include <stddef.h>

typedef struct strlist {
  char **items;
  size_t n, cap;
} strlist;

/* Appends a copy; returns 0, or -1 when out of memory. */
int strlist_push(strlist *l, const char *s);
int strlist_pushf(strlist *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends each non-empty piece of `s` split at `sep`, skipping pieces
 * already present. Returns 0 or -1. */
int strlist_push_split_unique(strlist *l, const char *s, char sep);
int strlist_contains(const strlist *l, const char *s);
/* Joins with `sep` into a new string (free it), "" for an empty list. */
char *strlist_join(const strlist *l, const char *sep);
void strlist_free(strlist *l);

/* strdup that accepts NULL. */
char *rt_strdup(const char *s);
/* printf into a new string; NULL when out of memory. */
char *rt_vasprintf(const char *fmt, va_list ap);
char *rt_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Replaces, in place, every byte that is not part of a complete UTF-8
 * sequence, and every control character but tab, with '?'. */
void rt_sanitize_utf8(char *s);

#endif
