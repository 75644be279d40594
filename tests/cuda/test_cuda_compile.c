/*
 * Every op family of the CUDA plugin through prepare() on a device opened
 * compile_only (plugins/cuda/ops.h): descriptors are checked and every
 * generated kernel is compiled by NVRTC for a real architecture (sm_90 and
 * the oldest the plugin drives), so a kernel that does not compile fails
 * here, on machines without a GPU, not first on a GPU. Needs NVRTC only
 * (no driver). Linked with the plugin's objects (libtcu.la).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/cuda/ops.h"
#include "plugin_host.h"

static void host_log(void *ctx, tyto_plugin_log_level level, const char *fmt,
                     ...) {
  (void)ctx;
  if (level > TYTO_PLUGIN_LOG_WARN && getenv("TYTO_TEST_LOG") == NULL)
    return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static const char *host_option(void *ctx, const char *key) {
  (void)ctx;
  (void)key;
  return NULL;
}

static const tyto_plugin_host host = {
    .struct_size = sizeof(tyto_plugin_host),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .host_version = "test",
    .log = host_log,
    .option = host_option,
    .error_new = host_error_new,
    .error_free = err_free,
};

/* A dense row-major layout. */
static tyto_plugin_layout dense(uint32_t dt, uint32_t rank, ...) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = dt;
  l.rank = rank;
  va_list ap;
  va_start(ap, rank);
  for (uint32_t i = 0; i < rank; i++)
    l.shape[i] = va_arg(ap, int64_t);
  va_end(ap);
  int64_t s = 1;
  for (uint32_t i = rank; i-- > 0;) {
    l.strides[i] = s;
    s *= l.shape[i];
  }
  return l;
}

static tyto_plugin_device *dev;

/* prepare() must succeed; the kernel is released again. */
static void prep(const char *what, uint32_t op, uint32_t n_in,
                 const tyto_plugin_layout *in, uint32_t n_out,
                 const tyto_plugin_layout *out, uint32_t n_i, const int64_t *ia,
                 uint32_t n_f, const double *fa, const void *blob,
                 size_t blob_size) {
  tyto_plugin_op_desc d = {sizeof d, op, n_in, n_out, in,        out,
                           n_i,      ia, n_f,  fa,    blob_size, blob};
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info info = {sizeof info, 0};
  char label[160];
  snprintf(label, sizeof label, "prepare %s (%s, %s)", what, dev->arch,
           tcu_dtype_name(d.outputs[0].dtype));
  ok_(tcu_prepare(dev, &d, &k, &info), label, __LINE__);
  if (k != NULL)
    tcu_kernel_release(dev, k);
}

#define L(...) dense(dt, __VA_ARGS__)

