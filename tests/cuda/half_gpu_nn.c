/*
 * test_cuda_half's matrix products, convolutions, pooling, index ops and
 * random draws in f16 and bf16 (half_gpu.h), against f64 references
 * computed here, not rounded (a result rounded once from a value near the
 * reference may lie a whole unit from the reference's own rounding).
 * Sums of products get u |want| (the one rounding) plus
 * k 2^-23 sum |a b| (f32 accumulation of k exact products, with room for
 * the order the library picks); values that are only moved must come back
 * bit for bit; random draws are the f32 draw of random.md (computed with
 * plugins/cpu/philox.h) rounded to the dtype, bit for bit.
 */
#define _DEFAULT_SOURCE /* M_PI */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../plugins/cpu/philox.h"
#include "half_gpu.h"

/* ---- matrix products -------------------------------------------------- */

/* C[b] = op(A[b]) B[b] with A of [ba, m, k] (or [ba, k, m] transposed),
 * B of [bb, k, n] (a batch of 1 broadcast); the check of C. */
static void matmul_case(uint32_t dt, const char *what, int64_t batch, int64_t m,
                        int64_t k, int64_t n, int ta, int shared_b, int ones) {
  int64_t sa[3] = {batch, ta ? k : m, ta ? m : k};
  int64_t sb[3] = {shared_b ? 1 : batch, k, n}, sc[3] = {batch, m, n};
  hg_tensor ab[2] = {hg_new(dt, 3, sa), hg_new(dt, 3, sb)};
  hg_tensor c = hg_new(dt, 3, sc);
  for (int t = 0; t < 2; t++) {
    if (ones)
      for (int64_t i = 0; i < ab[t].n; i++)
        hg_set(&ab[t], i, 1);
    else
      hg_random(&ab[t], -1, 1);
  }
  int64_t flags[2] = {ta, 0};
  if (hg_run(what, TYTO_PLUGIN_OP_MATMUL, 2, ab, 1, &c, 2, flags, 0, NULL, NULL,
             0)) {
    int bad = 0;
    for (int64_t b = 0; b < batch; b++)
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double s = 0, sa_ = 0;
          for (int64_t l = 0; l < k; l++) {
            double x = hg_get(&ab[0], b * m * k + (ta ? l * m + i : i * k + l));
            double y = hg_get(&ab[1], (shared_b ? 0 : b) * k * n + l * n + j);
            s += x * y;
            sa_ += fabs(x * y);
          }
          hg_near(what, &c, (b * m + i) * n + j, s,
                  hg_u(dt) * fabs(s) + (double)k * 0x1p-23 * sa_, &bad);
        }
    hg_done(what, bad, c.n);
  }
  hg_free(&ab[0]);
  hg_free(&ab[1]);
  hg_free(&c);
}

void hg_matmul(uint32_t dt) {
  matmul_case(dt, "matmul, batched", 2, 37, 70, 45, 0, 0, 0);
  matmul_case(dt, "matmul, A transposed, B shared", 3, 29, 64, 33, 1, 1, 0);
  /* 4096 products of ones: exactly 4096 in f32; a 16-bit accumulator stops
   * at 256 (bf16) or 2048 (f16). */
  matmul_case(dt, "matmul, k = 4096 of ones", 1, 2, 4096, 3, 0, 0, 1);
}

/* ---- convolutions ---------------------------------------------------------
 */

typedef struct cv {
  int64_t N, C, H, W, O, KH, KW, OH, OW, s, p;
} cv;

/* x[n, c, h, w] of an [N, C, H, W] tensor. */
#define AT4(t, d1, d2, d3, a, b, c_, d)                                        \
  hg_get((t), (((a) * (d1) + (b)) * (d2) + (c_)) * (d3) + (d))

/* Runs the statements for every tap (n, o, oh, ow, c, kh, kw) that reads
 * x[n, c, ih, iw] (not the padding). */
#define TAPS(g, ...)                                                           \
  for (int64_t n = 0; n < (g).N; n++)                                          \
    for (int64_t o = 0; o < (g).O; o++)                                        \
      for (int64_t oh = 0; oh < (g).OH; oh++)                                  \
        for (int64_t ow = 0; ow < (g).OW; ow++)                                \
          for (int64_t c = 0; c < (g).C; c++)                                  \
            for (int64_t kh = 0; kh < (g).KH; kh++)                            \
              for (int64_t kw = 0; kw < (g).KW; kw++) {                        \
                int64_t ih = oh * (g).s - (g).p + kh,                          \
                        iw = ow * (g).s - (g).p + kw;                          \
                if (ih >= 0 && ih < (g).H && iw >= 0 && iw < (g).W) {          \
                  __VA_ARGS__                                                  \
                }                                                              \
              }

