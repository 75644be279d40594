/*
 * FUSED on the CPU: an elementwise expression program (see
 * tyto_plugin_fused_program) run as a vectorised interpreter.
 *
 * cpu_fused_check() validates the program where the descriptor holds it
 * (supports_op runs it alone); prepare() runs it too, then drops what no
 * OUTPUT needs and compiles the rest into steps over registers, each a
 * block of up to CPU_ELT_BLOCK elements: an elementwise instruction becomes
 * one call of the same contiguous loop the single-op kernel uses
 * (cpu_eltwise_kern), so results are bit-identical to running the ops one
 * at a time. Registers are reused once their value's last reader has run,
 * so the register file stays in L1 however long the program.
 *
 * Operands: a unit-stride input is read in place (no register) unless an
 * OUTPUT stores it; a broadcast input (stride 0 along the row) and a CONST
 * are "pinned" registers, filled once per row segment; any other input is
 * gathered (copied) into a register per block. OUTPUTs are stored (copied or
 * scattered) after the whole block has been computed, so every input of an
 * element position is read before any output is written: an output may be the
 * same memory as an input (the host's in-place updates).
 *
 * Layout handling and the split over the worker pool are eltwise.c's
 * (cpu_elt_space): axes are collapsed over all inputs and outputs at
 * prepare and rows are cut into tasks at run.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* Register file size to aim for: well inside a 32 KiB L1 data cache. */
#define FU_FILE_BYTES (24 << 10)
/* Blocks shrink down to this for programs with very many live values. */
#define FU_MIN_BLOCK 32
/* An operand that is no register: input j read in place is FU_IN(j). */
#define FU_IN(j) (-(int32_t)(j)-1)
#define FU_NONE INT32_MIN

/* The smallest structs we read: the whole of ABI 1.2's. */
#define FU_PROG_MIN                                                            \
  (offsetof(tyto_plugin_fused_program, instrs) +                               \
   sizeof(((tyto_plugin_fused_program *)0)->instrs))
#define FU_INSTR_MIN                                                           \
  (offsetof(tyto_plugin_fused_instr, attr) +                                   \
   sizeof(((tyto_plugin_fused_instr *)0)->attr))

/* One step of a block: an elementwise loop, or (kern NULL) a gather of a
 * strided input, or a copy of a unit-stride one, into register dst. */
typedef struct fu_step {
  cpu_elt_kern kern;
  int32_t dst;
  int32_t src[3]; /* registers, FU_IN(j), or FU_NONE */
  uint32_t input; /* gather: the input */
  int has_attr;
  double attr[1]; /* LEAKY_RELU's slope, ELU's alpha */
} fu_step;

/* A register filled once per segment: a constant, or a broadcast input. */
typedef struct fu_pin {
  int32_t reg;
  int32_t input; /* -1 for a constant */
  double value;
} fu_pin;

/* An OUTPUT: operand `operand` (n_in + output index) = src. */
typedef struct fu_store {
  int32_t src;
  uint32_t operand;
} fu_store;

typedef struct fu_op {
  cpu_op base;
  const tyto_plugin_host *h;
  uint32_t n_steps, n_pins, n_stores, n_regs;
  int64_t block; /* elements per register */
  fu_step *steps;
  fu_pin *pins;
  fu_store stores[CPU_MAX_IO];
  cpu_elt_space sp; /* inputs, then outputs */
} fu_op;

/* A validated instruction. */
typedef struct fu_instr {
  uint32_t op, arg[3];
  double attr;
} fu_instr;

/* ------------------------------------------------------------------------ */
/* Running                                                                   */
/* ------------------------------------------------------------------------ */

/* Where operand x of the block starting `done` elements into the segment
 * lives. */
static inline const void *fu_ref(int32_t x, unsigned char *regs, size_t rbytes,
                                 unsigned char *const *base, const int64_t *off,
                                 int64_t done, size_t e) {
  if (x >= 0)
    return regs + (size_t)x * rbytes;
  if (x == FU_NONE)
    return NULL;
  uint32_t j = (uint32_t)(-(x + 1));
  return base[j] + (off[j] + done) * (int64_t)e;
}

