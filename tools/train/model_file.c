/*
 * Model files: parsing (every check that can be made without building) and
 * building into a tyto_nn. The grammar and the layer table are in
 * docs/model-format.md; keep the two in step.
 */
#define _POSIX_C_SOURCE 200809L

#include "model_file.h"
#include "model_file_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* The layer table                                                         */

#define COMMON                                                                 \
  {"name", T_NAME}, {                                                          \
    "from", T_FROM                                                             \
  }
#define CONV_KEYS                                                              \
  COMMON, {"filters", T_COUNT}, {"kernel", T_PAIR}, {"stride", T_PAIR},        \
      {"padding", T_PAD}, {"dilation", T_PAIR}, {"groups", T_COUNT},           \
      {"bias", T_BOOL}, {"init", T_INIT}, {"gain", T_NONNEG}, {                \
    "activation", T_ACT                                                        \
  }
#define POOL_KEYS                                                              \
  COMMON, {"kernel", T_PAIR}, {"stride", T_PAIR}, {                            \
    "padding", T_PAD                                                           \
  }

static const layer_spec layer_specs[] = {
    {"input", L_INPUT, "shape", {{"shape", T_DIMS}, {"name", T_NAME}}},
    {"linear",
     L_LINEAR,
     "units",
     {COMMON,
      {"units", T_COUNT},
      {"bias", T_BOOL},
      {"init", T_INIT},
      {"gain", T_NONNEG},
      {"activation", T_ACT}}},
    {"fully_connected",
     L_FC,
     "units",
     {COMMON,
      {"units", T_COUNT},
      {"init", T_INIT},
      {"gain", T_NONNEG},
      {"activation", T_ACT}}},
    {"conv1d", L_CONV1D, "filters kernel", {CONV_KEYS}},
    {"conv2d", L_CONV2D, "filters kernel", {CONV_KEYS}},
    {"conv2d_transpose",
     L_CONV2D_T,
     "filters kernel",
     {CONV_KEYS, {"output_padding", T_PAIR0}}},
    {"max_pool1d", L_MAX_POOL1D, "kernel", {POOL_KEYS}},
    {"max_pool2d", L_MAX_POOL2D, "kernel", {POOL_KEYS}},
    {"avg_pool1d", L_AVG_POOL1D, "kernel", {POOL_KEYS}},
    {"avg_pool2d", L_AVG_POOL2D, "kernel", {POOL_KEYS}},
    {"global_max_pool", L_GLOBAL_MAX, "", {COMMON}},
    {"global_avg_pool", L_GLOBAL_AVG, "", {COMMON}},
    {"dropout", L_DROPOUT, "rate", {COMMON, {"rate", T_RATE}}},
    {"batch_norm",
     L_BATCH_NORM,
     "",
     {COMMON, {"momentum", T_RATE}, {"eps", T_NONNEG}}},
    {"embedding",
     L_EMBEDDING,
     "vocab dim",
     {COMMON, {"vocab", T_COUNT}, {"dim", T_COUNT}, {"init", T_INIT}}},
    {"flatten", L_FLATTEN, "", {COMMON}},
    {"reshape", L_RESHAPE, "shape", {COMMON, {"shape", T_SDIMS}}},
    {"concat", L_CONCAT, "from", {COMMON, {"axis", T_AXIS}}},
    {"add", L_ADD, "from", {COMMON}},
    {"relu", L_ACT, "", {COMMON}},
    {"leaky_relu", L_ACT, "", {COMMON, {"slope", T_NONNEG}}},
    {"elu", L_ACT, "", {COMMON, {"alpha", T_NONNEG}}},
    {"tanh", L_ACT, "", {COMMON}},
    {"sigmoid", L_ACT, "", {COMMON}},
    {"softmax", L_ACT, "", {COMMON}},
    {"gelu", L_ACT, "", {COMMON}},
    {"rnn",
     L_RNN,
     "units",
     {COMMON, {"units", T_COUNT}, {"sequences", T_BOOL}}},
    {"lstm",
     L_LSTM,
     "units",
     {COMMON, {"units", T_COUNT}, {"sequences", T_BOOL}}},
    {"gru",
     L_GRU,
     "units",
     {COMMON, {"units", T_COUNT}, {"sequences", T_BOOL}}},
    {"loss", L_LOSS, "type", {{"type", T_LOSS}}},
    {"regularize", L_REGULARIZE, "", {{"l1", T_NONNEG}, {"l2", T_NONNEG}}},
};
#define N_SPECS (sizeof layer_specs / sizeof layer_specs[0])
_Static_assert(N_SPECS <= MF_MAX_TYPES, "raise MF_MAX_TYPES");

