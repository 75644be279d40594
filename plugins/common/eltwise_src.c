/*
 * The element loop of elementwise kernels and fused programs written out
 * as source text (eltwise_plan.h), in the dialect OpenCL C and CUDA C++
 * share: programs of one dtype, and (ABI 1.5) programs whose values
 * differ in dtype, with the 16-bit dtypes held in float.
 */
#include "eltwise_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void tpc_elt_put_body(tpc_text *b, const tpc_instr *fi, uint32_t n,
                      const unsigned char *live, int pa_arg, uint32_t dtype,
                      tpc_literal_writer literal) {
  /* Every load first, then the arithmetic, then every store. */
  for (uint32_t i = 0; i < n; i++)
    if (live[i] && fi[i].op == TYTO_PLUGIN_FUSED_INPUT)
      tpc_text_put(b, "    T v%u = in%u[a%u];\n", (unsigned)i,
                   (unsigned)fi[i].arg[0], (unsigned)fi[i].arg[0]);
  for (uint32_t i = 0; i < n; i++) {
    const tpc_instr *x = &fi[i];
    if (!live[i] || x->op == TYTO_PLUGIN_FUSED_INPUT ||
        x->op == TYTO_PLUGIN_FUSED_OUTPUT)
      continue;
    tpc_text_put(b, "    T v%u = ", (unsigned)i);
    if (x->op == TYTO_PLUGIN_FUSED_CONST) {
      literal(b, dtype, x->attr);
      tpc_text_put(b, ";\n");
      continue;
    }
    const tpc_eltop *o = tpc_eltop_find(x->op);
    tpc_text_put(b, "te_%s(", tpc_op_name(x->op));
    for (int k = 0; k < o->arity; k++)
      tpc_text_put(b, "%sv%u", k > 0 ? ", " : "", (unsigned)x->arg[k]);
    if (tpc_eltop_has_param(x->op)) {
      tpc_text_put(b, ", ");
      if (pa_arg)
        tpc_text_put(b, "pa");
      else
        literal(b, dtype, x->attr);
    }
    tpc_text_put(b, ");\n");
  }
  for (uint32_t i = 0; i < n; i++)
    if (fi[i].op == TYTO_PLUGIN_FUSED_OUTPUT)
      tpc_text_put(b, "    out%u[b%u] = v%u;\n", (unsigned)fi[i].arg[1],
                   (unsigned)fi[i].arg[1], (unsigned)fi[i].arg[0]);
}

/* ---- typed programs ------------------------------------------------------ */

static int is16(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F16 || dtype == TYTO_PLUGIN_DTYPE_BF16;
}

uint32_t tpc_compute_dtype(uint32_t dtype) {
  return is16(dtype) ? TYTO_PLUGIN_DTYPE_F32 : dtype;
}

const char *tpc_compute_type(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F64 ? "double" : "float";
}

/* The text the callbacks write, taken out of b again: they append, and
 * the generator needs some of it as an argument of another callback. */
static void put_name(char *buf, size_t size, const char *prefix, uint32_t i) {
  snprintf(buf, size, "%s%u", prefix, (unsigned)i);
}

