/*
 * Building a parsed model file into a tyto_nn (model_file.h: mf_build):
 * each layer's keys turned into the nn layer's arguments, in file order.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_file.h"
#include "model_file_internal.h"

/* ---------------------------------------------------------------------- */
/* Building                                                                */

static int64_t pair_or(const mf_layer *l, const char *key, int i, int64_t def) {
  const mf_value *v = mf_get(l, key);
  return v ? v->i[i] : def;
}

static void conv_of(const mf_layer *l, tyto_nn_conv *c) {
  memset(c, 0, sizeof *c);
  c->filters = mf_get(l, "filters")->i[0];
  for (int i = 0; i < 2; i++) {
    c->kernel[i] = pair_or(l, "kernel", i, 1);
    c->stride[i] = pair_or(l, "stride", i, 1);
    c->dilation[i] = pair_or(l, "dilation", i, 1);
    c->output_pad[i] = pair_or(l, "output_padding", i, 0);
  }
  const mf_value *g = mf_get(l, "groups"), *b = mf_get(l, "bias"),
                 *in = mf_get(l, "init"), *pd = mf_get(l, "padding");
  c->groups = g ? g->i[0] : 1;
  c->no_bias = b && !b->word;
  if (in)
    c->weight_init.kind = (tyto_init_kind)in->word;
  const mf_value *gn = mf_get(l, "gain");
  if (gn)
    c->weight_init.gain = gn->r;
  if (!pd || pd->word == -2) {
    c->padding = TYTO_NN_VALID;
  } else if (pd->word == -1) {
    c->padding = TYTO_NN_SAME;
  } else {
    c->padding = TYTO_NN_EXPLICIT;
    c->pad[0] = pd->i[0];
    c->pad[1] = pd->i[1];
  }
}

static void pool_of(const mf_layer *l, tyto_nn_pool *p) {
  memset(p, 0, sizeof *p);
  for (int i = 0; i < 2; i++) {
    p->kernel[i] = pair_or(l, "kernel", i, 1);
    p->stride[i] = pair_or(l, "stride", i, p->kernel[i]);
  }
  const mf_value *pd = mf_get(l, "padding");
  if (!pd || pd->word == -2) {
    p->padding = TYTO_NN_VALID;
  } else if (pd->word == -1) {
    p->padding = TYTO_NN_SAME;
  } else {
    p->padding = TYTO_NN_EXPLICIT;
    p->pad[0] = pd->i[0];
    p->pad[1] = pd->i[1];
  }
}

static tyto_tensor *activation_of(const mf_layer *l, tyto_tensor *x) {
  const mf_value *a = mf_get(l, "activation");
  return a ? tyto_nn_activate(x, (tyto_nn_activation)a->word, 0) : x;
}

