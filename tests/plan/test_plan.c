/*
 * The memory planner: hand-built problems with layouts worked out by hand
 * (in the comments), invalid problems and their messages, the verifier
 * against corrupted plans, random DAGs checked by the verifier, by the
 * bounds and (offline fits) against a slow reimplementation, and
 * timed 15,000- and 1,000-step problems (printed, never asserted).
 */
#include "common.h"

#include <stdint.h>
#include <time.h>

#include "plan/plan.h"

#define L(...)                                                                 \
  sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t),                  \
      (const uint32_t[]) {                                                     \
    __VA_ARGS__                                                                \
  }
#define NIL 0, NULL
#define NO UINT64_MAX

/* A small problem under construction; its steps point into ids. */
typedef struct tp {
  plan_value v[64];
  plan_step s[64];
  uint32_t ids[512];
  size_t nv, ns, nid;
  plan_problem p;
} tp;

static uint32_t val(tp *t, uint64_t bytes, uint32_t align, int pinned) {
  t->v[t->nv] = (plan_value){bytes, align, pinned};
  return (uint32_t)t->nv++;
}

static void step(tp *t, uint32_t mask, size_t n_in, const uint32_t *in,
                 size_t n_out, const uint32_t *out) {
  plan_step *s = &t->s[t->ns++];
  s->n_in = n_in;
  s->in = n_in ? memcpy(&t->ids[t->nid], in, n_in * sizeof *in) : NULL;
  t->nid += n_in;
  s->n_out = n_out;
  s->out = n_out ? memcpy(&t->ids[t->nid], out, n_out * sizeof *out) : NULL;
  t->nid += n_out;
  s->inplace_mask = mask;
}

static const plan_problem *prob(tp *t) {
  t->p = (plan_problem){t->nv, t->v, t->ns, t->s};
  return &t->p;
}

/* ---- Offline fits, checked the slow way --------------------------------- */

/* A value and the values that took its storage in place, rebuilt from a
 * plan: one offset, alive from the first one's producer to the last one's
 * last reader. */
typedef struct tchain {
  uint64_t bytes, off, key; /* key: the breadth, for by-breadth */
  size_t first, last, out;  /* out: the first value's index in out[] */
  uint64_t align;
} tchain;

/* Which of two chains a fit takes first: larger key (by breadth),
 * larger size, earlier first position, earlier output. */
static int tchain_before(const tchain *a, const tchain *b, int breadth) {
  if (breadth && a->key != b->key)
    return a->key > b->key;
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes;
  if (a->first != b->first)
    return a->first < b->first;
  return a->out < b->out;
}

/* Rebuilds the chains of r's arena. Returns how many; *out is malloc'd. */
static size_t tchains(const plan_problem *p, const plan_result *r,
                      tchain **out) {
  size_t nv = p->n_values, ns = p->n_steps, n = 0;
  size_t *pos = malloc((ns + 1) * sizeof *pos);
  size_t *first = malloc((nv + 1) * sizeof *first);
  size_t *last = malloc((nv + 1) * sizeof *last);
  size_t *idx = malloc((nv + 1) * sizeof *idx);
  int *taker = malloc((nv + 1) * sizeof *taker);
  tchain *c = malloc((nv + 1) * sizeof *c);
  ck_assert(pos && first && last && idx && taker && c);
  for (size_t i = 0; i < ns; i++)
    pos[r->order[i]] = i;
  for (size_t v = 0; v < nv; v++) {
    first[v] = SIZE_MAX;
    taker[v] = -1;
  }
  for (size_t s = 0; s < ns; s++)
    for (size_t j = 0; j < p->steps[s].n_out; j++) {
      uint32_t v = p->steps[s].out[j];
      first[v] = last[v] = pos[s];
      idx[v] = j;
    }
  for (size_t s = 0; s < ns; s++)
    for (size_t k = 0; k < p->steps[s].n_in; k++) {
      uint32_t v = p->steps[s].in[k];
      if (first[v] != SIZE_MAX && pos[s] > last[v])
        last[v] = pos[s];
    }
  for (size_t v = 0; v < nv; v++)
    if (r->inplace_of[v] >= 0)
      taker[r->inplace_of[v]] = (int)v;
  for (size_t v = 0; v < nv; v++) {
    if (p->values[v].pinned || first[v] == SIZE_MAX || !p->values[v].bytes ||
        r->inplace_of[v] >= 0)
      continue;
    tchain ch = {p->values[v].bytes, r->offset[v], 0, first[v], last[v], idx[v],
                 p->values[v].align};
    for (int u = taker[v]; u >= 0; u = taker[u]) {
      ck_assert_uint_eq(r->offset[u], ch.off);
      ch.last = last[u];
      if (p->values[u].align > ch.align)
        ch.align = p->values[u].align;
    }
    c[n++] = ch;
  }
  for (size_t i = 0; i < n; i++) /* breadth: the busiest position */
    for (size_t t = c[i].first; t <= c[i].last; t++) {
      uint64_t live = 0;
      for (size_t j = 0; j < n; j++)
        if (c[j].first <= t && t <= c[j].last)
          live += c[j].bytes;
      if (live > c[i].key)
        c[i].key = live;
    }
  free(pos);
  free(first);
  free(last);
  free(idx);
  free(taker);
  *out = c;
  return n;
}

/* An offline fit puts each chain at the lowest offset, a multiple of
 * its alignment, clear of the chains it takes before and shares a
 * position with. */
static void check_offline(const plan_problem *p, const plan_result *r) {
  tchain *c;
  size_t n = tchains(p, r, &c);
  int breadth = r->fit == PLAN_FIT_BY_BREADTH;
  uint64_t end = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t y = 0;
    for (int moved = 1; moved;) { /* up past every earlier chain in the way */
      moved = 0;
      for (size_t j = 0; j < n; j++)
        if (j != i && tchain_before(&c[j], &c[i], breadth) &&
            c[j].first <= c[i].last && c[i].first <= c[j].last &&
            c[j].off < y + c[i].bytes && y < c[j].off + c[j].bytes) {
          y = (c[j].off + c[j].bytes + c[i].align - 1) / c[i].align *
              c[i].align;
          moved = 1;
        }
    }
    ck_assert_msg(c[i].off == y,
                  "fit %d: the chain of %llu bytes at [%zu, %zu] "
                  "sits at %llu, its lowest gap is at %llu",
                  (int)r->fit, (unsigned long long)c[i].bytes, c[i].first,
                  c[i].last, (unsigned long long)c[i].off,
                  (unsigned long long)y);
    if (y + c[i].bytes > end)
      end = y + c[i].bytes;
  }
  ck_assert_uint_eq(end, r->arena_bytes);
  free(c);
}

/* The fits' arenas (tried_arena) agree with the plan: each order
 * tried ran best fit, keeps the smallest of its arenas, none below its
 * live-set bound; the kept one is the plan's. */
static void check_fits(const plan_problem *p, const plan_result *r) {
  ck_assert_int_lt(r->fit, PLAN_FIT_COUNT);
  ck_assert_uint_eq(r->tried_arena[r->order_kind][r->fit], r->arena_bytes);
  for (int k = 0; k < PLAN_ORDER_COUNT; k++) {
    uint64_t least = UINT64_MAX;
    for (int s = 0; s < PLAN_FIT_COUNT; s++) {
      uint64_t a = r->tried_arena[k][s];
      if (!r->tried[k]) {
        ck_assert_uint_eq(a, UINT64_MAX);
        continue;
      }
      if (a == UINT64_MAX) {
        ck_assert_int_ne(s, PLAN_FIT_BEST_FIT);
        continue;
      }
      ck_assert_uint_ge(a, r->tried_lower_bound[k] - r->pinned_bytes);
      if (a < least)
        least = a;
      if (k == (int)r->order_kind) {
        ck_assert_uint_le(r->arena_bytes, a);
        if (s < (int)r->fit) /* ties keep the lowest */
          ck_assert_uint_lt(r->arena_bytes, a);
      }
    }
    if (r->tried[k])
      ck_assert_uint_eq(r->tried_planned[k], r->pinned_bytes + least);
  }
  if (r->fit != PLAN_FIT_BEST_FIT)
    check_offline(p, r);
}

/* Plans with every order (kind < 0) or one, and checks what always holds. */
static void plan_ok(tp *t, int kind, plan_result *r) {
  char msg[256] = "";
  int rc = kind < 0 ? plan_build(prob(t), r, msg, sizeof msg)
                    : plan_build_order(prob(t), (plan_order)kind, r, msg,
                                       sizeof msg);
  ck_assert_msg(rc == 0, "plan: %d %s", rc, msg);
  ck_assert_msg(plan_verify(prob(t), r, msg, sizeof msg) == 0, "verify: %s",
                msg);
  /* Padding aside (plan.h), the arena never costs more than no reuse. */
  uint64_t slack = 0;
  for (size_t v = 0; v < t->nv; v++)
    if (!t->v[v].pinned)
      slack += t->v[v].align - 1;
  ck_assert_uint_le(r->lower_bound, r->planned_bytes);
  ck_assert_uint_le(r->planned_bytes, r->naive_bytes + slack);
  check_fits(prob(t), r);
}

