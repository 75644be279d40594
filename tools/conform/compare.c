/*
 * Random inputs and the comparison of tyto-conform (see compare.h).
 */
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "fmt.h"
#include "model.h"

/* splitmix64 (Steele, Lea, Flood 2014): a small generator whose stream
 * depends only on the seed, so every run draws the same inputs. */
static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s) {
  return (double)(next(s) >> 11) * 0x1.0p-53;
}

/* Values are written rounded to the dtype, so that every input is exact
 * in it and the model computes from what the device reads. */
static void store(uint32_t dtype, void *p, int64_t i, double v) {
  cf_fmt_store(dtype, p, i, v);
}

static double load(uint32_t dtype, const void *p, int64_t i) {
  return cf_fmt_load(dtype, p, i);
}

/* Element offset of matrix number bi of layout l (row-major over the batch
 * axes, the leading rank - 2). */
static int64_t matrix_offset(const tyto_plugin_layout *l, int64_t bi) {
  int64_t off = l->offset;
  for (uint32_t a = l->rank - 2; a-- > 0;) {
    off += (bi % l->shape[a]) * l->strides[a];
    bi /= l->shape[a];
  }
  return off;
}

/* Matrices in the batch of layout l (rank >= 2). */
static int64_t matrix_count(const tyto_plugin_layout *l) {
  int64_t n = 1;
  for (uint32_t a = 0; a + 2 < l->rank; a++)
    n *= l->shape[a];
  return n;
}

/* Gives the matrices of t (values already drawn off the diagonal) the
 * structure of t->values: mirrored for CF_SPD, then a dominant diagonal.
 * Each diagonal element's u and sign come from a hash of its storage
 * position, so a matrix met twice (a stride-0 batch axis) comes out the
 * same both times. */
static void make_matrices(const cf_tensor *t, uint32_t dtype, void *p,
                          uint64_t seed) {
  const tyto_plugin_layout *l = &t->l;
  if (l->rank < 2)
    return;
  const int64_t rows = l->shape[l->rank - 2], cols = l->shape[l->rank - 1];
  const int64_t sr = l->strides[l->rank - 2], sc = l->strides[l->rank - 1];
  const int64_t k = rows < cols ? rows : cols, nb = matrix_count(l);
  for (int64_t bi = 0; bi < nb; bi++) {
    const int64_t off = matrix_offset(l, bi);
    if (t->values == CF_SPD)
      for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < i; j++)
          store(dtype, p, off + i * sr + j * sc,
                load(dtype, p, off + j * sr + i * sc));
    for (int64_t i = 0; i < k; i++) {
      const int64_t at = off + i * sr + i * sc;
      uint64_t h = seed ^ ((uint64_t)at * UINT64_C(0x9E3779B97F4A7C15));
      double sum = 1.0 + uniform(&h);
      for (int64_t j = 0; j < cols; j++)
        if (j != i)
          sum += fabs(load(dtype, p, off + i * sr + j * sc));
      if (t->values != CF_SPD && (next(&h) & 1))
        sum = -sum;
      store(dtype, p, at, sum);
    }
  }
}

void cf_post_apply(const cf_case *c, double *const *out) {
  if (c->post != CF_POST_QR_SIGNS || c->n_out != 2)
    return;
  const tyto_plugin_layout *q = &c->out[0].l, *r = &c->out[1].l;
  const uint32_t lq = q->rank - 2, lr = r->rank - 2;
  const int64_t m = q->shape[lq], k = q->shape[lq + 1], n = r->shape[lr + 1];
  const int64_t nb = matrix_count(q);
  for (int64_t bi = 0; bi < nb; bi++) {
    const int64_t oq = matrix_offset(q, bi), orr = matrix_offset(r, bi);
    for (int64_t i = 0; i < k; i++) {
      if (!(out[1][orr + i * r->strides[lr] + i * r->strides[lr + 1]] < 0))
        continue;
      for (int64_t j = 0; j < m; j++)
        out[0][oq + j * q->strides[lq] + i * q->strides[lq + 1]] *= -1;
      for (int64_t j = 0; j < n; j++)
        out[1][orr + i * r->strides[lr] + j * r->strides[lr + 1]] *= -1;
    }
  }
}

/* CF_BITS_ALL and CF_BITS_EXP (see cf_values). */
static void fill_bits(const cf_tensor *t, uint32_t dtype, void *p,
                      uint64_t *s) {
  const int nbits = cf_fmt_bits(dtype);
  for (int64_t j = 0; j < t->storage; j++) {
    if (t->values == CF_BITS_ALL) {
      const uint64_t bits = nbits == 16   ? (uint64_t)j & 0xffffu
                            : nbits == 32 ? next(s) >> 32
                                          : next(s);
      cf_fmt_store_bits(dtype, p, j, bits);
    } else {
      /* (1 + u) 2^e, e uniform in [lo, hi]: rounded to the dtype, which
       * draws its fraction bits (and below its range, subnormals and
       * zeros). */
      const int64_t lo = (int64_t)t->lo, span = (int64_t)t->hi - lo + 1;
      const int e = (int)(lo + (int64_t)(next(s) % (uint64_t)span));
      const double v = ldexp(1.0 + uniform(s), e);
      store(dtype, p, j, next(s) & 1 ? -v : v);
    }
  }
}

