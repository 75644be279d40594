/*
 * tyto-train over several devices: data-parallel training over cpu:0 and
 * the partial test plugin follows one device, its checkpoints resume on
 * other device sets, a failed device stops the run or is dropped, and
 * batch norm layers with --sync-batch-norm normalise with the whole
 * batch's statistics.
 */
#include "train_harness.h"

/* ---- data parallelism -------------------------------------------------
 * Over cpu:0 and the partial test plugin (tests/plugins/partplug.c: f32
 * elementwise ops on a worker thread; every other op of its replica falls
 * back to cpu:0), which trains the small net with its dropout.
 *
 * Tolerance: the test device computes the elementwise ops with libm, the
 * CPU plugin with its vector kernels, so they agree to a unit or two in the
 * last place per op; through the 20 steps of these runs the mean training
 * loss stayed within 1e-6 (relative) of cpu:0 alone. 1e-4 leaves room for
 * other libms and still fails a wrong shard, weighting or dropout mask,
 * which move it by percents from the first step. Test accuracy is over
 * 100 images: equal within one image. */

static void data_parallel(void) {
  static char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s:%s", TEST_PLUGIN_DIRS, TEST_PART_PLUGIN_DIR);
  plugin_dirs = dirs;
  devices = "cpu:0,part:0";
}

static void one_device(void) {
  plugin_dirs = TEST_PLUGIN_DIRS;
  devices = "cpu";
  extra_env = "";
}

static json_t *small_run(const char *more) {
  char net[256], args[2048];
  write_text("net.txt", small_net, net, sizeof net);
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good --epochs 2 --batch 32 --seed 9 "
           "--json %s",
           net, tmp, more);
  return train_json(args);
}

static void same_training(json_t *a, json_t *b) {
  double la = real(a, "train_loss"), lb = real(b, "train_loss");
  ck_assert_msg(fabs(la - lb) <= 1e-4 * fabs(lb), "train loss %.9g, %.9g", la,
                lb);
  double ta = real(a, "test_accuracy"), tb = real(b, "test_accuracy");
  ck_assert_msg(fabs(ta - tb) <= 0.011, "test accuracy %g, %g", ta, tb);
}

START_TEST(data_parallel_training_follows_one_device) {
  json_t *one = small_run("");
  data_parallel();
  json_t *two = small_run("");
  same_training(two, one);
  /* Both devices, their shares of the batch, their figures. */
  json_t *devs = json_object_get(two, "devices");
  ck_assert_uint_eq(json_array_size(devs), 2);
  ck_assert_str_eq(json_string_value(json_array_get(devs, 0)), "cpu:0");
  ck_assert_str_eq(json_string_value(json_array_get(devs, 1)), "part:0");
  json_t *par = json_object_get(two, "data_parallel");
  ck_assert_uint_eq(json_array_size(par), 2);
  int64_t total = 0;
  for (size_t i = 0; i < 2; i++) {
    json_t *e = json_array_get(par, i);
    int64_t shard = (int64_t)real(e, "shard");
    ck_assert_int_gt(shard, 0);
    total += shard;
    ck_assert(real(e, "images_per_second") > 0);
    ck_assert(real(e, "wait_seconds") >= 0);
  }
  ck_assert_int_eq(total, 32);
  /* The gradient exchange, and the part of it the backward pass did not
   * hide. */
  ck_assert(real(two, "exchange_seconds") > 0);
  ck_assert(real(two, "exchange_exposed_seconds") >= 0);
  ck_assert(json_is_null(json_object_get(one, "data_parallel")));
  ck_assert(json_is_null(json_object_get(one, "exchange_seconds")));
  /* No device is too slow to help here: none left out. */
  ck_assert_uint_eq(json_array_size(json_object_get(two, "left_out")), 0);
  ck_assert(json_is_array(json_object_get(two, "left_out")));
  ck_assert(json_is_null(json_object_get(one, "left_out")));
  json_decref(two);
  /* --data-parallel off: the first device alone, as before. */
  json_t *off = small_run("--data-parallel off");
  ck_assert_uint_eq(json_array_size(json_object_get(off, "devices")), 1);
  ck_assert(json_is_null(json_object_get(off, "data_parallel")));
  same_training(off, one);
  json_decref(off);
  json_decref(one);
  /* Bad input: a batch smaller than the devices, unknown words. */
  char args[512];
  snprintf(args, sizeof args, "--model mlp --data %s/good --batch 1", tmp);
  expect_bad(args, "--batch 1 is smaller than the 2 selected devices");
  expect_bad("--data-parallel maybe",
             "--data-parallel: expected auto, on or off");
  expect_bad("--on-device-failure retry",
             "--on-device-failure: expected stop or continue");
  one_device();
}
END_TEST

