/* Training optimisers (see <tyto/optim.h>): options and their defaults,
 * names, validation, the build that strings accumulation, clipping, the
 * schedule and the update rule together, and the accessors. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../graph/node.h"
#include "../runtime/error.h"
#include "../runtime/nameidx.h"
#include "optim_internal.h"

/* ---------------------------------------------------------------------- */
/* Options and names                                                       */

void tyto_optim_options_init(tyto_optim_options *opts, tyto_optim_kind kind) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
  opts->kind = kind;
  int adam = kind == TYTO_OPTIM_ADAM || kind == TYTO_OPTIM_ADAMW;
  /* PyTorch 1.13's defaults. */
  opts->lr = adam ? 1e-3 : 1e-2;
  opts->weight_decay = kind == TYTO_OPTIM_ADAMW ? 1e-2 : 0.0;
  opts->beta1 = 0.9;
  opts->beta2 = 0.999;
  opts->alpha = 0.99;
  opts->eps = kind == TYTO_OPTIM_ADAGRAD ? 1e-10 : 1e-8;
  opts->schedule = TYTO_SCHEDULE_CONSTANT;
  opts->gamma = 0.1;
  opts->accumulate = 1;
}

static const char *const kind_names[] = {"sgd", "adagrad", "rmsprop", "adam",
                                         "adamw"};
static const char *const schedule_names[] = {"constant", "step", "exponential",
                                             "cosine"};
#define N_KINDS (sizeof kind_names / sizeof kind_names[0])
#define N_SCHEDULES (sizeof schedule_names / sizeof schedule_names[0])

const char *tyto_optim_kind_name(tyto_optim_kind kind) {
  return (unsigned)kind < N_KINDS ? kind_names[kind] : "?";
}

int tyto_optim_kind_from_name(const char *name) {
  for (size_t i = 0; name && i < N_KINDS; i++)
    if (strcmp(name, kind_names[i]) == 0)
      return (int)i;
  return -1;
}

const char *tyto_schedule_name(tyto_schedule_kind kind) {
  return (unsigned)kind < N_SCHEDULES ? schedule_names[kind] : "?";
}

int tyto_schedule_from_name(const char *name) {
  for (size_t i = 0; name && i < N_SCHEDULES; i++)
    if (strcmp(name, schedule_names[i]) == 0)
      return (int)i;
  return -1;
}

/* ---------------------------------------------------------------------- */
/* Validation: everything is checked before the graph is touched           */

#define BAD(...) rt_fail(TYTO_ERR_INVALID_ARGUMENT, "optim: " __VA_ARGS__)

/* *out = the caller's options over the defaults of its kind, so that a
 * caller compiled against a shorter struct gets defaults for the rest. */
static tyto_status load_options(const tyto_optim_options *in,
                                tyto_optim_options *out) {
  size_t need = offsetof(tyto_optim_options, kind) + sizeof in->kind;
  if (in->struct_size < need)
    return BAD("options struct_size %zu is too small (fill the options with "
               "tyto_optim_options_init())",
               in->struct_size);
  if ((unsigned)in->kind >= N_KINDS)
    return BAD("unknown optimiser kind %d (expected 0 to %d)", (int)in->kind,
               (int)N_KINDS - 1);
  tyto_optim_options_init(out, in->kind);
  size_t size = in->struct_size < sizeof *out ? in->struct_size : sizeof *out;
  memcpy(out, in, size);
  out->struct_size = sizeof *out;
  return TYTO_OK;
}

static int finite_ge0(double x) {
  return isfinite(x) && x >= 0.0;
}

static int in_01(double x) { /* [0, 1) */
  return isfinite(x) && x >= 0.0 && x < 1.0;
}