static const char *const loss_names[] = {"cross_entropy", "mse", "l1", "hinge",
                                         NULL};

int mf_fail(char *err, size_t n, const char *file, int line, int col,
            const char *fmt, ...) {
  int k = snprintf(err, n, "%s:%d:%d: ", file, line, col);
  if (k >= 0 && (size_t)k < n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, n - (size_t)k, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static const key_spec *find_key(const layer_spec *ls, const char *key) {
  for (int k = 0; k < MF_MAX_KEYS && ls->keys[k].key; k++)
    if (strcmp(ls->keys[k].key, key) == 0)
      return &ls->keys[k];
  return NULL;
}

static void key_list(const layer_spec *ls, char *buf, size_t n) {
  buf[0] = '\0';
  size_t used = 0;
  for (int k = 0; k < MF_MAX_KEYS && ls->keys[k].key; k++) {
    int w =
        snprintf(buf + used, n - used, "%s%s", k ? ", " : "", ls->keys[k].key);
    if (w < 0 || (size_t)w >= n - used)
      break;
    used += (size_t)w;
  }
  if (!buf[0])
    snprintf(buf, n, "none");
}

static int parse_int(const char *s, int64_t *v) {
  if (!*s)
    return -1;
  errno = 0;
  char *end;
  long long x = strtoll(s, &end, 10);
  if (errno || *end || end == s)
    return -1;
  *v = x;
  return 0;
}

/* "AxBxC" (or "A,B,C"; a single number too) into v; 0 or -1. */
static int parse_dims(const char *s, int64_t *v, int *n) {
  char buf[MF_VALUE];
  snprintf(buf, sizeof buf, "%s", s);
  *n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(buf, "x,", &save); tok;
       tok = strtok_r(NULL, "x,", &save)) {
    if (*n == TYTO_MAX_RANK - 1 || parse_int(tok, &v[*n]) < 0)
      return -1;
    (*n)++;
  }
  size_t len = strlen(s);
  if (*n == 0 || s[0] == 'x' || s[0] == ',' || s[len - 1] == 'x' ||
      s[len - 1] == ',' || strstr(s, "xx") || strstr(s, ",,"))
    return -1;
  return 0;
}

static int word_of(const char *const *names, const char *s) {
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], s) == 0)
      return i;
  return -1;
}

