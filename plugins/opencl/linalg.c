/*
 * Linear algebra on the last two axes, batched over the leading ones, as
 * plugins/cpu/linalg.c defines it through LAPACK: INV, DET, LOGDET and
 * SOLVE (LU with partial pivoting), CHOLESKY (lower), QR (Householder,
 * reduced, LAPACK's signs) and TRIANGULAR_SOLVE.
 *
 * Each matrix is factorised by a segment of s work-items (s a power of two,
 * chosen at prepare from the matrix size) that cooperate on every column or
 * row update, with barriers between the steps; a work-group of `local`
 * work-items runs local / s matrices side by side. The matrix is copied,
 * whatever its strides, into a dense row-major scratch matrix in the
 * workspace (one per segment in flight; the work-groups loop over the
 * batch), factorised there and written out through the output's strides.
 * Every work-item meets every barrier: a segment past the end of the batch
 * redoes a valid matrix and writes nothing. No barrier sits inside a
 * branch, and conditions that differ between work-items bound loops rather
 * than enclose them: PoCL 3.1 miscompiles some such branches otherwise.
 *  - LU (getrf's choices: the first largest |a| of the column is the pivot)
 *    eliminates below the pivot in A and, at the same steps, in the
 *    right-hand sides B (the identity for INV), then back-substitutes.
 *    DET is sign(P) * prod(diag(U)) with the exponent kept apart so that
 *    partial products neither overflow nor underflow; LOGDET sums
 *    log |u_ii|. A zero pivot gives DET 0 and LOGDET -inf.
 *  - CHOLESKY reads the lower triangle only (potrf 'L') and fails on the
 *    first diagonal element <= 0 (a NaN goes through, as in OpenBLAS's
 *    potrf, the CPU plugin's).
 *  - QR: dgeqr2 (dlarfg's beta = -sign(alpha) * norm, so R's diagonal has
 *    LAPACK's signs), then Q = H_0 ... H_{k-1} I formed backwards as
 *    dorg2r does.
 *  - TRIANGULAR_SOLVE reads one triangle of A through its strides
 *    (transposed by swapping them) and substitutes in B's dense copy.
 *
 * A singular matrix (INV, SOLVE) or one that is not positive definite
 * (CHOLESKY) fails the launch, as on the CPU, with an error naming the op
 * and the first such matrix of the batch: the kernel writes each matrix's
 * LAPACK-style info and raises a flag in the workspace; launch reads the
 * flag back (a blocking read, so these ops wait for the stream) and, when
 * it is set, the infos. Such a matrix's output is left as it was; unlike
 * the CPU, which stops at it, the other matrices of the batch are written.
 * TRIANGULAR_SOLVE does not look for zeros on the diagonal (trsm gives
 * infinities or NaNs), nor does QR for rank deficiency.
 */
#include "ops.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../common/linalg_plan.h"
#include "errors.h"
#include "layout.h"

/* LA_MAX_LOCAL bounds the work-group size (the local arrays' length). */
#define LA_MAX_LOCAL 256

