/* Networks: the registry of parameters and state, the state updates, the
 * mode, the initial values, and the checks the layers share. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/program.h>

#include "../graph/dtype.h"
#include "../graph/node.h"
#include "../runtime/error.h"
#include "nn_internal.h"

void tyto_nn_options_init(tyto_nn_options *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
  opts->dtype = TYTO_F32;
  opts->seed = 0;
  opts->mode = TYTO_NN_TRAIN;
  opts->sync_batch_norm = 0;
}

tyto_status tyto_nn_new(tyto_graph *g, const tyto_nn_options *opts,
                        tyto_nn **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_nn_new: out is NULL");
  *out = NULL;
  if (!g)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_nn_new: graph is NULL");
  tyto_nn_options o;
  tyto_nn_options_init(&o);
  if (opts) {
    size_t n = opts->struct_size;
    if (n < sizeof n)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "tyto_nn_new: opts->struct_size %zu is too small; call "
                     "tyto_nn_options_init() first",
                     n);
    memcpy(&o, opts, n < sizeof o ? n : sizeof o);
  }
  if (!dtype_info_of(o.dtype))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_nn_new: unknown dtype %d (expected TYTO_F32 or "
                   "TYTO_F64)",
                   (int)o.dtype);
  /* Initialisers and optimiser state compute on the host in the
   * parameters' dtype; mixed precision keeps f32 master weights instead. */
  if (!dtype_host_arith(o.dtype))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_nn_new: dtype %s is not supported for a network's "
                   "parameters (expected TYTO_F32 or TYTO_F64: initialisers "
                   "and optimiser state run in f32 or f64)",
                   tyto_dtype_name(o.dtype));
  if (o.mode != TYTO_NN_TRAIN && o.mode != TYTO_NN_EVAL)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_nn_new: mode %d is neither TYTO_NN_TRAIN nor "
                   "TYTO_NN_EVAL",
                   (int)o.mode);
  tyto_nn *nn = calloc(1, sizeof *nn);
  if (!nn)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "tyto_nn_new: out of memory");
  nn->g = g;
  nn->dtype = o.dtype;
  nn->seed = o.seed;
  nn->mode = o.mode;
  nn->sync_batch_norm = o.sync_batch_norm != 0;
  *out = nn;
  return TYTO_OK;
}

static void list_free(nn_list *l) {
  free(l->v);
  l->v = NULL;
  l->n = l->cap = 0;
}

void tyto_nn_free(tyto_nn *nn) {
  if (!nn)
    return;
  free(nn->entries);
  nameidx_free(&nn->by_name);
  nameidx_free(&nn->upd_by_name);
  list_free(&nn->params);
  list_free(&nn->weights);
  list_free(&nn->states);
  list_free(&nn->upd_params);
  list_free(&nn->upd_values);
  free(nn);
}

tyto_graph *tyto_nn_graph(const tyto_nn *nn) {
  return nn ? nn->g : NULL;
}

tyto_dtype tyto_nn_dtype(const tyto_nn *nn) {
  return nn ? nn->dtype : TYTO_F32;
}

void tyto_nn_set_mode(tyto_nn *nn, tyto_nn_mode mode) {
  if (nn && (mode == TYTO_NN_TRAIN || mode == TYTO_NN_EVAL))
    nn->mode = mode;
}

tyto_nn_mode tyto_nn_get_mode(const tyto_nn *nn) {
  return nn ? nn->mode : TYTO_NN_TRAIN;
}

static tyto_tensor *list_at(const nn_list *l, size_t i) {
  return i < l->n ? l->v[i] : NULL;
}

size_t tyto_nn_parameter_count(const tyto_nn *nn) {
  return nn ? nn->params.n : 0;
}

tyto_tensor *tyto_nn_parameter(const tyto_nn *nn, size_t i) {
  return nn ? list_at(&nn->params, i) : NULL;
}

tyto_tensor *const *tyto_nn_parameters(const tyto_nn *nn) {
  return nn ? nn->params.v : NULL;
}

size_t tyto_nn_weight_count(const tyto_nn *nn) {
  return nn ? nn->weights.n : 0;
}

tyto_tensor *tyto_nn_weight(const tyto_nn *nn, size_t i) {
  return nn ? list_at(&nn->weights, i) : NULL;
}