static int is_ident(const char *s) {
  if (!isalpha((unsigned char)s[0]) && s[0] != '_')
    return 0;
  for (const char *p = s; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.')
      return 0;
  return 1;
}

/* uthash with its out-of-memory report turned into a flag, not exit(). */
static int names_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (names_oom = 1)
#include <uthash.h>

struct mf_name {
  int index;
  UT_hash_handle hh;
  char name[MF_NAME];
};

static int find_layer(const mf_model *m, const char *name) {
  struct mf_name *e = NULL;
  HASH_FIND_STR(m->names, name, e);
  return e ? e->index : -1;
}

/* Records layer i's name; -1 when out of memory. */
static int add_name(mf_model *m, int i) {
  struct mf_name *e = calloc(1, sizeof *e);
  if (!e)
    return -1;
  e->index = i;
  snprintf(e->name, sizeof e->name, "%s", m->layers[i].name);
  names_oom = 0;
  HASH_ADD_STR(m->names, name, e);
  if (names_oom) {
    free(e);
    return -1;
  }
  return 0;
}

static void free_names(mf_model *m) {
  struct mf_name *e, *tmp;
  HASH_ITER(hh, m->names, e, tmp) {
    HASH_DEL(m->names, e);
    free(e);
  }
}

/* Decodes v->text by its spec; on error writes the message into err. */
static int decode(mf_model *m, mf_layer *l, mf_value *v, const char *file,
                  char *err, size_t n) {
  const char *s = v->text, *key = v->spec->key;
  int line = l->line, col = v->col;
  switch (v->spec->type) {
  case T_COUNT:
  case T_INDEX:
  case T_AXIS: {
    int64_t x;
    if (parse_int(s, &x) < 0)
      return mf_fail(err, n, file, line, col,
                     "%s: expected an integer, got '%s'", key, s);
    if ((v->spec->type == T_COUNT && x < 1) ||
        (v->spec->type == T_INDEX && x < 0))
      return mf_fail(err, n, file, line, col,
                     "%s: expected an integer >= %d, got %s", key,
                     v->spec->type == T_COUNT ? 1 : 0, s);
    v->i[0] = x;
    v->n_i = 1;
    return 0;
  }
  case T_PAIR:
  case T_PAIR0:
  case T_DIMS:
  case T_SDIMS: {
    int k;
    if (parse_dims(s, v->i, &k) < 0)
      return mf_fail(err, n, file, line, col, "%s: expected %s, got '%s'", key,
                     v->spec->type == T_PAIR || v->spec->type == T_PAIR0
                         ? "N or NxM"
                         : "dimensions such as 1x28x28",
                     s);
    if ((v->spec->type == T_PAIR || v->spec->type == T_PAIR0) && k > 2)
      return mf_fail(err, n, file, line, col,
                     "%s: expected N or NxM, got %d numbers in '%s'", key, k,
                     s);
    int minus = 0;
    for (int a = 0; a < k; a++) {
      int64_t lo = v->spec->type == T_PAIR0 ? 0 : 1;
      if (v->spec->type == T_SDIMS && v->i[a] == -1 && !minus++)
        continue;
      if (v->i[a] < lo)
        return mf_fail(err, n, file, line, col,
                       "%s: dimension %lld is below %lld in '%s'", key,
                       (long long)v->i[a], (long long)lo, s);
    }
    if (k == 1 && (v->spec->type == T_PAIR || v->spec->type == T_PAIR0))
      v->i[1] = v->i[0]; /* N means NxN */
    v->n_i = k;
    return 0;
  }
  case T_RATE:
  case T_REAL:
  case T_NONNEG: {
    errno = 0;
    char *end;
    double x = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(x))
      return mf_fail(err, n, file, line, col, "%s: expected a number, got '%s'",
                     key, s);
    if (v->spec->type == T_RATE && !(x >= 0 && x < 1))
      return mf_fail(err, n, file, line, col,
                     "%s: expected a value in [0, 1), got %s", key, s);
    if (v->spec->type == T_NONNEG && x < 0)
      return mf_fail(err, n, file, line, col,
                     "%s: expected a value >= 0, got %s", key, s);
    v->r = x;
    return 0;
  }
  case T_BOOL:
    if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0) {
      v->word = s[0] == 't';
      return 0;
    }
    return mf_fail(err, n, file, line, col,
                   "%s: expected true or false, got '%s'", key, s);
  case T_PAD:
    if (strcmp(s, "same") == 0 || strcmp(s, "valid") == 0) {
      v->word = s[0] == 's' ? -1 : -2;
      return 0;
    } else {
      int k;
      if (parse_dims(s, v->i, &k) == 0 && k <= 2 && v->i[0] >= 0 &&
          v->i[k - 1] >= 0) {
        if (k == 1)
          v->i[1] = v->i[0];
        v->n_i = 2;
        v->word = 0;
        return 0;
      }
    }
    return mf_fail(err, n, file, line, col,
                   "%s: expected same, valid, N or NxM, got '%s'", key, s);
  case T_ACT: {
    int a = tyto_nn_activation_from_name(s);
    if (a < 0)
      return mf_fail(err, n, file, line, col,
                     "%s: unknown activation '%s' (expected none, relu, "
                     "leaky_relu, elu, tanh, sigmoid, softmax or gelu)",
                     key, s);
    v->word = a;
    return 0;
  }
  case T_INIT: {
    int a = tyto_init_from_name(s);
    if (a < 0)
      return mf_fail(err, n, file, line, col,
                     "%s: unknown initialiser '%s' (expected glorot_uniform, "
                     "glorot_normal, he_uniform, he_normal, lecun_uniform, "
                     "lecun_normal, zeros or ones)",
                     key, s);
    v->word = a;
    return 0;
  }
  case T_LOSS: {
    int a = word_of(loss_names, s);
    if (a < 0)
      return mf_fail(
          err, n, file, line, col,
          "%s: unknown loss '%s' (expected cross_entropy, mse, l1 or "
          "hinge)",
          key, s);
    v->word = a;
    return 0;
  }
  case T_NAME:
    if (!is_ident(s) || strlen(s) >= MF_NAME)
      return mf_fail(
          err, n, file, line, col,
          "name: '%s' is not a name (a letter, then letters, digits, "
          "'_', '-' or '.'; at most %d characters)",
          s, MF_NAME - 1);
    if (find_layer(m, s) >= 0)
      return mf_fail(err, n, file, line, col,
                     "name: a layer named '%s' already exists (line %d)", s,
                     m->layers[find_layer(m, s)].line);
    snprintf(l->name, sizeof l->name, "%s", s);
    return 0;
  case T_FROM: {
    char buf[MF_VALUE];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    l->n_from = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
      int idx = find_layer(m, tok);
      if (idx < 0)
        return mf_fail(err, n, file, line, col,
                       "from: no layer named '%s' before this line", tok);
      if (m->layers[idx].spec->kind == L_LOSS ||
          m->layers[idx].spec->kind == L_REGULARIZE)
        return mf_fail(err, n, file, line, col, "from: '%s' is not a layer",
                       tok);
      if (l->n_from == MF_MAX_FROM)
        return mf_fail(err, n, file, line, col, "from: more than %d layers",
                       MF_MAX_FROM);
      l->from[l->n_from++] = idx;
    }
    if (l->n_from == 0)
      return mf_fail(err, n, file, line, col, "from: expected layer names");
    return 0;
  }
  }
  return 0;
}