static void expect_offsets(const plan_result *r, size_t n,
                           const uint64_t *off) {
  for (size_t v = 0; v < n; v++)
    ck_assert_msg(r->offset[v] == off[v],
                  "value %zu: offset %llu, expected %llu", v,
                  (unsigned long long)r->offset[v], (unsigned long long)off[v]);
}

/* x -> a -> b -> c -> y, 1000-byte temporaries: a and b alternate between
 * two blocks; with in-place allowed, one block. */
START_TEST(chain) {
  for (int inplace = 0; inplace < 2; inplace++) {
    tp t = {0};
    uint32_t x = val(&t, 100, 8, 1), a = val(&t, 1000, 8, 0),
             b = val(&t, 1000, 8, 0), c = val(&t, 1000, 8, 0),
             y = val(&t, 100, 8, 1);
    step(&t, 0, L(x), L(a));
    step(&t, (uint32_t)inplace, L(a), L(b));
    step(&t, (uint32_t)inplace, L(b), L(c));
    step(&t, (uint32_t)inplace, L(c), L(y)); /* y pinned: never in place */
    plan_result r;
    plan_ok(&t, -1, &r);
    ck_assert_int_eq(r.order_kind, PLAN_ORDER_GIVEN);
    for (size_t i = 0; i < 4; i++)
      ck_assert_uint_eq(r.order[i], i);
    ck_assert_uint_eq(r.pinned_bytes, 200);
    ck_assert_uint_eq(r.naive_bytes, 3200);
    if (!inplace) {
      expect_offsets(&r, 5, (const uint64_t[]){NO, 0, 1000, 0, NO});
      ck_assert_uint_eq(r.arena_bytes, 2000);
      ck_assert_uint_eq(r.planned_bytes, 2200);
      ck_assert_uint_eq(r.lower_bound, 2200); /* a and b meet at step 1 */
      for (uint32_t v = 0; v < 5; v++)
        ck_assert_int_eq(r.inplace_of[v], -1);
    } else {
      expect_offsets(&r, 5, (const uint64_t[]){NO, 0, 0, 0, NO});
      ck_assert_uint_eq(r.arena_bytes, 1000);
      ck_assert_uint_eq(r.planned_bytes, 1200);
      ck_assert_uint_eq(r.lower_bound, 1200); /* a pair counts once */
      ck_assert_int_eq(r.inplace_of[b], (int)a);
      ck_assert_int_eq(r.inplace_of[c], (int)b);
      ck_assert_int_eq(r.inplace_of[a], -1);
      ck_assert_int_eq(r.inplace_of[y], -1);
    }
    for (int k = 0; k < PLAN_ORDER_COUNT; k++) {
      ck_assert_int_eq(r.tried[k], 1);
      ck_assert_uint_eq(r.tried_planned[k], r.planned_bytes);
      ck_assert_uint_eq(r.tried_lower_bound[k], r.lower_bound);
    }
    plan_result_free(&r);
    ck_assert_ptr_null(r.order);
    plan_result_free(&r); /* twice is fine */
  }
}
END_TEST

/* In place refused: sizes differ, or the input's offset does not suit the
 * output's alignment. */
START_TEST(inplace_refused) {
  tp t = {0};
  uint32_t x = val(&t, 8, 8, 1), a = val(&t, 1000, 8, 0),
           b = val(&t, 999, 8, 0), y = val(&t, 8, 8, 1);
  step(&t, 0, L(x), L(a));
  step(&t, 1, L(a), L(b));
  step(&t, 1, L(b), L(y));
  plan_result r;
  plan_ok(&t, -1, &r);
  ck_assert_int_eq(r.inplace_of[b], -1);
  expect_offsets(&r, 4, (const uint64_t[]){NO, 0, 1000, NO});
  plan_result_free(&r);

  /* Best fit: p [0,3); a [3,67) (alignment 1); b, alignment 64, may not
   * sit at 3: it goes to align_up(67, 64) = 128, leaving [67,128) free,
   * arena 192. By size: a [0,64), b [64,128) (not in place: best fit's
   * decision stays), p [128,131): arena 131, all three alive at step 2. */
  tp u = {0};
  x = val(&u, 8, 8, 1);
  uint32_t p = val(&u, 3, 1, 0);
  a = val(&u, 64, 1, 0);
  b = val(&u, 64, 64, 0);
  y = val(&u, 8, 8, 1);
  step(&u, 0, L(x), L(p));
  step(&u, 0, L(x), L(a));
  step(&u, 1, L(a), L(b));
  step(&u, 0, L(p, b), L(y));
  plan_ok(&u, PLAN_ORDER_GIVEN, &r);
  ck_assert_int_eq(r.inplace_of[b], -1);
  expect_offsets(&r, 5, (const uint64_t[]){NO, 128, 0, 64, NO});
  ck_assert_uint_eq(r.arena_bytes, 131);
  ck_assert_uint_eq(r.lower_bound, 16 + 131);
  ck_assert_int_eq(r.fit, PLAN_FIT_BY_SIZE);
  ck_assert_uint_eq(r.tried_arena[PLAN_ORDER_GIVEN][PLAN_FIT_BEST_FIT], 192);
  /* By size reached the bound: by breadth is not run. */
  ck_assert_uint_eq(r.tried_arena[PLAN_ORDER_GIVEN][PLAN_FIT_BY_BREADTH],
                    UINT64_MAX);
  plan_result_free(&r);
}
END_TEST

/* x -> a; a -> b; a -> c; (b, c) -> d -> y. In the given order a [0,1000),
 * b [1000,1500), c [1500,1800) are alive together at step 2; d then takes
 * a's freed block at 0. Greedy runs c before b (it allocates less), which
 * costs the same; the tie keeps the given order. */
START_TEST(diamond) {
  tp t = {0};
  uint32_t x = val(&t, 100, 4, 1), a = val(&t, 1000, 4, 0),
           b = val(&t, 500, 4, 0), c = val(&t, 300, 4, 0),
           d = val(&t, 200, 4, 0), y = val(&t, 100, 4, 1);
  step(&t, 0, L(x), L(a));
  step(&t, 0, L(a), L(b));
  step(&t, 0, L(a), L(c));
  step(&t, 0, L(b, c), L(d));
  step(&t, 0, L(d), L(y));
  plan_result r;
  plan_ok(&t, -1, &r);
  ck_assert_int_eq(r.order_kind, PLAN_ORDER_GIVEN);
  expect_offsets(&r, 6, (const uint64_t[]){NO, 0, 1000, 1500, 0, NO});
  ck_assert_uint_eq(r.arena_bytes, 1800);
  ck_assert_uint_eq(r.planned_bytes, 2000);
  ck_assert_uint_eq(r.lower_bound, 2000);
  ck_assert_uint_eq(r.naive_bytes, 2200);
  ck_assert_uint_eq(r.tried_planned[PLAN_ORDER_GREEDY], 2000);
  ck_assert_uint_eq(r.tried_planned[PLAN_ORDER_DEPTH], 2000);
  plan_result_free(&r);

  plan_ok(&t, PLAN_ORDER_GREEDY, &r);
  ck_assert_int_eq(r.order_kind, PLAN_ORDER_GREEDY);
  const size_t greedy[] = {0, 2, 1, 3, 4};
  for (size_t i = 0; i < 5; i++)
    ck_assert_uint_eq(r.order[i], greedy[i]);
  /* a 0, c [1000,1300), b [1300,1800), d in a's block. */
  expect_offsets(&r, 6, (const uint64_t[]){NO, 0, 1300, 1000, 0, NO});
  ck_assert_int_eq(r.tried[PLAN_ORDER_GIVEN], 0);
  ck_assert_uint_eq(r.tried_planned[PLAN_ORDER_GIVEN], 0);
  plan_result_free(&r);
}
END_TEST

/* Two chains interleaved: x -> a1 -> a2, x -> b1 -> b2, (a2, b2) -> y with
 * 1000-byte a1, b1 and 10-byte a2, b2. The given order holds a1 and b1 at
 * once (arena 2010); greedy and depth-first finish a's chain first, so b1
 * reuses a1's block (arena 1020). Greedy wins the tie with depth. */
