/*
 * The checks of tyto_program_compile's options that name tensors: the
 * parameter updates and the exchanges with the host (their stages
 * included), each refusal saying what was expected and what was found.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "../graph/node.h"
#include "../runtime/error.h"

static tyto_status oom(void) {
  return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
}

/* "parameter 'w' (#3) f32[4,4]" */
static const char *brief(char *buf, size_t size, const tyto_tensor *t) {
  char dims[TYTO_MAX_RANK * 21 + 1] = "";
  size_t d = 0;
  for (int i = 0; i < t->rank; i++)
    d += (size_t)snprintf(dims + d, sizeof dims - d, "%s%lld", i ? "," : "",
                          (long long)t->shape[i]);
  snprintf(buf, size, "%s%s%.64s%s (#%lld) %s[%s]", tyto_kind_name(t->kind),
           t->name ? " '" : "", t->name ? t->name : "", t->name ? "'" : "",
           (long long)t->index, tyto_dtype_name(t->dtype), dims);
  return buf;
}

tyto_status compile_check_updates(const tyto_graph *g, const compile_opts *o) {
  static const char fn[] = "compile: update";
  size_t nu = o->n_updates;
  if (nu && (!o->update_params || !o->update_values))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%ss: n_updates is %zu but update_params or update_values "
                   "is NULL",
                   fn, nu);
  if (!nu)
    return TYTO_OK;
  /* Per node of g: the first and second updates of it (SIZE_MAX: none),
   * so that finding an update's duplicates takes no scan of the others. */
  size_t n = g->n_nodes ? g->n_nodes : 1;
  size_t *first = malloc(n * sizeof *first),
         *second = malloc(n * sizeof *second);
  if (!first || !second) {
    free(first);
    free(second);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
  }
  for (size_t i = 0; i < g->n_nodes; i++)
    first[i] = second[i] = SIZE_MAX;
  for (size_t j = 0; j < nu; j++) {
    const tyto_tensor *pm = o->update_params[j];
    if (!pm || pm->graph != g)
      continue;
    if (first[pm->index] == SIZE_MAX)
      first[pm->index] = j;
    else if (second[pm->index] == SIZE_MAX)
      second[pm->index] = j;
  }
  tyto_status st = TYTO_OK;
  for (size_t i = 0; i < nu && st == TYTO_OK; i++) {
    const tyto_tensor *pm = o->update_params[i], *v = o->update_values[i];
    char a[160], b[160];
    if (!pm || !v) {
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s %zu: %s is NULL", fn, i,
                   pm ? "the value" : "the parameter");
      break;
    }
    if (pm->graph != g || v->graph != g || v->kind == TYTO_KIND_ERROR) {
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s %zu: the %s is %s", fn, i,
                   pm->graph != g ? "parameter" : "value",
                   v->kind == TYTO_KIND_ERROR && pm->graph == g
                       ? "an error tensor"
                       : "a tensor of another graph");
      break;
    }
    if (pm->kind != TYTO_KIND_PARAMETER) {
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s %zu: expected a parameter to update, found %s", fn, i,
                   brief(a, sizeof a, pm));
      break;
    }
    if (v->dtype != pm->dtype || v->rank != pm->rank ||
        memcmp(v->shape, pm->shape, (size_t)v->rank * sizeof *v->shape)) {
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s %zu: %s cannot take the value of %s (dtype or "
                   "shape differ)",
                   fn, i, brief(a, sizeof a, pm), brief(b, sizeof b, v));
      break;
    }
    /* The lowest other update of pm before i, and of v (any other). */
    size_t twice = first[pm->index] < i ? first[pm->index] : SIZE_MAX;
    size_t of_v = first[v->index] != i ? first[v->index] : second[v->index];
    if (twice != SIZE_MAX && twice <= of_v)
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s %zu: %s is already updated by update %zu", fn, i,
                   brief(a, sizeof a, pm), twice);
    /* p <- q while q <- ...: each copy would wait for the other. */
    else if (of_v != SIZE_MAX)
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s %zu: the value is %s, which update %zu changes "
                   "in the same run; give it as a computed value "
                   "(read it into an output first) or update in two "
                   "programs",
                   fn, i, brief(a, sizeof a, v), of_v);
  }
  free(first);
  free(second);
  return st;
}

/* The exchanges: n sends of g, each with a recv (an input of g) of its
 * dtype and shape, in stages 0 .. S - 1 that each hold one (sets
 * o->n_stages). */
