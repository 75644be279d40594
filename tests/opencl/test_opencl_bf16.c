/*
 * Every op family of the OpenCL plugin in bf16 (ABI 1.5), and in f16
 * through the testing option fp16_without_extension=1 (PoCL lacks
 * cl_khr_fp16), driven through the plugin ABI against f64 references
 * computed from the exact 16-bit inputs: copy and fill, the reductions and
 * softmax, pad, gather, scatter_add and one_hot, the poolings and their
 * derivatives, the random ops, MATMUL and the convolutions (both the
 * im2col and the direct paths). test_opencl_cast.c covers CAST, the
 * elementwise ops and fused programs.
 *
 * Tolerances. A 16-bit op reads its inputs exactly into f32, computes in
 * f32 and rounds once, so a result passes when
 *   |got - want| <= u |want| + k 2^-24 mag + tiny,
 * with want the exact value (f64 of the same inputs), u the format's unit
 * roundoff (2^-8 bf16, 2^-11 f16), k 2^-24 mag the f32 computation's own
 * error: k the number of operations one result accumulates (a sum's
 * length, MATMUL's and the convolutions' reduction) and mag the sum of the
 * magnitudes of its terms (the condition of a sum times its size), or
 * |want| where the error is relative; tiny is half the format's subnormal
 * spacing plus 2^-120 (flushed f32 subnormals). Ops that only move or
 * select values (copy, pad, gather, one_hot, max and select pooling,
 * argmax, random bits) must match bit for bit.
 *
 * Exits 77 when the machine has no OpenCL device, and under valgrind.
 */
#include "harness.h"

#include <sys/stat.h>
#include <unistd.h>

static uint32_t HT; /* the 16-bit dtype of the run */
static double U, TINY;

/* A host array of n elements of dtype HT. */
typedef struct arr {
  int64_t n;
  uint16_t *h;
  double *v; /* the exact values */
} arr;

static arr arr_new(int64_t n) {
  arr a = {n, calloc((size_t)(n > 0 ? n : 1), 2),
           calloc((size_t)(n > 0 ? n : 1), sizeof(double))};
  return a;
}

static void arr_set(arr *a, int64_t i, double v) {
  put_value(HT, a->h, i, v);
  a->v[i] = get_value(HT, a->h, i);
}

static arr arr_random(int64_t n, double lo, double hi) {
  arr a = arr_new(n);
  for (int64_t i = 0; i < n; i++)
    arr_set(&a, i, rng_uniform(lo, hi));
  return a;
}

static void arr_free(arr *a) {
  free(a->h);
  free(a->v);
}

/* got (dtype HT) against want within the tolerances above: k and mag[i]
 * (mag NULL: |want|); exact: bit for bit with want rounded to HT. */
static void compare(const char *what, const uint16_t *got, const double *want,
                    const double *mag, int64_t n, double k, int exact) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = get_value(HT, got, i), w = want[i];
    int ok;
    if (exact) {
      uint16_t r[4]; /* room for any dtype: put_value switches on it */
      put_value(HT, r, 0, w);
      ok = r[0] == got[i] || (isnan(w) && isnan(g));
    } else if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
      ok = (isnan(w) && isnan(g)) || g == w;
    } else {
      double m = mag != NULL ? mag[i] : fabs(w);
      ok = fabs(g - w) <= U * fabs(w) + k * 0x1p-24 * m + TINY;
    }
    if (!ok && bad++ < 3)
      fprintf(stderr, "  %s %s [%lld]: got %.9g, want %.9g\n", dt_name(HT),
              what, (long long)i, g, w);
  }
  CHECK(bad == 0, "%s %s: %lld of %lld results off", dt_name(HT), what,
        (long long)bad, (long long)n);
}

/* Runs op with inputs ins (dtype HT, layouts l[0 .. n_in)) into out
 * (l[n_in]), iattrs and fattrs given. */
static int run(tyto_plugin_device *dev, uint32_t op, uint32_t n_in,
               tyto_plugin_layout *l, arr *const *ins, uint16_t *out,
               const int64_t *ia, uint32_t nia, const double *fa,
               uint32_t nfa) {
  tyto_plugin_op_desc d = desc_of(op, n_in, l, 1, &l[n_in]);
  d.iattrs = ia;
  d.n_iattrs = nia;
  d.fattrs = fa;
  d.n_fattrs = nfa;
  void *arrays[8];
  for (uint32_t k = 0; k < n_in; k++)
    arrays[k] = ins[k]->h;
  arrays[n_in] = out;
  return OK(run_op(dev, &d, arrays));
}