START_TEST(orders_differ) {
  tp t = {0};
  uint32_t x = val(&t, 8, 8, 1), a1 = val(&t, 1000, 8, 0),
           b1 = val(&t, 1000, 8, 0), a2 = val(&t, 10, 2, 0),
           b2 = val(&t, 10, 2, 0), y = val(&t, 8, 8, 1);
  step(&t, 0, L(x), L(a1));
  step(&t, 0, L(x), L(b1));
  step(&t, 0, L(a1), L(a2));
  step(&t, 0, L(b1), L(b2));
  step(&t, 0, L(a2, b2), L(y));
  plan_result r;
  plan_ok(&t, -1, &r);
  ck_assert_int_eq(r.order_kind, PLAN_ORDER_GREEDY);
  const size_t want[] = {0, 2, 1, 3, 4};
  for (size_t i = 0; i < 5; i++)
    ck_assert_uint_eq(r.order[i], want[i]);
  expect_offsets(&r, 6, (const uint64_t[]){NO, 0, 0, 1000, 1010, NO});
  ck_assert_uint_eq(r.arena_bytes, 1020);
  ck_assert_uint_eq(r.tried_planned[PLAN_ORDER_GIVEN], 16 + 2010);
  ck_assert_uint_eq(r.tried_planned[PLAN_ORDER_GREEDY], 16 + 1020);
  ck_assert_uint_eq(r.tried_planned[PLAN_ORDER_DEPTH], 16 + 1020);
  /* Given: a1, b1, a2 alive at step 2. Greedy: a2, b1, b2 at step 3. */
  ck_assert_uint_eq(r.tried_lower_bound[PLAN_ORDER_GIVEN], 16 + 2010);
  ck_assert_uint_eq(r.tried_lower_bound[PLAN_ORDER_GREEDY], 16 + 1020);
  ck_assert_uint_eq(r.lower_bound, 16 + 1020);
  plan_result_free(&r);
}
END_TEST

/* Holes of 100 bytes at 0 and 50 bytes at 110, kept apart by live 10-byte
 * values; a 40-byte value goes to the tighter hole, at 110. */
START_TEST(best_fit) {
  tp t = {0};
  uint32_t x = val(&t, 8, 8, 1), A = val(&t, 100, 1, 0), S1 = val(&t, 10, 1, 0),
           B = val(&t, 50, 1, 0), S2 = val(&t, 10, 1, 0), C = val(&t, 40, 1, 0),
           y = val(&t, 8, 8, 1);
  step(&t, 0, L(x), L(A));
  step(&t, 0, L(x), L(S1));
  step(&t, 0, L(x), L(B));
  step(&t, 0, L(x), L(S2));
  step(&t, 0, L(A, B), NIL); /* frees both holes */
  step(&t, 0, L(x), L(C));
  step(&t, 0, L(S1, S2, C), L(y));
  plan_result r;
  plan_ok(&t, PLAN_ORDER_GIVEN, &r);
  expect_offsets(&r, 7, (const uint64_t[]){NO, 0, 100, 110, 160, 110, NO});
  ck_assert_uint_eq(r.arena_bytes, 170);
  plan_result_free(&r);
}
END_TEST

/* A [0,100), B [100,200), D [200,300), S [300,310). Freeing A and D, then
 * B merges all three into [0,300), where a 300-byte C fits. */
START_TEST(coalescing) {
  tp t = {0};
  uint32_t x = val(&t, 8, 8, 1), A = val(&t, 100, 4, 0), B = val(&t, 100, 4, 0),
           D = val(&t, 100, 4, 0), S = val(&t, 10, 2, 0),
           C = val(&t, 300, 4, 0), y = val(&t, 8, 8, 1);
  step(&t, 0, L(x), L(A));
  step(&t, 0, L(x), L(B));
  step(&t, 0, L(x), L(D));
  step(&t, 0, L(x), L(S));
  step(&t, 0, L(A, D), NIL);
  step(&t, 0, L(B), NIL);
  step(&t, 0, L(x), L(C));
  step(&t, 0, L(S, C), L(y));
  plan_result r;
  plan_ok(&t, PLAN_ORDER_GIVEN, &r);
  expect_offsets(&r, 7, (const uint64_t[]){NO, 0, 100, 200, 300, 0, NO});
  ck_assert_uint_eq(r.arena_bytes, 310);
  ck_assert_uint_eq(r.lower_bound, 16 + 310);
  plan_result_free(&r);
}
END_TEST

/* Pinned values are never in the arena nor taken in place, even with the
 * mask set; a pinned output read later stays where it is. */
START_TEST(pinned_values) {
  tp t = {0};
  uint32_t x = val(&t, 64, 8, 1), w = val(&t, 32, 8, 1), a = val(&t, 64, 8, 0),
           o = val(&t, 64, 8, 1), b = val(&t, 64, 8, 0);
  step(&t, 3, L(x, w), L(a)); /* inputs pinned: no */
  step(&t, 1, L(a), L(o));    /* output pinned: no */
  step(&t, 3, L(o, a), L(b)); /* o pinned: no; a: yes */
  plan_result r;
  plan_ok(&t, -1, &r);
  expect_offsets(&r, 5, (const uint64_t[]){NO, NO, 0, NO, 0});
  ck_assert_int_eq(r.inplace_of[a], -1);
  ck_assert_int_eq(r.inplace_of[o], -1);
  ck_assert_int_eq(r.inplace_of[b], (int)a);
  ck_assert_uint_eq(r.pinned_bytes, 160);
  ck_assert_uint_eq(r.arena_bytes, 64);
  ck_assert_uint_eq(r.planned_bytes, 224);
  ck_assert_uint_eq(r.lower_bound, 224);
  ck_assert_uint_eq(r.naive_bytes, 288);
  plan_result_free(&r);

  plan_problem empty = {0, NULL, 0, NULL};
  char msg[256];
  ck_assert_int_eq(plan_build(&empty, &r, msg, sizeof msg), 0);
  ck_assert_int_eq(plan_verify(&empty, &r, msg, sizeof msg), 0);
  ck_assert_uint_eq(r.planned_bytes, 0);
  ck_assert_uint_eq(r.lower_bound, 0);
  plan_result_free(&r);

  tp u = {0}; /* nothing but pinned values */
  x = val(&u, 10, 1, 1);
  uint32_t y = val(&u, 20, 1, 1);
  step(&u, 1, L(x), L(y));
  plan_ok(&u, -1, &r);
  ck_assert_uint_eq(r.arena_bytes, 0);
  ck_assert_uint_eq(r.planned_bytes, 30);
  ck_assert_uint_eq(r.lower_bound, 30);
  plan_result_free(&r);
}
END_TEST

/* (a, a) -> b: the step reads a twice and is its last reader, so b takes
 * a (bit 1). When another step reads a later, it may not. */
START_TEST(read_twice) {
  tp t = {0};
  uint32_t x = val(&t, 16, 8, 1), a = val(&t, 64, 8, 0), b = val(&t, 64, 8, 0),
           c = val(&t, 64, 8, 0), y = val(&t, 16, 8, 1);
  step(&t, 0, L(x), L(a));
  step(&t, 2, L(a, a), L(b));
  step(&t, 1, L(b, x), L(c));
  step(&t, 0, L(c), L(y));
  plan_result r;
  plan_ok(&t, -1, &r);
  expect_offsets(&r, 5, (const uint64_t[]){NO, 0, 0, 0, NO});
  ck_assert_int_eq(r.inplace_of[b], (int)a);
  ck_assert_int_eq(r.inplace_of[c], (int)b);
  ck_assert_uint_eq(r.arena_bytes, 64);
  plan_result_free(&r);

  tp u = {0};
  x = val(&u, 16, 8, 1);
  a = val(&u, 64, 8, 0);
  b = val(&u, 64, 8, 0);
  c = val(&u, 64, 8, 0);
  y = val(&u, 16, 8, 1);
  step(&u, 0, L(x), L(a));
  step(&u, 3, L(a, a), L(b)); /* a is read again below */
  step(&u, 3, L(a, b), L(c)); /* a's last reader: c takes a */
  step(&u, 0, L(c), L(y));
  plan_ok(&u, -1, &r);
  expect_offsets(&r, 5, (const uint64_t[]){NO, 0, 64, 0, NO});
  ck_assert_int_eq(r.inplace_of[b], -1);
  ck_assert_int_eq(r.inplace_of[c], (int)a);
  plan_result_free(&r);
}
END_TEST

/* Zero-byte values take no room; a value nobody produces or reads gets no
 * offset. */
START_TEST(zero_bytes) {
  tp t = {0};
  uint32_t x = val(&t, 8, 8, 1), z = val(&t, 0, 64, 0), w = val(&t, 0, 1, 0),
           a = val(&t, 16, 8, 0), y = val(&t, 8, 8, 1),
           unused = val(&t, 100, 4, 0), dead = val(&t, 0, 16, 0);
  step(&t, 0, L(x), L(z, dead));
  step(&t, 1, L(z), L(w));
  step(&t, 0, L(w, x), L(a));
  step(&t, 0, L(a), L(y));
  plan_result r;
  plan_ok(&t, -1, &r);
  expect_offsets(&r, 7, (const uint64_t[]){NO, 0, 0, 0, NO, NO, 0});
  ck_assert_int_eq(r.inplace_of[w], (int)z);
  ck_assert_uint_eq(r.arena_bytes, 16);
  ck_assert_uint_eq(r.naive_bytes, 132);
  ck_assert_uint_eq(r.lower_bound, 32);
  plan_result_free(&r);
  (void)unused;
}
END_TEST

/* Best fit: a [0,3); b, alignment 8, at 8, leaving [3,8) free; c (2
 * bytes) fits there at 3, the best fit: arena 16. By size does better: b
 * [0,8), a [8,11), c [11,13), the 13 bytes alive at step 3. */