/* CONV2D (with a bias), its data and filter gradients on geometry g. */
static void conv_case(uint32_t dt, cv g, int ones) {
  int64_t sx[4] = {g.N, g.C, g.H, g.W}, sw[4] = {g.O, g.C, g.KH, g.KW};
  int64_t sy[4] = {g.N, g.O, g.OH, g.OW}, sb[1] = {g.O};
  int64_t attrs[7] = {g.s, g.s, g.p, g.p, 1, 1, 1};
  hg_tensor x = hg_new(dt, 4, sx), w = hg_new(dt, 4, sw), y = hg_new(dt, 4, sy),
            b = hg_new(dt, 1, sb);
  if (ones) {
    for (int64_t i = 0; i < x.n; i++)
      hg_set(&x, i, 1);
    for (int64_t i = 0; i < w.n; i++)
      hg_set(&w, i, 1);
  } else {
    hg_random(&x, -1, 1);
    hg_random(&w, -1, 1);
    hg_random(&b, -1, 1);
  }
  const double u = hg_u(dt), K = (double)(g.C * g.KH * g.KW);
  char what[96];
  /* Forward, bias included in the one rounding's reference. */
  hg_tensor xwb[3] = {x, w, b};
  snprintf(what, sizeof what, "conv2d [%lld,%lld,%lld,%lld]%s", (long long)g.N,
           (long long)g.C, (long long)g.H, (long long)g.W,
           ones ? " of ones" : "");
  if (hg_run(what, TYTO_PLUGIN_OP_CONV2D, 3, xwb, 1, &y, 7, attrs, 0, NULL,
             NULL, 0)) {
    static double ref[1 << 16], mag[1 << 16];
    for (int64_t i = 0; i < y.n; i++) {
      ref[i] = hg_get(&b, (i / (g.OH * g.OW)) % g.O);
      mag[i] = fabs(ref[i]);
    }
    TAPS(g, {
      double xv = AT4(&x, g.C, g.H, g.W, n, c, ih, iw),
             wv = AT4(&w, g.C, g.KH, g.KW, o, c, kh, kw);
      int64_t i = ((n * g.O + o) * g.OH + oh) * g.OW + ow;
      ref[i] += xv * wv;
      mag[i] += fabs(xv * wv);
    })
    int bad = 0;
    for (int64_t i = 0; i < y.n; i++)
      hg_near(what, &y, i, ref[i], u * fabs(ref[i]) + K * 0x1p-23 * mag[i],
              &bad);
    hg_done(what, bad, y.n);
  }
  /* Data gradient: dx = sum over taps of dy w. */
  hg_tensor dy = hg_new(dt, 4, sy), dx = hg_new(dt, 4, sx);
  hg_random(&dy, -1, 1);
  hg_tensor dyw[2] = {dy, w};
  snprintf(what, sizeof what, "conv2d_backward_data C=%lld", (long long)g.C);
  if (hg_run(what, TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA, 2, dyw, 1, &dx, 7,
             attrs, 0, NULL, NULL, 0)) {
    static double ref[1 << 16], mag[1 << 16];
    memset(ref, 0, sizeof ref);
    memset(mag, 0, sizeof mag);
    TAPS(g, {
      double dv = AT4(&dy, g.O, g.OH, g.OW, n, o, oh, ow),
             wv = AT4(&w, g.C, g.KH, g.KW, o, c, kh, kw);
      int64_t i = ((n * g.C + c) * g.H + ih) * g.W + iw;
      ref[i] += dv * wv;
      mag[i] += fabs(dv * wv);
    })
    int bad = 0;
    for (int64_t i = 0; i < dx.n; i++)
      hg_near(what, &dx, i, ref[i],
              u * fabs(ref[i]) + (double)(g.O * g.KH * g.KW) * 0x1p-23 * mag[i],
              &bad);
    hg_done(what, bad, dx.n);
  }
  /* Filter gradient: dw = sum over images and positions of x dy (the GEMM
   * path for small C KH KW, cuDNN's for larger ones). */
  hg_tensor dw = hg_new(dt, 4, sw);
  hg_tensor xdy[2] = {x, dy};
  snprintf(what, sizeof what, "conv2d_backward_filter C=%lld", (long long)g.C);
  if (hg_run(what, TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, 2, xdy, 1, &dw, 7,
             attrs, 0, NULL, NULL, 0)) {
    static double ref[1 << 16], mag[1 << 16];
    memset(ref, 0, sizeof ref);
    memset(mag, 0, sizeof mag);
    TAPS(g, {
      double xv = AT4(&x, g.C, g.H, g.W, n, c, ih, iw),
             dv = AT4(&dy, g.O, g.OH, g.OW, n, o, oh, ow);
      int64_t i = ((o * g.C + c) * g.KH + kh) * g.KW + kw;
      ref[i] += xv * dv;
      mag[i] += fabs(xv * dv);
    })
    int bad = 0;
    for (int64_t i = 0; i < dw.n; i++)
      hg_near(what, &dw, i, ref[i],
              u * fabs(ref[i]) + (double)(g.N * g.OH * g.OW) * 0x1p-23 * mag[i],
              &bad);
    hg_done(what, bad, dw.n);
  }
  hg_tensor *all[] = {&x, &w, &y, &b, &dy, &dx, &dw};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    hg_free(all[i]);
}

