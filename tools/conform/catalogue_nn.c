/*
 * Catalogue cases of the layout ops (PAD, GATHER, SCATTER_ADD, ONE_HOT) and
 * of the derivatives of conv2d and the poolings (see catalogue_int.h).
 * Indices are whole numbers stored in the dtype, drawn inside the axis they
 * index: what an out-of-range index does is not part of the ABI.
 */
#include "catalogue_int.h"

#include <stdio.h>
#include <string.h>

#define OP(x) TYTO_PLUGIN_OP_##x

/* ------------------------------------------------------------------ pad -- */

/* One PAD case: input shape/strides/offset, mode, (before, after) pairs,
 * output strides (NULL: row-major). */
static void pad_case(cf_builder *b, const char *name, uint32_t rank,
                     const int64_t *shape, const int64_t *strides,
                     int64_t offset, int mode, const int64_t *pads,
                     const int64_t *out_strides) {
  int64_t os[TYTO_PLUGIN_MAX_RANK];
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  for (uint32_t a = 0; a < rank; a++)
    os[a] = shape[a] + pads[2 * a] + pads[2 * a + 1];
  cf_in_set(b, c, 0, rank, shape, strides, offset);
  cf_out_set(b, c, 0, rank, os, out_strides, out_strides ? 3 : 0);
  c->n_iattrs = 1 + 2 * rank;
  c->iattrs[0] = mode;
  for (uint32_t k = 0; k < 2 * rank; k++)
    c->iattrs[1 + k] = pads[k];
  if (mode == 0) {
    c->n_fattrs = 1;
    c->fattrs[0] = -1.5;
  }
}

static void pad_cases(cf_builder *b) {
  static const int64_t s2[2] = {4, 5}, p2[4] = {1, 2, 0, 3};
  static const int64_t tr[2] = {1, 4}, step[2] = {13, 2};
  static const int64_t s3[3] = {3, 4, 5}, p3[6] = {0, 2, 1, 1, 3, 0};
  static const int64_t perm3[3] = {1, 15, 3}, pr3[6] = {2, 1, 0, 3, 1, 4};
  static const int64_t z[2] = {0, 3}, pz[4] = {1, 1, 0, 2};
  static const int64_t big[2] = {200, 300}, pbig[4] = {3, 5, 7, 2};
  static const int64_t ostr[2] = {1, 9}; /* [7,8] output, column-major+gap */
  pad_case(b, "constant [4,5] (1,2),(0,3)", 2, s2, NULL, 0, 0, p2, NULL);
  pad_case(b, "constant, transposed input", 2, s2, tr, 0, 0, p2, NULL);
  pad_case(b, "constant, transposed output", 2, s2, NULL, 0, 0, p2, ostr);
  pad_case(b, "constant rank-3 [3,4,5]", 3, s3, NULL, 0, 0, p3, NULL);
  pad_case(b, "constant size-0 [0,3]", 2, z, NULL, 0, 0, pz, NULL);
  pad_case(b, "constant rank-0", 0, NULL, NULL, 0, 0, NULL, NULL);
  pad_case(b, "reflect [4,5] (1,2),(0,3)", 2, s2, NULL, 0, 1, p2, NULL);
  pad_case(b, "reflect, stepped+offset input", 2, s2, step, 4, 1, p2, NULL);
  pad_case(b, "reflect, permuted rank-3", 3, s3, perm3, 0, 1, pr3, NULL);
  pad_case(b, "reflect, transposed output", 2, s2, NULL, 0, 1, p2, ostr);
  pad_case(b, "reflect large [200,300]", 2, big, NULL, 0, 1, pbig, NULL);
}

/* --------------------------------------------------- gather, scatter_add -- */

/* GATHER (data, indices -> out) or SCATTER_ADD (base, indices, updates ->
 * out) along `axis` of data/base: the gathered shape is
 * data.shape[:axis] + indices.shape + data.shape[axis+1:]. Index values
 * are drawn in [0, extent - 1]. */