START_TEST(alignment) {
  tp t = {0};
  uint32_t x = val(&t, 8, 8, 1), a = val(&t, 3, 1, 0), b = val(&t, 8, 8, 0),
           c = val(&t, 2, 1, 0), y = val(&t, 8, 8, 1);
  step(&t, 0, L(x), L(a));
  step(&t, 0, L(x), L(b));
  step(&t, 0, L(x), L(c));
  step(&t, 0, L(a, b, c), L(y));
  plan_result r;
  plan_ok(&t, PLAN_ORDER_GIVEN, &r);
  expect_offsets(&r, 5, (const uint64_t[]){NO, 8, 0, 11, NO});
  ck_assert_uint_eq(r.arena_bytes, 13);
  ck_assert_int_eq(r.fit, PLAN_FIT_BY_SIZE);
  ck_assert_uint_eq(r.tried_arena[PLAN_ORDER_GIVEN][PLAN_FIT_BEST_FIT], 16);
  plan_result_free(&r);

  /* Two live 1-byte values with alignment 64: 65 bytes, more than the
   * plain sum of the sizes (see plan.h). */
  tp u = {0};
  x = val(&u, 8, 8, 1);
  a = val(&u, 1, 64, 0);
  b = val(&u, 1, 64, 0);
  y = val(&u, 8, 8, 1);
  step(&u, 0, L(x), L(a));
  step(&u, 0, L(x), L(b));
  step(&u, 0, L(a, b), L(y));
  char msg[256];
  ck_assert_int_eq(plan_build(prob(&u), &r, msg, sizeof msg), 0);
  ck_assert_int_eq(plan_verify(prob(&u), &r, msg, sizeof msg), 0);
  expect_offsets(&r, 4, (const uint64_t[]){NO, 0, 64, NO});
  ck_assert_uint_eq(r.arena_bytes, 65);
  ck_assert_uint_eq(r.naive_bytes, 18);
  plan_result_free(&r);
}
END_TEST

/* Best fit fragments, by size does not: A (100 bytes) lives over steps
 * 0-2, B (50) over 1-5, and C1 (150) from step 3, taken in place by C2 at
 * step 4, through step 5. Best fit puts A at 0 and B at 100; A's freed
 * [0,100) is too small for C1, which goes to 150: arena 300, while at most
 * 200 bytes are ever alive (B and the C chain). By size fits the C chain
 * (150 bytes, steps 3-5, one interval) at 0, A at 0 too (it is gone by
 * step 3), and B above both at 150: 200, the bound. */
START_TEST(by_size) {
  tp t = {0};
  uint32_t x = val(&t, 8, 8, 1), A = val(&t, 100, 2, 0), B = val(&t, 50, 2, 0),
           C1 = val(&t, 150, 2, 0), C2 = val(&t, 150, 2, 0),
           y = val(&t, 8, 8, 1);
  step(&t, 0, L(x), L(A));
  step(&t, 0, L(x), L(B));
  step(&t, 0, L(A), NIL);
  step(&t, 0, L(x), L(C1));
  step(&t, 1, L(C1), L(C2));
  step(&t, 0, L(B, C2), L(y));
  plan_result r;
  plan_ok(&t, PLAN_ORDER_GIVEN, &r);
  ck_assert_int_eq(r.fit, PLAN_FIT_BY_SIZE);
  expect_offsets(&r, 6, (const uint64_t[]){NO, 0, 150, 0, 0, NO});
  ck_assert_int_eq(r.inplace_of[C2], (int)C1);
  ck_assert_uint_eq(r.arena_bytes, 200);
  ck_assert_uint_eq(r.lower_bound, 16 + 200);
  ck_assert_uint_eq(r.planned_bytes, 16 + 200);
  const uint64_t *a = r.tried_arena[PLAN_ORDER_GIVEN];
  ck_assert_uint_eq(a[PLAN_FIT_BEST_FIT], 300);
  ck_assert_uint_eq(a[PLAN_FIT_BY_SIZE], 200);
  ck_assert_uint_eq(a[PLAN_FIT_BY_BREADTH], UINT64_MAX); /* not needed */
  ck_assert_uint_eq(r.tried_arena[PLAN_ORDER_GREEDY][PLAN_FIT_BEST_FIT],
                    UINT64_MAX); /* not tried */
  plan_result_free(&r);

  /* Every order can do as well: the plan keeps the given one. */
  plan_ok(&t, -1, &r);
  ck_assert_uint_eq(r.arena_bytes, 200);
  ck_assert_uint_eq(r.planned_bytes, r.lower_bound);
  plan_result_free(&r);
}
END_TEST

static void expect_invalid(tp *t, const char *want) {
  char msg[256] = "";
  plan_result r;
  memset(&r, 0xab, sizeof r);
  ck_assert_int_eq(plan_build(t ? prob(t) : NULL, &r, msg, sizeof msg), -2);
  ck_assert_msg_contains(msg, want);
  ck_assert_ptr_null(r.order);
  ck_assert_ptr_null(r.offset);
  plan_result_free(&r);
  ck_assert_int_eq(plan_build(t ? prob(t) : NULL, &r, NULL, 0), -2);
  plan_result_free(&r);
}

START_TEST(invalid) {
  tp t = {0};
  val(&t, 8, 8, 0);
  val(&t, 8, 8, 0);
  step(&t, 0, L(0), L(1));
  expect_invalid(&t, "step 0 reads value 0, which no step produces and which "
                     "is not pinned");
  t.v[0].pinned = 1;
  step(&t, 0, L(0), L(1));
  expect_invalid(&t, "value 1 is produced by steps 0 and 1");
  t.ns = 1;
  t.ids[0] = 7;
  expect_invalid(&t, "step 0 reads value 7, but there are only 2 values");
  t.ids[0] = 0;
  t.ids[1] = 9;
  expect_invalid(&t, "step 0 writes value 9, but there are only 2 values");
  t.ids[1] = 1;
  t.v[1].align = 3;
  expect_invalid(&t, "value 1 has alignment 3; alignments must be powers of "
                     "two");
  t.v[1].align = 0;
  expect_invalid(&t, "value 1 has alignment 0");
  t.v[1].align = 8;
  t.s[0].in = NULL;
  expect_invalid(&t, "NULL input list");
  t.s[0].in = &t.ids[0];
  t.v[0].bytes = UINT64_C(1) << 62;
  t.v[1].bytes = UINT64_C(1) << 62;
  expect_invalid(&t, "more than 2^63 bytes");
  t.v[0].bytes = t.v[1].bytes = 8;
  plan_result r;
  char msg[256];
  ck_assert_int_eq(plan_build(prob(&t), &r, msg, sizeof msg), 0); /* fixed */
  plan_result_free(&r);
  expect_invalid(NULL, "no problem given");
  ck_assert_int_eq(plan_build(prob(&t), NULL, msg, sizeof msg), -2);
  ck_assert_int_eq(
      plan_build_order(prob(&t), (plan_order)7, &r, msg, sizeof msg), -2);
  ck_assert_msg_contains(msg, "no such order");
  t.p.values = NULL;
  ck_assert_int_eq(plan_build(&t.p, &r, msg, sizeof msg), -2);
  ck_assert_msg_contains(msg, "NULL values array");

  tp c = {0}; /* two steps feeding each other */
  val(&c, 8, 8, 0);
  val(&c, 8, 8, 0);
  step(&c, 0, L(1), L(0));
  step(&c, 0, L(0), L(1));
  expect_invalid(&c, "the steps are not a DAG: step 0 is on a cycle (it "
                     "reads value 1, produced by step 1, which depends on "
                     "step 0)");

  tp l = {0}; /* a cycle of three behind a valid step, and a reader */
  uint32_t x = val(&l, 8, 8, 1), a = val(&l, 8, 8, 0), b = val(&l, 8, 8, 0),
           cc = val(&l, 8, 8, 0), d = val(&l, 8, 8, 0), y = val(&l, 8, 8, 1);
  step(&l, 0, L(d), L(y));
  step(&l, 0, L(x), L(a));
  step(&l, 0, L(a, d), L(b));
  step(&l, 0, L(b), L(cc));
  step(&l, 0, L(cc), L(d));
  expect_invalid(&l, "is on a cycle");

  tp s = {0}; /* a step reading its own output */
  val(&s, 8, 8, 0);
  step(&s, 0, L(0), L(0));
  expect_invalid(&s, "the steps are not a DAG: step 0 reads value 0, which "
                     "it produces itself");
}
END_TEST

/* A DAG whose indices are not an order: the given order is skipped by
 * plan_build and refused by plan_build_order. */