static tyto_plugin_layout lay(uint32_t rank, const int64_t *shape) {
  return layout(HT, rank, shape);
}

/* ----------------------------------------------------- copy and fill -- */

static void test_copyfill(tyto_plugin_device *dev) {
  int64_t s[2] = {17, 23};
  arr x = arr_random(17 * 23, -3, 3);
  const double sp[] = {NAN, INFINITY, -0.0, 0x1p-133, 0x1p-24};
  for (int i = 0; i < 5; i++)
    arr_set(&x, i, sp[i]);
  uint16_t out[17 * 23];
  tyto_plugin_layout l[2] = {lay(2, s), lay(2, s)};
  l[0].strides[0] = 1; /* read transposed */
  l[0].strides[1] = 17;
  arr *in[1] = {&x};
  int bad = 0;
  if (run(dev, TYTO_PLUGIN_OP_COPY, 1, l, in, out, NULL, 0, NULL, 0))
    for (int64_t i = 0; i < 17 * 23; i++)
      bad += out[i] != x.h[at_of(&l[0], i)];
  CHECK(bad == 0, "%s strided copy moves bits: %d differ", dt_name(HT), bad);
  double v = 0.1;
  tyto_plugin_layout f = lay(2, s);
  f.strides[1] = 1;
  if (run(dev, TYTO_PLUGIN_OP_FILL, 0, &f, NULL, out, NULL, 0, &v, 1)) {
    double want[17 * 23];
    for (int i = 0; i < 17 * 23; i++)
      want[i] = 0.1;
    compare("fill", out, want, NULL, 17 * 23, 0, 1);
  }
  arr_free(&x);
}

/* -------------------------------------------- reductions and softmax -- */

/* op over axis `ax` of an [R, C] input into [R, 1] or [1, C]. */
static void reduce_one(tyto_plugin_device *dev, uint32_t op, int64_t R,
                       int64_t C, int ax) {
  int64_t s[2] = {R, C}, so[2] = {ax ? R : 1, ax ? 1 : C};
  int soft = op == TYTO_PLUGIN_OP_SOFTMAX || op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
  double lo = op == TYTO_PLUGIN_OP_PROD ? 0.97 : -2,
         hi = op == TYTO_PLUGIN_OP_PROD ? 1.03 : 2;
  arr x = arr_random(R * C, lo, hi);
  tyto_plugin_layout l[2] = {lay(2, s), soft ? lay(2, s) : lay(2, so)};
  int64_t nout = soft ? R * C : so[0] * so[1], len = ax ? C : R;
  uint16_t *out = calloc((size_t)nout, 2);
  double *want = calloc((size_t)nout, sizeof *want),
         *mag = calloc((size_t)nout, sizeof *mag);
  int64_t axis = ax;
  arr *in[1] = {&x};
  char what[64];
  snprintf(what, sizeof what, "op %u over axis %d of [%lld, %lld]",
           (unsigned)op, ax, (long long)R, (long long)C);
  if (!run(dev, op, 1, l, in, out, &axis, 1, NULL, 0))
    goto done;
  int exact = op == TYTO_PLUGIN_OP_MAX_REDUCE ||
              op == TYTO_PLUGIN_OP_MIN_REDUCE || op == TYTO_PLUGIN_OP_ARGMAX ||
              op == TYTO_PLUGIN_OP_ARGMIN;
  for (int64_t o = 0; o < (ax ? R : C); o++) {
    double sum = 0, abs = 0, sq = 0, prod = 1, mx = -INFINITY, mn = INFINITY;
    int64_t amx = 0, amn = 0;
    for (int64_t r = 0; r < len; r++) {
      double v = x.v[ax ? o * C + r : r * C + o];
      sum += v;
      abs += fabs(v);
      sq += v * v;
      prod *= v;
      if (v > mx)
        mx = v, amx = r;
      if (v < mn)
        mn = v, amn = r;
    }
    double es = 0;
    for (int64_t r = 0; r < len; r++)
      es += exp(x.v[ax ? o * C + r : r * C + o] - mx);
    double w = 0, m = abs;
    switch (op) {
    case TYTO_PLUGIN_OP_SUM: w = sum; break;
    case TYTO_PLUGIN_OP_MEAN:
      w = sum / (double)len, m = abs / (double)len;
      break;
    case TYTO_PLUGIN_OP_MAX_REDUCE: w = mx; break;
    case TYTO_PLUGIN_OP_MIN_REDUCE: w = mn; break;
    case TYTO_PLUGIN_OP_PROD: w = prod, m = fabs(prod); break;
    case TYTO_PLUGIN_OP_ARGMAX: w = (double)amx; break;
    case TYTO_PLUGIN_OP_ARGMIN: w = (double)amn; break;
    case TYTO_PLUGIN_OP_LOG_SUM_EXP: w = mx + log(es), m = 1 + fabs(w); break;
    case TYTO_PLUGIN_OP_NORM_L1: w = abs; break;
    case TYTO_PLUGIN_OP_NORM_L2: w = sqrt(sq), m = w; break;
    default: break;
    }
    if (!soft) {
      want[o] = w;
      mag[o] = m;
      continue;
    }
    for (int64_t r = 0; r < len; r++) {
      int64_t i = ax ? o * C + r : r * C + o;
      double e = x.v[i] - mx;
      want[i] = op == TYTO_PLUGIN_OP_SOFTMAX ? exp(e) / es : e - log(es);
      mag[i] = fabs(want[i]) + (op == TYTO_PLUGIN_OP_SOFTMAX ? 0 : 4);
    }
  }
  /* The plugin adds at most 4,096 elements in sequence, then merges
   * partial states in trees (docs/opencl.md). */
  compare(what, out, want, mag, nout, (double)(len < 4096 ? len : 4096) + 64,
          exact);
done:
  arr_free(&x);
  free(out);
  free(want);
  free(mag);
}