static void fu_segment(const void *ctx, unsigned char *const *base,
                       const int64_t *off, int64_t n, unsigned char *regs) {
  const fu_op *op = ctx;
  const size_t e = op->sp.esize;
  const uint32_t r = op->sp.rank - 1;
  const int64_t bl = op->block;
  const size_t rb = (size_t)bl * e;
  const int64_t m0 = n < bl ? n : bl;
  for (uint32_t k = 0; k < op->n_pins; k++) {
    const fu_pin *pin = &op->pins[k];
    unsigned char *t = regs + (size_t)pin->reg * rb;
    if (e == 4) {
      float v = pin->input < 0
                    ? (float)pin->value
                    : ((const float *)base[pin->input])[off[pin->input]];
      for (int64_t i = 0; i < m0; i++)
        ((float *)t)[i] = v;
    } else {
      double v = pin->input < 0
                     ? pin->value
                     : ((const double *)base[pin->input])[off[pin->input]];
      for (int64_t i = 0; i < m0; i++)
        ((double *)t)[i] = v;
    }
  }
  for (int64_t done = 0; done < n; done += bl) {
    const int64_t m = n - done < bl ? n - done : bl;
    for (uint32_t k = 0; k < op->n_steps; k++) {
      const fu_step *s = &op->steps[k];
      unsigned char *dst = regs + (size_t)s->dst * rb;
      if (s->kern) {
        s->kern((size_t)m, dst, fu_ref(s->src[0], regs, rb, base, off, done, e),
                fu_ref(s->src[1], regs, rb, base, off, done, e),
                fu_ref(s->src[2], regs, rb, base, off, done, e),
                s->has_attr ? s->attr : NULL);
        continue;
      }
      const uint32_t j = s->input;
      const int64_t st = op->sp.strides[j][r], at = off[j] + done * st;
      if (st == 1) {
        memcpy(dst, base[j] + at * (int64_t)e, (size_t)m * e);
      } else if (e == 4) {
        const float *in = (const float *)base[j] + at;
        for (int64_t i = 0; i < m; i++)
          ((float *)dst)[i] = in[i * st];
      } else {
        const double *in = (const double *)base[j] + at;
        for (int64_t i = 0; i < m; i++)
          ((double *)dst)[i] = in[i * st];
      }
    }
    /* Every load of the block is done: now the stores. */
    for (uint32_t k = 0; k < op->n_stores; k++) {
      const uint32_t j = op->stores[k].operand;
      const unsigned char *src =
          fu_ref(op->stores[k].src, regs, rb, base, off, done, e);
      const int64_t so = op->sp.strides[j][r], at = off[j] + done * so;
      if (so == 1) {
        unsigned char *o = base[j] + at * (int64_t)e;
        if (o != src)
          memmove(o, src, (size_t)m * e);
      } else if (e == 4) {
        float *o = (float *)base[j] + at;
        for (int64_t i = 0; i < m; i++)
          o[i * so] = ((const float *)src)[i];
      } else {
        double *o = (double *)base[j] + at;
        for (int64_t i = 0; i < m; i++)
          o[i * so] = ((const double *)src)[i];
      }
    }
  }
}

static tyto_plugin_error *fu_run(const cpu_op *base, const cpu_desc *d,
                                 unsigned char *const *args, cpu_pool *pool) {
  const fu_op *op = (const fu_op *)base;
  (void)d;
  if (cpu_elt_space_run(&op->sp, args, pool, fu_segment, op) != 0)
    return op->h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                            "fused: out of memory for a register file of %zu "
                            "bytes (%u registers)",
                            op->sp.scratch_bytes, op->n_regs);
  return NULL;
}

static void fu_destroy(cpu_op *base) {
  fu_op *op = (fu_op *)base;
  free(op->steps);
  free(op->pins);
  free(op);
}

/* ------------------------------------------------------------------------ */
/* Validating                                                                */
/* ------------------------------------------------------------------------ */

/* Instruction i of the program (the array's stride is instrs[0]'s
 * struct_size). */
static const tyto_plugin_fused_instr *
instr_at(const tyto_plugin_fused_program *p, uint32_t i) {
  return TYTO_PLUGIN_AT(tyto_plugin_fused_instr, p->instrs, i);
}