size_t tyto_nn_state_count(const tyto_nn *nn) {
  return nn ? nn->states.n : 0;
}

tyto_tensor *tyto_nn_state(const tyto_nn *nn, size_t i) {
  return nn ? list_at(&nn->states, i) : NULL;
}

size_t tyto_nn_update_count(const tyto_nn *nn) {
  return nn ? nn->upd_params.n : 0;
}

tyto_tensor *const *tyto_nn_update_params(const tyto_nn *nn) {
  return nn ? nn->upd_params.v : NULL;
}

tyto_tensor *const *tyto_nn_update_values(const tyto_nn *nn) {
  return nn ? nn->upd_values.v : NULL;
}

/* ---------------------------------------------------------------------- */
/* The registry                                                            */

static int list_push(nn_list *l, tyto_tensor *t) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    tyto_tensor **v = realloc(l->v, cap * sizeof *v);
    if (!v)
      return -1;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = t;
  return 0;
}

tyto_tensor *nn_fail(tyto_nn *nn, const char *kind, const char *name,
                     const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (name)
    return graph_fail(nn->g, "%s '%s': %s", kind, name, msg);
  return graph_fail(nn->g, "%s: %s", kind, msg);
}

int nn_check(tyto_nn *nn, const char *kind, const char *name, int flags,
             tyto_tensor *x, int min_rank, int max_rank, tyto_tensor **err) {
  *err = NULL;
  if (!nn) {
    /* No network: the input's graph, if any, carries the message. */
    if (x && x->kind != TYTO_KIND_ERROR)
      *err = graph_fail(x->graph, "%s: network is NULL", kind);
    else if (x)
      *err = x;
    return -1;
  }
  if (!x) {
    *err = nn_fail(nn, kind, name, "input is NULL");
    return -1;
  }
  if (x->kind == TYTO_KIND_ERROR) {
    *err = &nn->g->error;
    return -1;
  }
  if ((flags & NN_NAMED) && (!name || !*name)) {
    *err = nn_fail(nn, kind, NULL, "a layer needs a name");
    return -1;
  }
  if (x->graph != nn->g) {
    *err = nn_fail(nn, kind, name,
                   "input #%lld belongs to another graph than the network",
                   (long long)x->index);
    return -1;
  }
  char s[SHAPE_STR];
  if (x->dtype != nn->dtype && !((flags & NN_IDS) && dtype_is_int(x->dtype))) {
    *err = nn_fail(nn, kind, name, "x is %s%s, the network's dtype is %s",
                   tyto_dtype_name(x->dtype), nn_shape(s, x),
                   tyto_dtype_name(nn->dtype));
    return -1;
  }
  if (x->rank < min_rank || x->rank > max_rank) {
    if (min_rank == max_rank)
      *err = nn_fail(nn, kind, name, "x must have rank %d, got %s", min_rank,
                     nn_shape(s, x));
    else if (max_rank >= TYTO_MAX_RANK)
      *err = nn_fail(nn, kind, name, "x must have rank >= %d, got %s", min_rank,
                     nn_shape(s, x));
    else
      *err = nn_fail(nn, kind, name, "x must have a rank in [%d, %d], got %s",
                     min_rank, max_rank, nn_shape(s, x));
    return -1;
  }
  return 0;
}

int nn_check_layout(tyto_nn *nn, const char *kind, const char *name,
                    int need_name, tyto_tensor *x, int rank, const char *layout,
                    tyto_tensor **err) {
  if (nn_check(nn, kind, name, need_name, x, 0, TYTO_MAX_RANK, err) < 0)
    return -1;
  if (x->rank != rank) {
    char s[SHAPE_STR];
    *err = nn_fail(nn, kind, name, "x must have rank %d (%s), got %s", rank,
                   layout, nn_shape(s, x));
    return -1;
  }
  return 0;
}

