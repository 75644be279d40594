/* Recurrent layers (RNN, LSTM, GRU), unrolled over the time steps from
 * zero states. The input's part of every gate is one matrix product for
 * all steps at once, [N T, F] x [F, G units]; each step adds one product
 * h Wh for all gates and slices the gates out. */
#include "config.h"

#include <stdlib.h>

#include "nn_internal.h"

typedef enum cell { CELL_RNN, CELL_LSTM, CELL_GRU } cell;

/* Gate k (of width units) of z [N, G units]. */
static tyto_tensor *gate(tyto_tensor *z, int64_t k, int64_t units) {
  return tyto_slice_axis(z, 1, k * units, (k + 1) * units, 1);
}

static tyto_tensor *recurrent(tyto_nn *nn, const char *kind, const char *name,
                              tyto_tensor *x, int64_t units,
                              int return_sequences, cell type) {
  tyto_tensor *err;
  if (nn_check_layout(nn, kind, name, 1, x, 3, "NTF", &err) < 0)
    return err;
  if (units <= 0)
    return nn_fail(nn, kind, name, "units %lld must be positive",
                   (long long)units);
  int64_t n = x->shape[0], steps = x->shape[1], f = x->shape[2];
  char s[SHAPE_STR];
  if (steps < 1)
    return nn_fail(nn, kind, name, "x %s has no time steps", nn_shape(s, x));
  if (steps > INT32_MAX)
    return nn_fail(nn, kind, name, "x %s has too many time steps",
                   nn_shape(s, x));
  int64_t gates = type == CELL_RNN ? 1 : type == CELL_LSTM ? 4 : 3;
  int64_t gu = gates * units;
  tyto_init glorot = nn_init_of(TYTO_INIT_GLOROT_UNIFORM);
  tyto_init dflt = nn_init_of(TYTO_INIT_DEFAULT);
  tyto_tensor *wx = nn_param(nn, kind, name, "wx", 2, (const int64_t[]){f, gu},
                             dflt, glorot, 0);
  tyto_tensor *wh = nn_param(nn, kind, name, "wh", 2,
                             (const int64_t[]){units, gu}, dflt, glorot, 0);
  tyto_tensor *b = nn_param(
      nn, kind, name, "b", 1, &gu, dflt,
      nn_init_of(type == CELL_LSTM ? NN_INIT_LSTM_BIAS : TYTO_INIT_ZEROS), 0);
  if (wx->kind == TYTO_KIND_ERROR)
    return wx;
  if (wh->kind == TYTO_KIND_ERROR)
    return wh;
  if (b->kind == TYTO_KIND_ERROR)
    return b;
  tyto_tensor **hs = malloc((size_t)steps * sizeof *hs);
  if (!hs)
    return graph_oom(nn->g, kind);
  /* x Wx + b for every step, [N, T, G units]. */
  tyto_tensor *xw =
      tyto_add(tyto_matmul(tyto_reshape(x, 2, (const int64_t[]){n * steps, f}),
                           wx, 0, 0),
               b);
  xw = tyto_reshape(xw, 3, (const int64_t[]){n, steps, gu});
  tyto_tensor *h = NULL, *c = NULL;
  for (int64_t t = 0; t < steps; t++) {
    tyto_tensor *xt = tyto_reshape(tyto_slice_axis(xw, 1, t, t + 1, 1), 2,
                                   (const int64_t[]){n, gu});
    /* The states start at zero: the first step has no h Wh. */
    tyto_tensor *hw = h ? tyto_matmul(h, wh, 0, 0) : NULL;
    switch (type) {
    case CELL_RNN: h = tyto_tanh(hw ? tyto_add(xt, hw) : xt); break;
    case CELL_LSTM: {
      tyto_tensor *z = hw ? tyto_add(xt, hw) : xt;
      tyto_tensor *i = tyto_sigmoid(gate(z, 0, units));
      tyto_tensor *fg = tyto_sigmoid(gate(z, 1, units));
      tyto_tensor *g = tyto_tanh(gate(z, 2, units));
      tyto_tensor *o = tyto_sigmoid(gate(z, 3, units));
      tyto_tensor *ig = tyto_mul(i, g);
      c = c ? tyto_add(tyto_mul(fg, c), ig) : ig;
      h = tyto_mul(o, tyto_tanh(c));
      break;
    }
    case CELL_GRU: {
      tyto_tensor *xz = gate(xt, 1, units), *xn = gate(xt, 2, units);
      if (!hw) {
        tyto_tensor *z = tyto_sigmoid(xz), *nn_ = tyto_tanh(xn);
        h = tyto_sub(nn_, tyto_mul(z, nn_)); /* (1 - z) n */
        break;
      }
      tyto_tensor *r =
          tyto_sigmoid(tyto_add(gate(xt, 0, units), gate(hw, 0, units)));
      tyto_tensor *z = tyto_sigmoid(tyto_add(xz, gate(hw, 1, units)));
      tyto_tensor *nn_ =
          tyto_tanh(tyto_add(xn, tyto_mul(r, gate(hw, 2, units))));
      /* (1 - z) n + z h = n + z (h - n) */
      h = tyto_add(nn_, tyto_mul(z, tyto_sub(h, nn_)));
      break;
    }
    }
    hs[t] = h;
  }
  tyto_tensor *y = return_sequences ? tyto_stack((int)steps, hs, 1) : h;
  free(hs);
  return y;
}

tyto_tensor *tyto_nn_rnn(tyto_nn *nn, const char *name, tyto_tensor *x,
                         int64_t units, int return_sequences) {
  return recurrent(nn, "rnn", name, x, units, return_sequences, CELL_RNN);
}

tyto_tensor *tyto_nn_lstm(tyto_nn *nn, const char *name, tyto_tensor *x,
                          int64_t units, int return_sequences) {
  return recurrent(nn, "lstm", name, x, units, return_sequences, CELL_LSTM);
}

tyto_tensor *tyto_nn_gru(tyto_nn *nn, const char *name, tyto_tensor *x,
                         int64_t units, int return_sequences) {
  return recurrent(nn, "gru", name, x, units, return_sequences, CELL_GRU);
}
