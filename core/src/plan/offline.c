/*
 * The planner's offline fits (plan_internal.h): once an order's lifetimes
 * are known, give its chains offsets greedily by size or by breadth
 * instead of online best fit, and keep whatever needs the smallest arena.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "plan_internal.h"

/* Once an order's lifetimes are all known, its chains can be fitted in any
 * sequence, each at the lowest offset (aligned for all of its values)
 * where it overlaps no chain fitted before it that is alive at a common
 * position: first fit over the gaps those chains leave. Greedy by size
 * takes the largest chains first; greedy by breadth takes first the
 * chains alive at the busiest positions, the largest first among equals
 * (Pisarchyk and Lee, "Efficient Memory Management for Deep Neural Net
 * Inference", 2020: TensorFlow Lite's planners). The online pass's
 * in-place decisions stay: a chain has one offset for all its values.
 *
 * The fitted chains that share a position with chain c = [s, e] are those
 * alive at s, found on the path to s in a segment tree over the positions
 * (a chain is filed under the O(log n) nodes that tile its lifetime), and
 * those beginning in (s, e], a run of the chains' numbering. Fitting c
 * thus reads and sorts each of them once: over a whole fit, the
 * work grows with the pairs of chains whose lifetimes overlap, which can
 * be quadratic in the chains (a training step's saved activations all
 * overlap one another). Above MAX_PAIRS pairs in an order the offline
 * fits are skipped there and best fit stands alone. Measured on this
 * machine (2 cores, -O2): 10 to 20 ns per pair and fit, so at the bound
 * an order's two fits take about 1 ms, plan_build's three
 * orders about 3 ms (the 1,000-step problem of tests/plan). The CNN
 * training step of tools/models.c (31 chains, 200 pairs) is far below;
 * the LSTM step (4,000 chains, 2.3 million pairs) and the 15,000-step test
 * problem (5 million) are far above: there they would take about 30 and
 * 130 ms an order, against a compile budget of 40 ms. */
#ifndef MAX_PAIRS
#define MAX_PAIRS 40000
#endif

void offline_free(offline *o) {
  free(o->at);
  free(o->n);
  free(o->sp);
  free(o->from);
  free(o->seq);
  free(o->tmp);
  free(o->key);
  free(o->fitted);
  free(o->best);
  free(o->gaps);
  free(o->live);
}

/* Scratch for ns positions, enough to count pairs; -1 out of memory. */
int offline_init(offline *o, size_t ns) {
  memset(o, 0, sizeof *o);
  for (o->m = 1; o->m < ns; o->m *= 2)
    ;
  o->from = malloc((ns + 1) * sizeof *o->from);
  return o->from ? 0 : -1;
}

/* The rest, for nv values (at most as many chains), when first needed. */
static int offline_alloc(offline *o, size_t nv) {
  if (o->at)
    return 0;
  nv = nv ? nv : 1;
  o->at = malloc((2 * o->m + 1) * sizeof *o->at);
  o->n = malloc(2 * o->m * sizeof *o->n);
  o->seq = malloc(nv * sizeof *o->seq);
  o->tmp = malloc(nv * sizeof *o->tmp);
  o->key = malloc(nv * sizeof *o->key);
  o->fitted = malloc(nv * sizeof *o->fitted);
  o->best = malloc(nv * sizeof *o->best);
  o->gaps = malloc(2 * nv * sizeof *o->gaps);
  o->live = malloc(2 * o->m * sizeof *o->live);
  return o->at && o->n && o->seq && o->tmp && o->key && o->fitted && o->best &&
                 o->gaps && o->live
             ? 0
             : -1;
}

/* Pairs of chains alive at a common position: all pairs but those where
 * one ends before the other begins. */
static uint64_t overlap_pairs(const chain *ch, size_t nc, offline *o,
                              size_t ns) {
  uint32_t *ended = o->from;
  uint64_t apart = 0;
  memset(ended, 0, (ns + 1) * sizeof *ended);
  for (size_t c = 0; c < nc; c++)
    ended[ch[c].last + 1]++;
  for (size_t t = 0; t < ns; t++)
    ended[t + 1] += ended[t];
  for (size_t c = 0; c < nc; c++)
    apart += ended[ch[c].first];
  return nc * (nc - (nc > 0)) / 2 - apart;
}

/* Sorts the ids seq[0 .. n) by key[id], largest first, keeping the order
 * of equal keys: LSD radix sort, a byte a pass, no pass for a byte all
 * keys share. */