static void test_reduce(tyto_plugin_device *dev) {
  for (uint32_t op = TYTO_PLUGIN_OP_SUM; op <= TYTO_PLUGIN_OP_NORM_L2; op++) {
    reduce_one(dev, op, 6, 300, 1);
    reduce_one(dev, op, 40, 9, 0);
  }
  /* Long rows: chunks whose f32 states meet in the workspace. */
  reduce_one(dev, TYTO_PLUGIN_OP_SUM, 2, 40000, 1);
  reduce_one(dev, TYTO_PLUGIN_OP_ARGMAX, 2, 40000, 1);
  reduce_one(dev, TYTO_PLUGIN_OP_LOG_SUM_EXP, 2, 40000, 1);
  reduce_one(dev, TYTO_PLUGIN_OP_SOFTMAX, 5, 70, 1);
  reduce_one(dev, TYTO_PLUGIN_OP_LOG_SOFTMAX, 5, 70, 1);
  reduce_one(dev, TYTO_PLUGIN_OP_SOFTMAX, 30, 4, 0);
}

/* ------------------------------------------ pad, gather, scatter, one_hot --
 */

static void test_index(tyto_plugin_device *dev) {
  /* PAD [3, 4] by (1, 2), (2, 1): constant 0.1 (rounded), then reflect. */
  int64_t s[2] = {3, 4}, so[2] = {6, 7};
  arr x = arr_random(12, -3, 3);
  arr_set(&x, 0, -0.0);
  arr_set(&x, 1, NAN);
  tyto_plugin_layout l[4] = {lay(2, s), lay(2, so)};
  arr *in[3] = {&x};
  uint16_t out[64];
  double want[64], v = 0.1;
  for (int64_t mode = 0; mode < 2; mode++) {
    int64_t ia[5] = {mode, 1, 2, 2, 1};
    if (!run(dev, TYTO_PLUGIN_OP_PAD, 1, l, in, out, ia, 5, &v, 1))
      continue;
    for (int i = 0; i < 6; i++)
      for (int j = 0; j < 7; j++) {
        int a = i - 1, b = j - 2;
        int inside = a >= 0 && a < 3 && b >= 0 && b < 4;
        a = a < 0 ? -a : a > 2 ? 4 - a : a; /* reflect, no edge repeat */
        b = b < 0 ? -b : b > 3 ? 6 - b : b;
        want[i * 7 + j] = inside || mode ? x.v[a * 4 + b] : 0.1;
      }
    compare(mode ? "pad (reflect)" : "pad (constant)", out, want, NULL, 42, 0,
            1);
    CHECK(out[1 * 7 + 2] == x.h[0], "pad moves -0 as it is");
  }
  /* GATHER along axis 1 of [5, 7] by indices [3, 2] -> [5, 3, 2]. */
  int64_t sd[2] = {5, 7}, si[2] = {3, 2}, sg[3] = {5, 3, 2};
  arr data = arr_random(35, -5, 5), ind = arr_new(6);
  for (int i = 0; i < 6; i++)
    arr_set(&ind, i, (double)((i * 5 + 1) % 7));
  arr_set(&ind, 0, -0.0); /* index 0 */
  l[0] = lay(2, sd);
  l[1] = lay(2, si);
  l[2] = lay(3, sg);
  in[0] = &data;
  in[1] = &ind;
  int64_t axis = 1;
  if (run(dev, TYTO_PLUGIN_OP_GATHER, 2, l, in, out, &axis, 1, NULL, 0)) {
    for (int i = 0; i < 5; i++)
      for (int j = 0; j < 6; j++)
        want[i * 6 + j] = data.v[i * 7 + (int)fabs(ind.v[j])];
    compare("gather", out, want, NULL, 30, 0, 1);
  }
  /* SCATTER_ADD along axis 0 of base [5, 7]: indices [6] with repeats,
   * updates [6, 7]. */
  int64_t sb[2] = {5, 7}, sx[1] = {6}, su[2] = {6, 7};
  arr base = arr_random(35, -2, 2), sidx = arr_new(6),
      upd = arr_random(42, -2, 2);
  const double iv[6] = {4, 0, 4, 2, 4, 1};
  for (int i = 0; i < 6; i++)
    arr_set(&sidx, i, iv[i]);
  l[0] = lay(2, sb);
  l[1] = lay(1, sx);
  l[2] = lay(2, su);
  l[3] = lay(2, sb);
  in[0] = &base;
  in[1] = &sidx;
  in[2] = &upd;
  axis = 0;
  if (run(dev, TYTO_PLUGIN_OP_SCATTER_ADD, 3, l, in, out, &axis, 1, NULL, 0)) {
    double mag[35];
    for (int i = 0; i < 35; i++) {
      want[i] = base.v[i];
      mag[i] = fabs(base.v[i]);
    }
    for (int q = 0; q < 6; q++)
      for (int j = 0; j < 7; j++) {
        want[(int)iv[q] * 7 + j] += upd.v[q * 7 + j];
        mag[(int)iv[q] * 7 + j] += fabs(upd.v[q * 7 + j]);
      }
    compare("scatter_add", out, want, mag, 35, 8, 0);
  }
  /* ONE_HOT of [5] at depth 4: a non-integer and an out-of-range index
   * give rows of zeros. */
  int64_t s1[1] = {5}, s2[2] = {5, 4};
  arr oh = arr_new(5);
  const double ov[5] = {0, 3, 1.5, 7, 2};
  for (int i = 0; i < 5; i++)
    arr_set(&oh, i, ov[i]);
  l[0] = lay(1, s1);
  l[1] = lay(2, s2);
  in[0] = &oh;
  if (run(dev, TYTO_PLUGIN_OP_ONE_HOT, 1, l, in, out, NULL, 0, NULL, 0)) {
    for (int i = 0; i < 20; i++)
      want[i] = ov[i / 4] == (double)(i % 4);
    compare("one_hot", out, want, NULL, 20, 0, 1);
  }
  arr_free(&x);
  arr_free(&data);
  arr_free(&ind);
  arr_free(&base);
  arr_free(&sidx);
  arr_free(&upd);
  arr_free(&oh);
}