int nn_init_check(tyto_nn *nn, const char *kind, const char *name,
                  const tyto_init *init) {
  if ((int)init->kind < (int)TYTO_INIT_DEFAULT ||
      (int)init->kind > (int)TYTO_INIT_LECUN_NORMAL) {
    nn_fail(nn, kind, name, "unknown initialiser %d", (int)init->kind);
    return -1;
  }
  /* The random op's own check, named after the initialiser. */
  if (init->kind == TYTO_INIT_UNIFORM || init->kind == TYTO_INIT_NORMAL) {
    int uniform = init->kind == TYTO_INIT_UNIFORM;
    char why[128];
    if (random_params_why(uniform ? TYTO_OP_RANDOM_UNIFORM
                                  : TYTO_OP_RANDOM_NORMAL,
                          init->a, init->b, why, sizeof why)) {
      nn_fail(nn, kind, name, "%s initialiser: %s",
              uniform ? "uniform" : "normal", why);
      return -1;
    }
  }
  if (!(isfinite(init->gain) && init->gain >= 0)) {
    nn_fail(nn, kind, name,
            "initialiser gain: expected a finite number >= 0, "
            "got %g",
            init->gain);
    return -1;
  }
  return 0;
}

/* Fans of a weight: [in, out] for rank 2; [O, I, k...] for convolutions
 * (fan_in I k, fan_out O k); a vector counts its length both ways. */
static void fans(int rank, const int64_t *shape, int64_t *fan_in,
                 int64_t *fan_out) {
  if (rank == 0) {
    *fan_in = *fan_out = 1;
  } else if (rank == 1) {
    *fan_in = *fan_out = shape[0];
  } else if (rank == 2) {
    *fan_in = shape[0];
    *fan_out = shape[1];
  } else {
    int64_t k = 1;
    for (int i = 2; i < rank; i++)
      k *= shape[i];
    *fan_in = shape[1] * k;
    *fan_out = shape[0] * k;
  }
}

static nn_entry *find_entry(const tyto_nn *nn, const tyto_tensor *t) {
  for (size_t i = 0; i < nn->n_entries; i++)
    if (nn->entries[i].t == t)
      return &nn->entries[i];
  return NULL;
}

tyto_tensor *nn_param(tyto_nn *nn, const char *kind, const char *layer,
                      const char *what, int rank, const int64_t *shape,
                      tyto_init init, tyto_init def, int state) {
  char name[256];
  int len = snprintf(name, sizeof name, "%s.%s", layer, what);
  if (len < 0 || (size_t)len >= sizeof name)
    return nn_fail(nn, kind, layer, "name too long");
  size_t at;
  if (nameidx_get(&nn->by_name, name, &at)) {
    tyto_tensor *t = nn->entries[at].t;
    int same = t->rank == rank;
    for (int k = 0; same && k < rank; k++)
      same = t->shape[k] == shape[k];
    if (!same) {
      char a[SHAPE_STR], b[SHAPE_STR];
      return nn_fail(nn, kind, layer,
                     "parameter '%s' exists with shape %s, this layer needs "
                     "%s; give the layer another name",
                     name, nn_shape(a, t), shape_str(b, rank, shape));
    }
    return t;
  }
  if (nn->n_entries == nn->cap_entries) {
    size_t cap = nn->cap_entries ? 2 * nn->cap_entries : 16;
    nn_entry *e = realloc(nn->entries, cap * sizeof *e);
    if (!e)
      return graph_oom(nn->g, kind);
    nn->entries = e;
    nn->cap_entries = cap;
  }
  tyto_tensor *t = tyto_parameter(nn->g, nn->dtype, rank, shape, name);
  if (t->kind == TYTO_KIND_ERROR)
    return t;
  nn_entry *e = &nn->entries[nn->n_entries];
  memset(e, 0, sizeof *e);
  e->t = t;
  e->init = init;
  if (init.kind == TYTO_INIT_DEFAULT) {
    e->init = def;
    if (init.gain != 0)
      e->init.gain = init.gain;
  }
  if (e->init.gain == 0)
    e->init.gain = 1;
  fans(rank, shape, &e->fan_in, &e->fan_out);
  e->state = state;
  nn_list *kindlist = state ? &nn->states : &nn->params;
  if (list_push(kindlist, t) < 0)
    return graph_oom(nn->g, kind);
  if (!state && rank >= 2 && list_push(&nn->weights, t) < 0) {
    kindlist->n--;
    return graph_oom(nn->g, kind);
  }
  if (nameidx_put(&nn->by_name, name, nn->n_entries) < 0) {
    kindlist->n--;
    if (!state && rank >= 2)
      nn->weights.n--;
    return graph_oom(nn->g, kind);
  }
  nn->n_entries++;
  return t;
}

