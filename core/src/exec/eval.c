/*
 * Eager evaluation: the minimal program behind one tensor, compiled once
 * and kept in a small cache keyed by a structural hash of the subgraph
 * (ops, dtypes, shapes, attributes, constant values, and which input each
 * edge reads), so that pointers of a freed graph can never alias.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

#define CACHE_MAX 32

typedef struct cache_entry {
  uint64_t key[2];
  tyto_program *prog;
  uint64_t used; /* clock of the last use, for eviction */
} cache_entry;

struct tyto_eval_cache {
  tyto_context *ctx;
  cache_entry entries[CACHE_MAX];
  size_t n;
  uint64_t clock;
  size_t compiles;
};

tyto_status tyto_eval_cache_new(tyto_context *ctx, tyto_eval_cache **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_eval_cache_new: out is "
                                              "NULL");
  *out = NULL;
  if (!ctx)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_eval_cache_new: context is NULL");
  tyto_eval_cache *c = calloc(1, sizeof *c);
  if (!c)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                   "tyto_eval_cache_new: out of memory");
  c->ctx = ctx;
  rt_context_hold(ctx); /* it compiles on ctx until freed */
  *out = c;
  return TYTO_OK;
}

void tyto_eval_cache_free(tyto_eval_cache *c) {
  if (!c)
    return;
  for (size_t i = 0; i < c->n; i++)
    tyto_program_free(c->entries[i].prog);
  tyto_context *ctx = c->ctx;
  free(c);
  rt_context_release(ctx);
}

size_t tyto_eval_cache_compiles(const tyto_eval_cache *c) {
  return c ? c->compiles : 0;
}

/* Two independent FNV-1a-64 streams (different offsets): a 128-bit key. */
static void mix(uint64_t h[2], const void *data, size_t n) {
  const unsigned char *b = data;
  for (size_t i = 0; i < n; i++) {
    h[0] = (h[0] ^ b[i]) * UINT64_C(0x100000001b3);
    h[1] = (h[1] ^ b[i]) * UINT64_C(0x100000001b3) + 0x9e37;
  }
}

/* The devices an eager evaluation runs on: device 0 and every device a
 * needed node is pinned to (at most EVAL_MAX_DEVS). */
#define EVAL_MAX_DEVS 64
typedef struct eval_devs {
  size_t n;
  size_t dev[EVAL_MAX_DEVS];
} eval_devs;

static void add_dev(eval_devs *d, size_t x) {
  for (size_t i = 0; i < d->n; i++)
    if (d->dev[i] == x)
      return;
  if (d->n < EVAL_MAX_DEVS)
    d->dev[d->n++] = x;
}

/* Hashes the nodes t needs, in creation order, naming each input by its
 * position among the needed nodes, with their pins (collected in *devs).
 * Fails when t needs an input or a parameter. */
static tyto_status subgraph_key(const tyto_tensor *t, uint64_t key[2],
                                eval_devs *devs) {
  tyto_graph *g = t->graph;
  size_t n = (size_t)t->index + 1;
  int64_t *pos = malloc(n * sizeof *pos);
  if (!pos)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "eval: out of memory");
  for (size_t i = 0; i < n; i++)
    pos[i] = -1;
  pos[t->index] = 0;
  for (size_t i = n; i-- > 0;) {
    if (pos[i] < 0)
      continue;
    const tyto_tensor *x = g->nodes[i];
    if (x->kind == TYTO_KIND_INPUT || x->kind == TYTO_KIND_PARAMETER) {
      free(pos);
      return rt_fail(
          TYTO_ERR_INVALID_ARGUMENT,
          "eval: tensor #%lld depends on %s %s%s%s(#%lld); "
          "compile a program and bind it with "
          "tyto_program_%s",
          (long long)t->index, tyto_kind_name(x->kind), x->name ? "'" : "",
          x->name ? x->name : "", x->name ? "' " : "", (long long)x->index,
          x->kind == TYTO_KIND_INPUT ? "set_input" : "write_parameter");
    }
    for (size_t j = 0; j < x->n_inputs; j++)
      pos[x->inputs[j]->index] = 0;
  }
  int64_t next = 0;
  for (size_t i = 0; i < n; i++)
    if (pos[i] >= 0)
      pos[i] = next++;
  key[0] = UINT64_C(0xcbf29ce484222325);
  key[1] = UINT64_C(0x84222325cbf29ce4);
  for (size_t i = 0; i < n; i++) {
    if (pos[i] < 0)
      continue;
    const tyto_tensor *x = g->nodes[i];
    int32_t head[5] = {(int32_t)x->op, (int32_t)x->kind, (int32_t)x->dtype,
                       x->rank, (int32_t)x->pin};
    if (x->pin)
      add_dev(devs, x->pin - 1);
    mix(key, head, sizeof head);
    mix(key, x->shape, (size_t)x->rank * sizeof *x->shape);
    mix(key, &x->n_inputs, sizeof x->n_inputs);
    for (size_t j = 0; j < x->n_inputs; j++)
      mix(key, &pos[x->inputs[j]->index], sizeof(int64_t));
    mix(key, &x->n_iattrs, sizeof x->n_iattrs);
    if (x->n_iattrs)
      mix(key, x->iattrs, x->n_iattrs * sizeof *x->iattrs);
    mix(key, &x->n_fattrs, sizeof x->n_fattrs);
    if (x->n_fattrs)
      mix(key, x->fattrs, x->n_fattrs * sizeof *x->fattrs);
    if (x->op == TYTO_OP_CONSTANT && x->data)
      mix(key, x->data,
          (size_t)tyto_tensor_numel(x) * tyto_dtype_size(x->dtype));
  }
  free(pos);
  return TYTO_OK;
}