/* A data-parallel checkpoint is one file: it resumes on one device, and a
 * one-device checkpoint resumes data-parallel, on the same curve. */
START_TEST(data_parallel_checkpoints_resume_on_other_devices) {
  char ck[256], more[512];
  path_in_tmp(ck, sizeof ck, "dp.safetensors");
  json_t *straight = small_run("");
  data_parallel();
  snprintf(more, sizeof more, "--checkpoint %s --max-steps 7", ck);
  json_decref(small_run(more));
  one_device();
  snprintf(more, sizeof more, "--checkpoint %s --resume", ck);
  json_t *resumed = small_run(more);
  ck_assert_int_eq((int)real(resumed, "steps"), 20);
  ck_assert_msg(fabs(real(resumed, "test_accuracy") -
                     real(straight, "test_accuracy")) <= 0.011,
                "straight %g, resumed on one device %g",
                real(straight, "test_accuracy"),
                real(resumed, "test_accuracy"));
  json_decref(resumed);
  snprintf(more, sizeof more, "--checkpoint %s --max-steps 5", ck);
  json_decref(small_run(more));
  data_parallel();
  snprintf(more, sizeof more, "--checkpoint %s --resume", ck);
  resumed = small_run(more);
  ck_assert_int_eq((int)real(resumed, "steps"), 20);
  ck_assert_msg(fabs(real(resumed, "test_accuracy") -
                     real(straight, "test_accuracy")) <= 0.011,
                "straight %g, resumed on two devices %g",
                real(straight, "test_accuracy"),
                real(resumed, "test_accuracy"));
  json_decref(resumed);
  json_decref(straight);
  one_device();
}
END_TEST

/* The test device fails its 60th launch (step 4 or so): the run stops
 * with an error naming it and the step, the checkpoint written before
 * stays loadable; with --on-device-failure continue it goes on on cpu:0
 * and ends where the undisturbed run does. */
START_TEST(a_failed_device_stops_the_run_or_is_dropped) {
  char ck[256], net[256], args[2048], *out;
  path_in_tmp(ck, sizeof ck, "fail.safetensors");
  write_text("net.txt", small_net, net, sizeof net);
  json_t *straight = small_run("");
  data_parallel();
  extra_env = "TYTO_PART_FAIL_LAUNCH=60";
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good --epochs 2 --batch 32 --seed 9 "
           "--checkpoint %s --checkpoint-every 1",
           net, tmp, ck);
  int rc = train(args, 1, &out);
  ck_assert_msg(rc == 1, "exit status %d:\n%s", rc, out);
  ck_assert_msg_contains(out, "the replica on part:0");
  ck_assert_msg_contains(out, "dp: step ");
  free(out);
  one_device();
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good --epochs 2 --batch 32 --seed 9 "
           "--checkpoint %s --resume --quiet",
           net, tmp, ck);
  train_ok(args, NULL); /* the last checkpoint is whole */
  data_parallel();
  extra_env = "TYTO_PART_FAIL_LAUNCH=60";
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good --epochs 2 --batch 32 --seed 9 "
           "--json --on-device-failure continue",
           net, tmp);
  json_t *cont = train_json(args);
  size_t n;
  char *err = slurp(errlog, &n);
  ck_assert_msg_contains(err, "part:0 failed at step");
  ck_assert_msg_contains(err, "going on without it, on cpu:0");
  free(err);
  ck_assert_uint_eq(json_array_size(json_object_get(cont, "devices")), 1);
  same_training(cont, straight);
  json_decref(cont);
  json_decref(straight);
  one_device();
}
END_TEST

/* The shares follow the devices' speed: with the test device slowed,
 * calibrated after 2 steps (granularity 2, no rebalance after), cpu:0
 * takes more of each batch, the line says so, and the run follows one
 * device; the options' bad values and their use on one device are
 * refused with what was expected. */