START_TEST(given_not_topological) {
  tp t = {0};
  uint32_t x = val(&t, 8, 8, 1), a = val(&t, 8, 8, 0), y = val(&t, 8, 8, 1);
  step(&t, 0, L(a), L(y));
  step(&t, 0, L(x), L(a));
  plan_result r;
  plan_ok(&t, -1, &r);
  ck_assert_int_eq(r.order_kind, PLAN_ORDER_GREEDY);
  ck_assert_int_eq(r.tried[PLAN_ORDER_GIVEN], 0);
  ck_assert_uint_eq(r.tried_planned[PLAN_ORDER_GIVEN], 0);
  ck_assert_uint_eq(r.order[0], 1);
  ck_assert_uint_eq(r.order[1], 0);
  plan_result_free(&r);
  char msg[256];
  ck_assert_int_eq(
      plan_build_order(prob(&t), PLAN_ORDER_GIVEN, &r, msg, sizeof msg), -2);
  ck_assert_msg_contains(msg, "not topological");
  plan_result_free(&r);
}
END_TEST

static void expect_rejected(tp *t, const plan_result *r, const char *want) {
  char msg[256] = "";
  ck_assert_int_eq(plan_verify(prob(t), r, msg, sizeof msg), -1);
  ck_assert_msg_contains(msg, want);
}

START_TEST(verify_catches) {
  tp t = {0}; /* the diamond: a 0, b 1000, c 1500, d 0; arena 1800 */
  uint32_t x = val(&t, 100, 4, 1), a = val(&t, 1000, 4, 0),
           b = val(&t, 500, 4, 0), c = val(&t, 300, 4, 0),
           d = val(&t, 200, 4, 0), y = val(&t, 100, 4, 1);
  step(&t, 0, L(x), L(a));
  step(&t, 0, L(a), L(b));
  step(&t, 0, L(a), L(c));
  step(&t, 0, L(b, c), L(d));
  step(&t, 0, L(d), L(y));
  plan_result r;
  plan_ok(&t, -1, &r);
  char msg[256];

  r.offset[c] = 1000;
  expect_rejected(&t, &r, "values 2 and 3 overlap at position 2 (step 2)");
  r.offset[c] = 1500;
  r.offset[b] = 1002;
  expect_rejected(&t, &r,
                  "value 2: offset 1002 is not a multiple of its "
                  "alignment 4");
  r.offset[b] = 1400;
  expect_rejected(&t, &r, "lies outside the 1800-byte arena");
  r.offset[b] = 1000;
  r.offset[x] = 0;
  expect_rejected(&t, &r, "value 0 is pinned");
  r.offset[x] = UINT64_MAX;
  r.order[1] = 2;
  r.order[2] = 1;
  ck_assert_int_eq(plan_verify(prob(&t), &r, msg, sizeof msg), 0); /* fine */
  r.order[0] = 1;
  r.order[1] = 0;
  r.order[2] = 2;
  expect_rejected(&t, &r,
                  "the order breaks a dependency: step 1 (position "
                  "0) reads value 1, produced at position 1");
  r.order[0] = 0;
  r.order[1] = 0;
  expect_rejected(&t, &r, "order[1] = 0: the step appears twice");
  r.order[1] = 9;
  expect_rejected(&t, &r, "order[1] = 9: no such step");
  r.order[1] = 1;
  r.order[2] = 2;
  ck_assert_int_eq(plan_verify(prob(&t), &r, msg, sizeof msg), 0);
  r.inplace_of[d] = (int)b; /* the mask forbids it */
  r.offset[d] = 1000;
  expect_rejected(&t, &r, "value 4 may not take value 2's storage");
  r.inplace_of[d] = -1;
  r.offset[d] = 0;
  r.lower_bound++;
  expect_rejected(&t, &r, "lower bound 2001 (2000)");
  r.lower_bound--;
  r.arena_bytes += 8;
  expect_rejected(&t, &r, "planned 2000 (200 + arena 1808)");
  r.arena_bytes -= 8;
  ck_assert_int_eq(plan_verify(prob(&t), &r, msg, sizeof msg), 0);
  plan_result_free(&r);
  ck_assert_int_eq(plan_verify(prob(&t), &r, msg, sizeof msg), -1);
  ck_assert_int_eq(plan_verify(NULL, &r, msg, sizeof msg), -1);

  tp u = {0}; /* a read by two steps: only the second may take it */
  x = val(&u, 16, 8, 1);
  a = val(&u, 64, 8, 0);
  b = val(&u, 64, 8, 0);
  c = val(&u, 64, 8, 0);
  y = val(&u, 16, 8, 1);
  step(&u, 0, L(x), L(a));
  step(&u, 3, L(a, a), L(b));
  step(&u, 3, L(a, b), L(c));
  step(&u, 0, L(c), L(y));
  plan_ok(&u, -1, &r); /* a 0, b 64, c takes a at 0 */
  r.inplace_of[b] = (int)a;
  r.offset[b] = 0;
  r.inplace_of[c] = -1;
  r.offset[c] = 64;
  expect_rejected(&u, &r, "value 2 may not take value 1's storage");
  r.inplace_of[b] = -1;
  expect_rejected(&u, &r, "lower bound");
  plan_result_free(&r);

  /* The same offsets without the in-place link: an overlap. */
  tp v = {0};
  x = val(&v, 16, 8, 1);
  a = val(&v, 64, 8, 0);
  b = val(&v, 64, 8, 0);
  y = val(&v, 16, 8, 1);
  step(&v, 0, L(x), L(a));
  step(&v, 0, L(a), L(b));
  step(&v, 0, L(b), L(y));
  plan_ok(&v, -1, &r);
  ck_assert_uint_eq(r.offset[b], 64);
  r.offset[b] = 0; /* totals still agree: only the sweep can tell */
  r.arena_bytes = 64;
  r.planned_bytes = 32 + 64;
  expect_rejected(&v, &r,
                  "values 1 and 2 overlap at position 1 (step 1): "
                  "[0, 64) and [0, 64)");
  plan_result_free(&r);
}
END_TEST

/* ---- Random problems ---------------------------------------------------- */

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t rnd(rng *g) {
  /* xorshift64* (Vigna, "An experimental exploration of Marsaglia's
   * xorshift generators, scrambled", 2016). */
  g->s ^= g->s >> 12;
  g->s ^= g->s << 25;
  g->s ^= g->s >> 27;
  return g->s * UINT64_C(2685821657736338717);
}

static uint64_t below(rng *g, uint64_t n) {
  return n ? rnd(g) % n : 0;
}

typedef struct gen {
  plan_value *v;
  plan_step *s;
  uint32_t *ids;
  size_t nv, ns, nid;
  plan_problem p;
} gen;

static void gen_free(gen *g) {
  free(g->v);
  free(g->s);
  free(g->ids);
}

/* Alignment families: 0 mixed (1..64), 1 all 1, 2 one alignment that
 * divides every size (no padding, so planned <= naive must hold). */
static void gen_value(gen *q, rng *g, int family, uint32_t common, int pinned,
                      const plan_value *like) {
  plan_value *v = &q->v[q->nv++];
  uint32_t al = family == 0   ? UINT32_C(1) << below(g, 7)
                : family == 1 ? 1
                              : common;
  uint64_t b = below(g, 10) == 0 ? 0 : 1 + below(g, UINT64_C(1) << 20);
  if (like && below(g, 2))
    b = like->bytes; /* a chance for in place */
  if (family == 2)
    b = (b + al - 1) / al * al;
  *v = (plan_value){b, al, pinned};
}

/* A random DAG of n steps over a few pinned sources: fan-in 0..4, mostly
 * recent values, 0..3 outputs, some pinned, random in-place masks. When
 * shuffle, the step indices are permuted (the given order may break). */
static void gen_problem(gen *q, rng *g, size_t n, int family, int shuffle) {
  size_t cap_v = 8 + 4 * n;
  q->v = malloc(cap_v * sizeof *q->v);
  q->s = malloc((n ? n : 1) * sizeof *q->s);
  q->ids = malloc((8 * n + 1) * sizeof *q->ids);
  ck_assert(q->v && q->s && q->ids);
  q->nv = q->ns = q->nid = 0;
  uint32_t common = UINT32_C(1) << below(g, 7);
  size_t n_src = below(g, 4);
  for (size_t i = 0; i < n_src; i++)
    gen_value(q, g, family, common, 1, NULL);
  for (size_t s = 0; s < n; s++) {
    plan_step *st = &q->s[q->ns++];
    size_t fan = q->nv ? below(g, 5) : 0, nout = below(g, 10);
    nout = nout == 0 ? 0 : nout < 8 ? 1 : nout < 9 ? 2 : 3;
    st->in = &q->ids[q->nid];
    st->n_in = fan;
    for (size_t k = 0; k < fan; k++) {
      size_t lo = q->nv > 6 && below(g, 3) ? q->nv - 6 : 0;
      q->ids[q->nid++] = (uint32_t)(lo + below(g, q->nv - lo));
    }
    st->out = &q->ids[q->nid];
    st->n_out = nout;
    const plan_value *like = fan ? &q->v[st->in[below(g, fan)]] : NULL;
    for (size_t j = 0; j < nout; j++) {
      q->ids[q->nid++] = (uint32_t)q->nv;
      gen_value(q, g, family, common, below(g, 8) == 0, j ? NULL : like);
    }
    st->inplace_mask = below(g, 2) ? (uint32_t)below(g, 32) : 0;
  }
  if (below(g, 4) == 0)
    gen_value(q, g, family, common, 0, NULL); /* never produced nor read */
  if (shuffle)
    for (size_t i = n; i > 1; i--) {
      size_t j = below(g, i);
      plan_step tmp = q->s[i - 1];
      q->s[i - 1] = q->s[j];
      q->s[j] = tmp;
    }
  q->p = (plan_problem){q->nv, q->v, q->ns, q->s};
}

