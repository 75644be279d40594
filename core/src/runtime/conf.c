/*
 * tyto.conf: INI, parsed by inih. Global keys go before any section or in
 * [tyto]; every other section belongs to the plugin of that name, and its
 * keys are handed to the plugin through the host's option() lookup.
 *
 * inih reports only the first syntax error and does not give handlers line
 * numbers, so lines reach inih through our own reader: it counts lines,
 * reports every malformed line with its number and hands inih a blank line
 * instead, and strips leading blanks so that inih's multi-line continuation
 * never glues an indented key onto the previous value.
 */
#include "config.h"

#include "conf.h"

#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devspec.h"
#include "file.h"
#include "log.h"

typedef struct parse_state {
  conf *cfg;
  FILE *f;
  const char *name;
  int line;
  int section_line; /* of the last [section] header */
  int bad_section;  /* the last section header was malformed */
  int oom;
  int devices_line, plugin_path_line, log_level_line;
  size_t reported; /* errors recorded from this file */
  size_t omitted;  /* errors past CONF_MAX_ERRORS, counted only */
} parse_state;

/* The errors one file reports in full; past them they are counted: a
 * binary or generated file must not flood the log line by line. */
#define CONF_MAX_ERRORS 20

static void record(strlist *where, parse_state *ps, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void record(strlist *where, parse_state *ps, const char *fmt, ...) {
  if (ps->reported >= CONF_MAX_ERRORS) {
    ps->omitted++;
    return;
  }
  ps->reported++;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  strlist_pushf(where, "%s:%d: %s", ps->name, ps->line, msg);
}

static int is_blank_or_comment(const char *s) {
  return *s == '\0' || *s == ';' || *s == '#';
}

/* Checks one line (leading blanks already stripped, newline removed). */
static int line_ok(parse_state *ps, const char *s) {
  if (is_blank_or_comment(s))
    return 1;
  if (*s == '[') {
    const char *close = strchr(s, ']');
    if (!close) {
      record(&ps->cfg->errors, ps, "section header is missing ']': '%s'", s);
      ps->bad_section = 1;
      return 0;
    }
    const char *p = s + 1;
    while (p < close && isspace((unsigned char)*p))
      p++;
    if (p == close) {
      record(&ps->cfg->errors, ps, "empty section name");
      ps->bad_section = 1;
      return 0;
    }
    ps->section_line = ps->line;
    ps->bad_section = 0;
    return 1;
  }
  const char *eq = strpbrk(s, "=:");
  if (!eq) {
    record(&ps->cfg->errors, ps,
           "expected 'key = value' or '[section]', found '%s'", s);
    return 0;
  }
  if (eq == s) {
    record(&ps->cfg->errors, ps, "missing key before '%c'", *eq);
    return 0;
  }
  return 1;
}

/* The offset of the first byte in line[0..len) that UTF-8 text cannot hold
 * (NUL, other control characters than tab and CR, malformed sequences), or
 * -1 when it is text. */
static ssize_t not_text_at(const char *line, size_t len) {
  const unsigned char *p = (const unsigned char *)line;
  for (size_t i = 0; i < len;) {
    unsigned c = p[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
        return (ssize_t)i;
      i++;
      continue;
    }
    size_t n = c >= 0xf0 && c <= 0xf4   ? 4
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xc2 && c <= 0xdf ? 2
                                        : 0;
    if (n == 0 || i + n > len)
      return (ssize_t)i;
    for (size_t k = 1; k < n; k++)
      if ((p[i + k] & 0xc0) != 0x80)
        return (ssize_t)i;
    /* Overlong forms, surrogates and code points past U+10FFFF. */
    if ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] > 0x9f) ||
        (c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] > 0x8f))
      return (ssize_t)i;
    i += n;
  }
  return -1;
}