const mf_value *mf_get(const mf_layer *l, const char *key) {
  for (int i = 0; i < l->n_values; i++)
    if (strcmp(l->values[i].spec->key, key) == 0)
      return &l->values[i];
  return NULL;
}

/* Appends the layer at `line`; its text starts at s. */
static int parse_layer(mf_model *m, mf_layer *l, const char *file, int line,
                       char *s, char *err, size_t n) {
  char *p = s;
  while (*p == ' ' || *p == '\t')
    p++;
  char *type = p;
  while (*p && *p != ' ' && *p != '\t')
    p++;
  int type_col = (int)(type - s) + 1;
  if (*p)
    *p++ = '\0';
  const layer_spec *ls = NULL;
  for (size_t i = 0; i < N_SPECS && !ls; i++)
    if (strcmp(layer_specs[i].type, type) == 0)
      ls = &layer_specs[i];
  if (!ls)
    return mf_fail(err, n, file, line, type_col,
                   "unknown layer type '%s' (see docs/model-format.md for the "
                   "layers)",
                   type);
  l->spec = ls;
  l->line = line;
  if (ls->kind == L_INPUT && m->input >= 0)
    return mf_fail(err, n, file, line, type_col,
                   "a second input layer (the first is on line %d)",
                   m->layers[m->input].line);
  /* One loss and one regularization: a second would silently replace the
   * first. */
  for (size_t i = 0;
       i < m->n_layers && (ls->kind == L_LOSS || ls->kind == L_REGULARIZE); i++)
    if (m->layers[i].spec->kind == ls->kind)
      return mf_fail(err, n, file, line, type_col,
                     "%s given twice (the first is on line %d)", type,
                     m->layers[i].line);
  if (ls->kind != L_INPUT && ls->kind != L_LOSS && ls->kind != L_REGULARIZE &&
      m->input < 0)
    return mf_fail(err, n, file, line, type_col,
                   "%s before the input layer (the first layer must be 'input "
                   "shape=...')",
                   type);
  for (;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    if (!*p)
      break;
    char *tok = p;
    int col = (int)(tok - s) + 1;
    while (*p && *p != ' ' && *p != '\t')
      p++;
    if (*p)
      *p++ = '\0';
    char *eq = strchr(tok, '=');
    if (!eq || eq == tok || !eq[1])
      return mf_fail(err, n, file, line, col, "expected key=value, got '%s'",
                     tok);
    *eq = '\0';
    const key_spec *ks = find_key(ls, tok);
    if (!ks) {
      char keys[512];
      key_list(ls, keys, sizeof keys);
      return mf_fail(err, n, file, line, col,
                     "%s: unknown key '%s' (expected %s)", type, tok, keys);
    }
    if (mf_get(l, tok))
      return mf_fail(err, n, file, line, col, "%s: key '%s' given twice", type,
                     tok);
    if (strlen(eq + 1) >= MF_VALUE)
      return mf_fail(err, n, file, line, col, "%s: value too long", tok);
    mf_value *nv = realloc(l->values, (size_t)(l->n_values + 1) * sizeof *nv);
    if (!nv)
      return mf_fail(err, n, file, line, col, "out of memory");
    l->values = nv;
    mf_value *v = &l->values[l->n_values++];
    memset(v, 0, sizeof *v);
    v->spec = ks;
    v->col = (int)(eq + 1 - s) + 1;
    snprintf(v->text, sizeof v->text, "%s", eq + 1);
    if (decode(m, l, v, file, err, n) < 0)
      return -1;
  }
  /* Required keys. */
  char req[128];
  snprintf(req, sizeof req, "%s", ls->required);
  char *save = NULL;
  for (char *k = strtok_r(req, " ", &save); k; k = strtok_r(NULL, " ", &save))
    if (!mf_get(l, k))
      return mf_fail(err, n, file, line, type_col, "%s: missing %s=", type, k);
  switch (ls->kind) {
  case L_INPUT: {
    const mf_value *sh = mf_get(l, "shape");
    if (sh->n_i > TYTO_MAX_RANK - 1)
      return mf_fail(err, n, file, line, sh->col,
                     "shape: at most %d dimensions", TYTO_MAX_RANK - 1);
    m->input = (int)m->n_layers;
    break;
  }
  case L_CONV1D:
  case L_MAX_POOL1D:
  case L_AVG_POOL1D:
    for (int i = 0; i < l->n_values; i++)
      if (l->values[i].spec->type == T_PAIR && l->values[i].n_i == 2 &&
          strchr(l->values[i].text, 'x'))
        return mf_fail(err, n, file, line, l->values[i].col,
                       "%s: a 1-d layer takes one number, got '%s'",
                       l->values[i].spec->key, l->values[i].text);
    break;
  case L_CONCAT:
  case L_ADD:
    if (l->n_from < 2)
      return mf_fail(err, n, file, line, mf_get(l, "from")->col,
                     "%s: from= needs two layers or more", type);
    break;
  case L_LOSS: m->loss = (mf_loss)mf_get(l, "type")->word; break;
  case L_REGULARIZE: {
    const mf_value *a = mf_get(l, "l1"), *b = mf_get(l, "l2");
    m->l1 = a ? a->r : 0;
    m->l2 = b ? b->r : 0;
    break;
  }
  default: break;
  }
  /* Default names: the type and a count, as "conv2d_1". */
  if (!l->name[0] && ls->kind != L_LOSS && ls->kind != L_REGULARIZE) {
    unsigned k = m->type_count[ls - layer_specs] + 1;
    if (ls->kind == L_INPUT)
      snprintf(l->name, sizeof l->name, "input");
    else
      snprintf(l->name, sizeof l->name, "%.40s_%u", ls->type, k);
    if (find_layer(m, l->name) >= 0)
      return mf_fail(
          err, n, file, line, type_col,
          "the default name '%s' is taken; give this layer name=", l->name);
  }
  if (l->n_from == 0 && ls->kind != L_INPUT && ls->kind != L_LOSS &&
      ls->kind != L_REGULARIZE) {
    /* The previous layer. */
    int prev = (int)m->n_layers - 1;
    while (prev >= 0 && (m->layers[prev].spec->kind == L_LOSS ||
                         m->layers[prev].spec->kind == L_REGULARIZE))
      prev--;
    l->from[l->n_from++] = prev;
  }
  if (l->n_from > 1 && ls->kind != L_CONCAT && ls->kind != L_ADD)
    return mf_fail(err, n, file, line, mf_get(l, "from")->col,
                   "%s: takes one input, from= names %d", type, l->n_from);
  if (l->name[0] && add_name(m, (int)m->n_layers) < 0)
    return mf_fail(err, n, file, line, 1, "out of memory");
  m->type_count[ls - layer_specs]++;
  m->n_layers++;
  return 0;
}

