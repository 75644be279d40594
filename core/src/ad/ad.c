/*
 * The AD transforms: forward (JVP) and reverse (VJP) sweeps over a graph,
 * and Owl's Algodiff API built on them.
 *
 * A sweep works on the graph as it is when the sweep starts (n0 tensors):
 * the tensors it adds come after, and are never swept themselves. The
 * active tensors are those that depend on some x and that some y depends
 * on; only they get tangents or adjoints, so nothing is built for inputs
 * that are not differentiated.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <tyto/ad.h>
#include <tyto/parallel.h>

#include "../graph/dtype.h"
#include "../graph/shape.h"
#include "rules.h"

/* Checks the tensors of one AD call: non-NULL, not errors, one graph.
 * Returns the graph, or NULL with *err set to what to return. */
static tyto_graph *check_args(const char *name, size_t n,
                              tyto_tensor *const *ts, tyto_tensor **err) {
  tyto_graph *g = graph_check(name, n, ts, 0, err);
  for (size_t i = 0; g && i < n; i++)
    if (dtype_is_int(ts[i]->dtype)) {
      char s[SHAPE_STR];
      *err = graph_fail(g,
                        "%s: %s%s is an integer tensor; derivatives are taken "
                        "of and with respect to floating-point tensors",
                        name, tyto_dtype_name(ts[i]->dtype),
                        tensor_shape_str(s, ts[i]));
      return NULL;
    }
  return g ? graph_check(name, n, ts, 1, err) : NULL;
}

/* Marks the active tensors (indices below n0): act[i] = 1 when tensor i
 * depends on some xs[k] (or is one) and some ys[k] depends on it (or is
 * one). Returns the lowest index of an x, or -1 when nothing is active. */
static int64_t mark_active(tyto_graph *g, size_t n0, size_t n_x,
                           tyto_tensor *const *xs, size_t n_y,
                           tyto_tensor *const *ys, unsigned char *act) {
  unsigned char *dep = act, *anc = calloc(n0 ? n0 : 1, 1);
  if (!anc)
    return -2;
  memset(dep, 0, n0);
  int64_t lo = (int64_t)n0, hi = -1;
  for (size_t k = 0; k < n_x; k++) {
    dep[xs[k]->index] = 1;
    if (xs[k]->index < lo)
      lo = xs[k]->index;
  }
  for (size_t k = 0; k < n_y; k++) {
    anc[ys[k]->index] = 1;
    if (ys[k]->index > hi)
      hi = ys[k]->index;
  }
  /* Integer tensors carry no derivative: nothing flows through them (a
   * cast to one, argmax_as, an index) or out of them. */
  for (int64_t i = lo + 1; i <= hi; i++) {
    const tyto_tensor *t = g->nodes[i];
    for (size_t j = 0; j < t->n_inputs && !dep[i]; j++)
      dep[i] = dep[t->inputs[j]->index] && !dtype_is_int(t->dtype);
  }
  for (int64_t i = hi; i >= lo; i--) {
    const tyto_tensor *t = g->nodes[i];
    if (anc[i])
      for (size_t j = 0; j < t->n_inputs; j++)
        anc[t->inputs[j]->index] = 1;
  }
  int any = 0;
  for (size_t i = 0; i < n0; i++) {
    dep[i] = (unsigned char)(dep[i] && anc[i] && (int64_t)i >= lo &&
                             (int64_t)i <= hi);
    any |= dep[i];
  }
  free(anc);
  return any ? lo : -1;
}

/* The engine checks every rule's result: a wrong shape here would surface
 * much later as a baffling compile error. */
static int check_rule(tyto_tensor *n, tyto_tensor *r, const tyto_tensor *like,
                      const char *what) {
  if (!r)
    return 0;
  if (tyto_tensor_is_error(r))
    return -1;
  if (!ad_same_shape(r, like) || r->dtype != like->dtype) {
    char a[SHAPE_STR], b[SHAPE_STR];
    graph_fail(n->graph,
               "ad: internal error: the %s rule of %s (tensor #%lld) gave "
               "%s%s for %s%s",
               what, tyto_op_name(n->op), (long long)n->index,
               tyto_dtype_name(r->dtype), tensor_shape_str(a, r),
               tyto_dtype_name(like->dtype), tensor_shape_str(b, like));
    return -1;
  }
  return 0;
}

