/*
 * The memory planner (plan.h): index and validate the problem once, build
 * up to three topological orders, simulate each with reference-counted
 * lifetimes over a best-fit arena, fit the same lifetimes again offline
 * (greedy by size, by breadth) where that is affordable, and keep the
 * cheapest. plan_verify (verify.c) checks a result without sharing any of
 * this code.
 */
#include "config.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "plan_internal.h"

/* Indices are 32-bit inside; counts beyond this are refused as invalid. */
#define MAX_ITEMS (UINT32_C(1) << 30)
/* Sizes (plus alignments) must add up to at most this, so that arena ends
 * and the greedy scores (freed minus allocated) never overflow. */
#define MAX_TOTAL ((uint64_t)INT64_MAX)

void plan_say(char *msg, size_t n, const char *fmt, ...) {
  if (!msg || !n)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, n, fmt, ap);
  va_end(ap);
}

/* ---- The problem, indexed ---------------------------------------------- */

/* The problem copied into compact arrays once: each order's simulation
 * then touches one record per value and one run of ids per step. */
typedef struct vinfo {
  uint64_t bytes;
  uint32_t align;
  uint32_t n_reads;  /* reads over all steps (repeats count) */
  uint32_t producer; /* its step, or NONE */
  uint32_t pinned;
} vinfo;

typedef struct sinfo {
  uint32_t at; /* inputs io[at .. at + n_in), then the outputs */
  uint32_t n_in, n_out;
  uint32_t mask;
} sinfo;

typedef struct ix {
  size_t nv, ns;
  vinfo *v;
  sinfo *s;
  uint32_t *io;
  uint32_t *rd_at; /* value v's readers are rd[rd_at[v] .. rd_at[v + 1]) */
  uint32_t *rd;    /* in step order, a step once per read */
  size_t max_in;
  uint64_t pinned_bytes, naive_bytes;
  int given_ok; /* the indices are a topological order */
} ix;

static void ix_free(ix *x) {
  free(x->v);
  free(x->s);
  free(x->io);
  free(x->rd_at);
  free(x->rd);
}

static const uint32_t *ins(const ix *x, uint32_t s) {
  return x->io + x->s[s].at;
}

static const uint32_t *outs(const ix *x, uint32_t s) {
  return x->io + x->s[s].at + x->s[s].n_in;
}

/* Finds a step on a cycle among those Kahn's algorithm left (done[s] == 0)
 * and describes it. Every such step reads a value whose producer is also
 * left, so walking producers n times ends on a cycle. */
static void describe_cycle(const ix *x, const unsigned char *done, char *msg,
                           size_t n) {
  uint32_t cur = 0, v = 0, q = 0;
  while (done[cur])
    cur++;
  for (size_t walk = 0; walk <= x->ns; walk++) {
    const uint32_t *in = ins(x, cur);
    for (size_t k = 0; k < x->s[cur].n_in; k++) {
      uint32_t p = x->v[in[k]].producer;
      if (p != NONE && !done[p]) {
        v = in[k];
        q = p;
        break;
      }
    }
    if (walk < x->ns)
      cur = q;
  }
  if (q == cur)
    plan_say(msg, n,
             "the steps are not a DAG: step %u reads value %u, which it "
             "produces itself",
             (unsigned)cur, (unsigned)v);
  else
    plan_say(msg, n,
             "the steps are not a DAG: step %u is on a cycle (it reads "
             "value %u, produced by step %u, which depends on step %u)",
             (unsigned)cur, (unsigned)v, (unsigned)q, (unsigned)cur);
}

/* Kahn's algorithm: 0 when the steps form a DAG, else -2 with a cycle. */
static int check_acyclic(const ix *x, char *msg, size_t n) {
  size_t ns = x->ns, head = 0, tail = 0;
  uint32_t *indeg = calloc(ns ? ns : 1, sizeof *indeg);
  uint32_t *queue = malloc((ns ? ns : 1) * sizeof *queue);
  unsigned char *done = calloc(ns ? ns : 1, 1);
  int rc = 0;
  if (!indeg || !queue || !done) {
    rc = -1;
    goto out;
  }
  for (uint32_t s = 0; s < ns; s++)
    for (size_t k = 0; k < x->s[s].n_in; k++)
      if (x->v[ins(x, s)[k]].producer != NONE)
        indeg[s]++;
  for (size_t s = 0; s < ns; s++)
    if (!indeg[s])
      queue[tail++] = (uint32_t)s;
  while (head < tail) {
    uint32_t s = queue[head++];
    done[s] = 1;
    for (size_t j = 0; j < x->s[s].n_out; j++) {
      uint32_t o = outs(x, s)[j];
      for (size_t i = x->rd_at[o]; i < x->rd_at[o + 1]; i++)
        if (--indeg[x->rd[i]] == 0)
          queue[tail++] = x->rd[i];
    }
  }
  if (tail < ns) {
    describe_cycle(x, done, msg, n);
    rc = -2;
  }
out:
  free(indeg);
  free(queue);
  free(done);
  return rc;
}