static const char *const source_parts[] = {
    "#define LA_LOCAL 256\n"
    "#define LA_SYNC barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)\n"
    "/* This work-item's lane in its segment of s, the segment's index in the\n"
    "   group, and matrices per group. */\n"
    "#define LA_LANES(s)                                                  \\\n"
    "  int lane = (int)get_local_id(0) % (s);                             \\\n"
    "  int sub = (int)get_local_id(0) / (s);                              \\\n"
    "  int mpg = (int)get_local_size(0) / (s)\n"
    "/* The batch loop of a segment: matrix bi; LA_VALID 0 past the end (the\n"
    "   segment then redoes matrix b0 and writes nothing). */\n"
    "#define LA_BATCH                                                     \\\n"
    "  for (long b0 = (long)get_group_id(0) * mpg; b0 < batch;            \\\n"
    "       b0 += (long)get_num_groups(0) * mpg)\n"
    "#define LA_MATRIX long bi = min(b0 + sub, batch - 1)\n"
    "#define LA_VALID (b0 + sub < batch)\n"
    "/* The scratch of this segment. */\n"
    "#define LA_SCRATCH \\\n"
    "  (ws + wb + slot * ((long)get_group_id(0) * mpg + sub))\n"
    "/* Element loops over rows [r0, r1) x columns [c0, c1) without a\n"
    "   division per element: the s lanes form a grid of s / cw rows by cw\n"
    "   columns, cw the power of two >= the columns (at most s). */\n"
    "inline int la_cw(int cols, int s) {\n"
    "  int cw = 1;\n"
    "  while (cw < cols && cw < s)\n"
    "    cw *= 2;\n"
    "  return cw;\n"
    "}\n"
    "#define LA_GRID(r, r0, r1, c, c0, c1)                              \\\n"
    "  for (int cw_ = la_cw((c1) - (c0), s), r = (r0) + lane / cw_;     \\\n"
    "       r < (r1); r += s / cw_)                                       \\\n"
    "    for (int c = (c0) + lane % cw_; c < (c1); c += cw_)\n"
    "/* Every kernel's parameters: the op's mode (tyto_la_lu), matrices,\n"
    "   A m x n, B (SOLVE, TRIANGULAR_SOLVE) and outputs x and y (QR's R),\n"
    "   each a buffer, origin, batch strides, row and column strides; the\n"
    "   workspace's scratch (ws + wb, slot elements per matrix) and flag;\n"
    "   TRIANGULAR_SOLVE's attributes; s work-items per matrix. */\n"
    "#define LA_PARAMS                                                    \\\n"
    "  int mode, long batch, int m, int n, int k, long8 bshape, int lead, \\\n"
    "      __global const T *a, long ab, long8 abst, long ars, long acs,  \\\n"
    "      __global const T *b, long bb, long8 bbst, long brs, long bcs,  \\\n"
    "      __global T *x, long xb, long8 xbst, long xrs, long xcs,        \\\n"
    "      __global T *y, long yb, long8 ybst, long yrs, long ycs,        \\\n"
    "      __global T *ws, long wb, long slot, __global int *flag, long fb,\\\n"
    "      int lower, int unit, int s\n"
    "/* dst (rows x cols, row-major) = the matrix at src, strides (rs,\n"
    "   cs). */\n"
    "inline void la_load(__global T *dst, __global const T *src, long rs,\n"
    "                    long cs, int rows, int cols, int lane, int s) {\n"
    "  LA_GRID(r, 0, rows, c, 0, cols)\n"
    "    dst[r * cols + c] = src[r * rs + c * cs];\n"
    "}\n"
    "/* The reverse; part 1 keeps the lower triangle, 2 the upper, writing\n"
    "   zeros elsewhere; 0 keeps everything. */\n"
    "inline void la_store(__global T *dst, long rs, long cs,\n"
    "                     __global const T *src, int ld, int rows, int cols,\n"
    "                     int part, int lane, int s) {\n"
    "  LA_GRID(r, 0, rows, c, 0, cols) {\n"
    "    T v = src[r * ld + c];\n"
    "    if ((part == 1 && c > r) || (part == 2 && c < r))\n"
    "      v = 0;\n"
    "    dst[r * rs + c * cs] = v;\n"
    "  }\n"
    "}\n",
    "/* Solves M Y = X in place for the n x k row-major X, M triangular at\n"
    "   strides (rs, cs): lower (forward substitution) or upper (backward).\n"
    "   Each step subtracts the finished row from the rows left and finishes\n"
    "   the next row (divides it by its diagonal element), as trsm does.\n"
    "   Starts after and ends with a barrier. */\n"
    "inline void la_trsm(__global const T *M, long rs, long cs, int lower,\n"
    "                    int unit, __global T *X, int n, int k, int lane,\n"
    "                    int s) {\n"
    "  int first = lower ? 0 : n - 1;\n"
    "  if (!unit && n > 0)\n"
    "    for (int c = lane; c < k; c += s)\n"
    "      X[first * k + c] /= M[first * (rs + cs)];\n"
    "  LA_SYNC;\n"
    "  for (int t = 0; t < n - 1; t++) {\n"
    "    int i = lower ? t : n - 1 - t, next = lower ? i + 1 : i - 1;\n"
    "    LA_GRID(r, lower ? i + 1 : 0, lower ? n : i, c, 0, k) {\n"
    "      T v = X[r * k + c] - M[r * rs + i * cs] * X[i * k + c];\n"
    "      if (r == next && !unit)\n"
    "        v /= M[r * (rs + cs)];\n"
    "      X[r * k + c] = v;\n"
    "    }\n"
    "    LA_SYNC;\n"
    "  }\n"
    "}\n",
    "/* The pivot of column j of the n x n row-major A: the first row r >= j\n"
    "   of largest |A[r][j]| (n when none compares, i.e. all NaN), its value\n"
    "   in *v. Segment-wide; the caller barriers before rv is reused. */\n"
    "inline int la_pivot(__global const T *A, int n, int j, __local T *rv,\n"
    "                    __local int *ri, int lane, int s, T *v) {\n"
    "  T bv = 0, ba = -1;\n"
    "  int bi = n;\n"
    "  for (int r = j + lane; r < n; r += s) {\n"
    "    T x = A[r * n + j];\n"
    "    if (fabs(x) > ba) {\n"
    "      ba = fabs(x);\n"
    "      bv = x;\n"
    "      bi = r;\n"
    "    }\n"
    "  }\n"
    "  rv[lane] = bv;\n"
    "  ri[lane] = bi;\n"
    "  LA_SYNC;\n"
    "  for (int h = s >> 1; h > 0; h >>= 1) {\n"
    "    if (lane < h) {\n"
    "      int i1 = ri[lane], i2 = ri[lane + h];\n"
    "      T a1 = fabs(rv[lane]), a2 = fabs(rv[lane + h]);\n"
    "      if (i2 < n && (i1 == n || a2 > a1 || (a2 == a1 && i2 < i1))) {\n"
    "        rv[lane] = rv[lane + h];\n"
    "        ri[lane] = i2;\n"
    "      }\n"
    "    }\n"
    "    LA_SYNC;\n"
    "  }\n"
    "  *v = rv[0];\n"
    "  return ri[0];\n"
    "}\n",
    "/* INV (mode 0), SOLVE (1), DET (2), LOGDET (3). B: SOLVE's right-hand\n"
    "   sides; x the output; flag[fb] is raised and flag[fb + 1 + b] holds\n"
    "   matrix b's info (INV, SOLVE). */\n"
    "__kernel void tyto_la_lu(LA_PARAMS) {\n"
    "  __local T lv[LA_LOCAL];\n"
    "  __local int li[LA_LOCAL];\n"
    "  LA_LANES(s);\n"
    "  __local T *rv = lv + sub * s;\n"
    "  __local int *ri = li + sub * s;\n"
    "  int kb = mode == 0 ? n : mode == 1 ? k : 0;\n"
    "  __global T *A = LA_SCRATCH, *B = A + n * n;\n"
    "  LA_BATCH {\n"
    "    LA_MATRIX;\n"
    "    la_load(A, a + ab + tyto_offset(bi, bshape, abst, lead), ars, acs,\n"
    "            n, n, lane, s);\n"
    "    /* Conditions go into loop bounds, not around the loops: see\n"
    "       la_store's callers. */\n"
    "    la_load(B, mode == 1 ? b + bb + tyto_offset(bi, bshape, bbst, lead)\n"
    "                         : A, brs, bcs, mode == 1 ? n : 0, k, lane, s);\n"
    "    LA_GRID(r, 0, mode == 0 ? n : 0, c, 0, n)\n"
    "      B[r * n + c] = r == c ? (T)1 : (T)0;\n"
    "    LA_SYNC;\n"
    "    int info = 0, odd = 0;\n"
    "    for (int j = 0; j < n; j++) {\n"
    "      T akk = A[j * n + j], piv;\n"
    "      int p = la_pivot(A, n, j, rv, ri, lane, s, &piv);\n"
    "      if (p == n) {\n"
    "        p = j;\n"
    "        piv = akk;\n"
    "      }\n"
    "      if (piv == 0 && info == 0)\n"
    "        info = j + 1;\n"
    "      odd ^= p != j;\n"
    "      /* Swap rows j and p right of column j and in B; the multipliers\n"
    "         of column j (rows j and p swapped: row p's is akk's). */\n"
    "      int w = n - j - 1, nsw = p != j ? w + kb : 0;\n"
    "      for (int t = lane; t <= w + nsw; t += s) {\n"
    "        if (t == 0) {\n"
    "          A[j * n + j] = piv;\n"
    "        } else if (t <= w) {\n"
    "          int r = j + t;\n"
    "          T v = r == p ? akk : A[r * n + j];\n"
    "          A[r * n + j] = piv != 0 ? v / piv : v;\n"
    "        } else {\n"
    "          int u = t - w - 1, ld = u < w ? n : kb;\n"
    "          __global T *m = u < w ? A + j + 1 + u : B + u - w;\n"
    "          T v = m[j * ld];\n"
    "          m[j * ld] = m[p * ld];\n"
    "          m[p * ld] = v;\n"
    "        }\n"
    "      }\n"
    "      LA_SYNC;\n",
    "      /* The rank-1 update of the rows below j, in A and B (with a zero\n"
    "         pivot too, as dgetf2: the column is then zero). */\n"
    "      LA_GRID(r, j + 1, n, c, 0, w + kb) {\n"
    "        T l = A[r * n + j];\n"
    "        if (c < w)\n"
    "          A[r * n + j + 1 + c] -= l * A[j * n + j + 1 + c];\n"
    "        else\n"
    "          B[r * kb + c - w] -= l * B[j * kb + c - w];\n"
    "      }\n"
    "      LA_SYNC;\n"
    "    }\n"
    "    /* No barrier inside a branch, and conditions that differ between\n"
    "       work-items go into loop bounds rather than around loops: PoCL 3.1\n"
    "       runs some such branches for every work-item of the group. */\n"
    "    if (mode >= 2 && lane == 0 && LA_VALID) {\n"
    "      T v;\n"
    "      if (mode == 3) {\n"
    "        v = 0;\n"
    "        for (int j = 0; j < n; j++)\n"
    "          v += log(fabs(A[j * n + j]));\n"
    "        if (info && v == v) /* a NaN in the matrix stays NaN */\n"
    "          v = -INFINITY;\n"
    "      } else {\n"
    "        T f = odd ? (T)-1 : (T)1;\n"
    "        int e = 0, ej;\n"
    "        for (int j = 0; j < n; j++) {\n"
    "          f = frexp(f * A[j * n + j], &ej);\n"
    "          e += ej;\n"
    "        }\n"
    "        v = info && f == f ? (T)0 : ldexp(f, e);\n"
    "      }\n"
    "      x[xb + tyto_offset(bi, bshape, xbst, lead)] = v;\n"
    "    }\n"
    "    if (mode < 2 && lane == 0 && LA_VALID) {\n"
    "      flag[fb + 1 + bi] = info;\n"
    "      if (info)\n"
    "        flag[fb] = 1;\n"
    "    }\n"
    "    la_trsm(A, n, 1, 0, 0, B, mode < 2 ? n : 0, kb, lane, s);\n"
    "    la_store(x + xb + tyto_offset(bi, bshape, xbst, lead), xrs, xcs, B,\n"
    "             kb, mode < 2 && LA_VALID && !info ? n : 0, kb, 0, lane, s);\n"
    "    LA_SYNC;\n"
    "  }\n"
    "}\n",
    "/* CHOLESKY, lower, right-looking; info as tyto_la_lu's. */\n"
    "__kernel void tyto_la_cholesky(LA_PARAMS) {\n"
    "  LA_LANES(s);\n"
    "  __global T *A = LA_SCRATCH;\n"
    "  LA_BATCH {\n"
    "    LA_MATRIX;\n"
    "    __global const T *am = a + ab + tyto_offset(bi, bshape, abst, lead);\n"
    "    LA_GRID(r, 0, n, c, 0, n)\n"
    "      A[r * n + c] = c <= r ? am[r * ars + c * acs] : (T)0;\n"
    "    LA_SYNC;\n"
    "    int info = 0;\n"
    "    for (int j = 0; j < n; j++) {\n"
    "      T d = A[j * n + j];\n"
    "      if (info == 0 && d <= 0)\n"
    "        info = j + 1;\n"
    "      T sd = sqrt(d);\n"
    "      int end = info ? 0 : n; /* a failed matrix stops here */\n"
    "      for (int r = j + 1 + lane; r < end; r += s)\n"
    "        A[r * n + j] /= sd;\n"
    "      LA_SYNC;\n"
    "      if (!info && lane == 0)\n"
    "        A[j * n + j] = sd;\n"
    "      LA_GRID(r, j + 1, end, c, j + 1, n)\n"
    "        if (c <= r)\n"
    "          A[r * n + c] -= A[r * n + j] * A[c * n + j];\n"
    "      LA_SYNC;\n"
    "    }\n"
    "    if (lane == 0 && LA_VALID) {\n"
    "      flag[fb + 1 + bi] = info;\n"
    "      if (info)\n"
    "        flag[fb] = 1;\n"
    "    }\n"
    "    la_store(x + xb + tyto_offset(bi, bshape, xbst, lead), xrs, xcs, A,\n"
    "             n, LA_VALID && !info ? n : 0, n, 1, lane, s);\n"
    "    LA_SYNC;\n"
    "  }\n"
    "}\n",
    "/* Adds (a, q), |x| as a scaled sum of squares (a^2 q), as dlassq. */\n"
    "inline void la_ssq(T v, T *a, T *q) {\n"
    "  if (v != 0) {\n"
    "    if (*a < v) {\n"
    "      T t = *a / v;\n"
    "      *q = 1 + *q * t * t;\n"
    "      *a = v;\n"
    "    } else {\n"
    "      T t = v / *a;\n"
    "      *q += t * t;\n"
    "    }\n"
    "  }\n"
    "}\n"
    "/* Applies H = I - tau v v^T from the left to columns [c0, c1) of rows\n"
    "   j.. m-1 of X (ld ldx); v is column j of V below row j, 1 at row j.\n"
    "   W (one per column) holds v^T X. Starts after and ends with a\n"
    "   barrier; rv is the segment's local scratch. */\n"
    "inline void la_reflect(__global const T *V, int ldv, int j, int m,\n"
    "                       T tau, __global T *X, int ldx, int c0, int c1,\n"
    "                       __global T *W, __local T *rv, int lane, int s) {\n"
    "  int nc = c1 - c0, rg = 1;\n"
    "  while (nc > 0 && rg * 2 * nc <= s)\n"
    "    rg *= 2;\n"
    "  /* Few columns: rg lanes per column, then a tree over them; many:\n"
    "     a lane per column (rg 1, no tree). */\n"
    "  int c = c0 + lane / rg, g = lane % rg;\n"
    "  if (rg == 1) {\n"
    "    for (int cc = c; cc < c1 && tau != 0; cc += s) {\n"
    "      T acc = X[j * ldx + cc];\n"
    "      for (int r = j + 1; r < m; r++)\n"
    "        acc += V[r * ldv + j] * X[r * ldx + cc];\n"
    "      W[cc] = acc;\n"
    "    }\n"
    "  } else {\n"
    "    T acc = 0;\n"
    "    for (int r = j + g; r < m && c < c1 && tau != 0; r += rg)\n"
    "      acc += (r == j ? (T)1 : V[r * ldv + j]) * X[r * ldx + c];\n"
    "    rv[lane] = acc;\n"
    "  }\n"
    "  LA_SYNC;\n"
    "  for (int h = rg >> 1; h > 0; h >>= 1) {\n"
    "    if (g < h)\n"
    "      rv[lane] += rv[lane + h];\n"
    "    LA_SYNC;\n"
    "  }\n"
    "  if (rg > 1 && g == 0 && c < c1)\n"
    "    W[c] = rv[lane];\n"
    "  LA_SYNC;\n"
    "  LA_GRID(r, j, tau != 0 ? m : 0, cc, c0, c1) {\n"
    "    T v = r == j ? (T)1 : V[r * ldv + j];\n"
    "    X[r * ldx + cc] -= tau * v * W[cc];\n"
    "  }\n"
    "  LA_SYNC;\n"
    "}\n",
    "/* QR of the m x n A: x = Q [m, k], y = R [k, n], k = min(m, n).\n"
    "   Scratch: A, Q, W (n), tau (k). */\n"
    "__kernel void tyto_la_qr(LA_PARAMS) {\n"
    "  __local T la[LA_LOCAL], lq[LA_LOCAL];\n"
    "  LA_LANES(s);\n"
    "  __local T *ra = la + sub * s, *rq = lq + sub * s;\n"

    "  __global T *A = LA_SCRATCH, *Q = A + m * n, *W = Q + m * k;\n"
    "  __global T *tau = W + n;\n"
    "  LA_BATCH {\n"
    "    LA_MATRIX;\n"
    "    la_load(A, a + ab + tyto_offset(bi, bshape, abst, lead), ars, acs,\n"
    "            m, n, lane, s);\n"
    "    LA_SYNC;\n"
    "    for (int j = 0; j < k; j++) {\n"
    "      /* dlarfg: the norm of column j below row j, as (scale, ssq). */\n"
    "      T alpha = A[j * n + j], sa = 0, sq = 1;\n"
    "      for (int i = j + 1 + lane; i < m; i += s)\n"
    "        la_ssq(fabs(A[i * n + j]), &sa, &sq);\n"
    "      ra[lane] = sa;\n"
    "      rq[lane] = sq;\n"
    "      LA_SYNC;\n"
    "      for (int h = s >> 1; h > 0; h >>= 1) {\n"
    "        if (lane < h) {\n"
    "          T a1 = ra[lane], a2 = ra[lane + h], q1 = rq[lane],\n"
    "            q2 = rq[lane + h];\n"
    "          if (a2 > a1) {\n"
    "            T t = a1; a1 = a2; a2 = t;\n"
    "            t = q1; q1 = q2; q2 = t;\n"
    "          }\n"
    "          T t = a1 > 0 ? a2 / a1 : (T)1;\n"
    "          ra[lane] = a1;\n"
    "          rq[lane] = q1 + q2 * t * t;\n"
    "        }\n"
    "        LA_SYNC;\n"
    "      }\n"
    "      T xnorm = ra[0] * sqrt(rq[0]), beta = alpha, tj = 0, scal = 1;\n"
    "      if (xnorm != 0) {\n"
    "        beta = -copysign(hypot(alpha, xnorm), alpha);\n"
    "        tj = (beta - alpha) / beta;\n"
    "        scal = 1 / (alpha - beta);\n"
    "      }\n"
    "      for (int i = j + lane; i < m; i += s) {\n"
    "        if (i == j) {\n"
    "          A[j * n + j] = beta;\n"
    "          tau[j] = tj;\n"
    "        } else if (tj != 0) {\n"
    "          A[i * n + j] *= scal;\n"
    "        }\n"
    "      }\n"
    "      LA_SYNC;\n"
    "      la_reflect(A, n, j, m, tj, A, n, j + 1, n, W, ra, lane, s);\n"
    "    }\n"
    "    la_store(y + yb + tyto_offset(bi, bshape, ybst, lead), yrs, ycs, A,\n"
    "             n, LA_VALID ? k : 0, n, 2, lane, s);\n"
    "    LA_GRID(i, 0, m, c, 0, k)\n"
    "      Q[i * k + c] = i == c ? (T)1 : (T)0;\n"
    "    LA_SYNC;\n"
    "    for (int j = k - 1; j >= 0; j--)\n"
    "      la_reflect(A, n, j, m, tau[j], Q, k, j, k, W, ra, lane, s);\n"
    "    la_store(x + xb + tyto_offset(bi, bshape, xbst, lead), xrs, xcs, Q,\n"
    "             k, LA_VALID ? m : 0, k, 0, lane, s);\n"
    "    LA_SYNC;\n"
    "  }\n"
    "}\n",
    "/* TRIANGULAR_SOLVE: op(A) X = B; (ars, acs) are op(A)'s strides and\n"
    "   `lower` whether op(A) is lower triangular. */\n"
    "__kernel void tyto_la_trsolve(LA_PARAMS) {\n"
    "  LA_LANES(s);\n"
    "  __global T *X = LA_SCRATCH;\n"
    "  LA_BATCH {\n"
    "    LA_MATRIX;\n"
    "    la_load(X, b + bb + tyto_offset(bi, bshape, bbst, lead), brs, bcs,\n"
    "            n, k, lane, s);\n"
    "    LA_SYNC;\n"
    "    la_trsm(a + ab + tyto_offset(bi, bshape, abst, lead), ars, acs,\n"
    "            lower, unit, X, n, k, lane, s);\n"
    "    la_store(x + xb + tyto_offset(bi, bshape, xbst, lead), xrs, xcs, X,\n"
    "             k, LA_VALID ? n : 0, k, 0, lane, s);\n"
    "    LA_SYNC;\n"
    "  }\n"
    "}\n",
};