static int shape_like(tyto_graph *g, const char *name, const char *what,
                      const tyto_tensor *v, const tyto_tensor *like) {
  if (ad_same_shape(v, like))
    return 0;
  char a[SHAPE_STR], b[SHAPE_STR];
  graph_fail(g, "%s: %s %s must be shaped as %s", name, what,
             tensor_shape_str(a, v), tensor_shape_str(b, like));
  return -1;
}

/* The graph of the first non-NULL tensor of ts (n of them, ts may be
 * NULL), or NULL. */
static tyto_graph *any_graph(size_t n, tyto_tensor *const *ts) {
  for (size_t i = 0; ts && i < n; i++)
    if (ts[i])
      return ts[i]->graph;
  return NULL;
}

/* "<name>: <what> is NULL" in the graph of `others`, when there is one. */
static tyto_tensor *null_array(const char *name, const char *what, size_t n,
                               tyto_tensor *const *others) {
  tyto_graph *g = any_graph(n, others);
  return g ? graph_fail(g, "%s: %s is NULL", name, what) : NULL;
}

static void fill_error(tyto_tensor **out, size_t n, tyto_tensor *err) {
  for (size_t i = 0; i < n; i++)
    out[i] = err;
}

/* Checks the arguments of a sweep and allocates its bookkeeping. Forward
 * mode seeds xs with tangents and has one output per y; reverse mode seeds
 * ys with adjoints and has one output per x. On success returns the graph
 * with *act the active marks and *val the per-tensor tangents or adjoints
 * (n0 = the graph's size now; the caller frees both), seeded, *lo as
 * mark_active() gives it and *hi the highest index of a y. On failure
 * fills out with error tensors and returns NULL. */
static tyto_graph *sweep_begin(const char *name, int forward, size_t n_x,
                               tyto_tensor *const *xs, size_t n_y,
                               tyto_tensor *const *ys,
                               tyto_tensor *const *seeds, tyto_tensor **out,
                               unsigned char **act, tyto_tensor ***val,
                               int64_t *lo, int64_t *hi) {
  size_t n_out = forward ? n_y : n_x, n_seeded = forward ? n_x : n_y;
  tyto_tensor *const *outs = forward ? ys : xs;
  tyto_tensor *const *seeded = forward ? xs : ys;
  const char *outs_name = forward ? "ys" : "xs";
  const char *seeded_name = forward ? "xs" : "ys";
  if (!outs) {
    fill_error(out, n_out, null_array(name, outs_name, n_seeded, seeded));
    return NULL;
  }
  tyto_tensor *err = NULL;
  tyto_graph *g = check_args(name, n_out, outs, &err);
  if (!g) {
    fill_error(out, n_out, err);
    return NULL;
  }
  if (n_seeded && !seeded) {
    fill_error(out, n_out, graph_fail(g, "%s: %s is NULL", name, seeded_name));
    return NULL;
  }
  if (n_seeded && (!check_args(name, n_seeded, seeded, &err) ||
                   (err = NULL, g != seeded[0]->graph))) {
    fill_error(
        out, n_out,
        err ? err
            : graph_fail(g, "%s: tensors belong to different graphs", name));
    return NULL;
  }
  for (size_t k = 0; k < n_seeded; k++) {
    tyto_tensor *v = seeds ? seeds[k] : NULL;
    if (!v)
      continue;
    tyto_tensor *pair[2] = {seeded[k], v};
    if (!check_args(name, 2, pair, &err) ||
        shape_like(g, name, forward ? "tangent" : "adjoint", v, seeded[k])) {
      fill_error(out, n_out, err ? err : &g->error);
      return NULL;
    }
  }
  size_t n0 = g->n_nodes;
  *act = malloc(n0 ? n0 : 1);
  *val = calloc(n0 ? n0 : 1, sizeof **val);
  *lo = *act && *val ? mark_active(g, n0, n_x, xs, n_y, ys, *act) : -2;
  if (*lo == -2) {
    free(*act);
    free(*val);
    fill_error(out, n_out, graph_oom(g, name));
    return NULL;
  }
  for (size_t k = 0; k < n_seeded; k++)
    if (seeds && seeds[k])
      (*val)[seeded[k]->index] = ad_add((*val)[seeded[k]->index], seeds[k]);
  *hi = -1;
  for (size_t k = 0; k < n_y; k++)
    if (ys[k]->index > *hi)
      *hi = ys[k]->index;
  return g;
}

/* ---------------------------------------------------------------------- */
/* Forward mode                                                            */

