/*
 * The memory planner (DESIGN.md, "Memory planning"; seeds 002/004: memory
 * reuse as a pebble game). Device-agnostic and graph-agnostic: it sees a
 * DAG of steps reading and writing values of known sizes, chooses an
 * execution order, and gives every value that is not pinned an offset in
 * one arena so that no two values alive at the same time overlap.
 *
 * Lifetimes, for an order: a value produced by step s (position p(s)) is
 * alive from p(s) through the position of its last reader (through p(s)
 * when nothing reads it). Pinned values (inputs, parameters, constants,
 * outputs) are alive for the whole program and never get an arena offset:
 * the program gives them storage of their own. A step may write an
 * output over one of its inputs ("in place") when the step allows it, the
 * input is not pinned, has the same size and a suitably aligned offset, and
 * this step is its last reader; the two then share one offset.
 *
 * The arena is a best-fit allocator over that order: a value is fitted when
 * its producer runs (in the smallest free block it fits, split; else at the
 * arena's end, extending a free block there), and its block is released,
 * and coalesced with free neighbours, after its last reader has run.
 *
 * Offline fits (offline.c): with all of an order's lifetimes known, the
 * arena values are also fitted "greedy by size" (largest first) and
 * "greedy by breadth" (those alive at the busiest positions first), each
 * at the lowest aligned offset clear of every value already fitted that
 * is alive at a common position. A value and the values that took its
 * storage in place stay together, at one offset: the in-place decisions
 * are best fit's. Each order keeps the smallest of its arenas (ties: best
 * fit, then by size). They are skipped where best fit already needs no
 * more than the most bytes alive at once, and where too many lifetimes
 * overlap to fit them quickly (MAX_PAIRS in offline.c).
 *
 * Alignment padding: planned_bytes <= naive_bytes holds whenever no padding
 * is needed (every size a multiple of the largest alignment, e.g. all 1);
 * with mixed alignments the arena may exceed the plain sum of the sizes by
 * at most the sum of (align - 1) over the arena's values, e.g. two live
 * 1-byte values with alignment 64 need 65 bytes.
 */
#ifndef TYTO_PLAN_H
#define TYTO_PLAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct plan_value {
  uint64_t bytes; /* 0 allowed */
  uint32_t align; /* a power of two >= 1; offsets are multiples of it */
  int pinned;     /* never in the arena, alive throughout */
} plan_value;

typedef struct plan_step {
  size_t n_in;
  const uint32_t *in; /* values read (may repeat); pinned or produced by
                         another step */
  size_t n_out;
  const uint32_t *out; /* values written; each value has at most one
                          producer; values nobody produces are pinned */
  /* Bit k set: out[0] may take the storage of in[k] (k < 32) when this
   * step is in[k]'s last reader (reading it several times is fine), neither
   * is pinned, the two have the same size and in[k]'s offset is a multiple
   * of out[0]'s alignment (elementwise ops, reshapes). At most one input is
   * taken: the lowest such k. 0: never. */
  uint32_t inplace_mask;
} plan_step;

typedef struct plan_problem {
  size_t n_values;
  const plan_value *values;
  size_t n_steps;
  /* A DAG. Normally the indices are one valid order; when they are not,
   * PLAN_ORDER_GIVEN is not tried (plan_build) or refused
   * (plan_build_order). */
  const plan_step *steps;
} plan_problem;

/* Which order a plan uses. */
typedef enum plan_order {
  PLAN_ORDER_GIVEN = 0,  /* the steps' own order */
  PLAN_ORDER_GREEDY = 1, /* memory-aware greedy list scheduling (plan.c) */
  PLAN_ORDER_DEPTH = 2,  /* depth-first post-order from the sinks */
  PLAN_ORDER_COUNT
} plan_order;

/* How an order's arena values were given their offsets (see above). */
typedef enum plan_fit {
  PLAN_FIT_BEST_FIT = 0,   /* online, best fit over free blocks */
  PLAN_FIT_BY_SIZE = 1,    /* offline, largest first */
  PLAN_FIT_BY_BREADTH = 2, /* offline, busiest positions first */
  PLAN_FIT_COUNT
} plan_fit;

typedef struct plan_result {
  plan_order order_kind;  /* the order kept: lowest planned_bytes */
  size_t *order;          /* n_steps step indices in execution order */
  uint64_t *offset;       /* per value: arena offset; UINT64_MAX if pinned
                             or never produced (no storage). A zero-byte
                             value gets 0 (or the offset it took in place) */
  int *inplace_of;        /* per value: the value whose storage it took in
                             place, or -1 */
  uint64_t arena_bytes;   /* the arena's size */
  uint64_t pinned_bytes;  /* sum of the pinned values */
  uint64_t naive_bytes;   /* every value its own buffer */
  uint64_t planned_bytes; /* pinned_bytes + arena_bytes */
  /* max over positions of the bytes alive there (pinned included), for the
   * kept order: no fit in that order can do better. */
  uint64_t lower_bound;
  /* Per order tried: its planned bytes and lower bound (0 if not tried). */
  uint64_t tried_planned[PLAN_ORDER_COUNT];
  uint64_t tried_lower_bound[PLAN_ORDER_COUNT];
  int tried[PLAN_ORDER_COUNT]; /* 1 where the order was tried */
  plan_fit fit;                /* how the kept order's arena was fitted */
  /* Per order and fit: the arena it gave; UINT64_MAX where it was not run
   * (the order not tried, the offline fits skipped; by
   * breadth also once by size needs no more than the most bytes alive at
   * once). The kept order's arena_bytes is the smallest of its row. */
  uint64_t tried_arena[PLAN_ORDER_COUNT][PLAN_FIT_COUNT];
} plan_result;

/* Plans p into *r (arrays malloc'd; free with plan_result_free, also after
 * a failure). Tries every order (ties: the lowest plan_order) and keeps the
 * one with the lowest planned_bytes. Returns 0, -1 on out of memory or -2
 * when p is not a valid DAG (a step reads a value nobody produces that is
 * not pinned, a value has two producers, an index out of range, a NULL
 * list, an alignment that is not a power of two, sizes adding up to more
 * than 2^63, a cycle), writing why into msg (msg_size bytes) when msg is
 * not NULL. Never aborts on bad input. */
int plan_build(const plan_problem *p, plan_result *r, char *msg,
               size_t msg_size);
/* As plan_build, with one order only (tried[] has that one). -2 also when
 * kind is PLAN_ORDER_GIVEN and the indices are not a topological order. */
int plan_build_order(const plan_problem *p, plan_order kind, plan_result *r,
                     char *msg, size_t msg_size);
/* Frees r's arrays and zeroes it; r may be NULL or already freed. */
void plan_result_free(plan_result *r);

/* Checks a plan against its problem: the order is a permutation that
 * respects every dependency, offsets are aligned and inside the arena,
 * pinned and never-produced values have none, no two values alive at one
 * position overlap (except a value and the one it took in place, at the
 * step that does it), every in-place pair is allowed, and the totals
 * (naive, pinned, planned, lower bound) match the problem and the order.
 * Shares no code with plan_build: lifetimes are recomputed from the order.
 * 0 when fine; otherwise -1 and the first violation in msg. The library
 * runs it on every plan in debug builds and tests run it always. */
int plan_verify(const plan_problem *p, const plan_result *r, char *msg,
                size_t msg_size);

/* Writes a printf-style message into msg (n bytes) when msg is not NULL;
 * for plan.c and verify.c. */
void plan_say(char *msg, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
