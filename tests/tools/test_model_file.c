/*
 * tyto-train's model files (tools/train/model_file.c): what parses, the
 * canonical text, and every mistake reported at its file:line:column; the
 * presets build into networks of the documented shapes.
 */
#include "common.h"

#include "../../tools/train/model_file.h"

static void expect_error(const char *text, const char *want) {
  mf_model *m = NULL;
  char err[1024];
  ck_assert_int_eq(mf_parse(text, "net.txt", &m, err, sizeof err), -1);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err, want) != NULL, "expected\n  %s\nin\n  %s", want,
                err);
}

START_TEST(errors_name_line_and_column) {
  expect_error("", "net.txt:1:1: no input layer");
  expect_error("linear units=3\n",
               "net.txt:1:1: linear before the input layer");
  expect_error("input shape=784\n", "net.txt:1:1: no layers after the input");
  expect_error("input shape=784\n  lienar units=3\n",
               "net.txt:2:3: unknown layer type 'lienar'");
  expect_error("input shape=784\nlinear units=3 bias\n",
               "net.txt:2:16: expected key=value, got 'bias'");
  expect_error("input shape=784\nlinear units=three\n",
               "net.txt:2:14: units: expected an integer, got 'three'");
  expect_error("input shape=784\nlinear units=0\n",
               "net.txt:2:14: units: expected an integer >= 1, got 0");
  expect_error("input shape=784\nlinear\n",
               "net.txt:2:1: linear: missing units=");
  expect_error("input shape=784\nlinear units=3 units=4\n",
               "net.txt:2:16: linear: key 'units' given twice");
  expect_error("input shape=1x28x28\nconv2d filters=8 kernel=3x\n",
               "net.txt:2:25: kernel: expected N or NxM, got '3x'");
  expect_error("input shape=1x28x28\nconv2d filters=8 kernel=3x3x3\n",
               "kernel: expected N or NxM, got 3 numbers");
  expect_error("input shape=1x28x28\nconv2d filters=8 kernel=3 padding=full\n",
               "net.txt:2:35: padding: expected same, valid, N or NxM");
  expect_error("input shape=784\ndropout rate=1\n",
               "net.txt:2:14: rate: expected a value in [0, 1), got 1");
  expect_error("input shape=784\nlinear units=3 activation=swish\n",
               "unknown activation 'swish'");
  expect_error("input shape=784\nlinear units=3 init=orthogonal\n",
               "unknown initialiser 'orthogonal'");
  expect_error("input shape=784\nlinear units=3 from=nothing\n",
               "net.txt:2:21: from: no layer named 'nothing' before this line");
  expect_error(
      "input shape=784\nlinear name=a units=3\nlinear name=a units=3\n",
      "net.txt:3:13: name: a layer named 'a' already exists (line 2)");
  expect_error("input shape=784\nlinear name=1a units=3\n",
               "name: '1a' is not a name");
  expect_error("input shape=784\nadd from=input\n",
               "add: from= needs two layers or more");
  expect_error("input shape=784\nlinear units=3 from=input,input\n",
               "linear: takes one input, from= names 2");
  expect_error("input shape=784\ninput shape=784\n",
               "net.txt:2:1: a second input layer (the first is on line 1)");
  /* A second loss or regularize line would silently replace the first. */
  expect_error("loss type=mse\ninput shape=784\nlinear units=3\n"
               "  loss type=hinge\n",
               "net.txt:4:3: loss given twice (the first is on line 1)");
  expect_error("input shape=784\nregularize l2=0.01\nlinear units=3\n"
               "regularize l1=0.5\n",
               "net.txt:4:1: regularize given twice (the first is on line 2)");
  expect_error("input shape=784\nloss type=kl\n", "unknown loss 'kl'");
  expect_error("input shape=784\nconv1d filters=2 kernel=3x3\n",
               "kernel: a 1-d layer takes one number, got '3x3'");
  expect_error("input shape=784\nreshape shape=-1x-1\n",
               "shape: dimension -1 is below 1 in '-1x-1'");
  expect_error("input shape=784\nlinear units=3\x01\n",
               "net.txt:2:15: unexpected byte 0x01");
  expect_error("input shape=784\nlinear unts=3\n",
               "linear: unknown key 'unts' (expected name, from, units, bias, "
               "init, gain, activation)");
}
END_TEST

START_TEST(the_canonical_text_drops_comments_and_spacing) {
  mf_model *m = NULL;
  char err[512];
  ck_assert_int_eq(
      mf_parse("# net\ninput   shape=1x28x28 # the images\n\n\tconv2d "
               "filters=4  kernel=3\r\nflatten\nlinear units=10\nloss "
               "type=hinge\nregularize l2=0.001\n",
               "net.txt", &m, err, sizeof err),
      0);
  ck_assert_str_eq(mf_canonical(m),
                   "input shape=1x28x28\nconv2d filters=4 kernel=3\nflatten\n"
                   "linear units=10\nloss type=hinge\nregularize l2=0.001\n");
  ck_assert_int_eq(mf_input_rank(m), 3);
  ck_assert_int_eq(mf_input_shape(m)[2], 28);
  ck_assert_int_eq(mf_loss_kind(m), MF_LOSS_HINGE);
  double l1, l2;
  mf_regularization(m, &l1, &l2);
  ck_assert(l1 == 0 && l2 == 0.001);
  mf_free(m);
}
END_TEST

