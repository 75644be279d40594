/*
 * Catalogue cases of FUSED (see catalogue_int.h): three programs in the
 * row's dtype over the elementwise layouts and every combination of the
 * special values, and (ABI 1.5) programs that convert between dtypes with
 * CAST instructions.
 *
 * How they are checked. In f32 and f64 a program's layouts are compared
 * with the reference and its special values with the host model, as any
 * op's; one more case runs the special values against the program's own
 * instructions run one by one on the device, bit for bit (ops.md: a
 * program gives exactly what its ops run one by one give). In f16 and
 * bf16, and for every program that converts, all cases are compared that
 * way (CF_EXPECT_STEPWISE): every instruction rounds to its 16-bit dtype,
 * and where two devices' f32 results fall on either side of a rounding
 * boundary, the one-ulp difference is amplified by the instructions after
 * it (a - tanh(b) where a is close to tanh(b)) beyond any tolerance the
 * formats give. The instructions are held to ops.md by their own cases.
 */
#include "catalogue_int.h"

#include <stdio.h>
#include <string.h>

#define OP(x) TYTO_PLUGIN_OP_##x
#define DT(x) TYTO_PLUGIN_DTYPE_##x

/* Appends an instruction whose CONST or CAST has dtype dt. */
static void instr_dt(cf_case *c, uint32_t op, uint32_t a0, uint32_t a1,
                     uint32_t a2, double attr, uint32_t dt) {
  tyto_plugin_fused_instr *x = &c->instrs[c->n_instrs++];
  x->struct_size = sizeof *x;
  x->op = op;
  x->arg[0] = a0;
  x->arg[1] = a1;
  x->arg[2] = a2;
  x->attr = attr;
  x->dtype = dt;
}

static void instr(cf_case *c, uint32_t op, uint32_t a0, uint32_t a1,
                  uint32_t a2, double attr) {
  instr_dt(c, op, a0, a1, a2, attr, c->dtype);
}

/* relu(x0 * x1 + 0.5) */
static void prog_a(cf_builder *b, cf_case *c) {
  (void)b;
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, 0);
  instr(c, OP(MUL), 0, 1, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_CONST, 0, 0, 0, 0.5);
  instr(c, OP(ADD), 2, 3, 0, 0);
  instr(c, OP(RELU), 4, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 5, 0, 0, 0);
}

/* y0 = exp(x0), y1 = x0 - tanh(x1) */
static void prog_b(cf_builder *b, cf_case *c) {
  (void)b;
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, 0);
  instr(c, OP(EXP), 0, 0, 0, 0);
  instr(c, OP(TANH), 1, 0, 0, 0);
  instr(c, OP(SUB), 0, 3, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 2, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 4, 1, 0, 0);
}

/* sigmoid(fma(x0, x1, x2)) * leaky_relu(x0, 0.1) + where(x2 > 0, x1, -x1) */
static void prog_c(cf_builder *b, cf_case *c) {
  (void)b;
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 2, 0, 0, 0);
  instr(c, OP(FMA), 0, 1, 2, 0);
  instr(c, OP(SIGMOID), 3, 0, 0, 0);
  instr(c, OP(LEAKY_RELU), 0, 0, 0, 0.1);
  instr(c, OP(MUL), 4, 5, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_CONST, 0, 0, 0, 0.0);
  instr(c, OP(GT), 2, 7, 0, 0);
  instr(c, OP(NEG), 1, 0, 0, 0);
  instr(c, OP(WHERE), 8, 1, 9, 0);
  instr(c, OP(ADD), 6, 10, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 11, 0, 0, 0);
}

/* ------------------------------------------------- programs that convert -- */

/* The row's 16-bit dtype D and its partner: f32 for the arithmetic, the
 * other 16-bit format for conversions between the two. */
static uint32_t other16(uint32_t d) {
  return d == DT(F16) ? DT(BF16) : DT(F16);
}

/* Gives input i and output o of c (set in the row's dtype) their dtypes. */
static void io_dtype(cf_case *c, int input, uint32_t i, uint32_t dt) {
  (input ? &c->in[i] : &c->out[i])->l.dtype = dt;
}