tyto_status tyto_tensor_eval(tyto_eval_cache *c, tyto_tensor *t, void *dst,
                             size_t bytes) {
  if (!c)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "eval: cache is NULL");
  if (!t)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "eval: tensor is NULL");
  if (t->kind == TYTO_KIND_ERROR) {
    const tyto_graph *g = t->graph;
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "eval: the tensor is an error tensor%s%s",
                   g && g->message[0] ? ": " : "", g ? g->message : "");
  }
  if (t->graph->status != TYTO_OK)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "eval: graph is in error: %s; fix the first failing op",
                   t->graph->message);
  /* Checked against t itself before anything is compiled: a cached
   * program's output is a tensor of the graph it was first compiled from,
   * which a message must not name. */
  size_t want = (size_t)tyto_tensor_numel(t) * tyto_dtype_size(t->dtype);
  if (!dst || bytes != want) {
    char dims[TYTO_MAX_RANK * 21 + 1] = "";
    size_t d = 0;
    for (int i = 0; i < t->rank; i++)
      d += (size_t)snprintf(dims + d, sizeof dims - d, "%s%lld", i ? "," : "",
                            (long long)t->shape[i]);
    if (!dst)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "eval: dst is NULL");
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "eval: tensor %s%.64s%s(#%lld) is %s[%s] (%zu bytes), got "
                   "%zu bytes",
                   t->name ? "'" : "", t->name ? t->name : "",
                   t->name ? "' " : "", (long long)t->index,
                   tyto_dtype_name(t->dtype), dims, want, bytes);
  }
  uint64_t key[2] = {0, 0};
  eval_devs devs = {1, {0}};
  tyto_status st = subgraph_key(t, key, &devs);
  if (st != TYTO_OK)
    return st;
  cache_entry *hit = NULL;
  for (size_t i = 0; i < c->n && !hit; i++)
    if (c->entries[i].key[0] == key[0] && c->entries[i].key[1] == key[1])
      hit = &c->entries[i];
  if (!hit) {
    tyto_program *p;
    /* Pinned nodes run where they are pinned, the rest on device 0. */
    tyto_program_options po;
    tyto_program_options_init(&po);
    if (devs.n > 1) {
      po.n_devices = devs.n;
      po.devices = devs.dev;
    }
    if ((st = tyto_program_compile(c->ctx, t->graph, 1, &t, &po, &p)) !=
        TYTO_OK)
      return st;
    c->compiles++;
    if (c->n < CACHE_MAX) {
      hit = &c->entries[c->n++];
    } else {
      hit = &c->entries[0];
      for (size_t i = 1; i < c->n; i++)
        if (c->entries[i].used < hit->used)
          hit = &c->entries[i];
      tyto_program_free(hit->prog);
    }
    hit->key[0] = key[0];
    hit->key[1] = key[1];
    hit->prog = p;
  }
  hit->used = ++c->clock;
  if ((st = tyto_program_run(hit->prog)) != TYTO_OK)
    return st;
  return tyto_program_read_output(hit->prog, 0, dst, bytes);
}