static tyto_status check_options(const tyto_optim_options *o) {
  const char *kind = kind_names[o->kind];
  int sgd = o->kind == TYTO_OPTIM_SGD;
  int adam = o->kind == TYTO_OPTIM_ADAM || o->kind == TYTO_OPTIM_ADAMW;
  if (!(isfinite(o->lr) && o->lr > 0.0))
    return BAD("lr must be positive and finite, got %g", o->lr);
  if (!finite_ge0(o->momentum))
    return BAD("momentum must be >= 0 and finite, got %g", o->momentum);
  if (!sgd && (o->momentum != 0.0 || o->nesterov))
    return BAD("momentum and nesterov apply to sgd only, not %s", kind);
  if (o->nesterov && o->momentum == 0.0)
    return BAD("nesterov needs momentum > 0");
  /* A field that the chosen kind or schedule does not read must keep its
   * default: a value set there would be silently ignored. */
  tyto_optim_options d;
  tyto_optim_options_init(&d, o->kind);
  if (!adam && (o->beta1 != d.beta1 || o->beta2 != d.beta2))
    return BAD("beta1 and beta2 apply to adam and adamw only, not %s", kind);
  if (o->kind != TYTO_OPTIM_RMSPROP && o->alpha != d.alpha)
    return BAD("alpha applies to rmsprop only, not %s", kind);
  if (sgd && o->eps != d.eps)
    return BAD("eps applies to adagrad, rmsprop, adam and adamw, not sgd");
  const char *sched =
      (unsigned)o->schedule < N_SCHEDULES ? schedule_names[o->schedule] : "?";
  if (o->schedule != TYTO_SCHEDULE_STEP &&
      o->schedule != TYTO_SCHEDULE_EXPONENTIAL && o->gamma != d.gamma)
    return BAD("gamma applies to the step and exponential schedules only, "
               "not %s",
               sched);
  if (o->schedule != TYTO_SCHEDULE_STEP && o->step_size != d.step_size)
    return BAD("step_size applies to the step schedule only, not %s", sched);
  if (o->schedule != TYTO_SCHEDULE_COSINE &&
      (o->total_steps != d.total_steps || o->min_lr != d.min_lr))
    return BAD("total_steps and min_lr apply to the cosine schedule only, "
               "not %s",
               sched);
  if (!finite_ge0(o->weight_decay))
    return BAD("weight_decay must be >= 0 and finite, got %g", o->weight_decay);
  if (adam && !in_01(o->beta1))
    return BAD("beta1 must be in [0, 1), got %g", o->beta1);
  if (adam && !in_01(o->beta2))
    return BAD("beta2 must be in [0, 1), got %g", o->beta2);
  if (o->kind == TYTO_OPTIM_RMSPROP &&
      !(isfinite(o->alpha) && o->alpha >= 0.0 && o->alpha <= 1.0))
    return BAD("alpha must be in [0, 1], got %g", o->alpha);
  if (!sgd && !finite_ge0(o->eps))
    return BAD("eps must be >= 0 and finite, got %g", o->eps);
  switch (o->schedule) {
  case TYTO_SCHEDULE_CONSTANT: break;
  case TYTO_SCHEDULE_STEP:
  case TYTO_SCHEDULE_EXPONENTIAL:
    if (o->schedule == TYTO_SCHEDULE_STEP && o->step_size < 1)
      return BAD("step schedule needs step_size >= 1, got %lld",
                 (long long)o->step_size);
    if (!(isfinite(o->gamma) && o->gamma > 0.0))
      return BAD("%s schedule needs gamma positive and finite, got %g",
                 schedule_names[o->schedule], o->gamma);
    break;
  case TYTO_SCHEDULE_COSINE:
    if (o->total_steps < 1)
      return BAD("cosine schedule needs total_steps >= 1, got %lld",
                 (long long)o->total_steps);
    if (!(finite_ge0(o->min_lr) && o->min_lr <= o->lr))
      return BAD("cosine schedule needs min_lr in [0, lr = %g], got %g", o->lr,
                 o->min_lr);
    break;
  default:
    return BAD("unknown schedule %d (expected 0 to %d)", (int)o->schedule,
               (int)N_SCHEDULES - 1);
  }
  if (o->warmup_steps < 0)
    return BAD("warmup_steps must be >= 0, got %lld",
               (long long)o->warmup_steps);
  if (!finite_ge0(o->clip_value))
    return BAD("clip_value must be >= 0 and finite (0: off), got %g",
               o->clip_value);
  if (!finite_ge0(o->clip_norm))
    return BAD("clip_norm must be >= 0 and finite (0: off), got %g",
               o->clip_norm);
  if (o->accumulate < 1)
    return BAD("accumulate must be >= 1, got %lld", (long long)o->accumulate);
  /* The micro-step counter is a tensor of the parameters' dtype: one
   * limit for both, f32's (it counts every whole number only up to 2^24;
   * f64 would reach 2^53). */
  if (o->accumulate > (INT64_C(1) << 24))
    return BAD("accumulate must be at most 2^24 (16777216), got %lld",
               (long long)o->accumulate);
  return TYTO_OK;
}

