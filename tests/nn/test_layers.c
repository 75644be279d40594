/*
 * The dense, embedding and activation layers, batch normalisation and the
 * shape layers: forward results in float64 against PyTorch (the constants
 * of bench/nn_reference.py, relative tolerance 1e-10), derivatives against
 * central differences (tyto_gradcheck in float64, both modes), and the
 * layers' error messages. Convolutions are in test_conv_layers.c, pooling
 * in test_pool_layers.c.
 */
#include "nn_test.h"

/* Relative tolerance against PyTorch's float64 results (printed with 13
 * significant digits). */
#define RTOL 1e-10

/* BEGIN bench/nn_reference.py output (do not edit) */
/* linear [3, 5] */
static const double REF_linear[] = {
    -0.2131112357465, -0.2625542564884, 0.06461322822054, 0.3015924076768,
    0.2521493869348,  0.07065302269662, -0.152817408438,  0.7872404062152,
    -0.3628900843842, -0.5863605155189, -0.9726392104361, -1.066866487048,
    0.7893522224656,  0.5553826267262,  0.4611553501146};
/* linear3 [2, 3, 5] */
static const double REF_linear3[] = {
    0.06702855666691, -0.1456215173449,  0.7874172094362,  -0.3697323690355,
    -0.5823824430473, -0.9762636764658,  -1.059670595955,  0.7895290256866,
    0.5485403420749,  0.4651334225862,   -0.1434409442864, -0.4008752741678,
    0.06121467741761, 0.4331163237503,   0.1756819938689,  -0.2194388265767,
    -0.347630001935,  1.03062084451,     0.3186833857031,  0.1904922103448,
    -0.2300254105518, -0.2289734313871,  0.06543830991837, 0.2696617459711,
    0.2707137251358,  -0.07014618679653, -0.5463921829403, 0.05763932339372,
    0.571482524475,   0.09523652833124};
/* bn4_eval [4, 3, 2, 2] */
static const double REF_bn4_eval[] = {
    -0.4884423082499,  -0.9561009291118,   -1.423759549974,  -1.891418170836,
    0.5468095728767,   0.1357169518904,    -0.2753756690959, -0.6864682900822,
    -0.07012141923656, -0.4183230087691,   -0.7665245983015, 1.181583641174,
    0.0678574891153,   -0.3998011317466,   -0.8674597526086, -1.335118373471,
    -1.67524008435,    0.6247290892728,    0.2136364682865,  -0.1974561526998,
    0.3440791643903,   -0.004122425142163, -0.3523240146747, -0.7005256042072,
    0.6241572864805,   0.1564986656185,    -0.3111599552434, -0.7788185761053,
    -1.186227946967,   -1.597320567954,    -2.00841318894,   0.2915559846826,
    0.7582797480172,   0.4100781584847,    0.06187656895223, -0.2863250205803,
    -1.903644540009,   0.7127984629837,    0.2451398421218,  -0.2225187787402,
    -0.6972158095851,  -1.108308430571,    -1.519401051558,  -1.930493672544,
    1.172480331644,    0.8242787421116,    0.4760771525791,  0.1278755630466};
/* bn4_train [4, 3, 2, 2] */
static const double REF_bn4_train[] = {
    -0.2793502030858, -0.7881133766056, -1.296876550125,   -1.805639723645,
    0.5048559186685,  0.1726728071144,  -0.1595103044397,  -0.4916934159939,
    0.1228297511796,  -0.2066800762296, -0.5361899036387,  1.307342202651,
    0.3258452059377,  -0.1829179675821, -0.6916811411019,  -1.200444314622,
    -1.290669788882,  0.5678187306625,  0.2356356191083,   -0.0965474924458,
    0.5147956896664,  0.1852858622572,  -0.144223965152,   -0.4737337925612,
    0.9310406149613,  0.4222774414415,  -0.08648573207833, -0.5952489055981,
    -0.8955238653342, -1.227706976888,  -1.559890088442,   0.2985984311022,
    0.9067616281531,  0.5772518007439,  0.2477419733348,   -0.08176785407444,
    -1.818940721646,  1.027472850465,   0.5187096769452,   0.009946503425424,
    -0.5003779417861, -0.8325610533403, -1.164744164894,   -1.496927276449,
    1.29872756664,    0.9692177392307,  0.6397079118215,   0.3101980844123};