void cf_values_fill(const cf_tensor *t, uint32_t dtype, void *p,
                    uint64_t seed) {
  uint64_t s = seed;
  const int bits = t->values == CF_BITS_ALL || t->values == CF_BITS_EXP;
  if (bits)
    fill_bits(t, dtype, p, &s);
  for (int64_t j = 0; j < t->storage && !bits; j++) {
    double u = uniform(&s), v;
    if (t->values == CF_WHOLE) {
      /* A whole number the dtype holds (not every one above 2^p is:
       * bf16 has 299 round to 300, which would index past an axis). */
      v = floor(t->lo + u * (t->hi - t->lo + 1));
      while (v > t->lo && cf_fmt_round(dtype, v) != v)
        v -= 1;
    } else if (t->values == CF_SIGNED)
      v = (next(&s) & 1 ? -1 : 1) * (t->lo + u * (t->hi - t->lo));
    else
      v = t->lo + u * (t->hi - t->lo);
    store(dtype, p, j, v);
  }
  if (t->values == CF_DIAG_DOMINANT || t->values == CF_SPD)
    make_matrices(t, dtype, p, seed);
  if (t->list && t->n_list) {
    int64_t div = 1;
    for (uint32_t k = t->grid_pos + 1; k < t->grid_dims; k++)
      div *= t->n_list;
    for (int64_t j = 0; j < t->storage; j++)
      store(dtype, p, j, t->list[(j / div) % t->n_list]);
  }
  for (uint32_t k = 0; k < t->n_at; k++)
    if (t->at[k] < t->storage)
      store(dtype, p, t->at[k], t->v[k]);
}

int cf_values_make(const cf_case *c, uint64_t seed, void **in, void **out) {
  uint64_t s = seed;
  int bad = 0;
  for (uint32_t i = 0; i < CF_MAX_IN; i++)
    in[i] = NULL;
  for (uint32_t i = 0; i < CF_MAX_OUT; i++)
    out[i] = NULL;
  for (uint32_t i = 0; i < c->n_in; i++) {
    const cf_tensor *t = &c->in[i];
    const size_t es = cf_dtype_size(t->l.dtype);
    in[i] = malloc((size_t)(t->storage ? t->storage : 1) * es);
    if (in[i] == NULL) {
      bad = 1;
      continue;
    }
    /* One stream per input, so that adding an input to a case leaves the
     * others' values alone. */
    cf_values_fill(t, t->l.dtype, in[i], next(&s));
  }
  for (uint32_t i = 0; i < c->n_out; i++) {
    const cf_tensor *t = &c->out[i];
    const size_t es = cf_dtype_size(t->l.dtype);
    out[i] = malloc((size_t)(t->storage ? t->storage : 1) * es);
    if (out[i] == NULL) {
      bad = 1;
      continue;
    }
    /* A value no op of the catalogue produces from these inputs: an
     * element left unwritten shows up against the reference. */
    for (int64_t j = 0; j < t->storage; j++)
      store(t->l.dtype, out[i], j, -777.0);
  }
  if (bad)
    cf_values_free(in, out);
  return bad ? -1 : 0;
}

void cf_values_free(void **in, void **out) {
  for (uint32_t i = 0; i < CF_MAX_IN; i++) {
    free(in[i]);
    in[i] = NULL;
  }
  for (uint32_t i = 0; i < CF_MAX_OUT; i++) {
    free(out[i]);
    out[i] = NULL;
  }
}

void cf_compare_n(uint32_t n_out, const int64_t *count, double *const *got,
                  double *const *want, double rtol, double atol, cf_cmp *r) {
  memset(r, 0, sizeof *r);
  for (uint32_t o = 0; o < n_out; o++)
    for (int64_t i = 0; i < count[o]; i++) {
      const double g = got[o][i], w = want[o][i];
      if (!isfinite(g) || !isfinite(w)) {
        int same = (isnan(g) && isnan(w)) || (isinf(g) && g == w);
        if (!same && r->specials++ == 0) {
          r->sp_out = o;
          r->sp_at = i;
          r->sp_got = g;
          r->sp_want = w;
        }
        continue;
      }
      /* Zero tolerance (the integer dtypes): equal or wrong. */
      double err = atol == 0 && rtol == 0
                       ? (g == w ? 0 : INFINITY)
                       : fabs(g - w) / (atol + rtol * fabs(w));
      if (err > r->max_err) {
        r->max_err = err;
        r->out = o;
        r->at = i;
        r->got = g;
        r->want = w;
      }
    }
}

void cf_compare(const cf_case *c, double *const *got, double *const *want,
                cf_cmp *r) {
  int64_t count[CF_MAX_OUT];
  for (uint32_t o = 0; o < c->n_out; o++)
    count[o] = c->out[o].storage;
  cf_compare_n(c->n_out, count, got, want, c->rtol, c->atol, r);
}

int cf_cmp_pass(const cf_cmp *r) {
  return r->max_err <= 1.0 && !r->specials;
}