/* One line's layer, appended to m when it is valid. */
static int parse_line(mf_model *m, const char *file, int line, char *s,
                      char *err, size_t n) {
  if (m->n_layers == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 16;
    mf_layer *nl = realloc(m->layers, cap * sizeof *nl);
    if (!nl)
      return mf_fail(err, n, file, line, 1, "out of memory");
    m->layers = nl;
    m->cap = cap;
  }
  mf_layer *l = &m->layers[m->n_layers];
  memset(l, 0, sizeof *l);
  if (parse_layer(m, l, file, line, s, err, n) == 0)
    return 0;
  free(l->values);
  l->values = NULL;
  return -1;
}

static int canonicalise(mf_model *m) {
  size_t cap = 256, used = 0;
  char *out = malloc(cap);
  if (!out)
    return -1;
  out[0] = '\0';
  for (size_t i = 0; i < m->n_layers; i++) {
    const mf_layer *l = &m->layers[i];
    char line[MF_MAX_LINE];
    size_t k = (size_t)snprintf(line, sizeof line, "%s", l->spec->type);
    for (int v = 0; v < l->n_values && k < sizeof line; v++)
      k += (size_t)snprintf(line + k, sizeof line - k, " %s=%s",
                            l->values[v].spec->key, l->values[v].text);
    if (k >= sizeof line)
      k = sizeof line - 1;
    if (used + k + 2 > cap) {
      while (used + k + 2 > cap)
        cap *= 2;
      char *no = realloc(out, cap);
      if (!no) {
        free(out);
        return -1;
      }
      out = no;
    }
    memcpy(out + used, line, k);
    used += k;
    out[used++] = '\n';
    out[used] = '\0';
  }
  m->canonical = out;
  return 0;
}

