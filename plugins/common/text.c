/*
 * Text made with printf: kernel sources and reasons (text.h).
 */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void tpc_text_put(tpc_text *b, const char *fmt, ...) {
  if (b->failed)
    return;
  for (;;) {
    size_t room = b->cap - b->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->text != NULL ? b->text + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = 1;
      return;
    }
    if ((size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap != 0 ? b->cap * 2 : 16384;
    while (cap - b->len <= (size_t)n)
      cap *= 2;
    char *t = realloc(b->text, cap);
    if (t == NULL) {
      b->failed = 1;
      return;
    }
    b->text = t;
    b->cap = cap;
  }
}

char *tpc_text_take(tpc_text *b) {
  if (b->failed) {
    free(b->text);
    return NULL;
  }
  return b->text;
}

int tpc_fail(char *why, size_t why_size, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_size, fmt, ap);
  va_end(ap);
  return code;
}
