/*
 * The recurrent layers (RNN, LSTM, GRU) against PyTorch's nn.RNN, nn.LSTM
 * and nn.GRU in float64 (bench/nn_reference.py: their weights are the
 * transposes of ours, bias_hh zero), both with and without
 * return_sequences; their derivatives against central differences; their
 * parameters and default initial values.
 */
#include "nn_test.h"

#define RTOL 1e-10

/* BEGIN bench/nn_reference.py output (do not edit) */
/* rnn_seq [2, 4, 5] */
static const double REF_rnn_seq[] = {
    -0.4700589856418,  0.2912179570899,    0.1094983892404,   -0.07984784424382,
    0.1169985378751,   -0.04609989191055,  0.6637860791578,   0.3557603044163,
    0.2890740298572,   -0.007993464855034, -0.3830599923859,  0.3996150569629,
    -0.09287648530026, -0.5045469466338,   0.2108354591648,   -0.6356996057247,
    -0.05743028223269, -0.03173047578341,  0.1647212841336,   0.3985341853043,
    -0.2550110228763,  0.3671878062368,    0.03109260787601,  -0.3121840680299,
    0.0711157290816,   -0.592370118032,    0.0809709692342,   -0.02809697074055,
    0.04650436496285,  0.3156622776464,    -0.1142715109618,  0.479627548721,
    -0.1619986232648,  -0.517317150066,    0.02770539293077,  -0.4809900947688,
    -0.0204214765327,  -0.08561590575573,  -0.06457163937466, 0.4259683031742};
/* rnn_last [2, 5] */
static const double REF_rnn_last[] = {
    -0.6356996057247,  -0.05743028223269, -0.03173047578341, 0.1647212841336,
    0.3985341853043,   -0.4809900947688,  -0.0204214765327,  -0.08561590575573,
    -0.06457163937466, 0.4259683031742};
/* lstm_seq [2, 4, 5] */
static const double REF_lstm_seq[] = {
    0.0877166587235,   0.04112705278195,  -0.04329800167447, 0.02119118600298,
    -0.02715325699626, 0.1223186308538,   0.07307387876457,  0.1774706162363,
    -0.03740819418839, -0.08738463675718, 0.1233884632987,   0.05309682193759,
    0.04690715605737,  0.04560062171494,  -0.03229469868659, 0.1588974783529,
    0.1285422310174,   0.0808872620028,   -0.1551002959612,  -0.1165376148993,
    0.06167900042999,  -0.02309311549022, -0.07246516875147, 0.06979510788551,
    0.05047670341938,  0.1241756262079,   0.09087041985002,  -0.013535453961,
    -0.08672017568536, -0.09274676914729, 0.09751566059542,  -0.01679148820614,
    -0.07755500476951, 0.05654577902403,  0.01259522435596,  0.1437297857471,
    0.07304995112721,  -0.04637075862476, -0.03448692901281, -0.08224672734731};
/* lstm_last [2, 5] */
static const double REF_lstm_last[] = {
    0.1588974783529,   0.1285422310174,  0.0808872620028,  -0.1551002959612,
    -0.1165376148993,  0.1437297857471,  0.07304995112721, -0.04637075862476,
    -0.03448692901281, -0.08224672734731};
/* gru_seq [2, 4, 5] */
static const double REF_gru_seq[] = {
    -0.006840988734856, -0.0854328189629,   -0.2487263881862,
    0.0997157971547,    0.04291450892557,   -0.2428606317385,
    -0.2112962894951,   -0.07824948947503,  0.4207346886331,
    0.1260043548121,    -0.08393487559835,  -0.2332873370751,
    -0.3433089628703,   0.2430951611599,    0.07168405835134,
    -0.00893030004216,  -0.053286287731,    -0.484741669526,
    0.3493853761367,    0.02965728456609,   -0.02876909278705,
    -0.1736130819487,   -0.2369121483923,   0.01707339006022,
    0.05214157911354,   -0.005697397772326, -0.06167380360885,
    -0.4120553238631,   0.2036781261931,    0.05107815461897,
    -0.09813161468544,  -0.283336954626,    -0.4978528820171,
    0.05126465105287,   0.07805594437363,   -0.07567243835467,
    -0.1690316541684,   -0.5612118436233,   0.1869526034026,
    0.06788215119778};