/* Whether value v may be read by instruction i. */
static tyto_plugin_error *check_value(const tyto_plugin_host *h,
                                      const tyto_plugin_fused_program *p,
                                      uint32_t i, uint32_t v) {
  if (v >= i)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: instruction %u reads value %u, which is not "
                        "defined before it (operands must name earlier "
                        "instructions)",
                        i, v);
  if (instr_at(p, v)->op == TYTO_PLUGIN_FUSED_OUTPUT)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: instruction %u reads value %u, which is an "
                        "OUTPUT and defines no value",
                        i, v);
  return NULL;
}

/* Checks the blob and every instruction where it lies, copying nothing. */
static tyto_plugin_error *check_program(const tyto_plugin_host *h,
                                        const cpu_desc *desc) {
  const tyto_plugin_op_desc *d = desc->d;
  if (!d->blob || d->blob_size < FU_PROG_MIN)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: expected a tyto_plugin_fused_program of at "
                        "least %zu bytes as the blob, got %s%zu bytes",
                        (size_t)FU_PROG_MIN, d->blob ? "" : "no blob and ",
                        d->blob_size);
  const tyto_plugin_fused_program *p = d->blob;
  if (p->struct_size < FU_PROG_MIN)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: the program's struct_size is %zu, expected at "
                        "least %zu (a tyto_plugin_fused_program of ABI 1.2)",
                        p->struct_size, (size_t)FU_PROG_MIN);
  if (p->n_instrs == 0)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: the program has no instructions (expected at "
                        "least one OUTPUT for each of the %u outputs)",
                        desc->n_out);
  if (!p->instrs)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: the program has %u instructions but no "
                        "instruction array",
                        p->n_instrs);
  if (p->instrs[0].struct_size < FU_INSTR_MIN)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: the instructions' struct_size is %zu, "
                        "expected at least %zu (a tyto_plugin_fused_instr of "
                        "ABI 1.2)",
                        p->instrs[0].struct_size, (size_t)FU_INSTR_MIN);
  int32_t writer[CPU_MAX_IO];
  for (uint32_t k = 0; k < CPU_MAX_IO; k++)
    writer[k] = -1;
  tyto_plugin_error *e = NULL;
  for (uint32_t i = 0; i < p->n_instrs && !e; i++) {
    const tyto_plugin_fused_instr *in = instr_at(p, i);
    const uint32_t *a = in->arg;
    switch (in->op) {
    case TYTO_PLUGIN_FUSED_INPUT:
      if (a[0] >= desc->n_in)
        e = h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                         "fused: instruction %u reads input %u, but the op "
                         "has %u input%s",
                         i, a[0], desc->n_in, desc->n_in == 1 ? "" : "s");
      break;
    case TYTO_PLUGIN_FUSED_CONST: break;
    case TYTO_PLUGIN_FUSED_OUTPUT:
      e = check_value(h, p, i, a[0]);
      if (!e && a[1] >= desc->n_out)
        e = h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                         "fused: instruction %u writes output %u, but the op "
                         "has %u output%s",
                         i, a[1], desc->n_out, desc->n_out == 1 ? "" : "s");
      else if (!e && writer[a[1]] >= 0)
        e = h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                         "fused: instruction %u writes output %u, which "
                         "instruction %d already writes (each output is "
                         "written exactly once)",
                         i, a[1], (int)writer[a[1]]);
      else if (!e)
        writer[a[1]] = (int32_t)i;
      break;
    default: {
      int arity = cpu_eltwise_arity(in->op);
      if (!arity)
        e = h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                         "fused: instruction %u has op code %u, which is "
                         "neither INPUT, CONST, OUTPUT nor an elementwise op "
                         "(NEG .. FMA)",
                         i, in->op);
      for (int k = 0; k < arity && !e; k++)
        e = check_value(h, p, i, a[k]);
    }
    }
  }
  for (uint32_t k = 0; k < desc->n_out && !e; k++)
    if (writer[k] < 0)
      e = h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "fused: output %u is never written (expected one "
                       "OUTPUT instruction for each of the %u outputs)",
                       k, desc->n_out);
  return e;
}

/* Copies the checked program into fi (n instructions, malloc'd; the caller
 * frees it): the compiler's input outlives the descriptor. */