enum { LA_INV, LA_SOLVE, LA_DET, LA_LOGDET }; /* tyto_la_lu's modes */

typedef struct la_impl {
  cl_kernel kernel;
  int64_t batch;              /* matrices */
  uint32_t lead;              /* batch axes */
  int m, n, k;                /* A is m x n; B n x k; QR: k = min(m, n) */
  int lower, transpose, unit; /* TRIANGULAR_SOLVE's iattrs */
  int checked;                /* INV, SOLVE, CHOLESKY: flag and infos */
  int s;                      /* work-items per matrix */
  size_t local, groups;       /* work-group size and count */
  int64_t slot;               /* scratch elements per matrix */
  int64_t head;               /* elements before the scratch (the infos) */
} la_impl;

static int owns(uint32_t op) {
  return tpc_linalg_op(op);
}

/* The checks of plugins/cpu/linalg.c (plugins/common/linalg_plan.c), then
 * the kernels' limit, filling *c. */
static tyto_plugin_error *check_into(tyto_plugin_device *dev, const ocl_desc *d,
                                     la_impl *c) {
  const tyto_plugin_host *h = OCL_HOST(dev);
  if (ocl_is16(d->dtype))
    return ocl_error(h, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: dtype %s is a storage format, for which linear "
                     "algebra is not defined (sdk/docs/ops.md, \"Dtypes\"); "
                     "cast the operands to f32 or f64 (tyto_cast) and the "
                     "result back",
                     ocl_op_name(d->op), ocl_dtype_name(d->dtype));
  tpc_operands a;
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  tpc_linalg g;
  memset(&g, 0, sizeof g);
  char why[512];
  int code = tpc_linalg_check(&a, &g, why, sizeof why);
  if (code != 0)
    return ocl_error(h, (tyto_plugin_code)code, "%s", why);
  int64_t m = g.m, n = g.n, k = g.k;
  /* The kernels index inside one matrix's scratch with int. */
  int64_t slot;
  switch (d->op) {
  case TYTO_PLUGIN_OP_QR:
    slot = m > 0 && n > INT_MAX / m ? INT64_MAX : m * n + m * k + n + k;
    break;
  case TYTO_PLUGIN_OP_TRIANGULAR_SOLVE:
    slot = n > 0 && k > INT_MAX / n ? INT64_MAX : n * k;
    break;
  case TYTO_PLUGIN_OP_SOLVE:
    slot = n > 0 && n + k > INT_MAX / n ? INT64_MAX : n * (n + k);
    break;
  case TYTO_PLUGIN_OP_INV:
    slot = n > 0 && n > INT_MAX / 2 / n ? INT64_MAX : 2 * n * n;
    break;
  default: slot = n > 0 && n > INT_MAX / n ? INT64_MAX : n * n; break;
  }
  if (slot > INT_MAX)
    return ocl_error(h, TYTO_PLUGIN_ERR_UNSUPPORTED,
                     "%s: matrices of %lld x %lld are beyond the opencl "
                     "plugin's 32-bit indexing inside a matrix",
                     ocl_op_name(d->op), (long long)m, (long long)n);
  c->lead = g.lead;
  c->m = (int)m;
  c->n = (int)n;
  c->k = (int)k;
  c->slot = slot;
  c->batch = g.batch;
  c->lower = g.lower;
  c->transpose = g.transpose;
  c->unit = g.unit;
  c->checked = g.checked;
  return NULL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  la_impl c;
  memset(&c, 0, sizeof c);
  return check_into(dev, d, &c);
}

