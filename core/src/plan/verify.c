/*
 * plan_verify (plan.h): checks a plan against its problem with lifetimes
 * and checks of its own, sharing no code with the planner (plan.c), so a
 * bug there cannot hide itself here.
 */
#include "config.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* The live arena spans, as a treap keyed by offset (Seidel and Aragon,
 * "Randomized search trees", Algorithmica 1996): a node per value, found,
 * added and removed in expected O(log live), so that the sweep below is
 * O(n log n) however many values are alive at once. Live spans never
 * overlap (the sweep checks before adding), so offsets are distinct. */
#define VNIL UINT32_MAX

typedef struct vspan {
  uint64_t lo, hi; /* [lo, hi) in the arena */
  uint32_t pri;    /* heap order: a parent's pri >= its children's */
  uint32_t l, r;   /* children (value ids), VNIL for none */
} vspan;

typedef struct vcheck {
  size_t *pos;    /* step -> its position */
  size_t *first;  /* value -> position of its producer, or SIZE_MAX */
  size_t *last;   /* value -> position of its last reader (or first) */
  size_t *end_at; /* values ending at position i: ends[end_at[i]..] */
  uint32_t *ends;
  vspan *span; /* per value; the live ones form the treap at root */
  uint32_t root;
  unsigned char *gone;
} vcheck;

static void vcheck_free(vcheck *s) {
  free(s->pos);
  free(s->first);
  free(s->last);
  free(s->end_at);
  free(s->ends);
  free(s->span);
  free(s->gone);
}

