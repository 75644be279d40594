/*
 * Text made with printf: a growing buffer for generated kernel sources
 * (appends never fail midway: an allocation failure is remembered and
 * every later append does nothing), and the reasons checks give. Depends
 * on the C library only.
 */
#ifndef TYTO_PLUGINS_TEXT_H
#define TYTO_PLUGINS_TEXT_H

#include <stddef.h>

typedef struct tpc_text {
  char *text; /* malloc'd, terminated; NULL before the first append */
  size_t len, cap;
  int failed; /* out of memory */
} tpc_text;

/* Appends the formatted text to b, growing it as needed; on failure sets
 * b->failed and keeps what was there. Start from a zeroed tpc_text. */
void tpc_text_put(tpc_text *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The text (the caller frees it with free()), or NULL after a failure
 * (the buffer is then freed). */
char *tpc_text_take(tpc_text *b);

/* Writes the formatted reason into why (always terminated, cut at
 * why_size) and returns code: `return tpc_fail(why, size, code, ...)`. */
int tpc_fail(char *why, size_t why_size, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif /* TYTO_PLUGINS_TEXT_H */
