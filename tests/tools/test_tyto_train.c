/*
 * tyto-train end to end: the MLP learns Fashion-MNIST (when the dataset is
 * installed), a resumed run continues bit for bit, --json and --plot, and
 * every kind of bad input gets its message and exit status 2 without
 * touching an existing checkpoint. Most cases run on small synthetic IDX
 * datasets written by the test, so they need no download.
 */
#include "train_harness.h"

START_TEST(synthetic_data_is_learnt_and_reported) {
  char args[2048], svg[256], *out;
  path_in_tmp(svg, sizeof svg, "curves.svg");
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --epochs 4 --batch 32 --optimizer sgd "
           "--lr 0.1 --json --plot %s",
           tmp, svg);
  train_ok(args, &out);
  json_t *root = json_of(out);
  ck_assert_str_eq(json_string_value(json_object_get(root, "model")), "mlp");
  ck_assert_int_eq((int)real(root, "steps"), 4 * 10);
  ck_assert_int_eq((int)real(root, "train_images"), 320);
  ck_assert_int_eq((int)real(root, "test_images"), 100);
  /* The classes are bright rows: easily separable. */
  ck_assert_msg(real(root, "test_accuracy") >= 0.9, "test accuracy %g",
                real(root, "test_accuracy"));
  ck_assert(real(root, "images_per_second") > 0);
  ck_assert(real(root, "peak_rss_bytes") > 0);
  ck_assert_int_eq(json_array_size(json_object_get(root, "epoch_seconds")), 4);
  ck_assert_str_eq(
      json_string_value(json_array_get(json_object_get(root, "devices"), 0)),
      "cpu:0");
  json_decref(root);
  free(out);
  size_t n;
  char *s = slurp(svg, &n);
  ck_assert_ptr_nonnull(s);
  ck_assert_msg_contains(s, "<svg");
  ck_assert_msg_contains(s, "<polyline");
  ck_assert_msg_contains(s, "test accuracy");
  free(s);
}
END_TEST

/* Two epochs straight, against 7 steps, a stop, and a resume: the final
 * checkpoints (parameters, Adam's moments, the step counters, dropout's
 * step, the position in the data) are the same bytes. */
START_TEST(a_resumed_run_continues_bit_for_bit) {
  char net[256], a[256], b[256], args[2048];
  write_text("net.txt", small_net, net, sizeof net);
  path_in_tmp(a, sizeof a, "a.safetensors");
  path_in_tmp(b, sizeof b, "b.safetensors");
  const char *common = "--epochs 2 --batch 32 --seed 9 --quiet";
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good %s --checkpoint %s", net, tmp,
           common, a);
  train_ok(args, NULL);
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good %s --checkpoint %s --max-steps 7",
           net, tmp, common, b);
  train_ok(args, NULL);
  size_t na, nb;
  char *fa = slurp(a, &na), *fb = slurp(b, &nb);
  ck_assert(na != nb || memcmp(fa, fb, na) != 0); /* not there yet */
  free(fb);
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good %s --checkpoint %s --resume", net,
           tmp, common, b);
  train_ok(args, NULL);
  fb = slurp(b, &nb);
  ck_assert_uint_eq(na, nb);
  ck_assert_msg(memcmp(fa, fb, na) == 0,
                "the resumed run's checkpoint differs from the straight run's");
  free(fa);
  free(fb);
}
END_TEST

