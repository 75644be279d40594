/*
 * Common-subexpression elimination: two tensors with the same op, dtype,
 * shape, attributes, constant data and (already merged) inputs are one.
 * Inputs and parameters are never merged: each is its own value. Random
 * tensors merge only when seed and stream offset agree, that is when they
 * draw the same numbers.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct cse_table {
  tyto_tensor **slot; /* open addressing; NULL: empty */
  uint64_t *hash;
  size_t mask;
} cse_table;

static uint64_t mix(uint64_t h, uint64_t v) {
  /* FNV-1a over 64-bit words, then a final avalanche (splitmix64). */
  h ^= v;
  return h * 0x100000001b3ULL;
}

static uint64_t bytes_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = mix(h, b[i]);
  return h;
}

static size_t data_bytes(const tyto_tensor *t) {
  return t->data ? (size_t)tyto_tensor_numel(t) * tyto_dtype_size(t->dtype) : 0;
}

static uint64_t node_hash(const tyto_tensor *t, tyto_tensor *const *ins) {
  uint64_t h = 0xcbf29ce484222325ULL;
  h = mix(h, (uint64_t)t->op);
  h = mix(h, (uint64_t)t->dtype);
  h = mix(h, (uint64_t)t->rank);
  for (int i = 0; i < t->rank; i++)
    h = mix(h, (uint64_t)t->shape[i]);
  for (size_t k = 0; k < t->n_inputs; k++)
    h = mix(h, (uint64_t)ins[k]->index);
  for (size_t k = 0; k < t->n_iattrs; k++)
    h = mix(h, (uint64_t)t->iattrs[k]);
  h = bytes_hash(h, t->fattrs, t->n_fattrs * sizeof(double));
  h = bytes_hash(h, t->data, data_bytes(t));
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

/* c (a node of the new graph) computes what t with inputs ins would. */
static int same(const tyto_tensor *c, const tyto_tensor *t,
                tyto_tensor *const *ins) {
  if (c->op != t->op || c->dtype != t->dtype || c->rank != t->rank ||
      c->pin != t->pin || c->n_inputs != t->n_inputs ||
      c->n_iattrs != t->n_iattrs || c->n_fattrs != t->n_fattrs)
    return 0;
  if (memcmp(c->shape, t->shape, (size_t)t->rank * sizeof *t->shape) != 0)
    return 0;
  for (size_t k = 0; k < t->n_inputs; k++)
    if (c->inputs[k] != ins[k])
      return 0;
  if (t->n_iattrs &&
      memcmp(c->iattrs, t->iattrs, t->n_iattrs * sizeof *t->iattrs) != 0)
    return 0;
  if (t->n_fattrs &&
      memcmp(c->fattrs, t->fattrs, t->n_fattrs * sizeof *t->fattrs) != 0)
    return 0;
  size_t n = data_bytes(t);
  return n == data_bytes(c) && (n == 0 || memcmp(c->data, t->data, n) == 0);
}

static tyto_tensor *cse_rule(void *ctx, const tyto_tensor *t, tyto_tensor **ins,
                             tyto_graph *g, long *changed) {
  cse_table *tab = ctx;
  if (t->op == TYTO_OP_INPUT || t->op == TYTO_OP_PARAMETER)
    return NULL;
  uint64_t h = node_hash(t, ins);
  size_t i = (size_t)h & tab->mask;
  for (; tab->slot[i]; i = (i + 1) & tab->mask) {
    if (tab->hash[i] == h && same(tab->slot[i], t, ins)) {
      (*changed)++;
      return tab->slot[i];
    }
  }
  tyto_tensor *c = pass_clone(g, t, ins);
  if (c->kind != TYTO_KIND_ERROR) {
    tab->slot[i] = c;
    tab->hash[i] = h;
  }
  return c;
}

long pass_cse(const pass_graph *in, pass_graph *out, tyto_tensor **map,
              const pass_options *opt, char *msg, size_t msg_size) {
  (void)opt;
  size_t n = 16;
  while (n < 2 * in->g->n_nodes)
    n *= 2;
  cse_table tab = {calloc(n, sizeof *tab.slot), malloc(n * sizeof *tab.hash),
                   n - 1};
  long r = -1;
  if (!tab.slot || !tab.hash)
    snprintf(msg, msg_size, "passes: out of memory");
  else
    r = pass_rewrite(in, out, map, cse_rule, &tab, "cse", msg, msg_size);
  free(tab.slot);
  free(tab.hash);
  return r;
}