static void axis_case(cf_builder *b, const char *name, uint32_t rank,
                      const int64_t *shape, const int64_t *strides,
                      uint32_t axis, uint32_t irank, const int64_t *ishape,
                      const int64_t *istrides, const int64_t *gstrides) {
  int64_t gs[TYTO_PLUGIN_MAX_RANK];
  uint32_t r = 0;
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  for (uint32_t k = 0; k < axis; k++)
    gs[r++] = shape[k];
  for (uint32_t k = 0; k < irank; k++)
    gs[r++] = ishape[k];
  for (uint32_t k = axis + 1; k < rank; k++)
    gs[r++] = shape[k];
  cf_in_set(b, c, 0, rank, shape, strides, strides ? 2 : 0);
  cf_in_set(b, c, 1, irank, ishape, istrides, istrides ? 1 : 0);
  cf_in_values(c, 1, CF_WHOLE, 0, (double)(shape[axis] - 1));
  if (b->e->op == OP(GATHER)) {
    cf_out_set(b, c, 0, r, gs, gstrides, 0);
  } else {
    cf_in_set(b, c, 2, r, gs, gstrides, 0);
    cf_out_set(b, c, 0, rank, shape, NULL, 0);
  }
  c->n_iattrs = 1;
  c->iattrs[0] = axis;
}

static void gather_cases(cf_builder *b) {
  static const int64_t d2[2] = {5, 6}, i7[1] = {7}, i12[1] = {12};
  static const int64_t d3[3] = {4, 5, 6}, i23[2] = {2, 3};
  static const int64_t tr3[3] = {1, 4, 20}, istep[2] = {6, 2};
  static const int64_t z[1] = {0};
  static const int64_t dbig[2] = {300, 64}, ibig[1] = {1000};
  /* [7,6] gathered tensor stored column-major (data for SCATTER_ADD's
   * updates, the output for GATHER) */
  static const int64_t gcol[2] = {1, 7}, gcol12[2] = {1, 12};
  const int scatter = b->e->op == OP(SCATTER_ADD);
  /* SCATTER_ADD: more indices than the axis has places, so some repeat. */
  if (!scatter) {
    axis_case(b, "[5,6] axis 0, indices [7]", 2, d2, NULL, 0, 1, i7, NULL,
              NULL);
    axis_case(b, "[5,6] axis 0, column-major output", 2, d2, NULL, 0, 1, i7,
              NULL, gcol);
  } else {
    axis_case(b, "[5,6] axis 0, 12 indices (repeats)", 2, d2, NULL, 0, 1, i12,
              NULL, NULL);
    axis_case(b, "column-major updates (repeats)", 2, d2, NULL, 0, 1, i12, NULL,
              gcol12);
  }
  axis_case(b, "[4,5,6] axis 1, indices [2,3]", 3, d3, NULL, 1, 2, i23, NULL,
            NULL);
  axis_case(b, "permuted [4,5,6] axis 2, stepped idx", 3, d3, tr3, 2, 2, i23,
            istep, NULL);
  axis_case(b, "[5,6] axis 1, rank-0 index", 2, d2, NULL, 1, 0, NULL, NULL,
            NULL);
  axis_case(b, "[5,6] axis 0, size-0 indices", 2, d2, NULL, 0, 1, z, NULL,
            NULL);
  axis_case(b, "[300,64] axis 0, 1000 indices", 2, dbig, NULL, 0, 1, ibig, NULL,
            NULL);
}

/* -------------------------------------------------------------- one_hot -- */

static void one_hot_case(cf_builder *b, const char *name, uint32_t rank,
                         const int64_t *shape, const int64_t *strides,
                         int64_t depth, int out_strided) {
  int64_t os[TYTO_PLUGIN_MAX_RANK], ost[TYTO_PLUGIN_MAX_RANK];
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  if (rank > 0) /* shape is NULL for rank 0 */
    memcpy(os, shape, rank * sizeof *os);
  os[rank] = depth;
  /* stepped output: every element two apart */
  for (uint32_t a = rank + 1, st = 2; a-- > 0; st *= (uint32_t)os[a])
    ost[a] = st;
  cf_in_set(b, c, 0, rank, shape, strides, strides ? 1 : 0);
  cf_in_values(c, 0, CF_WHOLE, 0, (double)(depth - 1));
  cf_out_set(b, c, 0, rank + 1, os, out_strided ? ost : NULL, 0);
}

static void one_hot_cases(cf_builder *b) {
  static const int64_t s1[1] = {7}, s2[2] = {3, 4}, tr[2] = {1, 3};
  static const int64_t z[1] = {0}, big[1] = {2000};
  one_hot_case(b, "[7] depth 5", 1, s1, NULL, 5, 0);
  one_hot_case(b, "transposed [3,4] depth 6", 2, s2, tr, 6, 0);
  one_hot_case(b, "rank-0 depth 4", 0, NULL, NULL, 4, 0);
  one_hot_case(b, "[3,4] depth 3, stepped output", 2, s2, NULL, 3, 1);
  one_hot_case(b, "size-0 [0] depth 3", 1, z, NULL, 3, 0);
  one_hot_case(b, "[2000] depth 37", 1, big, NULL, 37, 0);
}