START_TEST(bad_input_exits_2_with_its_message) {
  char args[2048], net[256];
  expect_bad("--frobnicate", "unknown option '--frobnicate'");
  expect_bad("--sync-batch-norm=yes",
             "option '--sync-batch-norm' takes no value, got "
             "'--sync-batch-norm=yes'");
  expect_bad("--quiet=1", "option '--quiet' takes no value");
  expect_bad("--epochs zero", "--epochs: expected an integer in [1, 1000000], "
                              "got 'zero'");
  expect_bad("--model resnet", "unknown model 'resnet' (expected cnn, mlp, "
                               "mlp-big");
  expect_bad("--optimizer lbfgs", "unknown optimiser 'lbfgs'");
  expect_bad("--resume", "--resume needs --checkpoint FILE");

  snprintf(args, sizeof args, "--model mlp --data %s/nowhere", tmp);
  expect_bad(args, "nowhere");

  make_dataset("badmagic", 0x01020803, 0, 0);
  snprintf(args, sizeof args, "--model mlp --data %s/badmagic", tmp);
  expect_bad(args, "bad magic");

  make_dataset("truncated", 0x00000803, 0, 1);
  snprintf(args, sizeof args, "--model mlp --data %s/truncated", tmp);
  expect_bad(args, "truncated");

  make_dataset("counts", 0x00000803, 5, 0);
  snprintf(args, sizeof args, "--model mlp --data %s/counts", tmp);
  expect_bad(args, "320 images but 325 labels");

  write_text("typo.txt",
             "input shape=1x28x28\n"
             "# a comment\n"
             "conv2d filter=32 kernel=5\n",
             net, sizeof net);
  snprintf(args, sizeof args, "--model-file %s --data %s/good", net, tmp);
  char want[512];
  snprintf(want, sizeof want, "%s:3:8: conv2d: unknown key 'filter'", net);
  expect_bad(args, want);

  write_text("shape.txt",
             "input shape=784\n"
             "conv2d filters=8 kernel=3\n"
             "linear units=10\n",
             net, sizeof net);
  snprintf(args, sizeof args, "--model-file %s --data %s/good", net, tmp);
  snprintf(want, sizeof want, "%s:2:1: conv2d 'conv2d_1'", net);
  expect_bad(args, want);

  write_text("classes.txt", "input shape=784\nlinear units=7\n", net,
             sizeof net);
  snprintf(args, sizeof args, "--model-file %s --data %s/good", net, tmp);
  expect_bad(args, "the data has 10 classes");
}
END_TEST

/* A checkpoint of another model, or of another run, is refused on resume
 * and left as it was. */
START_TEST(a_foreign_checkpoint_is_refused_and_kept) {
  char ck[256], args[2048];
  path_in_tmp(ck, sizeof ck, "mlp.safetensors");
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --batch 32 --quiet --checkpoint %s", tmp,
           ck);
  train_ok(args, NULL);
  size_t n0, n1;
  char *before = slurp(ck, &n0);
  snprintf(args, sizeof args,
           "--model mlp-big --data %s/good --batch 16 --epochs 2 --checkpoint "
           "%s --resume",
           tmp, ck);
  /* another model, and another batch beside it: both named */
  expect_bad(args, "does not match this model");
  expect_bad(args, "--batch was 32 in the checkpoint's run and is 16");
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --batch 16 --epochs 2 --checkpoint %s "
           "--resume",
           tmp, ck);
  expect_bad(args, "--batch was 32 in the checkpoint's run and is 16");
  /* Every difference is named, not only the first. */
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --batch 16 --seed 7 --epochs 2 "
           "--checkpoint %s --resume",
           tmp, ck);
  expect_bad(args, "--seed was 42 in the checkpoint's run and is 7");
  expect_bad(args, "--batch was 32 in the checkpoint's run and is 16");
  char junk[256];
  write_text("junk.safetensors", "not a checkpoint at all", junk, sizeof junk);
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --batch 32 --checkpoint %s --resume",
           tmp, junk);
  expect_bad(args, "junk.safetensors");
  char *after = slurp(ck, &n1);
  ck_assert_uint_eq(n0, n1);
  ck_assert(memcmp(before, after, n0) == 0);
  free(before);
  free(after);
}
END_TEST

