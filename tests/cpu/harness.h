/*
 * Running one op on the CPU plugin through the plugin ABI, for the kernel
 * tests: values go in and come out as double, whatever the dtype, so that
 * each test compares against a float64 reference written in the test.
 *
 *   harness hx;
 *   harness_open(&hx);                              // cpu:0 of this build
 *   h_tensor x = h_tensor_new(F32, 2, (int64_t[]){2, 3}, values);
 *   h_tensor y = h_tensor_new(F32, 2, (int64_t[]){2, 3}, NULL);
 *   const char *err = harness_run(&hx, TYTO_PLUGIN_OP_EXP, &x, 1, &y, 1,
 *                                 NULL, 0, NULL, 0);  // NULL: success
 *   ... y.values[i] ...
 *   h_tensor_free(&x); h_tensor_free(&y); harness_close(&hx);
 *
 * A tensor's layout may be edited before the run (strides, offset) to test
 * non-contiguous inputs: the data buffer holds `storage` elements and the
 * layout's offset/strides index into it.
 *
 * F16 and BF16 values go in rounded to the dtype and come out exactly, by
 * the tests' own converter (half_ref.h), not the plugin's.
 */
#ifndef TYTO_TESTS_CPU_HARNESS_H
#define TYTO_TESTS_CPU_HARNESS_H

#include "common.h"

#include "runtime/error.h"
#include "runtime/runtime.h"

#include "cpu/half_ref.h"

#define F32 TYTO_PLUGIN_DTYPE_F32
#define F64 TYTO_PLUGIN_DTYPE_F64
#define F16 TYTO_PLUGIN_DTYPE_F16
#define BF16 TYTO_PLUGIN_DTYPE_BF16
#define I32 TYTO_PLUGIN_DTYPE_I32
#define I64 TYTO_PLUGIN_DTYPE_I64

typedef struct harness {
  tyto_context *ctx;
  tyto_device *dev;
  char error[2048];
} harness;

typedef struct h_tensor {
  tyto_plugin_layout layout;
  int64_t storage; /* elements in the data buffer */
  double *values;  /* `storage` values, read and written as doubles */
  int64_t *ints;   /* I32, I64 only (ABI 1.6; else NULL): the values,
                      exactly; values[] holds them as doubles after a run */
} h_tensor;

static inline void harness_open(harness *hx) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  ck_assert_msg(tyto_context_new(&o, &hx->ctx) == TYTO_OK, "%s", tyto_errmsg());
  hx->dev = tyto_context_device(hx->ctx, 0);
}

static inline void harness_close(harness *hx) {
  tyto_context_free(hx->ctx);
}

/* A row-major tensor; values may be NULL (zeros). */
static inline h_tensor h_tensor_new(uint32_t dtype, uint32_t rank,
                                    const int64_t *shape,
                                    const double *values) {
  h_tensor t;
  memset(&t, 0, sizeof t);
  t.layout.struct_size = sizeof t.layout;
  t.layout.dtype = dtype;
  t.layout.rank = rank;
  int64_t n = 1;
  for (uint32_t i = rank; i-- > 0;) {
    t.layout.shape[i] = shape[i];
    t.layout.strides[i] = n;
    n *= shape[i];
  }
  t.storage = n;
  t.values = calloc(n ? (size_t)n : 1, sizeof(double));
  if (dtype == I32 || dtype == I64) /* float tensors are copied freely */
    t.ints = calloc(n ? (size_t)n : 1, sizeof(int64_t));
  if (values)
    memcpy(t.values, values, (size_t)n * sizeof(double));
  return t;
}

static inline void h_tensor_free(h_tensor *t) {
  free(t->values);
  free(t->ints);
  t->values = NULL;
  t->ints = NULL;
}

/* Element index into `values` of the multi-index idx (rank entries). */
static inline int64_t h_at(const h_tensor *t, const int64_t *idx) {
  int64_t off = t->layout.offset;
  for (uint32_t i = 0; i < t->layout.rank; i++)
    off += idx[i] * t->layout.strides[i];
  return off;
}

static inline size_t h_size(uint32_t dtype) {
  return dtype == F32 || dtype == I32   ? 4
         : dtype == F64 || dtype == I64 ? 8
                                        : 2;
}

/* The 16-bit format of dtype F16 or BF16. */
static inline ref_fmt h_fmt(uint32_t dtype) {
  return dtype == F16 ? REF_F16 : REF_BF16;
}

static inline void h_pack(const h_tensor *t, unsigned char *bytes) {
  for (int64_t i = 0; i < t->storage; i++) {
    if (t->layout.dtype == I32) {
      int32_t v = (int32_t)t->ints[i];
      memcpy(bytes + 4 * i, &v, 4);
    } else if (t->layout.dtype == I64) {
      memcpy(bytes + 8 * i, &t->ints[i], 8);
    } else if (t->layout.dtype == F32) {
      float f = (float)t->values[i];
      memcpy(bytes + 4 * i, &f, 4);
    } else if (t->layout.dtype == F64) {
      memcpy(bytes + 8 * i, &t->values[i], 8);
    } else {
      uint16_t b = (uint16_t)ref_encode(t->values[i], h_fmt(t->layout.dtype));
      memcpy(bytes + 2 * i, &b, 2);
    }
  }
}