/* Checks the steps' lists and records each value's producer and reads. */
static int ix_steps(const plan_problem *p, ix *x, size_t *n_ids, char *msg,
                    size_t n) {
  size_t nv = x->nv, n_reads = 0;
  *n_ids = 0;
  for (size_t s = 0; s < x->ns; s++) {
    const plan_step *st = &p->steps[s];
    if ((st->n_in && !st->in) || (st->n_out && !st->out)) {
      plan_say(msg, n,
               "step %zu has %zu inputs and %zu outputs, but a NULL %s "
               "list",
               s, st->n_in, st->n_out,
               st->n_in && !st->in ? "input" : "output");
      return -2;
    }
    if (st->n_in > MAX_ITEMS - n_reads || st->n_out > MAX_ITEMS) {
      plan_say(msg, n, "step %zu: too many inputs or outputs (%zu, %zu)", s,
               st->n_in, st->n_out);
      return -2;
    }
    n_reads += st->n_in;
    for (size_t j = 0; j < st->n_out; j++) {
      uint32_t o = st->out[j];
      if (o >= nv) {
        plan_say(msg, n,
                 "step %zu writes value %u, but there are only %zu values", s,
                 (unsigned)o, nv);
        return -2;
      }
      if (x->v[o].producer != NONE) {
        plan_say(msg, n,
                 "value %u is produced by steps %u and %zu; a value has "
                 "one producer",
                 (unsigned)o, (unsigned)x->v[o].producer, s);
        return -2;
      }
      x->v[o].producer = (uint32_t)s;
    }
    /* Outputs are distinct values, so they number at most nv. */
    *n_ids += st->n_in + st->n_out;
    if (st->n_in > x->max_in)
      x->max_in = st->n_in;
  }
  x->given_ok = 1;
  for (size_t s = 0; s < x->ns; s++) {
    const plan_step *st = &p->steps[s];
    for (size_t k = 0; k < st->n_in; k++) {
      uint32_t v = st->in[k];
      if (v >= nv) {
        plan_say(msg, n,
                 "step %zu reads value %u, but there are only %zu values", s,
                 (unsigned)v, nv);
        return -2;
      }
      if (x->v[v].producer == NONE && !x->v[v].pinned) {
        plan_say(msg, n,
                 "step %zu reads value %u, which no step produces and "
                 "which is not pinned",
                 s, (unsigned)v);
        return -2;
      }
      if (x->v[v].producer != NONE && x->v[v].producer >= s)
        x->given_ok = 0;
      x->v[v].n_reads++;
    }
  }
  return 0;
}