/* bn4_running_mean [3] */
static const double REF_bn4_running_mean[] = {0.3975718533201, 0.2410307234886,
                                              0.08448959365709};
/* bn4_running_var [3] */
static const double REF_bn4_running_var[] = {1.220669933597, 1.232364680872,
                                             0.9780534816647};
/* bn2_eval [5, 3] */
static const double REF_bn2_eval[] = {
    -0.5698729527843,  0.00272498036643, -0.3255360667346, -1.945698113519,
    1.44453994627,     0.8856192223981,  -0.2971058729872, 0.2412798201795,
    -0.1251449188963,  -1.672931033722,  -0.9619803059106, 1.086010370236,
    -0.02433879319015, 0.4798346599926,  0.07524622894203};
/* bn2_train [5, 3] */
static const double REF_bn2_train[] = {
    -0.007918693169058, 0.2680756747902, -0.283031066547,  -1.508574413652,
    1.538035097951,     0.8620359071253, 0.2895969289745,  0.4781962338949,
    -0.09357453090304,  -1.211058791508, -0.5816426301608, 1.051492442769,
    0.5871125511181,    0.6883167929997, 0.09588200474091};
/* bn2_running_mean [3] */
static const double REF_bn2_running_mean[] = {0.3543409316155, 0.2372150644202,
                                              0.120089197225};
/* bn2_running_var [3] */
static const double REF_bn2_running_var[] = {1.225705783724, 1.133158707411,
                                             0.9527622753003};
/* embedding [2, 3, 4] */
static const double REF_embedding[] = {
    -0.3300297324083, -0.6333002973241, -0.9365708622398, 0.7601585728444,
    0.8176412289395,  0.5143706640238,  0.211100099108,   -0.09217046580773,
    -0.7561942517344, 0.9405351833499,  0.6372646184341,  0.3339940535183,
    0.03072348860258, -0.2725470763132, -0.5758176412289, -0.8790882061447,
    0.03072348860258, -0.2725470763132, -0.5758176412289, -0.8790882061447,
    0.4568880079286,  0.1536174430129,  -0.1496531219029, -0.4529236868186};
/* act_relu [3, 5] */
static const double REF_act_relu[] = {0,
                                      2.86917740337,
                                      1.959365708622,
                                      1.049554013875,
                                      0.1397423191278,
                                      0,
                                      0,
                                      0,
                                      2.500495540139,
                                      1.590683845391,
                                      0.6808721506442,
                                      0,
                                      0,
                                      0,
                                      0};
/* act_leaky_relu [3, 5] */
static const double REF_act_leaky_relu[] = {
    -0.02221010901883, 2.86917740337,     1.959365708622,
    1.049554013875,    0.1397423191278,   -0.007700693756194,
    -0.01679881070367, -0.02589692765114, 2.500495540139,
    1.590683845391,    0.6808721506442,   -0.002289395441031,
    -0.0113875123885,  -0.02048562933598, -0.02958374628345};
/* act_leaky_relu_02 [3, 5] */
static const double REF_act_leaky_relu_02[] = {
    -0.4442021803766, 2.86917740337,    1.959365708622,   1.049554013875,
    0.1397423191278,  -0.1540138751239, -0.3359762140733, -0.5179385530228,
    2.500495540139,   1.590683845391,   0.6808721506442,  -0.04578790882061,
    -0.2277502477701, -0.4097125867195, -0.591674925669};
/* act_elu [3, 5] */
static const double REF_act_elu[] = {
    -0.8915006288513, 2.86917740337,    1.959365708622,   1.049554013875,
    0.1397423191278,  -0.537019052393,  -0.8136038572538, -0.9249569076002,
    2.500495540139,   1.590683845391,   0.6808721506442,  -0.2046233827416,
    -0.6797813511469, -0.8710799628147, -0.9480967893425};