static tyto_plugin_error *read_program(const tyto_plugin_host *h,
                                       const cpu_desc *desc, fu_instr **out,
                                       uint32_t *n_out) {
  const tyto_plugin_fused_program *p = desc->d->blob;
  const uint32_t n = p->n_instrs;
  fu_instr *fi = malloc((size_t)n * sizeof *fi);
  if (!fi)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "fused: out of memory reading a program of %u "
                        "instructions",
                        n);
  for (uint32_t i = 0; i < n; i++) {
    const tyto_plugin_fused_instr *in = instr_at(p, i);
    fi[i].op = in->op;
    memcpy(fi[i].arg, in->arg, sizeof fi[i].arg);
    fi[i].attr = in->attr;
  }
  *out = fi;
  *n_out = n;
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Compiling                                                                 */
/* ------------------------------------------------------------------------ */

/* Per-value facts the compiler gathers; `last` is the last instruction
 * that reads the value, UINT32_MAX when an OUTPUT does (stores run at the
 * block's end). */
typedef struct fu_value {
  int live;
  int freeable; /* a register of its own, given back after `last` */
  uint32_t last;
  int32_t ref;
} fu_value;

typedef struct fu_alloc {
  int32_t *free_regs;
  uint32_t n_free;
  uint32_t n_regs;
} fu_alloc;

static int32_t reg_new(fu_alloc *a) {
  return a->n_free ? a->free_regs[--a->n_free] : (int32_t)a->n_regs++;
}

/* A pinned register is filled before the block's first step, so it must
 * be one no other value ever had: a fresh one, never given back. */
static int32_t reg_pin(fu_alloc *a) {
  return (int32_t)a->n_regs++;
}

/* Turns the validated program into steps, pins and stores. */
static tyto_plugin_error *compile(const tyto_plugin_host *h, fu_op *op,
                                  const cpu_desc *desc, const fu_instr *fi,
                                  uint32_t n) {
  fu_value *v = calloc(n, sizeof *v);
  int32_t *free_regs = malloc((size_t)n * sizeof *free_regs);
  op->steps = calloc(n, sizeof *op->steps);
  op->pins = calloc(n, sizeof *op->pins);
  if (!v || !free_regs || !op->steps || !op->pins) {
    free(v);
    free(free_regs);
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "fused: out of memory compiling a program of %u "
                        "instructions",
                        n);
  }
  /* Liveness, backwards: what some OUTPUT needs. */
  for (uint32_t i = n; i-- > 0;) {
    int arity = 0;
    if (fi[i].op == TYTO_PLUGIN_FUSED_OUTPUT) {
      v[fi[i].arg[0]].live = 1;
      v[fi[i].arg[0]].last = UINT32_MAX;
      continue;
    }
    if (!v[i].live)
      continue;
    if (fi[i].op != TYTO_PLUGIN_FUSED_INPUT &&
        fi[i].op != TYTO_PLUGIN_FUSED_CONST)
      arity = cpu_eltwise_arity(fi[i].op);
    for (int k = 0; k < arity; k++) {
      fu_value *x = &v[fi[i].arg[k]];
      if (!x->live)
        x->last = i; /* the first reader seen backwards is the last */
      x->live = 1;
    }
  }
  const uint32_t r = op->sp.rank - 1;
  const uint32_t dt = desc->out[0].l.dtype;
  int32_t pin_of_input[CPU_MAX_IO];
  for (uint32_t j = 0; j < CPU_MAX_IO; j++)
    pin_of_input[j] = -1;
  fu_alloc al = {free_regs, 0, 0};
  for (uint32_t i = 0; i < n; i++) {
    const fu_instr *x = &fi[i];
    if (x->op == TYTO_PLUGIN_FUSED_OUTPUT) {
      op->stores[op->n_stores].src = v[x->arg[0]].ref;
      op->stores[op->n_stores++].operand = desc->n_in + x->arg[1];
      continue;
    }
    if (!v[i].live)
      continue;
    if (x->op == TYTO_PLUGIN_FUSED_INPUT) {
      uint32_t j = x->arg[0];
      int64_t st = op->sp.strides[j][r];
      /* An input an OUTPUT stores is copied into a register: read in
       * place at the block's end, it could already hold another output
       * bound to the same memory. */
      if (st == 1 && v[i].last != UINT32_MAX) {
        v[i].ref = FU_IN(j);
      } else if (st == 0) {
        if (pin_of_input[j] < 0) {
          pin_of_input[j] = reg_pin(&al);
          op->pins[op->n_pins++] = (fu_pin){pin_of_input[j], (int32_t)j, 0.0};
        }
        v[i].ref = pin_of_input[j];
      } else {
        fu_step *s = &op->steps[op->n_steps++];
        s->dst = v[i].ref = reg_new(&al);
        s->input = j;
        v[i].freeable = 1;
      }
      continue;
    }
    if (x->op == TYTO_PLUGIN_FUSED_CONST) {
      v[i].ref = reg_pin(&al);
      op->pins[op->n_pins++] = (fu_pin){v[i].ref, -1, x->attr};
      continue;
    }
    int arity = cpu_eltwise_arity(x->op);
    fu_step *s = &op->steps[op->n_steps++];
    s->kern = cpu_eltwise_kern(x->op, dt);
    s->has_attr =
        x->op == TYTO_PLUGIN_OP_LEAKY_RELU || x->op == TYTO_PLUGIN_OP_ELU;
    s->attr[0] = s->has_attr ? x->attr : 0.0;
    for (int k = 0; k < 3; k++)
      s->src[k] = k < arity ? v[x->arg[k]].ref : FU_NONE;
    /* The result gets a register before the operands give theirs back:
     * a loop whose output aliases an input would lose GCC's vector path. */
    s->dst = v[i].ref = reg_new(&al);
    v[i].freeable = 1;
    for (int k = 0; k < arity; k++) {
      uint32_t a = x->arg[k];
      int seen = 0;
      for (int q = 0; q < k; q++)
        seen |= x->arg[q] == a;
      if (!seen && v[a].freeable && v[a].last == i)
        al.free_regs[al.n_free++] = v[a].ref;
    }
  }
  op->n_regs = al.n_regs;
  free(v);
  free(free_regs);
  op->block = CPU_ELT_BLOCK;
  while (op->block > FU_MIN_BLOCK &&
         (size_t)op->n_regs * (size_t)op->block * op->sp.esize > FU_FILE_BYTES)
    op->block /= 2;
  op->sp.scratch_bytes = (size_t)op->n_regs * (size_t)op->block * op->sp.esize;
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Preparing                                                                 */
/* ------------------------------------------------------------------------ */