/* Validates p and fills x. 0, -1 (memory) or -2 (invalid, msg says why). */
static int ix_build(const plan_problem *p, ix *x, char *msg, size_t n) {
  memset(x, 0, sizeof *x);
  if (!p) {
    plan_say(msg, n, "no problem given");
    return -2;
  }
  size_t nv = p->n_values, ns = p->n_steps;
  if (nv > MAX_ITEMS || ns > MAX_ITEMS) {
    plan_say(msg, n,
             "%zu values and %zu steps: at most %u of each are supported", nv,
             ns, (unsigned)MAX_ITEMS);
    return -2;
  }
  if ((nv && !p->values) || (ns && !p->steps)) {
    plan_say(msg, n, "%zu values and %zu steps, but a NULL %s array", nv, ns,
             nv && !p->values ? "values" : "steps");
    return -2;
  }
  x->nv = nv;
  x->ns = ns;
  x->v = malloc((nv ? nv : 1) * sizeof *x->v);
  x->s = malloc((ns ? ns : 1) * sizeof *x->s);
  x->rd_at = calloc(nv + 1, sizeof *x->rd_at);
  if (!x->v || !x->s || !x->rd_at)
    return -1;
  uint64_t total = 0;
  for (size_t v = 0; v < nv; v++) {
    uint64_t b = p->values[v].bytes, a = p->values[v].align;
    if (!a || (a & (a - 1))) {
      plan_say(msg, n,
               "value %zu has alignment %u; alignments must be powers of "
               "two",
               v, (unsigned)a);
      return -2;
    }
    if (b > MAX_TOTAL - total || a > MAX_TOTAL - total - b) {
      plan_say(msg, n,
               "the values' sizes add up to more than 2^63 bytes (at "
               "value %zu)",
               v);
      return -2;
    }
    total += b + a;
    x->naive_bytes += b;
    if (p->values[v].pinned)
      x->pinned_bytes += b;
    x->v[v] = (vinfo){b, (uint32_t)a, 0, NONE, p->values[v].pinned != 0};
  }
  size_t n_ids;
  int rc = ix_steps(p, x, &n_ids, msg, n);
  if (rc)
    return rc;
  x->io = malloc((n_ids ? n_ids : 1) * sizeof *x->io);
  x->rd = malloc((n_ids ? n_ids : 1) * sizeof *x->rd);
  if (!x->io || !x->rd)
    return -1;
  uint32_t at = 0;
  for (size_t s = 0; s < ns; s++) {
    const plan_step *st = &p->steps[s];
    x->s[s] =
        (sinfo){at, (uint32_t)st->n_in, (uint32_t)st->n_out, st->inplace_mask};
    if (st->n_in)
      memcpy(x->io + at, st->in, st->n_in * sizeof *x->io);
    if (st->n_out)
      memcpy(x->io + at + st->n_in, st->out, st->n_out * sizeof *x->io);
    at += (uint32_t)(st->n_in + st->n_out);
  }
  /* Readers by value (counting sort), in step order. */
  for (size_t v = 0; v < nv; v++)
    x->rd_at[v + 1] = x->rd_at[v] + x->v[v].n_reads;
  uint32_t *fill = malloc((nv ? nv : 1) * sizeof *fill);
  if (!fill)
    return -1;
  memcpy(fill, x->rd_at, nv * sizeof *fill);
  for (uint32_t s = 0; s < ns; s++)
    for (size_t k = 0; k < x->s[s].n_in; k++)
      x->rd[fill[ins(x, s)[k]]++] = s;
  free(fill);
  /* A topological numbering proves there is no cycle. */
  return x->given_ok ? 0 : check_acyclic(x, msg, n);
}

/* ---- Orders ------------------------------------------------------------- */

typedef struct hent {
  int64_t score;
  uint32_t step;
} hent;

/* Most bytes freed net first, then the lowest index. */
static int hbetter(hent a, hent b) {
  return a.score > b.score || (a.score == b.score && a.step < b.step);
}

static void hpush(hent *h, size_t *n, hent e) {
  size_t i = (*n)++;
  while (i) {
    size_t up = (i - 1) / 2;
    if (!hbetter(e, h[up]))
      break;
    h[i] = h[up];
    i = up;
  }
  h[i] = e;
}

static hent hpop(hent *h, size_t *n) {
  hent top = h[0], last = h[--*n];
  size_t i = 0, m = *n;
  if (!m)
    return top;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= m)
      break;
    if (c + 1 < m && hbetter(h[c + 1], h[c]))
      c++;
    if (!hbetter(h[c], last))
      break;
    h[i] = h[c];
    i = c;
  }
  h[i] = last;
  return top;
}

/* Memory-aware list scheduling. A step's score is the bytes it frees (its
 * non-pinned inputs that no other unscheduled step reads) minus the bytes
 * it allocates (its non-pinned outputs that someone reads; an unread one
 * is freed as soon as it is made). Scores only grow, when another reader
 * of an input runs, so the heap holds stale entries that are skipped. */
typedef struct gval {
  uint32_t left;  /* distinct unscheduled readers; 0 when pinned */
  uint32_t stamp; /* 1 + the last step that counted it */
} gval;

