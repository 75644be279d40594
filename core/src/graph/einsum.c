/*
 * tyto_einsum: Einstein summation over existing ops (docs/einsum.md). The
 * spec is parsed into one label list per operand; shapes are inferred and
 * checked, with errors that quote the spec and point at the offending
 * character. The lowering: repeated labels within an operand take the
 * diagonal (a product with an identity mask, then a sum), labels nothing
 * else needs are summed at once, the operands are contracted two at a
 * time in the order of least cost (every order tried for up to 4
 * operands, greedily above, as opt_einsum's "auto"), each pair as one
 * batched MATMUL (or a broadcast MUL when nothing is contracted), and the
 * result is summed and permuted into the output's order. What it builds
 * is ordinary ops, so AD, the passes and every device apply unchanged.
 *
 * Labels are small integers: 'a'..'z' 0..25, 'A'..'Z' 26..51, and the
 * axes an ellipsis stands for 52.. (right-aligned across operands, as
 * NumPy broadcasts them). A set of labels is a uint64_t mask.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/ops.h>

#include "node.h"
#include "shape.h"

#define N_LETTERS 52
#define MAX_LABELS (N_LETTERS + TYTO_MAX_RANK)
#define MAX_OPERANDS 32

typedef struct term {
  int n;                    /* labels, ellipsis expanded */
  int label[TYTO_MAX_RANK]; /* per axis */
  int pos[TYTO_MAX_RANK];   /* where each came from in the spec */
  int ell, ell_pos;         /* an ellipsis, and where */
  int named;                /* letters */
  int at;                   /* where the term starts in the spec */
} term;

typedef struct ctx {
  tyto_graph *g;
  const char *spec;
  int64_t size[MAX_LABELS];
  int n_ell; /* axes the ellipsis stands for, broadcast over operands */
} ctx;

static int letter(char c) {
  if (c >= 'a' && c <= 'z')
    return c - 'a';
  if (c >= 'A' && c <= 'Z')
    return 26 + (c - 'A');
  return -1;
}

static char label_char(int l) {
  return l < 26 ? (char)('a' + l) : l < N_LETTERS ? (char)('A' + l - 26) : '.';
}

