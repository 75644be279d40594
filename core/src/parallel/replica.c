/*
 * Sums over the replicas of a data-parallel step (tyto_replica_sum, built
 * in ad/ad.c beside the other graph-only ops): compiled alone it is x
 * itself (compile/lower.c); in a data-parallel replica each one becomes
 * an exchange with the host between two phases of its program (here, for
 * dp.c), where the step sums every replica's x (here, for step.c).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/parallel.h>

#include "../graph/dtype.h"
#include "../graph/node.h"
#include "../runtime/error.h"

#include "dp_internal.h"

/* ---------------------------------------------------------------------- */
/* A replica's replica sums as exchanges                                  */

/* Whether root t is a node of g: the caller's model is checked after
 * the rewrite (dp.c names what is wrong), which leaves others as they
 * are. */
static int of_graph(const tyto_graph *g, const tyto_tensor *t) {
  return t && t->graph == g && t->index >= 0 && (size_t)t->index < g->n_nodes;
}

static int rs_push(replica *r, tyto_tensor *send, tyto_tensor *recv, int kind,
                   size_t stage) {
  size_t n = r->n_rs + 1;
  tyto_tensor **s = realloc(r->rs_send, n * sizeof *s);
  if (s)
    r->rs_send = s;
  tyto_tensor **v = realloc(r->rs_recv, n * sizeof *v);
  if (v)
    r->rs_recv = v;
  int *kd = realloc(r->rs_kind, n * sizeof *kd);
  if (kd)
    r->rs_kind = kd;
  size_t *sg = realloc(r->rs_stage, n * sizeof *sg);
  if (sg)
    r->rs_stage = sg;
  if (!s || !v || !kd || !sg)
    return -1;
  s[r->n_rs] = send;
  v[r->n_rs] = recv;
  kd[r->n_rs] = kind;
  sg[r->n_rs] = stage;
  r->n_rs = n;
  if (stage + 1 > r->n_rs_stages)
    r->n_rs_stages = stage + 1;
  return 0;
}

tyto_status dp_rs_rewrite(replica *r, size_t n, tyto_tensor **roots,
                          size_t *levels, const char *who) {
  tyto_graph *g = r->g;
  size_t nn = (size_t)g->n_nodes;
  unsigned char *need = graph_needed(g, n, roots);
  tyto_tensor **map = calloc(nn ? nn : 1, sizeof *map);
  size_t *level = calloc(nn ? nn : 1, sizeof *level);
  tyto_status st = TYTO_OK;
  if (!need || !map || !level)
    st = dp_oom();
  /* In creation order, which is topological: each node needed is rebuilt
   * on its inputs' counterparts when one of them changed; a replica sum
   * becomes an input received after the phase that computes its operand
   * (its stage: the replica sums on the longest chain above it). */
  for (size_t i = 0; i < nn && st == TYTO_OK; i++) {
    tyto_tensor *t = g->nodes[i];
    if (!need[i])
      continue;
    size_t lv = 0;
    int same = 1;
    tyto_tensor *stack[8], **ins = stack;
    if (t->n_inputs > 8 && !(ins = malloc(t->n_inputs * sizeof *ins))) {
      st = dp_oom();
      break;
    }
    for (size_t j = 0; j < t->n_inputs; j++) {
      size_t k = (size_t)t->inputs[j]->index;
      ins[j] = map[k];
      same &= ins[j] == t->inputs[j];
      if (level[k] > lv)
        lv = level[k];
    }
    if (t->op == TYTO_OP_REPLICA_SUM) {
      char name[48];
      snprintf(name, sizeof name, "dp.replica_sum%zu", r->n_rs);
      tyto_tensor *in = tyto_input(g, t->dtype, t->rank, t->shape, name);
      if (tyto_graph_status(g) != TYTO_OK ||
          rs_push(r, ins[0], in, (int)t->iattrs[0], lv) < 0)
        st = tyto_graph_status(g) != TYTO_OK
                 ? rt_fail(TYTO_ERR_INVALID_ARGUMENT, "dp: %s: %s", who,
                           tyto_graph_error_message(g))
                 : dp_oom();
      map[i] = in;
      level[i] = lv + 1;
    } else {
      map[i] = t;
      level[i] = lv;
      if (!same &&
          (map[i] = node_rebuild(g, t, t->dtype, ins))->kind == TYTO_KIND_ERROR)
        st = rt_fail(TYTO_ERR_INVALID_ARGUMENT, "dp: %s: %s", who,
                     tyto_graph_error_message(g));
    }
    if (ins != stack)
      free(ins);
  }
  for (size_t k = 0; k < n && st == TYTO_OK; k++) {
    if (!of_graph(g, roots[k]))
      continue;
    levels[k] = level[roots[k]->index];
    roots[k] = map[roots[k]->index];
  }
  free(need);
  free(map);
  free(level);
  return st;
}