/* act_elu_05 [3, 5] */
static const double REF_act_elu_05[] = {
    -0.4457503144257, 2.86917740337,    1.959365708622,   1.049554013875,
    0.1397423191278,  -0.2685095261965, -0.4068019286269, -0.4624784538001,
    2.500495540139,   1.590683845391,   0.6808721506442,  -0.1023116913708,
    -0.3398906755735, -0.4355399814073, -0.4740483946713};
/* act_tanh [3, 5] */
static const double REF_act_tanh[] = {
    -0.9767297133769, 0.9935805479438,  0.961041400895,   0.7816329071835,
    0.1388397432315,  -0.646969789325,  -0.9328461183068, -0.9888001401927,
    0.9866274692266,  0.9202541168792,  0.592086092257,   -0.2250218329395,
    -0.8139931709552, -0.9673026896166, -0.994626589111};
/* act_sigmoid [3, 5] */
static const double REF_act_sigmoid[] = {
    0.09787950627004, 0.9463015631579, 0.8764642911636, 0.7406892484088,
    0.5348788389941,  0.3164640991151, 0.1571112177714, 0.06980472962468,
    0.9241765518835,  0.830712293569,  0.6639333245857, 0.4430137997859,
    0.2425497088162,  0.1141976693998, 0.0493421924485};
/* act_softmax [3, 5] */
static const double REF_act_softmax[] = {
    0.003763132512133, 0.6112096526867,  0.24607302365,    0.09906900635829,
    0.03988518479286,  0.02598089179317, 0.01045990777889, 0.004211159170896,
    0.6839783414357,   0.2753696998213,  0.6037863148775,  0.2430843876358,
    0.09786578141348,  0.03940076639567, 0.01586274967761};
/* act_gelu [3, 5] */
static const double REF_act_gelu[] = {
    -0.02926206628182, 2.863273484086,   1.910313014001,    0.8953098718537,
    0.07763638949734,  -0.1698999215437, -0.07809805525802, -0.01243850456769,
    2.484990005483,    1.501859467478,   0.5120320650094,   -0.09374111696575,
    -0.1450808506589,  -0.0414883899833, -0.004574623670264};
/* END bench/nn_reference.py output */

static tyto_init dflt(void) {
  tyto_init i = {TYTO_INIT_DEFAULT, 0, 0, 0};
  return i;
}

/* ---------------------------------------------------------------------- */
/* Dense                                                                   */

START_TEST(linear_matches_pytorch) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 0);
  tyto_tensor *x = tyto_nn_input(nn, 2, S(3, 4), "x");
  tyto_tensor *y = tyto_nn_linear(nn, "fc", x, 5, 1, dflt());
  nn_expect_shape(y, 2, S(3, 5), "linear");
  tyto_tensor *w = nn_named(nn, "fc.weight"), *b = nn_named(nn, "fc.bias");
  nn_expect_shape(w, 2, S(4, 5), "fc.weight");
  nn_expect_shape(b, 1, S(5), "fc.bias");
  nn_bind bs[3] = {
      {x, 1, 1, 0, NULL}, {w, 2, 0.5, 0, NULL}, {b, 3, 0.5, 0, NULL}};
  nn_check_ref(y, 3, bs, NN_REF(linear), RTOL, "linear");
  /* [..., in]: the same weights on every row of a rank-3 input. */
  tyto_tensor *x3 = tyto_nn_input(nn, 3, S(2, 3, 4), "x3");
  tyto_tensor *y3 = tyto_nn_linear(nn, "fc", x3, 5, 1, dflt());
  nn_expect_shape(y3, 3, S(2, 3, 5), "linear3");
  ck_assert_uint_eq(tyto_nn_parameter_count(nn), 2);
  bs[0] = (nn_bind){x3, 4, 1, 0, NULL};
  nn_check_ref(y3, 3, bs, NN_REF(linear3), RTOL, "linear3");
  /* No bias: x W only. */
  tyto_tensor *y0 = tyto_nn_linear(nn, "nb", x, 2, 0, dflt());
  ck_assert_uint_eq(tyto_nn_parameter_count(nn), 3);
  nn_expect_shape(y0, 2, S(3, 2), "linear without bias");
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* fully_connected flattens, then x W + b, then the activation: against a
 * float64 loop. */