/* Fails with the spec quoted and a caret under position pos (-1: none). */
static tyto_tensor *fail_at(const ctx *c, int pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tyto_tensor *fail_at(const ctx *c, int pos, const char *fmt, ...) {
  char msg[256], caret[160] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (pos >= 0 && pos < 120) {
    memset(caret, ' ', (size_t)pos);
    caret[pos] = '^';
    caret[pos + 1] = '\0';
  }
  if (pos >= 0 && pos < 120)
    return graph_fail(c->g, "einsum \"%s\": %s\n  %s\n  %s", c->spec, msg,
                      c->spec, caret);
  return graph_fail(c->g, "einsum \"%s\": %s", c->spec, msg);
}

/* Parses the term spec[at .. end): letters, one ellipsis ("..."; several
 * only when '|' alone separates them, OCANNL's axis groups), '|' and
 * spaces. Returns 0, or -1 after failing the graph. */
static int parse_term(const ctx *c, int at, int end, term *t) {
  memset(t, 0, sizeof *t);
  t->at = at;
  int last_ell_end = -1;
  for (int i = at; i < end; i++) {
    char ch = c->spec[i];
    if (ch == ' ' || ch == '|')
      continue;
    if (ch == '.') {
      if (end - i < 3 || strncmp(c->spec + i, "...", 3)) {
        fail_at(c, i, "a '.' that does not start an ellipsis \"...\"");
        return -1;
      }
      if (t->ell) {
        /* OCANNL's "...|...": ellipses of adjacent groups are one. */
        int only_bars = 1;
        for (int k = last_ell_end; k < i; k++)
          only_bars &= c->spec[k] == '|' || c->spec[k] == ' ';
        if (!only_bars) {
          fail_at(c, i, "a second ellipsis in one operand");
          return -1;
        }
      } else {
        t->ell = 1;
        t->ell_pos = i;
        if (t->n >= TYTO_MAX_RANK) {
          fail_at(c, i, "more than %d axes", TYTO_MAX_RANK);
          return -1;
        }
        t->label[t->n] = -1; /* expanded later */
        t->pos[t->n++] = i;
      }
      i += 2;
      last_ell_end = i + 1;
      continue;
    }
    int l = letter(ch);
    if (l < 0) {
      fail_at(c, i, "'%c' is not a label (labels are letters a-z, A-Z)", ch);
      return -1;
    }
    if (t->n >= TYTO_MAX_RANK) {
      fail_at(c, i, "more than %d axes", TYTO_MAX_RANK);
      return -1;
    }
    t->label[t->n] = l;
    t->pos[t->n++] = i;
    t->named++;
  }
  return 0;
}

/* Replaces t's ellipsis marker by the labels of its k last ellipsis axes
 * (of c->n_ell). */
static int expand(const ctx *c, term *t, int k) {
  if (!t->ell)
    return 0;
  int at = 0;
  while (t->label[at] != -1)
    at++;
  int n = t->n - 1 + k;
  if (n > TYTO_MAX_RANK) {
    fail_at(c, t->ell_pos, "the ellipsis makes %d axes, more than %d", n,
            TYTO_MAX_RANK);
    return -1;
  }
  int lab[TYTO_MAX_RANK], pos[TYTO_MAX_RANK];
  int j = 0;
  for (int i = 0; i < at; i++, j++) {
    lab[j] = t->label[i];
    pos[j] = t->pos[i];
  }
  for (int e = 0; e < k; e++, j++) {
    lab[j] = N_LETTERS + (c->n_ell - k) + e;
    pos[j] = t->ell_pos;
  }
  for (int i = at + 1; i < t->n; i++, j++) {
    lab[j] = t->label[i];
    pos[j] = t->pos[i];
  }
  t->n = n;
  memcpy(t->label, lab, sizeof lab);
  memcpy(t->pos, pos, sizeof pos);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Lowering                                                                */

typedef struct opnd {
  tyto_tensor *t;
  int n;
  int label[TYTO_MAX_RANK];
} opnd;

static uint64_t set_of(const opnd *o) {
  uint64_t m = 0;
  for (int i = 0; i < o->n; i++)
    m |= UINT64_C(1) << o->label[i];
  return m;
}

static int axis_of(const opnd *o, int l) {
  for (int i = 0; i < o->n; i++)
    if (o->label[i] == l)
      return i;
  return -1;
}

/* The diagonal of axes p < q (one label): x * eye, summed over q. */
static int diagonal(const ctx *c, opnd *o, int p, int q) {
  int64_t n = tyto_tensor_shape(o->t)[p];
  int64_t shape[TYTO_MAX_RANK];
  for (int i = 0; i < o->n; i++)
    shape[i] = i == p || i == q ? n : 1;
  size_t nn = (size_t)(n * n);
  double *eye = calloc(nn ? nn : 1, sizeof *eye);
  if (!eye) {
    graph_oom(c->g, "einsum");
    return -1;
  }
  for (int64_t i = 0; i < n; i++)
    eye[i * n + i] = 1;
  tyto_tensor *m =
      tyto_constant(c->g, tyto_tensor_dtype(o->t), o->n, shape, eye);
  free(eye);
  o->t = tyto_sum(tyto_mul(o->t, m), 1, &q, 0);
  for (int i = q; i + 1 < o->n; i++)
    o->label[i] = o->label[i + 1];
  o->n--;
  return tyto_tensor_is_error(o->t) ? -1 : 0;
}

/* Sums o over the labels in `drop`. */
static void sum_out(opnd *o, uint64_t drop) {
  int axes[TYTO_MAX_RANK], k = 0, n = 0;
  for (int i = 0; i < o->n; i++) {
    if (drop >> o->label[i] & 1)
      axes[k++] = i;
    else
      o->label[n++] = o->label[i];
  }
  if (k) {
    o->t = tyto_sum(o->t, k, axes, 0);
    o->n = n;
  }
}

/* o permuted so that its labels come in the order of `want` (which holds
 * exactly o's labels). */
static void permute_to(opnd *o, int n, const int *want) {
  int perm[TYTO_MAX_RANK], id = 1;
  for (int i = 0; i < n; i++) {
    perm[i] = axis_of(o, want[i]);
    id &= perm[i] == i;
  }
  if (!id)
    o->t = tyto_permute(o->t, n, perm);
  memcpy(o->label, want, (size_t)n * sizeof *want);
}

/* The product of the sizes of the labels in m. */
static double cost_of(const ctx *c, uint64_t m) {
  double p = 1;
  for (int l = 0; l < MAX_LABELS; l++)
    if (m >> l & 1)
      p *= (double)c->size[l];
  return p;
}

/* Contracts a with b into a, keeping the labels in `keep`. */
static int contract(const ctx *c, opnd *a, opnd *b, uint64_t keep) {
  uint64_t sa = set_of(a), sb = set_of(b), both = sa & sb;
  /* A label both hold but neither keeps, of extent 1 on one side (an
   * ellipsis axis broadcast): summing each over it is the same sum. */
  uint64_t odd = 0;
  for (int l = 0; l < MAX_LABELS; l++)
    if ((both >> l & 1) && !(keep >> l & 1) &&
        tyto_tensor_shape(a->t)[axis_of(a, l)] !=
            tyto_tensor_shape(b->t)[axis_of(b, l)])
      odd |= UINT64_C(1) << l;
  sum_out(a, odd);
  sum_out(b, odd);
  sa = set_of(a);
  sb = set_of(b);
  both = sa & sb;
  uint64_t batch = both & keep, con = both & ~keep, ao = sa & ~sb,
           bo = sb & ~sa;
  int la[TYTO_MAX_RANK], lb[TYTO_MAX_RANK], nb = 0, na = 0, nbo = 0, nc = 0;
  int bl[TYTO_MAX_RANK], al[TYTO_MAX_RANK], bol[TYTO_MAX_RANK],
      cl[TYTO_MAX_RANK];
  for (int l = 0; l < MAX_LABELS; l++) {
    uint64_t bit = UINT64_C(1) << l;
    if (batch & bit)
      bl[nb++] = l;
    else if (con & bit)
      cl[nc++] = l;
    else if (ao & bit)
      al[na++] = l;
    else if (bo & bit)
      bol[nbo++] = l;
  }
  int64_t sa_b[TYTO_MAX_RANK], sb_b[TYTO_MAX_RANK];
  /* a as [batch, ao, con], b as [batch, con, bo]. */
  int k = 0;
  for (int i = 0; i < nb; i++)
    la[k++] = bl[i];
  for (int i = 0; i < na; i++)
    la[k++] = al[i];
  for (int i = 0; i < nc; i++)
    la[k++] = cl[i];
  permute_to(a, k, la);
  k = 0;
  for (int i = 0; i < nb; i++)
    lb[k++] = bl[i];
  for (int i = 0; i < nc; i++)
    lb[k++] = cl[i];
  for (int i = 0; i < nbo; i++)
    lb[k++] = bol[i];
  permute_to(b, k, lb);
  if (tyto_tensor_is_error(a->t) || tyto_tensor_is_error(b->t))
    return -1;
  for (int i = 0; i < nb; i++) {
    sa_b[i] = tyto_tensor_shape(a->t)[i];
    sb_b[i] = tyto_tensor_shape(b->t)[i];
  }
  /* The extents each operand has (an ellipsis axis may be 1 in it and
   * wider in another operand). */
  const int64_t *xa = tyto_tensor_shape(a->t), *xb = tyto_tensor_shape(b->t);
  int64_t m = 1, kk = 1, nn = 1, ea[TYTO_MAX_RANK], eb[TYTO_MAX_RANK];
  for (int i = 0; i < na; i++)
    m *= ea[i] = xa[nb + i];
  for (int i = 0; i < nc; i++)
    kk *= xa[nb + na + i];
  for (int i = 0; i < nbo; i++)
    nn *= eb[i] = xb[nb + nc + i];
  int64_t shp[TYTO_MAX_RANK + 2];
  tyto_tensor *r;
  if (nc == 0) {
    /* Nothing contracted: a broadcast product [batch, ao, 1] x [batch, 1,
     * bo]. */
    memcpy(shp, sa_b, (size_t)nb * sizeof *shp);
    shp[nb] = m;
    shp[nb + 1] = 1;
    tyto_tensor *x = tyto_reshape(a->t, nb + 2, shp);
    memcpy(shp, sb_b, (size_t)nb * sizeof *shp);
    shp[nb] = 1;
    shp[nb + 1] = nn;
    r = tyto_mul(x, tyto_reshape(b->t, nb + 2, shp));
  } else {
    memcpy(shp, sa_b, (size_t)nb * sizeof *shp);
    shp[nb] = m;
    shp[nb + 1] = kk;
    tyto_tensor *x = tyto_reshape(a->t, nb + 2, shp);
    memcpy(shp, sb_b, (size_t)nb * sizeof *shp);
    shp[nb] = kk;
    shp[nb + 1] = nn;
    r = tyto_matmul(x, tyto_reshape(b->t, nb + 2, shp), 0, 0);
  }
  if (tyto_tensor_is_error(r))
    return -1;
  if (nb + na + nbo > TYTO_MAX_RANK) {
    fail_at(c, -1, "a pairwise product would have %d axes, more than %d",
            nb + na + nbo, TYTO_MAX_RANK);
    return -1;
  }
  /* Back to one axis per label: [batch (broadcast), ao, bo]. */
  int n = 0;
  for (int i = 0; i < nb; i++) {
    shp[n] = tyto_tensor_shape(r)[i];
    a->label[n++] = bl[i];
  }
  for (int i = 0; i < na; i++) {
    shp[n] = ea[i];
    a->label[n++] = al[i];
  }
  for (int i = 0; i < nbo; i++) {
    shp[n] = eb[i];
    a->label[n++] = bol[i];
  }
  a->n = n;
  a->t = tyto_reshape(r, n, shp);
  return tyto_tensor_is_error(a->t) ? -1 : 0;
}

/* The cheapest order of pairwise contractions of the n label sets s (with
 * `out` kept): every order for n <= 4, else greedy. Fills pairs (n - 1
 * of them, indices into the shrinking list, b > a, b removed) and returns
 * the cost. */
static double best_order(const ctx *c, int n, const uint64_t *s, uint64_t out,
                         int exhaustive, int (*pairs)[2]) {
  if (n <= 1)
    return 0;
  double best = -1;
  int bp[MAX_OPERANDS][2];
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) {
      uint64_t rest = out;
      for (int k = 0; k < n; k++)
        if (k != a && k != b)
          rest |= s[k];
      uint64_t u = s[a] | s[b];
      double cost = cost_of(c, u);
      uint64_t ns[MAX_OPERANDS];
      int m = 0;
      for (int k = 0; k < n; k++)
        if (k != b)
          ns[m++] = k == a ? (u & rest) : s[k];
      int sub[MAX_OPERANDS][2];
      if (exhaustive)
        cost += best_order(c, m, ns, out, 1, sub);
      if (best < 0 || cost < best) {
        best = cost;
        bp[0][0] = a;
        bp[0][1] = b;
        if (exhaustive)
          memcpy(bp + 1, sub, (size_t)(m - 1) * sizeof *sub);
      }
    }
  if (!exhaustive) {
    /* Greedy: the cheapest pair now, then the rest the same way. */
    int a = bp[0][0], b = bp[0][1];
    uint64_t rest = out, ns[MAX_OPERANDS];
    for (int k = 0; k < n; k++)
      if (k != a && k != b)
        rest |= s[k];
    int m = 0;
    for (int k = 0; k < n; k++)
      if (k != b)
        ns[m++] = k == a ? ((s[a] | s[b]) & rest) : s[k];
    best += best_order(c, m, ns, out, 0, bp + 1);
  }
  memcpy(pairs, bp, (size_t)(n - 1) * sizeof *bp);
  return best;
}

tyto_tensor *tyto_einsum(const char *spec, size_t n_in,
                         tyto_tensor *const *inputs) {
  tyto_tensor *err;
  if (!inputs && n_in)
    return NULL;
  tyto_graph *g = graph_check("einsum", n_in, inputs, 1, &err);
  if (!g)
    return err;
  ctx c;
  memset(&c, 0, sizeof c);
  c.g = g;
  c.spec = spec ? spec : "";
  if (!spec)
    return graph_fail(g, "einsum: spec is NULL");
  if (n_in == 0)
    return graph_fail(g, "einsum \"%s\": no operands", spec);
  if (n_in > MAX_OPERANDS)
    return graph_fail(g, "einsum \"%s\": %zu operands, at most %d", spec, n_in,
                      MAX_OPERANDS);
  int len = (int)strlen(spec);
  /* The output: after "->" (NumPy) or "=>" (OCANNL); implicit without. */
  const char *arrow = strstr(spec, "->");
  const char *arrow2 = strstr(spec, "=>");
  if (arrow && arrow2)
    return fail_at(&c, (int)(arrow2 - spec), "both \"->\" and \"=>\"");
  if (!arrow)
    arrow = arrow2;
  int lhs_end = arrow ? (int)(arrow - spec) : len;
  if (arrow && (strstr(arrow + 2, "->") || strstr(arrow + 2, "=>")))
    return fail_at(&c, (int)(strstr(arrow + 2, arrow2 ? "=>" : "->") - spec),
                   "a second arrow");
  for (int i = 0; i < lhs_end; i++)
    if (spec[i] == '-' || spec[i] == '>' || spec[i] == '=')
      return fail_at(&c, i, "'%c' outside an arrow \"->\" or \"=>\"", spec[i]);
  /* The operands: separated by ',' (NumPy) or ';' (OCANNL). */
  term t[MAX_OPERANDS];
  size_t nt = 0;
  int start = 0;
  for (int i = 0; i <= lhs_end; i++) {
    if (i < lhs_end && spec[i] != ',' && spec[i] != ';')
      continue;
    if (nt == MAX_OPERANDS)
      return fail_at(&c, i, "more than %d operands", MAX_OPERANDS);
    if (parse_term(&c, start, i, &t[nt]) != 0)
      return tyto_graph_error_tensor(g);
    nt++;
    start = i + 1;
  }
  if (nt != n_in)
    return graph_fail(g,
                      "einsum \"%s\": the spec has %zu operand%s, %zu "
                      "tensor%s given",
                      spec, nt, nt == 1 ? "" : "s", n_in, n_in == 1 ? "" : "s");
  /* Ranks: the letters name axes one by one, an ellipsis the rest. */
  int ell_rank[MAX_OPERANDS];
  for (size_t k = 0; k < nt; k++) {
    int r = tyto_tensor_rank(inputs[k]);
    char s[SHAPE_STR];
    tensor_shape_str(s, inputs[k]);
    if (t[k].ell ? r < t[k].named : r != t[k].named)
      return fail_at(&c, t[k].at,
                     "operand %zu is %s (rank %d); its term names %d "
                     "ax%s%s",
                     k, s, r, t[k].named, t[k].named == 1 ? "is" : "es",
                     t[k].ell ? " besides the ellipsis" : "");
    ell_rank[k] = t[k].ell ? r - t[k].named : 0;
    if (ell_rank[k] > c.n_ell)
      c.n_ell = ell_rank[k];
  }
  /* The ellipsis axes, broadcast right-aligned. */
  int64_t ell_size[TYTO_MAX_RANK];
  for (int e = 0; e < TYTO_MAX_RANK; e++)
    ell_size[e] = 1;
  for (size_t k = 0; k < nt; k++) {
    if (expand(&c, &t[k], ell_rank[k]) != 0)
      return tyto_graph_error_tensor(g);
    const int64_t *sh = tyto_tensor_shape(inputs[k]);
    for (int i = 0; i < t[k].n; i++) {
      int l = t[k].label[i];
      if (l < N_LETTERS)
        continue;
      int e = l - N_LETTERS;
      if (sh[i] != 1 && ell_size[e] != 1 && sh[i] != ell_size[e])
        return fail_at(&c, t[k].ell_pos,
                       "the ellipsis axes of operand %zu cannot be "
                       "broadcast with the others' (extent %" PRId64
                       " against %" PRId64 ")",
                       k, sh[i], ell_size[e]);
      if (sh[i] != 1)
        ell_size[e] = sh[i];
    }
  }
  /* Letter sizes: one extent per label. */
  int seen_at[N_LETTERS];
  for (int l = 0; l < N_LETTERS; l++)
    seen_at[l] = -1;
  for (size_t k = 0; k < nt; k++) {
    const int64_t *sh = tyto_tensor_shape(inputs[k]);
    for (int i = 0; i < t[k].n; i++) {
      int l = t[k].label[i];
      if (l >= N_LETTERS)
        continue;
      if (seen_at[l] >= 0 && c.size[l] != sh[i])
        return fail_at(&c, t[k].pos[i],
                       "'%c' is %" PRId64 " here (operand %zu, axis %d) but "
                       "%" PRId64 " where it first appears",
                       label_char(l), sh[i], k, i, c.size[l]);
      if (seen_at[l] < 0) {
        seen_at[l] = t[k].pos[i];
        c.size[l] = sh[i];
      }
    }
  }
  for (int e = 0; e < c.n_ell; e++)
    c.size[N_LETTERS + e] = ell_size[e];
  /* The output's labels. */
  int out[TYTO_MAX_RANK], n_out = 0;
  uint64_t in_all = 0, once = 0, twice = 0;
  for (size_t k = 0; k < nt; k++)
    for (int i = 0; i < t[k].n; i++) {
      uint64_t bit = UINT64_C(1) << t[k].label[i];
      twice |= in_all & bit;
      in_all |= bit;
    }
  once = in_all & ~twice;
  if (arrow) {
    const char *o = arrow + 2;
    int base = (int)(o - spec);
    int zero = 0, any_ell = 0;
    for (int i = 0; o[i]; i++) {
      char ch = o[i];
      if (ch == ' ' || ch == '|')
        continue;
      if (ch == '0' && arrow2) { /* OCANNL: a rank-0 result */
        zero = 1;
        continue;
      }
      if (ch == '.') {
        if (strncmp(o + i, "...", 3) || any_ell)
          return fail_at(&c, base + i,
                         any_ell ? "a second ellipsis in the output"
                                 : "a '.' that does not start an ellipsis");
        any_ell = 1;
        for (int e = 0; e < c.n_ell; e++)
          out[n_out++] = N_LETTERS + e;
        i += 2;
        continue;
      }
      int l = letter(ch);
      if (l < 0)
        return fail_at(&c, base + i,
                       "'%c' is not a label (labels are letters a-z, A-Z)", ch);
      if (!(in_all >> l & 1))
        return fail_at(&c, base + i, "output label '%c' is in no operand", ch);
      for (int j = 0; j < n_out; j++)
        if (out[j] == l)
          return fail_at(&c, base + i, "output label '%c' appears twice", ch);
      if (n_out >= TYTO_MAX_RANK)
        return fail_at(&c, base + i, "more than %d output axes", TYTO_MAX_RANK);
      out[n_out++] = l;
    }
    if (zero && n_out)
      return fail_at(&c, base, "\"0\" (no axes) with axes beside it");
  } else {
    /* Implicit (NumPy): the ellipsis axes, then the letters used once,
     * in alphabetical order (upper case first, as in ASCII). */
    for (int e = 0; e < c.n_ell; e++)
      out[n_out++] = N_LETTERS + e;
    for (int l = 26; l < N_LETTERS; l++)
      if (once >> l & 1)
        out[n_out++] = l;
    for (int l = 0; l < 26; l++)
      if (once >> l & 1)
        out[n_out++] = l;
    if (n_out > TYTO_MAX_RANK)
      return fail_at(&c, -1, "the implicit output has %d axes, more than %d",
                     n_out, TYTO_MAX_RANK);
  }
  uint64_t out_set = 0;
  for (int i = 0; i < n_out; i++)
    out_set |= UINT64_C(1) << out[i];
  /* Each operand: its diagonals, then the labels nothing else needs. */
  opnd o[MAX_OPERANDS];
  for (size_t k = 0; k < nt; k++) {
    o[k].t = inputs[k];
    o[k].n = t[k].n;
    memcpy(o[k].label, t[k].label, sizeof o[k].label);
    for (int p = 0; p < o[k].n; p++)
      for (int q = p + 1; q < o[k].n; q++)
        if (o[k].label[p] == o[k].label[q]) {
          if (diagonal(&c, &o[k], p, q) != 0)
            return tyto_graph_error_tensor(g);
          q = p; /* the axes moved: look again from p */
        }
  }
  size_t n = nt;
  for (size_t k = 0; k < n; k++) {
    uint64_t others = out_set;
    for (size_t j = 0; j < n; j++)
      if (j != k)
        others |= set_of(&o[j]);
    sum_out(&o[k], set_of(&o[k]) & ~others);
  }
  /* The pairwise contractions, cheapest order first. */
  if (n > 1) {
    uint64_t s[MAX_OPERANDS];
    for (size_t k = 0; k < n; k++)
      s[k] = set_of(&o[k]);
    int pairs[MAX_OPERANDS][2];
    best_order(&c, (int)n, s, out_set, n <= 4, pairs);
    for (size_t step = 0; step + 1 < nt; step++) {
      int a = pairs[step][0], b = pairs[step][1];
      uint64_t keep = out_set;
      for (size_t j = 0; j < n; j++)
        if ((int)j != a && (int)j != b)
          keep |= set_of(&o[j]);
      if (contract(&c, &o[a], &o[b], keep) != 0)
        return tyto_graph_error_tensor(g);
      for (size_t j = (size_t)b; j + 1 < n; j++)
        o[j] = o[j + 1];
      n--;
    }
  }
  /* The result: what the output lacks summed, then the output's order. An
   * ellipsis axis of extent 1 in the result but broadcast wider (no
   * operand held it wider after the sums) is broadcast. */
  opnd *r = &o[0];
  sum_out(r, set_of(r) & ~out_set);
  permute_to(r, n_out, out);
  int64_t want[TYTO_MAX_RANK];
  int wider = 0;
  for (int i = 0; i < n_out; i++) {
    want[i] = c.size[out[i]];
    wider |= tyto_tensor_shape(r->t)[i] != want[i];
  }
  if (wider)
    r->t = tyto_broadcast_to(r->t, n_out, want);
  return r->t;
}