int mf_parse(const char *text, const char *file, mf_model **out, char *err,
             size_t n) {
  *out = NULL;
  mf_model *m = calloc(1, sizeof *m);
  if (!m || !(m->file = strdup(file))) {
    free(m);
    snprintf(err, n, "%s: out of memory", file);
    return -1;
  }
  m->input = -1;
  int line = 0;
  const char *p = text;
  while (*p) {
    line++;
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char buf[MF_MAX_LINE];
    if (len >= sizeof buf) {
      mf_fail(err, n, file, line, 1, "line longer than %d characters",
              MF_MAX_LINE - 1);
      mf_free(m);
      return -1;
    }
    memcpy(buf, p, len);
    buf[len] = '\0';
    if (len && buf[len - 1] == '\r')
      buf[len - 1] = '\0';
    char *hash = strchr(buf, '#');
    if (hash)
      *hash = '\0';
    for (char *c = buf; *c; c++)
      if (!isprint((unsigned char)*c) && *c != '\t') {
        mf_fail(err, n, file, line, (int)(c - buf) + 1,
                "unexpected byte 0x%02x", (unsigned char)*c);
        mf_free(m);
        return -1;
      }
    char *q = buf;
    while (*q == ' ' || *q == '\t')
      q++;
    if (*q && parse_line(m, file, line, buf, err, n) < 0) {
      mf_free(m);
      return -1;
    }
    p += len + (end ? 1 : 0);
  }
  if (m->input < 0) {
    mf_fail(err, n, file, line ? line : 1, 1,
            "no input layer (the first layer must be 'input shape=...')");
    mf_free(m);
    return -1;
  }
  size_t layers = 0;
  for (size_t i = 0; i < m->n_layers; i++)
    layers += m->layers[i].spec->kind != L_INPUT &&
              m->layers[i].spec->kind != L_LOSS &&
              m->layers[i].spec->kind != L_REGULARIZE;
  if (layers == 0) {
    mf_fail(err, n, file, line, 1, "no layers after the input");
    mf_free(m);
    return -1;
  }
  if (canonicalise(m) < 0) {
    snprintf(err, n, "%s: out of memory", file);
    mf_free(m);
    return -1;
  }
  *out = m;
  return 0;
}

