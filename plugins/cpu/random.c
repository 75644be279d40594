/*
 * RANDOM_UNIFORM, RANDOM_NORMAL, RANDOM_BERNOULLI: counter-based Philox
 * streams, so any slice of the output can be computed on its own (the pool
 * splits the output into chunks of whole counters) and every device can
 * reproduce the stream. The definition is sdk/docs/random.md; philox.h
 * holds the generator and the conversions. F16 and BF16 take the f32
 * stream's values, each rounded once to the dtype.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "ops.h"
#include "philox.h"

#define CHUNK_COUNTERS 1024 /* 4096 elements per pool task */

typedef struct random_op {
  cpu_op base;
  const tyto_plugin_host *h;
  uint32_t op;
  uint64_t seed, offset;
  double a, b;              /* low, high / mean, stddev / p */
  cpu_cvt_fn narrow, widen; /* F16, BF16: from and to f32 */
} random_op;

typedef struct random_job {
  const random_op *op;
  uint64_t step; /* counter words 2, 3: the step input's value, or 0 */
  const tyto_plugin_layout *l;
  unsigned char *dst;
  int64_t n;
} random_job;

/* The element offset of row-major index i in layout l. */
static int64_t offset_of(const tyto_plugin_layout *l, int64_t i) {
  int64_t off = l->offset;
  for (uint32_t a = l->rank; a-- > 0;) {
    off += (i % l->shape[a]) * l->strides[a];
    i /= l->shape[a];
  }
  return off;
}

/* Word r of a uniform or bernoulli stream as its value (random.md). */
static float word_f32(const random_op *op, uint32_t r) {
  if (op->op == TYTO_PLUGIN_OP_RANDOM_UNIFORM) {
    float lo = (float)op->a;
    return fmaf((float)op->b - lo, tyto_philox_u01_f32(r), lo);
  }
  return tyto_philox_u01_f64(r) < op->a ? 1.0f : 0.0f;
}

static double word_f64(const random_op *op, uint32_t r) {
  if (op->op == TYTO_PLUGIN_OP_RANDOM_UNIFORM)
    return fma(op->b - op->a, tyto_philox_u01_f64(r), op->a);
  return tyto_philox_u01_f64(r) < op->a ? 1.0 : 0.0;
}

/* Values of the 4 lanes of counter block `n` (philox.h, random.md). */
static void block_f32(const random_op *op, uint64_t n, uint64_t step,
                      float v[4]) {
  uint32_t r[4];
  tyto_philox_block_step(op->seed, op->offset + n, step, r);
  if (op->op == TYTO_PLUGIN_OP_RANDOM_NORMAL) {
    float mean = (float)op->a, sd = (float)op->b;
    for (int j = 0; j < 4; j += 2) {
      /* Box-Muller (Box and Muller, 1958). */
      float u1 = tyto_philox_u01_f32(r[j]), u2 = tyto_philox_u01_f32(r[j + 1]);
      float rad = sqrtf(-2.0f * logf(u1)), t = 6.28318530717958647692f * u2;
      v[j] = fmaf(sd, rad * cosf(t), mean);
      v[j + 1] = fmaf(sd, rad * sinf(t), mean);
    }
  } else {
    for (int j = 0; j < 4; j++)
      v[j] = word_f32(op, r[j]);
  }
}

static void block_f64(const random_op *op, uint64_t n, uint64_t step,
                      double v[4]) {
  uint32_t r[4];
  tyto_philox_block_step(op->seed, op->offset + n, step, r);
  if (op->op == TYTO_PLUGIN_OP_RANDOM_NORMAL) {
    for (int j = 0; j < 4; j += 2) {
      double u1 = tyto_philox_u01_f64(r[j]), u2 = tyto_philox_u01_f64(r[j + 1]);
      double rad = sqrt(-2.0 * log(u1)), t = 6.28318530717958647692 * u2;
      v[j] = fma(op->b, rad * cos(t), op->a);
      v[j + 1] = fma(op->b, rad * sin(t), op->a);
    }
  } else {
    for (int j = 0; j < 4; j++)
      v[j] = word_f64(op, r[j]);
  }
}

/* Philox-4x32-10 of the LANES counters n0, n0 + 1, ... (mod 2^64) at step
 * s, word j of counter n0 + l into r[j][l]: philox.h's blocks, computed
 * lane by lane in loops of a fixed length, which the compiler vectorises
 * (the 32 x 32 -> 64-bit products become packed multiplies), instead of
 * one block at a time. */
