/*
 * Device selection lists. Grammar (whitespace around entries ignored):
 *
 *   list  := entry ("," entry)*
 *   entry := plugin [":" (index | "*")] ["?"]
 *
 * "plugin" alone means every device of that plugin; a trailing "?" marks the
 * entry optional: when it cannot be satisfied that is reported, not fatal.
 */
#include "config.h"

#include "devspec.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t cap, const char *fmt, const char *entry,
                size_t len, size_t pos) {
  char quoted[128];
  snprintf(quoted, sizeof quoted, "%.*s", (int)(len < 100 ? len : 100), entry);
  snprintf(err, cap, fmt, pos, quoted);
  return -1;
}

static int parse_entry(const char *s, size_t len, size_t pos, devspec_item *it,
                       char *err, size_t cap) {
  const char *e = s;
  memset(it, 0, sizeof *it);
  it->index = DEVSPEC_ALL;
  if (len > 0 && s[len - 1] == '?') {
    it->optional = 1;
    len--;
  }
  size_t name_len = 0;
  while (name_len < len && s[name_len] != ':')
    name_len++;
  if (name_len == 0)
    return fail(err, cap, "device entry %zu ('%s'): missing plugin name", e,
                len + (size_t)it->optional, pos);
  for (size_t i = 0; i < name_len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!(islower(c) || isdigit(c) || c == '_'))
      return fail(err, cap,
                  "device entry %zu ('%s'): plugin names use a-z, 0-9 and "
                  "'_' only",
                  e, len + (size_t)it->optional, pos);
  }
  if (name_len < len) {
    const char *ix = s + name_len + 1;
    size_t ix_len = len - name_len - 1;
    if (ix_len == 1 && ix[0] == '*') {
      it->index = DEVSPEC_ALL;
    } else {
      long v = 0;
      if (ix_len == 0 || ix_len > 9)
        return fail(err, cap,
                    "device entry %zu ('%s'): expected a device number or "
                    "'*' after ':'",
                    e, len + (size_t)it->optional, pos);
      for (size_t i = 0; i < ix_len; i++) {
        if (!isdigit((unsigned char)ix[i]))
          return fail(err, cap,
                      "device entry %zu ('%s'): expected a device number or "
                      "'*' after ':'",
                      e, len + (size_t)it->optional, pos);
        v = v * 10 + (ix[i] - '0');
      }
      it->index = (int32_t)v;
    }
  }
  it->plugin = malloc(name_len + 1);
  if (!it->plugin) {
    snprintf(err, cap, "out of memory");
    return -1;
  }
  memcpy(it->plugin, s, name_len);
  it->plugin[name_len] = '\0';
  return 0;
}

int devspec_parse(const char *text, devspec *out, char *err, size_t cap) {
  memset(out, 0, sizeof *out);
  size_t n = 1;
  for (const char *p = text; *p; p++)
    n += *p == ',';
  devspec spec = {calloc(n, sizeof(devspec_item)), 0};
  if (!spec.items) {
    snprintf(err, cap, "out of memory");
    return -1;
  }
  const char *p = text;
  int only_blank = 1;
  for (const char *q = text; *q; q++)
    if (!isspace((unsigned char)*q))
      only_blank = 0;
  if (only_blank) {
    snprintf(err, cap,
             "empty device list (expected entries like 'cpu', 'cuda:0' or "
             "'opencl:*', separated by commas)");
    free(spec.items);
    return -1;
  }
  for (size_t pos = 1;; pos++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *s = p;
    while (len > 0 && isspace((unsigned char)*s))
      s++, len--;
    while (len > 0 && isspace((unsigned char)s[len - 1]))
      len--;
    if (len == 0) {
      snprintf(err, cap, "device entry %zu is empty (stray ',')", pos);
      devspec_free(&spec);
      return -1;
    }
    if (parse_entry(s, len, pos, &spec.items[spec.n], err, cap) != 0) {
      devspec_free(&spec);
      return -1;
    }
    spec.n++;
    if (!end)
      break;
    p = end + 1;
  }
  *out = spec;
  return 0;
}

void devspec_free(devspec *spec) {
  for (size_t i = 0; i < spec->n; i++)
    free(spec->items[i].plugin);
  free(spec->items);
  spec->items = NULL;
  spec->n = 0;
}