static void shape_str(char *buf, size_t cap, const tyto_tensor *t) {
  size_t len =
      (size_t)snprintf(buf, cap, "%s[", tyto_dtype_name(tyto_tensor_dtype(t)));
  for (int i = 0; i < tyto_tensor_rank(t) && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? "," : "",
                            (long long)tyto_tensor_dim(t, i));
  if (len < cap)
    snprintf(buf + len, cap - len, "]");
}

static int same_shape(const tyto_tensor *a, const tyto_tensor *b) {
  int r = tyto_tensor_rank(a);
  return r == tyto_tensor_rank(b) &&
         (r == 0 || memcmp(tyto_tensor_shape(a), tyto_tensor_shape(b),
                           (size_t)r * sizeof(int64_t)) == 0);
}

static tyto_status check_tensors_in(size_t n, tyto_tensor *const *params,
                                    tyto_tensor *const *grads, nameidx *names) {
  tyto_graph *g = tyto_tensor_graph(params[0]);
  tyto_dtype dt = tyto_tensor_dtype(params[0]);
  for (size_t i = 0; i < n; i++) {
    tyto_tensor *p = params[i];
    if (!p)
      return BAD("params[%zu] is NULL", i);
    const char *name = tyto_tensor_name(p);
    if (tyto_tensor_graph(p) != g)
      return BAD("params[%zu] belongs to another graph than params[0]", i);
    if (tyto_tensor_kind(p) != TYTO_KIND_PARAMETER)
      return BAD("params[%zu] ('%s') is not a parameter (kind %s)", i,
                 name ? name : "", tyto_kind_name(tyto_tensor_kind(p)));
    if (!name || !*name)
      return BAD("params[%zu] has no name; the optimiser's state is named "
                 "after it (tyto_tensor_set_name())",
                 i);
    if (tyto_tensor_dtype(p) != dt)
      return BAD("params[%zu] ('%s') is %s but params[0] is %s: one dtype "
                 "per optimiser",
                 i, name, tyto_dtype_name(tyto_tensor_dtype(p)),
                 tyto_dtype_name(dt));
    if (tyto_dtype_is_integer(dt))
      return BAD("params[%zu] ('%s') is %s; an optimiser trains "
                 "floating-point parameters",
                 i, name, tyto_dtype_name(dt));
    /* Its step counter and state take the parameters' dtype: in bf16 the
     * counter stops at 256 (f16: 2048), and the state loses what Adam's
     * moments need. */
    if (dt != TYTO_F32 && dt != TYTO_F64)
      return BAD("params[%zu] ('%s') is %s; an optimiser trains f32 or f64 "
                 "parameters (train a 16-bit model with mixed precision: f32 "
                 "master weights, docs/precision.md)",
                 i, name, tyto_dtype_name(dt));
    /* Names indexed: a model of many thousand layers is checked in time
     * linear in its parameters. The same tensor twice has one name. */
    size_t j;
    if (nameidx_get(names, name, &j))
      return params[j] == p
                 ? BAD("params[%zu] ('%s') is params[%zu] again", i, name, j)
                 : BAD("params[%zu] and params[%zu] are both named '%s'", j, i,
                       name);
    if (nameidx_put(names, name, i) < 0)
      return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "optim: out of memory");
    tyto_tensor *gr = grads[i];
    if (!gr)
      continue;
    if (tyto_tensor_graph(gr) != g)
      return BAD("the gradient of '%s' (grads[%zu]) belongs to another graph",
                 name, i);
    if (tyto_tensor_is_error(gr))
      return BAD("the gradient of '%s' (grads[%zu]) is the error tensor: %s",
                 name, i, tyto_graph_error_message(g));
    if (tyto_tensor_dtype(gr) != dt || !same_shape(gr, p)) {
      char a[160], b[160];
      shape_str(a, sizeof a, gr);
      shape_str(b, sizeof b, p);
      return BAD("the gradient of '%s' (grads[%zu]) is %s, expected %s as "
                 "the parameter",
                 name, i, a, b);
    }
  }
  if (tyto_graph_status(g) != TYTO_OK)
    return BAD("graph is in error: %s", tyto_graph_error_message(g));
  return TYTO_OK;
}