START_TEST(fully_connected_flattens_and_activates) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 0);
  tyto_tensor *x = tyto_nn_input(nn, 3, S(2, 2, 3), "x");
  tyto_tensor *y =
      tyto_nn_fully_connected(nn, "fc", x, 4, TYTO_ACT_TANH, dflt());
  nn_expect_shape(y, 2, S(2, 4), "fully_connected");
  tyto_tensor *w = nn_named(nn, "fc.weight"), *b = nn_named(nn, "fc.bias");
  nn_expect_shape(w, 2, S(6, 4), "fc.weight");
  double xv[12], wv[24], bv[4], want[8];
  nn_fill(xv, 12, 5, 1, 0);
  nn_fill(wv, 24, 6, 0.5, 0);
  nn_fill(bv, 4, 7, 0.5, 0);
  for (int n = 0; n < 2; n++)
    for (int j = 0; j < 4; j++) {
      double s = bv[j];
      for (int i = 0; i < 6; i++)
        s += xv[n * 6 + i] * wv[i * 4 + j];
      want[n * 4 + j] = tanh(s);
    }
  nn_bind bs[3] = {
      {x, 5, 1, 0, NULL}, {w, 6, 0.5, 0, NULL}, {b, 7, 0.5, 0, NULL}};
  nn_check_ref(y, 3, bs, want, 8, 1e-14, "fully_connected");
  nn_gradcheck(y, 3, bs, "fully_connected grad");
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

START_TEST(embedding_matches_pytorch) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 0);
  tyto_tensor *ids = tyto_nn_input(nn, 2, S(2, 3), "ids");
  tyto_tensor *y = tyto_nn_embedding(nn, "emb", ids, 5, 4, dflt());
  nn_expect_shape(y, 3, S(2, 3, 4), "embedding");
  tyto_tensor *t = nn_named(nn, "emb.weight");
  nn_expect_shape(t, 2, S(5, 4), "emb.weight");
  static const double idv[6] = {0, 4, 2, 3, 3, 1};
  nn_bind bs[2] = {{ids, 0, 1, 0, idv}, {t, 22, 1, 0, NULL}};
  nn_check_ref(y, 2, bs, NN_REF(embedding), RTOL, "embedding");
  /* The table's gradient (ids are held fixed: piecewise constant). */
  tyto_tensor *fixed[1] = {ids};
  const void *fixed_v[1] = {idv};
  nn_gradcheck_fixed(y, 1, &bs[1], 1, fixed, fixed_v, "embedding grad");
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* Every activation against PyTorch, and each one's derivative. */
START_TEST(activations_match_pytorch) {
  static const struct {
    tyto_nn_activation act;
    double param;
    const char *name;
    const double *ref;
  } cases[] = {
      {TYTO_ACT_RELU, 0, "relu", REF_act_relu},
      {TYTO_ACT_LEAKY_RELU, 0, "leaky_relu", REF_act_leaky_relu},
      {TYTO_ACT_LEAKY_RELU, 0.2, "leaky_relu 0.2", REF_act_leaky_relu_02},
      {TYTO_ACT_ELU, 0, "elu", REF_act_elu},
      {TYTO_ACT_ELU, 0.5, "elu 0.5", REF_act_elu_05},
      {TYTO_ACT_TANH, 0, "tanh", REF_act_tanh},
      {TYTO_ACT_SIGMOID, 0, "sigmoid", REF_act_sigmoid},
      {TYTO_ACT_SOFTMAX, 0, "softmax", REF_act_softmax},
      {TYTO_ACT_GELU, 0, "gelu", REF_act_gelu},
  };
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 0);
  tyto_tensor *x = tyto_nn_input(nn, 2, S(3, 5), "x");
  nn_bind b = {x, 23, 3.0, 0, NULL};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tyto_tensor *y = tyto_nn_activate(x, cases[i].act, cases[i].param);
    nn_expect_shape(y, 2, S(3, 5), cases[i].name);
    nn_check_ref(y, 1, &b, cases[i].ref, 15, RTOL, cases[i].name);
    nn_gradcheck(y, 1, &b, cases[i].name);
  }
  ck_assert_ptr_eq(tyto_nn_activate(x, TYTO_ACT_NONE, 0), x);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

