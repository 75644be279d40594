/*
 * The device contract, run on every device this build can open here (the
 * CPU, OpenCL on PoCL, CUDA where a GPU exists): memory, copies, streams
 * and events in order across streams, the COPY and FILL kernels against a
 * host reference, and copies between devices of different plugins.
 */
#include "common.h"

#include <math.h>

#include "runtime/error.h"
#include "runtime/runtime.h"

static tyto_context *open_all(void) {
  tyto_context_options o;
  test_options(&o, 0);
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  return ctx;
}

static void ok(tyto_plugin_error *err, const char *what, const tyto_device *d) {
  ck_assert_msg(err == NULL, "%s on %s: %s", what, d->info.id,
                rt_error_message(err));
}

START_TEST(buffers_and_sync_copies) {
  tyto_context *ctx = open_all();
  for (size_t i = 0; i < tyto_context_device_count(ctx); i++) {
    tyto_device *dev = tyto_context_device(ctx, i);
    tyto_buffer *empty, *b;
    ck_assert_int_eq(tyto_buffer_new(dev, 0, &empty), TYTO_OK);
    ck_assert_uint_eq(tyto_buffer_size(empty), 0);
    ck_assert_int_eq(tyto_buffer_write(empty, 0, NULL, 0), TYTO_OK);
    tyto_buffer_free(empty);

    size_t n = 1 << 20;
    ck_assert_int_eq(tyto_buffer_new(dev, n * sizeof(float), &b), TYTO_OK);
    ck_assert_ptr_eq(tyto_buffer_device(b), dev);
    float *host = malloc(n * sizeof *host), *back = calloc(n, sizeof *back);
    for (size_t k = 0; k < n; k++)
      host[k] = (float)k * 0.5f - 3.0f;
    ck_assert_int_eq(tyto_buffer_write(b, 0, host, n * sizeof *host), TYTO_OK);
    ck_assert_int_eq(tyto_buffer_read(b, 0, back, n * sizeof *back), TYTO_OK);
    ck_assert_int_eq(memcmp(host, back, n * sizeof *host), 0);

    /* Within the device: shift the second half onto the first. */
    tyto_buffer *c;
    ck_assert_int_eq(tyto_buffer_new(dev, n * sizeof(float), &c), TYTO_OK);
    ck_assert_int_eq(
        tyto_buffer_copy(c, 0, b, n / 2 * sizeof(float), n / 2 * sizeof(float)),
        TYTO_OK);
    ck_assert_int_eq(tyto_buffer_read(c, 0, back, n / 2 * sizeof *back),
                     TYTO_OK);
    ck_assert_int_eq(memcmp(host + n / 2, back, n / 2 * sizeof *host), 0);

    /* Out of range: refused, with the range and the size in the message. */
    ck_assert_int_eq(tyto_buffer_write(b, n * sizeof(float) - 2, host, 4),
                     TYTO_ERR_INVALID_ARGUMENT);
    char expected[256];
    snprintf(expected, sizeof expected,
             "tyto_buffer_write: range [%zu, %zu + 4) lies outside the "
             "buffer of %zu bytes on %s",
             n * sizeof(float) - 2, n * sizeof(float) - 2, n * sizeof(float),
             dev->info.id);
    ck_assert_str_eq(tyto_errmsg(), expected);
    free(host);
    free(back);
    tyto_buffer_free(b);
    tyto_buffer_free(c);
  }
  tyto_context_free(ctx);
}
END_TEST

