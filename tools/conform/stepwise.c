/*
 * FUSED programs against their instructions run one by one (see
 * stepwise.h).
 */
#include "stepwise.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "model.h"

#define OP(x) TYTO_PLUGIN_OP_##x

/* A value of the program: an input of the case (its tensor and bytes) or
 * a contiguous tensor of the outputs' shape computed on the device. */
typedef struct value {
  uint32_t dtype;
  const cf_tensor *input; /* an INPUT's tensor, else NULL */
  const void *bytes;      /* an INPUT's bytes */
  double *v;              /* a computed value, row-major over the shape */
} value;

static int arity(uint32_t op) {
  if (op >= OP(ADD) && op <= OP(GE))
    return 2;
  if (op == OP(WHERE) || op == OP(FMA))
    return 3;
  return 1;
}

/* The value of x at row-major position `flat` (index idx) of the shape. */
static double value_at(const value *x, const int64_t *idx, int64_t flat) {
  if (x->input)
    return cf_fmt_load(x->dtype, x->bytes, cf_layout_at(&x->input->l, idx));
  return x->v[flat];
}

/* Runs instruction i of c alone on d into vals[i]. */
static cf_verdict run_instr(cf_device *d, const cf_case *c, uint32_t i,
                            value *vals, const tyto_plugin_layout *shape,
                            char *msg, size_t size) {
  const tyto_plugin_fused_instr *x = &c->instrs[i];
  const int64_t n = cf_shape_count(shape->rank, shape->shape);
  cf_case *s = calloc(1, sizeof *s);
  const void *in[CF_MAX_IN] = {NULL};
  void *own[CF_MAX_IN] = {NULL}, *out = NULL;
  cf_verdict v = CF_V_PASS;
  cf_run r;
  if (s == NULL)
    return CF_V_ERROR;
  memset(&r, 0, sizeof r);
  s->op = x->op == TYTO_PLUGIN_FUSED_CONST ? OP(FILL) : x->op;
  s->op_name = cf_op_name(s->op) ? cf_op_name(s->op) : "?";
  s->dtype = vals[i].dtype;
  s->n_in = x->op == TYTO_PLUGIN_FUSED_CONST ? 0 : (uint32_t)arity(x->op);
  s->n_out = 1;
  if (x->op == TYTO_PLUGIN_FUSED_CONST || x->op == OP(LEAKY_RELU) ||
      x->op == OP(ELU)) {
    s->n_fattrs = 1;
    s->fattrs[0] = x->attr;
  }
  for (uint32_t k = 0; k < s->n_in && v == CF_V_PASS; k++) {
    const value *a = &vals[x->arg[k]];
    if (a->input) {
      s->in[k] = *a->input;
      in[k] = a->bytes;
      continue;
    }
    cf_tensor_set(&s->in[k], a->dtype, shape->rank, shape->shape, NULL, 0);
    in[k] = own[k] = malloc((size_t)(n ? n : 1) * cf_dtype_size(a->dtype));
    if (own[k] == NULL)
      v = CF_V_ERROR;
    for (int64_t j = 0; j < n && own[k]; j++)
      cf_fmt_store(a->dtype, own[k], j, a->v[j]);
  }
  cf_tensor_set(&s->out[0], s->dtype, shape->rank, shape->shape, NULL, 0);
  out = malloc((size_t)(n ? n : 1) * cf_dtype_size(s->dtype));
  if (out == NULL)
    v = CF_V_ERROR;
  for (int64_t j = 0; j < n && out; j++)
    cf_fmt_store(s->dtype, out, j, -777.0);
  if (v == CF_V_PASS) {
    const void *outs[1] = {out};
    cf_status st = cf_run_case(d, s, in, outs, &r);
    if (st != CF_RAN || r.oob) {
      snprintf(msg, size,
               "instruction %u (%s, %s) run alone as an op of its own: %.700s",
               (unsigned)i, s->op_name, cf_fmt_name(s->dtype),
               st != CF_RAN ? r.msg : r.oob_msg);
      v = st == CF_UNSUPPORTED ? CF_V_UNSUPPORTED
          : st == CF_FAILED    ? CF_V_ERROR
                               : CF_V_OOB;
    } else {
      vals[i].v = r.out[0];
      r.out[0] = NULL;
    }
  }
  cf_run_clear(&r);
  for (uint32_t k = 0; k < CF_MAX_IN; k++)
    free(own[k]);
  free(out);
  free(s);
  return v;
}