/* By size with hundreds of neighbours to sort: 500 1024-byte values, each
 * read by the next, alternate between [0,1024) and [1024,2048); T, 8
 * bytes, alive throughout and the smallest, is fitted last, above all of
 * them and above the by_size pattern in front (A 3200 bytes, B 1600, C
 * 4800: best fit needs 9600, the bound is B + C + T = 6408), so at 6400. */
START_TEST(by_size_many) {
  const size_t n = 500;
  gen q;
  q.v = malloc((n + 16) * sizeof *q.v);
  q.s = malloc((n + 16) * sizeof *q.s);
  q.ids = malloc(4 * (n + 16) * sizeof *q.ids);
  ck_assert(q.v && q.s && q.ids);
  q.nv = q.ns = q.nid = 0;
#define V(b, al, pin) (q.v[q.nv] = (plan_value){b, al, pin}, (uint32_t)q.nv++)
#define S(n_in, n_out, ...)                                                    \
  do {                                                                         \
    const uint32_t io[] = {__VA_ARGS__};                                       \
    q.s[q.ns++] =                                                              \
        (plan_step){n_in, &q.ids[q.nid], n_out, &q.ids[q.nid + n_in], 0};      \
    memcpy(&q.ids[q.nid], io, sizeof io);                                      \
    q.nid += n_in + n_out;                                                     \
  } while (0)
  uint32_t x = V(8, 8, 1), A = V(3200, 8, 0), B = V(1600, 8, 0),
           C = V(4800, 8, 0), T = V(8, 8, 0);
  S(1, 1, x, A);
  S(1, 1, x, B);
  S(1, 0, A);
  S(1, 1, x, C);
  S(2, 1, B, C, T); /* T: 8 bytes, alive to the end */
  uint32_t prev = T;
  for (size_t i = 0; i < n; i++) {
    uint32_t v = V(1024, 8, 0);
    S(1, 1, prev, v);
    prev = v;
  }
  uint32_t y = V(8, 8, 1);
  S(2, 1, prev, T, y);
#undef S
#undef V
  q.p = (plan_problem){q.nv, q.v, q.ns, q.s};
  plan_result r;
  char msg[256];
  ck_assert_int_eq(
      plan_build_order(&q.p, PLAN_ORDER_GIVEN, &r, msg, sizeof msg), 0);
  ck_assert_msg(plan_verify(&q.p, &r, msg, sizeof msg) == 0, "%s", msg);
  check_fits(&q.p, &r);
  ck_assert_int_eq(r.fit, PLAN_FIT_BY_SIZE);
  ck_assert_uint_eq(r.tried_arena[PLAN_ORDER_GIVEN][PLAN_FIT_BEST_FIT], 9600);
  ck_assert_uint_eq(r.arena_bytes, 6408);
  ck_assert_uint_eq(r.arena_bytes, r.lower_bound - r.pinned_bytes);
  ck_assert_uint_eq(r.offset[T], 6400);
  ck_assert_uint_eq(r.offset[T + 1], 0);
  ck_assert_uint_eq(r.offset[T + 2], 1024);
  plan_result_free(&r);
  gen_free(&q);
}
END_TEST

/* Whether the indices are a topological order, found the simple way. */
static int given_is_topological(const gen *q) {
  int ok = 1;
  size_t *prod = malloc((q->nv ? q->nv : 1) * sizeof *prod);
  ck_assert_ptr_nonnull(prod);
  for (size_t v = 0; v < q->nv; v++)
    prod[v] = SIZE_MAX;
  for (size_t s = 0; s < q->ns; s++)
    for (size_t j = 0; j < q->s[s].n_out; j++)
      prod[q->s[s].out[j]] = s;
  for (size_t s = 0; s < q->ns; s++)
    for (size_t k = 0; k < q->s[s].n_in; k++)
      if (prod[q->s[s].in[k]] != SIZE_MAX && prod[q->s[s].in[k]] >= s)
        ok = 0;
  free(prod);
  return ok;
}

START_TEST(random_problems) {
  int n_problems = getenv("TYTO_TEST_UNDER_VALGRIND") ? 400 : 1500;
  rng g = {UINT64_C(0x9e3779b97f4a7c15)};
  double ratio[PLAN_ORDER_COUNT] = {0}, kept_ratio = 0, saved = 0;
  double bf_ratio = 0; /* best fit alone: the plan before the offline ones */
  int n_ratio[PLAN_ORDER_COUNT] = {0}, wins[PLAN_ORDER_COUNT] = {0};
  int fitted[PLAN_FIT_COUNT] = {0}, n_offline = 0;
  int n_kept = 0, over_naive = 0, inplace = 0;
  for (int it = 0; it < n_problems; it++) {
    gen q;
    int family = it % 3;
    gen_problem(&q, &g, 1 + below(&g, 60), family, below(&g, 10) == 0);
    char msg[256] = "";
    plan_result r;
    int rc = plan_build(&q.p, &r, msg, sizeof msg);
    ck_assert_msg(rc == 0, "problem %d: %d %s", it, rc, msg);
    ck_assert_msg(plan_verify(&q.p, &r, msg, sizeof msg) == 0, "problem %d: %s",
                  it, msg);
    check_fits(&q.p, &r);
    uint64_t slack = 0;
    for (size_t v = 0; v < q.nv; v++)
      if (!q.v[v].pinned)
        slack += q.v[v].align - 1;
    ck_assert_uint_le(r.lower_bound, r.planned_bytes);
    ck_assert_uint_le(r.planned_bytes, r.naive_bytes + slack);
    if (family)
      ck_assert_msg(r.planned_bytes <= r.naive_bytes,
                    "problem %d: planned %llu > naive %llu", it,
                    (unsigned long long)r.planned_bytes,
                    (unsigned long long)r.naive_bytes);
    over_naive += r.planned_bytes > r.naive_bytes;
    ck_assert_int_eq(r.tried[PLAN_ORDER_GIVEN], given_is_topological(&q));
    ck_assert(r.tried[r.order_kind]);
    ck_assert_uint_eq(r.tried_planned[r.order_kind], r.planned_bytes);
    ck_assert_uint_eq(r.tried_lower_bound[r.order_kind], r.lower_bound);
    for (int k = 0; k < PLAN_ORDER_COUNT; k++) {
      if (!r.tried[k]) {
        ck_assert_uint_eq(r.tried_planned[k], 0);
        continue;
      }
      ck_assert_uint_le(r.planned_bytes, r.tried_planned[k]);
      if (k < (int)r.order_kind) /* ties keep the lowest */
        ck_assert_uint_lt(r.planned_bytes, r.tried_planned[k]);
      /* Each order on its own: valid, and the same numbers. */
      plan_result one;
      ck_assert_int_eq(
          plan_build_order(&q.p, (plan_order)k, &one, msg, sizeof msg), 0);
      ck_assert_msg(plan_verify(&q.p, &one, msg, sizeof msg) == 0,
                    "problem %d order %d: %s", it, k, msg);
      check_fits(&q.p, &one);
      ck_assert_uint_eq(one.planned_bytes, r.tried_planned[k]);
      ck_assert_uint_eq(one.lower_bound, r.tried_lower_bound[k]);
      for (int s = 0; s < PLAN_FIT_COUNT; s++)
        ck_assert_uint_eq(one.tried_arena[k][s], r.tried_arena[k][s]);
      ck_assert_uint_le(one.lower_bound, one.planned_bytes);
      if (one.lower_bound > r.pinned_bytes) {
        ratio[k] += (double)(one.planned_bytes - r.pinned_bytes) /
                    (double)(one.lower_bound - r.pinned_bytes);
        n_ratio[k]++;
      }
      plan_result_free(&one);
    }
    if (r.lower_bound > r.pinned_bytes) {
      kept_ratio +=
          (double)r.arena_bytes / (double)(r.lower_bound - r.pinned_bytes);
      n_kept++;
      /* Best fit alone would have kept the order of least best-fit arena. */
      int kb = -1;
      for (int k = 0; k < PLAN_ORDER_COUNT; k++)
        if (r.tried[k] &&
            (kb < 0 || r.tried_arena[k][0] < r.tried_arena[kb][0]))
          kb = k;
      uint64_t bound = r.tried_lower_bound[kb] - r.pinned_bytes;
      bf_ratio += bound ? (double)r.tried_arena[kb][0] / (double)bound : 1.0;
    }
    fitted[r.fit]++;
    n_offline += r.tried_arena[r.order_kind][PLAN_FIT_BY_SIZE] != UINT64_MAX;
    if (r.naive_bytes > r.pinned_bytes)
      saved += 1.0 -
               (double)r.arena_bytes / (double)(r.naive_bytes - r.pinned_bytes);
    wins[r.order_kind]++;
    for (size_t v = 0; v < q.nv; v++)
      inplace += r.inplace_of[v] >= 0;
    plan_result_free(&r);
    gen_free(&q);
  }
  printf("plan random: %d problems; arena / live-set lower bound (pinned "
         "excluded): given %.4f, greedy %.4f, depth %.4f, kept %.4f; kept "
         "given/greedy/depth %d/%d/%d; arena saves %.1f%% of the naive "
         "temporaries; %d values in place; %d plans above naive (mixed "
         "alignments only)\n",
         n_problems, ratio[0] / n_ratio[0], ratio[1] / n_ratio[1],
         ratio[2] / n_ratio[2], kept_ratio / n_kept, wins[0], wins[1], wins[2],
         100 * saved / n_problems, inplace, over_naive);
  printf("plan random: arena / live-set lower bound of the plan kept, best "
         "fit alone %.4f, best of the fits %.4f; offline fits "
         "run on %d kept orders; kept best fit/by size/by breadth "
         "%d/%d/%d\n",
         bf_ratio / n_kept, kept_ratio / n_kept, n_offline, fitted[0],
         fitted[1], fitted[2]);
}
END_TEST