START_TEST(activation_names_round_trip) {
  for (int a = TYTO_ACT_NONE; a <= TYTO_ACT_GELU; a++)
    ck_assert_int_eq(tyto_nn_activation_from_name(tyto_nn_activation_name(a)),
                     a);
  ck_assert_str_eq(tyto_nn_activation_name(TYTO_ACT_GELU), "gelu");
  ck_assert_int_eq(tyto_nn_activation_from_name("swish"), -1);
  ck_assert_int_eq(tyto_nn_activation_from_name(NULL), -1);
  ck_assert_str_eq(tyto_nn_activation_name((tyto_nn_activation)99), "?");
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, S(3), "x");
  tyto_nn_activate(x, (tyto_nn_activation)42, 0);
  nn_expect_error(g, "activate: unknown activation 42");
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Batch normalisation                                                     */

static void check_batch_norm(int rank, const int64_t *shape, int k,
                             double momentum, double eps, const double *ytr,
                             const double *yev, const double *rm_ref,
                             const double *rv_ref, const char *what) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 0);
  tyto_tensor *x = tyto_nn_input(nn, rank, shape, "x");
  tyto_tensor *ytrain = tyto_nn_batch_norm(nn, "bn", x, momentum, eps);
  ck_assert_uint_eq(tyto_nn_update_count(nn), 2);
  tyto_nn_set_mode(nn, TYTO_NN_EVAL);
  tyto_tensor *yeval = tyto_nn_batch_norm(nn, "bn", x, momentum, eps);
  ck_assert_uint_eq(tyto_nn_update_count(nn), 2);
  ck_assert_uint_eq(tyto_nn_parameter_count(nn), 2);
  ck_assert_uint_eq(tyto_nn_state_count(nn), 2);
  ck_assert_uint_eq(tyto_nn_weight_count(nn), 0);
  tyto_tensor *rm = nn_named(nn, "bn.running_mean");
  tyto_tensor *rv = nn_named(nn, "bn.running_var");
  nn_bind bs[5] = {{x, k, 2.0, 0, NULL},
                   {nn_named(nn, "bn.gamma"), k + 1, 0.5, 1.0, NULL},
                   {nn_named(nn, "bn.beta"), k + 2, 0.5, 0, NULL},
                   {rm, k + 3, 0.5, 0, NULL},
                   {rv, k + 4, 0.5, 1.0, NULL}};
  int64_t n = tyto_tensor_numel(x);
  char name[64];
  /* EVAL first (its program has no updates), then one TRAIN step. */
  snprintf(name, sizeof name, "%s eval", what);
  nn_check_ref(yeval, 5, bs, yev, n, RTOL, name);
  tyto_program *p = nn_compile(g, 1, &ytrain, nn);
  nn_bind_all(p, 5, bs);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  double *out = malloc((size_t)n * sizeof *out), r[3];
  ck_assert_ptr_nonnull(out);
  tyto_program_read_output(p, 0, out, (size_t)n * sizeof *out);
  snprintf(name, sizeof name, "%s train", what);
  nn_expect(out, ytr, n, RTOL, name);
  ck_assert_int_eq(tyto_program_read_parameter(p, rm, r, sizeof r), TYTO_OK);
  snprintf(name, sizeof name, "%s running_mean", what);
  nn_expect(r, rm_ref, 3, RTOL, name);
  ck_assert_int_eq(tyto_program_read_parameter(p, rv, r, sizeof r), TYTO_OK);
  snprintf(name, sizeof name, "%s running_var", what);
  nn_expect(r, rv_ref, 3, RTOL, name);
  free(out);
  tyto_program_free(p);
  /* Derivatives in both modes, with respect to x, gamma and beta (the
   * running statistics held fixed in EVAL mode). */
  snprintf(name, sizeof name, "%s train grad", what);
  nn_gradcheck(ytrain, 3, bs, name);
  double *rmv = nn_bind_values(&bs[3]), *rvv = nn_bind_values(&bs[4]);
  tyto_tensor *fixed[2] = {rm, rv};
  const void *fixed_v[2] = {rmv, rvv};
  snprintf(name, sizeof name, "%s eval grad", what);
  nn_gradcheck_fixed(yeval, 3, bs, 2, fixed, fixed_v, name);
  free(rmv);
  free(rvv);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}