/* ------------------------------------------------------------ pooling -- */

enum { PN = 2, PC = 3, PH = 7, PW = 6, PK = 3, PS = 2, PP = 1 };
enum { POH = (PH + 2 * PP - PK) / PS + 1, POW = (PW + 2 * PP - PK) / PS + 1 };

/* The first maximum (row-major) of window (n, c, oh, ow) of x: its (h, w). */
static void pool_argmax(const arr *x, int n, int c, int oh, int ow, int *bh,
                        int *bw) {
  double best = -INFINITY;
  *bh = -1;
  for (int kh = 0; kh < PK; kh++)
    for (int kw = 0; kw < PK; kw++) {
      int h = oh * PS - PP + kh, w = ow * PS - PP + kw;
      if (h < 0 || h >= PH || w < 0 || w >= PW)
        continue;
      double v = x->v[((n * PC + c) * PH + h) * PW + w];
      if (*bh < 0 || v > best) {
        best = v;
        *bh = h;
        *bw = w;
      }
    }
}

static int pool_count(int oh, int ow) {
  int h0 = oh * PS - PP, w0 = ow * PS - PP;
  int h1 = h0 + PK < PH ? h0 + PK : PH, w1 = w0 + PK < PW ? w0 + PK : PW;
  return (h1 - (h0 > 0 ? h0 : 0)) * (w1 - (w0 > 0 ? w0 : 0));
}