#define LANES 16
static void blocks_lanes(uint64_t seed, uint64_t n0, uint64_t s,
                         uint32_t r[4][LANES]) {
  uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
  for (int l = 0; l < LANES; l++) {
    uint64_t n = n0 + (uint64_t)l;
    c0[l] = (uint32_t)n;
    c1[l] = (uint32_t)(n >> 32);
    c2[l] = (uint32_t)s;
    c3[l] = (uint32_t)(s >> 32);
  }
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k0 += TYTO_PHILOX_W0;
      k1 += TYTO_PHILOX_W1;
    }
    for (int l = 0; l < LANES; l++) {
      /* tyto_philox_round, lane l */
      uint64_t p0 = (uint64_t)TYTO_PHILOX_M0 * c0[l];
      uint64_t p1 = (uint64_t)TYTO_PHILOX_M1 * c2[l];
      uint32_t x0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0;
      uint32_t x2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = (uint32_t)p1;
      c3[l] = (uint32_t)p0;
      c0[l] = x0;
      c2[l] = x2;
    }
  }
  for (int l = 0; l < LANES; l++) {
    r[0][l] = c0[l];
    r[1][l] = c1[l];
    r[2][l] = c2[l];
    r[3][l] = c3[l];
  }
}

/* Elements [i, i + 4 LANES) of a dense f32 or f64 output of uniform or
 * bernoulli (the normal's transcendentals stay in block_f32/f64). */
static void lanes_out(const random_op *op, uint64_t step, int64_t i, int f32,
                      unsigned char *dst) {
  uint32_t r[4][LANES];
  blocks_lanes(op->seed, op->offset + (uint64_t)(i / 4), step, r);
  for (int l = 0; l < LANES; l++)
    for (int j = 0; j < 4; j++) {
      if (f32)
        ((float *)(void *)dst)[i + 4 * l + j] = word_f32(op, r[j][l]);
      else
        ((double *)(void *)dst)[i + 4 * l + j] = word_f64(op, r[j][l]);
    }
}

static void random_chunk(void *ctx, size_t c) {
  const random_job *job = ctx;
  const tyto_plugin_layout *l = job->l;
  int64_t first = (int64_t)c * CHUNK_COUNTERS * 4;
  int64_t end =
      first + CHUNK_COUNTERS * 4 < job->n ? first + CHUNK_COUNTERS * 4 : job->n;
  const random_op *op = job->op;
  int f32 = l->dtype != TYTO_PLUGIN_DTYPE_F64; /* F16, BF16: f32's values */
  /* Dense f32 and f64 outputs of uniform and bernoulli: LANES counters at
   * a time, then the rest as below. */
  if (!op->narrow && op->op != TYTO_PLUGIN_OP_RANDOM_NORMAL && tpc_dense(l))
    for (; first + 4 * LANES <= end; first += 4 * LANES)
      lanes_out(op, job->step, first, f32,
                job->dst + l->offset * (f32 ? 4 : 8));
  /* Walk the output's multi-index alongside i. */
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0}, rest = first;
  for (uint32_t a = l->rank; a-- > 0;) {
    idx[a] = rest % l->shape[a];
    rest /= l->shape[a];
  }
  int64_t off = offset_of(l, first);
  for (int64_t i = first; i < end; i += 4) {
    float vf[4];
    double vd[4];
    if (f32)
      block_f32(op, (uint64_t)(i / 4), job->step, vf);
    else
      block_f64(op, (uint64_t)(i / 4), job->step, vd);
    for (int j = 0; j < 4 && i + j < end; j++) {
      if (op->narrow)
        op->narrow(1, (uint16_t *)(void *)job->dst + off, &vf[j]);
      else if (f32)
        ((float *)job->dst)[off] = vf[j];
      else
        ((double *)job->dst)[off] = vd[j];
      for (uint32_t a = l->rank; a-- > 0;) {
        off += l->strides[a];
        if (++idx[a] < l->shape[a])
          break;
        off -= idx[a] * l->strides[a];
        idx[a] = 0;
      }
    }
  }
}

