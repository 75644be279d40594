/*
 * Helpers of the 16-bit dtype tests (test_half.c, test_half_elt.c,
 * test_half_ops.c): random values, rounding by the tests' converter
 * (half_ref.h), and one-output runs on raw bit patterns.
 */
#ifndef TYTO_TESTS_CPU_HALF_TEST_H
#define TYTO_TESTS_CPU_HALF_TEST_H

#include "cpu/harness.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

static uint64_t rng = 0x2545f4914f6cdd1dULL; /* each test program its own */
static inline uint64_t rnd64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static inline double rnd_in(double lo, double hi) {
  return lo + (hi - lo) * ((double)(rnd64() >> 11) / 9007199254740992.0);
}

static inline const char *dt_name(uint32_t dt) {
  return dt == F32 ? "f32" : dt == F64 ? "f64" : dt == F16 ? "f16" : "bf16";
}

/* x rounded to dtype dt (the tests' converter; f64: x). */
static inline double round_to(double x, uint32_t dt) {
  if (dt == F64 || isnan(x))
    return x;
  return ref_round(x, dt == F32 ? REF_F32 : h_fmt(dt));
}

/* Equal bits, NaN equal to NaN (as doubles: the values of any dtype). */
static inline int same(double a, double b) {
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b);
  return memcmp(&a, &b, sizeof a) == 0;
}

/* ------------------------------------------------------------------------ */
/* Raw runs: bit patterns in, bit patterns out                               */
/* ------------------------------------------------------------------------ */

/* Runs a one-output op on raw bytes: `in` (in_bytes, may be NULL for no
 * input) laid out as lin, into `out` (out_bytes, uploaded first) laid out
 * as lout. Returns NULL or the error message. */
static inline const char *
run_raw(harness *hx, uint32_t op, const tyto_plugin_layout *lin, const void *in,
        size_t in_bytes, const tyto_plugin_layout *lout, void *out,
        size_t out_bytes, const double *fattrs, uint32_t n_fattrs) {
  const tyto_plugin_device_fns *f = &hx->dev->plugin->dfns;
  tyto_plugin_device *h = hx->dev->handle;
  tyto_plugin_op_desc d = {sizeof d, op,   lin ? 1 : 0, 1,      lin, lout,
                           0,        NULL, n_fattrs,    fattrs, 0,   NULL};
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  tyto_plugin_error *err = f->supports_op(h, &d);
  if (!err)
    err = f->prepare(h, &d, &k, &ki);
  if (err) {
    snprintf(hx->error, sizeof hx->error, "%s", rt_error_message(err));
    rt_error_free(err);
    return hx->error;
  }
  ck_assert_uint_eq(ki.workspace_bytes, 0);
  tyto_plugin_stream *s;
  ck_assert_ptr_null(f->stream_create(h, &s));
  tyto_plugin_buffer *bi = NULL, *bo = NULL;
  tyto_plugin_binding b_in = {sizeof b_in, NULL, 0},
                      b_out = {sizeof b_out, NULL, 0};
  if (lin) {
    ck_assert_ptr_null(f->buffer_alloc(h, in_bytes, &bi));
    ck_assert_ptr_null(f->copy_h2d(h, NULL, bi, 0, in, in_bytes));
    b_in.buffer = bi;
  }
  ck_assert_ptr_null(f->buffer_alloc(h, out_bytes, &bo));
  ck_assert_ptr_null(f->copy_h2d(h, NULL, bo, 0, out, out_bytes));
  b_out.buffer = bo;
  err = f->launch(h, s, k, lin ? &b_in : NULL, lin ? 1 : 0, &b_out, 1, NULL);
  if (!err)
    err = f->stream_synchronize(h, s);
  ck_assert_msg(err == NULL, "launch: %s", err ? rt_error_message(err) : "");
  ck_assert_ptr_null(f->copy_d2h(h, NULL, out, bo, 0, out_bytes));
  f->buffer_free(h, bi);
  f->buffer_free(h, bo);
  f->kernel_release(h, k);
  f->stream_destroy(h, s);
  return NULL;
}

static inline tyto_plugin_layout dense1(uint32_t dt, int64_t n) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = dt;
  l.rank = 1;
  l.shape[0] = n;
  l.strides[0] = 1;
  return l;
}

/* Element i of raw dtype-dt data: its value (exactly) and its bits. */
static inline double raw_value(uint32_t dt, const void *p, int64_t i) {
  const unsigned char *b = p;
  if (dt == F64) {
    double d;
    memcpy(&d, b + 8 * i, 8);
    return d;
  }
  if (dt == F32) {
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f; /* exact: this thread runs without DAZ */
  }
  uint16_t h;
  memcpy(&h, b + 2 * i, 2);
  return ref_decode(h, h_fmt(dt));
}

static inline uint64_t raw_bits(uint32_t dt, const void *p, int64_t i) {
  uint64_t u = 0;
  memcpy(&u, (const unsigned char *)p + (int64_t)h_size(dt) * i, h_size(dt));
  return u;
}

/* The bits of v in dtype dt, rounded once (the reference). */
static inline uint64_t want_bits(double v, uint32_t dt) {
  if (dt == F64) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return u;
  }
  return ref_encode(v, dt == F32 ? REF_F32 : h_fmt(dt));
}

#endif