static tyto_tensor *build_one(const mf_model *m, const mf_layer *l, tyto_nn *nn,
                              tyto_tensor **outs) {
  tyto_tensor *x = l->n_from ? outs[l->from[0]] : NULL;
  const char *name = l->name;
  tyto_init init = {TYTO_INIT_DEFAULT, 0, 0, 0};
  const mf_value *iv = mf_get(l, "init");
  if (iv)
    init.kind = (tyto_init_kind)iv->word;
  const mf_value *gv = mf_get(l, "gain");
  if (gv)
    init.gain = gv->r;
  tyto_nn_conv c;
  tyto_nn_pool p;
  (void)m;
  switch (l->spec->kind) {
  case L_LINEAR: {
    const mf_value *b = mf_get(l, "bias");
    return activation_of(l,
                         tyto_nn_linear(nn, name, x, mf_get(l, "units")->i[0],
                                        !b || b->word, init));
  }
  case L_FC: {
    const mf_value *a = mf_get(l, "activation");
    return tyto_nn_fully_connected(
        nn, name, x, mf_get(l, "units")->i[0],
        a ? (tyto_nn_activation)a->word : TYTO_ACT_NONE, init);
  }
  case L_CONV1D:
    conv_of(l, &c);
    return activation_of(l, tyto_nn_conv1d(nn, name, x, &c));
  case L_CONV2D:
    conv_of(l, &c);
    return activation_of(l, tyto_nn_conv2d(nn, name, x, &c));
  case L_CONV2D_T:
    conv_of(l, &c);
    return activation_of(l, tyto_nn_conv2d_transpose(nn, name, x, &c));
  case L_MAX_POOL1D: pool_of(l, &p); return tyto_nn_max_pool1d(nn, x, &p);
  case L_MAX_POOL2D: pool_of(l, &p); return tyto_nn_max_pool2d(nn, x, &p);
  case L_AVG_POOL1D: pool_of(l, &p); return tyto_nn_avg_pool1d(nn, x, &p);
  case L_AVG_POOL2D: pool_of(l, &p); return tyto_nn_avg_pool2d(nn, x, &p);
  case L_GLOBAL_MAX: return tyto_nn_global_max_pool(nn, x);
  case L_GLOBAL_AVG: return tyto_nn_global_avg_pool(nn, x);
  case L_DROPOUT: return tyto_nn_dropout(nn, x, mf_get(l, "rate")->r);
  case L_BATCH_NORM: {
    const mf_value *mo = mf_get(l, "momentum"), *ep = mf_get(l, "eps");
    return tyto_nn_batch_norm(nn, name, x, mo ? mo->r : 0, ep ? ep->r : 0);
  }
  case L_EMBEDDING:
    if (!iv)
      init.kind = TYTO_INIT_DEFAULT;
    return tyto_nn_embedding(nn, name, x, mf_get(l, "vocab")->i[0],
                             mf_get(l, "dim")->i[0], init);
  case L_FLATTEN: return tyto_nn_flatten(x);
  case L_RESHAPE: {
    const mf_value *sh = mf_get(l, "shape");
    return tyto_nn_reshape(x, sh->n_i, sh->i);
  }
  case L_CONCAT:
  case L_ADD: {
    tyto_tensor *xs[MF_MAX_FROM];
    for (int i = 0; i < l->n_from; i++)
      xs[i] = outs[l->from[i]];
    if (l->spec->kind == L_ADD)
      return tyto_nn_add((size_t)l->n_from, xs);
    const mf_value *ax = mf_get(l, "axis");
    return tyto_nn_concat((size_t)l->n_from, xs, ax ? (int)ax->i[0] : 1);
  }
  case L_ACT: {
    int a = tyto_nn_activation_from_name(l->spec->type);
    const mf_value *pv = mf_get(l, "slope");
    if (!pv)
      pv = mf_get(l, "alpha");
    return tyto_nn_activate(x, (tyto_nn_activation)a, pv ? pv->r : 0);
  }
  case L_RNN:
  case L_LSTM:
  case L_GRU: {
    const mf_value *sq = mf_get(l, "sequences");
    int seq = sq && sq->word;
    int64_t units = mf_get(l, "units")->i[0];
    return l->spec->kind == L_RNN    ? tyto_nn_rnn(nn, name, x, units, seq)
           : l->spec->kind == L_LSTM ? tyto_nn_lstm(nn, name, x, units, seq)
                                     : tyto_nn_gru(nn, name, x, units, seq);
  }
  case L_INPUT:
  case L_LOSS:
  case L_REGULARIZE: break;
  }
  return x;
}

tyto_tensor *mf_build(const mf_model *m, tyto_nn *nn, tyto_tensor *x, char *err,
                      size_t n) {
  tyto_graph *g = tyto_nn_graph(nn);
  tyto_tensor **outs = calloc(m->n_layers, sizeof *outs);
  if (!outs) {
    snprintf(err, n, "%s: out of memory", m->file);
    return NULL;
  }
  /* The layer whose output is the network's: the last one that is not a
   * directive, less a final softmax under cross-entropy. */
  size_t last = m->n_layers;
  while (last > 0 && (m->layers[last - 1].spec->kind == L_LOSS ||
                      m->layers[last - 1].spec->kind == L_REGULARIZE))
    last--;
  size_t result = last - 1;
  if (m->loss == MF_LOSS_CROSS_ENTROPY &&
      strcmp(m->layers[result].spec->type, "softmax") == 0)
    result = (size_t)m->layers[result].from[0];
  tyto_tensor *y = NULL;
  for (size_t i = 0; i < m->n_layers; i++) {
    const mf_layer *l = &m->layers[i];
    if (l->spec->kind == L_LOSS || l->spec->kind == L_REGULARIZE)
      continue;
    outs[i] = l->spec->kind == L_INPUT ? x : build_one(m, l, nn, outs);
    if (tyto_graph_status(g) != TYTO_OK) {
      mf_fail(err, n, m->file, l->line, 1, "%s '%s': %s", l->spec->type,
              l->name, tyto_graph_error_message(g));
      free(outs);
      return NULL;
    }
    if (i == result)
      y = outs[i];
  }
  free(outs);
  return y;
}