static void test_pool(tyto_plugin_device *dev) {
  enum { NX = PN * PC * PH * PW, NY = PN * PC * POH * POW };
  int64_t sx[4] = {PN, PC, PH, PW}, sy[4] = {PN, PC, POH, POW};
  const int64_t ia[6] = {PK, PK, PS, PS, PP, PP};
  arr x = arr_random(NX, -3, 3), dy = arr_random(NY, -2, 2),
      t = arr_random(NX, -2, 2);
  uint16_t out[NX];
  double want[NX], mag[NX];
  tyto_plugin_layout l[3] = {lay(4, sx), lay(4, sy), lay(4, sx)};
  arr *in[2] = {&x, &dy};
  /* MAX_POOL2D (bit for bit), AVG_POOL2D. */
  for (int avg = 0; avg < 2; avg++) {
    l[1] = lay(4, sy);
    if (!run(dev, avg ? TYTO_PLUGIN_OP_AVG_POOL2D : TYTO_PLUGIN_OP_MAX_POOL2D,
             1, l, in, out, ia, 6, NULL, 0))
      continue;
    for (int i = 0; i < NY; i++) {
      int ow = i % POW, oh = i / POW % POH, c = i / (POW * POH) % PC,
          n = i / (POW * POH * PC), bh, bw;
      double s = 0, m = 0;
      for (int kh = 0; kh < PK; kh++)
        for (int kw = 0; kw < PK; kw++) {
          int h = oh * PS - PP + kh, w = ow * PS - PP + kw;
          if (h >= 0 && h < PH && w >= 0 && w < PW) {
            s += x.v[((n * PC + c) * PH + h) * PW + w];
            m += fabs(x.v[((n * PC + c) * PH + h) * PW + w]);
          }
        }
      pool_argmax(&x, n, c, oh, ow, &bh, &bw);
      want[i] = avg ? s / pool_count(oh, ow)
                    : x.v[((n * PC + c) * PH + bh) * PW + bw];
      mag[i] = m;
    }
    compare(avg ? "avg_pool2d" : "max_pool2d", out, want, mag, NY, PK * PK + 2,
            !avg);
  }
  /* MAX_POOL2D_SELECT: t at each window's first maximum of x. */
  l[1] = lay(4, sx);
  l[2] = lay(4, sy);
  in[1] = &t;
  if (run(dev, TYTO_PLUGIN_OP_MAX_POOL2D_SELECT, 2, l, in, out, ia, 6, NULL,
          0)) {
    for (int i = 0; i < NY; i++) {
      int bh, bw, n = i / (POW * POH * PC), c = i / (POW * POH) % PC;
      pool_argmax(&x, n, c, i / POW % POH, i % POW, &bh, &bw);
      want[i] = t.v[((n * PC + c) * PH + bh) * PW + bw];
    }
    compare("max_pool2d_select", out, want, NULL, NY, 0, 1);
  }
  /* The derivatives: dy summed into dx (max: at each first maximum). */
  for (int avg = 0; avg < 2; avg++) {
    memset(want, 0, sizeof want);
    memset(mag, 0, sizeof mag);
    for (int i = 0; i < NY; i++) {
      int ow = i % POW, oh = i / POW % POH, c = i / (POW * POH) % PC,
          n = i / (POW * POH * PC), bh, bw;
      if (!avg) {
        pool_argmax(&x, n, c, oh, ow, &bh, &bw);
        want[((n * PC + c) * PH + bh) * PW + bw] += dy.v[i];
        mag[((n * PC + c) * PH + bh) * PW + bw] += fabs(dy.v[i]);
        continue;
      }
      for (int kh = 0; kh < PK; kh++)
        for (int kw = 0; kw < PK; kw++) {
          int h = oh * PS - PP + kh, w = ow * PS - PP + kw;
          if (h >= 0 && h < PH && w >= 0 && w < PW) {
            want[((n * PC + c) * PH + h) * PW + w] +=
                dy.v[i] / pool_count(oh, ow);
            mag[((n * PC + c) * PH + h) * PW + w] +=
                fabs(dy.v[i]) / pool_count(oh, ow);
          }
        }
    }
    l[0] = lay(4, sx);
    l[1] = lay(4, sy);
    l[2] = lay(4, sx);
    in[0] = &x;
    in[1] = &dy;
    int ok = avg ? run(dev, TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD, 1, l + 1,
                       in + 1, out, ia, 6, NULL, 0)
                 : run(dev, TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD, 2, l, in, out,
                       ia, 6, NULL, 0);
    if (ok)
      compare(avg ? "avg_pool2d_backward" : "max_pool2d_backward", out, want,
              mag, NX, 2 * PK * PK, 0);
  }
  arr_free(&x);
  arr_free(&dy);
  arr_free(&t);
}