static int order_greedy(const ix *x, uint32_t *out) {
  size_t ns = x->ns, nv = x->nv, hn = 0, done = 0;
  uint32_t *indeg = calloc(ns ? ns : 1, sizeof *indeg);
  int64_t *score = calloc(ns ? ns : 1, sizeof *score);
  unsigned char *sched = calloc(ns ? ns : 1, 1);
  gval *gv = calloc(nv ? nv : 1, sizeof *gv);
  hent *heap = malloc((ns + nv + 1) * sizeof *heap);
  int rc = -1;
  if (!indeg || !score || !sched || !gv || !heap)
    goto out;
  for (size_t v = 0; v < nv; v++)
    if (!x->v[v].pinned)
      for (size_t i = x->rd_at[v]; i < x->rd_at[v + 1]; i++)
        if (i == x->rd_at[v] || x->rd[i] != x->rd[i - 1])
          gv[v].left++;
  for (uint32_t s = 0; s < ns; s++) {
    const uint32_t *in = ins(x, s), *ou = outs(x, s);
    for (size_t k = 0; k < x->s[s].n_in; k++) {
      gval *g = &gv[in[k]];
      if (x->v[in[k]].producer != NONE)
        indeg[s]++;
      if (g->left == 1 && g->stamp != s + 1) {
        g->stamp = s + 1;
        score[s] += (int64_t)x->v[in[k]].bytes;
      }
    }
    for (size_t j = 0; j < x->s[s].n_out; j++)
      if (!x->v[ou[j]].pinned && x->v[ou[j]].n_reads)
        score[s] -= (int64_t)x->v[ou[j]].bytes;
  }
  for (size_t v = 0; v < nv; v++)
    gv[v].stamp = 0;
  for (size_t s = 0; s < ns; s++)
    if (!indeg[s])
      hpush(heap, &hn, (hent){score[s], (uint32_t)s});
  while (hn) {
    hent e = hpop(heap, &hn);
    uint32_t s = e.step;
    if (sched[s] || e.score != score[s])
      continue;
    sched[s] = 1;
    out[done++] = s;
    const uint32_t *in = ins(x, s), *ou = outs(x, s);
    for (size_t k = 0; k < x->s[s].n_in; k++) {
      uint32_t v = in[k];
      gval *g = &gv[v];
      if (!g->left || g->stamp == s + 1)
        continue;
      g->stamp = s + 1;
      if (--g->left != 1)
        continue;
      /* One reader is left: it would now free v. Happens once per value. */
      for (size_t i = x->rd_at[v]; i < x->rd_at[v + 1]; i++) {
        uint32_t t = x->rd[i];
        if (!sched[t]) {
          score[t] += (int64_t)x->v[v].bytes;
          if (!indeg[t])
            hpush(heap, &hn, (hent){score[t], t});
          break;
        }
      }
    }
    for (size_t j = 0; j < x->s[s].n_out; j++) {
      uint32_t o = ou[j];
      for (size_t i = x->rd_at[o]; i < x->rd_at[o + 1]; i++)
        if (--indeg[x->rd[i]] == 0)
          hpush(heap, &hn, (hent){score[x->rd[i]], x->rd[i]});
    }
  }
  assert(done == ns);
  rc = 0;
out:
  free(indeg);
  free(score);
  free(sched);
  free(gv);
  free(heap);
  return rc;
}

/* Depth-first post-order from the sinks (steps whose outputs nobody
 * reads), in index order, visiting each step's inputs in order:
 * iterative, as chains can be tens of thousands of steps deep. */
static int order_depth(const ix *x, uint32_t *out) {
  size_t ns = x->ns, done = 0;
  unsigned char *seen = calloc(ns ? ns : 1, 1);
  uint32_t *stk = malloc((ns ? ns : 1) * sizeof *stk);
  uint32_t *next = malloc((ns ? ns : 1) * sizeof *next);
  if (!seen || !stk || !next) {
    free(seen);
    free(stk);
    free(next);
    return -1;
  }
  for (uint32_t root = 0; root < ns; root++) {
    int sink = 1;
    for (size_t j = 0; j < x->s[root].n_out && sink; j++)
      sink = x->v[outs(x, root)[j]].n_reads == 0;
    if (!sink || seen[root])
      continue;
    size_t top = 0;
    stk[top] = root;
    next[top++] = 0;
    seen[root] = 1;
    while (top) {
      uint32_t s = stk[top - 1];
      if (next[top - 1] < x->s[s].n_in) {
        uint32_t q = x->v[ins(x, s)[next[top - 1]++]].producer;
        if (q != NONE && !seen[q]) {
          seen[q] = 1;
          stk[top] = q;
          next[top++] = 0;
        }
      } else {
        out[done++] = s;
        top--;
      }
    }
  }
  /* Every step of a DAG reaches a sink, so all were emitted. */
  assert(done == ns);
  free(seen);
  free(stk);
  free(next);
  return 0;
}

/* ---- The arena: best fit over segregated free lists ---------------------- */

/* Blocks tile [0, end) in address order (prev/next). The free ones are also
 * on one of N_BINS lists by size (fprev/fnext), the bins ordered by size
 * with 8 bins per power of two (as TLSF, Masmano et al., ECRTS 2004), and a
 * bitmap of the non-empty bins. Best fit scans the first non-empty bin from
 * the request's own and takes its smallest fitting block, lowest offset
 * among equals; every block of a later bin is larger. No two free blocks
 * are neighbours, so at most 2 * live + 1 blocks exist. */