/* Compares output o of the fused run (whole storage got) with its value
 * bit for bit; returns the mismatches, the first described in msg. */
static int64_t compare_out(const cf_case *c, uint32_t o, const double *got,
                           const value *x, const value *vals, char *msg,
                           size_t size) {
  const tyto_plugin_layout *l = &c->out[o].l;
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0}, flat = 0, bad = 0;
  if (cf_shape_count(l->rank, l->shape) == 0)
    return 0;
  do {
    const double g = got[cf_layout_at(l, idx)], w = value_at(x, idx, flat);
    if (!cf_fmt_same(g, w) && bad++ == 0) {
      char args[200] = "";
      size_t n = 0;
      for (uint32_t i = 0; i < c->n_instrs && n < sizeof args; i++)
        if (c->instrs[i].op == TYTO_PLUGIN_FUSED_INPUT)
          n += (size_t)snprintf(args + n, sizeof args - n, "%s%.9g",
                                n ? ", " : "", value_at(&vals[i], idx, flat));
      snprintf(msg, size,
               "output %u element %lld (inputs %s): the program gives %.9g, "
               "its instructions one by one give %.9g (ops.md, FUSED: "
               "exactly what its ops give)",
               o, (long long)flat, args, g, w);
    }
    flat++;
  } while (cf_index_next(l->rank, l->shape, idx));
  return bad;
}

cf_verdict cf_stepwise_run(cf_device *d, cf_case *c,
                           const void *const *in_bytes,
                           const void *const *out_init, char *msg,
                           size_t size) {
  value vals[CF_MAX_INSTRS];
  char scratch[8];
  cf_run r;
  cf_verdict v = CF_V_PASS;
  int64_t bad = 0;
  msg[0] = '\0';
  memset(vals, 0, sizeof vals);
  cf_status st = cf_run_case(d, c, in_bytes, out_init, &r);
  if (st != CF_RAN) {
    snprintf(msg, size, "%s", r.msg);
    return st == CF_UNSUPPORTED ? CF_V_UNSUPPORTED : CF_V_ERROR;
  }
  if (r.oob) {
    snprintf(msg, size, "%s", r.oob_msg);
    cf_run_clear(&r);
    return CF_V_OOB;
  }
  /* Every value's dtype as <tyto/plugin.h> gives it, then the values. */
  for (uint32_t i = 0; i < c->n_instrs && v == CF_V_PASS; i++) {
    const tyto_plugin_fused_instr *x = &c->instrs[i];
    value *y = &vals[i];
    switch (x->op) {
    case TYTO_PLUGIN_FUSED_INPUT:
      y->input = &c->in[x->arg[0]];
      y->bytes = in_bytes[x->arg[0]];
      y->dtype = y->input->l.dtype;
      break;
    case TYTO_PLUGIN_FUSED_OUTPUT:
      /* The first mismatch of the first output that has one is told. */
      bad += compare_out(c, x->arg[1], r.out[x->arg[1]], &vals[x->arg[0]], vals,
                         bad ? scratch : msg, bad ? sizeof scratch : size);
      break;
    default:
      y->dtype = x->op == OP(CAST) || x->op == TYTO_PLUGIN_FUSED_CONST
                     ? x->dtype
                     : vals[x->arg[0]].dtype;
      v = run_instr(d, c, i, vals, &c->out[0].l, msg, size);
    }
  }
  if (v == CF_V_PASS && bad > 0) {
    size_t n = strlen(msg);
    snprintf(msg + n, size - n, " (%lld elements differ)", (long long)bad);
    v = CF_V_FAIL;
  }
  for (uint32_t i = 0; i < c->n_instrs; i++)
    free(vals[i].v);
  cf_run_clear(&r);
  return v;
}