static void all_ops(uint32_t dt) {
  tyto_plugin_layout v = L(2, (int64_t)3, (int64_t)5);
  tyto_plugin_layout t = v; /* transposed view of a [5, 3] tensor */
  t.strides[0] = 1;
  t.strides[1] = 3;
  tyto_plugin_layout ins[3] = {v, t, v};
  double slope = 0.1;
  for (uint32_t op = TYTO_PLUGIN_OP_NEG; op <= TYTO_PLUGIN_OP_FMA; op++) {
    int arity = op < TYTO_PLUGIN_OP_ADD ? 1 : op < TYTO_PLUGIN_OP_WHERE ? 2 : 3;
    if ((op > TYTO_PLUGIN_OP_ROUND && op < TYTO_PLUGIN_OP_ADD) ||
        (op > TYTO_PLUGIN_OP_GE && op < TYTO_PLUGIN_OP_WHERE))
      continue;
    prep(tcu_op_name(op), op, (uint32_t)arity, ins, 1, &v, 0, NULL, 1, &slope,
         NULL, 0);
    prep(tcu_op_name(op), op, (uint32_t)arity, ins, 1, &t, 0, NULL, 1, &slope,
         NULL, 0);
  }
  /* A fused program: out0 = exp(in0) * in1 + 0.5, out1 = -in0. */
  tyto_plugin_fused_instr fi[] = {
      {sizeof fi[0], TYTO_PLUGIN_FUSED_INPUT, {0, 0, 0}, 0},
      {sizeof fi[0], TYTO_PLUGIN_FUSED_INPUT, {1, 0, 0}, 0},
      {sizeof fi[0], TYTO_PLUGIN_OP_EXP, {0, 0, 0}, 0},
      {sizeof fi[0], TYTO_PLUGIN_OP_MUL, {2, 1, 0}, 0},
      {sizeof fi[0], TYTO_PLUGIN_FUSED_CONST, {0, 0, 0}, 0.5},
      {sizeof fi[0], TYTO_PLUGIN_OP_ADD, {3, 4, 0}, 0},
      {sizeof fi[0], TYTO_PLUGIN_OP_NEG, {0, 0, 0}, 0},
      {sizeof fi[0], TYTO_PLUGIN_FUSED_OUTPUT, {5, 0, 0}, 0},
      {sizeof fi[0], TYTO_PLUGIN_FUSED_OUTPUT, {6, 1, 0}, 0},
  };
  tyto_plugin_fused_program prog = {sizeof prog, 9, fi};
  tyto_plugin_layout outs2[2] = {v, t};
  prep("fused", TYTO_PLUGIN_OP_FUSED, 2, ins, 2, outs2, 0, NULL, 0, NULL, &prog,
       sizeof prog);
  /* Reductions over axis 1, softmax along it. */
  tyto_plugin_layout big = L(2, (int64_t)4, (int64_t)100000);
  tyto_plugin_layout r1 = L(2, (int64_t)4, (int64_t)1);
  int64_t ax1 = 1;
  for (uint32_t op = TYTO_PLUGIN_OP_SUM; op <= TYTO_PLUGIN_OP_NORM_L2; op++)
    prep(tcu_op_name(op), op, 1, &big, 1, &r1, 1, &ax1, 0, NULL, NULL, 0);
  prep("softmax", TYTO_PLUGIN_OP_SOFTMAX, 1, &v, 1, &v, 1, &ax1, 0, NULL, NULL,
       0);
  prep("log_softmax", TYTO_PLUGIN_OP_LOG_SOFTMAX, 1, &v, 1, &v, 1, &ax1, 0,
       NULL, NULL, 0);
  /* matmul, k = 0 too. */
  tyto_plugin_layout a = L(3, (int64_t)2, (int64_t)3, (int64_t)4),
                     b = L(2, (int64_t)4, (int64_t)5),
                     c = L(3, (int64_t)2, (int64_t)3, (int64_t)5);
  tyto_plugin_layout ab[2] = {a, b};
  prep("matmul", TYTO_PLUGIN_OP_MATMUL, 2, ab, 1, &c, 0, NULL, 0, NULL, NULL,
       0);
  /* conv2d and its gradients, with a bias and a strided (packed) x. */
  tyto_plugin_layout x = L(4, (int64_t)2, (int64_t)3, (int64_t)8, (int64_t)8),
                     w = L(4, (int64_t)4, (int64_t)3, (int64_t)3, (int64_t)3),
                     bias = L(1, (int64_t)4),
                     y = L(4, (int64_t)2, (int64_t)4, (int64_t)8, (int64_t)8);
  int64_t conv_a[7] = {1, 1, 1, 1, 1, 1, 1};
  tyto_plugin_layout xwb[3] = {x, w, bias};
  prep("conv2d", TYTO_PLUGIN_OP_CONV2D, 3, xwb, 1, &y, 7, conv_a, 0, NULL, NULL,
       0);
  tyto_plugin_layout dyw[2] = {y, w};
  prep("conv2d_backward_data", TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA, 2, dyw, 1,
       &x, 7, conv_a, 0, NULL, NULL, 0);
  tyto_plugin_layout xdy[2] = {x, y};
  prep("conv2d_backward_filter", TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, 2, xdy,
       1, &w, 7, conv_a, 0, NULL, NULL, 0);
  /* Pooling 2x2 stride 2. */
  tyto_plugin_layout p = L(4, (int64_t)2, (int64_t)3, (int64_t)4, (int64_t)4);
  int64_t pool_a[6] = {2, 2, 2, 2, 0, 0};
  tyto_plugin_layout px[1] = {x};
  prep("max_pool2d", TYTO_PLUGIN_OP_MAX_POOL2D, 1, px, 1, &p, 6, pool_a, 0,
       NULL, NULL, 0);
  prep("avg_pool2d", TYTO_PLUGIN_OP_AVG_POOL2D, 1, px, 1, &p, 6, pool_a, 0,
       NULL, NULL, 0);
  tyto_plugin_layout xp[2] = {x, p};
  prep("max_pool2d_backward", TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD, 2, xp, 1, &x,
       6, pool_a, 0, NULL, NULL, 0);
  tyto_plugin_layout xx[2] = {x, x};
  prep("max_pool2d_select", TYTO_PLUGIN_OP_MAX_POOL2D_SELECT, 2, xx, 1, &p, 6,
       pool_a, 0, NULL, NULL, 0);
  prep("avg_pool2d_backward", TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD, 1, &p, 1, &x,
       6, pool_a, 0, NULL, NULL, 0);
  /* Index ops. */
  tyto_plugin_layout idx = L(1, (int64_t)4);
  tyto_plugin_layout oh = L(2, (int64_t)4, (int64_t)10);
  prep("one_hot", TYTO_PLUGIN_OP_ONE_HOT, 1, &idx, 1, &oh, 0, NULL, 0, NULL,
       NULL, 0);
  tyto_plugin_layout padded = L(2, (int64_t)5, (int64_t)9);
  int64_t pad_a[5] = {0, 1, 1, 2, 2};
  double zero = 0;
  prep("pad", TYTO_PLUGIN_OP_PAD, 1, &v, 1, &padded, 5, pad_a, 1, &zero, NULL,
       0);
  tyto_plugin_layout gi = L(1, (int64_t)2);
  tyto_plugin_layout gd[2] = {v, gi};
  tyto_plugin_layout go = L(2, (int64_t)2, (int64_t)5);
  int64_t ax0 = 0;
  prep("gather", TYTO_PLUGIN_OP_GATHER, 2, gd, 1, &go, 1, &ax0, 0, NULL, NULL,
       0);
  tyto_plugin_layout sd[3] = {v, gi, go};
  prep("scatter_add", TYTO_PLUGIN_OP_SCATTER_ADD, 3, sd, 1, &v, 1, &ax0, 0,
       NULL, NULL, 0);
  /* Random numbers. */
  int64_t seed[2] = {42, 7};
  double range[2] = {0, 1};
  for (uint32_t op = TYTO_PLUGIN_OP_RANDOM_UNIFORM;
       op <= TYTO_PLUGIN_OP_RANDOM_BERNOULLI; op++)
    prep(tcu_op_name(op), op, 0, NULL, 1, &v, 2, seed,
         op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 1 : 2, range, NULL, 0);
  /* Linear algebra on [2, 4, 4]. */
  tyto_plugin_layout m = L(3, (int64_t)2, (int64_t)4, (int64_t)4),
                     m0 = L(1, (int64_t)2),
                     rhs = L(3, (int64_t)2, (int64_t)4, (int64_t)3);
  prep("inv", TYTO_PLUGIN_OP_INV, 1, &m, 1, &m, 0, NULL, 0, NULL, NULL, 0);
  prep("det", TYTO_PLUGIN_OP_DET, 1, &m, 1, &m0, 0, NULL, 0, NULL, NULL, 0);
  prep("logdet", TYTO_PLUGIN_OP_LOGDET, 1, &m, 1, &m0, 0, NULL, 0, NULL, NULL,
       0);
  tyto_plugin_layout mr[2] = {m, rhs};
  prep("solve", TYTO_PLUGIN_OP_SOLVE, 2, mr, 1, &rhs, 0, NULL, 0, NULL, NULL,
       0);
  prep("cholesky", TYTO_PLUGIN_OP_CHOLESKY, 1, &m, 1, &m, 0, NULL, 0, NULL,
       NULL, 0);
  tyto_plugin_layout qr[2] = {m, m};
  prep("qr", TYTO_PLUGIN_OP_QR, 1, &m, 2, qr, 0, NULL, 0, NULL, NULL, 0);
  int64_t tri[3] = {1, 0, 0};
  prep("triangular_solve", TYTO_PLUGIN_OP_TRIANGULAR_SOLVE, 2, mr, 1, &rhs, 3,
       tri, 0, NULL, NULL, 0);
}