static void sort_desc(offline *o, size_t n) {
  uint64_t all_or = 0, all_and = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    all_or |= o->key[o->seq[i]];
    all_and &= o->key[o->seq[i]];
  }
  for (unsigned sh = 0; sh < 64; sh += 8) {
    if (!((all_or ^ all_and) >> sh & 255))
      continue;
    size_t at[256] = {0};
    for (size_t i = 0; i < n; i++)
      at[255 - (o->key[o->seq[i]] >> sh & 255)]++;
    for (size_t d = 0, sum = 0; d < 256; d++) {
      size_t c = at[d];
      at[d] = sum;
      sum += c;
    }
    for (size_t i = 0; i < n; i++)
      o->tmp[at[255 - (o->key[o->seq[i]] >> sh & 255)]++] = o->seq[i];
    uint32_t *t = o->seq;
    o->seq = o->tmp;
    o->tmp = t;
  }
}

/* Sorts n spans by lo: quicksort (median of three) down to insertion
 * sort, looping on the larger part so that the stack stays logarithmic. */
static void quick_spans(span *s, size_t n) {
  while (n > 16) {
    uint64_t a = s[0].lo, b = s[n / 2].lo, c = s[n - 1].lo;
    uint64_t p = a < b ? (b < c   ? b
                          : a < c ? c
                                  : a)
                       : (a < c   ? a
                          : b < c ? c
                                  : b);
    size_t i = 0, j = n - 1;
    for (;;) {
      while (s[i].lo < p)
        i++;
      while (s[j].lo > p)
        j--;
      if (i >= j)
        break;
      span t = s[i];
      s[i++] = s[j];
      s[j--] = t;
    }
    /* s[0 .. j] <= p <= s[j + 1 .. n) */
    if (j + 1 < n - j - 1) {
      quick_spans(s, j + 1);
      s += j + 1;
      n -= j + 1;
    } else {
      quick_spans(s + j + 1, n - j - 1);
      n = j + 1;
    }
  }
  for (size_t i = 1; i < n; i++) {
    span t = s[i];
    size_t j = i;
    for (; j > 0 && s[j - 1].lo > t.lo; j--)
      s[j] = s[j - 1];
    s[j] = t;
  }
}

/* Sorts n spans by lo, through tmp (room for n); returns where they are.
 * From a few hundred spans (measured), LSD radix sort as sort_desc does,
 * smallest first. */
static span *sort_spans(span *s, span *tmp, size_t n) {
  if (n < 400) {
    quick_spans(s, n);
    return s;
  }
  uint64_t all_or = 0, all_and = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    all_or |= s[i].lo;
    all_and &= s[i].lo;
  }
  for (unsigned sh = 0; sh < 64; sh += 8) {
    if (!((all_or ^ all_and) >> sh & 255))
      continue;
    size_t at[256] = {0};
    for (size_t i = 0; i < n; i++)
      at[s[i].lo >> sh & 255]++;
    for (size_t d = 0, sum = 0; d < 256; d++) {
      size_t c = at[d];
      at[d] = sum;
      sum += c;
    }
    for (size_t i = 0; i < n; i++)
      tmp[at[s[i].lo >> sh & 255]++] = s[i];
    span *t = s;
    s = tmp;
    tmp = t;
  }
  return s;
}

/* The lowest multiple of al from which `bytes` bytes overlap none of the
 * n spans (which it sorts, through tmp): a sweep by lo that stops at the
 * first gap that fits. */
static uint64_t lowest_gap(span *s, span *tmp, size_t n, uint64_t bytes,
                           uint64_t al) {
  uint64_t y = 0;
  if (n <= 24) {
    /* Selection, which stops with the sweep (often before half). */
    for (size_t i = 0; i < n; i++) {
      size_t min = i;
      for (size_t j = i + 1; j < n; j++)
        min = s[j].lo < s[min].lo ? j : min;
      span t = s[min];
      s[min] = s[i];
      if (t.lo >= y + bytes)
        return y;
      if (t.hi > y)
        y = align_up(t.hi, al);
    }
    return y;
  }
  const span *g = sort_spans(s, tmp, n);
  for (size_t i = 0; i < n && g[i].lo < y + bytes; i++)
    if (g[i].hi > y)
      y = align_up(g[i].hi, al);
  return y;
}

/* Files every chain's lifetime under the tree's nodes that tile it
 * (counting only: at[] from n[]), and numbers the positions' first
 * chains. 0, or -1 when out of memory. */
static int offline_index(const chain *ch, size_t nc, offline *o, size_t ns) {
  size_t m = o->m;
  memset(o->n, 0, 2 * m * sizeof *o->n);
  for (size_t c = 0; c < nc; c++)
    for (size_t l = ch[c].first + m, r = ch[c].last + m + 1; l < r;
         l /= 2, r /= 2) {
      if (l & 1)
        o->n[l++]++;
      if (r & 1)
        o->n[--r]++;
    }
  o->at[0] = 0;
  for (size_t q = 0; q < 2 * m; q++)
    o->at[q + 1] = o->at[q] + o->n[q];
  if (o->at[2 * m] > o->sp_cap) {
    span *sp = realloc(o->sp, o->at[2 * m] * sizeof *sp);
    if (!sp)
      return -1;
    o->sp = sp;
    o->sp_cap = o->at[2 * m];
  }
  /* Chains are numbered in order of their first position. */
  for (size_t t = 0, c = 0; t <= ns; t++) {
    while (c < nc && ch[c].first < t)
      c++;
    o->from[t] = (uint32_t)c;
  }
  return 0;
}

