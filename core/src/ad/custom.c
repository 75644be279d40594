/*
 * Custom derivative rules (tyto_custom_derivative): a CUSTOM_DERIVATIVE
 * node (y, x1 .. xn) has y's value; AD asks the user's rule for its
 * derivative with respect to the xs and never looks inside y. The rules
 * live in the graph (g->customs), the node's iattrs[0] indexing them.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <tyto/ad.h>

#include "../graph/shape.h"
#include "rules.h"

static const char *rule_name(const tyto_custom_rule *r) {
  return r->name ? r->name : "custom";
}

tyto_tensor *tyto_custom_derivative(tyto_tensor *y, size_t n,
                                    tyto_tensor *const *xs,
                                    const tyto_custom_rule *rule) {
  static const char fn[] = "custom_derivative";
  tyto_tensor *err;
  tyto_graph *g = graph_check(fn, 1, &y, 0, &err);
  if (!g)
    return err;
  if (!rule)
    return graph_fail(g, "%s: rule is NULL", fn);
  if (!rule->jvp && !rule->vjp)
    return graph_fail(g,
                      "%s '%s': the rule has neither a jvp nor a vjp "
                      "callback",
                      fn, rule_name(rule));
  if (n == 0 || !xs)
    return graph_fail(g, "%s '%s': %s", fn, rule_name(rule),
                      n == 0 ? "no inputs (n is 0): a tensor of no inputs "
                               "has no derivative to give"
                             : "xs is NULL");
  tyto_tensor **in = malloc((n + 1) * sizeof *in);
  if (!in)
    return graph_oom(g, fn);
  in[0] = y;
  memcpy(in + 1, xs, n * sizeof *xs);
  tyto_graph *gx = graph_check(fn, n + 1, in, 0, &err);
  if (!gx) {
    free(in);
    return err;
  }
  if (g->n_customs == g->cap_customs) {
    size_t cap = g->cap_customs ? 2 * g->cap_customs : 4;
    tyto_custom_rule *nc = realloc(g->customs, cap * sizeof *nc);
    if (!nc) {
      free(in);
      return graph_oom(g, fn);
    }
    g->customs = nc;
    g->cap_customs = cap;
  }
  tyto_custom_rule *c = &g->customs[g->n_customs];
  *c = *rule;
  if (rule->name) {
    size_t len = strlen(rule->name) + 1;
    char *name = graph_alloc(g, len);
    if (!name) {
      free(in);
      return graph_oom(g, fn);
    }
    memcpy(name, rule->name, len);
    c->name = name;
  }
  int64_t idx = (int64_t)g->n_customs++;
  tyto_tensor *t = node_new(g, TYTO_OP_CUSTOM_DERIVATIVE, y->dtype, y->rank,
                            y->shape, n + 1, in, 1, &idx, 0, NULL);
  free(in);
  return t;
}

/* What a rule returned for something shaped as `like`: NULL (zero), or a
 * tensor of like's shape and dtype in like's graph; anything else fails
 * the graph with a message naming the rule. */
static int check(const tyto_custom_rule *c, tyto_tensor *n, tyto_tensor *r,
                 const tyto_tensor *like, const char *what) {
  if (!r)
    return 0;
  if (tyto_graph_status(n->graph) != TYTO_OK || tyto_tensor_is_error(r))
    return -1;
  if (r->graph != n->graph) {
    graph_fail(n->graph,
               "custom derivative '%s': its %s returned a tensor of "
               "another graph",
               rule_name(c), what);
    return -1;
  }
  if (!ad_same_shape(r, like) || r->dtype != like->dtype) {
    char a[SHAPE_STR], b[SHAPE_STR];
    graph_fail(n->graph,
               "custom derivative '%s': its %s returned %s %s, expected "
               "%s %s",
               rule_name(c), what, tyto_dtype_name(r->dtype),
               tensor_shape_str(a, r), tyto_dtype_name(like->dtype),
               tensor_shape_str(b, like));
    return -1;
  }
  return 0;
}

static const tyto_custom_rule *rule_of(const tyto_tensor *n) {
  return &n->graph->customs[n->iattrs[0]];
}

int ad_vjp_custom(tyto_tensor *n, tyto_tensor *g, const unsigned char *need,
                  tyto_tensor **adj) {
  /* A copy: the callback may add rules (and move the array). */
  tyto_custom_rule c = *rule_of(n);
  size_t nx = n->n_inputs - 1;
  /* Input 0 is y: nothing flows into its sub-graph. */
  for (size_t i = 1; i < n->n_inputs; i++) {
    if (!need[i])
      continue;
    if (!c.vjp) {
      graph_fail(n->graph,
                 "custom derivative '%s': reverse mode needs its vjp, and "
                 "the rule has none",
                 rule_name(&c));
      return -1;
    }
    char what[48];
    snprintf(what, sizeof what, "vjp for input %zu", i - 1);
    tyto_tensor *a = c.vjp(c.user, i - 1, nx, n->inputs + 1, n, g);
    if (check(&c, n, a, n->inputs[i], what))
      return -1;
    adj[i] = a;
  }
  return 0;
}

tyto_tensor *ad_jvp_custom(tyto_tensor *n, tyto_tensor *const *tan) {
  tyto_custom_rule c = *rule_of(n);
  size_t nx = n->n_inputs - 1;
  int any = 0;
  for (size_t i = 1; i < n->n_inputs; i++)
    any |= tan[i] != NULL;
  if (!any) /* only y's own sub-graph moves: not seen through the rule */
    return NULL;
  if (!c.jvp)
    return graph_fail(n->graph,
                      "custom derivative '%s': forward mode needs its jvp, "
                      "and the rule has none",
                      rule_name(&c));
  tyto_tensor **t = malloc(nx * sizeof *t);
  if (!t)
    return graph_oom(n->graph, "custom_derivative");
  for (size_t i = 0; i < nx; i++)
    t[i] = ad_or_zeros(tan[i + 1], n->inputs[i + 1]);
  tyto_tensor *r = c.jvp(c.user, nx, n->inputs + 1, n, t);
  free(t);
  if (check(&c, n, r, n, "jvp"))
    return tyto_graph_error_tensor(n->graph);
  return r;
}