/* With more than one replica in the run, the replica sums of r's loss,
 * gradients, weight, sums and layer updates become exchanges (replica.c):
 * the tensors are rebuilt on their inputs. With one, each is x itself. */
tyto_status dp_rs_model(tyto_dp *dp, replica *r, tyto_dp_model *m,
                        const char *who) {
  if (dp->n < 2 && dp->ranks < 2)
    return TYTO_OK;
  size_t np = r->n_params, nr = 2 + np + m->n_sums + m->n_updates;
  tyto_tensor **roots = malloc(nr * sizeof *roots);
  size_t *lv = calloc(nr, sizeof *lv);
  r->rs_uv = malloc((m->n_updates ? m->n_updates : 1) * sizeof *r->rs_uv);
  if (!roots || !lv || !r->rs_uv) {
    free(roots);
    free(lv);
    return dp_oom();
  }
  roots[0] = r->loss;
  roots[1] = m->weight;
  memcpy(roots + 2, r->grads, np * sizeof *roots);
  memcpy(roots + 2 + np, m->sums, m->n_sums * sizeof *roots);
  if (m->n_updates)
    memcpy(roots + 2 + np + m->n_sums, m->update_values,
           m->n_updates * sizeof *roots);
  tyto_status st = dp_rs_rewrite(r, nr, roots, lv, who);
  if (st == TYTO_OK) {
    r->loss = roots[0];
    m->weight = roots[1];
    memcpy(r->grads, roots + 2, np * sizeof *roots);
    memcpy(m->sums, roots + 2 + np, m->n_sums * sizeof *roots);
    memcpy(r->sums, m->sums, m->n_sums * sizeof *roots);
    memcpy(r->rs_uv, roots + 2 + np + m->n_sums, m->n_updates * sizeof *roots);
    m->update_values = r->rs_uv;
    r->weight_stage = lv[1];
  }
  /* The shares weight the backward pass's sums: the weight must be known
   * by then. */
  for (size_t j = 0; j < r->n_rs && st == TYTO_OK && m->weight; j++)
    if (r->rs_kind[j] == TYTO_REPLICA_SUM_SHARES &&
        r->rs_stage[j] < r->weight_stage)
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dp: %s: the model's weight needs a replica sum (it is "
                   "computed after %zu of them), but the backward pass sums "
                   "over the replicas by their weights before that; compute "
                   "the weight from the inputs alone",
                   who, r->weight_stage);
  free(roots);
  free(lv);
  return st;
}

/* The replica sums pair up by their order in the graph: the same kind,
 * stage and shape on every replica (a sum of a tensor whose shape follows
 * the shard cannot be made), in a dtype the host sums. */
tyto_status dp_rs_check(const tyto_dp *dp) {
  const replica *r0 = &dp->r[0];
  for (size_t i = 1; i < dp->n; i++)
    for (size_t j = 0; j < r0->n_rs; j++) {
      const replica *r = &dp->r[i];
      const tyto_tensor *a = r0->rs_send[j], *b = r->rs_send[j];
      if (r->rs_kind[j] != r0->rs_kind[j] ||
          r->rs_stage[j] != r0->rs_stage[j] ||
          r->weight_stage != r0->weight_stage)
        return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                       "dp: replica sum %zu differs in kind or place between "
                       "replica 0 and replica %zu: the builder must build the "
                       "same model for every shard",
                       j, i);
      if (tyto_tensor_numel(a) != tyto_tensor_numel(b))
        return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                       "dp: replica sum %zu has %lld elements on replica 0 "
                       "(%lld examples) and %lld on replica %zu (%lld): a "
                       "replica sum's operand must not depend on the shard's "
                       "size (sum over the batch axis first)",
                       j, (long long)tyto_tensor_numel(a), (long long)r0->shard,
                       (long long)tyto_tensor_numel(b), i, (long long)r->shard);
    }
  for (size_t j = 0; j < r0->n_rs; j++)
    if (!dtype_host_arith(tyto_tensor_dtype(r0->rs_send[j])))
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dp: replica sum %zu is %s; expected f32 or f64 (it is "
                     "summed on the host)",
                     j, tyto_dtype_name(tyto_tensor_dtype(r0->rs_send[j])));
  return TYTO_OK;
}