tyto_plugin_error *cpu_fused_check(const tyto_plugin_host *h,
                                   const cpu_desc *desc) {
  if (desc->d->op != TYTO_PLUGIN_OP_FUSED)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "op %u is not a fused op known to the cpu device",
                        desc->d->op);
  if (desc->n_in < 1 || desc->n_in > TYTO_PLUGIN_FUSED_MAX_IO ||
      desc->n_out < 1 || desc->n_out > TYTO_PLUGIN_FUSED_MAX_IO)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: expected 1 to %d inputs and 1 to %d outputs, "
                        "got %u and %u",
                        TYTO_PLUGIN_FUSED_MAX_IO, TYTO_PLUGIN_FUSED_MAX_IO,
                        desc->n_in, desc->n_out);
  tyto_plugin_error *e = cpu_eltwise_check_operands(h, desc, "fused");
  return e ? e : check_program(h, desc);
}

tyto_plugin_error *cpu_fused_prepare(const tyto_plugin_host *h,
                                     const cpu_desc *desc, cpu_op **out) {
  tyto_plugin_error *e = cpu_fused_check(h, desc);
  if (e)
    return e;
  fu_instr *fi = NULL;
  uint32_t n = 0;
  if ((e = read_program(h, desc, &fi, &n)) != NULL)
    return e;
  fu_op *op = calloc(1, sizeof *op);
  if (!op) {
    free(fi);
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "fused: out of memory preparing the kernel");
  }
  op->base.run = fu_run;
  op->base.destroy = fu_destroy;
  op->h = h;
  /* libm-bound programs are cut into smaller tasks, as single ops are. */
  int slow = 0;
  for (uint32_t i = 0; i < n; i++)
    slow |= cpu_eltwise_arity(fi[i].op) && cpu_eltwise_slow(fi[i].op);
  cpu_elt_space_init(&op->sp, desc, slow);
  if (op->sp.numel > 0)
    e = compile(h, op, desc, fi, n);
  free(fi);
  if (e) {
    fu_destroy(&op->base);
    return e;
  }
  *out = &op->base;
  return NULL;
}