/* Fits the chains, in the order o->seq, into o->fitted; returns the
 * arena's size. */
static uint64_t first_fit(const chain *ch, size_t nc, offline *o) {
  size_t m = o->m;
  uint64_t end = 0;
  memset(o->n, 0, 2 * m * sizeof *o->n);
  for (size_t c = 0; c < nc; c++)
    o->fitted[c].lo = UINT64_MAX;
  for (size_t k = 0; k < nc; k++) {
    uint32_t c = o->seq[k], s = ch[c].first, e = ch[c].last;
    uint64_t bytes = ch[c].bytes;
    size_t n = 0;
    for (size_t q = s + m; q; q /= 2)
      for (const span *f = o->sp + o->at[q], *to = f + o->n[q]; f < to; f++)
        o->gaps[n++] = *f;
    for (uint32_t j = o->from[s + 1]; j < o->from[e + 1]; j++) {
      o->gaps[n] = o->fitted[j]; /* kept when fitted; no branch to mispredict */
      n += o->fitted[j].lo != UINT64_MAX;
    }
    uint64_t y = lowest_gap(o->gaps, o->gaps + nc, n, bytes, ch[c].align);
    span p = o->fitted[c] = (span){y, y + bytes};
    for (size_t l = s + m, r = e + m + 1; l < r; l /= 2, r /= 2) {
      if (l & 1) {
        o->sp[o->at[l] + o->n[l]++] = p;
        l++;
      }
      if (r & 1) {
        r--;
        o->sp[o->at[r] + o->n[r]++] = p;
      }
    }
    if (p.hi > end)
      end = p.hi;
  }
  return end;
}

/* key[c]: the most bytes alive at one position of chain c's lifetime,
 * from a max tree over the positions. */
static void breadth_keys(const chain *ch, size_t nc, offline *o, size_t ns) {
  uint64_t *t = o->live, *leaf = t + o->m;
  memset(leaf, 0, o->m * sizeof *leaf);
  /* Live bytes by differences; wrapping is harmless, the sums are exact. */
  for (size_t c = 0; c < nc; c++) {
    leaf[ch[c].first] += ch[c].bytes;
    if (ch[c].last + 1 < ns)
      leaf[ch[c].last + 1] -= ch[c].bytes;
  }
  for (size_t i = 1; i < ns; i++)
    leaf[i] += leaf[i - 1];
  for (size_t i = o->m; i-- > 1;)
    t[i] = t[2 * i] > t[2 * i + 1] ? t[2 * i] : t[2 * i + 1];
  for (size_t c = 0; c < nc; c++) {
    uint64_t top = 0;
    for (size_t l = ch[c].first + o->m, r = ch[c].last + o->m + 1; l < r;
         l /= 2, r /= 2) {
      if (l & 1 && t[l++] > top)
        top = t[l - 1];
      if (r & 1 && t[--r] > top)
        top = t[r];
    }
    o->key[c] = top;
  }
}

int offline_fit(const chain *ch, size_t nc, offline *o, size_t nv, size_t ns,
                uint64_t peak, uint64_t tried[PLAN_FIT_COUNT], uint64_t *bytes,
                plan_fit *how) {
  *how = PLAN_FIT_BEST_FIT;
  tried[PLAN_FIT_BEST_FIT] = *bytes;
  for (int s = 1; s < PLAN_FIT_COUNT; s++)
    tried[s] = UINT64_MAX;
  /* Every fit needs `peak` bytes: there, none can do better. */
  if (*bytes == peak || overlap_pairs(ch, nc, o, ns) > MAX_PAIRS)
    return 0;
  if (offline_alloc(o, nv) || offline_index(ch, nc, o, ns))
    return -1;
  for (int s = 1; s<PLAN_FIT_COUNT && * bytes> peak; s++) {
    for (uint32_t c = 0; c < nc; c++) {
      o->seq[c] = c;
      o->key[c] = ch[c].bytes;
    }
    sort_desc(o, nc);
    if (s == PLAN_FIT_BY_BREADTH) {
      breadth_keys(ch, nc, o, ns);
      sort_desc(o, nc);
    }
    uint64_t end = tried[s] = first_fit(ch, nc, o);
    if (end < *bytes) {
      *bytes = end;
      *how = (plan_fit)s;
      for (size_t c = 0; c < nc; c++)
        o->best[c] = o->fitted[c].lo;
    }
  }
  return 0;
}