static void jvp_named(const char *name, size_t n_x, tyto_tensor *const *xs,
                      tyto_tensor *const *tangents, size_t n_y,
                      tyto_tensor *const *ys, tyto_tensor **out) {
  if (!out || !n_y)
    return;
  unsigned char *act;
  tyto_tensor **tan;
  int64_t lo, hi;
  tyto_graph *g = sweep_begin(name, 1, n_x, xs, n_y, ys, tangents, out, &act,
                              &tan, &lo, &hi);
  if (!g)
    return;
  tyto_tensor *in_tan[16], **buf = in_tan;
  size_t cap = 16;
  for (int64_t i = lo >= 0 ? lo : hi + 1; i <= hi && g->status == TYTO_OK;
       i++) {
    tyto_tensor *t = g->nodes[i];
    if (!act[i] || !t->n_inputs)
      continue; /* an x that is computed adds its given tangent below */
    if (t->n_inputs > cap) {
      tyto_tensor **nb = malloc(t->n_inputs * sizeof *nb);
      if (!nb) {
        graph_oom(g, name);
        break;
      }
      if (buf != in_tan)
        free(buf);
      buf = nb;
      cap = t->n_inputs;
    }
    int any = 0;
    for (size_t j = 0; j < t->n_inputs; j++) {
      buf[j] = tan[t->inputs[j]->index];
      any |= buf[j] != NULL;
    }
    if (!any)
      continue;
    /* A pinned node's derivative runs where the node does. */
    uint32_t scope = g->scope;
    if (t->pin)
      g->scope = t->pin;
    tyto_tensor *r = ad_jvp(t, buf);
    if (check_rule(t, r, t, "JVP")) {
      g->scope = scope;
      break;
    }
    tan[i] = ad_add(tan[i], r);
    g->scope = scope;
  }
  if (buf != in_tan)
    free(buf);
  for (size_t k = 0; k < n_y; k++)
    out[k] = g->status != TYTO_OK ? &g->error
                                  : ad_or_zeros(tan[ys[k]->index], ys[k]);
  free(act);
  free(tan);
}

void tyto_jvp(size_t n_x, tyto_tensor *const *xs, tyto_tensor *const *tangents,
              size_t n_y, tyto_tensor *const *ys, tyto_tensor **out) {
  jvp_named("jvp", n_x, xs, tangents, n_y, ys, out);
}

/* ---------------------------------------------------------------------- */
/* Reverse mode                                                            */

static void vjp_named(const char *name, size_t n_y, tyto_tensor *const *ys,
                      tyto_tensor *const *adjoints, size_t n_x,
                      tyto_tensor *const *xs, tyto_tensor **out) {
  if (!out || !n_x)
    return;
  unsigned char *act;
  tyto_tensor **adj;
  int64_t lo, hi;
  tyto_graph *g = sweep_begin(name, 0, n_x, xs, n_y, ys, adjoints, out, &act,
                              &adj, &lo, &hi);
  if (!g)
    return;
  unsigned char need_buf[16], *need = need_buf;
  tyto_tensor *contrib_buf[16], **contrib = contrib_buf;
  size_t cap = 16;
  for (int64_t i = hi; lo >= 0 && i >= lo && g->status == TYTO_OK; i--) {
    tyto_tensor *t = g->nodes[i], *a = adj[i];
    if (!act[i] || !a || !t->n_inputs)
      continue;
    if (t->n_inputs > cap) {
      unsigned char *nn = malloc(t->n_inputs);
      tyto_tensor **nc = malloc(t->n_inputs * sizeof *nc);
      if (!nn || !nc) {
        free(nn);
        free(nc);
        graph_oom(g, name);
        break;
      }
      if (need != need_buf) {
        free(need);
        free(contrib);
      }
      need = nn;
      contrib = nc;
      cap = t->n_inputs;
    }
    int any = 0;
    for (size_t j = 0; j < t->n_inputs; j++) {
      need[j] = act[t->inputs[j]->index];
      contrib[j] = NULL;
      any |= need[j];
    }
    if (!any)
      continue;
    /* A pinned node's adjoint rule runs where the node does. */
    uint32_t scope = g->scope;
    if (t->pin)
      g->scope = t->pin;
    if (ad_vjp(t, a, need, contrib)) {
      g->scope = scope;
      break;
    }
    for (size_t j = 0; j < t->n_inputs; j++) {
      tyto_tensor *in = t->inputs[j];
      if (!need[j]) {
        contrib[j] = NULL;
        continue;
      }
      if (check_rule(t, contrib[j], in, "VJP")) {
        g->scope = scope;
        goto done;
      }
      adj[in->index] = ad_add(adj[in->index], contrib[j]);
    }
    g->scope = scope;
  }
done:
  if (need != need_buf) {
    free(need);
    free(contrib);
  }
  for (size_t k = 0; k < n_x; k++)
    out[k] = g->status != TYTO_OK ? &g->error
                                  : ad_or_zeros(adj[xs[k]->index], xs[k]);
  free(act);
  free(adj);
}