/* Entries of the test folder whose names start with prefix. */
static int entries_starting(const char *prefix) {
  DIR *d = opendir(tmp);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

/* A checkpoint write past the file-size limit (ulimit -f) fails with a
 * message instead of SIGXFSZ killing the run (even with SIGXFSZ at its
 * default action), removes its temporary, and leaves the previous
 * checkpoint whole and loadable. */
START_TEST(a_checkpoint_past_the_file_size_limit_keeps_the_last_one) {
  char ck[256], args[2048], cmd[4096];
  path_in_tmp(ck, sizeof ck, "big.safetensors");
  snprintf(args, sizeof args,
           "--model mlp-big --data %s/good --batch 32 --quiet --checkpoint %s",
           tmp, ck);
  train_ok(args, NULL);
  size_t n0, n1;
  char *before = slurp(ck, &n0);
  ck_assert_uint_gt(n0, 512 * 1024);
  /* 256 blocks of 1 KiB: far less than the checkpoint needs. */
  snprintf(cmd, sizeof cmd,
           "trap - XFSZ; ulimit -f 256; env -u TYTO_CONFIG TYTO_DEVICES=cpu "
           "TYTO_PLUGIN_PATH='%s' '%s/tyto-train' %s --epochs 2 --resume "
           "2>&1",
           TEST_PLUGIN_DIRS, TEST_TOOLS_DIR, args);
  char *out;
  int rc = test_popen(cmd, &out);
  ck_assert_msg(rc == 1, "exit %d, expected 1:\n%s", rc, out);
  ck_assert_msg_contains(out, "the file-size limit was reached");
  ck_assert_msg_contains(out, "is unchanged");
  free(out);
  ck_assert_int_eq(entries_starting("big.safetensors"), 1);
  char *after = slurp(ck, &n1);
  ck_assert_uint_eq(n0, n1);
  ck_assert(memcmp(before, after, n0) == 0);
  tyto_checkpoint *c = NULL;
  ck_assert_msg(tyto_checkpoint_load(ck, &c) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_str_eq(tyto_checkpoint_get_meta(c, "tyto.epoch"), "1");
  tyto_checkpoint_free(c);
  free(before);
  free(after);
}
END_TEST

/* Inputs that are FIFOs are refused at once (a FIFO with no writer would
 * block for ever), and paths the run will write are checked before the
 * first step. */
START_TEST(fifos_and_unwritable_outputs_are_refused_up_front) {
  char fifo[256], args[2048], want[512];
  path_in_tmp(fifo, sizeof fifo, "fifo");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  snprintf(args, sizeof args, "--model-file %s --data %s/good", fifo, tmp);
  snprintf(want, sizeof want,
           "%s: cannot read the model file: is a FIFO, not a regular file",
           fifo);
  expect_bad(args, want);
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --checkpoint %s "
           "--resume",
           tmp, fifo);
  snprintf(want, sizeof want, "--checkpoint: %s is a FIFO", fifo);
  expect_bad(args, want);
  /* a dataset whose image file is a FIFO */
  char dir[256], file[300];
  path_in_tmp(dir, sizeof dir, "fifodata");
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  write_split(dir, "t10k", 100, 0x00000803, 0, 0);
  write_split(dir, "train", 100, 0x00000803, 0, 0);
  snprintf(file, sizeof file, "%s/train-images-idx3-ubyte", dir);
  ck_assert_int_eq(unlink(file), 0);
  ck_assert_int_eq(mkfifo(file, 0600), 0);
  snprintf(args, sizeof args, "--model mlp --data %s", dir);
  expect_bad(args, "is a FIFO, not a regular file, expected an IDX file");

  snprintf(args, sizeof args,
           "--model mlp --data %s/good --checkpoint %s/no/such/dir/ck", tmp,
           tmp);
  expect_bad(args, "/no/such/dir/ck: cannot create a file beside it: No such "
                   "file or directory");
  snprintf(args, sizeof args, "--model mlp --data %s/good --plot %s", tmp, tmp);
  snprintf(want, sizeof want, "--plot: %s is a directory", tmp);
  expect_bad(args, want);
  ck_assert_int_eq(entries_starting("fifo.probe"), 0);
}
END_TEST

/* A run resumed at --max-steps trains nothing and leaves its checkpoint
 * alone; a checkpoint reached through a symbolic link is written through
 * it; an empty path, eps 0, a schedule without its length and bad
 * TYTO_* variables are bad input found before training. */
START_TEST(max_steps_links_and_settings_found_up_front) {
  char ck[256], real_ck[256], args[2048], *out;
  path_in_tmp(ck, sizeof ck, "ms.safetensors");
  const char *common = "--model mlp --batch 32 --seed 3 --quiet --json";
  snprintf(args, sizeof args, "%s --data %s/good --checkpoint %s --max-steps 3",
           common, tmp, ck);
  train_ok(args, NULL);
  size_t n0, n1;
  char *before = slurp(ck, &n0);
  struct stat st0, st1;
  ck_assert_int_eq(stat(ck, &st0), 0);
  snprintf(args, sizeof args,
           "%s --data %s/good --checkpoint %s --max-steps 3 --resume", common,
           tmp, ck);
  train_ok(args, &out);
  json_t *root = json_of(out);
  ck_assert_int_eq((int)real(root, "steps"), 3);
  ck_assert(json_is_null(json_object_get(root, "train_loss")));
  ck_assert(json_is_null(json_object_get(root, "images_per_second")));
  ck_assert(json_is_null(json_object_get(root, "seconds_per_epoch")));
  json_decref(root);
  free(out);
  /* The text summary gives no rate either, rather than 0 images/s. */
  snprintf(args, sizeof args,
           "--model mlp --batch 32 --seed 3 --quiet --data %s/good "
           "--checkpoint %s --max-steps 3 --resume",
           tmp, ck);
  train_ok(args, &out);
  ck_assert_msg(strstr(out, "no step trained, no whole epoch, compile") &&
                    !strstr(out, "images/s"),
                "%s", out);
  free(out);
  /* Another optimiser is named as such, not as state tensors missing. */
  snprintf(args, sizeof args,
           "%s --data %s/good --checkpoint %s --max-steps 6 --resume "
           "--optimizer sgd --momentum 0.9",
           common, tmp, ck);
  expect_bad(args, "--resume: --optimizer was adam in the checkpoint's run "
                   "and is sgd in this one; resume with --optimizer adam");
  char *after = slurp(ck, &n1);
  ck_assert_int_eq(stat(ck, &st1), 0);
  ck_assert_uint_eq(n0, n1);
  ck_assert(memcmp(before, after, n0) == 0);
  ck_assert(st0.st_ino == st1.st_ino); /* not even rewritten */
  free(before);
  free(after);

  /* Through a link: the link stays, its target holds the checkpoint. */
  path_in_tmp(real_ck, sizeof real_ck, "target.safetensors");
  path_in_tmp(ck, sizeof ck, "link.safetensors");
  ck_assert_int_eq(symlink("target.safetensors", ck), 0);
  snprintf(args, sizeof args, "%s --data %s/good --checkpoint %s --max-steps 2",
           common, tmp, ck);
  train_ok(args, NULL);
  ck_assert_int_eq(lstat(ck, &st0), 0);
  ck_assert(S_ISLNK(st0.st_mode));
  ck_assert_int_eq(stat(real_ck, &st1), 0);
  ck_assert(S_ISREG(st1.st_mode) && st1.st_size > 0);

  /* --validation 0 is the default said out loud */
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --validation 0 --max-steps 1 --quiet",
           tmp);
  train_ok(args, NULL);
  /* --max-steps before any evaluation: no validation accuracy, not 0;
   * with an evaluation at step 1, its accuracy. */
  for (int evaluated = 0; evaluated < 2; evaluated++) {
    snprintf(args, sizeof args,
             "--model mlp --data %s/good --validation 64 --max-steps 1 "
             "--quiet --json%s",
             tmp, evaluated ? " --eval-every 1" : "");
    root = train_json(args);
    json_t *va = json_object_get(root, "validation_accuracy");
    ck_assert(evaluated ? json_is_real(va) : json_is_null(va));
    json_decref(root);
  }
  /* --max-steps at the end of an epoch: that epoch is complete */
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --max-steps 5 --quiet --json", tmp);
  root = train_json(args);
  ck_assert_int_eq((int)real(root, "epochs"), 1);
  ck_assert_uint_eq(json_array_size(json_object_get(root, "epoch_seconds")), 1);
  json_decref(root);
  snprintf(args, sizeof args, "--model mlp --data %s/good --checkpoint ''",
           tmp);
  expect_bad(args, "--checkpoint: the path is empty");
  snprintf(args, sizeof args, "--model mlp --data %s/good --plot ''", tmp);
  expect_bad(args, "--plot: the path is empty");
  expect_bad("--eps 0", "--eps: expected a finite number > 0, got '0'");
  expect_bad("--lr abc", "--lr: expected a finite number > 0, got 'abc'");
  expect_bad("--schedule step", "--schedule step needs --step-size N");
  expect_bad("--schedule cosine", "--schedule cosine needs --total-steps N");
  snprintf(args, sizeof args, "--model mlp --data %s/good --max-steps 1", tmp);
  extra_env = "TYTO_DIST_TIMEOUT=abc";
  expect_bad(args, "TYTO_DIST_TIMEOUT='abc': expected a number of seconds");
  extra_env = "TYTO_PROFILE=maybe";
  expect_bad(args, "TYTO_PROFILE=maybe: expected on or off");
  extra_env = "TYTO_CPU_NO_DNNL=maybe";
  expect_bad(args, "TYTO_CPU_NO_DNNL=maybe: expected on or off");
  extra_env = "TYTO_PLACEMENT=bogus";
  expect_bad(args, "\"bogus\" is not a word it takes");
  extra_env = "";
}
END_TEST

