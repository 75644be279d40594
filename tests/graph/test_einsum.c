/* tyto_einsum against explicit loops: 38 specs (NumPy's and OCANNL's
 * syntax, ellipsis with broadcasting, repeated labels for traces and
 * diagonals, implicit outputs, one to five operands, rank 0, size-0
 * axes), each result compared with a reference that runs every label
 * combination; derivatives in both directions against central differences
 * (tyto_gradcheck); malformed specs, each with its precise message and
 * caret. Float64: the products agree to 1e-12. */
#include "ad/ad_test.h"

#include <tyto/ops.h>

typedef struct ecase {
  const char *spec; /* what tyto_einsum gets */
  const char *ref;  /* the same, letters only and explicit, for the loops */
  int n;
  int rank[5];
  int64_t shape[5][4];
} ecase;

static const ecase cases[] = {
    {"ij,jk->ik", "ij,jk->ik", 2, {2, 2}, {{3, 4}, {4, 5}}},
    {"ij,jk", "ij,jk->ik", 2, {2, 2}, {{3, 4}, {4, 5}}},
    {"bij,bjk->bik", "bij,bjk->bik", 2, {3, 3}, {{2, 3, 4}, {2, 4, 5}}},
    {"...ij,...jk->...ik",
     "xyij,yjk->xyik",
     2,
     {4, 3},
     {{2, 1, 3, 4}, {5, 4, 2}}},
    {"ii->i", "ii->i", 1, {2}, {{4, 4}}},
    {"ii->", "ii->", 1, {2}, {{4, 4}}},
    {"ii", "ii->", 1, {2}, {{4, 4}}},
    {"i,i->", "i,i->", 2, {1, 1}, {{5}, {5}}},
    {"i,j->ij", "i,j->ij", 2, {1, 1}, {{3}, {4}}},
    {"ij->ji", "ij->ji", 1, {2}, {{3, 4}}},
    {"ij->j", "ij->j", 1, {2}, {{3, 4}}},
    {"ij->", "ij->", 1, {2}, {{3, 4}}},
    {"ij,ij->ij", "ij,ij->ij", 2, {2, 2}, {{3, 4}, {3, 4}}},
    {"ij,ij->", "ij,ij->", 2, {2, 2}, {{3, 4}, {3, 4}}},
    {"ijk->kji", "ijk->kji", 1, {3}, {{2, 3, 4}}},
    {"abc,cd,de->abe",
     "abc,cd,de->abe",
     3,
     {3, 2, 2},
     {{2, 3, 4}, {4, 5}, {5, 3}}},
    {"i,i,i->", "i,i,i->", 3, {1, 1, 1}, {{4}, {4}, {4}}},
    {"ij,jk,kl->il", "ij,jk,kl->il", 3, {2, 2, 2}, {{2, 3}, {3, 4}, {4, 5}}},
    {"ab,bc,cd,de->ae",
     "ab,bc,cd,de->ae",
     4,
     {2, 2, 2, 2},
     {{2, 3}, {3, 4}, {4, 2}, {2, 3}}},
    {"ab,bc,cd,de,ef->af",
     "ab,bc,cd,de,ef->af",
     5,
     {2, 2, 2, 2, 2},
     {{2, 3}, {3, 2}, {2, 4}, {4, 3}, {3, 2}}},
    {"ba", "ba->ab", 1, {2}, {{3, 4}}},
    {"...i,...i", "ai,i->a", 2, {2, 1}, {{3, 4}, {4}}},
    {"i->i", "i->i", 1, {1}, {{5}}},
    {"ijk,ik->j", "ijk,ik->j", 2, {3, 2}, {{2, 3, 4}, {2, 4}}},
    {"iij,jk->ik", "iij,jk->ik", 2, {3, 2}, {{3, 3, 2}, {2, 4}}},
    {"ii,ij->j", "ii,ij->j", 2, {2, 2}, {{3, 3}, {3, 4}}},
    {"ij;jk=>ik", "ij,jk->ik", 2, {2, 2}, {{3, 4}, {4, 2}}},
    {"...|...=>0", "abc->", 1, {3}, {{2, 3, 4}}},
    {"...|... => 0", "ab->", 1, {2}, {{3, 5}}}, /* seed 003's margin loss */
    {",->", ",->", 2, {0, 0}, {{0}, {0}}},
    {"i,->i", "i,->i", 2, {1, 0}, {{4}, {0}}},
    {"->", "->", 1, {0}, {{0}}},
    {"ij,jk->ik", "ij,jk->ik", 2, {2, 2}, {{3, 0}, {0, 2}}},
    {"ij,jk->ik", "ij,jk->ik", 2, {2, 2}, {{0, 4}, {4, 2}}},
    {"iji->j", "iji->j", 1, {3}, {{3, 2, 3}}},
    {"bn,anm,bm->ba",
     "bn,anm,bm->ba",
     3,
     {2, 3, 2},
     {{2, 3}, {4, 3, 5}, {2, 5}}},
    {"ABc,cD->ABD", "ABc,cD->ABD", 2, {3, 2}, {{2, 3, 4}, {4, 2}}},
    {"a...,...->a...", "ax,x->ax", 2, {2, 1}, {{2, 3}, {3}}},
};