static tyto_status check_tensors(size_t n, tyto_tensor *const *params,
                                 tyto_tensor *const *grads) {
  nameidx names = {0};
  tyto_status st = check_tensors_in(n, params, grads, &names);
  nameidx_free(&names);
  return st;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether `name` is one of the state names the build will make. sorted:
 * the names of the parameters that get state, sorted; buf: scratch of at
 * least strlen(name) + 1. */
static int planned(const tyto_optim_options *o, const char *name,
                   const char **sorted, size_t n_sorted, char *buf) {
  if (strcmp(name, "optim.step") == 0 ||
      (o->accumulate > 1 && strcmp(name, "optim.micro") == 0))
    return 1;
  size_t len = strlen(name), n_rule = optim_rule_state_count(o);
  for (size_t i = 0; i <= n_rule; i++) {
    const char *suffix = i < n_rule ? optim_rule_state_suffix(o, i)
                                    : (o->accumulate > 1 ? ".acc" : NULL);
    size_t sl = suffix ? strlen(suffix) : 0;
    if (!suffix || len <= sl || strcmp(name + len - sl, suffix) != 0)
      continue;
    memcpy(buf, name, len - sl);
    buf[len - sl] = '\0';
    const char *key = buf;
    if (bsearch(&key, sorted, n_sorted, sizeof *sorted, by_name))
      return 1;
  }
  return 0;
}

/* The state names must not be taken by parameters of the graph already
 * (a checkpoint would confuse them; a second optimiser on one graph). */
static tyto_status check_names(const tyto_optim_options *o, size_t n,
                               tyto_tensor *const *params,
                               tyto_tensor *const *grads) {
  tyto_graph *g = tyto_tensor_graph(params[0]);
  const char **sorted = malloc(n * sizeof *sorted);
  size_t n_sorted = 0, longest = 0;
  if (!sorted)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "optim: out of memory");
  for (size_t i = 0; i < n; i++)
    if (grads[i])
      sorted[n_sorted++] = tyto_tensor_name(params[i]);
  qsort(sorted, n_sorted, sizeof *sorted, by_name);
  for (size_t i = 0, size = tyto_graph_size(g); i < size; i++) {
    const char *name = tyto_tensor_name(tyto_graph_tensor(g, i));
    if (name && strlen(name) > longest)
      longest = strlen(name);
  }
  char *buf = malloc(longest + 1);
  tyto_status st =
      buf ? TYTO_OK : rt_fail(TYTO_ERR_OUT_OF_MEMORY, "optim: out of memory");
  for (size_t i = 0, size = tyto_graph_size(g); st == TYTO_OK && i < size;
       i++) {
    tyto_tensor *t = tyto_graph_tensor(g, i);
    const char *name = tyto_tensor_name(t);
    if (tyto_tensor_kind(t) == TYTO_KIND_PARAMETER && name &&
        planned(o, name, sorted, n_sorted, buf))
      st = BAD("the graph already has a parameter named '%s', a name this "
               "optimiser's state needs (one optimiser per graph; rename the "
               "parameter)",
               name);
  }
  free(buf);
  free(sorted);
  return st;
}