START_TEST(batch_norm_matches_pytorch) {
  check_batch_norm(4, S(4, 3, 2, 2), 16, 0.2, 1e-3, REF_bn4_train, REF_bn4_eval,
                   REF_bn4_running_mean, REF_bn4_running_var,
                   "batch_norm [4,3,2,2]");
  /* [N, F] with the defaults: momentum 0.1, eps 1e-5 */
  check_batch_norm(2, S(5, 3), 21, 0, 0, REF_bn2_train, REF_bn2_eval,
                   REF_bn2_running_mean, REF_bn2_running_var,
                   "batch_norm [5,3]");
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Shape layers                                                            */

static tyto_tensor *twice_plus_one(tyto_tensor *x, void *user) {
  double *calls = user;
  *calls += 1;
  return tyto_add_scalar(tyto_mul_scalar(x, 2.0), 1.0);
}

START_TEST(shape_layers) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 0);
  tyto_tensor *x = tyto_nn_input(nn, 4, S(2, 3, 2, 2), "x");
  tyto_tensor *f = tyto_nn_flatten(x);
  nn_expect_shape(f, 2, S(2, 12), "flatten");
  tyto_tensor *r = tyto_nn_reshape(x, 2, S(-1, 3));
  nn_expect_shape(r, 3, S(2, 4, 3), "reshape");
  tyto_tensor *parts[3] = {x, x, x};
  tyto_tensor *c = tyto_nn_concat(3, parts, -3);
  nn_expect_shape(c, 4, S(2, 9, 2, 2), "concat");
  tyto_tensor *s = tyto_nn_add(3, parts);
  nn_expect_shape(s, 4, S(2, 3, 2, 2), "add");
  double calls = 0;
  tyto_tensor *l = tyto_nn_lambda(nn, x, twice_plus_one, &calls);
  ck_assert_double_eq(calls, 1);
  /* Values: flatten and reshape keep the row-major order, add triples,
   * concat repeats along the channels, lambda is 2x + 1. */
  double xv[24], want[72];
  nn_fill(xv, 24, 1, 1, 0);
  nn_bind b = {x, 1, 1, 0, NULL};
  nn_check_ref(f, 1, &b, xv, 24, 0, "flatten");
  nn_check_ref(r, 1, &b, xv, 24, 0, "reshape");
  for (int i = 0; i < 24; i++)
    want[i] = 3 * xv[i];
  nn_check_ref(s, 1, &b, want, 24, 1e-15, "add");
  for (int n = 0; n < 2; n++)
    for (int k = 0; k < 3; k++)
      memcpy(want + n * 36 + k * 12, xv + n * 12, 12 * sizeof(double));
  nn_check_ref(c, 1, &b, want, 72, 0, "concat");
  for (int i = 0; i < 24; i++)
    want[i] = 2 * xv[i] + 1;
  nn_check_ref(l, 1, &b, want, 24, 1e-15, "lambda");
  /* Mistakes. */
  ck_assert_ptr_null(tyto_nn_concat(0, parts, 0));
  ck_assert_ptr_null(tyto_nn_add(0, parts));
  tyto_tensor *bad[2] = {x, f};
  ck_assert(tyto_tensor_is_error(tyto_nn_add(2, bad)));
  nn_expect_error(g, "nn_add: shapes differ: [2,3,2,2] and [2,12]");
  tyto_graph_free(g);
  tyto_nn_free(nn);
  g = tyto_graph_new();
  nn = nn_make(g, TYTO_F64, 0);
  x = tyto_nn_input(nn, 2, S(2, 3), "x");
  ck_assert(tyto_tensor_is_error(tyto_nn_reshape(x, 1, S(4))));
  nn_expect_error(g, "reshape: cannot reshape [2,3] (6 elements) to [2,4]");
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* Derivatives of the dense layers, embeddings aside (above): linear on a
 * rank-3 input, dropout with its step held fixed, and concat / add. */