#define N_BINS 512

/* 32 bytes, two to a cache line. fprev is USED for a block in use. */
#define USED (UINT32_MAX - 1)
typedef struct block {
  uint64_t off, size;
  uint32_t prev, next, fprev, fnext;
} block;

static int is_free(const block *b) {
  return b->fprev != USED;
}

typedef struct arena {
  block *b;
  uint32_t cap, n, spare, tail;
  uint64_t end;
  uint32_t head[N_BINS];
  uint64_t map[N_BINS / 64];
} arena;

static unsigned top_bit(uint64_t s) {
#if defined(__GNUC__)
  return 63u - (unsigned)__builtin_clzll(s);
#else
  unsigned r = 0;
  while (s >>= 1)
    r++;
  return r;
#endif
}

static unsigned low_bit(uint64_t s) {
#if defined(__GNUC__)
  return (unsigned)__builtin_ctzll(s);
#else
  unsigned r = 0;
  while (!(s & 1)) {
    s >>= 1;
    r++;
  }
  return r;
#endif
}

/* Sizes 1..15 have a bin each; above, the leading bit and the next three
 * pick one of 8 bins per power of two. Monotone in the size. */
static unsigned bin_of(uint64_t s) {
  unsigned fl = top_bit(s);
  if (fl < 3)
    return (unsigned)s;
  return 8 + (fl - 3) * 8 + (unsigned)(s >> (fl - 3) & 7);
}

/* The first non-empty bin at or after `bin`, or N_BINS. */
static unsigned next_bin(const arena *a, unsigned bin) {
  for (unsigned w = bin / 64; w < N_BINS / 64; w++) {
    uint64_t m = a->map[w];
    if (w == bin / 64)
      m &= ~UINT64_C(0) << (bin % 64);
    if (m)
      return w * 64 + low_bit(m);
  }
  return N_BINS;
}

static void free_insert(arena *a, uint32_t x) {
  block *b = a->b;
  unsigned bin = bin_of(b[x].size);
  b[x].fprev = NONE;
  b[x].fnext = a->head[bin];
  if (a->head[bin] != NONE)
    b[a->head[bin]].fprev = x;
  a->head[bin] = x;
  a->map[bin / 64] |= UINT64_C(1) << (bin % 64);
}

static void free_erase(arena *a, uint32_t x) {
  block *b = a->b;
  unsigned bin = bin_of(b[x].size);
  if (b[x].fprev != NONE)
    b[b[x].fprev].fnext = b[x].fnext;
  else
    a->head[bin] = b[x].fnext;
  if (b[x].fnext != NONE)
    b[b[x].fnext].fprev = b[x].fprev;
  if (a->head[bin] == NONE)
    a->map[bin / 64] &= ~(UINT64_C(1) << (bin % 64));
  b[x].fprev = USED;
}

static uint32_t best_fit(const arena *a, uint64_t bytes, uint64_t al) {
  const block *b = a->b;
  for (unsigned bin = next_bin(a, bin_of(bytes)); bin < N_BINS;
       bin = next_bin(a, bin + 1)) {
    uint32_t best = NONE;
    for (uint32_t x = a->head[bin]; x != NONE; x = b[x].fnext)
      if (align_up(b[x].off, al) + bytes <= b[x].off + b[x].size &&
          (best == NONE || b[x].size < b[best].size ||
           (b[x].size == b[best].size && b[x].off < b[best].off)))
        best = x;
    if (best != NONE)
      return best;
  }
  return NONE;
}

static void arena_reset(arena *a) {
  a->n = 0;
  a->spare = a->tail = NONE;
  a->end = 0;
  for (unsigned i = 0; i < N_BINS; i++)
    a->head[i] = NONE;
  memset(a->map, 0, sizeof a->map);
}

static uint32_t blk_new(arena *a, uint64_t off, uint64_t size) {
  uint32_t x;
  if (a->spare != NONE) {
    x = a->spare;
    a->spare = a->b[x].next;
  } else {
    assert(a->n < a->cap);
    x = a->n++;
  }
  a->b[x] = (block){off, size, NONE, NONE, USED, NONE};
  return x;
}

static void blk_drop(arena *a, uint32_t x) {
  block *b = a->b;
  if (b[x].prev != NONE)
    b[b[x].prev].next = b[x].next;
  if (b[x].next != NONE)
    b[b[x].next].prev = b[x].prev;
  else
    a->tail = b[x].prev;
  b[x].next = a->spare;
  a->spare = x;
}