/* D in, f32 arithmetic, D out: y = cast_D(tanh(cast_f32(a) * cast_f32(b)
 * + 0.5)). The products of two 16-bit values are exact in f32. */
static void mixed_a(cf_builder *b, cf_case *c) {
  const uint32_t d = b->dtype, f = DT(F32);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, 0);
  instr_dt(c, OP(CAST), 0, 0, 0, 0, f);
  instr_dt(c, OP(CAST), 1, 0, 0, 0, f);
  instr(c, OP(MUL), 2, 3, 0, 0);
  instr_dt(c, TYTO_PLUGIN_FUSED_CONST, 0, 0, 0, 0.5, f);
  instr(c, OP(ADD), 4, 5, 0, 0);
  instr(c, OP(TANH), 6, 0, 0, 0);
  instr_dt(c, OP(CAST), 7, 0, 0, 0, d);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 8, 0, 0, 0);
}

/* A D activation plus an f32 bias: y0 = cast_D(relu(cast_f32(x) + bias))
 * in D, y1 = the f32 sum before relu. */
static void mixed_b(cf_builder *b, cf_case *c) {
  const uint32_t d = b->dtype, f = DT(F32);
  io_dtype(c, 1, 1, f);
  io_dtype(c, 0, 1, f);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, 0);
  instr_dt(c, OP(CAST), 0, 0, 0, 0, f);
  instr(c, OP(ADD), 2, 1, 0, 0);
  instr(c, OP(RELU), 3, 0, 0, 0);
  instr_dt(c, OP(CAST), 4, 0, 0, 0, d);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 5, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 3, 1, 0, 0);
}

/* f32 in, D arithmetic (each instruction rounded to D), f32 out:
 * y = cast_f32(exp(cast_D(a) - cast_D(b)) * 3 + 1). */
static void mixed_c(cf_builder *b, cf_case *c) {
  const uint32_t d = b->dtype, f = DT(F32);
  io_dtype(c, 1, 0, f);
  io_dtype(c, 1, 1, f);
  io_dtype(c, 0, 0, f);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, 0);
  instr_dt(c, OP(CAST), 0, 0, 0, 0, d);
  instr_dt(c, OP(CAST), 1, 0, 0, 0, d);
  instr(c, OP(SUB), 2, 3, 0, 0);
  instr(c, OP(EXP), 4, 0, 0, 0);
  instr_dt(c, TYTO_PLUGIN_FUSED_CONST, 0, 0, 0, 3.0, d);
  instr_dt(c, TYTO_PLUGIN_FUSED_CONST, 0, 0, 0, 1.0, d);
  instr(c, OP(FMA), 5, 6, 7, 0);
  instr_dt(c, OP(CAST), 8, 0, 0, 0, f);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 9, 0, 0, 0);
}

/* Between the formats: y0 = cast_f64(cast_D'(x)) - cast_f64(x) in f64
 * (what D' loses of x, exactly), y1 = cast_D'(x) in the other 16-bit
 * format D'. */
static void mixed_d(cf_builder *b, cf_case *c) {
  const uint32_t d2 = other16(b->dtype), g = DT(F64);
  io_dtype(c, 0, 0, g);
  io_dtype(c, 0, 1, d2);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  instr_dt(c, OP(CAST), 0, 0, 0, 0, d2);
  instr_dt(c, OP(CAST), 1, 0, 0, 0, g);
  instr_dt(c, OP(CAST), 0, 0, 0, 0, g);
  instr(c, OP(SUB), 2, 3, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 4, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 1, 1, 0, 0);
}

/* f32 in, f64 arithmetic, f32 out (the f32 row):
 * y = cast_f32(cast_f64(a) * cast_f64(b) + 1/3). */
static void mixed_e(cf_builder *b, cf_case *c) {
  const uint32_t g = DT(F64);
  (void)b;
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, 0);
  instr(c, TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, 0);
  instr_dt(c, OP(CAST), 0, 0, 0, 0, g);
  instr_dt(c, OP(CAST), 1, 0, 0, 0, g);
  instr(c, OP(MUL), 2, 3, 0, 0);
  instr_dt(c, TYTO_PLUGIN_FUSED_CONST, 0, 0, 0, 1.0 / 3, g);
  instr(c, OP(ADD), 4, 5, 0, 0);
  instr_dt(c, OP(CAST), 6, 0, 0, 0, DT(F32));
  instr(c, TYTO_PLUGIN_FUSED_OUTPUT, 7, 0, 0, 0);
}