/* Options that the chosen optimiser or schedule does not read are refused
 * with what they apply to, instead of being ignored. */
START_TEST(options_that_do_not_apply_are_refused) {
  char *version;
  train_ok("--version", &version);
  ck_assert_msg(strncmp(version, "tyto-train ", 11) == 0 &&
                    strchr(version, '.') != NULL,
                "--version printed: %s", version);
  free(version);
  expect_bad("--optimizer adam --alpha 0.9",
             "--alpha applies to --optimizer rmsprop only; this run uses "
             "--optimizer adam");
  expect_bad("--alpha 0.9", "this run uses --optimizer adam");
  expect_bad("--optimizer sgd --beta1 0.8",
             "--beta1 applies to --optimizer adam and adamw only; this run "
             "uses --optimizer sgd");
  expect_bad("--optimizer rmsprop --beta2 0.9", "--beta2 applies to");
  expect_bad("--optimizer sgd --eps 1e-6",
             "--eps applies to --optimizer adagrad, rmsprop, adam and adamw "
             "only");
  expect_bad("--optimizer adam --momentum 0.9",
             "--momentum applies to --optimizer sgd only");
  expect_bad("--nesterov", "--nesterov applies to --optimizer sgd only");
  expect_bad("--gamma 0.5", "--gamma applies to --schedule step and "
                            "exponential only; this run uses --schedule "
                            "constant");
  expect_bad("--schedule cosine --step-size 3",
             "--step-size applies to --schedule step only; this run uses "
             "--schedule cosine");
  expect_bad("--schedule step --step-size 3 --total-steps 9",
             "--total-steps applies to --schedule cosine only");
  expect_bad("--schedule exponential --min-lr 0.001",
             "--min-lr applies to --schedule cosine only");
}
END_TEST