/* The verifier against a brute-force check: one arena value of a valid
 * plan moved to another aligned offset inside the arena must be rejected
 * for an overlap exactly when it now overlaps a value alive at a common
 * position (checked pair by pair), and the plan passes otherwise. */
START_TEST(verify_finds_every_overlap) {
  int n_problems = getenv("TYTO_TEST_UNDER_VALGRIND") ? 300 : 3000;
  int rejected = 0, moved = 0;
  rng g = {UINT64_C(0x2545f4914f6cdd1d)};
  for (int it = 0; it < n_problems; it++) {
    gen q;
    gen_problem(&q, &g, 2 + below(&g, 80), (int)below(&g, 3), 0);
    char msg[256] = "";
    plan_result r;
    ck_assert_int_eq(plan_build(&q.p, &r, msg, sizeof msg), 0);
    /* Lifetimes in the kept order, as plan.h defines them. */
    size_t *pos = malloc((q.ns ? q.ns : 1) * sizeof *pos);
    size_t *first = malloc(q.nv * sizeof *first);
    size_t *last = malloc(q.nv * sizeof *last);
    int *taken = calloc(q.nv, sizeof *taken);
    ck_assert(pos && first && last && taken);
    for (size_t i = 0; i < q.ns; i++)
      pos[r.order[i]] = i;
    for (size_t v = 0; v < q.nv; v++)
      first[v] = SIZE_MAX;
    for (size_t st = 0; st < q.ns; st++)
      for (size_t j = 0; j < q.s[st].n_out; j++)
        first[q.s[st].out[j]] = last[q.s[st].out[j]] = pos[st];
    for (size_t st = 0; st < q.ns; st++)
      for (size_t k = 0; k < q.s[st].n_in; k++) {
        uint32_t v = q.s[st].in[k];
        if (first[v] != SIZE_MAX && pos[st] > last[v])
          last[v] = pos[st];
      }
    for (size_t v = 0; v < q.nv; v++)
      if (r.inplace_of[v] >= 0)
        taken[r.inplace_of[v]] = 1;
    /* A value with its own storage, nobody's in-place partner. */
    size_t cand = SIZE_MAX, seen = 0;
    for (size_t v = 0; v < q.nv; v++)
      if (!q.v[v].pinned && first[v] != SIZE_MAX && q.v[v].bytes &&
          r.inplace_of[v] < 0 && !taken[v] && below(&g, ++seen) == 0)
        cand = v;
    if (cand != SIZE_MAX && q.v[cand].bytes < r.arena_bytes) {
      uint64_t al = q.v[cand].align,
               room = (r.arena_bytes - q.v[cand].bytes) / al;
      uint64_t lo = below(&g, room + 1) * al, hi = lo + q.v[cand].bytes;
      r.offset[cand] = lo;
      moved++;
      int clash = 0;
      for (size_t u = 0; u < q.nv && !clash; u++)
        clash = u != cand && !q.v[u].pinned && first[u] != SIZE_MAX &&
                q.v[u].bytes && first[u] <= last[cand] &&
                first[cand] <= last[u] && r.offset[u] < hi &&
                lo < r.offset[u] + q.v[u].bytes;
      int rc = plan_verify(&q.p, &r, msg, sizeof msg);
      ck_assert_msg(rc == (clash ? -1 : 0), "problem %d: value %zu at %llu: %s",
                    it, cand, (unsigned long long)lo,
                    rc ? msg : "accepted, but it overlaps");
      if (clash)
        ck_assert_msg(strstr(msg, "overlap") != NULL, "%s", msg);
      rejected += clash;
    }
    free(pos);
    free(first);
    free(last);
    free(taken);
    plan_result_free(&r);
    gen_free(&q);
  }
  printf("plan verify: %d plans with a value moved, %d rejected\n", moved,
         rejected);
  ck_assert_int_gt(rejected, moved / 10);
  ck_assert_int_gt(moved - rejected, moved / 10);
}
END_TEST

/* Garbage problems: out-of-range indices, bad alignments, huge sizes,
 * cycles. Never a crash; 0 means a plan that verifies, else -2. */
START_TEST(random_garbage) {
  int n = getenv("TYTO_TEST_UNDER_VALGRIND") ? 200 : 3000, n_ok = 0;
  rng g = {12345};
  for (int it = 0; it < n; it++) {
    size_t nv = below(&g, 12), ns = below(&g, 10);
    plan_value v[12];
    plan_step s[10];
    uint32_t ids[10][8];
    for (size_t i = 0; i < nv; i++) {
      uint64_t big = below(&g, 20) == 0;
      v[i] = (plan_value){big ? UINT64_MAX / 3 : below(&g, 100),
                          below(&g, 15) == 0 ? (uint32_t)below(&g, 70)
                                             : UINT32_C(1) << below(&g, 7),
                          below(&g, 3) == 0};
    }
    for (size_t i = 0; i < ns; i++) {
      size_t ni = below(&g, 4), no = below(&g, 3);
      for (size_t k = 0; k < ni + no; k++)
        ids[i][k] = (uint32_t)below(&g, nv + 1);
      s[i] = (plan_step){ni, ids[i], no, ids[i] + ni, (uint32_t)rnd(&g)};
    }
    plan_problem p = {nv, v, ns, s};
    char msg[256] = "";
    plan_result r;
    int rc = plan_build(&p, &r, msg, sizeof msg);
    ck_assert_msg(rc == 0 || rc == -2, "rc %d", rc);
    if (rc == 0) {
      ck_assert_msg(plan_verify(&p, &r, msg, sizeof msg) == 0, "%s", msg);
      n_ok++;
    } else {
      ck_assert_msg(msg[0] != 0, "a -2 without a message");
    }
    plan_result_free(&r);
  }
  printf("plan garbage: %d problems, %d valid and planned\n", n, n_ok);
  ck_assert_int_gt(n_ok, 0);
}
END_TEST

/* ---- A large problem, timed ---------------------------------------------- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A random n-step DAG, harder than most graphs: 300 pinned parameters,
 * each step reading 1..3 recent values and, one read in 20, any earlier
 * value (long lifetimes, a fragmented arena), 64-byte alignment, half the
 * steps allowed in place. Timed (printed, never asserted): 15,000 steps,
 * where the lifetimes overlap too much for the offline fits, and
 * 1,000, where they run. */