/* gru_last [2, 5] */
static const double REF_gru_last[] = {
    -0.00893030004216, -0.053286287731,   -0.484741669526,  0.3493853761367,
    0.02965728456609,  -0.07567243835467, -0.1690316541684, -0.5612118436233,
    0.1869526034026,   0.06788215119778};
/* END bench/nn_reference.py output */

typedef tyto_tensor *(*rnn_fn)(tyto_nn *, const char *, tyto_tensor *, int64_t,
                               int);

static const struct {
  const char *name;
  rnn_fn fn;
  int64_t gates;
  int k; /* fill of wx; wh k + 1, b k + 2 */
  const double *seq, *last;
} cells[] = {
    {"rnn", tyto_nn_rnn, 1, 31, REF_rnn_seq, REF_rnn_last},
    {"lstm", tyto_nn_lstm, 4, 34, REF_lstm_seq, REF_lstm_last},
    {"gru", tyto_nn_gru, 3, 37, REF_gru_seq, REF_gru_last},
};

START_TEST(recurrent_matches_pytorch) {
  int c = _i;
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 0);
  tyto_tensor *x = tyto_nn_input(nn, 3, S(2, 4, 3), "x");
  tyto_tensor *seq = cells[c].fn(nn, "r", x, 5, 1);
  tyto_tensor *last = cells[c].fn(nn, "r", x, 5, 0);
  int64_t gu = cells[c].gates * 5;
  nn_expect_shape(seq, 3, S(2, 4, 5), cells[c].name);
  nn_expect_shape(last, 2, S(2, 5), cells[c].name);
  /* The second build reused the first's parameters. */
  ck_assert_uint_eq(tyto_nn_parameter_count(nn), 3);
  ck_assert_uint_eq(tyto_nn_weight_count(nn), 2);
  tyto_tensor *wx = nn_named(nn, "r.wx"), *wh = nn_named(nn, "r.wh");
  tyto_tensor *b = nn_named(nn, "r.b");
  nn_expect_shape(wx, 2, S(3, gu), "r.wx");
  nn_expect_shape(wh, 2, S(5, gu), "r.wh");
  nn_expect_shape(b, 1, S(gu), "r.b");
  int k = cells[c].k;
  nn_bind bs[4] = {{x, 30, 1, 0, NULL},
                   {wx, k, 0.5, 0, NULL},
                   {wh, k + 1, 0.5, 0, NULL},
                   {b, k + 2, 0.5, 0, NULL}};
  char name[64];
  snprintf(name, sizeof name, "%s sequences", cells[c].name);
  nn_check_ref(seq, 4, bs, cells[c].seq, 40, RTOL, name);
  snprintf(name, sizeof name, "%s last", cells[c].name);
  nn_check_ref(last, 4, bs, cells[c].last, 10, RTOL, name);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* Derivatives with respect to x and every weight, through three steps. */
START_TEST(recurrent_gradients) {
  int c = _i;
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 0);
  tyto_tensor *x = tyto_nn_input(nn, 3, S(2, 3, 2), "x");
  tyto_tensor *seq = cells[c].fn(nn, "r", x, 3, 1);
  nn_bind bs[4] = {{x, 1, 1, 0, NULL},
                   {nn_named(nn, "r.wx"), 2, 0.5, 0, NULL},
                   {nn_named(nn, "r.wh"), 3, 0.5, 0, NULL},
                   {nn_named(nn, "r.b"), 4, 0.5, 0, NULL}};
  char name[64];
  snprintf(name, sizeof name, "%s grad", cells[c].name);
  nn_gradcheck(seq, 4, bs, name);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* One step from zero states, against the cell equations by hand: checks
 * the gate order and the single GRU bias without PyTorch. */
