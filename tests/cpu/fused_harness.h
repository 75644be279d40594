/*
 * Building FUSED programs and running them as one kernel through the plugin
 * ABI, for the fused-kernel tests (test_fused.c, test_half.c):
 *
 *   prog p = {.n = 0, .dtype = F32};
 *   uint32_t x = IN(&p, 0), y = OP1(&p, NEG, x);
 *   OUT(&p, y, 0);
 *   const char *err = fused_run(&hx, &p, in, 1, out, 1, NULL);
 */
#ifndef TYTO_TESTS_CPU_FUSED_HARNESS_H
#define TYTO_TESTS_CPU_FUSED_HARNESS_H

#include "cpu/harness.h"

#define MAXI 512 /* instructions in a test program */
#define MAXV TYTO_PLUGIN_FUSED_MAX_IO

/* dtype: the program's one dtype, which its CONSTs carry (ABI 1.5: a
 * CONST's dtype field is read; 0 is F32). */
typedef struct prog {
  tyto_plugin_fused_instr ins[MAXI];
  uint32_t n;
  uint32_t dtype;
} prog;

static inline uint32_t emit(prog *p, uint32_t op, uint32_t a0, uint32_t a1,
                            uint32_t a2, double attr) {
  ck_assert_uint_lt(p->n, MAXI);
  tyto_plugin_fused_instr *i = &p->ins[p->n];
  memset(i, 0, sizeof *i);
  i->struct_size = sizeof *i;
  i->op = op;
  i->arg[0] = a0;
  i->arg[1] = a1;
  i->arg[2] = a2;
  i->attr = attr;
  i->dtype = p->dtype;
  return p->n++;
}

#define IN(p, k) emit(p, TYTO_PLUGIN_FUSED_INPUT, k, 0, 0, 0)
#define CONST(p, c) emit(p, TYTO_PLUGIN_FUSED_CONST, 0, 0, 0, c)
#define OUT(p, v, k) emit(p, TYTO_PLUGIN_FUSED_OUTPUT, v, k, 0, 0)
#define OP1(p, o, a) emit(p, TYTO_PLUGIN_OP_##o, a, 0, 0, 0)
#define OP2(p, o, a, b) emit(p, TYTO_PLUGIN_OP_##o, a, b, 0, 0)
#define OP3(p, o, a, b, c) emit(p, TYTO_PLUGIN_OP_##o, a, b, c, 0)

/* The descriptor of a FUSED op over these tensors and program. */
static inline tyto_plugin_op_desc
fused_desc(const h_tensor *in, uint32_t n_in, const h_tensor *out,
           uint32_t n_out, tyto_plugin_layout *lin, tyto_plugin_layout *lout,
           const tyto_plugin_fused_program *fp, size_t blob_size) {
  for (uint32_t i = 0; i < n_in; i++)
    lin[i] = in[i].layout;
  for (uint32_t i = 0; i < n_out; i++)
    lout[i] = out[i].layout;
  tyto_plugin_op_desc d = {sizeof d,  TYTO_PLUGIN_OP_FUSED,
                           n_in,      n_out,
                           lin,       lout,
                           0,         NULL,
                           0,         NULL,
                           blob_size, fp};
  return d;
}

/* Runs `p` as one FUSED kernel. alias[k] >= 0 binds output k to input
 * alias[k]'s buffer (their layouts must match); the result is then read
 * back from that buffer into out[k]. Returns NULL or the error message
 * (supports_op's, checked to equal prepare's). */
static inline const char *fused_run(harness *hx, const prog *p, h_tensor *in,
                                    uint32_t n_in, h_tensor *out,
                                    uint32_t n_out, const int *alias) {
  const tyto_plugin_device_fns *f = &hx->dev->plugin->dfns;
  tyto_plugin_device *h = hx->dev->handle;
  tyto_plugin_layout lin[MAXV + 1], lout[MAXV + 1];
  tyto_plugin_fused_program fp = {sizeof fp, p->n, p->ins};
  tyto_plugin_op_desc d =
      fused_desc(in, n_in, out, n_out, lin, lout, &fp, sizeof fp);
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  tyto_plugin_error *err = f->supports_op(h, &d);
  if (err) {
    snprintf(hx->error, sizeof hx->error, "%s", rt_error_message(err));
    rt_error_free(err);
    tyto_plugin_error *e2 = f->prepare(h, &d, &k, &ki);
    ck_assert_ptr_nonnull(e2);
    ck_assert_str_eq(rt_error_message(e2), hx->error);
    rt_error_free(e2);
    return hx->error;
  }
  err = f->prepare(h, &d, &k, &ki);
  if (err) {
    snprintf(hx->error, sizeof hx->error, "prepare after supports_op: %s",
             rt_error_message(err));
    rt_error_free(err);
    return hx->error;
  }
  ck_assert_uint_eq(ki.workspace_bytes, 0);
  tyto_plugin_stream *s;
  ck_assert_ptr_null(f->stream_create(h, &s));
  tyto_plugin_buffer *buf[2 * MAXV] = {0};
  tyto_plugin_binding b[2 * MAXV];
  unsigned char *tmp[2 * MAXV] = {0};
  for (uint32_t i = 0; i < n_in + n_out; i++) {
    h_tensor *t = i < n_in ? &in[i] : &out[i - n_in];
    b[i].struct_size = sizeof b[i];
    b[i].offset = 0;
    if (i >= n_in && alias && alias[i - n_in] >= 0) {
      b[i].buffer = buf[alias[i - n_in]];
      continue;
    }
    size_t bytes =
        (size_t)(t->storage ? t->storage : 1) * h_size(t->layout.dtype);
    tmp[i] = calloc(1, bytes);
    h_pack(t, tmp[i]);
    ck_assert_ptr_null(f->buffer_alloc(h, bytes, &buf[i]));
    ck_assert_ptr_null(f->copy_h2d(h, NULL, buf[i], 0, tmp[i], bytes));
    b[i].buffer = buf[i];
  }
  const char *result = NULL;
  err = f->launch(h, s, k, b, n_in, b + n_in, n_out, NULL);
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
      unsigned char *back = malloc(bytes);
      ck_assert_ptr_null(
          f->copy_d2h(h, NULL, back, b[n_in + i].buffer, 0, bytes));
      h_unpack(&out[i], back);
      free(back);
    }
  }
  for (uint32_t i = 0; i < n_in + n_out; i++) {
    free(tmp[i]);
    f->buffer_free(h, buf[i]);
  }
  f->kernel_release(h, k);
  f->stream_destroy(h, s);
  return result;
}

#endif
