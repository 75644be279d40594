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
 * Dtypes (ABI 1.5). Every value has a dtype (an INPUT's is its input's, a
 * CAST's and a CONST's their instruction's, any other op's its operands'),
 * checked where the program is read. A register holds its value in the
 * dtype it is computed in: f64 for F64, f32 for F32, F16 and BF16. An F16
 * or BF16 input is converted into a register as it is loaded (never read
 * in place), an op whose value is F16 or BF16 runs the f32 loop and rounds
 * its register to the dtype (so the register holds exactly what the op run
 * alone would store), a CAST converts between registers, and an OUTPUT of
 * F16 or BF16 converts its register as it stores it (exactly: the value is
 * already rounded). Registers are 8 bytes an element when an f64 value is
 * live, 4 otherwise.
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

/* What a step does. */
enum {
  FU_KERN, /* an elementwise loop, then (16-bit value) a rounding */
  FU_LOAD, /* a gather of a strided input, or a copy of a unit-stride one */
  FU_CAST  /* a conversion between registers */
};

/* How a CAST step converts (cast_mode()). */
enum {
  FU_CAST_COPY,  /* same dtype, or a 16-bit value read as f32 */
  FU_CAST_ROUND, /* f32 register to a 16-bit dtype's precision */
  FU_CAST_CVT,   /* f32 <-> f64 */
  FU_CAST_CVT2   /* f64 -> 16-bit -> f32 register, through the staging */
};

/* One step of a block, into register dst. */
typedef struct fu_step {
  int kind;
  cpu_elt_kern kern; /* FU_KERN */
  int32_t dst;
  int32_t src[3];    /* registers, FU_IN(j), or FU_NONE */
  uint32_t input;    /* FU_LOAD: the input */
  uint32_t dtype;    /* the value's dtype */
  int mode;          /* FU_CAST: FU_CAST_* */
  cpu_cvt_fn cvt[2]; /* FU_LOAD of 16-bit data: widen; FU_CAST: convert */
  size_t bytes;      /* FU_CAST_COPY: bytes an element */
  int has_attr;
  double attr[1]; /* LEAKY_RELU's slope, ELU's alpha */
} fu_step;

/* A register filled once per segment: a constant, or a broadcast input. */
typedef struct fu_pin {
  int32_t reg;
  int32_t input;    /* -1 for a constant */
  double value;     /* a constant, already rounded to its dtype */
  uint32_t compute; /* the register's dtype: F32 or F64 */
  cpu_cvt_fn widen; /* a 16-bit input: to f32 */
} fu_pin;

/* An OUTPUT: operand `operand` (n_in + output index) = src. */
typedef struct fu_store {
  int32_t src;
  uint32_t operand;
  cpu_cvt_fn narrow; /* a 16-bit output: from its f32 register */
} fu_store;

typedef struct fu_op {
  cpu_op base;
  const tyto_plugin_host *h;
  uint32_t n_steps, n_pins, n_stores, n_regs;
  int64_t block;  /* elements per register */
  size_t rsize;   /* bytes per register element: 4, or 8 with f64 values */
  size_t staging; /* offset of the 16-bit staging block in the scratch */
  fu_step *steps;
  fu_pin *pins;
  fu_store stores[CPU_MAX_IO];
  cpu_elt_space sp; /* inputs, then outputs */
} fu_op;

/* A validated instruction and its value's dtype. */
typedef struct fu_instr {
  uint32_t op, arg[3];
  double attr;
  uint32_t dtype;
} fu_instr;

/* ------------------------------------------------------------------------ */
/* Running                                                                   */
/* ------------------------------------------------------------------------ */

/* Where operand x of the block starting `done` elements into the segment
 * lives. */
static inline const void *fu_ref(const fu_op *op, int32_t x,
                                 unsigned char *regs, size_t rbytes,
                                 unsigned char *const *base, const int64_t *off,
                                 int64_t done) {
  if (x >= 0)
    return regs + (size_t)x * rbytes;
  if (x == FU_NONE)
    return NULL;
  uint32_t j = (uint32_t)(-(x + 1));
  return base[j] + (off[j] + done) * (int64_t)op->sp.esz[j];
}

/* Fills the pinned registers of a segment (m0 elements each). */
static void fu_fill_pins(const fu_op *op, unsigned char *const *base,
                         const int64_t *off, int64_t m0, unsigned char *regs,
                         size_t rb) {
  for (uint32_t k = 0; k < op->n_pins; k++) {
    const fu_pin *pin = &op->pins[k];
    unsigned char *t = regs + (size_t)pin->reg * rb;
    double v = pin->value;
    if (pin->input >= 0) {
      const uint32_t j = (uint32_t)pin->input;
      const unsigned char *at = base[j] + off[j] * (int64_t)op->sp.esz[j];
      float f;
      if (pin->widen) {
        pin->widen(1, &f, at);
        v = f;
      } else if (pin->compute == TYTO_PLUGIN_DTYPE_F32) {
        memcpy(&f, at, sizeof f);
        v = f;
      } else {
        memcpy(&v, at, sizeof v);
      }
    }
    /* v is exactly a value of the register's dtype. */
    if (pin->compute == TYTO_PLUGIN_DTYPE_F32)
      for (int64_t i = 0; i < m0; i++)
        ((float *)(void *)t)[i] = (float)v;
    else
      for (int64_t i = 0; i < m0; i++)
        ((double *)(void *)t)[i] = v;
  }
}

/* Input j's m elements from `done` on into register dst. */
static void fu_load(const fu_op *op, const fu_step *s, unsigned char *dst,
                    unsigned char *const *base, const int64_t *off,
                    int64_t done, int64_t m, unsigned char *staging) {
  const uint32_t j = s->input, r = op->sp.rank - 1;
  const size_t e = op->sp.esz[j];
  const int64_t st = op->sp.strides[j][r], at = off[j] + done * st;
  const unsigned char *in = base[j] + at * (int64_t)e;
  if (s->cvt[0]) { /* 16-bit data, read into f32 */
    if (st != 1) {
      cpu_gather(e, (size_t)m, staging, in, st);
      in = staging;
    }
    s->cvt[0]((size_t)m, dst, in);
  } else if (st == 1) {
    memcpy(dst, in, (size_t)m * e);
  } else {
    cpu_gather(e, (size_t)m, dst, in, st);
  }
}

static void fu_cast(const fu_step *s, unsigned char *dst, const void *src,
                    int64_t m, unsigned char *staging) {
  switch (s->mode) {
  case FU_CAST_COPY: memcpy(dst, src, (size_t)m * s->bytes); break;
  case FU_CAST_ROUND:
    cpu_cvt_round(s->dtype, (size_t)m, (float *)(void *)dst,
                  (const float *)src);
    break;
  case FU_CAST_CVT: s->cvt[0]((size_t)m, dst, src); break;
  default:
    s->cvt[0]((size_t)m, staging, src);
    s->cvt[1]((size_t)m, dst, staging);
    break;
  }
}

/* OUTPUT k of the block: its register (or input) into the output. */
static void fu_store_block(const fu_op *op, const fu_store *w,
                           const unsigned char *src, unsigned char *const *base,
                           const int64_t *off, int64_t done, int64_t m,
                           unsigned char *staging) {
  const uint32_t j = w->operand, r = op->sp.rank - 1;
  const size_t e = op->sp.esz[j];
  const int64_t so = op->sp.strides[j][r], at = off[j] + done * so;
  unsigned char *o = base[j] + at * (int64_t)e;
  if (w->narrow) { /* exact: the register holds a value of the dtype */
    if (so == 1) {
      w->narrow((size_t)m, o, src);
    } else {
      w->narrow((size_t)m, staging, src);
      cpu_scatter(e, (size_t)m, o, so, staging);
    }
  } else if (so == 1) {
    if (o != src)
      memmove(o, src, (size_t)m * e);
  } else {
    cpu_scatter(e, (size_t)m, o, so, src);
  }
}

static void fu_segment(const void *ctx, unsigned char *const *base,
                       const int64_t *off, int64_t n, unsigned char *regs) {
  const fu_op *op = ctx;
  const int64_t bl = op->block;
  const size_t rb = (size_t)bl * op->rsize;
  unsigned char *staging = regs + op->staging;
  fu_fill_pins(op, base, off, n < bl ? n : bl, regs, rb);
  for (int64_t done = 0; done < n; done += bl) {
    const int64_t m = n - done < bl ? n - done : bl;
    for (uint32_t k = 0; k < op->n_steps; k++) {
      const fu_step *s = &op->steps[k];
      unsigned char *dst = regs + (size_t)s->dst * rb;
      if (s->kind == FU_LOAD) {
        fu_load(op, s, dst, base, off, done, m, staging);
      } else if (s->kind == FU_CAST) {
        fu_cast(s, dst, fu_ref(op, s->src[0], regs, rb, base, off, done), m,
                staging);
      } else {
        s->kern((size_t)m, dst,
                fu_ref(op, s->src[0], regs, rb, base, off, done),
                fu_ref(op, s->src[1], regs, rb, base, off, done),
                fu_ref(op, s->src[2], regs, rb, base, off, done),
                s->has_attr ? s->attr : NULL);
        if (cpu_dtype_half(s->dtype))
          cpu_cvt_round(s->dtype, (size_t)m, (float *)(void *)dst,
                        (const float *)(const void *)dst);
      }
    }
    /* Every load of the block is done: now the stores. */
    for (uint32_t k = 0; k < op->n_stores; k++) {
      const fu_store *w = &op->stores[k];
      fu_store_block(op, w, fu_ref(op, w->src, regs, rb, base, off, done), base,
                     off, done, m, staging);
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

/* Operands of an instruction's op: CAST's 1, an elementwise op's; 0 for
 * INPUT, CONST, OUTPUT and codes that are no elementwise op. */
static int fu_arity(uint32_t op) {
  return op == TYTO_PLUGIN_OP_CAST ? 1 : cpu_eltwise_arity(op);
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
      int arity = fu_arity(in->op);
      if (!arity)
        e = h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                         "fused: instruction %u has op code %u, which is "
                         "neither INPUT, CONST, OUTPUT nor an elementwise op "
                         "(NEG .. ROUND, CAST, ADD .. GE, WHERE, FMA)",
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

static int float_dtype(uint32_t dt) {
  return dt == TYTO_PLUGIN_DTYPE_F32 || dt == TYTO_PLUGIN_DTYPE_F64 ||
         dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16;
}

/* Gives every value of the structurally checked program its dtype (dts[i],
 * n entries), as plugin.h's tyto_plugin_fused_instr says, and checks them
 * (the messages are plugins/common's tpc_fused_types'). */
static tyto_plugin_error *type_program(const tyto_plugin_host *h,
                                       const cpu_desc *desc, uint8_t *dts) {
  const tyto_plugin_fused_program *p = desc->d->blob;
  for (uint32_t i = 0; i < p->n_instrs; i++) {
    const tyto_plugin_fused_instr *in = instr_at(p, i);
    const uint32_t *a = in->arg;
    if (in->op == TYTO_PLUGIN_FUSED_INPUT) {
      dts[i] = (uint8_t)desc->in[a[0]].l.dtype;
    } else if (in->op == TYTO_PLUGIN_FUSED_OUTPUT) {
      uint32_t want = desc->out[a[1]].l.dtype;
      if (dts[a[0]] != want)
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "fused: instruction %u writes a value of dtype %s "
                            "to output %u, whose dtype is %s",
                            i, cpu_dtype_name(dts[a[0]]), a[1],
                            cpu_dtype_name(want));
      dts[i] = (uint8_t)want;
    } else if (in->op == TYTO_PLUGIN_FUSED_CONST ||
               in->op == TYTO_PLUGIN_OP_CAST) {
      const char *what = in->op == TYTO_PLUGIN_OP_CAST ? "cast" : "const";
      uint32_t dt;
      if (TYTO_PLUGIN_HAS_FIELD(in, tyto_plugin_fused_instr, dtype))
        dt = in->dtype;
      else if (in->op == TYTO_PLUGIN_OP_CAST)
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "fused: instruction %u is a CAST, but the "
                            "instructions stop before their dtype field (ABI "
                            "1.5)",
                            i);
      else /* a host older than 1.5: the program's one dtype */
        dt = desc->out[0].l.dtype;
      if (!float_dtype(dt))
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "fused: instruction %u (%s) has dtype %s (%u); "
                            "expected f32, f64, f16 or bf16",
                            i, what, cpu_dtype_name(dt), dt);
      dts[i] = (uint8_t)dt;
    } else {
      int arity = fu_arity(in->op);
      dts[i] = dts[a[0]];
      for (int k = 1; k < arity; k++)
        if (dts[a[k]] != dts[i])
          return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                              "fused: instruction %u (%s) reads values of "
                              "dtypes %s and %s; convert with CAST first",
                              i, cpu_op_name(in->op), cpu_dtype_name(dts[i]),
                              cpu_dtype_name(dts[a[k]]));
    }
  }
  return NULL;
}

/* The dtypes of a checked program: its typing, into a small array on the
 * stack (programs the size of a model's fusions) or the heap. */
#define FU_STACK_DTYPES 512
static tyto_plugin_error *check_types(const tyto_plugin_host *h,
                                      const cpu_desc *desc) {
  const tyto_plugin_fused_program *p = desc->d->blob;
  uint8_t stack[FU_STACK_DTYPES];
  uint8_t *dts = p->n_instrs <= FU_STACK_DTYPES ? stack : malloc(p->n_instrs);
  if (!dts)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "fused: out of memory checking a program of %u "
                        "instructions",
                        p->n_instrs);
  tyto_plugin_error *e = type_program(h, desc, dts);
  if (dts != stack)
    free(dts);
  return e;
}