/* The largest power of two <= v (v >= 1). */
static int64_t pow2_floor(int64_t v) {
  int64_t p = 1;
  while (p <= v / 2)
    p *= 2;
  return p;
}

/* Work-items per matrix, work-group size and count, and the workspace.
 * On a GPU, s grows with the work of one step (4 elements per work-item
 * at least) up to the work-group size the kernel allows. A CPU device
 * (PoCL) runs a work-group on one core, looping over its work-items
 * between barriers: there s = (the matrix's larger side) / 4, at most 64,
 * measured best from 8 x 8 to 256 x 256 (1 for small matrices: a
 * work-item per matrix, 64 matrices per work-group). */
static tyto_plugin_error *plan(tyto_plugin_device *dev, tyto_plugin_kernel *k,
                               la_impl *c) {
  const ocl_desc *d = &k->desc;
  size_t wg_max = 0;
  cl_int err = clGetKernelWorkGroupInfo(c->kernel, dev->info->id,
                                        CL_KERNEL_WORK_GROUP_SIZE,
                                        sizeof wg_max, &wg_max, NULL);
  if (err != CL_SUCCESS)
    return ocl_error_cl(OCL_HOST(dev), "clGetKernelWorkGroupInfo", err,
                        "%s: the work-group size of its kernel on \"%s\"",
                        ocl_op_name(d->op), dev->info->name);
  int64_t top = pow2_floor(wg_max < LA_MAX_LOCAL ? (int64_t)wg_max
                                                 : (int64_t)LA_MAX_LOCAL);
  int64_t m = c->m, n = c->n, work;
  switch (d->op) {
  case TYTO_PLUGIN_OP_QR: work = m * n; break;
  case TYTO_PLUGIN_OP_CHOLESKY: work = n * n / 2; break;
  default: work = c->slot; break;
  }
  cl_device_type type = 0;
  if (clGetDeviceInfo(dev->info->id, CL_DEVICE_TYPE, sizeof type, &type,
                      NULL) != CL_SUCCESS)
    type = 0;
  int64_t side = m > n ? m : n;
  int64_t want =
      type & CL_DEVICE_TYPE_CPU ? (side < 256 ? side : 256) / 4 : work / 4;
  int64_t s = pow2_floor(want > 1 ? want : 1);
  if (s > top)
    s = top;
  /* Work-groups of 64 work-items at least, fewer when the batch has too
   * few matrices to fill them. */
  int64_t mpg = 1;
  while (mpg * s < 64 && mpg * 2 * s <= top && mpg < c->batch)
    mpg *= 2;
  int64_t local = mpg * s;
  /* Enough groups to fill a large device; fewer when the scratch of the
   * matrices in flight would pass 256 MiB. */
  int64_t groups = (c->batch + mpg - 1) / mpg, cap = 1024;
  int64_t per_group = c->slot * (int64_t)d->elem * mpg;
  if (per_group > 0 && cap > ((int64_t)256 << 20) / per_group)
    cap = ((int64_t)256 << 20) / per_group;
  if (groups > cap)
    groups = cap;
  if (groups < 1)
    groups = 1;
  c->s = (int)s;
  c->local = (size_t)local;
  c->groups = (size_t)groups;
  /* The flag and the infos as ints, rounded up to whole elements. */
  c->head = c->checked
                ? ((1 + c->batch) * 4 + (int64_t)d->elem - 1) / (int64_t)d->elem
                : 0;
  k->workspace_bytes =
      (uint64_t)(c->head + groups * mpg * c->slot) * (uint64_t)d->elem;
  return NULL;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const ocl_desc *d = &k->desc;
  la_impl *c = calloc(1, sizeof *c);
  if (c == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  k->impl = c;
  tyto_plugin_error *e = check_into(dev, d, c);
  if (e != NULL)
    return e;
  const char *name;
  switch (d->op) {
  case TYTO_PLUGIN_OP_CHOLESKY: name = "tyto_la_cholesky"; break;
  case TYTO_PLUGIN_OP_QR: name = "tyto_la_qr"; break;
  case TYTO_PLUGIN_OP_TRIANGULAR_SOLVE: name = "tyto_la_trsolve"; break;
  default: name = "tyto_la_lu"; break;
  }
  char *source = ocl_source_join(source_parts,
                                 sizeof source_parts / sizeof source_parts[0]);
  if (source == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  e = ocl_kernel_new(dev, d->dtype, source, NULL, name, &c->kernel);
  free(source);
  return e != NULL ? e : plan(dev, k, c);
}

static void release(tyto_plugin_kernel *k) {
  la_impl *c = k->impl;
  if (c == NULL)
    return;
  if (c->kernel != NULL)
    clReleaseKernel(c->kernel);
  free(c);
  k->impl = NULL;
}

/* ---- launch ---------------------------------------------------------------
 */

/* A matrix operand: buffer, origin, batch strides, then its row and column
 * strides (swapped when `swap`). `l` NULL: an absent operand. A rank-lead
 * layout (DET's output) has no matrix strides: zeros. */
static void arg_matrix(ocl_args *a, const ocl_arg *v,
                       const tyto_plugin_layout *l, uint32_t lead, int swap) {
  cl_mem mem = l != NULL ? v->mem : NULL;
  cl_long8 bst =
      ocl_long8_rev(l != NULL ? l->strides : NULL, l != NULL ? lead : 0, 0);
  int64_t rs = l != NULL && l->rank == lead + 2 ? l->strides[lead] : 0;
  int64_t cs = l != NULL && l->rank == lead + 2 ? l->strides[lead + 1] : 0;
  ocl_args_put(a, sizeof mem, &mem);
  ocl_args_long(a, l != NULL ? v->origin : 0);
  ocl_args_put(a, sizeof bst, &bst);
  ocl_args_long(a, swap ? cs : rs);
  ocl_args_long(a, swap ? rs : cs);
}

/* The first failed matrix's error, from the flag and infos the kernel left
 * in the workspace (a blocking read: waits for the stream). */
static tyto_plugin_error *read_infos(tyto_plugin_device *dev,
                                     tyto_plugin_stream *s, la_impl *c,
                                     const ocl_desc *d, const ocl_arg *ws) {
  const char *name = ocl_op_name(d->op);
  size_t at = (size_t)ws->origin * d->elem;
  cl_int flag = 0;
  tyto_plugin_error *e = ocl_read(dev, s, ws->mem, at, sizeof flag, &flag, name,
                                  "the factorisation's flag");
  if (e != NULL || flag == 0)
    return e;
  size_t bytes = (size_t)c->batch * sizeof(cl_int);
  cl_int *info = malloc(bytes);
  if (info == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "%s: out of host memory reading %zu bytes of infos", name,
                     bytes);
  e = ocl_read(dev, s, ws->mem, at + sizeof(cl_int), bytes, info, name,
               "the factorisation's infos");
  int64_t b = 0;
  while (e == NULL && b < c->batch && info[b] == 0)
    b++;
  if (e != NULL) {
    /* reported above */
  } else if (b == c->batch) {
    e = ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INTERNAL,
                  "%s: the device raised the failure flag but no matrix "
                  "failed",
                  name);
  } else if (d->op == TYTO_PLUGIN_OP_CHOLESKY) {
    e = ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                  "cholesky: matrix %lld of the batch is not positive "
                  "definite (leading minor %d)",
                  (long long)b, (int)info[b]);
  } else {
    e = ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                  "%s: matrix %lld of the batch is singular (pivot %d of its "
                  "LU factorisation is zero)",
                  name, (long long)b, (int)info[b]);
  }
  free(info);
  return e;
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  la_impl *c = k->impl;
  const ocl_desc *d = &k->desc;
  const tyto_plugin_layout *al = &d->in[0].l;
  uint32_t lead = c->lead;
  cl_long8 bshape = ocl_long8_rev(al->shape, lead, 1);
  cl_mem wsm = ws->mem;
  ocl_args a = OCL_ARGS(dev, c->kernel);
  ocl_args_int(&a, d->op == TYTO_PLUGIN_OP_INV     ? LA_INV
                   : d->op == TYTO_PLUGIN_OP_SOLVE ? LA_SOLVE
                   : d->op == TYTO_PLUGIN_OP_DET   ? LA_DET
                                                   : LA_LOGDET);
  ocl_args_long(&a, c->batch);
  ocl_args_int(&a, c->m);
  ocl_args_int(&a, c->n);
  ocl_args_int(&a, c->k);
  ocl_args_put(&a, sizeof bshape, &bshape);
  ocl_args_int(&a, (int)lead);
  arg_matrix(&a, &in[0], al, lead, c->transpose);
  arg_matrix(&a, &in[1], d->n_in > 1 ? &d->in[1].l : NULL, lead, 0);
  arg_matrix(&a, &out[0], &d->out[0].l, lead, 0);
  arg_matrix(&a, &out[1], d->n_out > 1 ? &d->out[1].l : NULL, lead, 0);
  ocl_args_put(&a, sizeof wsm, &wsm);
  ocl_args_long(&a, ws->origin + c->head);
  ocl_args_long(&a, c->slot);
  cl_mem flag = c->checked ? ws->mem : NULL;
  ocl_args_put(&a, sizeof flag, &flag);
  ocl_args_long(&a, ws->origin * (int64_t)(d->elem / sizeof(cl_int)));
  ocl_args_int(&a, c->lower != c->transpose);
  ocl_args_int(&a, c->unit);
  ocl_args_int(&a, c->s);
  if (a.e != NULL)
    return a.e;
  tyto_plugin_error *e;
  if (c->checked &&
      (e = ocl_clear(dev, s, ws->mem, (size_t)ws->origin * d->elem,
                     sizeof(cl_int), ocl_op_name(d->op),
                     "the factorisation's flag",
                     "linalg (clearing the failure flag)")) != NULL)
    return e;
  size_t global = c->groups * c->local;
  e = ocl_enqueue(dev, s, c->kernel, 1, &global, &c->local, "linalg kernel");
  if (e == NULL && c->checked)
    e = read_infos(dev, s, c, d, ws);
  return e;
}

const ocl_family ocl_family_linalg = {"linalg", owns,   check,
                                      prepare,  launch, release};