START_TEST(shares_follow_the_measured_speed) {
  json_t *one = small_run("");
  data_parallel();
  extra_env = "TYTO_PART_DELAY_US=400";
  json_t *two = small_run("--calibrate-steps 2 --rebalance-every 0 "
                          "--shard-granularity 2");
  extra_env = "";
  same_training(two, one);
  size_t n;
  char *err = slurp(errlog, &n);
  ck_assert_msg_contains(
      err, "shares from the devices' measured speed after step 2: cpu:0 ");
  free(err);
  json_t *par = json_object_get(two, "data_parallel");
  ck_assert_uint_eq(json_array_size(par), 2);
  int64_t cpu = (int64_t)real(json_array_get(par, 0), "shard"),
          part = (int64_t)real(json_array_get(par, 1), "shard");
  ck_assert_msg(cpu > 16 && part >= 2 && part % 2 == 0 && cpu + part == 32,
                "cpu:0 %lld, part:0 %lld of 32", (long long)cpu,
                (long long)part);
  json_decref(two);
  json_decref(one);
  /* A batch that is not a multiple of 4 splits by single examples (the
   * automatic granularity of 4 was refused by the library). */
  char net[256], args[512];
  write_text("net.txt", small_net, net, sizeof net);
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good --batch 30 --max-steps 3 --json",
           net, tmp);
  json_t *odd = train_json(args);
  par = json_object_get(odd, "data_parallel");
  ck_assert_int_eq((int64_t)real(json_array_get(par, 0), "shard") +
                       (int64_t)real(json_array_get(par, 1), "shard"),
                   30);
  json_decref(odd);
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --batch 32 --shard-granularity 64", tmp);
  expect_bad(args, "--shard-granularity 64 is larger than the batch (--batch "
                   "32)");
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --batch 32 --shard-granularity 3", tmp);
  expect_bad(args, "--batch 32 is not a multiple of --shard-granularity 3");
  expect_bad("--calibrate-steps -1",
             "--calibrate-steps: expected an integer in [0, ");
  expect_bad("--rebalance-every x",
             "--rebalance-every: expected an integer in [0, ");
  one_device();
  snprintf(args, sizeof args, "--model mlp --data %s/good --rebalance-every 5",
           tmp);
  expect_bad(args, "--rebalance-every applies to data-parallel training over "
                   "several devices; this run trains on cpu:0 alone");
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --shard-granularity 4", tmp);
  expect_bad(args, "--shard-granularity applies to data-parallel training");
}
END_TEST

/* Batch norm with --sync-batch-norm: over cpu:0 and part:0 the run
 * follows cpu:0 alone (the statistics of the whole batch of 32, within
 * same_training's bounds); each device's own statistics (over 16) make
 * another run, by more than 1e-3 in the mean training loss. The
 * convolution has no bias: batch norm cancels it, and Adam would walk
 * it on rounding alone. */
static const char *bn_net =
    "input shape=1x28x28\n"
    "conv2d name=c filters=4 kernel=3 stride=2 padding=same bias=false\n"
    "batch_norm name=bn\n"
    "relu\n"
    "fully_connected name=h units=16 activation=tanh\n"
    "linear name=out units=10\n";

static json_t *bn_run(const char *more) {
  char net[256], args[2048];
  write_text("bn.txt", bn_net, net, sizeof net);
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good --epochs 2 --batch 32 --seed 9 "
           "--json %s",
           net, tmp, more);
  return train_json(args);
}

START_TEST(synchronised_batch_norm_follows_one_device) {
  json_t *one = bn_run("--sync-batch-norm");
  ck_assert(json_is_true(json_object_get(one, "sync_batch_norm")));
  data_parallel();
  json_t *two = bn_run("--sync-batch-norm");
  ck_assert_uint_eq(json_array_size(json_object_get(two, "devices")), 2);
  same_training(two, one);
  json_t *own = bn_run("");
  ck_assert(json_is_false(json_object_get(own, "sync_batch_norm")));
  double lo = real(own, "train_loss"), l1 = real(one, "train_loss");
  ck_assert_msg(fabs(lo - l1) > 1e-3 * fabs(l1),
                "per-device statistics: train loss %.9g, one device %.9g", lo,
                l1);
  json_decref(own);
  json_decref(two);
  json_decref(one);
  one_device();
}
END_TEST
int main(void) {
  Suite *s = suite_create("tyto-train-dp");
  TCase *tc = tcase_create("tyto-train-dp");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, data_parallel_training_follows_one_device);
  tcase_add_test(tc, data_parallel_checkpoints_resume_on_other_devices);
  tcase_add_test(tc, a_failed_device_stops_the_run_or_is_dropped);
  tcase_add_test(tc, shares_follow_the_measured_speed);
  tcase_add_test(tc, synchronised_batch_norm_follows_one_device);
  suite_add_tcase(s, tc);
  return test_run(s);
}