START_TEST(streams_and_events_order_work) {
  tyto_context *ctx = open_all();
  for (size_t i = 0; i < tyto_context_device_count(ctx); i++) {
    tyto_device *dev = tyto_context_device(ctx, i);
    const tyto_plugin_device_fns *f = &dev->plugin->dfns;
    tyto_plugin_device *h = dev->handle;
    size_t n = 4 << 20; /* big enough that the copies take a while */
    unsigned char *src = malloc(n), *dst = calloc(n, 1);
    for (size_t k = 0; k < n; k++)
      src[k] = (unsigned char)(k * 7 + 3);
    tyto_plugin_buffer *a, *b;
    tyto_plugin_stream *s1, *s2;
    tyto_plugin_event *e, *fresh;
    ok(f->buffer_alloc(h, n, &a), "alloc", dev);
    ok(f->buffer_alloc(h, n, &b), "alloc", dev);
    ok(f->stream_create(h, &s1), "stream_create", dev);
    ok(f->stream_create(h, &s2), "stream_create", dev);
    ok(f->event_create(h, &e), "event_create", dev);
    ok(f->event_create(h, &fresh), "event_create", dev);
    int complete = 0;
    ok(f->event_query(h, fresh, &complete), "event_query", dev);
    ck_assert_msg(complete, "a new event counts as complete on %s",
                  dev->info.id);

    for (int round = 0; round < 3; round++) {
      memset(dst, 0, n);
      /* s1: upload then copy A -> B, then mark; s2 waits for the mark and
       * downloads B. Without the wait s2 would read B too early. */
      ok(f->copy_h2d(h, s1, a, 0, src, n), "copy_h2d", dev);
      ok(f->copy_d2d(h, s1, b, 0, a, 0, n), "copy_d2d", dev);
      ok(f->event_record(h, e, s1), "event_record", dev);
      ok(f->event_wait(h, s2, e), "event_wait", dev);
      ok(f->copy_d2h(h, s2, dst, b, 0, n), "copy_d2h", dev);
      ok(f->stream_synchronize(h, s2), "stream_synchronize", dev);
      complete = 0;
      ok(f->event_query(h, e, &complete), "event_query", dev);
      ck_assert_msg(complete, "event complete after its waiter on %s",
                    dev->info.id);
      ck_assert_msg(memcmp(src, dst, n) == 0, "round %d on %s: data differs",
                    round, dev->info.id);
    }
    ok(f->event_synchronize(h, e), "event_synchronize", dev);
    ok(f->stream_synchronize(h, s1), "stream_synchronize", dev);

    /* An asynchronous copy out of range is refused when enqueued. */
    tyto_plugin_error *err = f->copy_h2d(h, s1, a, n - 1, src, 2);
    ck_assert_ptr_nonnull(err);
    ck_assert_int_eq(rt_status_of(err), TYTO_ERR_INVALID_ARGUMENT);
    rt_error_free(err);

    f->event_destroy(h, e);
    f->event_destroy(h, fresh);
    f->stream_destroy(h, s1);
    f->stream_destroy(h, s2);
    f->buffer_free(h, a);
    f->buffer_free(h, b);
    free(src);
    free(dst);
  }
  tyto_context_free(ctx);
}
END_TEST

/* Runs one COPY or FILL on dev and returns the output bytes (malloc'd). */
static void *run_op(tyto_device *dev, uint32_t op, const tyto_plugin_layout *in,
                    const void *in_data, size_t in_bytes,
                    const tyto_plugin_layout *out, size_t out_bytes,
                    double value, int *supported) {
  const tyto_plugin_device_fns *f = &dev->plugin->dfns;
  tyto_plugin_device *h = dev->handle;
  tyto_plugin_op_desc d = {sizeof d, op,   in ? 1 : 0, 1,      in, out,
                           0,        NULL, 1,          &value, 0,  NULL};
  *supported = 0;
  if (!f->prepare)
    return NULL;
  tyto_plugin_error *err = f->supports_op ? f->supports_op(h, &d) : NULL;
  if (err) {
    ck_assert_int_eq(rt_status_of(err), TYTO_ERR_UNSUPPORTED);
    rt_error_free(err);
    return NULL;
  }
  *supported = 1;
  tyto_plugin_kernel *k;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  ok(f->prepare(h, &d, &k, &ki), "prepare", dev);
  tyto_plugin_buffer *ib = NULL, *ob;
  tyto_plugin_stream *s;
  ok(f->stream_create(h, &s), "stream_create", dev);
  if (in) {
    ok(f->buffer_alloc(h, in_bytes, &ib), "alloc", dev);
    ok(f->copy_h2d(h, NULL, ib, 0, in_data, in_bytes), "copy_h2d", dev);
  }
  ok(f->buffer_alloc(h, out_bytes, &ob), "alloc", dev);
  void *result = calloc(1, out_bytes);
  ok(f->copy_h2d(h, NULL, ob, 0, result, out_bytes), "zero the output", dev);
  tyto_plugin_binding bi = {sizeof bi, ib, 0}, bo = {sizeof bo, ob, 0};
  ok(f->launch(h, s, k, in ? &bi : NULL, in ? 1 : 0, &bo, 1, NULL), "launch",
     dev);
  ok(f->copy_d2h(h, s, result, ob, 0, out_bytes), "copy_d2h", dev);
  ok(f->stream_synchronize(h, s), "stream_synchronize", dev);
  f->kernel_release(h, k);
  f->buffer_free(h, ib);
  f->buffer_free(h, ob);
  f->stream_destroy(h, s);
  return result;
}