/* Links the new block y just before x (after == 0) or just after it. */
static void blk_link(arena *a, uint32_t x, uint32_t y, int after) {
  block *b = a->b;
  if (after) {
    b[y].prev = x;
    b[y].next = b[x].next;
    if (b[x].next != NONE)
      b[b[x].next].prev = y;
    else
      a->tail = y;
    b[x].next = y;
  } else {
    b[y].next = x;
    b[y].prev = b[x].prev;
    if (b[x].prev != NONE)
      b[b[x].prev].next = y;
    b[x].prev = y;
  }
}

/* Moves or resizes the free block x, re-filing it only when its bin
 * changes. */
static void free_resize(arena *a, uint32_t x, uint64_t off, uint64_t size) {
  int refile = bin_of(size) != bin_of(a->b[x].size);
  if (refile)
    free_erase(a, x);
  a->b[x].off = off;
  a->b[x].size = size;
  if (refile)
    free_insert(a, x);
}

/* Gives `bytes` the first offset in the free block x aligned to `al`
 * and returns the used block; the padding before and the rest after stay
 * free. Their other neighbours are used: no coalescing. */
static uint32_t carve(arena *a, uint32_t x, uint64_t bytes, uint64_t al) {
  uint64_t off = a->b[x].off, start = align_up(off, al);
  uint64_t pad = start - off, rest = off + a->b[x].size - start - bytes;
  if (!pad && !rest) {
    free_erase(a, x);
    return x;
  }
  uint32_t u = blk_new(a, start, bytes);
  if (!pad) {
    blk_link(a, x, u, 0);
    free_resize(a, x, start + bytes, rest);
    return u;
  }
  blk_link(a, x, u, 1);
  if (rest) {
    uint32_t r = blk_new(a, start + bytes, rest);
    blk_link(a, u, r, 1);
    free_insert(a, r);
  }
  free_resize(a, x, off, pad);
  return u;
}

static uint32_t arena_alloc(arena *a, uint64_t bytes, uint64_t al) {
  uint32_t x = best_fit(a, bytes, al), u;
  if (x != NONE)
    return carve(a, x, bytes, al);
  /* Nothing fits: grow at the end, extending a free block there. */
  x = a->tail;
  uint64_t from = x != NONE && is_free(&a->b[x]) ? a->b[x].off : a->end;
  uint64_t start = align_up(from, al);
  if (x != NONE && is_free(&a->b[x]) && start == from) {
    free_erase(a, x);
    a->b[x].size = bytes;
    u = x;
  } else {
    if (x != NONE && is_free(&a->b[x])) {
      free_resize(a, x, from, start - from);
    } else if (start > from) {
      uint32_t pad = blk_new(a, from, start - from);
      if (x != NONE)
        blk_link(a, x, pad, 1);
      a->tail = pad;
      free_insert(a, pad);
    }
    u = blk_new(a, start, bytes);
    if (a->tail != NONE)
      blk_link(a, a->tail, u, 1);
    a->tail = u;
  }
  a->end = start + bytes;
  return u;
}

/* Frees x, merging it with free neighbours. */
static void arena_release(arena *a, uint32_t x) {
  block *b = a->b;
  uint32_t p = b[x].prev, q = b[x].next;
  int pf = p != NONE && is_free(&b[p]), qf = q != NONE && is_free(&b[q]);
  if (pf) {
    uint64_t size = b[p].size + b[x].size + (qf ? b[q].size : 0);
    if (qf) {
      free_erase(a, q);
      blk_drop(a, q);
    }
    blk_drop(a, x);
    free_resize(a, p, b[p].off, size);
  } else if (qf) {
    uint64_t off = b[x].off, size = b[x].size + b[q].size;
    blk_drop(a, x);
    free_resize(a, q, off, size);
  } else {
    free_insert(a, x);
  }
}

/* ---- Fitting one order -------------------------------------------------- */

typedef struct vstate {
  uint32_t rem;   /* reads still to come */
  uint32_t blk;   /* its block, or NONE */
  uint32_t chain; /* its chain (below), or NONE */
} vstate;

typedef struct work {
  vstate *vs;
  uint32_t *dying; /* this step's inputs read for the last time */
  arena a;
  chain *ch;
  size_t nc;
} work;

/* Simulates `order`, filling offset and inplace_of; returns the arena's
 * size in *arena_bytes and the peak of live non-pinned bytes in *peak. */