void hg_conv(uint32_t dt) {
  /* C KH KW = 45: the GEMM weight gradient; 288: cuDNN's. */
  conv_case(dt, (cv){2, 5, 9, 9, 6, 3, 3, 9, 9, 1, 1}, 0);
  conv_case(dt, (cv){2, 32, 6, 6, 4, 3, 3, 3, 3, 2, 1}, 0);
  /* 576 products of ones at the interior positions: a 16-bit
   * accumulator stops at 256 (bf16). */
  conv_case(dt, (cv){1, 64, 6, 6, 2, 3, 3, 6, 6, 1, 1}, 1);
}

/* ---- pooling ----------------------------------------------------------------
 */

void hg_pool(uint32_t dt) {
  /* 3x3 windows, stride 2, padding 1, over 9x9: overlapping windows. */
  const int64_t N = 2, C = 3, H = 9, OH = 5, K = 3, S = 2, P = 1;
  int64_t sx[4] = {N, C, H, H}, sy[4] = {N, C, OH, OH};
  int64_t attrs[6] = {K, K, S, S, P, P};
  hg_tensor x = hg_new(dt, 4, sx), y = hg_new(dt, 4, sy),
            dy = hg_new(dt, 4, sy), dx = hg_new(dt, 4, sx);
  hg_random(&x, -4, 4);
  hg_random(&dy, -1, 1);
  const double u = hg_u(dt);
  for (int avg = 0; avg < 2; avg++) {
    const char *what = avg ? "avg_pool2d" : "max_pool2d";
    if (!hg_run(what,
                avg ? TYTO_PLUGIN_OP_AVG_POOL2D : TYTO_PLUGIN_OP_MAX_POOL2D, 1,
                &x, 1, &y, 6, attrs, 0, NULL, NULL, 0))
      continue;
    int bad = 0;
    for (int64_t pl = 0; pl < N * C; pl++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OH; ow++) {
          double m = -INFINITY, s = 0, cnt = 0;
          for (int64_t h = oh * S - P; h < oh * S - P + K; h++)
            for (int64_t w = ow * S - P; w < ow * S - P + K; w++)
              if (h >= 0 && h < H && w >= 0 && w < H) {
                double v = hg_get(&x, (pl * H + h) * H + w);
                m = fmax(m, v), s += v, cnt++;
              }
          double want = avg ? s / cnt : m;
          hg_near(what, &y, (pl * OH + oh) * OH + ow, want,
                  avg ? u * fabs(want) + 0x1p-21 * 4 : 0, &bad);
        }
    hg_done(what, bad, y.n);
  }
  /* The gradients: dx at each position sums the dy of the windows that
   * take it (MAX: as their first maximum; AVG: each / its count). */
  for (int avg = 0; avg < 2; avg++) {
    const char *what = avg ? "avg_pool2d_backward" : "max_pool2d_backward";
    hg_tensor xdy[2] = {x, dy};
    if (!hg_run(what,
                avg ? TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD
                    : TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD,
                avg ? 1 : 2, avg ? &dy : xdy, 1, &dx, 6, attrs, 0, NULL, NULL,
                0))
      continue;
    static double ref[2 * 3 * 9 * 9]; /* N C H W */
    memset(ref, 0, sizeof ref);
    for (int64_t pl = 0; pl < N * C; pl++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OH; ow++) {
          double m = -INFINITY, cnt = 0;
          int64_t at = -1;
          for (int64_t h = oh * S - P; h < oh * S - P + K; h++)
            for (int64_t w = ow * S - P; w < ow * S - P + K; w++)
              if (h >= 0 && h < H && w >= 0 && w < H) {
                double v = hg_get(&x, (pl * H + h) * H + w);
                if (v > m)
                  m = v, at = (pl * H + h) * H + w;
                cnt++;
              }
          double g = hg_get(&dy, (pl * OH + oh) * OH + ow);
          if (!avg) {
            ref[at] += g;
            continue;
          }
          for (int64_t h = oh * S - P; h < oh * S - P + K; h++)
            for (int64_t w = ow * S - P; w < ow * S - P + K; w++)
              if (h >= 0 && h < H && w >= 0 && w < H)
                ref[(pl * H + h) * H + w] += g / cnt;
        }
    int bad = 0;
    for (int64_t i = 0; i < dx.n; i++)
      hg_near(what, &dx, i, ref[i], u * fabs(ref[i]) + 0x1p-20, &bad);
    hg_done(what, bad, dx.n);
  }
  hg_free(&x);
  hg_free(&y);
  hg_free(&dy);
  hg_free(&dx);
}