static char *reader(char *str, int num, void *stream) {
  parse_state *ps = stream;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len = getline(&line, &cap, ps->f);
  if (len < 0) {
    free(line);
    if (ferror(ps->f))
      record(&ps->cfg->errors, ps, "read error: %s", strerror(errno));
    return NULL;
  }
  ps->line++;
  while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
    line[--len] = '\0';
  ssize_t bad = not_text_at(line, (size_t)len);
  if (bad >= 0) {
    /* Binary data: one message, then stop; the rest would only repeat it. */
    unsigned char c = (unsigned char)line[bad];
    char what[64];
    if (c == 0)
      snprintf(what, sizeof what, "a NUL byte");
    else if (c < 0x80)
      snprintf(what, sizeof what, "the control character 0x%02x", c);
    else
      snprintf(what, sizeof what, "0x%02x, which is not valid UTF-8 there", c);
    record(&ps->cfg->errors, ps,
           "column %zd holds %s: a config file must be text; not reading "
           "further",
           bad + 1, what);
    free(line);
    return NULL;
  }
  const char *s = line;
  if (ps->line == 1 && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
    s += 3; /* a UTF-8 byte-order mark */
  while (isspace((unsigned char)*s))
    s++;
  if (strlen(s) + 2 > (size_t)num) {
    record(&ps->cfg->errors, ps, "line too long (at most %d characters)",
           num - 2);
    s = "";
  } else if (!line_ok(ps, s)) {
    s = "";
  } else if (ps->bad_section && *s != '[' && !is_blank_or_comment(s)) {
    /* Keys under a malformed header belong to no known section: the header
     * was reported; do not report each key as a misplaced global one. */
    s = "";
  }
  snprintf(str, (size_t)num, "%s\n", s);
  free(line);
  return str;
}

static int set_once(parse_state *ps, int *seen_line, const char *key) {
  if (*seen_line) {
    record(&ps->cfg->errors, ps, "'%s' is already set at line %d", key,
           *seen_line);
    return 0;
  }
  *seen_line = ps->line;
  return 1;
}

static void global_key(parse_state *ps, const char *key, const char *value) {
  conf *cfg = ps->cfg;
  if (strcmp(key, "devices") == 0) {
    if (!set_once(ps, &ps->devices_line, key))
      return;
    devspec spec;
    char err[512];
    if (devspec_parse(value, &spec, err, sizeof err) != 0) {
      record(&cfg->errors, ps, "devices: %s", err);
      return;
    }
    devspec_free(&spec);
    cfg->devices = rt_strdup(value);
  } else if (strcmp(key, "plugin_path") == 0) {
    if (set_once(ps, &ps->plugin_path_line, key)) {
      cfg->plugin_path = rt_strdup(value);
      cfg->plugin_path_line = ps->line;
    }
  } else if (strcmp(key, "log_level") == 0) {
    if (!set_once(ps, &ps->log_level_line, key))
      return;
    int lv = rt_log_level_parse(value);
    if (lv < 0)
      record(&cfg->errors, ps,
             "log_level: expected error, warn, info or debug, found '%s'",
             value);
    else
      cfg->log_level = lv;
  } else {
    record(&cfg->errors, ps,
           "unknown key '%s' (expected devices, plugin_path or log_level)",
           key);
  }
}

/* "section\nkey", the name of a plugin key in cfg->by_key; malloc'd. */
static char *entry_name(const char *section, const char *key) {
  return rt_asprintf("%s\n%s", section, key);
}

static int plugin_key(parse_state *ps, const char *section, const char *key,
                      const char *value) {
  conf *cfg = ps->cfg;
  char *name = entry_name(section, key);
  if (!name) {
    ps->oom = 1;
    return 1;
  }
  size_t at;
  if (nameidx_get(&cfg->by_key, name, &at)) {
    record(&cfg->errors, ps, "'%s' is already set at line %d", key,
           cfg->entries[at].line);
    free(name);
    return 1;
  }
  int put = nameidx_put(&cfg->by_key, name, cfg->n_entries);
  free(name);
  if (put != 0) {
    ps->oom = 1;
    return 1;
  }
  if (cfg->n_entries == cfg->cap_entries) {
    size_t cap = cfg->cap_entries ? 2 * cfg->cap_entries : 8;
    conf_entry *ne = realloc(cfg->entries, cap * sizeof *ne);
    if (!ne) {
      ps->oom = 1; /* the index now names a missing entry: parsing fails */
      return 1;
    }
    cfg->entries = ne;
    cfg->cap_entries = cap;
  }
  conf_entry *e = &cfg->entries[cfg->n_entries];
  e->section = rt_strdup(section);
  e->key = rt_strdup(key);
  e->value = rt_strdup(value);
  e->line = ps->line;
  e->section_line = ps->section_line;
  if (!e->section || !e->key || !e->value) {
    free(e->section), free(e->key), free(e->value);
    ps->oom = 1; /* as above */
    return 1;
  }
  cfg->n_entries++;
  return 1;
}

static int handler(void *user, const char *section, const char *key,
                   const char *value) {
  parse_state *ps = user;
  if (!key) /* inih >= 50 calls with key NULL for a new section */
    return 1;
  if (section[0] == '\0' || strcmp(section, "tyto") == 0) {
    global_key(ps, key, value);
    return 1;
  }
  return plugin_key(ps, section, key, value);
}

int conf_parse_stream(conf *cfg, FILE *f, const char *name) {
  parse_state ps;
  memset(&ps, 0, sizeof ps);
  ps.cfg = cfg;
  ps.f = f;
  ps.name = name;
  size_t errors_before = cfg->errors.n;
  int rc = ini_parse_stream(reader, &ps, handler, &ps);
  if (rc == -2 || ps.oom)
    strlist_pushf(&cfg->errors, "%s: out of memory while parsing", name);
  else if (rc > 0 && cfg->errors.n == errors_before)
    /* Only reached if inih rejects a line our reader accepted. */
    strlist_pushf(&cfg->errors, "%s:%d: syntax error", name, rc);
  if (ps.omitted)
    strlist_pushf(
        &cfg->errors, "%s: %zu more error%s not shown (the first %d are above)",
        name, ps.omitted, ps.omitted == 1 ? "" : "s", CONF_MAX_ERRORS);
  return cfg->errors.n == errors_before ? 0 : -1;
}

int conf_parse_file(conf *cfg, const char *path) {
  const char *why;
  int fd = rt_open_regular(path, &why);
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    if (fd >= 0) {
      why = strerror(errno);
      close(fd);
    }
    strlist_pushf(&cfg->errors, "%s: cannot read the config file: %s", path,
                  why);
    return -1;
  }
  free(cfg->path);
  cfg->path = rt_strdup(path);
  int rc = conf_parse_stream(cfg, f, path);
  fclose(f);
  return rc;
}

const char *conf_lookup(const conf *cfg, const char *section, const char *key) {
  char *name = entry_name(section, key);
  size_t at;
  int found =
      name && nameidx_get(&cfg->by_key, name, &at) && at < cfg->n_entries;
  free(name);
  return found ? cfg->entries[at].value : NULL;
}

void conf_init(conf *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->log_level = -1;
}

void conf_free(conf *cfg) {
  free(cfg->path);
  free(cfg->devices);
  free(cfg->plugin_path);
  for (size_t i = 0; i < cfg->n_entries; i++) {
    free(cfg->entries[i].section);
    free(cfg->entries[i].key);
    free(cfg->entries[i].value);
  }
  free(cfg->entries);
  nameidx_free(&cfg->by_key);
  strlist_free(&cfg->errors);
  strlist_free(&cfg->warnings);
  memset(cfg, 0, sizeof *cfg);
  cfg->log_level = -1;
}