static tyto_plugin_layout layout(uint32_t dtype, uint32_t rank,
                                 const int64_t *shape, const int64_t *strides,
                                 int64_t offset) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = dtype;
  l.rank = rank;
  for (uint32_t i = 0; i < rank; i++) {
    l.shape[i] = shape[i];
    l.strides[i] = strides[i];
  }
  l.offset = offset;
  return l;
}

START_TEST(copy_and_fill_kernels) {
  tyto_context *ctx = open_all();
  for (size_t i = 0; i < tyto_context_device_count(ctx); i++) {
    tyto_device *dev = tyto_context_device(ctx, i);
    for (uint32_t dt = TYTO_PLUGIN_DTYPE_F32; dt <= TYTO_PLUGIN_DTYPE_F64;
         dt++) {
      if (!(dev->info.dtypes & (1u << dt)))
        continue;
      size_t es = dt == TYTO_PLUGIN_DTYPE_F32 ? 4 : 8;
      /* Source data: 3x4 row-major, values 1..12 (exact in both dtypes). */
      double vals[12];
      unsigned char src[12 * 8];
      for (int k = 0; k < 12; k++) {
        vals[k] = k + 1;
        if (es == 4) {
          float fv = (float)vals[k];
          memcpy(src + 4 * k, &fv, 4);
        } else {
          memcpy(src + 8 * k, &vals[k], 8);
        }
      }
      struct {
        const char *what;
        uint32_t rank;
        int64_t shape[3], in_strides[3], in_offset;
      } cases[] = {
          {"transpose 3x4 -> 4x3", 2, {4, 3}, {1, 4}, 0},
          {"flip both axes", 2, {3, 4}, {-4, -1}, 11},
          {"broadcast row 1 to 5x4", 2, {5, 4}, {0, 1}, 4},
          {"stepped slice [::2, 1::2]", 2, {2, 2}, {8, 2}, 1},
          {"rank 0", 0, {0}, {0}, 7},
          {"size 0", 2, {0, 4}, {4, 1}, 0},
          {"rank 3 permute", 3, {2, 2, 3}, {1, 6, 2}, 0},
      };
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t out_strides[3], numel = 1;
        for (int a = (int)cases[c].rank - 1; a >= 0; a--) {
          out_strides[a] = numel;
          numel *= cases[c].shape[a];
        }
        tyto_plugin_layout in = layout(dt, cases[c].rank, cases[c].shape,
                                       cases[c].in_strides, cases[c].in_offset);
        tyto_plugin_layout out =
            layout(dt, cases[c].rank, cases[c].shape, out_strides, 0);
        int sup;
        unsigned char *got =
            run_op(dev, TYTO_PLUGIN_OP_COPY, &in, src, sizeof src / 8 * es,
                   &out, numel ? (size_t)numel * es : 1, 0, &sup);
        if (!sup)
          continue;
        /* Reference: walk the output in row-major order. */
        for (int64_t e = 0; e < numel; e++) {
          int64_t rem = e, off = cases[c].in_offset;
          for (int a = (int)cases[c].rank - 1; a >= 0; a--) {
            off += (rem % cases[c].shape[a]) * cases[c].in_strides[a];
            rem /= cases[c].shape[a];
          }
          double want = vals[off], have;
          if (es == 4) {
            float fv;
            memcpy(&fv, got + 4 * e, 4);
            have = fv;
          } else {
            memcpy(&have, got + 8 * e, 8);
          }
          ck_assert_msg(have == want,
                        "%s, %s on %s: element %lld is %g, "
                        "expected %g",
                        cases[c].what, es == 4 ? "f32" : "f64", dev->info.id,
                        (long long)e, have, want);
        }
        free(got);
      }
      /* FILL a 3x5 with 2.5. */
      int64_t shape[2] = {3, 5}, strides[2] = {5, 1};
      tyto_plugin_layout out = layout(dt, 2, shape, strides, 0);
      int sup;
      unsigned char *got = run_op(dev, TYTO_PLUGIN_OP_FILL, NULL, NULL, 0, &out,
                                  15 * es, 2.5, &sup);
      if (!sup)
        continue;
      for (int e = 0; e < 15; e++) {
        double have;
        if (es == 4) {
          float fv;
          memcpy(&fv, got + 4 * e, 4);
          have = fv;
        } else {
          memcpy(&have, got + 8 * e, 8);
        }
        ck_assert_msg(have == 2.5, "fill on %s: element %d is %g", dev->info.id,
                      e, have);
      }
      free(got);
    }
  }
  tyto_context_free(ctx);
}
END_TEST