/* The dtype of every value of c's program, as <tyto/plugin.h> gives it
 * (an instruction's operands share one; CAST and CONST name theirs). The
 * programs above keep every arithmetic instruction's operands in one
 * dtype: instr() gives a non-CAST instruction the row's dtype only for
 * its record, the value's dtype follows its operands. */
static void fix_dtypes(cf_case *c) {
  uint32_t dt[CF_MAX_INSTRS];
  for (uint32_t i = 0; i < c->n_instrs; i++) {
    tyto_plugin_fused_instr *x = &c->instrs[i];
    if (x->op == TYTO_PLUGIN_FUSED_INPUT)
      dt[i] = c->in[x->arg[0]].l.dtype;
    else if (x->op == OP(CAST) || x->op == TYTO_PLUGIN_FUSED_CONST)
      dt[i] = x->dtype;
    else if (x->op == TYTO_PLUGIN_FUSED_OUTPUT)
      dt[i] = dt[x->arg[0]];
    else
      dt[i] = x->dtype = dt[x->arg[0]];
  }
}

/* ----------------------------------------------------------------- cases -- */

typedef struct program {
  const char *tag;
  uint32_t n_in, n_out;
  void (*prog)(cf_builder *, cf_case *);
  int mixed; /* converts: only stepwise cases */
} program;

static void program_cases(cf_builder *b, const program *p) {
  const size_t first = b->n;
  const int stepwise = p->mixed || cf_dtype_16(b->dtype);
  cf_case *c;
  cf_eltwise_cases(b, p->n_in, p->n_out, p->prog);
  /* Every combination of the special values: against ops.md (the host
   * model) where the layouts are against the reference. */
  if ((c = cf_add(b, "special values")) != NULL) {
    cf_special_grid(b, c, p->n_in, p->n_out);
    p->prog(b, c);
  }
  /* And against the program's instructions one by one. */
  if (!stepwise && (c = cf_add(b, "special values, one by one")) != NULL) {
    cf_special_grid(b, c, p->n_in, p->n_out);
    p->prog(b, c);
    c->expect = CF_EXPECT_STEPWISE;
  }
  for (size_t k = first; k < b->n; k++) {
    cf_case *x = &b->cases[k];
    char name[64];
    if (stepwise) {
      x->special = 1;
      x->expect = CF_EXPECT_STEPWISE;
    }
    fix_dtypes(x);
    snprintf(name, sizeof name, "%.24s: %.37s", p->tag, x->name);
    memcpy(x->name, name, sizeof name);
  }
}

void cf_fused_cases(cf_builder *b) {
  static const program progs[] = {
      {"relu(a*b+0.5)", 2, 1, prog_a, 0},
      {"exp(a), a-tanh(b)", 2, 2, prog_b, 0},
      {"sigmoid(fma)*lrelu+where", 3, 1, prog_c, 0}};
  /* In the 16-bit rows, the row's dtype is D. */
  static const program mixed16[] = {
      {"D>f32 tanh(a*b+.5)>D", 2, 1, mixed_a, 1},
      {"relu(D+f32 bias)>D,f32", 2, 2, mixed_b, 1},
      {"f32>D exp(a-b)*3+1>f32", 2, 1, mixed_c, 1},
      {"D>D'>f64 rounding loss", 1, 2, mixed_d, 1}};
  static const program mixed32[] = {{"f32>f64 a*b+1/3>f32", 2, 1, mixed_e, 1}};
  for (size_t p = 0; p < sizeof progs / sizeof progs[0]; p++)
    program_cases(b, &progs[p]);
  if (cf_dtype_16(b->dtype))
    for (size_t p = 0; p < sizeof mixed16 / sizeof mixed16[0]; p++)
      program_cases(b, &mixed16[p]);
  else if (b->dtype == DT(F32))
    program_cases(b, &mixed32[0]);
}