static void timed(size_t n) {
  int valgrind = getenv("TYTO_TEST_UNDER_VALGRIND") != NULL;
  rng g = {777};
  gen q;
  q.v = malloc((n * 2 + 400) * sizeof *q.v);
  q.s = malloc(n * sizeof *q.s);
  q.ids = malloc(n * 8 * sizeof *q.ids);
  ck_assert(q.v && q.s && q.ids);
  q.nv = q.ns = q.nid = 0;
  for (size_t i = 0; i < 300; i++)
    q.v[q.nv++] = (plan_value){64 * (1 + below(&g, 4096)), 64, 1};
  for (size_t s = 0; s < n; s++) {
    plan_step *st = &q.s[q.ns++];
    size_t fan = 1 + below(&g, 3);
    st->in = &q.ids[q.nid];
    st->n_in = fan;
    for (size_t k = 0; k < fan; k++) {
      size_t back = below(&g, 20) == 0 ? below(&g, q.nv) : below(&g, 8);
      size_t v = q.nv > 300 + back ? q.nv - 1 - back : below(&g, 300);
      q.ids[q.nid++] = (uint32_t)v;
    }
    if (below(&g, 6) == 0)
      q.ids[q.nid++] = (uint32_t)below(&g, 300), st->n_in++;
    st->out = &q.ids[q.nid];
    st->n_out = below(&g, 10) == 0 ? 2 : 1;
    for (size_t j = 0; j < st->n_out; j++) {
      q.ids[q.nid++] = (uint32_t)q.nv;
      uint64_t b = j == 0 && below(&g, 2) ? q.v[st->in[0]].bytes
                                          : 1 + below(&g, UINT64_C(1) << 22);
      q.v[q.nv++] = (plan_value){b, 64, s + 1 == n || below(&g, 200) == 0};
    }
    st->inplace_mask = below(&g, 2) ? 1 : 0;
  }
  q.p = (plan_problem){q.nv, q.v, q.ns, q.s};
  int reps = valgrind ? 1 : 30;
  double t_all[30], t_one[PLAN_ORDER_COUNT][30], t_verify = 0;
  plan_result r;
  char msg[256];
  for (int i = 0; i < reps; i++) {
    double t0 = now();
    ck_assert_int_eq(plan_build(&q.p, &r, msg, sizeof msg), 0);
    t_all[i] = now() - t0;
    if (i + 1 < reps)
      plan_result_free(&r);
  }
  for (int k = 0; k < PLAN_ORDER_COUNT; k++)
    for (int i = 0; i < reps; i++) {
      plan_result one;
      double t0 = now();
      ck_assert_int_eq(
          plan_build_order(&q.p, (plan_order)k, &one, msg, sizeof msg), 0);
      t_one[k][i] = now() - t0;
      plan_result_free(&one);
    }
  double t0 = now();
  ck_assert_msg(plan_verify(&q.p, &r, msg, sizeof msg) == 0, "%s", msg);
  t_verify = now() - t0;
  ck_assert_uint_le(r.lower_bound, r.planned_bytes);
  ck_assert_uint_le(r.planned_bytes, r.naive_bytes);
  check_fits(&q.p, &r);
  qsort(t_all, (size_t)reps, sizeof *t_all, cmp_double);
  for (int k = 0; k < PLAN_ORDER_COUNT; k++)
    qsort(t_one[k], (size_t)reps, sizeof **t_one, cmp_double);
  const char *names[] = {"given", "greedy", "depth"};
  printf("plan timed: %zu steps, %zu values; plan_build (3 orders, all "
         "fits) min %.2f ms, median %.2f ms over %d runs%s; "
         "plan_verify %.2f ms\n",
         q.ns, q.nv, 1e3 * t_all[0], 1e3 * t_all[reps / 2], reps,
         valgrind ? " (under valgrind)" : "", 1e3 * t_verify);
  printf("%-8s %10s %12s %12s %12s %12s %12s %8s\n", "order", "median ms",
         "planned MB", "best fit MB", "by size MB", "breadth MB",
         "lower bnd MB", "ratio");
  for (int k = 0; k < PLAN_ORDER_COUNT; k++) {
    char col[PLAN_FIT_COUNT][32];
    for (int p = 0; p < PLAN_FIT_COUNT; p++) {
      uint64_t a = r.tried_arena[k][p];
      if (a == UINT64_MAX)
        snprintf(col[p], sizeof col[p], "not run");
      else
        snprintf(col[p], sizeof col[p], "%.2f",
                 (r.pinned_bytes + a) / 1048576.0);
    }
    printf("%-8s %10.2f %12.2f %12s %12s %12s %12.2f %8.4f\n", names[k],
           1e3 * t_one[k][reps / 2], r.tried_planned[k] / 1048576.0, col[0],
           col[1], col[2], r.tried_lower_bound[k] / 1048576.0,
           (double)r.tried_planned[k] / (double)r.tried_lower_bound[k]);
  }
  printf("plan timed: naive %.1f MB, kept %s at %.1f MB (pinned %.1f MB)\n",
         r.naive_bytes / 1048576.0, names[r.order_kind],
         r.planned_bytes / 1048576.0, r.pinned_bytes / 1048576.0);
  printf("BENCH plan_build steps=%zu min_ms=%.3f median_ms=%.3f\n", q.ns,
         1e3 * t_all[0], 1e3 * t_all[reps / 2]);
  plan_result_free(&r);
  gen_free(&q);
}

START_TEST(large) {
  timed(15000);
}
END_TEST

START_TEST(medium) {
  timed(1000);
}
END_TEST

/* A deep network's training step: 7,500 forward steps (activation and a
 * pinned parameter in, activation out) and 7,500 backward steps reading
 * the gradient and the saved activation in reverse, a pinned parameter
 * gradient every 10 steps. All three orders coincide. */
START_TEST(large_network) {
  const size_t L = 7500;
  rng g = {5};
  gen q;
  q.v = malloc((3 * L + 1000) * sizeof *q.v);
  q.s = malloc(2 * L * sizeof *q.s);
  q.ids = malloc(2 * L * 5 * sizeof *q.ids);
  uint32_t *act = malloc((L + 1) * sizeof *act);
  ck_assert(q.v && q.s && q.ids && act);
  q.nv = q.ns = q.nid = 0;
  act[0] = (uint32_t)q.nv;
  q.v[q.nv++] = (plan_value){1 << 20, 64, 1};
  for (size_t i = 0; i < L; i++) {
    plan_step *st = &q.s[q.ns++];
    st->in = &q.ids[q.nid];
    q.ids[q.nid++] = act[i];
    q.ids[q.nid++] = (uint32_t)q.nv;
    q.v[q.nv++] = (plan_value){64 * (1 + below(&g, 1000)), 64, 1};
    st->n_in = 2;
    st->out = &q.ids[q.nid];
    q.ids[q.nid++] = act[i + 1] = (uint32_t)q.nv;
    q.v[q.nv++] = (plan_value){64 * (1 + below(&g, 16384)), 64, i + 1 == L};
    st->n_out = 1;
    st->inplace_mask = 1;
  }
  uint32_t grad = act[L];
  for (size_t i = L; i-- > 0;) {
    plan_step *st = &q.s[q.ns++];
    st->in = &q.ids[q.nid];
    q.ids[q.nid++] = grad;
    q.ids[q.nid++] = act[i];
    st->n_in = 2;
    st->out = &q.ids[q.nid];
    q.ids[q.nid++] = grad = (uint32_t)q.nv;
    q.v[q.nv++] = (plan_value){q.v[act[i]].bytes, 64, i == 0};
    st->n_out = 1;
    if (i % 10 == 0) {
      q.ids[q.nid++] = (uint32_t)q.nv;
      q.v[q.nv++] = (plan_value){4096, 64, 1};
      st->n_out++;
    }
    st->inplace_mask = 1;
  }
  q.p = (plan_problem){q.nv, q.v, q.ns, q.s};
  int reps = getenv("TYTO_TEST_UNDER_VALGRIND") ? 1 : 30;
  double t[30];
  plan_result r;
  char msg[256];
  for (int i = 0; i < reps; i++) {
    double t0 = now();
    ck_assert_int_eq(plan_build(&q.p, &r, msg, sizeof msg), 0);
    t[i] = now() - t0;
    if (i + 1 < reps)
      plan_result_free(&r);
  }
  ck_assert_msg(plan_verify(&q.p, &r, msg, sizeof msg) == 0, "%s", msg);
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  /* Saved activations stay until their backward step: the peak is at the
   * turn, where every non-pinned activation is alive. */
  uint64_t saved = 0;
  for (size_t i = 1; i < L; i++)
    saved += q.v[act[i]].bytes;
  ck_assert_uint_ge(r.lower_bound - r.pinned_bytes, saved);
  ck_assert_uint_le(r.lower_bound, r.planned_bytes);
  printf("plan network: %zu steps, %zu values; plan_build min %.2f ms, "
         "median %.2f ms; arena %.1f MB, lower bound %.1f MB (pinned "
         "excluded), naive %.1f MB\n",
         q.ns, q.nv, 1e3 * t[0], 1e3 * t[reps / 2], r.arena_bytes / 1048576.0,
         (r.lower_bound - r.pinned_bytes) / 1048576.0,
         (r.naive_bytes - r.pinned_bytes) / 1048576.0);
  plan_result_free(&r);
  free(act);
  gen_free(&q);
}
END_TEST

int main(void) {
  Suite *s = suite_create("plan");
  TCase *tc = tcase_create("plan");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, chain);
  tcase_add_test(tc, inplace_refused);
  tcase_add_test(tc, diamond);
  tcase_add_test(tc, orders_differ);
  tcase_add_test(tc, best_fit);
  tcase_add_test(tc, coalescing);
  tcase_add_test(tc, pinned_values);
  tcase_add_test(tc, read_twice);
  tcase_add_test(tc, zero_bytes);
  tcase_add_test(tc, alignment);
  tcase_add_test(tc, by_size);
  tcase_add_test(tc, by_size_many);
  tcase_add_test(tc, invalid);
  tcase_add_test(tc, given_not_topological);
  tcase_add_test(tc, verify_catches);
  tcase_add_test(tc, random_problems);
  tcase_add_test(tc, random_garbage);
  tcase_add_test(tc, verify_finds_every_overlap);
  tcase_add_test(tc, large);
  tcase_add_test(tc, medium);
  tcase_add_test(tc, large_network);
  suite_add_tcase(s, tc);
  return test_run(s);
}