void cf_layout_cases(cf_builder *b) {
  switch (b->e->op) {
  case OP(PAD): pad_cases(b); break;
  case OP(ONE_HOT): one_hot_cases(b); break;
  default: gather_cases(b); break;
  }
}

/* ---------------------------------------------------- conv2d derivatives -- */

/* NHWC strides of an [N, C, H, W] tensor. */
static void nhwc(const int64_t *s, int64_t *st) {
  st[0] = s[1] * s[2] * s[3];
  st[1] = 1;
  st[2] = s[3] * s[1];
  st[3] = s[1];
}

/* at: stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups.
 * flags: 1 the first input NHWC, 2 the second, 4 the output stepped (every
 * element two apart, offset 1), 8 both inputs flipped (H and W reversed;
 * overrides 1 and 2). */
static void conv_bwd_case(cf_builder *b, const char *name, int64_t n,
                          int64_t c_in, int64_t h, int64_t w, int64_t o,
                          int64_t kh, int64_t kw, const int64_t at[7],
                          int flags) {
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  int64_t xs[4] = {n, c_in, h, w}, ws[4] = {o, c_in / at[6], kh, kw};
  int64_t ys[4] = {n, o, cf_out_extent(h, kh, at[0], at[2], at[4]),
                   cf_out_extent(w, kw, at[1], at[3], at[5])};
  const int data = b->e->op == OP(CONV2D_BACKWARD_DATA);
  const int64_t *in0 = data ? ys : xs, *in1 = data ? ws : ys;
  const int64_t *out = data ? xs : ws;
  int64_t st0[4], st1[4], sto[4], o0 = 0, o1 = 0;
  if (flags & 8) {
    o0 = cf_flip_hw(in0, st0);
    o1 = cf_flip_hw(in1, st1);
  } else {
    nhwc(in0, st0);
    nhwc(in1, st1);
  }
  cf_stepped(4, out, 2, sto);
  cf_in_set(b, c, 0, 4, in0, flags & 9 ? st0 : NULL, o0);
  cf_in_set(b, c, 1, 4, in1, flags & 10 ? st1 : NULL, o1);
  cf_out_set(b, c, 0, 4, out, flags & 4 ? sto : NULL, flags & 4 ? 1 : 0);
  c->n_iattrs = 7;
  for (int i = 0; i < 7; i++)
    c->iattrs[i] = at[i];
}

/* K = C/groups*KH*KW as in catalogue.c's conv_cases; the larger cases
 * have enough output pixels (N*OH*OW) that a weight gradient summed in
 * slices takes many of them. */