/* ------------------------------------------------------------- random -- */

/* Each random op in HT equals the same op in f32 rounded once, bit for
 * bit (the same Philox numbers), with and without a step. */
static void test_random(tyto_plugin_device *dev) {
  enum { N = 1000 };
  int64_t s[1] = {N};
  const int64_t ia[2] = {1234, 7};
  static float f[N];
  uint16_t out[N], want[N];
  const uint32_t ops[3] = {TYTO_PLUGIN_OP_RANDOM_UNIFORM,
                           TYTO_PLUGIN_OP_RANDOM_NORMAL,
                           TYTO_PLUGIN_OP_RANDOM_BERNOULLI};
  const double fa[3][2] = {{-1, 3}, {0.5, 2}, {0.3, 0}};
  for (int k = 0; k < 3; k++)
    for (int stepped = 0; stepped < 2; stepped++) {
      tyto_plugin_layout ls[2], lf[2];
      ls[0] = layout(HT, 0, NULL);
      ls[1] = layout(HT, 1, s);
      lf[0] = layout(TYTO_PLUGIN_DTYPE_F32, 0, NULL);
      lf[1] = layout(TYTO_PLUGIN_DTYPE_F32, 1, s);
      uint16_t hs[4] = {0};
      float fs = 5;
      put_value(HT, hs, 0, 5);
      uint32_t nin = (uint32_t)stepped, nfa = k == 2 ? 1 : 2;
      tyto_plugin_op_desc dh = desc_of(ops[k], nin, ls, 1, &ls[1]),
                          df32 = desc_of(ops[k], nin, lf, 1, &lf[1]);
      dh.iattrs = df32.iattrs = ia;
      dh.n_iattrs = df32.n_iattrs = 2;
      dh.fattrs = df32.fattrs = fa[k];
      dh.n_fattrs = df32.n_fattrs = nfa;
      void *ah[2] = {hs, out}, *af[2] = {&fs, f};
      if (!stepped) {
        ah[0] = out;
        af[0] = f;
      }
      if (!OK(run_op(dev, &dh, ah)) || !OK(run_op(dev, &df32, af)))
        continue;
      for (int i = 0; i < N; i++)
        put_value(HT, want, i, f[i]);
      CHECK(memcmp(out, want, sizeof out) == 0,
            "%s random op %u%s: not the f32 numbers rounded once", dt_name(HT),
            (unsigned)ops[k], stepped ? " (stepped)" : "");
    }
}

/* ------------------------------------------------------------- matmul -- */

/* [B, m, k] x [k, n] (B broadcast), or [m, k] x [n, k]^T; k = 0 gives
 * zeros. */
static void matmul_one(tyto_plugin_device *dev, int64_t B, int64_t m, int64_t k,
                       int64_t n, int tb) {
  int64_t sa[3] = {B, m, k}, sb[2] = {tb ? n : k, tb ? k : n},
          sc[3] = {B, m, n};
  arr a = arr_random(B * m * k, -2, 2), b = arr_random(k * n, -2, 2);
  tyto_plugin_layout l[3] = {lay(3, sa), lay(2, sb), lay(3, sc)};
  uint16_t *out = calloc((size_t)(B * m * n), 2);
  double *want = calloc((size_t)(B * m * n), sizeof *want),
         *mag = calloc((size_t)(B * m * n), sizeof *mag);
  const int64_t ia[2] = {0, tb};
  arr *in[2] = {&a, &b};
  if (run(dev, TYTO_PLUGIN_OP_MATMUL, 2, l, in, out, ia, 2, NULL, 0)) {
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double s = 0, g = 0;
          for (int64_t p = 0; p < k; p++) {
            double t =
                a.v[(bi * m + i) * k + p] * b.v[tb ? j * k + p : p * n + j];
            s += t;
            g += fabs(t);
          }
          want[(bi * m + i) * n + j] = s;
          mag[(bi * m + i) * n + j] = g;
        }
    char what[64];
    snprintf(what, sizeof what, "matmul [%lld, %lld, %lld] x [%lld, %lld]%s",
             (long long)B, (long long)m, (long long)k, (long long)sb[0],
             (long long)sb[1], tb ? "^T" : "");
    compare(what, out, want, mag, B * m * n, (double)k + 2, 0);
  }
  arr_free(&a);
  arr_free(&b);
  free(out);
  free(want);
  free(mag);
}