/* A fixed pseudo-random priority per value (splitmix64's finaliser). */
static uint32_t vpri(uint32_t v) {
  uint64_t z = (uint64_t)v + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* Splits tree t into the spans with lo < off (*a) and the rest (*b). */
static void vsplit(vspan *sp, uint32_t t, uint64_t off, uint32_t *a,
                   uint32_t *b) {
  if (t == VNIL) {
    *a = *b = VNIL;
  } else if (sp[t].lo < off) {
    vsplit(sp, sp[t].r, off, &sp[t].r, b);
    *a = t;
  } else {
    vsplit(sp, sp[t].l, off, a, &sp[t].l);
    *b = t;
  }
}

/* Joins trees a and b, every span of a before every span of b. */
static uint32_t vjoin(vspan *sp, uint32_t a, uint32_t b) {
  if (a == VNIL)
    return b;
  if (b == VNIL)
    return a;
  if (sp[a].pri >= sp[b].pri) {
    sp[a].r = vjoin(sp, sp[a].r, b);
    return a;
  }
  sp[b].l = vjoin(sp, a, sp[b].l);
  return b;
}

static void vinsert(vcheck *s, uint32_t v) {
  uint32_t a, b;
  vsplit(s->span, s->root, s->span[v].lo, &a, &b);
  s->span[v].l = s->span[v].r = VNIL;
  s->root = vjoin(s->span, vjoin(s->span, a, v), b);
}

/* Removes the span at offset off; returns its value (VNIL: none). */
static uint32_t vremove(vcheck *s, uint64_t off) {
  uint32_t *link = &s->root;
  while (*link != VNIL && s->span[*link].lo != off)
    link = s->span[*link].lo < off ? &s->span[*link].r : &s->span[*link].l;
  uint32_t v = *link;
  if (v != VNIL)
    *link = vjoin(s->span, s->span[v].l, s->span[v].r);
  return v;
}

/* The live span with the highest lo < off (below), and the one with the
 * lowest lo >= off (at); VNIL where there is none. */
static void varound(const vcheck *s, uint64_t off, uint32_t *below,
                    uint32_t *at) {
  *below = *at = VNIL;
  for (uint32_t t = s->root; t != VNIL;) {
    if (s->span[t].lo < off) {
      *below = t;
      t = s->span[t].r;
    } else {
      *at = t;
      t = s->span[t].l;
    }
  }
}

/* The problem's own soundness, as far as the checks below rely on it. */
static int vproblem(const plan_problem *p, char *msg, size_t n) {
  if ((p->n_values && !p->values) || (p->n_steps && !p->steps)) {
    plan_say(msg, n, "the problem has a NULL values or steps array");
    return -1;
  }
  for (size_t v = 0; v < p->n_values; v++) {
    uint32_t a = p->values[v].align;
    if (!a || (a & (a - 1))) {
      plan_say(msg, n, "value %zu: alignment %u is not a power of two", v,
               (unsigned)a);
      return -1;
    }
  }
  for (size_t s = 0; s < p->n_steps; s++) {
    const plan_step *st = &p->steps[s];
    if ((st->n_in && !st->in) || (st->n_out && !st->out)) {
      plan_say(msg, n, "step %zu has a NULL input or output list", s);
      return -1;
    }
    for (size_t k = 0; k < st->n_in; k++)
      if (st->in[k] >= p->n_values) {
        plan_say(msg, n, "step %zu reads value %u, out of range", s,
                 (unsigned)st->in[k]);
        return -1;
      }
    for (size_t k = 0; k < st->n_out; k++)
      if (st->out[k] >= p->n_values) {
        plan_say(msg, n, "step %zu writes value %u, out of range", s,
                 (unsigned)st->out[k]);
        return -1;
      }
  }
  return 0;
}

int plan_verify(const plan_problem *p, const plan_result *r, char *msg,
                size_t n) {
  if (!p || !r) {
    plan_say(msg, n, "no problem or no plan given");
    return -1;
  }
  if (vproblem(p, msg, n))
    return -1;
  size_t nv = p->n_values, ns = p->n_steps;
  const plan_value *val = p->values;
  if ((ns && !r->order) || (nv && (!r->offset || !r->inplace_of))) {
    plan_say(msg, n, "the plan has no order, offsets or in-place table");
    return -1;
  }
  if ((unsigned)r->order_kind >= PLAN_ORDER_COUNT) {
    plan_say(msg, n, "order kind %d does not exist", (int)r->order_kind);
    return -1;
  }
  vcheck s = {0};
  int rc = -1;
  s.pos = malloc((ns ? ns : 1) * sizeof *s.pos);
  s.first = malloc((nv ? nv : 1) * sizeof *s.first);
  s.last = malloc((nv ? nv : 1) * sizeof *s.last);
  s.end_at = calloc(ns + 2, sizeof *s.end_at);
  s.ends = malloc((nv ? nv : 1) * sizeof *s.ends);
  s.span = malloc((nv ? nv : 1) * sizeof *s.span);
  s.gone = calloc(nv ? nv : 1, 1);
  uint64_t *diff = calloc(ns + 1, sizeof *diff);
  if (!s.pos || !s.first || !s.last || !s.end_at || !s.ends || !s.span ||
      !s.gone || !diff) {
    plan_say(msg, n, "out of memory while verifying");
    goto out;
  }
  /* The order: a permutation. */
  for (size_t i = 0; i < ns; i++)
    s.pos[i] = SIZE_MAX;
  for (size_t i = 0; i < ns; i++) {
    size_t st = r->order[i];
    if (st >= ns || s.pos[st] != SIZE_MAX) {
      plan_say(msg, n, "order[%zu] = %zu: %s", i, st,
               st >= ns ? "no such step" : "the step appears twice");
      goto out;
    }
    s.pos[st] = i;
  }
  /* Lifetimes from the order: producer's position to last reader's. */
  for (size_t v = 0; v < nv; v++)
    s.first[v] = SIZE_MAX;
  for (size_t st = 0; st < ns; st++)
    for (size_t j = 0; j < p->steps[st].n_out; j++) {
      uint32_t o = p->steps[st].out[j];
      if (s.first[o] != SIZE_MAX) {
        plan_say(msg, n, "value %u has two producers", (unsigned)o);
        goto out;
      }
      s.first[o] = s.pos[st];
      s.last[o] = s.pos[st];
    }
  for (size_t st = 0; st < ns; st++)
    for (size_t k = 0; k < p->steps[st].n_in; k++) {
      uint32_t v = p->steps[st].in[k];
      if (s.first[v] == SIZE_MAX) {
        if (val[v].pinned)
          continue;
        plan_say(msg, n, "step %zu reads value %u, which nothing produces", st,
                 (unsigned)v);
        goto out;
      }
      if (s.first[v] >= s.pos[st]) {
        plan_say(msg, n,
                 "the order breaks a dependency: step %zu (position %zu) "
                 "reads value %u, produced at position %zu",
                 st, s.pos[st], (unsigned)v, s.first[v]);
        goto out;
      }
      if (s.pos[st] > s.last[v])
        s.last[v] = s.pos[st];
    }
  /* Offsets, totals. */
  uint64_t naive = 0, pinned = 0;
  for (size_t v = 0; v < nv; v++) {
    uint64_t b = val[v].bytes, off = r->offset[v];
    naive += b;
    if (val[v].pinned)
      pinned += b;
    if (val[v].pinned || s.first[v] == SIZE_MAX) {
      if (off != UINT64_MAX || r->inplace_of[v] != -1) {
        plan_say(msg, n, "value %zu is %s but has offset %llu / in place of %d",
                 v, val[v].pinned ? "pinned" : "never produced",
                 (unsigned long long)off, r->inplace_of[v]);
        goto out;
      }
      continue;
    }
    if (off % val[v].align) {
      plan_say(msg, n,
               "value %zu: offset %llu is not a multiple of its "
               "alignment %u",
               v, (unsigned long long)off, (unsigned)val[v].align);
      goto out;
    }
    if (off > r->arena_bytes || b > r->arena_bytes - off) {
      plan_say(msg, n,
               "value %zu: [%llu, %llu + %llu) lies outside the "
               "%llu-byte arena",
               v, (unsigned long long)off, (unsigned long long)off,
               (unsigned long long)b, (unsigned long long)r->arena_bytes);
      goto out;
    }
    /* Live bytes per position, as differences; wrapping is harmless. */
    diff[s.first[v]] += b;
    diff[s.last[v] + 1] -= b;
  }
  /* In place: out[0] of its producer over an allowed, dying input. */
  for (size_t v = 0; v < nv; v++) {
    int u = r->inplace_of[v];
    if (u == -1)
      continue;
    size_t ps = s.first[v] == SIZE_MAX ? SIZE_MAX : r->order[s.first[v]];
    const plan_step *st = ps == SIZE_MAX ? NULL : &p->steps[ps];
    int ok = u >= 0 && (size_t)u < nv && st && st->n_out && st->out[0] == v &&
             !val[u].pinned && s.first[u] != SIZE_MAX &&
             s.last[u] == s.first[v] && val[u].bytes == val[v].bytes &&
             r->offset[u] == r->offset[v];
    int allowed = 0;
    for (size_t k = 0; ok && k < st->n_in && k < 32; k++)
      if ((st->inplace_mask >> k & 1) && st->in[k] == (uint32_t)u)
        allowed = 1;
    if (!ok || !allowed) {
      plan_say(msg, n,
               "value %zu may not take value %d's storage in place (it "
               "must be out[0] of a step whose in[k] it is, with mask bit "
               "k, the step its last reader, equal size and offset)",
               v, u);
      goto out;
    }
    /* The pair shares its bytes at that one position. */
    diff[s.first[v]] -= val[v].bytes;
    diff[s.first[v] + 1] += val[v].bytes;
  }
  uint64_t live = 0, top = 0;
  for (size_t i = 0; i < ns; i++) {
    live += diff[i];
    if (live > top)
      top = live;
  }
  if (r->naive_bytes != naive || r->pinned_bytes != pinned ||
      r->planned_bytes != pinned + r->arena_bytes ||
      r->planned_bytes < r->arena_bytes || r->lower_bound != pinned + top) {
    plan_say(msg, n,
             "totals: naive %llu (expected %llu), pinned %llu (%llu), "
             "planned %llu (%llu + arena %llu), lower bound %llu (%llu)",
             (unsigned long long)r->naive_bytes, (unsigned long long)naive,
             (unsigned long long)r->pinned_bytes, (unsigned long long)pinned,
             (unsigned long long)r->planned_bytes, (unsigned long long)pinned,
             (unsigned long long)r->arena_bytes,
             (unsigned long long)r->lower_bound,
             (unsigned long long)(pinned + top));
    goto out;
  }
  /* Overlap: sweep the positions with the live spans sorted by offset. */
  for (size_t v = 0; v < nv; v++)
    if (!val[v].pinned && s.first[v] != SIZE_MAX && val[v].bytes)
      s.end_at[s.last[v] + 2]++;
  for (size_t i = 0; i < ns; i++)
    s.end_at[i + 2] += s.end_at[i + 1];
  for (size_t v = 0; v < nv; v++)
    if (!val[v].pinned && s.first[v] != SIZE_MAX && val[v].bytes)
      s.ends[s.end_at[s.last[v] + 1]++] = (uint32_t)v;
  s.root = VNIL;
  for (size_t i = 0; i < ns; i++) {
    const plan_step *st = &p->steps[r->order[i]];
    for (size_t j = 0; j < st->n_out; j++) {
      uint32_t v = st->out[j];
      if (val[v].pinned || !val[v].bytes)
        continue;
      uint64_t lo = r->offset[v], hi = lo + val[v].bytes;
      if (r->inplace_of[v] >= 0) {
        /* Its input hands its span over here. */
        uint32_t u = (uint32_t)r->inplace_of[v];
        uint32_t was = vremove(&s, lo);
        assert(was == u);
        (void)was;
        s.gone[u] = 1;
      }
      uint32_t below, at;
      varound(&s, lo, &below, &at);
      uint32_t clash = below != VNIL && s.span[below].hi > lo ? below
                       : at != VNIL && s.span[at].lo < hi     ? at
                                                              : VNIL;
      if (clash != VNIL) {
        plan_say(msg, n,
                 "values %u and %u overlap at position %zu (step %zu): "
                 "[%llu, %llu) and [%llu, %llu)",
                 (unsigned)clash, (unsigned)v, i, r->order[i],
                 (unsigned long long)s.span[clash].lo,
                 (unsigned long long)s.span[clash].hi, (unsigned long long)lo,
                 (unsigned long long)hi);
        goto out;
      }
      s.span[v] = (vspan){lo, hi, vpri(v), VNIL, VNIL};
      vinsert(&s, v);
    }
    for (size_t e = s.end_at[i]; e < s.end_at[i + 1]; e++) {
      uint32_t v = s.ends[e];
      if (s.gone[v])
        continue;
      uint32_t was = vremove(&s, r->offset[v]);
      assert(was == v);
      (void)was;
    }
  }
  rc = 0;
out:
  vcheck_free(&s);
  free(diff);
  return rc;
}