/* Builds preset `name` with batch 8 and returns the logits' dims. */
static void build_preset(const char *name, int64_t *rows, int64_t *cols,
                         size_t *params) {
  mf_model *m = NULL;
  char err[512];
  ck_assert_int_eq(mf_parse(mf_preset(name), name, &m, err, sizeof err), 0);
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = NULL;
  ck_assert_int_eq(tyto_nn_new(g, NULL, &nn), TYTO_OK);
  int64_t shape[8] = {8};
  int rank = 1 + mf_input_rank(m);
  memcpy(shape + 1, mf_input_shape(m), (size_t)(rank - 1) * sizeof *shape);
  tyto_tensor *x = tyto_nn_input(nn, rank, shape, "x");
  tyto_tensor *y = mf_build(m, nn, x, err, sizeof err);
  ck_assert_msg(y != NULL, "%s", err);
  *rows = tyto_tensor_dim(y, 0);
  *cols = tyto_tensor_dim(y, 1);
  *params = tyto_nn_parameter_count(nn);
  tyto_nn_free(nn);
  tyto_graph_free(g);
  mf_free(m);
}

START_TEST(presets_build) {
  int64_t r, c;
  size_t n;
  build_preset("cnn", &r, &c, &n);
  ck_assert(r == 8 && c == 10);
  ck_assert_uint_eq(n, 6); /* conv, fc, out: weight and bias each */
  build_preset("mlp", &r, &c, &n);
  ck_assert(r == 8 && c == 10 && n == 4);
  build_preset("mlp-big", &r, &c, &n);
  ck_assert(r == 8 && c == 10 && n == 6);
  ck_assert_ptr_null(mf_preset("resnet"));
}
END_TEST

/* Every layer type of the table builds (shapes that fit). */
START_TEST(every_layer_builds) {
  static const char *text =
      "input shape=1x12x12\n"
      "conv2d name=c1 filters=4 kernel=3 padding=same activation=relu\n"
      "batch_norm name=bn\n"
      "conv2d_transpose name=up filters=2 kernel=2 stride=2\n"
      "avg_pool2d kernel=2\n"
      "max_pool2d name=mp kernel=2 stride=1 padding=same\n"
      "conv2d name=c2 filters=2 kernel=1 from=mp\n"
      "add name=sum from=mp,c2\n"
      "concat name=cat from=sum,mp axis=1\n"
      "global_avg_pool name=gap from=cat\n"
      "global_max_pool name=gmp from=cat\n"
      "reshape name=seq shape=1x4 from=gmp\n"
      "lstm name=l units=3 sequences=true\n"
      "gru name=g units=3 sequences=true\n"
      "rnn name=r units=3\n"
      "reshape name=sig shape=1x3\n"
      "conv1d name=c3 filters=2 kernel=1\n"
      "max_pool1d kernel=1\n"
      "avg_pool1d kernel=1\n"
      "flatten\n"
      "dropout rate=0.5\n"
      "leaky_relu slope=0.2\n"
      "elu\n"
      "gelu\n"
      "tanh\n"
      "sigmoid\n"
      "fully_connected units=5 activation=elu\n"
      "linear units=10\n"
      "softmax\n";
  mf_model *m = NULL;
  char err[512];
  ck_assert_msg(mf_parse(text, "all.txt", &m, err, sizeof err) == 0, "%s", err);
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = NULL;
  ck_assert_int_eq(tyto_nn_new(g, NULL, &nn), TYTO_OK);
  tyto_tensor *x = tyto_nn_input(nn, 4, (const int64_t[]){2, 1, 12, 12}, "x");
  tyto_tensor *y = mf_build(m, nn, x, err, sizeof err);
  ck_assert_msg(y != NULL, "%s", err);
  ck_assert_int_eq(tyto_tensor_dim(y, 1), 10);
  /* Cross-entropy's logits: the final softmax is left out. */
  ck_assert_int_ne(tyto_tensor_op(y), TYTO_OP_SOFTMAX);
  tyto_nn_free(nn);
  tyto_graph_free(g);
  mf_free(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_file");
  TCase *tc = tcase_create("model_file");
  tcase_add_test(tc, errors_name_line_and_column);
  tcase_add_test(tc, the_canonical_text_drops_comments_and_spacing);
  tcase_add_test(tc, presets_build);
  tcase_add_test(tc, every_layer_builds);
  suite_add_tcase(s, tc);
  return test_run(s);
}