void cf_conv_bwd_cases(cf_builder *b) {
  static const int64_t a1[7] = {1, 1, 1, 1, 1, 1, 1};
  static const int64_t a2[7] = {2, 2, 0, 0, 2, 2, 1};
  static const int64_t ag[7] = {1, 2, 1, 0, 1, 1, 2};
  static const int64_t a3[7] = {2, 1, 1, 2, 1, 1, 1};
  static const int64_t a5[7] = {1, 1, 2, 2, 1, 1, 1};
  static const int64_t ag2[7] = {2, 1, 0, 2, 1, 2, 2};
  static const int64_t adw[7] = {1, 1, 1, 1, 1, 1, 4};
  conv_bwd_case(b, "3x3 s1 p1", 2, 3, 9, 10, 4, 3, 3, a1, 0);
  /* W 12: (12 - 5) / 2 leaves the last column out of every window */
  conv_bwd_case(b, "3x3 s2 d2, uncovered column", 2, 3, 11, 12, 5, 3, 3, a2, 0);
  conv_bwd_case(b, "groups 2, s(1,2) p(1,0)", 1, 4, 8, 9, 6, 3, 2, ag, 0);
  conv_bwd_case(b, "1x1 [1,16,7,7]", 1, 16, 7, 7, 8, 1, 1, a1, 0);
  conv_bwd_case(b, "NHWC inputs, s(2,1) p(1,2)", 2, 3, 9, 8, 4, 3, 3, a3, 3);
  conv_bwd_case(b, "stepped+offset output", 2, 3, 9, 10, 4, 3, 3, a1, 4);
  conv_bwd_case(b, "[2,8,12,12] o16 3x3 p1", 2, 8, 12, 12, 16, 3, 3, a1, 0);
  conv_bwd_case(b, "1x5x5 o32 p2 (K=25)", 3, 1, 12, 11, 32, 5, 5, a5, 0);
  conv_bwd_case(b, "flipped inputs, stepped output, K=25", 3, 1, 12, 11, 32, 5,
                5, a5, 8 | 4);
  conv_bwd_case(b, "NHWC inputs, K=25", 3, 1, 12, 11, 32, 5, 5, a5, 3);
  conv_bwd_case(b, "o40 g2 s(2,1) p(0,2) d(1,2) flipped", 2, 4, 7, 9, 40, 2, 3,
                ag2, 8);
  conv_bwd_case(b, "depthwise [2,4,6,7] g4 3x3 p1", 2, 4, 6, 7, 4, 3, 3, adw,
                4);
  conv_bwd_case(b, "K=32 (2x4x4) o17 p1", 5, 2, 9, 9, 17, 4, 4, a1, 0);
  conv_bwd_case(b, "K=33 (3x1x11) o5 p1", 2, 3, 5, 13, 5, 1, 11, a1, 0);
  conv_bwd_case(b, "1x1 [1,1,1,1] o1", 1, 1, 1, 1, 1, 1, 1, a1, 0);
  conv_bwd_case(b, "[16,1,28,28] o32 5x5 p2 (K=25)", 16, 1, 28, 28, 32, 5, 5,
                a5, 0);
  conv_bwd_case(b, "[40,2,20,20] o3 3x3 p1 (K=18)", 40, 2, 20, 20, 3, 3, 3, a1,
                0);
  conv_bwd_case(b, "[16,4,32,32] o6 3x3 p1 (K=36)", 16, 4, 32, 32, 6, 3, 3, a1,
                0);
}

/* ----------------------------------------------------- pool derivatives -- */

/* at: kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w. flags: 1 x-like
 * operands NHWC, 2 the y-like operand NHWC, 4 x drawn as whole numbers in
 * [0, 2] (ties in most windows: the first maximum in row-major order
 * wins), 8 x-like inputs flipped (H and W reversed) and the y-like one
 * stepped by 2 with W reversed (overrides 1 and 2 for the inputs), 16 the
 * output stepped: every other column, rows one apart more, offset 3. */
static void pool_bwd_case(cf_builder *b, const char *name, const int64_t *xs,
                          const int64_t at[6], int flags) {
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  int64_t ys[4] = {xs[0], xs[1], cf_out_extent(xs[2], at[0], at[2], at[4], 1),
                   cf_out_extent(xs[3], at[1], at[3], at[5], 1)};
  int64_t xst[4], yst[4], xfl[4], yfl[4], ost[4], xo = 0, yo = 0;
  const int64_t *xp = NULL, *yp = NULL, *os = NULL;
  nhwc(xs, xst);
  nhwc(ys, yst);
  if (flags & 1)
    xp = xst;
  if (flags & 2)
    yp = yst;
  const int64_t *xi = xp, *yi = yp; /* the inputs' layouts */
  if (flags & 8) {
    xo = cf_flip_hw(xs, xfl);
    cf_stepped(4, ys, 2, yfl);
    yo = (ys[3] - 1) * yfl[3];
    yfl[3] = -yfl[3];
    xi = xfl;
    yi = yfl;
  }
  const int max_bwd = b->e->op == OP(MAX_POOL2D_BACKWARD);
  const int64_t *out = b->e->op == OP(MAX_POOL2D_SELECT) ? ys : xs;
  if (flags & 16) {
    ost[3] = 2;
    ost[2] = 2 * out[3] + 1;
    ost[1] = ost[2] * out[2];
    ost[0] = ost[1] * out[1];
    os = ost;
  }
  switch (b->e->op) {
  case OP(MAX_POOL2D_BACKWARD): /* x, dy -> dx */
    cf_in_set(b, c, 0, 4, xs, xi, xo);
    cf_in_set(b, c, 1, 4, ys, yi, yo);
    break;
  case OP(MAX_POOL2D_SELECT): /* x, t -> y */
    cf_in_set(b, c, 0, 4, xs, xi, xo);
    cf_in_set(b, c, 1, 4, xs, xi, xo);
    break;
  default: /* AVG_POOL2D_BACKWARD: dy -> dx */
    cf_in_set(b, c, 0, 4, ys, yi, yo);
    break;
  }
  if (os != NULL)
    cf_out_set(b, c, 0, 4, out, os, 3);
  else
    cf_out_set(b, c, 0, 4, out, max_bwd ? NULL : out == ys ? yp : xp, 0);
  if (flags & 4)
    cf_in_values(c, 0, CF_WHOLE, 0, 2);
  c->n_iattrs = 6;
  for (int i = 0; i < 6; i++)
    c->iattrs[i] = at[i];
}