void tyto_vjp(size_t n_y, tyto_tensor *const *ys, tyto_tensor *const *adjoints,
              size_t n_x, tyto_tensor *const *xs, tyto_tensor **out) {
  vjp_named("vjp", n_y, ys, adjoints, n_x, xs, out);
}

/* ---------------------------------------------------------------------- */
/* Owl's API                                                               */

static tyto_tensor *ones_like(const tyto_tensor *t) {
  return tyto_full(t->graph, t->dtype, t->rank, t->shape, 1.0);
}

/* Checks that t has one element, for `name`'s argument `what`. */
static int one_element(const char *name, const char *what, tyto_tensor *t) {
  if (tyto_tensor_numel(t) == 1)
    return 0;
  char s[SHAPE_STR];
  graph_fail(t->graph, "%s: %s must have one element, got %s", name, what,
             tensor_shape_str(s, t));
  return -1;
}

/* Both arguments checked: their graph when fine; otherwise NULL with *err
 * the tensor to return (NULL itself when no graph can be found). */
static tyto_graph *check_pair(const char *name, tyto_tensor *y, tyto_tensor *x,
                              tyto_tensor **err) {
  tyto_tensor *pair[2] = {y, x};
  return check_args(name, 2, pair, err);
}

tyto_tensor *tyto_stop_gradient(tyto_tensor *x) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("stop_gradient", 1, &x, 1, &err);
  if (!g)
    return err;
  return node_new(g, TYTO_OP_STOP_GRADIENT, x->dtype, x->rank, x->shape, 1, &x,
                  0, NULL, 0, NULL);
}

tyto_tensor *tyto_replica_sum(tyto_tensor *x) {
  tyto_tensor *err;
  tyto_graph *g = graph_check("replica_sum", 1, &x, 1, &err);
  if (!g)
    return err;
  int64_t kind = TYTO_REPLICA_SUM_PLAIN;
  return node_new(g, TYTO_OP_REPLICA_SUM, x->dtype, x->rank, x->shape, 1, &x, 1,
                  &kind, 0, NULL);
}

tyto_tensor *tyto_diff(tyto_tensor *y, tyto_tensor *x) {
  tyto_tensor *err, *out;
  tyto_graph *g = check_pair("diff", y, x, &err);
  if (!g)
    return err;
  if (one_element("diff", "y", y) || one_element("diff", "x", x))
    return &g->error;
  tyto_tensor *v = ones_like(x);
  jvp_named("diff", 1, &x, &v, 1, &y, &out);
  return out;
}

tyto_tensor *tyto_grad(tyto_tensor *y, tyto_tensor *x) {
  tyto_tensor *err, *out;
  tyto_graph *g = check_pair("grad", y, x, &err);
  if (!g)
    return err;
  if (one_element("grad", "y", y))
    return &g->error;
  tyto_tensor *v = ones_like(y);
  vjp_named("grad", 1, &y, &v, 1, &x, &out);
  return out;
}

void tyto_grads(tyto_tensor *y, size_t n, tyto_tensor *const *xs,
                tyto_tensor **out) {
  if (!out || !n)
    return;
  tyto_tensor *err = NULL;
  tyto_graph *g = check_args("grads", 1, &y, &err);
  if (!g) {
    fill_error(out, n, err);
    return;
  }
  if (!xs) {
    fill_error(out, n, graph_fail(g, "grads: xs is NULL"));
    return;
  }
  if (one_element("grads", "y", y)) {
    fill_error(out, n, &g->error);
    return;
  }
  tyto_tensor *v = ones_like(y);
  vjp_named("grads", 1, &y, &v, n, xs, out);
}

tyto_tensor *tyto_jacobianv(tyto_tensor *y, tyto_tensor *x, tyto_tensor *v) {
  tyto_tensor *out, *err = NULL, *three[3] = {y, x, v};
  if (!check_args("jacobianv", 3, three, &err))
    return err;
  jvp_named("jacobianv", 1, &x, &v, 1, &y, &out);
  return out;
}