/* ---------------------------------------------------------------------- */
/* A stage's replica sums, in a step                                      */

tyto_status dp_rs_exchange(tyto_dp *dp, size_t stage) {
  replica *r0 = &dp->r[0];
  size_t total = 0, most = 0;
  for (size_t j = 0; j < r0->n_rs; j++)
    if (r0->rs_stage[j] == stage) {
      size_t ne = dp->x_numel[r0->x_rs + j];
      total += ne;
      most = ne > most ? ne : most;
    }
  double *acc = calloc(total ? total : 1, sizeof *acc);
  unsigned char *buf = malloc((most ? most : 1) * sizeof(double));
  if (!acc || !buf) {
    free(acc);
    free(buf);
    return dp_oom(); /* not summed: fail_together sums zeros instead */
  }
  tyto_status st = TYTO_OK;
  /* Every replica's operand, in replica order, added in double: as is
   * (PLAIN), or weighted by the replica's share of the loss (SHARES). A
   * replica of share 0 (padding alone) took the sum undivided at the
   * stages before: what it adds is already at the scale of the whole,
   * weight 1, while it is finite (pad_ok; step.c). */
  for (size_t i = 0; i < dp->n && st == TYTO_OK; i++) {
    replica *r = &dp->r[i];
    size_t off = 0;
    for (size_t j = 0; j < r->n_rs && st == TYTO_OK; j++) {
      if (r->rs_stage[j] != stage)
        continue;
      size_t x = r->x_rs + j, ne = dp->x_numel[x];
      const dtype_info *di = dtype_info_of(tyto_tensor_dtype(r->sends[x]));
      int shares = r->rs_kind[j] == TYTO_REPLICA_SUM_SHARES;
      int pad = shares && r->share == 0;
      if (!(pad && !r->pad_ok) &&
          (st = tyto_program_read_send(r->p, x, buf, ne * di->size)) ==
              TYTO_OK) {
        for (size_t e = 0; e < ne && pad && r->pad_ok; e++)
          r->pad_ok = isfinite(di->load(buf, e));
        for (size_t e = 0; e < ne && !(pad && !r->pad_ok); e++)
          acc[off + e] += (shares && !pad ? r->share : 1.0) * di->load(buf, e);
      }
      off += ne;
    }
  }
  /* Over the processes, even when a read failed here: every other rank
   * makes this sum, and fail_together goes on from the next stage. */
  if (dp->ranks > 1) {
    tyto_status s2 = dp->coll->ops->sum(dp->coll, acc, total);
    if (st == TYTO_OK)
      st = s2;
  }
  dp->rs_done = stage + 1;
  /* Into every replica: the sum, or (SHARES) the sum over its own share,
   * as the gradient its own loss gives is scaled by that share later; a
   * replica of share 0 takes the sum as it is, its gradient counting at
   * weight 1 (step.c: pad_in). */
  for (size_t i = 0; i < dp->n && st == TYTO_OK; i++) {
    replica *r = &dp->r[i];
    size_t off = 0;
    for (size_t j = 0; j < r->n_rs && st == TYTO_OK; j++) {
      if (r->rs_stage[j] != stage)
        continue;
      size_t x = r->x_rs + j, ne = dp->x_numel[x];
      const dtype_info *di = dtype_info_of(tyto_tensor_dtype(r->sends[x]));
      int shares = r->rs_kind[j] == TYTO_REPLICA_SUM_SHARES;
      for (size_t e = 0; e < ne; e++)
        di->store(buf, e,
                  shares && r->share > 0 ? acc[off + e] / r->share
                                         : acc[off + e]);
      st = tyto_program_set_input(r->p, r->recv_of_send[x], buf, ne * di->size);
      off += ne;
    }
  }
  free(acc);
  free(buf);
  return st;
}