/* The reference: every combination of the labels of `ref`, the product of
 * the operands' elements (an extent of 1 broadcast) added into the
 * output's. */
static void reference(const ecase *c, double *const *x, double *out,
                      int64_t out_n) {
  const char *arrow = strstr(c->ref, "->");
  char terms[5][9];
  int nt = 0, len = 0;
  for (const char *p = c->ref; p <= arrow; p++) {
    if (p == arrow || *p == ',') {
      terms[nt][len] = '\0';
      nt++;
      len = 0;
    } else {
      terms[nt][len++] = *p;
    }
  }
  const char *o = arrow + 2;
  int64_t size[128] = {0};
  char labels[64];
  int nl = 0;
  for (int k = 0; k < nt; k++)
    for (int i = 0; terms[k][i]; i++) {
      unsigned char l = (unsigned char)terms[k][i];
      if (!size[l])
        labels[nl++] = (char)l;
      if (c->shape[k][i] > size[l] || !size[l])
        size[l] = c->shape[k][i] ? c->shape[k][i] : -1;
    }
  for (int i = 0; i < nl; i++)
    if (size[(unsigned char)labels[i]] < 0)
      size[(unsigned char)labels[i]] = 0;
  for (int64_t i = 0; i < out_n; i++)
    out[i] = 0;
  int64_t total = 1;
  for (int i = 0; i < nl; i++)
    total *= size[(unsigned char)labels[i]];
  int64_t val[128] = {0};
  for (int64_t it = 0; it < total; it++) {
    int64_t r = it;
    for (int i = nl - 1; i >= 0; i--) {
      int64_t s = size[(unsigned char)labels[i]];
      val[(unsigned char)labels[i]] = r % s;
      r /= s;
    }
    double p = 1;
    for (int k = 0; k < nt; k++) {
      int64_t off = 0;
      for (int i = 0; terms[k][i]; i++) {
        int64_t e = c->shape[k][i];
        off = off * e + (e == 1 ? 0 : val[(unsigned char)terms[k][i]]);
      }
      p *= x[k][off];
    }
    int64_t oi = 0;
    for (int i = 0; o[i]; i++)
      oi = oi * size[(unsigned char)o[i]] + val[(unsigned char)o[i]];
    out[oi] += p;
  }
}

START_TEST(against_loops) {
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const ecase *c = &cases[ci];
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *in[5];
    double *x[5];
    for (int k = 0; k < c->n; k++) {
      in[k] = ad_in(g, c->rank[k], c->shape[k], NULL);
      x[k] = ad_vals(in[k], 100 + 10 * ci + (uint64_t)k);
    }
    tyto_tensor *y = tyto_einsum(c->spec, (size_t)c->n, in);
    ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s: %s", c->spec,
                  tyto_graph_error_message(g));
    int64_t n = tyto_tensor_numel(y);
    double *got = malloc((size_t)(n ? n : 1) * sizeof *got),
           *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    reference(c, x, want, n);
    if (n > 0) {
      ad_eval(y, (size_t)c->n, in, (const double *const *)x, got);
      for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= 1e-12 * fmax(1, fabs(want[i])),
                      "%s: element %lld is %.17g, the loops give %.17g",
                      c->spec, (long long)i, got[i], want[i]);
    }
    free(got);
    free(want);
    for (int k = 0; k < c->n; k++)
      free(x[k]);
    tyto_graph_free(g);
  }
}
END_TEST