START_TEST(one_step_closed_form) {
  int c = _i;
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 0);
  tyto_tensor *x = tyto_nn_input(nn, 3, S(1, 1, 2), "x");
  tyto_tensor *h = cells[c].fn(nn, "r", x, 2, 0);
  int64_t gu = cells[c].gates * 2;
  double xv[2], wx[16], b[8], z[8], want[2];
  nn_fill(xv, 2, 1, 1, 0);
  nn_fill(wx, 2 * gu, 2, 0.5, 0);
  nn_fill(b, gu, 4, 0.5, 0);
  for (int j = 0; j < gu; j++)
    z[j] = b[j] + xv[0] * wx[j] + xv[1] * wx[gu + j];
  for (int u = 0; u < 2; u++) {
    if (c == 0) {
      want[u] = tanh(z[u]);
    } else if (c == 1) { /* i f g o; c = i g; h = o tanh(c) */
      double i = 1 / (1 + exp(-z[u])), o = 1 / (1 + exp(-z[6 + u]));
      want[u] = o * tanh(i * tanh(z[4 + u]));
    } else { /* r z n; h = (1 - z) tanh(xn + bn) */
      want[u] = (1 - 1 / (1 + exp(-z[2 + u]))) * tanh(z[4 + u]);
    }
  }
  /* r.wh is not read: the first step has no h Wh. */
  nn_bind bs[3] = {{x, 1, 1, 0, NULL},
                   {nn_named(nn, "r.wx"), 2, 0.5, 0, NULL},
                   {nn_named(nn, "r.b"), 4, 0.5, 0, NULL}};
  char name[64];
  snprintf(name, sizeof name, "%s one step", cells[c].name);
  nn_check_ref(h, 3, bs, want, 2, 1e-14, name);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* Default initial values: Glorot uniform weights within their bound, the
 * biases zero but for the LSTM's forget-gate quarter. */
START_TEST(recurrent_initial_values) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 11);
  tyto_tensor *x = tyto_nn_input(nn, 3, S(2, 3, 6), "x");
  tyto_nn_lstm(nn, "lstm", x, 4, 0);
  tyto_nn_gru(nn, "gru", x, 4, 0);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  double b[16], wx[6 * 16];
  ck_assert_int_eq(
      tyto_nn_initial_value(nn, nn_named(nn, "lstm.b"), b, sizeof b), TYTO_OK);
  for (int i = 0; i < 16; i++)
    ck_assert_double_eq(b[i], i >= 4 && i < 8 ? 1.0 : 0.0);
  ck_assert_int_eq(
      tyto_nn_initial_value(nn, nn_named(nn, "gru.b"), b, 12 * sizeof(double)),
      TYTO_OK);
  for (int i = 0; i < 12; i++)
    ck_assert_double_eq(b[i], 0.0);
  ck_assert_int_eq(
      tyto_nn_initial_value(nn, nn_named(nn, "lstm.wx"), wx, sizeof wx),
      TYTO_OK);
  double bound = sqrt(6.0 / (6 + 16)), lo = 0, hi = 0;
  for (int i = 0; i < 6 * 16; i++) {
    ck_assert(fabs(wx[i]) <= bound);
    lo = fmin(lo, wx[i]);
    hi = fmax(hi, wx[i]);
  }
  /* 96 draws cover the range: none of the two ends is empty. */
  ck_assert(lo < -bound / 2 && hi > bound / 2);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

START_TEST(recurrent_errors) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F32, 0);
  tyto_tensor *x = tyto_nn_input(nn, 3, S(2, 0, 3), "x");
  ck_assert(tyto_tensor_is_error(tyto_nn_gru(nn, "g", x, 4, 1)));
  nn_expect_error(g, "gru 'g': x [2,0,3] has no time steps");
  tyto_nn_free(nn);
  tyto_graph_free(g);
  g = tyto_graph_new();
  nn = nn_make(g, TYTO_F32, 0);
  x = tyto_nn_input(nn, 3, S(2, 4, 3), "x");
  ck_assert(tyto_tensor_is_error(tyto_nn_rnn(nn, "r", x, 0, 1)));
  nn_expect_error(g, "rnn 'r': units 0 must be positive");
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nn_recurrent");
  TCase *tc = tcase_create("recurrent");
  tcase_set_timeout(tc, 120);
  nn_fixture(tc);
  tcase_add_loop_test(tc, recurrent_matches_pytorch, 0, 3);
  tcase_add_loop_test(tc, recurrent_gradients, 0, 3);
  tcase_add_loop_test(tc, one_step_closed_form, 0, 3);
  tcase_add_test(tc, recurrent_initial_values);
  tcase_add_test(tc, recurrent_errors);
  suite_add_tcase(s, tc);
  return test_run(s);
}