/* Windows and strides up to 4 are the ones the OpenCL plugin unrolls, and
 * with strides at least the kernel's (each x element in at most one
 * window) its MAX_POOL2D_BACKWARD writes dx in one pass: geometries on
 * either side of both, each run once plain (ties for the max ops) and once
 * in another layout. */
void cf_pool_bwd_cases(cf_builder *b) {
  static const int64_t xs[4] = {2, 3, 9, 10}, big[4] = {4, 8, 32, 32};
  static const int64_t xs2[4] = {2, 3, 11, 13}, xs4[4] = {3, 2, 2, 3};
  static const int64_t one[4] = {1, 1, 1, 1};
  static const int64_t at[3][6] = {
      {3, 3, 2, 2, 1, 1}, {2, 2, 2, 2, 0, 0}, {3, 2, 1, 2, 1, 0}};
  static const struct {
    const char *name;
    int64_t at[6];
  } ex[] = {{"2x2 s2 p1", {2, 2, 2, 2, 1, 1}},
            {"2x2 s3 (gaps)", {2, 2, 3, 3, 0, 0}},
            {"3x3 s3 p1", {3, 3, 3, 3, 1, 1}},
            {"5x5 s5", {5, 5, 5, 5, 0, 0}},
            {"5x5 s2 p2", {5, 5, 2, 2, 2, 2}},
            {"1x1", {1, 1, 1, 1, 0, 0}},
            {"2x3 s(4,3) p(1,2)", {2, 3, 4, 3, 1, 2}},
            {"4x4 s1", {4, 4, 1, 1, 0, 0}},
            {"5x5 s6 (gaps)", {5, 5, 6, 6, 0, 0}},
            {"2x2 s1 p1", {2, 2, 1, 1, 1, 1}}};
  /* the other layout of geometry k: k % 4 */
  static const int lay[4] = {8, 16 | 1, 8 | 16, 1 | 2};
  static const char *const lay_name[4] = {
      "flipped inputs", "NHWC x, stepped output", "flipped, stepped output",
      "NHWC operands"};
  static const int64_t e2[6] = {2, 2, 2, 2, 1, 1}, e3[6] = {3, 3, 1, 1, 2, 2};
  const int max = b->e->op != OP(AVG_POOL2D_BACKWARD);
  const int ties = max ? 4 : 0;
  char name[64];
  pool_bwd_case(b, "3x3 s2 p1 (overlapping)", xs, at[0], 0);
  pool_bwd_case(b, "2x2 s2", xs, at[1], 0);
  pool_bwd_case(b, "3x2 s(1,2) p(1,0)", xs, at[2], 0);
  pool_bwd_case(b, "NHWC operands, 3x3 s2 p1", xs, at[0], 3);
  pool_bwd_case(b, "NHWC y-side only, 2x2 s2", xs, at[1], 2);
  if (max) {
    pool_bwd_case(b, "ties: whole-number x, 3x3 s2 p1", xs, at[0], 4);
    pool_bwd_case(b, "ties: whole-number x, 2x2 s2", xs, at[1], 4);
  }
  pool_bwd_case(b, "[4,8,32,32] 3x3 s2 p1", big, at[0], 0);
  for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
    pool_bwd_case(b, ex[k].name, xs2, ex[k].at, ties);
    snprintf(name, sizeof name, "%s, %s", ex[k].name, lay_name[k % 4]);
    pool_bwd_case(b, name, xs2, ex[k].at, lay[k % 4] | (k % 2 ? 0 : ties));
  }
  pool_bwd_case(b, "1x1 [1,1,1,1]", one, ex[5].at, 0);
  pool_bwd_case(b, "2x2 p1 [1,1,1,1]", one, e2, 0);
  pool_bwd_case(b, "3x3 s1 p2 [3,2,2,3]", xs4, e3, ties);
}