tyto_tensor *tyto_jacobianTv(tyto_tensor *y, tyto_tensor *x, tyto_tensor *v) {
  tyto_tensor *out, *err = NULL, *three[3] = {y, x, v};
  if (!check_args("jacobianTv", 3, three, &err))
    return err;
  vjp_named("jacobianTv", 1, &y, &v, 1, &x, &out);
  return out;
}

tyto_ad_mode tyto_jacobian_mode(const tyto_tensor *y, const tyto_tensor *x) {
  return tyto_tensor_numel(x) < tyto_tensor_numel(y) ? TYTO_AD_FORWARD
                                                     : TYTO_AD_REVERSE;
}

/* The one-hot vector e_i of n elements in t's dtype. The index is in t's
 * dtype where that counts to n exactly (every device runs it), else an
 * i64: a bf16 stops at 256. */
static tyto_tensor *unit(tyto_tensor *t, int64_t i, int64_t n) {
  tyto_dtype id = dtype_index_for(t->dtype, n);
  return tyto_one_hot_as(tyto_scalar(t->graph, id, (double)i), n, t->dtype);
}

/* The basis vector e_i shaped as t. */
static tyto_tensor *basis(tyto_tensor *t, int64_t i) {
  tyto_tensor *e = unit(t, i, tyto_tensor_numel(t));
  return tyto_reshape(e, t->rank, t->shape);
}

/* Sweeps along each basis direction of `along` (x for forward, y for
 * reverse) and joins the results as columns or rows: [numel y, numel x].
 * With `rows`, x and y share a leading batch axis of B rows and each
 * direction is one basis vector of a row, the same in every row, joined
 * into [B, row of y, row of x] (the caller checked the rows are apart). */
static tyto_tensor *sweeps(const char *name, tyto_graph *g, tyto_tensor *y,
                           tyto_tensor *x, tyto_ad_mode mode, int rows) {
  int64_t bsz = rows ? x->shape[0] : 1;
  int64_t ny = bsz ? tyto_tensor_numel(y) / bsz : 0,
          nx = bsz ? tyto_tensor_numel(x) / bsz : 0;
  int64_t shape[3] = {bsz, ny, nx};
  int lead = rows ? 1 : 0; /* the result's batch axes */
  int64_t count = mode == TYTO_AD_FORWARD ? nx : ny;
  if (count == 0 || bsz == 0)
    return tyto_full(g, y->dtype, 2 + lead, shape + 1 - lead, 0.0);
  if (count > INT32_MAX)
    return graph_fail(g, "%s: %lld sweeps are too many", name,
                      (long long)count);
  tyto_tensor **parts = malloc((size_t)count * sizeof *parts);
  if (!parts)
    return graph_oom(g, name);
  for (int64_t i = 0; i < count && g->status == TYTO_OK; i++) {
    tyto_tensor *along = mode == TYTO_AD_FORWARD ? x : y, *d, *e;
    if (!rows) {
      e = basis(along, i);
    } else {
      int64_t one_row[TYTO_MAX_RANK];
      one_row[0] = 1;
      memcpy(one_row + 1, along->shape + 1,
             (size_t)(along->rank - 1) * sizeof *one_row);
      e = unit(along, i, mode == TYTO_AD_FORWARD ? nx : ny);
      e = tyto_broadcast_to(tyto_reshape(e, along->rank, one_row), along->rank,
                            along->shape);
    }
    int64_t part[3] = {bsz, ny, nx};
    if (mode == TYTO_AD_FORWARD) {
      jvp_named(name, 1, &x, &e, 1, &y, &d);
      part[2] = 1;
    } else {
      vjp_named(name, 1, &y, &e, 1, &x, &d);
      part[1] = 1;
    }
    parts[i] = tyto_reshape(d, 2 + lead, part + 1 - lead);
  }
  tyto_tensor *j = g->status == TYTO_OK
                       ? tyto_concat((int)count, parts,
                                     lead + (mode == TYTO_AD_FORWARD ? 1 : 0))
                       : &g->error;
  free(parts);
  return j;
}

static tyto_tensor *jacobian_named(const char *name, tyto_tensor *y,
                                   tyto_tensor *x, tyto_ad_mode mode) {
  tyto_tensor *err;
  tyto_graph *g = check_pair(name, y, x, &err);
  if (!g)
    return err;
  return sweeps(name, g, y, x, mode, 0);
}