/* Writes a copy of checkpoint `from` as `to` with metadata key set to
 * value (NULL: unchanged) and, when poison is set, a NaN in fc1.weight. */
static void doctor(const char *from, const char *to, const char *key,
                   const char *value, int poison) {
  tyto_checkpoint *in, *out;
  ck_assert_msg(tyto_checkpoint_load(from, &in) == TYTO_OK, "%s",
                tyto_errmsg());
  ck_assert_int_eq(tyto_checkpoint_new(&out), TYTO_OK);
  for (size_t i = 0; i < tyto_checkpoint_count(in); i++) {
    const char *name = tyto_checkpoint_name(in, i);
    tyto_checkpoint_dtype dt;
    int rank;
    const int64_t *shape;
    const void *data;
    size_t bytes;
    ck_assert_int_eq(
        tyto_checkpoint_find(in, name, &dt, &rank, &shape, &data, &bytes),
        TYTO_OK);
    float *copy = malloc(bytes ? bytes : 1);
    memcpy(copy, data, bytes);
    if (poison && strcmp(name, "fc1.weight") == 0)
      copy[5] = NAN;
    ck_assert_int_eq(tyto_checkpoint_add(out, name, dt, rank, shape, copy),
                     TYTO_OK);
    free(copy);
  }
  for (size_t i = 0; i < tyto_checkpoint_meta_count(in); i++) {
    const char *k = tyto_checkpoint_meta_key(in, i);
    const char *v =
        key && strcmp(k, key) == 0 ? value : tyto_checkpoint_get_meta(in, k);
    ck_assert_int_eq(tyto_checkpoint_set_meta(out, k, v), TYTO_OK);
  }
  ck_assert_msg(tyto_checkpoint_save(out, to) == TYTO_OK, "%s", tyto_errmsg());
  tyto_checkpoint_free(in);
  tyto_checkpoint_free(out);
}

/* A checkpoint with impossible counters, or with NaN weights, is refused
 * on resume with what is wrong, instead of wrapping round or ending in
 * "training diverged". */