tyto_status compile_check_exchanges(const tyto_graph *g, compile_opts *o) {
  static const char fn[] = "compile: exchange";
  size_t n = o->n_exchanges;
  o->n_stages = 0;
  if (!n)
    return TYTO_OK;
  if (o->exchange_stages) {
    size_t top = 0, at = 0;
    for (size_t i = 0; i < n; i++)
      if (o->exchange_stages[i] > top) {
        top = o->exchange_stages[i];
        at = i;
      }
    if (top >= n)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s %zu: stage %zu, with %zu exchanges (expected stages "
                     "0 .. %zu at most, each holding an exchange)",
                     fn, at, top, n, n - 1);
    unsigned char *held = calloc(top + 1, 1);
    if (!held)
      return oom();
    for (size_t i = 0; i < n; i++)
      held[o->exchange_stages[i]] = 1;
    size_t gap = 0;
    while (gap <= top && held[gap])
      gap++;
    free(held);
    if (gap <= top)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%ss: stage %zu holds no exchange, yet stage %zu does "
                     "(stages run 0, 1, 2 ... without a gap)",
                     fn, gap, top);
    o->n_stages = top + 1;
  } else {
    o->n_stages = 1;
  }
  if (!o->exchange_sends || !o->exchange_recvs)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%ss: n_exchanges is %zu but exchange_sends or "
                   "exchange_recvs is NULL",
                   fn, n);
  for (size_t i = 0; i < n; i++) {
    const tyto_tensor *s = o->exchange_sends[i], *r = o->exchange_recvs[i];
    if (!s || !r)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s %zu: the %s is NULL", fn, i,
                     s ? "recv" : "send");
    if (s->graph != g || r->graph != g || s->kind == TYTO_KIND_ERROR)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s %zu: the %s is %s", fn, i,
                     s->graph != g || s->kind == TYTO_KIND_ERROR ? "send"
                                                                 : "recv",
                     s->kind == TYTO_KIND_ERROR ? "an error tensor"
                                                : "a tensor of another graph");
    char a[160], b[160];
    if (r->kind != TYTO_KIND_INPUT)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s %zu: expected an input to receive into, found %s", fn,
                     i, brief(a, sizeof a, r));
    if (s->dtype != r->dtype || s->rank != r->rank ||
        memcmp(s->shape, r->shape, (size_t)s->rank * sizeof *s->shape))
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s %zu: %s cannot receive %s (dtype or shape differ)", fn,
                     i, brief(a, sizeof a, r), brief(b, sizeof b, s));
  }
  /* A send may need recvs of earlier stages only: each node's stage is
   * the latest recv it needs, plus one. */
  size_t nn = (size_t)g->n_nodes;
  size_t *lv = calloc(nn ? nn : 1, sizeof *lv);
  if (!lv)
    return oom();
  for (size_t i = 0; i < n; i++) {
    size_t st = o->exchange_stages ? o->exchange_stages[i] : 0;
    size_t r = (size_t)o->exchange_recvs[i]->index;
    if (lv[r] && lv[r] != st + 1) {
      char a[160];
      size_t first = lv[r] - 1;
      free(lv);
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s %zu: %s receives exchanges of stages %zu and %zu (a "
                     "recv is set once, after one stage)",
                     fn, i, brief(a, sizeof a, o->exchange_recvs[i]), first,
                     st);
    }
    lv[r] = st + 1;
  }
  for (size_t v = 0; v < nn; v++)
    for (size_t j = 0; j < g->nodes[v]->n_inputs; j++) {
      size_t u = (size_t)g->nodes[v]->inputs[j]->index;
      if (lv[u] > lv[v])
        lv[v] = lv[u];
    }
  tyto_status bad = TYTO_OK;
  for (size_t i = 0; i < n && bad == TYTO_OK; i++) {
    size_t st = o->exchange_stages ? o->exchange_stages[i] : 0;
    const tyto_tensor *s = o->exchange_sends[i];
    if (lv[s->index] > st) {
      char a[160];
      bad = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                    "%s %zu: its send %s needs the recv of a stage-%zu "
                    "exchange, but is sent at stage %zu (a send may need "
                    "recvs of earlier stages only)",
                    fn, i, brief(a, sizeof a, s), lv[s->index] - 1, st);
    }
  }
  free(lv);
  return bad;
}