tyto_tensor *tyto_jacobian(tyto_tensor *y, tyto_tensor *x) {
  tyto_tensor *err;
  tyto_graph *g = check_pair("jacobian", y, x, &err);
  if (!g)
    return err;
  return jacobian_named("jacobian", y, x, tyto_jacobian_mode(y, x));
}

tyto_tensor *tyto_jacobian_in_mode(tyto_tensor *y, tyto_tensor *x,
                                   tyto_ad_mode mode) {
  tyto_tensor *err;
  tyto_graph *g = check_pair("jacobian", y, x, &err);
  if (!g)
    return err;
  if (mode != TYTO_AD_FORWARD && mode != TYTO_AD_REVERSE)
    return graph_fail(g,
                      "jacobian: mode %d is neither TYTO_AD_FORWARD nor "
                      "TYTO_AD_REVERSE",
                      (int)mode);
  return jacobian_named("jacobian", y, x, mode);
}

tyto_tensor *tyto_hessian(tyto_tensor *y, tyto_tensor *x) {
  tyto_tensor *err;
  tyto_graph *g = check_pair("hessian", y, x, &err);
  if (!g)
    return err;
  if (one_element("hessian", "y", y))
    return &g->error;
  tyto_tensor *v = ones_like(y), *gr;
  vjp_named("hessian", 1, &y, &v, 1, &x, &gr);
  return jacobian_named("hessian", gr, x, TYTO_AD_FORWARD);
}

tyto_tensor *tyto_hessianv(tyto_tensor *y, tyto_tensor *x, tyto_tensor *v) {
  tyto_tensor *three[3] = {y, x, v}, *err = NULL;
  tyto_graph *g = check_args("hessianv", 3, three, &err);
  if (!g)
    return err;
  if (one_element("hessianv", "y", y) || shape_like(g, "hessianv", "v", v, x))
    return &g->error;
  tyto_tensor *ones = ones_like(y), *gr, *hv;
  vjp_named("hessianv", 1, &y, &ones, 1, &x, &gr);
  jvp_named("hessianv", 1, &x, &v, 1, &gr, &hv);
  return hv;
}

tyto_tensor *tyto_laplacian(tyto_tensor *y, tyto_tensor *x) {
  tyto_tensor *err;
  tyto_graph *g = check_pair("laplacian", y, x, &err);
  if (!g)
    return err;
  if (one_element("laplacian", "y", y))
    return &g->error;
  int64_t n = tyto_tensor_numel(x);
  tyto_tensor *h = tyto_hessian(y, x);
  /* The diagonal of the [n, n] Hessian is every (n+1)-th element. */
  int64_t flat = n * n, start = 0, step = n + 1;
  tyto_tensor *d = tyto_slice(tyto_reshape(h, 1, &flat), &start, NULL, &step);
  return tyto_sum(d, 0, NULL, 0);
}

/* ---------------------------------------------------------------------- */
/* Batched derivatives                                                     */

/* Which nodes lie on a path from x to y: dep (depends on x) and anc (y
 * depends on it), over g's nodes [x->index, y->index]; NULL when out of
 * memory. Index i - x->index. */
static unsigned char *on_path(tyto_graph *g, tyto_tensor *y, tyto_tensor *x,
                              int64_t *n_out) {
  int64_t lo = x->index, hi = y->index, n = hi >= lo ? hi - lo + 1 : 0;
  unsigned char *p = calloc((size_t)(n ? n : 1), 1);
  if (!p)
    return NULL;
  *n_out = n;
  if (!n)
    return p;
  p[0] = 1; /* bit 0: depends on x */
  for (int64_t i = 1; i < n; i++) {
    tyto_tensor *t = g->nodes[lo + i];
    for (size_t k = 0; k < t->n_inputs && !(p[i] & 1); k++) {
      int64_t j = t->inputs[k]->index - lo;
      if (j >= 0 && j < n && (p[j] & 1))
        p[i] |= 1;
    }
  }
  p[n - 1] |= 2; /* bit 1: y depends on it */
  for (int64_t i = n - 1; i >= 0; i--) {
    if (!(p[i] & 2))
      continue;
    tyto_tensor *t = g->nodes[lo + i];
    for (size_t k = 0; k < t->n_inputs; k++) {
      int64_t j = t->inputs[k]->index - lo;
      if (j >= 0 && j < n)
        p[j] |= 2;
    }
  }
  return p;
}

static int is_eltwise(tyto_op op) {
  return (op >= TYTO_OP_NEG && op <= TYTO_OP_ROUND) ||
         (op >= TYTO_OP_ADD && op <= TYTO_OP_GE) || op == TYTO_OP_WHERE ||
         op == TYTO_OP_FMA || op == TYTO_OP_STOP_GRADIENT || op == TYTO_OP_CAST;
}