START_TEST(a_checkpoint_with_bad_counters_or_nan_is_refused) {
  char ck[256], bad[256], args[2048];
  path_in_tmp(ck, sizeof ck, "ok.safetensors");
  path_in_tmp(bad, sizeof bad, "bad.safetensors");
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --batch 32 --quiet --max-steps 4 "
           "--checkpoint %s",
           tmp, ck);
  train_ok(args, NULL);
  snprintf(args, sizeof args,
           "--model mlp --data %s/good --batch 32 --epochs 2 --checkpoint %s "
           "--resume",
           tmp, bad);
  static const struct {
    const char *key, *value, *want;
  } cases[] = {
      {"tyto.epoch", "9223372036854775807",
       "position epoch 9223372036854775807, batch 4, step 4 is not possible "
       "here (expected epoch in [0, 1000000), batch in [0, 10] and step = "
       "epoch x 10 + batch)"},
      {"tyto.steps", "9223372036854775807",
       "step 9223372036854775807 is not "
       "possible here"},
      {"tyto.steps", "-1", "step -1 is not possible here"},
      {"tyto.batch_in_epoch", "11", "batch 11, step 4 is not possible here"},
      {"tyto.steps", "5", "step 5 is not possible here"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    doctor(ck, bad, cases[i].key, cases[i].value, 0);
    expect_bad(args, cases[i].want);
  }
  doctor(ck, bad, NULL, NULL, 1);
  char want[512];
  snprintf(want, sizeof want,
           "%s: tensor 'fc1.weight' holds NaN at element 5; the checkpoint is "
           "damaged or its run had diverged",
           bad);
  expect_bad(args, want);
}
END_TEST

/* A dataset with no images, or with NaN pixels, says so. */
START_TEST(empty_and_nan_datasets_are_named) {
  char dir[256], path[300], args[1024];
  path_in_tmp(dir, sizeof dir, "empty");
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  write_split(dir, "train", 0, 0x00000803, 0, 0);
  write_split(dir, "t10k", 100, 0x00000803, 0, 0);
  snprintf(args, sizeof args, "--model mlp --data %s", dir);
  char want[512];
  snprintf(want, sizeof want,
           "data: %s holds no training images (its train-images file has a "
           "count of 0)",
           dir);
  expect_bad(args, want);

  /* f32 images (IDX type 0x0D) with a NaN in image 2 */
  path_in_tmp(dir, sizeof dir, "nan");
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  write_split(dir, "t10k", 10, 0x00000803, 0, 0);
  write_split(dir, "train", 10, 0x00000803, 0, 0);
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  be32(f, 0x00000D03);
  be32(f, 10);
  be32(f, 28);
  be32(f, 28);
  for (int i = 0; i < 10 * 784; i++)
    be32(f, i == 2 * 784 + 17 ? 0x7fc00000u : 0x3f000000u);
  fclose(f);
  snprintf(args, sizeof args, "--model mlp --data %s", dir);
  expect_bad(args, "image 2 holds NaN at value 17; images must hold finite "
                   "numbers");
}
END_TEST

/* SIGTERM and SIGINT stop training cleanly, with the checkpoint written,
 * also with the OpenCL plugin loaded: PoCL's LLVM installs its own
 * handlers for these signals when it starts. */
static int have_opencl(void);

static void stop_with(int sig, const char *dev) {
  char ck[256], cmd[4096];
  path_in_tmp(ck, sizeof ck, "stopped.safetensors");
  unlink(ck);
  snprintf(cmd, sizeof cmd,
           "exec env -u TYTO_CONFIG TYTO_DEVICES=%s TYTO_PLUGIN_PATH='%s' "
           "'%s/tyto-train' --no-progress --quiet --model mlp --data %s/good "
           "--batch 8 --epochs 1000 --checkpoint %s --checkpoint-every 3 "
           ">/dev/null 2>&1",
           dev, TEST_PLUGIN_DIRS, TEST_TOOLS_DIR, tmp, ck);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  /* Training has started once the first checkpoint is there. */
  struct stat st;
  for (int i = 0; i < 600 && stat(ck, &st) != 0; i++)
    usleep(100 * 1000);
  ck_assert_msg(stat(ck, &st) == 0, "no checkpoint after 60 s on %s", dev);
  usleep(200 * 1000);
  ck_assert_int_eq(kill(pid, sig), 0);
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 128 + sig,
                "%s on %s: status %d, expected exit %d", strsignal(sig), dev,
                ws, 128 + sig);
  tyto_checkpoint *c = NULL;
  ck_assert_msg(tyto_checkpoint_load(ck, &c) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_gt(atoi(tyto_checkpoint_get_meta(c, "tyto.steps")), 3);
  tyto_checkpoint_free(c);
  ck_assert_int_eq(entries_starting("stopped.safetensors."), 0);
}

