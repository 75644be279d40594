/*
 * What plan.c (the planner) and offline.c (its offline fits) share.
 * Internal to core/src/plan/.
 */
#ifndef TYTO_PLAN_INTERNAL_H
#define TYTO_PLAN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"

#define NONE UINT32_MAX

static inline uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) & ~(a - 1);
}

/* An arena value and the values that took its storage in place, one after
 * the other: one block, alive from the first one's producer through the
 * last one's last reader. */
typedef struct chain {
  uint64_t bytes;
  uint32_t first, last; /* positions */
  uint32_t align;       /* the largest of its values' */
} chain;

typedef struct span {
  uint64_t lo, hi;
} span;

typedef struct offline {
  size_t m;       /* the tree's leaves: a power of two >= the positions */
  size_t *at;     /* node q files sp[at[q] .. at[q] + n[q]) (2m + 1) */
  uint32_t *n;    /* (2m) */
  span *sp;       /* the fitted chains, under the nodes that tile them */
  size_t sp_cap;  /* spans sp has room for */
  uint32_t *from; /* per position t (and ns): the first chain beginning
                     at t or later (overlap_pairs borrows it first) */
  uint32_t *seq;  /* the chains in the order they are fitted */
  uint32_t *tmp;  /* sorting room */
  uint64_t *key;  /* per chain: a sort key */
  span *fitted;   /* per chain: its offsets; lo = UINT64_MAX until fitted */
  uint64_t *best; /* per chain: the offsets kept */
  span *gaps;     /* one chain's fitted neighbours, and sorting room */
  uint64_t *live; /* a max tree over the positions' live bytes (2m) */
} offline;

/* The offline fits' room for a problem of ns positions: 0, or -1
 * when out of memory. */
int offline_init(offline *o, size_t ns);
void offline_free(offline *o);

/* Tries the offline fits on the chains of the order just fitted online, into an
 * arena of *bytes, with live-set peak `peak`. Fills tried[] (UINT64_MAX where
 * not run); where one needs fewer bytes than those before it, its offsets are
 * in o->best and *bytes and *how say so. 0, or -1 when out of memory. */
int offline_fit(const chain *ch, size_t nc, offline *o, size_t nv, size_t ns,
                uint64_t peak, uint64_t tried[PLAN_FIT_COUNT], uint64_t *bytes,
                plan_fit *how);

#endif
