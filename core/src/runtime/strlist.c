/* A growable list of owned strings. */
#include "config.h"

#include "strlist.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *rt_strdup(const char *s) {
  if (!s)
    return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

char *rt_vasprintf(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0)
    return NULL;
  char *s = malloc((size_t)n + 1);
  if (s)
    vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

char *rt_asprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = rt_vasprintf(fmt, ap);
  va_end(ap);
  return s;
}

static int push_owned(strlist *l, char *s) {
  if (!s)
    return -1;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 8;
    char **items = realloc(l->items, cap * sizeof *items);
    if (!items) {
      free(s);
      return -1;
    }
    l->items = items;
    l->cap = cap;
  }
  l->items[l->n++] = s;
  return 0;
}

int strlist_push(strlist *l, const char *s) {
  return push_owned(l, rt_strdup(s));
}

int strlist_pushf(strlist *l, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = rt_vasprintf(fmt, ap);
  va_end(ap);
  return push_owned(l, s);
}

int strlist_contains(const strlist *l, const char *s) {
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->items[i], s) == 0)
      return 1;
  return 0;
}

int strlist_push_split_unique(strlist *l, const char *s, char sep) {
  if (!s)
    return 0;
  while (*s) {
    const char *end = strchr(s, sep);
    size_t len = end ? (size_t)(end - s) : strlen(s);
    if (len > 0) {
      char *piece = malloc(len + 1);
      if (!piece)
        return -1;
      memcpy(piece, s, len);
      piece[len] = '\0';
      if (strlist_contains(l, piece))
        free(piece);
      else if (push_owned(l, piece) != 0)
        return -1;
    }
    s += len;
    if (*s == sep)
      s++;
  }
  return 0;
}

char *strlist_join(const strlist *l, const char *sep) {
  size_t seplen = strlen(sep), total = 1;
  for (size_t i = 0; i < l->n; i++)
    total += strlen(l->items[i]) + (i ? seplen : 0);
  char *out = malloc(total), *p = out;
  if (!out)
    return NULL;
  for (size_t i = 0; i < l->n; i++) {
    if (i) {
      memcpy(p, sep, seplen);
      p += seplen;
    }
    size_t n = strlen(l->items[i]);
    memcpy(p, l->items[i], n);
    p += n;
  }
  *p = '\0';
  return out;
}

void strlist_free(strlist *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->items[i]);
  free(l->items);
  l->items = NULL;
  l->n = l->cap = 0;
}

void rt_sanitize_utf8(char *s) {
  unsigned char *p = (unsigned char *)s;
  while (*p) {
    size_t len = *p < 0x80           ? 1
                 : (*p >> 5) == 0x6  ? 2
                 : (*p >> 4) == 0xe  ? 3
                 : (*p >> 3) == 0x1e ? 4
                                     : 0;
    int ok = len > 0;
    for (size_t k = 1; ok && k < len; k++)
      ok = (p[k] & 0xc0) == 0x80;
    /* Overlong and surrogate forms are rare enough in names to accept;
     * what matters is that every sequence is complete. */
    if (!ok) {
      *p++ = '?';
      continue;
    }
    if (len == 1 && *p < 0x20 && *p != '\t')
      *p = '?';
    p += len;
  }
}