START_TEST(launch_outside_the_buffer_is_refused) {
  tyto_context *ctx = open_all();
  tyto_device *dev = tyto_context_find_device(ctx, "cpu:0");
  const tyto_plugin_device_fns *f = &dev->plugin->dfns;
  int64_t shape[1] = {16}, strides[1] = {1};
  tyto_plugin_layout out = layout(TYTO_PLUGIN_DTYPE_F32, 1, shape, strides, 0);
  double v = 1;
  tyto_plugin_op_desc d = {
      sizeof d, TYTO_PLUGIN_OP_FILL, 0, 1, NULL, &out, 0, NULL, 1, &v, 0, NULL};
  tyto_plugin_kernel *k;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  ok(f->prepare(dev->handle, &d, &k, &ki), "prepare", dev);
  tyto_plugin_buffer *small;
  tyto_plugin_stream *s;
  ok(f->buffer_alloc(dev->handle, 32, &small), "alloc", dev);
  ok(f->stream_create(dev->handle, &s), "stream", dev);
  tyto_plugin_binding bo = {sizeof bo, small, 0};
  tyto_plugin_error *err = f->launch(dev->handle, s, k, NULL, 0, &bo, 1, NULL);
  ck_assert_ptr_nonnull(err);
  ck_assert_str_eq(rt_error_message(err),
                   "fill: the output layout reaches outside its buffer of 32 "
                   "bytes (bound at offset 0)");
  rt_error_free(err);
  f->stream_destroy(dev->handle, s);
  f->buffer_free(dev->handle, small);
  f->kernel_release(dev->handle, k);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(copies_between_devices) {
  tyto_context *ctx = open_all();
  tyto_device *cpu = tyto_context_find_device(ctx, "cpu:0");
  size_t n = 3 << 20; /* more than one staging chunk */
  unsigned char *src = malloc(n), *back = malloc(n);
  for (size_t k = 0; k < n; k++)
    src[k] = (unsigned char)(k ^ (k >> 8));
  tyto_buffer *a;
  ck_assert_int_eq(tyto_buffer_new(cpu, n, &a), TYTO_OK);
  ck_assert_int_eq(tyto_buffer_write(a, 0, src, n), TYTO_OK);
  for (size_t i = 0; i < tyto_context_device_count(ctx); i++) {
    tyto_device *dev = tyto_context_device(ctx, i);
    tyto_buffer *b, *c;
    ck_assert_int_eq(tyto_buffer_new(dev, n, &b), TYTO_OK);
    ck_assert_int_eq(tyto_buffer_new(cpu, n, &c), TYTO_OK);
    ck_assert_int_eq(tyto_buffer_copy(b, 0, a, 0, n), TYTO_OK);
    ck_assert_int_eq(tyto_buffer_copy(c, 0, b, 0, n), TYTO_OK);
    memset(back, 0, n);
    ck_assert_int_eq(tyto_buffer_read(c, 0, back, n), TYTO_OK);
    ck_assert_msg(memcmp(src, back, n) == 0, "cpu:0 -> %s -> cpu:0 differs",
                  dev->info.id);
    tyto_buffer_free(b);
    tyto_buffer_free(c);
  }
  tyto_buffer_free(a);
  free(src);
  free(back);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(cpu_kernel_checks_and_lifetime) {
  tyto_context *ctx = open_all();
  tyto_device *dev = tyto_context_find_device(ctx, "cpu:0");
  const tyto_plugin_device_fns *f = &dev->plugin->dfns;
  tyto_plugin_device *h = dev->handle;
  double v = 3;
  /* A layout whose reach overflows 64 bits is refused at prepare. */
  int64_t huge_shape[1] = {((int64_t)1 << 61) + 1}, huge_stride[1] = {8};
  tyto_plugin_layout huge =
      layout(TYTO_PLUGIN_DTYPE_F32, 1, huge_shape, huge_stride, 0);
  tyto_plugin_op_desc d = {
      sizeof d, TYTO_PLUGIN_OP_FILL, 0, 1, NULL, &huge, 0, NULL, 1, &v, 0,
      NULL};
  tyto_plugin_kernel *k;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  tyto_plugin_error *err = f->prepare(h, &d, &k, &ki);
  ck_assert_ptr_nonnull(err);
  ck_assert_str_eq(rt_error_message(err), "fill: the output layout spans more "
                                          "bytes than 64 bits can count");
  rt_error_free(err);

  /* A misaligned binding is refused at launch. */
  int64_t shape[1] = {8}, stride[1] = {1};
  tyto_plugin_layout out = layout(TYTO_PLUGIN_DTYPE_F32, 1, shape, stride, 0);
  d.outputs = &out;
  ok(f->prepare(h, &d, &k, &ki), "prepare", dev);
  tyto_plugin_buffer *b;
  tyto_plugin_stream *s;
  ok(f->buffer_alloc(h, 64, &b), "alloc", dev);
  ok(f->stream_create(h, &s), "stream", dev);
  tyto_plugin_binding bo = {sizeof bo, b, 2};
  err = f->launch(h, s, k, NULL, 0, &bo, 1, NULL);
  ck_assert_ptr_nonnull(err);
  ck_assert_str_eq(rt_error_message(err),
                   "fill: the output binding's offset 2 is not a multiple of "
                   "the element size 4");
  rt_error_free(err);

  /* Releasing a kernel with launches still queued is safe: they run. */
  bo.offset = 0;
  for (int i = 0; i < 8; i++)
    ok(f->launch(h, s, k, NULL, 0, &bo, 1, NULL), "launch", dev);
  f->kernel_release(h, k);
  float back[8];
  ok(f->copy_d2h(h, s, back, b, 0, sizeof back), "copy_d2h", dev);
  ok(f->stream_synchronize(h, s), "sync", dev);
  for (int i = 0; i < 8; i++)
    ck_assert_msg(back[i] == 3.0f, "element %d is %g", i, back[i]);

  /* f32 fill of a value beyond f32's range gives infinity. */
  v = 1e300;
  ok(f->prepare(h, &d, &k, &ki), "prepare", dev);
  ok(f->launch(h, s, k, NULL, 0, &bo, 1, NULL), "launch", dev);
  f->kernel_release(h, k);
  ok(f->copy_d2h(h, s, back, b, 0, sizeof back), "copy_d2h", dev);
  ok(f->stream_synchronize(h, s), "sync", dev);
  ck_assert(isinf(back[0]) && back[0] > 0);
  f->stream_destroy(h, s);
  f->buffer_free(h, b);
  tyto_context_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("device");
  TCase *tc = tcase_create("contract");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, buffers_and_sync_copies);
  tcase_add_test(tc, streams_and_events_order_work);
  tcase_add_test(tc, copy_and_fill_kernels);
  tcase_add_test(tc, launch_outside_the_buffer_is_refused);
  tcase_add_test(tc, copies_between_devices);
  tcase_add_test(tc, cpu_kernel_checks_and_lifetime);
  suite_add_tcase(s, tc);
  return test_run(s);
}