/* ---------------------------------------------------------------------- */
/* Building                                                                */

tyto_tensor *optim_state_new(optim_build *b, tyto_tensor *p,
                             const char *suffix) {
  const char *base = p ? tyto_tensor_name(p) : "";
  size_t need = strlen(base) + strlen(suffix) + 1;
  tyto_tensor *s;
  if (need > b->name_cap) {
    char *grown = realloc(b->name, need);
    if (!grown)
      return graph_oom(b->g, "optim");
    b->name = grown;
    b->name_cap = need;
  }
  memcpy(b->name, base, strlen(base));
  memcpy(b->name + strlen(base), suffix, strlen(suffix) + 1);
  if (p)
    s = tyto_parameter(b->g, b->dtype, tyto_tensor_rank(p),
                       tyto_tensor_shape(p), b->name);
  else
    s = tyto_parameter(b->g, b->dtype, 0, NULL, b->name);
  /* The arrays were sized for every state before building. */
  if (b->o->n_state < b->o->cap_state)
    b->o->state[b->o->n_state++] = s;
  else
    graph_fail(b->g, "optim: internal error: more state than planned");
  return s;
}

void optim_update(optim_build *b, tyto_tensor *param, tyto_tensor *value,
                  int always) {
  tyto_optim *o = b->o;
  if (b->apply && !always)
    value = tyto_where(b->apply, value, param);
  if (o->n_updates < o->cap_updates) {
    o->update_params[o->n_updates] = param;
    o->update_values[o->n_updates++] = value;
  } else {
    graph_fail(b->g, "optim: internal error: more updates than planned");
  }
}

void tyto_optim_free(tyto_optim *o) {
  if (!o)
    return;
  free(o->update_params);
  free(o->update_values);
  free(o->state);
  free(o);
}

/* The optimiser with arrays for everything the build will record. */
static tyto_optim *optim_alloc(const tyto_optim_options *opts, size_t n,
                               tyto_tensor *const *grads) {
  size_t with_grad = 0;
  for (size_t i = 0; i < n; i++)
    with_grad += grads[i] != NULL;
  size_t per = optim_rule_state_count(opts) + (opts->accumulate > 1);
  tyto_optim *o = calloc(1, sizeof *o);
  if (!o)
    return NULL;
  o->opts = *opts;
  o->cap_state = with_grad * per + 2;
  o->cap_updates = with_grad * (per + 1) + 2;
  o->state = malloc(o->cap_state * sizeof *o->state);
  o->update_params = malloc(o->cap_updates * sizeof *o->update_params);
  o->update_values = malloc(o->cap_updates * sizeof *o->update_values);
  if (!o->state || !o->update_params || !o->update_values) {
    tyto_optim_free(o);
    return NULL;
  }
  return o;
}