static inline void h_unpack(h_tensor *t, const unsigned char *bytes) {
  for (int64_t i = 0; i < t->storage; i++) {
    if (t->layout.dtype == I32) {
      int32_t v;
      memcpy(&v, bytes + 4 * i, 4);
      t->ints[i] = v;
      t->values[i] = (double)v;
    } else if (t->layout.dtype == I64) {
      memcpy(&t->ints[i], bytes + 8 * i, 8);
      t->values[i] = (double)t->ints[i];
    } else if (t->layout.dtype == F32) {
      float f;
      memcpy(&f, bytes + 4 * i, 4);
      t->values[i] = f;
    } else if (t->layout.dtype == F64) {
      memcpy(&t->values[i], bytes + 8 * i, 8);
    } else {
      uint16_t b;
      memcpy(&b, bytes + 2 * i, 2);
      t->values[i] = ref_decode(b, h_fmt(t->layout.dtype));
    }
  }
}

/* Runs one op: uploads every input and output (outputs' current values
 * too, so untouched elements can be checked), launches, downloads the
 * outputs. Returns NULL, or the error message of whichever step failed
 * (supports_op, prepare or launch; the text stays in hx->error). */
static inline const char *harness_run(harness *hx, uint32_t op, h_tensor *in,
                                      uint32_t n_in, h_tensor *out,
                                      uint32_t n_out, const int64_t *iattrs,
                                      uint32_t n_iattrs, const double *fattrs,
                                      uint32_t n_fattrs) {
  tyto_device *dev = hx->dev;
  const tyto_plugin_device_fns *f = &dev->plugin->dfns;
  tyto_plugin_device *h = dev->handle;
  tyto_plugin_layout lin[4], lout[4];
  for (uint32_t i = 0; i < n_in; i++)
    lin[i] = in[i].layout;
  for (uint32_t i = 0; i < n_out; i++)
    lout[i] = out[i].layout;
  tyto_plugin_op_desc d = {sizeof d, op,     n_in,     n_out,  lin, lout,
                           n_iattrs, iattrs, n_fattrs, fattrs, 0,   NULL};
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
  tyto_plugin_stream *s;
  ck_assert_ptr_null(f->stream_create(h, &s));
  tyto_plugin_buffer *bin[4] = {0}, *bout[4] = {0}, *ws = NULL;
  tyto_plugin_binding b_in[4], b_out[4], b_ws = {sizeof b_ws, NULL, 0};
  unsigned char *tmp[8] = {0};
  for (uint32_t i = 0; i < n_in + n_out; i++) {
    h_tensor *t = i < n_in ? &in[i] : &out[i - n_in];
    size_t bytes =
        (size_t)(t->storage ? t->storage : 1) * h_size(t->layout.dtype);
    tmp[i] = calloc(1, bytes);
    h_pack(t, tmp[i]);
    tyto_plugin_buffer **b = i < n_in ? &bin[i] : &bout[i - n_in];
    ck_assert_ptr_null(f->buffer_alloc(h, bytes, b));
    ck_assert_ptr_null(f->copy_h2d(h, NULL, *b, 0, tmp[i], bytes));
    tyto_plugin_binding *bd = i < n_in ? &b_in[i] : &b_out[i - n_in];
    bd->struct_size = sizeof *bd;
    bd->buffer = *b;
    bd->offset = 0;
  }
  if (ki.workspace_bytes) {
    ck_assert_ptr_null(f->buffer_alloc(h, ki.workspace_bytes, &ws));
    b_ws.buffer = ws;
  }
  const char *result = NULL;
  err = f->launch(h, s, k, b_in, n_in, b_out, n_out, ws ? &b_ws : NULL);
  if (!err)
    err = f->stream_synchronize(h, s);
  if (err) {
    snprintf(hx->error, sizeof hx->error, "%s", rt_error_message(err));
    rt_error_free(err);
    result = hx->error;
  } else {
    for (uint32_t i = 0; i < n_out; i++) {
      size_t bytes = (size_t)(out[i].storage ? out[i].storage : 1) *
                     h_size(out[i].layout.dtype);
      ck_assert_ptr_null(
          f->copy_d2h(h, NULL, tmp[n_in + i], bout[i], 0, bytes));
      h_unpack(&out[i], tmp[n_in + i]);
    }
  }
  for (uint32_t i = 0; i < n_in + n_out; i++)
    free(tmp[i]);
  for (uint32_t i = 0; i < 4; i++) {
    f->buffer_free(h, bin[i]);
    f->buffer_free(h, bout[i]);
  }
  f->buffer_free(h, ws);
  f->kernel_release(h, k);
  f->stream_destroy(h, s);
  return result;
}

/* |a - b| <= atol + rtol * |b|, with NaNs equal to NaNs and infinities to
 * themselves. */
static inline int h_close(double a, double b, double rtol, double atol) {
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b))
    return a == b;
  return fabs(a - b) <= atol + rtol * fabs(b);
}

#endif