/* Whether node t, whose x-dependent inputs are marked in dep (by input),
 * keeps elements apart (mode 0: element i of the output from element i
 * of those inputs only) or batch rows apart (mode 1: row b of the output,
 * along axis 0 of extent batch, from row b of them only). Returns NULL
 * when it does, else why not. */
static const char *keeps_apart(const tyto_tensor *t, const unsigned char *dep,
                               int mode, int64_t batch) {
  if (t->op == TYTO_OP_STOP_GRADIENT)
    return NULL; /* nothing flows through it */
  /* Element i of y is that of every replica's x, whatever the mode. */
  if (t->op == TYTO_OP_REPLICA_SUM)
    return "sums over the replicas of a data-parallel step";
  for (size_t k = 0; k < t->n_inputs; k++) {
    const tyto_tensor *in = t->inputs[k];
    if (!dep[k])
      continue;
    if (mode == 0) {
      if (!is_eltwise(t->op))
        return "combines elements";
      if (!ad_same_shape(in, t))
        return "broadcasts a tensor computed from x";
      continue;
    }
    /* Batch rows: the x-dependent input has the rows on axis 0, and the
     * op maps row b to row b. */
    if (t->op >= TYTO_OP_SUM && t->op <= TYTO_OP_NORM_L2)
      for (size_t a = 1; a < t->n_iattrs; a++)
        if (t->iattrs[a] == 0)
          return "reduces over the batch axis";
    if (t->op == TYTO_OP_MATMUL && in->rank == 2 && (k != 0 || t->iattrs[0]))
      return "contracts over the batch axis";
    if (in->rank < 1 || in->shape[0] != batch || t->rank < 1 ||
        t->shape[0] != batch)
      return "moves the batch axis (axis 0)";
    switch (t->op) {
    case TYTO_OP_SUM:
    case TYTO_OP_MEAN:
    case TYTO_OP_REDUCE_MAX:
    case TYTO_OP_REDUCE_MIN:
    case TYTO_OP_PROD:
    case TYTO_OP_LOG_SUM_EXP:
    case TYTO_OP_NORM_L1:
    case TYTO_OP_NORM_L2:
      /* iattrs: keepdims, then the axes reduced. */
      for (size_t a = 1; a < t->n_iattrs; a++)
        if (t->iattrs[a] == 0)
          return "reduces over the batch axis";
      break;
    case TYTO_OP_MATMUL:
      /* [B, k] x W, or batched [B, ..., m, k] x [B or 1, ..., k, n]: the
       * rows stay apart unless x's rows are the contracted matrix. */
      if (in->rank == 2 && (k != 0 || t->iattrs[0]))
        return "contracts over the batch axis";
      break;
    case TYTO_OP_RESHAPE:
    case TYTO_OP_BROADCAST_TO:
      break; /* row-major, axis 0 kept: row b stays row b */
    case TYTO_OP_PERMUTE:
      if (t->iattrs[0] != 0)
        return "moves the batch axis (axis 0)";
      break;
    case TYTO_OP_CONCAT:
      if (t->iattrs[0] == 0)
        return "joins along the batch axis";
      break;
    case TYTO_OP_SLICE:
    case TYTO_OP_FLIP:
    case TYTO_OP_PAD:
    case TYTO_OP_TILE:
      /* Axis 0 untouched: SLICE's (start, step) of axis 0 are (0, 1);
       * FLIP lists its axes; PAD and TILE leave axis 0's extent (checked
       * above) only when they leave it alone. */
      if ((t->op == TYTO_OP_SLICE &&
           (t->iattrs[0] != 0 || t->iattrs[1] != 1)) ||
          (t->op == TYTO_OP_FLIP && t->n_iattrs && t->iattrs[0] == 0))
        return "reorders or cuts the batch axis";
      break;
    case TYTO_OP_SOFTMAX:
    case TYTO_OP_LOG_SOFTMAX:
      if (t->iattrs[0] == 0)
        return "normalises over the batch axis";
      break;
    case TYTO_OP_CONV2D:
    case TYTO_OP_MAX_POOL2D:
    case TYTO_OP_AVG_POOL2D:
      if (k != 0)
        return "uses a tensor computed from x as its filter";
      break;
    default:
      if (is_eltwise(t->op)) {
        if (in->rank != t->rank)
          return "broadcasts a tensor computed from x across the batch";
        break;
      }
      return "is not one tyto can tell keeps the rows apart";
    }
  }
  return NULL;
}