int nn_add_update(tyto_nn *nn, tyto_tensor *param, tyto_tensor *value) {
  /* Parameters of one network have distinct names. */
  size_t at;
  if (nameidx_get(&nn->upd_by_name, param->name, &at)) {
    nn->upd_values.v[at] = value;
    return 0;
  }
  if (list_push(&nn->upd_params, param) < 0)
    return -1;
  if (list_push(&nn->upd_values, value) < 0 ||
      nameidx_put(&nn->upd_by_name, param->name, nn->upd_params.n - 1) < 0) {
    nn->upd_params.n--;
    if (nn->upd_values.n > nn->upd_params.n)
      nn->upd_values.n--;
    return -1;
  }
  return 0;
}

tyto_tensor *nn_step(tyto_nn *nn) {
  if (nn->step)
    return nn->step;
  tyto_init zeros = nn_init_of(TYTO_INIT_ZEROS);
  tyto_tensor *s =
      nn_param(nn, "dropout", "nn", "step", 0, NULL, zeros, zeros, 1);
  if (s->kind == TYTO_KIND_ERROR)
    return s;
  tyto_tensor *next = tyto_add_scalar(s, 1.0);
  if (next->kind == TYTO_KIND_ERROR)
    return next;
  if (nn_add_update(nn, s, next) < 0)
    return graph_oom(nn->g, "dropout");
  nn->step = s;
  return s;
}

/* ---------------------------------------------------------------------- */
/* Initial values                                                          */

tyto_status tyto_nn_initial_value(const tyto_nn *nn, const tyto_tensor *t,
                                  void *dst, size_t bytes) {
  if (!nn || !t || !dst)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_nn_initial_value: %s is NULL",
                   !nn  ? "nn"
                   : !t ? "tensor"
                        : "dst");
  const nn_entry *e = find_entry(nn, t);
  if (!e)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_nn_initial_value: tensor #%lld%s%s%s is not a "
                   "parameter or state of this network",
                   (long long)t->index, t->name ? " '" : "",
                   t->name ? t->name : "", t->name ? "'" : "");
  int64_t n = tyto_tensor_numel(t);
  size_t want = (size_t)n * tyto_dtype_size(nn->dtype);
  if (bytes != want)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_nn_initial_value: '%s' is %s with %lld elements "
                   "(%zu bytes), got %zu bytes",
                   t->name, tyto_dtype_name(nn->dtype), (long long)n, want,
                   bytes);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  if (!v)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                   "tyto_nn_initial_value: out of memory for '%s'", t->name);
  nn_init_fill(e, nn->seed, v, n);
  const dtype_info *di = dtype_info_of(nn->dtype);
  for (int64_t i = 0; i < n; i++)
    di->store(dst, (size_t)i, v[i]);
  free(v);
  return TYTO_OK;
}

tyto_status tyto_nn_initialize(const tyto_nn *nn, tyto_program *p) {
  if (!nn || !p)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_nn_initialize: %s is NULL",
                   nn ? "program" : "nn");
  size_t esize = tyto_dtype_size(nn->dtype), cap = 0;
  void *buf = NULL;
  tyto_status st = TYTO_OK;
  for (size_t i = 0; i < nn->n_entries && st == TYTO_OK; i++) {
    tyto_tensor *t = nn->entries[i].t;
    if (!tyto_program_uses(p, t)) /* every entry is a parameter */
      continue;
    size_t bytes = (size_t)tyto_tensor_numel(t) * esize;
    if (bytes > cap) {
      void *nb = realloc(buf, bytes);
      if (!nb) {
        st = rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                     "tyto_nn_initialize: out of memory for '%s'", t->name);
        break;
      }
      buf = nb;
      cap = bytes;
    }
    st = tyto_nn_initial_value(nn, t, buf, bytes);
    if (st == TYTO_OK)
      st = tyto_program_write_parameter(p, t, buf, bytes);
  }
  free(buf);
  return st;
}

tyto_tensor *tyto_nn_input(tyto_nn *nn, int rank, const int64_t *shape,
                           const char *name) {
  if (!nn)
    return NULL;
  return tyto_input(nn->g, nn->dtype, rank, shape, name);
}