/* ---- index ops --------------------------------------------------------------
 */

void hg_index(uint32_t dt) {
  int64_t sv[2] = {6, 7}, sp[2] = {8, 11}, si[1] = {5}, sg[2] = {5, 7};
  hg_tensor v = hg_new(dt, 2, sv), padded = hg_new(dt, 2, sp);
  hg_random(&v, -100, 100);
  /* Constant padding with 0.1 (rounded to the dtype), then reflect. */
  for (int reflect = 0; reflect < 2; reflect++) {
    int64_t attrs[5] = {reflect, 1, 1, 2, 2};
    double value = 0.1;
    const char *what = reflect ? "pad, reflect" : "pad, constant";
    if (!hg_run(what, TYTO_PLUGIN_OP_PAD, 1, &v, 1, &padded, 5, attrs,
                reflect ? 0 : 1, &value, NULL, 0))
      continue;
    int bad = 0;
    for (int64_t i = 0; i < sp[0]; i++)
      for (int64_t j = 0; j < sp[1]; j++) {
        int64_t a = i - 1, b = j - 2;
        int in = a >= 0 && a < sv[0] && b >= 0 && b < sv[1];
        if (reflect) {
          a = a < 0 ? -a : a >= sv[0] ? 2 * (sv[0] - 1) - a : a;
          b = b < 0 ? -b : b >= sv[1] ? 2 * (sv[1] - 1) - b : b;
          in = 1;
        }
        double want =
            in ? hg_get(&v, a * sv[1] + b) : ref_round(value, hg_fmt(dt));
        hg_near(what, &padded, i * sp[1] + j, want, 0, &bad);
      }
    hg_done(what, bad, padded.n);
  }
  /* GATHER rows 5, 0, 2, 2, 1; SCATTER_ADD adds five rows back there (row 2
   * twice, summed in f32 and rounded once: within u). */
  hg_tensor ind = hg_new(dt, 1, si), g = hg_new(dt, 2, sg),
            s = hg_new(dt, 2, sv);
  static const double rows[5] = {5, 0, 2, 2, 1};
  for (int k = 0; k < 5; k++)
    hg_set(&ind, k, rows[k]);
  int64_t ax0 = 0;
  hg_tensor gin[2] = {v, ind};
  if (hg_run("gather", TYTO_PLUGIN_OP_GATHER, 2, gin, 1, &g, 1, &ax0, 0, NULL,
             NULL, 0)) {
    int bad = 0;
    for (int64_t k = 0; k < 5; k++)
      for (int64_t j = 0; j < sv[1]; j++)
        hg_near("gather", &g, k * sv[1] + j,
                hg_get(&v, (int64_t)rows[k] * sv[1] + j), 0, &bad);
    hg_done("gather", bad, g.n);
  }
  hg_tensor sin_[3] = {v, ind, g};
  if (hg_run("scatter_add", TYTO_PLUGIN_OP_SCATTER_ADD, 3, sin_, 1, &s, 1, &ax0,
             0, NULL, NULL, 0)) {
    int bad = 0;
    for (int64_t i = 0; i < sv[0]; i++)
      for (int64_t j = 0; j < sv[1]; j++) {
        double want = hg_get(&v, i * sv[1] + j);
        for (int k = 0; k < 5; k++)
          if (rows[k] == i)
            want += hg_get(&g, k * sv[1] + j);
        hg_near("scatter_add", &s, i * sv[1] + j, want,
                hg_u(dt) * fabs(want) + 0x1p-17 * 300, &bad);
      }
    hg_done("scatter_add", bad, s.n);
  }
  /* ONE_HOT of 5, 0, 2, 2, 1 (and a 7 beyond the depth of 6). */
  int64_t so[2] = {5, 6};
  hg_tensor oh = hg_new(dt, 2, so);
  hg_set(&ind, 4, 7);
  if (hg_run("one_hot", TYTO_PLUGIN_OP_ONE_HOT, 1, &ind, 1, &oh, 0, NULL, 0,
             NULL, NULL, 0)) {
    int bad = 0;
    for (int64_t k = 0; k < 5; k++)
      for (int64_t j = 0; j < 6; j++)
        hg_near("one_hot", &oh, k * 6 + j, hg_get(&ind, k) == j, 0, &bad);
    hg_done("one_hot", bad, oh.n);
  }
  hg_tensor *all[] = {&v, &padded, &ind, &g, &s, &oh};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    hg_free(all[i]);
}