static void build(optim_build *b, size_t n, tyto_tensor *const *params,
                  tyto_tensor **grads) {
  tyto_optim *o = b->o;
  b->step = optim_state_new(b, NULL, "optim.step");
  o->step = b->step;
  b->k = tyto_add_scalar(b->step, 1.0);
  b->lr = optim_schedule_lr(b);
  o->lr = b->lr;
  optim_accumulate(b, n, params, grads);
  optim_clip(b, n, grads);
  optim_rule_prepare(b);
  /* Each parameter's state and update live on the parameter's device
   * (a model split by layers keeps its optimiser split the same way). */
  int scope = tyto_graph_device_scope(b->g);
  for (size_t i = 0; i < n; i++)
    if (grads[i]) {
      int pin = tyto_tensor_device(params[i]);
      tyto_graph_set_device_scope(b->g, pin >= 0 ? pin : scope);
      optim_rule_apply(b, params[i], grads[i]);
    }
  tyto_graph_set_device_scope(b->g, scope);
  /* The counter advances only on the runs that apply an update. */
  tyto_tensor *next = b->apply ? tyto_add(b->step, b->apply) : b->k;
  optim_update(b, b->step, next, 1);
}

tyto_status tyto_optim_build(const tyto_optim_options *opts, size_t n,
                             tyto_tensor *const *params,
                             tyto_tensor *const *grads, tyto_optim **out) {
  if (!out)
    return BAD("out is NULL");
  *out = NULL;
  if (!opts)
    return BAD("opts is NULL");
  tyto_optim_options o;
  tyto_status st = load_options(opts, &o);
  if (st == TYTO_OK)
    st = check_options(&o);
  if (st != TYTO_OK)
    return st;
  if (n == 0 || !params || !grads)
    return BAD("needs n >= 1 parameters and their gradients (n is %zu, "
               "params %s, grads %s)",
               n, params ? "set" : "NULL", grads ? "set" : "NULL");
  if (!params[0])
    return BAD("params[0] is NULL");
  if ((st = check_tensors(n, params, grads)) != TYTO_OK ||
      (st = check_names(&o, n, params, grads)) != TYTO_OK)
    return st;

  tyto_graph *g = tyto_tensor_graph(params[0]);
  tyto_tensor **gs = malloc(n * sizeof *gs);
  tyto_optim *opt = optim_alloc(&o, n, grads);
  if (!gs || !opt) {
    free(gs);
    tyto_optim_free(opt);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "optim: out of memory");
  }
  memcpy(gs, grads, n * sizeof *gs);
  optim_build b = {.o = opt,
                   .g = g,
                   .dtype = tyto_tensor_dtype(params[0]),
                   .opts = &opt->opts};
  size_t n0 = tyto_graph_size(g);
  build(&b, n, params, gs);
  free(gs);
  free(b.name);
  st = tyto_graph_status(g);
  if (st != TYTO_OK) {
    /* Undo: drop the tensors built (their arena memory stays until the
     * graph is freed) and clear the status, which was TYTO_OK. */
    st = rt_fail(st, "optim: %s", g->message);
    g->n_nodes = n0;
    g->status = TYTO_OK;
    g->message[0] = '\0';
    tyto_optim_free(opt);
    return st;
  }
  *out = opt;
  return TYTO_OK;
}

/* ---------------------------------------------------------------------- */
/* Accessors                                                               */

size_t tyto_optim_update_count(const tyto_optim *o) {
  return o ? o->n_updates : 0;
}

tyto_tensor *const *tyto_optim_update_params(const tyto_optim *o) {
  return o ? o->update_params : NULL;
}

tyto_tensor *const *tyto_optim_update_values(const tyto_optim *o) {
  return o ? o->update_values : NULL;
}

size_t tyto_optim_state_count(const tyto_optim *o) {
  return o ? o->n_state : 0;
}

tyto_tensor *tyto_optim_state(const tyto_optim *o, size_t i) {
  return o && i < o->n_state ? o->state[i] : NULL;
}

tyto_tensor *tyto_optim_step(const tyto_optim *o) {
  return o ? o->step : NULL;
}

tyto_tensor *tyto_optim_lr(const tyto_optim *o) {
  return o ? o->lr : NULL;
}

tyto_tensor *tyto_optim_grad_norm(const tyto_optim *o) {
  return o ? o->grad_norm : NULL;
}