static tyto_plugin_error *random_run(const cpu_op *base, const cpu_desc *d,
                                     unsigned char *const *args,
                                     cpu_pool *pool) {
  random_job job = {(const random_op *)base, 0, &d->out[0].l, args[d->n_in],
                    cpu_numel(&d->out[0].l)};
  if (d->n_in == 1) {
    /* The step: its value truncated to an integer (random.md). */
    const tyto_plugin_layout *sl = &d->in[0].l;
    double v;
    if (sl->dtype == TYTO_PLUGIN_DTYPE_F64) {
      v = ((const double *)args[0])[sl->offset];
    } else {
      float f;
      if (job.op->widen)
        job.op->widen(1, &f,
                      (const uint16_t *)(const void *)args[0] + sl->offset);
      else
        f = ((const float *)args[0])[sl->offset];
      v = f;
    }
    if (!(v >= 0 && v <= 0x1p53))
      return job.op->h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                  "%s: step %g is not in [0, 2^53]",
                                  cpu_op_name(job.op->op), v);
    job.step = (uint64_t)v;
  }
  if (job.n > 0) {
    size_t chunks =
        (size_t)((job.n + CHUNK_COUNTERS * 4 - 1) / (CHUNK_COUNTERS * 4));
    cpu_pool_for(pool, chunks, random_chunk, &job);
  }
  return NULL;
}

static void random_destroy(cpu_op *op) {
  free(op);
}

tyto_plugin_error *cpu_random_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc) {
  const tyto_plugin_op_desc *d = desc->d;
  const char *name = cpu_op_name(d->op);
  uint32_t want_f = d->op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 1 : 2;
  if (desc->n_in > 1 || desc->n_out != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected 0 inputs (or a step) and 1 output, got "
                        "%u and %u",
                        name, desc->n_in, desc->n_out);
  if (desc->n_in == 1 &&
      (desc->in[0].l.rank != 0 || desc->in[0].l.dtype != desc->out[0].l.dtype))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: the step input must be a rank-0 %s tensor, got "
                        "rank %u %s",
                        name, cpu_dtype_name(desc->out[0].l.dtype),
                        desc->in[0].l.rank,
                        cpu_dtype_name(desc->in[0].l.dtype));
  if (d->n_iattrs != 2)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected 2 integer attributes (seed, offset), "
                        "got %u",
                        name, d->n_iattrs);
  if (d->n_fattrs != want_f)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected %u real attributes (%s), got %u", name,
                        want_f,
                        d->op == TYTO_PLUGIN_OP_RANDOM_UNIFORM  ? "low, high"
                        : d->op == TYTO_PLUGIN_OP_RANDOM_NORMAL ? "mean, stddev"
                                                                : "p",
                        d->n_fattrs);
  double a = d->fattrs[0], b = want_f > 1 ? d->fattrs[1] : 0;
  const uint32_t dt = desc->out[0].l.dtype;
  double lim = dt == TYTO_PLUGIN_DTYPE_F32    ? FLT_MAX
               : dt == TYTO_PLUGIN_DTYPE_F16  ? 65504.0
               : dt == TYTO_PLUGIN_DTYPE_BF16 ? 0x1.fep127
                                              : DBL_MAX;
  if (d->op == TYTO_PLUGIN_OP_RANDOM_UNIFORM &&
      !(fabs(a) <= lim && fabs(b) <= lim && a <= b))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected finite low <= high in the output's "
                        "dtype %s, got low %g, high %g",
                        name, cpu_dtype_name(desc->out[0].l.dtype), a, b);
  if (d->op == TYTO_PLUGIN_OP_RANDOM_NORMAL &&
      !(fabs(a) <= lim && b >= 0 && b <= lim))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected a finite mean and a finite stddev >= 0 "
                        "in the output's dtype %s, got mean %g, stddev %g",
                        name, cpu_dtype_name(desc->out[0].l.dtype), a, b);
  if (d->op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI && !(a >= 0 && a <= 1))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected a probability p in [0, 1], got %g", name,
                        a);
  return NULL;
}

tyto_plugin_error *cpu_random_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out) {
  const tyto_plugin_op_desc *d = desc->d;
  tyto_plugin_error *e = cpu_random_check(h, desc);
  if (e)
    return e;
  random_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  op->h = h;
  op->base.run = random_run;
  op->base.destroy = random_destroy;
  op->op = d->op;
  op->seed = (uint64_t)d->iattrs[0];
  op->offset = (uint64_t)d->iattrs[1];
  op->a = d->fattrs[0];
  op->b = d->op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 0 : d->fattrs[1];
  const uint32_t dt = desc->out[0].l.dtype;
  if (cpu_dtype_half(dt)) {
    op->narrow = cpu_cvt(dt, TYTO_PLUGIN_DTYPE_F32);
    op->widen = cpu_cvt(TYTO_PLUGIN_DTYPE_F32, dt);
  }
  *out = &op->base;
  return NULL;
}