/* Fails unless every op on a path from x to y keeps elements (mode 0) or
 * batch rows (mode 1) apart. */
static int check_apart(const char *name, tyto_graph *g, tyto_tensor *y,
                       tyto_tensor *x, int mode, int64_t batch) {
  int64_t n = 0;
  unsigned char *p = on_path(g, y, x, &n);
  if (!p) {
    graph_oom(g, name);
    return -1;
  }
  int rc = 0;
  for (int64_t i = 1; i < n && rc == 0; i++) {
    if (p[i] != 3)
      continue;
    tyto_tensor *t = g->nodes[x->index + i];
    unsigned char dep[64] = {0};
    for (size_t k = 0; k < t->n_inputs && k < sizeof dep; k++) {
      int64_t j = t->inputs[k]->index - x->index;
      dep[k] = j >= 0 && j < n && (p[j] & 1);
    }
    const char *why = keeps_apart(t, dep, mode, batch);
    if (why) {
      graph_fail(g,
                 "%s: y is not %s in x: %s (tensor #%lld) on the way from x "
                 "to y %s",
                 name, mode ? "row by row" : "elementwise", tyto_op_name(t->op),
                 (long long)t->index, why);
      rc = -1;
    }
  }
  free(p);
  return rc;
}

tyto_tensor *tyto_diff_elementwise(tyto_tensor *y, tyto_tensor *x) {
  static const char name[] = "diff_elementwise";
  tyto_tensor *err;
  tyto_graph *g = check_pair(name, y, x, &err);
  if (!g)
    return err;
  if (!ad_same_shape(y, x)) {
    char a[SHAPE_STR], b[SHAPE_STR];
    return graph_fail(g, "%s: y %s must be shaped as x %s", name,
                      tensor_shape_str(a, y), tensor_shape_str(b, x));
  }
  if (check_apart(name, g, y, x, 0, 0))
    return &g->error;
  tyto_tensor *v = ones_like(x), *d;
  jvp_named(name, 1, &x, &v, 1, &y, &d);
  return d;
}

/* The extent of the batch axis both share, or -1 after failing. */
static int64_t batch_of(const char *name, tyto_graph *g, tyto_tensor *y,
                        tyto_tensor *x) {
  char a[SHAPE_STR], b[SHAPE_STR];
  if (x->rank < 1 || y->rank < 1 || x->shape[0] != y->shape[0]) {
    graph_fail(g, "%s: x %s and y %s must share a leading batch axis", name,
               tensor_shape_str(b, x), tensor_shape_str(a, y));
    return -1;
  }
  return x->shape[0];
}

tyto_tensor *tyto_jacobian_batched(tyto_tensor *y, tyto_tensor *x) {
  static const char name[] = "jacobian_batched";
  tyto_tensor *err;
  tyto_graph *g = check_pair(name, y, x, &err);
  if (!g)
    return err;
  int64_t b = batch_of(name, g, y, x);
  if (b < 0 || check_apart(name, g, y, x, 1, b))
    return &g->error;
  int64_t nx = b ? tyto_tensor_numel(x) / b : 0,
          ny = b ? tyto_tensor_numel(y) / b : 0;
  return sweeps(name, g, y, x, nx < ny ? TYTO_AD_FORWARD : TYTO_AD_REVERSE, 1);
}

tyto_tensor *tyto_hessian_batched(tyto_tensor *y, tyto_tensor *x) {
  static const char name[] = "hessian_batched";
  tyto_tensor *err;
  tyto_graph *g = check_pair(name, y, x, &err);
  if (!g)
    return err;
  int64_t b = batch_of(name, g, y, x);
  if (b < 0)
    return &g->error;
  if (tyto_tensor_numel(y) != b) {
    char s[SHAPE_STR];
    return graph_fail(g, "%s: y %s must hold one element per row", name,
                      tensor_shape_str(s, y));
  }
  if (check_apart(name, g, y, x, 1, b))
    return &g->error;
  /* Every row's gradient in one reverse sweep (the rows are apart), then
   * one forward sweep per element of a row. */
  tyto_tensor *s = tyto_sum(y, 0, NULL, 0), *v = ones_like(s), *gr;
  vjp_named(name, 1, &s, &v, 1, &x, &gr);
  return sweeps(name, g, gr, x, TYTO_AD_FORWARD, 1);
}