START_TEST(dense_gradients) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = nn_make(g, TYTO_F64, 3);
  tyto_tensor *x = tyto_nn_input(nn, 3, S(2, 2, 3), "x");
  tyto_tensor *y = tyto_nn_linear(nn, "fc", x, 2, 1, dflt());
  nn_bind bs[3] = {{x, 1, 1, 0, NULL},
                   {nn_named(nn, "fc.weight"), 2, 0.5, 0, NULL},
                   {nn_named(nn, "fc.bias"), 3, 0.5, 0, NULL}};
  nn_gradcheck(y, 3, bs, "linear grad");
  tyto_tensor *d = tyto_nn_dropout(nn, y, 0.5);
  tyto_tensor *step = nn_named(nn, "nn.step");
  double sv = 3;
  tyto_tensor *fixed[1] = {step};
  const void *fixed_v[1] = {&sv};
  nn_gradcheck_fixed(d, 3, bs, 1, fixed, fixed_v, "dropout grad");
  tyto_tensor *parts[2] = {y, x};
  tyto_tensor *c = tyto_nn_concat(2, parts, -1);
  tyto_tensor *two[2] = {y, tyto_nn_activate(y, TYTO_ACT_SIGMOID, 0)};
  tyto_tensor *s = tyto_nn_add(2, two);
  nn_gradcheck(c, 3, bs, "concat grad");
  nn_gradcheck(s, 3, bs, "add grad");
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Errors                                                                  */