void tpc_elt_put_body_typed(tpc_text *b, const tpc_instr *fi, uint32_t n,
                            const unsigned char *live, int pa_arg,
                            const tpc_elt_dialect *dl) {
  /* read[i]: an instruction other than an OUTPUT reads value i, so a
   * 16-bit op result is rounded where it is defined (an OUTPUT's store
   * rounds on its own). */
  unsigned char *read = calloc(n > 0 ? n : 1, 1);
  if (read == NULL) {
    b->failed = 1;
    return;
  }
  for (uint32_t i = 0; i < n; i++)
    if (live[i] && fi[i].op != TYTO_PLUGIN_FUSED_OUTPUT)
      for (int k = 0; k < tpc_fused_arity(fi[i].op); k++)
        read[fi[i].arg[k]] = 1;
  char ptr[32], idx[32], val[32];
  for (uint32_t i = 0; i < n; i++)
    if (live[i] && fi[i].op == TYTO_PLUGIN_FUSED_INPUT) {
      put_name(ptr, sizeof ptr, "in", fi[i].arg[0]);
      put_name(idx, sizeof idx, "a", fi[i].arg[0]);
      tpc_text_put(b, "    %s v%u = ", tpc_compute_type(fi[i].dtype),
                   (unsigned)i);
      dl->load(b, fi[i].dtype, ptr, idx);
      tpc_text_put(b, ";\n");
    }
  for (uint32_t i = 0; i < n; i++) {
    const tpc_instr *x = &fi[i];
    if (!live[i] || x->op == TYTO_PLUGIN_FUSED_INPUT ||
        x->op == TYTO_PLUGIN_FUSED_OUTPUT)
      continue;
    const char *type = tpc_compute_type(x->dtype);
    tpc_text_put(b, "    %s v%u = ", type, (unsigned)i);
    if (x->op == TYTO_PLUGIN_FUSED_CONST) {
      dl->literal(b, x->dtype, x->attr);
    } else if (x->op == TYTO_PLUGIN_OP_CAST) {
      uint32_t from = fi[x->arg[0]].dtype;
      put_name(val, sizeof val, "v", x->arg[0]);
      if (is16(x->dtype) && from != x->dtype)
        dl->round(b, from, x->dtype, val);
      else if (strcmp(tpc_compute_type(from), type) != 0)
        tpc_text_put(b, "(%s)%s", type, val);
      else
        tpc_text_put(b, "%s", val);
    } else {
      /* The call, then (when read and 16-bit) the same text rounded. */
      tpc_text call = {0};
      const tpc_eltop *o = tpc_eltop_find(x->op);
      tpc_text_put(&call, "te_%s_%s(", tpc_op_name(x->op), type);
      for (int k = 0; k < o->arity; k++)
        tpc_text_put(&call, "%sv%u", k > 0 ? ", " : "", (unsigned)x->arg[k]);
      if (tpc_eltop_has_param(x->op)) {
        tpc_text_put(&call, ", ");
        if (pa_arg)
          tpc_text_put(&call, "pa");
        else
          dl->literal(&call, tpc_compute_dtype(x->dtype), x->attr);
      }
      tpc_text_put(&call, ")");
      char *text = tpc_text_take(&call);
      if (text == NULL)
        b->failed = 1;
      else if (is16(x->dtype) && read[i])
        dl->round(b, x->dtype, x->dtype, text);
      else
        tpc_text_put(b, "%s", text);
      free(text);
    }
    tpc_text_put(b, ";\n");
  }
  for (uint32_t i = 0; i < n; i++)
    if (fi[i].op == TYTO_PLUGIN_FUSED_OUTPUT) {
      put_name(ptr, sizeof ptr, "out", fi[i].arg[1]);
      put_name(idx, sizeof idx, "b", fi[i].arg[1]);
      put_name(val, sizeof val, "v", fi[i].arg[0]);
      tpc_text_put(b, "    ");
      dl->store(b, fi[i].dtype, ptr, idx, val);
      tpc_text_put(b, "\n");
    }
  free(read);
}

/* The op's expression with every identifier T replaced by type. */
static void put_expr(tpc_text *b, const char *expr, const char *type) {
  const char *s = expr;
  while (*s != '\0') {
    if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_') {
      const char *e = s;
      while ((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') ||
             (*e >= '0' && *e <= '9') || *e == '_')
        e++;
      if (e - s == 1 && *s == 'T')
        tpc_text_put(b, "%s", type);
      else
        tpc_text_put(b, "%.*s", (int)(e - s), s);
      s = e;
    } else if (*s >= '0' && *s <= '9') {
      /* A number: its suffixes are not identifiers. */
      const char *e = s;
      while ((*e >= '0' && *e <= '9') || (*e >= 'a' && *e <= 'z') ||
             (*e >= 'A' && *e <= 'Z') || *e == '.' || *e == '_')
        e++;
      tpc_text_put(b, "%.*s", (int)(e - s), s);
      s = e;
    } else {
      tpc_text_put(b, "%c", *s++);
    }
  }
}

void tpc_elt_put_helper(tpc_text *b, uint32_t op, uint32_t dtype,
                        const char *prefix) {
  const tpc_eltop *o = tpc_eltop_find(op);
  if (o == NULL)
    return;
  const char *t = tpc_compute_type(dtype);
  static const char *const names[] = {"x", "y", "z"};
  tpc_text_put(b, "%s%s te_%s_%s(", prefix, t, tpc_op_name(op), t);
  for (int k = 0; k < o->arity; k++)
    tpc_text_put(b, "%s%s %s", k > 0 ? ", " : "", t, names[k]);
  if (tpc_eltop_has_param(op))
    tpc_text_put(b, ", %s pa", t);
  tpc_text_put(b, ") { return ");
  put_expr(b, o->expr, t);
  tpc_text_put(b, "; }\n");
}

void tpc_elt_put_helpers(tpc_text *b, const tpc_instr *fi, uint32_t n,
                         const unsigned char *live, const char *prefix) {
  size_t n_ops;
  const tpc_eltop *ops = tpc_eltops(&n_ops);
  /* used[op index][0: float, 1: double] */
  unsigned char(*used)[2] = calloc(n_ops, sizeof *used);
  if (used == NULL) {
    b->failed = 1;
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    const tpc_eltop *o = tpc_eltop_find(fi[i].op);
    if (live[i] && o != NULL)
      used[o - ops][fi[i].dtype == TYTO_PLUGIN_DTYPE_F64] = 1;
  }
  for (size_t k = 0; k < n_ops; k++)
    for (int d = 0; d < 2; d++)
      if (used[k][d])
        tpc_elt_put_helper(b, ops[k].op,
                           d ? TYTO_PLUGIN_DTYPE_F64 : TYTO_PLUGIN_DTYPE_F32,
                           prefix);
  free(used);
}