/* ---- random numbers ---------------------------------------------------------
 */

void hg_random_ops(uint32_t dt) {
  const ref_fmt *f = hg_fmt(dt);
  int64_t n = 1001, one = 0;
  uint64_t seed = 0x243f6a8885a308d3ull, off = 5, step = 3;
  int64_t ia[2] = {(int64_t)seed, (int64_t)off};
  hg_tensor out = hg_new(dt, 1, &n), st = hg_new(dt, 0, &one);
  hg_set(&st, 0, (double)step);
  /* UNIFORM on [-3, 5) and BERNOULLI(0.3): the f32 draw, rounded, bit for
   * bit; NORMAL(0.5, 2) to the accuracy of f32 logf, cosf, sinf. */
  static const uint32_t ops[3] = {TYTO_PLUGIN_OP_RANDOM_UNIFORM,
                                  TYTO_PLUGIN_OP_RANDOM_BERNOULLI,
                                  TYTO_PLUGIN_OP_RANDOM_NORMAL};
  static const char *const names[3] = {"random_uniform", "random_bernoulli",
                                       "random_normal"};
  for (int k = 0; k < 3; k++) {
    double fa[2] = {k == 0 ? -3 : k == 1 ? 0.3 : 0.5, k == 0 ? 5 : 2};
    if (!hg_run(names[k], ops[k], 1, &st, 1, &out, 2, ia, k == 1 ? 1 : 2, fa,
                NULL, 0))
      continue;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
      uint32_t r[4];
      tyto_philox_block_step(seed, off + (uint64_t)i / 4, step, r);
      double want, tol = 0;
      if (k == 0) {
        float lo = (float)fa[0], hi = (float)fa[1];
        want = fmaf(hi - lo, tyto_philox_u01_f32(r[i % 4]), lo);
      } else if (k == 1) {
        want = tyto_philox_u01_f64(r[i % 4]) < fa[0];
      } else {
        int p = (int)(i % 4) & ~1;
        double u1 = tyto_philox_u01_f32(r[p]),
               u2 = tyto_philox_u01_f32(r[p + 1]);
        double rad = sqrt(-2 * log(u1)), t = 2 * M_PI * u2;
        want = fa[0] + fa[1] * rad * (i % 2 ? sin(t) : cos(t));
        tol = hg_u(dt) * fabs(want) + fa[1] * 6 * 0x1p-18;
      }
      hg_near(names[k], &out, i, k == 2 ? want : ref_round(want, f), tol, &bad);
    }
    hg_done(names[k], bad, n);
  }
  hg_free(&out);
  hg_free(&st);
}