static void test_matmul(tyto_plugin_device *dev) {
  matmul_one(dev, 3, 37, 50, 29, 0);
  matmul_one(dev, 1, 64, 300, 33, 1);
  matmul_one(dev, 2, 5, 0, 4, 0);
}

/* ------------------------------------------------------- convolutions -- */

typedef struct cgeo {
  int N, C, HT, W, O, KH, KW, s, p, g, OH, OW;
} cgeo;

static cgeo cgeo_of(int N, int C, int Hi, int W, int O, int K, int s, int p,
                    int g) {
  cgeo q = {N, C, Hi, W, O, K, K, s, p, g, 0, 0};
  q.OH = (Hi + 2 * p - K) / s + 1;
  q.OW = (W + 2 * p - K) / s + 1;
  return q;
}

/* The three convolution ops of geometry q against f64 loops. */
static void conv_one(tyto_plugin_device *dev, cgeo q) {
  const int Cg = q.C / q.g, Og = q.O / q.g;
  int64_t sx[4] = {q.N, q.C, q.HT, q.W}, sw[4] = {q.O, Cg, q.KH, q.KW},
          sy[4] = {q.N, q.O, q.OH, q.OW}, sbias[1] = {q.O};
  int64_t nx = q.N * q.C * q.HT * q.W, nw = (int64_t)q.O * Cg * q.KH * q.KW,
          ny = (int64_t)q.N * q.O * q.OH * q.OW;
  arr x = arr_random(nx, -2, 2), w = arr_random(nw, -1, 1),
      bias = arr_random(q.O, -1, 1), dy = arr_random(ny, -1, 1);
  int64_t big = nx > nw ? nx : nw;
  big = big > ny ? big : ny;
  uint16_t *out = calloc((size_t)big, 2);
  double *want[3], *mag[3];
  for (int k = 0; k < 3; k++) {
    want[k] = calloc((size_t)big, sizeof(double));
    mag[k] = calloc((size_t)big, sizeof(double));
  }
  /* want[0] = y, want[1] = dx, want[2] = dw */
  for (int n = 0; n < q.N; n++)
    for (int o = 0; o < q.O; o++)
      for (int oh = 0; oh < q.OH; oh++)
        for (int ow = 0; ow < q.OW; ow++) {
          int64_t yi = ((int64_t)(n * q.O + o) * q.OH + oh) * q.OW + ow;
          want[0][yi] = bias.v[o];
          mag[0][yi] = fabs(bias.v[o]);
          int g = o / Og;
          for (int c = 0; c < Cg; c++)
            for (int kh = 0; kh < q.KH; kh++)
              for (int kw = 0; kw < q.KW; kw++) {
                int h = oh * q.s - q.p + kh, ww = ow * q.s - q.p + kw;
                if (h < 0 || h >= q.HT || ww < 0 || ww >= q.W)
                  continue;
                int64_t xi =
                            ((int64_t)(n * q.C + g * Cg + c) * q.HT + h) * q.W +
                            ww,
                        wi = (((int64_t)o * Cg + c) * q.KH + kh) * q.KW + kw;
                want[0][yi] += x.v[xi] * w.v[wi];
                mag[0][yi] += fabs(x.v[xi] * w.v[wi]);
                want[1][xi] += dy.v[yi] * w.v[wi];
                mag[1][xi] += fabs(dy.v[yi] * w.v[wi]);
                want[2][wi] += dy.v[yi] * x.v[xi];
                mag[2][wi] += fabs(dy.v[yi] * x.v[xi]);
              }
        }
  const int64_t ia[7] = {q.s, q.s, q.p, q.p, 1, 1, q.g};
  char what[96];
  tyto_plugin_layout l[4] = {lay(4, sx), lay(4, sw), lay(1, sbias), lay(4, sy)};
  arr *in[3] = {&x, &w, &bias};
  snprintf(what, sizeof what, "conv2d [%d, %d, %d, %d] * [%d, %d, %d, %d]", q.N,
           q.C, q.HT, q.W, q.O, Cg, q.KH, q.KW);
  if (run(dev, TYTO_PLUGIN_OP_CONV2D, 3, l, in, out, ia, 7, NULL, 0))
    compare(what, out, want[0], mag[0], ny, (double)(Cg * q.KH * q.KW) + 2, 0);
  /* data: dy, w -> dx */
  l[0] = lay(4, sy);
  l[1] = lay(4, sw);
  l[2] = lay(4, sx);
  in[0] = &dy;
  in[1] = &w;
  snprintf(what, sizeof what, "conv2d_backward_data of [%d, %d, %d, %d]", q.N,
           q.C, q.HT, q.W);
  if (run(dev, TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA, 2, l, in, out, ia, 7, NULL,
          0))
    compare(what, out, want[1], mag[1], nx, (double)(Og * q.KH * q.KW) + 2, 0);
  /* filter: x, dy -> dw */
  l[0] = lay(4, sx);
  l[1] = lay(4, sy);
  l[2] = lay(4, sw);
  in[0] = &x;
  in[1] = &dy;
  snprintf(what, sizeof what, "conv2d_backward_filter [%d, %d, %d, %d]", q.O,
           Cg, q.KH, q.KW);
  if (run(dev, TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, 2, l, in, out, ia, 7,
          NULL, 0))
    compare(what, out, want[2], mag[2], nw,
            (double)((int64_t)q.N * q.OH * q.OW) + 2, 0);
  arr_free(&x);
  arr_free(&w);
  arr_free(&bias);
  arr_free(&dy);
  free(out);
  for (int k = 0; k < 3; k++) {
    free(want[k]);
    free(mag[k]);
  }
}