START_TEST(errors_name_the_layer) {
  tyto_nn_conv c;
  memset(&c, 0, sizeof c);
  c.filters = 4;
  c.kernel[0] = c.kernel[1] = 3;
  struct {
    int which;
    const char *want;
  } cases[] = {
      {0, "conv2d 'conv1': x must have rank 4 (NCHW), got [64,784]"},
      {1, "conv2d 'conv1': 3 input channels of x [2,3,8,8] and 4 filters "
          "must both be divisible by 2 groups"},
      {2, "conv2d 'conv1': kernel [9,9] (dilated) larger than padded input "
          "[8,8]"},
      {3, "linear 'fc': x is f64[2,3], the network's dtype is f32"},
      {4, "linear 'fc': uniform initialiser: low 1 is not below high 0"},
      {5, "max_pool2d: padding 2 exceeds half the kernel 3 on axis 0"},
      {6, "conv2d_transpose 'up': output_pad 2 on axis 0 must be in [0, "
          "stride 2)"},
      {7, "linear 'fc': parameter 'fc.weight' exists with shape [3,5], this "
          "layer needs [4,5]"},
      {8, "dropout: rate 1 outside [0, 1)"},
      {9, "lstm 'rnn1': x must have rank 3 (NTF), got [2,3]"},
      {10, "batch_norm 'bn': x [1,3] has 1 value per channel"},
      {11, "linear: a layer needs a name"},
      {12, "softmax_cross_entropy: logits [2,3] and labels [2,4] differ"},
      {13, "linear 'fc': normal initialiser: expected a finite stddev >= 0, "
           "got nan"},
      {14, "linear 'fc': uniform initialiser: expected finite bounds, got low "
           "0 and high inf"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tyto_graph *g = tyto_graph_new();
    tyto_nn *nn = nn_make(g, TYTO_F32, 0);
    tyto_tensor *img = tyto_nn_input(nn, 4, S(2, 3, 8, 8), "img");
    tyto_tensor *x2 = tyto_nn_input(nn, 2, S(2, 3), "x2");
    tyto_tensor *y = NULL;
    tyto_nn_conv cc = c;
    switch (cases[i].which) {
    case 0:
      y = tyto_nn_conv2d(nn, "conv1", tyto_nn_input(nn, 2, S(64, 784), "flat"),
                         &cc);
      break;
    case 1:
      cc.groups = 2;
      y = tyto_nn_conv2d(nn, "conv1", img, &cc);
      break;
    case 2:
      cc.dilation[0] = cc.dilation[1] = 4;
      y = tyto_nn_conv2d(nn, "conv1", img, &cc);
      break;
    case 3:
      y = tyto_nn_linear(nn, "fc", tyto_input(g, TYTO_F64, 2, S(2, 3), "d"), 5,
                         1, dflt());
      break;
    case 4: {
      tyto_init bad = {TYTO_INIT_UNIFORM, 1, 0, 0};
      y = tyto_nn_linear(nn, "fc", x2, 5, 1, bad);
      break;
    }
    case 13:
    case 14: {
      tyto_init bad = {cases[i].which == 13 ? TYTO_INIT_NORMAL
                                            : TYTO_INIT_UNIFORM,
                       0, cases[i].which == 13 ? NAN : INFINITY, 0};
      y = tyto_nn_linear(nn, "fc", x2, 5, 1, bad);
      break;
    }
    case 5: {
      tyto_nn_pool p = {{3, 3}, {1, 1}, TYTO_NN_EXPLICIT, {2, 2}};
      y = tyto_nn_max_pool2d(nn, img, &p);
      break;
    }
    case 6:
      cc.stride[0] = cc.stride[1] = 2;
      cc.output_pad[0] = 2;
      y = tyto_nn_conv2d_transpose(nn, "up", img, &cc);
      break;
    case 7:
      ck_assert(
          !tyto_tensor_is_error(tyto_nn_linear(nn, "fc", x2, 5, 1, dflt())));
      y = tyto_nn_linear(nn, "fc", tyto_nn_input(nn, 2, S(2, 4), "x4"), 5, 1,
                         dflt());
      break;
    case 8: y = tyto_nn_dropout(nn, x2, 1.0); break;
    case 9: y = tyto_nn_lstm(nn, "rnn1", x2, 4, 0); break;
    case 10:
      y = tyto_nn_batch_norm(nn, "bn", tyto_nn_input(nn, 2, S(1, 3), "one"), 0,
                             0);
      break;
    case 11: y = tyto_nn_linear(nn, NULL, x2, 5, 1, dflt()); break;
    case 12:
      y = tyto_loss_softmax_cross_entropy(x2,
                                          tyto_nn_input(nn, 2, S(2, 4), "l"));
      break;
    }
    ck_assert_msg(y && tyto_tensor_is_error(y), "case %zu gave no error", i);
    nn_expect_error(g, cases[i].want);
    /* Sticky: a layer on the error tensor adds no message. */
    ck_assert(
        tyto_tensor_is_error(tyto_nn_linear(nn, "after", y, 3, 1, dflt())));
    nn_expect_error(g, cases[i].want);
    tyto_nn_free(nn);
    tyto_graph_free(g);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("nn_layers");
  TCase *tc = tcase_create("layers");
  tcase_set_timeout(tc, 120);
  nn_fixture(tc);
  tcase_add_test(tc, linear_matches_pytorch);
  tcase_add_test(tc, fully_connected_flattens_and_activates);
  tcase_add_test(tc, embedding_matches_pytorch);
  tcase_add_test(tc, activations_match_pytorch);
  tcase_add_test(tc, activation_names_round_trip);
  tcase_add_test(tc, batch_norm_matches_pytorch);
  tcase_add_test(tc, shape_layers);
  tcase_add_test(tc, dense_gradients);
  tcase_add_test(tc, errors_name_the_layer);
  suite_add_tcase(s, tc);
  return test_run(s);
}