START_TEST(signals_stop_training_with_a_checkpoint) {
  stop_with(SIGTERM, "cpu");
  stop_with(SIGINT, "cpu");
  if (!have_opencl())
    return;
  stop_with(SIGTERM, "opencl");
  stop_with(SIGINT, "opencl");
}
END_TEST

/* make check's promise: the MLP learns Fashion-MNIST from 2,000 images in
 * a few seconds. */
START_TEST(mlp_learns_fashion_mnist) {
  const char *dir = getenv("TYTO_FASHION_MNIST");
  if (!dir)
    dir = "/usr/share/datasets/fashion-mnist";
  struct stat st;
  if (stat(dir, &st) != 0) {
    fprintf(stderr, "skipped: no Fashion-MNIST at %s\n", dir);
    return;
  }
  char args[1024], *out;
  snprintf(args, sizeof args,
           "--model mlp --data %s --limit 2000 --test-limit 1000 --epochs 5 "
           "--batch 32 --optimizer sgd --lr 0.1 --json",
           dir);
  train_ok(args, &out);
  json_t *root = json_of(out);
  double acc = real(root, "test_accuracy");
  fprintf(stderr, "mlp on 2,000 Fashion-MNIST images: test accuracy %.3f\n",
          acc);
  /* Stated goal: 75% on the first 1,000 test images (a linear model gets
   * about 70% from so few). */
  ck_assert_msg(acc >= 0.75, "test accuracy %g below 0.75", acc);
  json_decref(root);
  free(out);
}
END_TEST

/* Whether this machine has an OpenCL device tyto-train can select (PoCL on
 * CI machines); says why not when it has none. */
static int have_opencl(void) {
  char *out;
  devices = "opencl";
  int rc = train("--model mlp --data /nonexistent", 1, &out);
  devices = "cpu";
  int missing = strstr(out, "cannot be satisfied") != NULL;
  if (missing)
    fprintf(stderr, "skipped: no OpenCL device:\n%s", out);
  ck_assert_msg(missing || rc == 2, "exit %d:\n%s", rc, out);
  free(out);
  return !missing;
}

/* Trains `args` on the CPU and on the OpenCL device; returns the two JSON
 * reports. */
static void train_both(const char *args, json_t **cpu, json_t **ocl) {
  char *out;
  train_ok(args, &out);
  *cpu = json_of(out);
  free(out);
  devices = "opencl";
  train_ok(args, &out);
  devices = "cpu";
  *ocl = json_of(out);
  free(out);
  ck_assert_str_eq(
      json_string_value(json_array_get(json_object_get(*ocl, "devices"), 0)),
      "opencl:0");
}

/* The same run on the OpenCL device as on the CPU: the same initial
 * parameters, batches and dropout masks (Philox on both), so the two
 * differ only by rounding, and their accuracies by a few images. */
START_TEST(the_small_net_trains_on_opencl_as_on_the_cpu) {
  if (!have_opencl())
    return;
  char net[256], args[2048];
  write_text("net.txt", small_net, net, sizeof net);
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good --epochs 3 --batch 32 --seed 5 "
           "--json",
           net, tmp);
  json_t *cpu, *ocl;
  train_both(args, &cpu, &ocl);
  double a = real(cpu, "test_accuracy"), b = real(ocl, "test_accuracy");
  fprintf(stderr, "small net: test accuracy cpu %.3f, opencl %.3f\n", a, b);
  ck_assert_msg(b >= 0.9, "opencl test accuracy %g", b);
  /* 100 test images: two may flip. */
  ck_assert_msg(fabs(a - b) <= 0.021, "cpu %g against opencl %g", a, b);
  json_decref(cpu);
  json_decref(ocl);
}
END_TEST