int main(void) {
  /* NVRTC is an LLVM: compiling some 500 kernels under valgrind takes the
   * better part of an hour and reports only on NVRTC's own allocator. The
   * plain and sanitizer runs cover this test. */
  if (getenv("TYTO_TEST_UNDER_VALGRIND") != NULL) {
    fprintf(stderr, "test_cuda_compile: skipped under valgrind\n");
    return 77;
  }
  tyto_plugin_state st;
  memset(&st, 0, sizeof st);
  st.host = &host;
  tyto_plugin_device d;
  memset(&d, 0, sizeof d);
  d.state = &st;
  d.sm_count = 132;
  d.compile_only = 1;
  pthread_mutex_init(&d.cache_lock, NULL);
  pthread_mutex_init(&d.lib_lock, NULL);
  dev = &d;
  /* Turing (the oldest NVRTC 13 targets) and Hopper. */
  const int archs[][2] = {{7, 5}, {9, 0}};
  int compiled = 0;
  for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
    tcu_arch_select(&d, archs[i][0], archs[i][1]);
    if (d.arch[0] == '\0') {
      fprintf(stderr, "compute capability %d.%d: %s (skipped)\n", archs[i][0],
              archs[i][1], d.arch_error);
      continue;
    }
    all_ops(TYTO_PLUGIN_DTYPE_F32);
    all_ops(TYTO_PLUGIN_DTYPE_F64);
    tcu_cache_clear(&d);
    compiled++;
  }
  pthread_mutex_destroy(&d.cache_lock);
  pthread_mutex_destroy(&d.lib_lock);
  /* A descriptor the plugin refuses names what it expected. */
  tyto_plugin_layout bad =
      dense(TYTO_PLUGIN_DTYPE_F32, 2, (int64_t)2, (int64_t)3);
  tyto_plugin_op_desc d1 = {
      sizeof d1, TYTO_PLUGIN_OP_ADD, 1, 1, &bad, &bad, 0, NULL, 0, NULL, 0,
      NULL};
  tyto_plugin_kernel *k = NULL;
  if (compiled > 0)
    expect_err_(tcu_prepare(dev, &d1, &k, NULL),
                TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "expected 2 inputs",
                "add with one input", __LINE__);
  if (compiled == 0) {
    fprintf(stderr, "NVRTC targets none of the architectures tried\n");
    return 77;
  }
  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