static void fit(const ix *x, work *w, const uint32_t *order, uint64_t *offset,
                int *inplace_of, uint64_t *arena_bytes, uint64_t *peak) {
  arena *a = &w->a;
  vstate *vs = w->vs;
  arena_reset(a);
  for (size_t v = 0; v < x->nv; v++) {
    vs[v] = (vstate){x->v[v].n_reads, NONE, NONE};
    offset[v] = UINT64_MAX;
    inplace_of[v] = -1;
  }
  w->nc = 0;
  uint64_t live = 0, top = 0;
  for (size_t i = 0; i < x->ns; i++) {
    const sinfo *st = &x->s[order[i]];
    const uint32_t *in = x->io + st->at, *ou = in + st->n_in;
    size_t nd = 0;
    for (size_t k = 0; k < st->n_in; k++)
      if (--vs[in[k]].rem == 0)
        w->dying[nd++] = in[k];
    uint32_t taken = NONE;
    if (st->mask && st->n_out && !x->v[ou[0]].pinned) {
      const vinfo *o = &x->v[ou[0]];
      for (size_t k = 0; k < st->n_in && k < 32 && taken == NONE; k++) {
        uint32_t v = in[k];
        if ((st->mask >> k & 1) && !x->v[v].pinned && !vs[v].rem &&
            x->v[v].bytes == o->bytes && offset[v] % o->align == 0)
          taken = v;
      }
    }
    for (size_t j = 0; j < st->n_out; j++) {
      uint32_t o = ou[j];
      const vinfo *ov = &x->v[o];
      if (ov->pinned)
        continue;
      if (j == 0 && taken != NONE) {
        offset[o] = offset[taken];
        vs[o].blk = vs[taken].blk;
        vs[taken].blk = NONE;
        inplace_of[o] = (int)taken;
        uint32_t c = vs[o].chain = vs[taken].chain;
        if (c != NONE && w->ch[c].align < ov->align)
          w->ch[c].align = ov->align;
      } else if (!ov->bytes) {
        offset[o] = 0;
      } else {
        vs[o].blk = arena_alloc(a, ov->bytes, ov->align);
        offset[o] = a->b[vs[o].blk].off;
        live += ov->bytes;
        vs[o].chain = (uint32_t)w->nc;
        w->ch[w->nc++] =
            (chain){ov->bytes, (uint32_t)i, (uint32_t)i, ov->align};
      }
    }
    if (live > top)
      top = live;
    for (size_t k = 0; k < nd; k++) {
      uint32_t v = w->dying[k];
      if (vs[v].blk != NONE) {
        w->ch[vs[v].chain].last = (uint32_t)i;
        arena_release(a, vs[v].blk);
        vs[v].blk = NONE;
        live -= x->v[v].bytes;
      }
    }
    for (size_t j = 0; j < st->n_out; j++) {
      uint32_t o = ou[j];
      if (!x->v[o].n_reads && vs[o].blk != NONE) {
        w->ch[vs[o].chain].last = (uint32_t)i;
        arena_release(a, vs[o].blk);
        vs[o].blk = NONE;
        live -= x->v[o].bytes;
      }
    }
  }
  *arena_bytes = a->end;
  *peak = top;
}

/* ---- plan_build --------------------------------------------------------- */