/* Shapes inferred: the result's shape for a few specs. */
START_TEST(shapes) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = ad_in(g, 4, AD_S(2, 1, 3, 4), "a");
  tyto_tensor *b = ad_in(g, 3, AD_S(5, 4, 6), "b");
  tyto_tensor *ab[2] = {a, b};
  tyto_tensor *y = tyto_einsum("...ij,...jk->...ik", 2, ab);
  ck_assert_int_eq(tyto_tensor_rank(y), 4);
  const int64_t want[4] = {2, 5, 3, 6};
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(tyto_tensor_shape(y)[i], want[i]);
  tyto_tensor *z = tyto_einsum("...|...=>0", 1, &a);
  ck_assert_int_eq(tyto_tensor_rank(z), 0);
  /* A size-0 axis kept: an empty result of the right shape. */
  tyto_tensor *e0 = ad_in(g, 2, AD_S(0, 4), "e0"),
              *e1 = ad_in(g, 2, AD_S(4, 2), "e1");
  tyto_tensor *ee[2] = {e0, e1};
  tyto_tensor *e = tyto_einsum("ij,jk->ik", 2, ee);
  ck_assert_int_eq(tyto_tensor_shape(e)[0], 0);
  ck_assert_int_eq(tyto_tensor_shape(e)[1], 2);
  tyto_graph_free(g);
}
END_TEST

/* The contraction order follows the cost: A [100,2] B [2,100] C [100,2]
 * as (A B) C makes a 100x100 product (40,000 multiply-adds), A (B C) two
 * 100x2 or 2x2 ones (800): no MATMUL of the graph may be 100x100. Listed
 * the other way round, the same. */
START_TEST(cheapest_order) {
  const char *specs[2] = {"ij,jk,kl->il", "kl,jk,ij->il"};
  for (int v = 0; v < 2; v++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *a = ad_in(g, 2, AD_S(100, 2), "a");
    tyto_tensor *b = ad_in(g, 2, AD_S(2, 100), "b");
    tyto_tensor *c = ad_in(g, 2, AD_S(100, 2), "c");
    tyto_tensor *in[3] = {a, b, c}, *rev[3] = {c, b, a};
    tyto_tensor *y = tyto_einsum(specs[v], 3, v ? rev : in);
    ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                  tyto_graph_error_message(g));
    ck_assert_int_eq(tyto_tensor_shape(y)[0], 100);
    ck_assert_int_eq(tyto_tensor_shape(y)[1], 2);
    int matmuls = 0;
    for (size_t i = 0; i < tyto_graph_size(g); i++) {
      tyto_tensor *t = tyto_graph_tensor(g, i);
      if (tyto_tensor_op(t) != TYTO_OP_MATMUL)
        continue;
      matmuls++;
      ck_assert_msg(tyto_tensor_numel(t) < 10000,
                    "%s: a MATMUL of %lld elements: the costly order", specs[v],
                    (long long)tyto_tensor_numel(t));
    }
    ck_assert_int_eq(matmuls, 2);
    tyto_graph_free(g);
  }
}
END_TEST

/* Both directions of AD through what einsum builds, against central
 * differences. */
START_TEST(derivatives) {
  static const int pick[] = {2, 3, 4, 15, 24, 34, 35, 36};
  for (size_t p = 0; p < sizeof pick / sizeof pick[0]; p++) {
    const ecase *c = &cases[pick[p]];
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *in[5];
    double *x[5];
    for (int k = 0; k < c->n; k++) {
      in[k] = ad_in(g, c->rank[k], c->shape[k], NULL);
      x[k] = ad_vals(in[k], 7 + (uint64_t)k);
    }
    tyto_tensor *y = tyto_einsum(c->spec, (size_t)c->n, in);
    ad_check(ad_weighted_square(y, 3), (size_t)c->n, in, x, 0, 0);
    for (int k = 0; k < c->n; k++)
      free(x[k]);
    tyto_graph_free(g);
  }
}
END_TEST