/* Copies the checked program and its dtypes into fi (n instructions,
 * malloc'd; the caller frees it): the compiler's input outlives the
 * descriptor. */
static tyto_plugin_error *read_program(const tyto_plugin_host *h,
                                       const cpu_desc *desc, fu_instr **out,
                                       uint32_t *n_out) {
  const tyto_plugin_fused_program *p = desc->d->blob;
  const uint32_t n = p->n_instrs;
  fu_instr *fi = malloc((size_t)n * sizeof *fi);
  uint8_t *dts = malloc(n);
  if (!fi || !dts) {
    free(fi);
    free(dts);
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "fused: out of memory reading a program of %u "
                        "instructions",
                        n);
  }
  tyto_plugin_error *e = type_program(h, desc, dts);
  for (uint32_t i = 0; i < n && !e; i++) {
    const tyto_plugin_fused_instr *in = instr_at(p, i);
    fi[i].op = in->op;
    memcpy(fi[i].arg, in->arg, sizeof fi[i].arg);
    fi[i].attr = in->attr;
    fi[i].dtype = dts[i];
  }
  free(dts);
  if (e) {
    free(fi);
    return e;
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

/* attr rounded to dtype dt, as a double holding that value exactly. */
static double const_value(double attr, uint32_t dt) {
  if (dt == TYTO_PLUGIN_DTYPE_F64)
    return attr;
  float f;
  uint16_t h;
  if (dt == TYTO_PLUGIN_DTYPE_F32) {
    cpu_cvt(dt, TYTO_PLUGIN_DTYPE_F64)(1, &f, &attr);
  } else {
    cpu_cvt(dt, TYTO_PLUGIN_DTYPE_F64)(1, &h, &attr);
    cpu_cvt(TYTO_PLUGIN_DTYPE_F32, dt)(1, &f, &h);
  }
  return f;
}

/* How a CAST from a value of dtype `from` to dtype `to` runs on their
 * registers (f64 for F64, f32 for the others). */
static void cast_mode(fu_step *s, uint32_t from, uint32_t to) {
  const uint32_t cf = cpu_dtype_compute(from), ct = cpu_dtype_compute(to);
  s->dtype = to;
  if (from == to || (cf == ct && to == TYTO_PLUGIN_DTYPE_F32)) {
    s->mode = FU_CAST_COPY; /* an f16 or bf16 value is an f32 already */
    s->bytes = cpu_dtype_size(ct);
  } else if (cf == ct) {
    s->mode = FU_CAST_ROUND; /* f32, f16 -> bf16; f32, bf16 -> f16 */
  } else if (to == TYTO_PLUGIN_DTYPE_F32 || ct == TYTO_PLUGIN_DTYPE_F64) {
    s->mode = FU_CAST_CVT; /* the source's f32 holds it exactly */
    s->cvt[0] = cpu_cvt(ct, cf);
  } else { /* f64 -> f16, bf16: rounded once, then read as f32 */
    s->mode = FU_CAST_CVT2;
    s->cvt[0] = cpu_cvt(to, TYTO_PLUGIN_DTYPE_F64);
    s->cvt[1] = cpu_cvt(TYTO_PLUGIN_DTYPE_F32, to);
  }
}

/* Compiles an INPUT instruction i (value v) reading input j. */
static void compile_input(fu_op *op, const cpu_desc *desc, uint32_t j,
                          fu_value *v, fu_alloc *al, int32_t *pin_of_input) {
  const uint32_t r = op->sp.rank - 1, dt = desc->in[j].l.dtype;
  const int64_t st = op->sp.strides[j][r];
  const int half = cpu_dtype_half(dt);
  /* An input an OUTPUT stores is copied into a register: read in place at
   * the block's end, it could already hold another output bound to the
   * same memory. 16-bit inputs are always converted into one. */
  if (st == 1 && v->last != UINT32_MAX && !half) {
    v->ref = FU_IN(j);
  } else if (st == 0) {
    if (pin_of_input[j] < 0) {
      pin_of_input[j] = reg_pin(al);
      op->pins[op->n_pins++] =
          (fu_pin){pin_of_input[j], (int32_t)j, 0.0, cpu_dtype_compute(dt),
                   half ? cpu_cvt(TYTO_PLUGIN_DTYPE_F32, dt) : NULL};
    }
    v->ref = pin_of_input[j];
  } else {
    fu_step *s = &op->steps[op->n_steps++];
    s->kind = FU_LOAD;
    s->dst = v->ref = reg_new(al);
    s->input = j;
    s->dtype = dt;
    s->cvt[0] = half ? cpu_cvt(TYTO_PLUGIN_DTYPE_F32, dt) : NULL;
    v->freeable = 1;
  }
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
    if (fi[i].op == TYTO_PLUGIN_FUSED_OUTPUT) {
      v[fi[i].arg[0]].live = 1;
      v[fi[i].arg[0]].last = UINT32_MAX;
      continue;
    }
    if (!v[i].live)
      continue;
    int arity = fu_arity(fi[i].op);
    for (int k = 0; k < arity; k++) {
      fu_value *x = &v[fi[i].arg[k]];
      if (!x->live)
        x->last = i; /* the first reader seen backwards is the last */
      x->live = 1;
    }
  }
  /* Registers hold doubles as soon as one live value is an f64. */
  op->rsize = 4;
  for (uint32_t i = 0; i < n; i++)
    if (v[i].live && fi[i].dtype == TYTO_PLUGIN_DTYPE_F64)
      op->rsize = 8;
  int32_t pin_of_input[CPU_MAX_IO];
  for (uint32_t j = 0; j < CPU_MAX_IO; j++)
    pin_of_input[j] = -1;
  fu_alloc al = {free_regs, 0, 0};
  for (uint32_t i = 0; i < n; i++) {
    const fu_instr *x = &fi[i];
    if (x->op == TYTO_PLUGIN_FUSED_OUTPUT) {
      fu_store *w = &op->stores[op->n_stores++];
      w->src = v[x->arg[0]].ref;
      w->operand = desc->n_in + x->arg[1];
      if (cpu_dtype_half(x->dtype))
        w->narrow = cpu_cvt(x->dtype, TYTO_PLUGIN_DTYPE_F32);
      continue;
    }
    if (!v[i].live)
      continue;
    if (x->op == TYTO_PLUGIN_FUSED_INPUT) {
      compile_input(op, desc, x->arg[0], &v[i], &al, pin_of_input);
      continue;
    }
    if (x->op == TYTO_PLUGIN_FUSED_CONST) {
      v[i].ref = reg_pin(&al);
      op->pins[op->n_pins++] =
          (fu_pin){v[i].ref, -1, const_value(x->attr, x->dtype),
                   cpu_dtype_compute(x->dtype), NULL};
      continue;
    }
    int arity = fu_arity(x->op);
    fu_step *s = &op->steps[op->n_steps++];
    if (x->op == TYTO_PLUGIN_OP_CAST) {
      s->kind = FU_CAST;
      cast_mode(s, fi[x->arg[0]].dtype, x->dtype);
    } else {
      s->kind = FU_KERN;
      s->dtype = x->dtype;
      s->kern = cpu_eltwise_kern(x->op, cpu_dtype_compute(x->dtype));
      s->has_attr =
          x->op == TYTO_PLUGIN_OP_LEAKY_RELU || x->op == TYTO_PLUGIN_OP_ELU;
      s->attr[0] = s->has_attr ? x->attr : 0.0;
    }
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
         (size_t)op->n_regs * (size_t)op->block * op->rsize > FU_FILE_BYTES)
    op->block /= 2;
  /* After the registers, a block of 16-bit elements for the conversions'
   * gathers and scatters. */
  op->staging =
      ((size_t)op->n_regs * (size_t)op->block * op->rsize + 63) & ~(size_t)63;
  op->sp.scratch_bytes = op->staging + (size_t)op->block * 2;
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
  tyto_plugin_error *e = cpu_eltwise_check_operands(h, desc, "fused", 0);
  if (!e)
    e = check_program(h, desc);
  return e ? e : check_types(h, desc);
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