static int build(const plan_problem *p, unsigned kinds, plan_result *r,
                 char *msg, size_t n) {
  if (msg && n)
    msg[0] = 0;
  if (!r) {
    plan_say(msg, n, "no result to fill");
    return -2;
  }
  memset(r, 0, sizeof *r);
  ix x;
  int rc = ix_build(p, &x, msg, n);
  if (rc) {
    if (rc == -1)
      plan_say(msg, n, "out of memory while indexing %zu steps", x.ns);
    ix_free(&x);
    return rc;
  }
  if (!x.given_ok && kinds == 1u << PLAN_ORDER_GIVEN) {
    plan_say(msg, n,
             "the steps' own order is not topological: a step reads a "
             "value that a later step produces");
    ix_free(&x);
    return -2;
  }
  size_t nv = x.nv, ns = x.ns;
  memset(r->tried_arena, 0xff, sizeof r->tried_arena); /* none run yet */
  work w;
  offline off;
  memset(&w, 0, sizeof w);
  uint32_t *ord[PLAN_ORDER_COUNT] = {NULL};
  uint64_t *off2 = malloc((nv ? nv : 1) * sizeof *off2);
  int *inpl2 = malloc((nv ? nv : 1) * sizeof *inpl2);
  r->order = malloc((ns ? ns : 1) * sizeof *r->order);
  r->offset = malloc((nv ? nv : 1) * sizeof *r->offset);
  r->inplace_of = malloc((nv ? nv : 1) * sizeof *r->inplace_of);
  w.vs = malloc((nv ? nv : 1) * sizeof *w.vs);
  w.dying = malloc((x.max_in ? x.max_in : 1) * sizeof *w.dying);
  w.a.cap = (uint32_t)(2 * nv + 2);
  w.ch = malloc((nv ? nv : 1) * sizeof *w.ch);
  w.a.b = malloc(w.a.cap * sizeof *w.a.b);
  int off_rc = offline_init(&off, ns);
  rc = -1;
  if (!off2 || !inpl2 || !r->order || !r->offset || !r->inplace_of || !w.vs ||
      !w.dying || !w.a.b || !w.ch || off_rc)
    goto out;
  int have = 0;
  for (int k = 0; k < PLAN_ORDER_COUNT; k++) {
    if (!(kinds >> k & 1) || (k == PLAN_ORDER_GIVEN && !x.given_ok))
      continue;
    uint32_t *o = ord[k] = malloc((ns ? ns : 1) * sizeof *o);
    if (!o)
      goto out;
    if (k == PLAN_ORDER_GIVEN) {
      for (size_t s = 0; s < ns; s++)
        o[s] = (uint32_t)s;
    } else if ((k == PLAN_ORDER_GREEDY ? order_greedy(&x, o)
                                       : order_depth(&x, o)) != 0) {
      goto out;
    }
    r->tried[k] = 1;
    /* An order met before plans the same and cannot win the tie. */
    int same = -1;
    for (int j = 0; j < k && same < 0; j++)
      if (ord[j] && !memcmp(ord[j], o, ns * sizeof *o))
        same = j;
    if (same >= 0) {
      r->tried_planned[k] = r->tried_planned[same];
      r->tried_lower_bound[k] = r->tried_lower_bound[same];
      memcpy(r->tried_arena[k], r->tried_arena[same], sizeof r->tried_arena[k]);
      continue;
    }
    uint64_t arena_bytes, peak;
    fit(&x, &w, o, off2, inpl2, &arena_bytes, &peak);
    plan_fit how;
    if (offline_fit(w.ch, w.nc, &off, nv, ns, peak, r->tried_arena[k],
                    &arena_bytes, &how))
      goto out;
    if (how != PLAN_FIT_BEST_FIT)
      for (size_t v = 0; v < nv; v++)
        if (w.vs[v].chain != NONE)
          off2[v] = off.best[w.vs[v].chain];
    uint64_t planned = x.pinned_bytes + arena_bytes;
    r->tried_planned[k] = planned;
    r->tried_lower_bound[k] = x.pinned_bytes + peak;
    if (have && planned >= r->planned_bytes)
      continue;
    have = 1;
    r->order_kind = (plan_order)k;
    r->fit = how;
    r->arena_bytes = arena_bytes;
    r->planned_bytes = planned;
    r->lower_bound = x.pinned_bytes + peak;
    uint64_t *to = r->offset;
    r->offset = off2;
    off2 = to;
    int *ti = r->inplace_of;
    r->inplace_of = inpl2;
    inpl2 = ti;
  }
  assert(have);
  for (size_t s = 0; s < ns; s++)
    r->order[s] = ord[r->order_kind][s];
  r->pinned_bytes = x.pinned_bytes;
  r->naive_bytes = x.naive_bytes;
  rc = 0;
out:
  if (rc) {
    plan_result_free(r);
    plan_say(msg, n, "out of memory while planning %zu steps", ns);
  }
  for (int k = 0; k < PLAN_ORDER_COUNT; k++)
    free(ord[k]);
  free(off2);
  free(inpl2);
  free(w.vs);
  free(w.dying);
  free(w.a.b);
  free(w.ch);
  offline_free(&off);
  ix_free(&x);
  return rc;
}

int plan_build(const plan_problem *p, plan_result *r, char *msg,
               size_t msg_size) {
  return build(p, (1u << PLAN_ORDER_COUNT) - 1, r, msg, msg_size);
}

int plan_build_order(const plan_problem *p, plan_order kind, plan_result *r,
                     char *msg, size_t msg_size) {
  if ((unsigned)kind >= PLAN_ORDER_COUNT) {
    if (r)
      memset(r, 0, sizeof *r);
    plan_say(msg, msg_size, "order %d: no such order (0 to %d)", (int)kind,
             PLAN_ORDER_COUNT - 1);
    return -2;
  }
  return build(p, 1u << kind, r, msg, msg_size);
}

void plan_result_free(plan_result *r) {
  if (!r)
    return;
  free(r->order);
  free(r->offset);
  free(r->inplace_of);
  memset(r, 0, sizeof *r);
}