/* spec, shapes of two operands (rank 0: none), the message's text and,
 * when not NULL, the caret line under the spec. */
typedef struct bad {
  const char *spec;
  int n;
  int rank[2];
  int64_t shape[2][3];
  const char *msg, *caret;
} bad;

static const bad bads[] = {
    {"ij,jk->ik",
     1,
     {2},
     {{2, 3}},
     "the spec has 2 operands, 1 tensor given",
     NULL},
    {"ij->ik",
     1,
     {2},
     {{2, 3}},
     "output label 'k' is in no operand",
     "\n  ij->ik\n       ^"},
    {"ij->ii",
     1,
     {2},
     {{2, 3}},
     "output label 'i' appears twice",
     "\n  ij->ii\n       ^"},
    {"i.j->",
     1,
     {2},
     {{2, 3}},
     "a '.' that does not start an ellipsis",
     "\n  i.j->\n   ^"},
    {"ij,jk->ik",
     2,
     {2, 2},
     {{2, 3}, {4, 5}},
     "'j' is 4 here (operand 1, axis 0) but 3 where it first appears",
     "\n  ij,jk->ik\n     ^"},
    {"ij->",
     1,
     {3},
     {{2, 3, 4}},
     "operand 0 is [2,3,4] (rank 3); its term names 2 axes",
     NULL},
    {"...i...->",
     1,
     {2},
     {{2, 3}},
     "a second ellipsis in one operand",
     "\n  ...i...->\n      ^"},
    {"ij->->", 1, {2}, {{2, 3}}, "a second arrow", NULL},
    {"i-j", 1, {2}, {{2, 3}}, "'-' outside an arrow", "\n  i-j\n   ^"},
    {"i1->i", 1, {2}, {{2, 3}}, "'1' is not a label", "\n  i1->i\n   ^"},
    {"...i,...i",
     2,
     {2, 2},
     {{2, 3}, {4, 3}},
     "the ellipsis axes of operand 1 cannot be broadcast",
     NULL},
    {"ij=>0i", 1, {2}, {{2, 3}}, "\"0\" (no axes) with axes beside it", NULL},
    {"ij->ji->", 1, {2}, {{2, 3}}, "a second arrow", NULL},
};

START_TEST(malformed_specs) {
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    const bad *b = &bads[i];
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *in[2];
    for (int k = 0; k < b->n; k++)
      in[k] = ad_in(g, b->rank[k], b->shape[k], NULL);
    tyto_tensor *y = tyto_einsum(b->spec, (size_t)b->n, in);
    ck_assert_msg(tyto_tensor_is_error(y), "%s: accepted", b->spec);
    const char *m = tyto_graph_error_message(g);
    ck_assert_msg(strstr(m, b->msg), "%s: \"%s\", expected \"%s\"", b->spec, m,
                  b->msg);
    ck_assert_msg(strncmp(m, "einsum \"", 8) == 0, "%s", m);
    if (b->caret)
      ck_assert_msg(strstr(m, b->caret), "%s: no caret line \"%s\" in \"%s\"",
                    b->spec, b->caret, m);
    tyto_graph_free(g);
  }
  /* NULL spec, operands of two dtypes. */
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = ad_in(g, 1, AD_S(3), "a");
  ck_assert(tyto_tensor_is_error(tyto_einsum(NULL, 1, &a)));
  ck_assert_msg(strstr(tyto_graph_error_message(g), "spec is NULL"), "%s",
                tyto_graph_error_message(g));
  tyto_graph_free(g);
  g = tyto_graph_new();
  tyto_tensor *two[2] = {ad_in(g, 1, AD_S(3), "a"),
                         tyto_input(g, TYTO_F32, 1, AD_S(3), "b")};
  ck_assert(tyto_tensor_is_error(tyto_einsum("i,i->", 2, two)));
  ck_assert_int_ne(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("einsum");
  TCase *tc = tcase_create("einsum");
  ad_fixture(tc);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, against_loops);
  tcase_add_test(tc, shapes);
  tcase_add_test(tc, cheapest_order);
  tcase_add_test(tc, derivatives);
  tcase_add_test(tc, malformed_specs);
  suite_add_tcase(s, tc);
  return test_run(s);
}