START_TEST(the_mlp_learns_fashion_mnist_on_opencl_as_on_the_cpu) {
  const char *dir = getenv("TYTO_FASHION_MNIST");
  if (!dir)
    dir = "/usr/share/datasets/fashion-mnist";
  struct stat st;
  if (stat(dir, &st) != 0) {
    fprintf(stderr, "skipped: no Fashion-MNIST at %s\n", dir);
    return;
  }
  if (!have_opencl())
    return;
  char args[1024];
  snprintf(args, sizeof args,
           "--model mlp --data %s --limit 2000 --test-limit 1000 --epochs 2 "
           "--batch 32 --optimizer adam --lr 0.001 --json",
           dir);
  json_t *cpu, *ocl;
  train_both(args, &cpu, &ocl);
  double a = real(cpu, "test_accuracy"), b = real(ocl, "test_accuracy");
  fprintf(stderr, "mlp on 2,000 images: test accuracy cpu %.3f, opencl %.3f\n",
          a, b);
  /* Rounding differs (CLBlast's summation order is not OpenBLAS's), so
   * the runs drift apart a little: on the full data set the two stay
   * within 0.5 points (docs/opencl.md); here, on 1,000 test images, allow
   * 10 images. */
  ck_assert_msg(fabs(a - b) <= 0.010, "cpu %g against opencl %g", a, b);
  json_decref(cpu);
  json_decref(ocl);
}
END_TEST

/* A checkpoint written on the CPU resumes on the OpenCL device: the state
 * is host data, whichever device wrote it. */
START_TEST(a_cpu_checkpoint_resumes_on_opencl) {
  if (!have_opencl())
    return;
  char net[256], a[256], b[256], args[2048], *out;
  write_text("net.txt", small_net, net, sizeof net);
  path_in_tmp(a, sizeof a, "a.safetensors");
  path_in_tmp(b, sizeof b, "b.safetensors");
  const char *common = "--epochs 2 --batch 32 --seed 9 --json";
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good %s --checkpoint %s", net, tmp,
           common, a);
  train_ok(args, &out);
  json_t *straight = json_of(out);
  free(out);
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good %s --checkpoint %s --max-steps 7",
           net, tmp, common, b);
  train_ok(args, NULL);
  snprintf(args, sizeof args,
           "--model-file %s --data %s/good %s --checkpoint %s --resume", net,
           tmp, common, b);
  devices = "opencl";
  train_ok(args, &out);
  devices = "cpu";
  json_t *resumed = json_of(out);
  free(out);
  ck_assert_int_eq((int)real(resumed, "steps"), 20);
  double x = real(straight, "test_accuracy"),
         y = real(resumed, "test_accuracy");
  ck_assert_msg(fabs(x - y) <= 0.021, "straight %g against resumed %g", x, y);
  json_decref(straight);
  json_decref(resumed);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tyto-train");
  TCase *tc = tcase_create("tyto-train");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, synthetic_data_is_learnt_and_reported);
  tcase_add_test(tc, a_resumed_run_continues_bit_for_bit);
  tcase_add_test(tc, bad_input_exits_2_with_its_message);
  tcase_add_test(tc, a_foreign_checkpoint_is_refused_and_kept);
  tcase_add_test(tc, a_checkpoint_past_the_file_size_limit_keeps_the_last_one);
  tcase_add_test(tc, fifos_and_unwritable_outputs_are_refused_up_front);
  tcase_add_test(tc, max_steps_links_and_settings_found_up_front);
  tcase_add_test(tc, options_that_do_not_apply_are_refused);
  tcase_add_test(tc, a_checkpoint_with_bad_counters_or_nan_is_refused);
  tcase_add_test(tc, empty_and_nan_datasets_are_named);
  tcase_add_test(tc, signals_stop_training_with_a_checkpoint);
  tcase_add_test(tc, mlp_learns_fashion_mnist);
  tcase_add_test(tc, the_small_net_trains_on_opencl_as_on_the_cpu);
  tcase_add_test(tc, the_mlp_learns_fashion_mnist_on_opencl_as_on_the_cpu);
  tcase_add_test(tc, a_cpu_checkpoint_resumes_on_opencl);
  suite_add_tcase(s, tc);
  return test_run(s);
}