static void test_conv(tyto_plugin_device *dev) {
  conv_one(dev, cgeo_of(2, 8, 9, 10, 6, 3, 1, 1, 1));   /* im2col, K = 72 */
  conv_one(dev, cgeo_of(2, 1, 12, 11, 20, 5, 1, 2, 1)); /* direct, K = 25 */
  conv_one(dev, cgeo_of(1, 4, 7, 6, 6, 3, 2, 1, 2));    /* groups, stride 2 */
}

/* ----------------------------------------------------------------- main -- */

static void run_all(tyto_plugin_device *dev, uint32_t dt) {
  HT = dt;
  U = dt == TYTO_PLUGIN_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
  TINY = (dt == TYTO_PLUGIN_DTYPE_BF16 ? 0x1p-134 : 0x1p-25) + 0x1p-120;
  test_copyfill(dev);
  test_reduce(dev);
  test_index(dev);
  test_pool(dev);
  test_random(dev);
  test_matmul(dev);
  test_conv(dev);
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : TEST_OPENCL_PLUGIN;
  if (getenv("TYTO_TEST_UNDER_VALGRIND") != NULL) {
    printf("skipped under valgrind: every check builds OpenCL programs\n");
    return 77;
  }
  char root[] = "/tmp/tyto-ocl-bf16-XXXXXX";
  if (mkdtemp(root) == NULL)
    return 1;
  cache_dir_option = root;
  /* bf16 on every device; f16 through the testing option where the device
   * lacks cl_khr_fp16. */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1)
      setenv("TYTO_OPENCL_FP16_WITHOUT_EXTENSION", "1", 1);
    else
      unsetenv("TYTO_OPENCL_FP16_WITHOUT_EXTENSION");
    uint32_t n = plugin_start(path);
    tyto_plugin_device *dev = NULL;
    if (n == 0) {
      plugin_stop();
      rmdir(root);
      printf("no OpenCL device here\n");
      return 77;
    }
    if (OK(info->fns->device_open(state, 0, &dev))) {
      tyto_plugin_device_info di = {.struct_size = sizeof di};
      OK(info->fns->device_query(state, 0, &di));
      if (pass == 0 &&
          !(di.dtypes & TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F16))) {
        /* Without cl_khr_fp16 every family refuses f16, naming why. */
        int64_t s[2] = {4, 4};
        tyto_plugin_layout l[3] = {layout(TYTO_PLUGIN_DTYPE_F16, 2, s),
                                   layout(TYTO_PLUGIN_DTYPE_F16, 2, s),
                                   layout(TYTO_PLUGIN_DTYPE_F16, 2, s)};
        const uint32_t ops[3] = {TYTO_PLUGIN_OP_MATMUL, TYTO_PLUGIN_OP_COPY,
                                 TYTO_PLUGIN_OP_SOFTMAX};
        for (int k = 0; k < 3; k++) {
          tyto_plugin_op_desc d = desc_of(ops[k], k ? 1 : 2, l, 1, &l[2]);
          EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "f16 needs cl_khr_fp16, which this device lacks");
        }
      }
      run_all(dev, pass == 0 ? TYTO_PLUGIN_DTYPE_BF16 : TYTO_PLUGIN_DTYPE_F16);
      df->device_close(dev);
    }
    plugin_stop();
  }
  unsetenv("TYTO_OPENCL_FP16_WITHOUT_EXTENSION");
  return suite_end(root);
}