/* Opens a model file for reading; a FIFO, a device or a directory is
 * refused before anything is read, so that a FIFO with no writer cannot
 * hang the tool. */
static FILE *open_regular(const char *path, char *err, size_t n) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(err, n, "%s: cannot read the model file: %s", path,
             strerror(errno));
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, n,
             "%s: cannot read the model file: is %s, not a regular "
             "file",
             path,
             S_ISDIR(st.st_mode)    ? "a directory"
             : S_ISFIFO(st.st_mode) ? "a FIFO"
             : S_ISCHR(st.st_mode)  ? "a character device"
             : S_ISBLK(st.st_mode)  ? "a block device"
                                    : "a socket");
    close(fd);
    return NULL;
  }
  int flags = fcntl(fd, F_GETFL);
  FILE *f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0
                ? fdopen(fd, "rb")
                : NULL;
  if (!f) {
    snprintf(err, n, "%s: cannot read the model file: %s", path,
             strerror(errno));
    close(fd);
  }
  return f;
}

int mf_load(const char *path, mf_model **out, char *err, size_t n) {
  *out = NULL;
  FILE *f = open_regular(path, err, n);
  if (!f)
    return -1;
  size_t cap = 4096, used = 0;
  char *text = malloc(cap);
  while (text) {
    size_t got = fread(text + used, 1, cap - used - 1, f);
    used += got;
    if (used < cap - 1)
      break;
    if (cap >= (size_t)1 << 24) {
      snprintf(err, n, "%s: larger than 16 MiB: not a model file", path);
      free(text);
      fclose(f);
      return -1;
    }
    char *nt = realloc(text, cap * 2);
    if (!nt) {
      free(text);
      text = NULL;
      break;
    }
    text = nt;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!text || bad) {
    snprintf(err, n, "%s: %s", path, text ? "read error" : "out of memory");
    free(text);
    return -1;
  }
  text[used] = '\0';
  if (memchr(text, '\0', used)) {
    snprintf(err, n, "%s: contains a NUL byte: not a text file", path);
    free(text);
    return -1;
  }
  int rc = mf_parse(text, path, out, err, n);
  free(text);
  return rc;
}

void mf_free(mf_model *m) {
  if (!m)
    return;
  free_names(m);
  for (size_t i = 0; i < m->n_layers; i++)
    free(m->layers[i].values);
  free(m->layers);
  free(m->file);
  free(m->canonical);
  free(m);
}

const char *mf_canonical(const mf_model *m) {
  return m->canonical;
}

int mf_input_rank(const mf_model *m) {
  return mf_get(&m->layers[m->input], "shape")->n_i;
}

const int64_t *mf_input_shape(const mf_model *m) {
  return mf_get(&m->layers[m->input], "shape")->i;
}

mf_loss mf_loss_kind(const mf_model *m) {
  return m->loss;
}

void mf_regularization(const mf_model *m, double *l1, double *l2) {
  *l1 = m->l1;
  *l2 = m->l2;
}

/* ---------------------------------------------------------------------- */
/* Presets                                                                 */

static const struct {
  const char *name, *text;
} presets[] = {
    {"cnn", "# The seed CNN of Owl's computation-graph chapter.\n"
            "input shape=1x28x28\n"
            "conv2d name=conv filters=32 kernel=5 stride=1 padding=same "
            "activation=relu\n"
            "max_pool2d kernel=2\n"
            "dropout rate=0.1\n"
            "fully_connected name=fc units=1024 activation=relu\n"
            "linear name=out units=10\n"
            "softmax\n"},
    {"mlp", "input shape=784\n"
            "linear name=fc1 units=128 activation=relu\n"
            "linear name=fc2 units=10\n"},
    {"mlp-big", "input shape=784\n"
                "linear name=fc1 units=512 activation=relu\n"
                "linear name=fc2 units=512 activation=relu\n"
                "linear name=fc3 units=10\n"},
};

const char *mf_preset(const char *name) {
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (name && strcmp(presets[i].name, name) == 0)
      return presets[i].text;
  return NULL;
}

const char *mf_preset_list(void) {
  return "cnn, mlp, mlp-big";
}
