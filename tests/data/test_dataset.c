/* Labelled datasets and batchers: the checks between images and labels,
 * loading a directory, the seeded shuffle (deterministic, a permutation,
 * unbiased), splits, partial batches and one-hot labels, and Fashion-MNIST
 * itself when it is installed. */
#include "data/data_test.h"

#include "data/data.h"

#define N_ITEMS 10

/* N_ITEMS images of 2x3 u8 where item i holds 10*i + k, and labels
 * i % 3; written as <prefix>-images / <prefix>-labels. */
static void write_set(const char *images, const char *labels, int gz) {
  unsigned char img[N_ITEMS * 6], lab[N_ITEMS];
  for (int i = 0; i < N_ITEMS; i++) {
    for (int k = 0; k < 6; k++)
      img[i * 6 + k] = (unsigned char)(10 * i + k);
    lab[i] = (unsigned char)(i % 3);
  }
  uint32_t di[3] = {N_ITEMS, 2, 3}, dl[1] = {N_ITEMS};
  test_write_u8(images, 3, di, img, sizeof img, gz);
  test_write_u8(labels, 1, dl, lab, sizeof lab, gz);
}

static tyto_dataset *load_set(int64_t classes) {
  write_set("img", "lab", 0);
  tyto_dataset *d;
  ck_assert_msg(tyto_dataset_load_idx(test_path("img"), test_path("lab"),
                                      classes, &d) == TYTO_OK,
                "%s", tyto_errmsg());
  return d;
}

#define check_set_fails(images, labels, classes, status, needle)               \
  do {                                                                         \
    tyto_dataset *d_ = (tyto_dataset *)0x1;                                    \
    ck_assert_int_eq(                                                          \
        tyto_dataset_load_idx((images), (labels), (classes), &d_), (status));  \
    ck_assert_ptr_null(d_);                                                    \
    ck_assert_msg_contains(tyto_errmsg(), (needle));                           \
  } while (0)

START_TEST(test_load) {
  tyto_dataset *d = load_set(0);
  ck_assert_int_eq(tyto_dataset_count(d), N_ITEMS);
  ck_assert_int_eq(tyto_dataset_item_rank(d), 2);
  ck_assert_int_eq(tyto_dataset_item_shape(d)[0], 2);
  ck_assert_int_eq(tyto_dataset_item_shape(d)[1], 3);
  ck_assert_int_eq(tyto_dataset_item_size(d), 6);
  ck_assert_int_eq(tyto_dataset_classes(d), 3);
  for (int i = 0; i < N_ITEMS; i++)
    ck_assert_int_eq(tyto_dataset_label(d, i), i % 3);
  ck_assert_int_eq(tyto_dataset_label(d, N_ITEMS), -1);
  ck_assert_int_eq(tyto_dataset_label(d, -1), -1);
  float f[12];
  ck_assert(tyto_dataset_read_images(d, 4, 2, TYTO_F32, 1.0 / 255, f,
                                     sizeof f) == TYTO_OK);
  ck_assert_float_eq_tol(f[7], 51.0f / 255, 1e-7);
  tyto_dataset_free(d);

  d = load_set(7);
  ck_assert_int_eq(tyto_dataset_classes(d), 7);
  tyto_dataset_free(d);
}
END_TEST

START_TEST(test_load_errors) {
  write_set("img", "lab", 0);
  char img[512];
  snprintf(img, sizeof img, "%s", test_path("img"));
  unsigned char lab[N_ITEMS] = {0};
  uint32_t d9[1] = {N_ITEMS - 1}, d10[1] = {N_ITEMS}, d2[2] = {N_ITEMS, 1};
  check_set_fails(img, test_write_u8("l9", 1, d9, lab, N_ITEMS - 1, 0), 0,
                  TYTO_ERR_INVALID_ARGUMENT, "dataset: 10 images but 9 labels");
  check_set_fails(img, test_write_u8("l2", 2, d2, lab, N_ITEMS, 0), 0,
                  TYTO_ERR_INVALID_ARGUMENT, "labels have rank 2, expected 1");
  check_set_fails(test_path("lab"), test_path("lab"), 0,
                  TYTO_ERR_INVALID_ARGUMENT,
                  "images have rank 1, expected 2 or more");
  check_set_fails(img, test_path("lab"), 2, TYTO_ERR_INVALID_ARGUMENT,
                  "label 2 is 2, expected a whole number in [0, 2)");
  check_set_fails(img, test_path("none"), 0, TYTO_ERR_NOT_FOUND,
                  "none: no such file");
  check_set_fails(test_path("none"), test_path("lab"), 0, TYTO_ERR_NOT_FOUND,
                  "none: no such file");
  check_set_fails(img, test_path("lab"), -1, TYTO_ERR_INVALID_ARGUMENT,
                  "classes is -1");

  /* Labels must be whole and non-negative, whatever their type. */
  unsigned char buf[128], be[4 * N_ITEMS] = {0};
  be[4 * 3] = 0x3f, be[4 * 3 + 1] = 0xc0; /* 1.5f, big-endian */
  size_t n = test_idx_bytes(buf, 0x0D, 1, d10, be, sizeof be);
  check_set_fails(img, test_write_bytes("lf", buf, n, 0), 0,
                  TYTO_ERR_INVALID_ARGUMENT, "label 3 is 1.5, expected");
  lab[5] = 0xff; /* -1 as i8 */
  n = test_idx_bytes(buf, 0x09, 1, d10, lab, N_ITEMS);
  check_set_fails(img, test_write_bytes("li", buf, n, 1), 0,
                  TYTO_ERR_INVALID_ARGUMENT, "label 5 is -1");
}
END_TEST

START_TEST(test_load_dir) {
  tyto_dataset *d = (tyto_dataset *)0x1;
  ck_assert_int_eq(
      tyto_dataset_load_dir("/nonexistent/tyto-data", "train", 0, &d),
      TYTO_ERR_NOT_FOUND);
  ck_assert_ptr_null(d);
  ck_assert_msg_contains(tyto_errmsg(),
                         "data directory /nonexistent/tyto-data: No such "
                         "file or directory (expected the MNIST or "
                         "Fashion-MNIST files train-images-idx3-ubyte[.gz]");
  ck_assert_int_eq(tyto_dataset_load_dir(test_dir, "test", 0, &d),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(),
                         "split \"test\", expected \"train\" or \"t10k\"");
  ck_assert_int_eq(tyto_dataset_load_dir(test_dir, "t10k", 0, &d),
                   TYTO_ERR_NOT_FOUND);
  ck_assert_msg_contains(tyto_errmsg(), "t10k-images-idx3-ubyte.gz");
  ck_assert_int_eq(tyto_dataset_load_dir(test_path("x"), "t10k", 0, &d),
                   TYTO_ERR_NOT_FOUND);
  ck_assert_msg_contains(tyto_errmsg(), "No such file or directory");

  /* Images compressed, labels plain. */
  write_set("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte", 0);
  ck_assert_int_eq(tyto_dataset_load_dir(test_dir, "t10k", 0, &d), TYTO_OK);
  ck_assert_int_eq(tyto_dataset_count(d), N_ITEMS);
  tyto_dataset_free(d);
  write_set("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 1);
  ck_assert_int_eq(tyto_dataset_load_dir(test_dir, "train", 0, &d), TYTO_OK);
  ck_assert_int_eq(tyto_dataset_classes(d), 3);
  tyto_dataset_free(d);
  /* A directory given where a file belongs. */
  ck_assert_int_eq(tyto_dataset_load_dir(test_path("train-labels-idx1-ubyte"
                                                   ".gz"),
                                         "train", 0, &d),
                   TYTO_ERR_NOT_FOUND);
  ck_assert_msg_contains(tyto_errmsg(), "is not a directory");
}
END_TEST

/* Order of one epoch, read through the batcher. */
static void epoch_order(tyto_batcher *b, uint64_t epoch, int64_t *order) {
  ck_assert(tyto_batcher_seek(b, epoch, 0) == TYTO_OK);
  for (int64_t k = 0; k < tyto_batcher_count(b); k++)
    order[k] = tyto_batcher_item(b, k);
}

START_TEST(test_shuffle) {
  tyto_dataset *d = load_set(0);
  tyto_batcher_options o;
  tyto_batcher_options_init(&o);
  o.seed = 42;
  tyto_batcher *b, *b2;
  ck_assert(tyto_batcher_new(d, &o, &b) == TYTO_OK);
  ck_assert(tyto_batcher_new(d, &o, &b2) == TYTO_OK);
  int64_t e0[N_ITEMS], e1[N_ITEMS], again[N_ITEMS];
  epoch_order(b, 0, e0);
  epoch_order(b, 1, e1);
  epoch_order(b2, 0, again);
  ck_assert_mem_eq(e0, again, sizeof e0); /* same seed, same epoch */
  ck_assert(memcmp(e0, e1, sizeof e0) != 0);
  for (int64_t *e = e0; e; e = e == e0 ? e1 : NULL) {
    int seen[N_ITEMS] = {0};
    for (int k = 0; k < N_ITEMS; k++) {
      ck_assert_int_ge(e[k], 0);
      ck_assert_int_lt(e[k], N_ITEMS);
      seen[e[k]]++;
    }
    for (int i = 0; i < N_ITEMS; i++)
      ck_assert_int_eq(seen[i], 1);
  }
  tyto_batcher_free(b2);
  o.seed = 43;
  ck_assert(tyto_batcher_new(d, &o, &b2) == TYTO_OK);
  epoch_order(b2, 0, again);
  ck_assert(memcmp(e0, again, sizeof e0) != 0);
  tyto_batcher_free(b2);
  o.shuffle = 0;
  ck_assert(tyto_batcher_new(d, &o, &b2) == TYTO_OK);
  epoch_order(b2, 5, again);
  for (int k = 0; k < N_ITEMS; k++)
    ck_assert_int_eq(again[k], k);
  tyto_batcher_free(b2);
  tyto_batcher_free(b);
  tyto_dataset_free(d);
}
END_TEST

/* Known values of splitmix64 from state 0 (the reference implementation
 * at prng.di.unimi.it/splitmix64.c), and an unbiased shuffle: each of the
 * 24 orders of 4 items about equally often over 24000 seeds. */
START_TEST(test_shuffle_stream) {
  uint64_t st = 0;
  ck_assert_uint_eq(data_splitmix64(&st), 0xe220a8397b1dcdafu);
  ck_assert_uint_eq(data_splitmix64(&st), 0x6e789e6aa1b965f4u);
  ck_assert_uint_eq(data_splitmix64(&st), 0x06c45d188009454fu);
  int counts[256] = {0};
  for (uint64_t seed = 0; seed < 24000; seed++) {
    int64_t o[4];
    data_shuffle(o, 4, seed, 3);
    counts[o[0] * 64 + o[1] * 16 + o[2] * 4 + o[3]]++;
  }
  int orders = 0;
  for (int i = 0; i < 256; i++) {
    if (!counts[i])
      continue;
    orders++;
    /* 1000 expected, sd about 31: 6 sd either side. */
    ck_assert_msg(counts[i] > 810 && counts[i] < 1190, "order %d seen %d", i,
                  counts[i]);
  }
  ck_assert_int_eq(orders, 24);
}
END_TEST

START_TEST(test_batches) {
  tyto_dataset *d = load_set(0);
  tyto_batcher_options o;
  tyto_batcher_options_init(&o);
  o.batch_size = 4;
  o.seed = 7;
  o.scale = 0.5;
  tyto_batcher *b;
  ck_assert(tyto_batcher_new(d, &o, &b) == TYTO_OK);
  ck_assert_int_eq(tyto_batcher_batches(b), 3);
  ck_assert_int_eq(tyto_batcher_count(b), N_ITEMS);
  float img[4 * 6], lab[4 * 3];
  int64_t filled, total = 0;
  for (int batch = 0; batch < 3; batch++) {
    ck_assert(tyto_batcher_next(b, img, sizeof img, lab, sizeof lab, &filled) ==
              TYTO_OK);
    ck_assert_int_eq(filled, batch < 2 ? 4 : 2);
    for (int k = 0; k < 4; k++) {
      int64_t item = tyto_batcher_item(b, batch * 4 + k);
      for (int j = 0; j < 6; j++)
        ck_assert_float_eq(img[k * 6 + j],
                           k < filled ? (float)(10 * item + j) * 0.5f : 0);
      for (int c = 0; c < 3; c++)
        ck_assert_float_eq(lab[k * 3 + c], k < filled && c == item % 3 ? 1 : 0);
    }
    total += filled;
  }
  ck_assert_int_eq(total, N_ITEMS);
  ck_assert_int_eq(tyto_batcher_epoch(b), 0);
  ck_assert(tyto_batcher_next(b, img, sizeof img, NULL, 0, &filled) == TYTO_OK);
  ck_assert_int_eq(filled, 0);
  ck_assert_int_eq(tyto_batcher_epoch(b), 1);
  ck_assert_int_eq(tyto_batcher_position(b), 0);

  /* A resumed batcher serves the same batch. */
  double first[4 * 6];
  tyto_batcher_options o2 = o;
  o2.dtype = TYTO_F64;
  tyto_batcher *r;
  ck_assert(tyto_batcher_new(d, &o2, &r) == TYTO_OK);
  ck_assert(tyto_batcher_next(b, NULL, 0, NULL, 0, NULL) == TYTO_OK);
  ck_assert(tyto_batcher_next(b, img, sizeof img, NULL, 0, NULL) == TYTO_OK);
  ck_assert(tyto_batcher_seek(r, 1, 1) == TYTO_OK);
  ck_assert(tyto_batcher_next(r, first, sizeof first, NULL, 0, NULL) ==
            TYTO_OK);
  for (int j = 0; j < 24; j++)
    ck_assert_double_eq(first[j], img[j]);
  tyto_batcher_free(r);

  /* Byte counts and positions are checked. */
  ck_assert_int_eq(tyto_batcher_next(b, img, sizeof img - 4, NULL, 0, NULL),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "a batch of 4 images of 6 f32 "
                                        "values needs 96 bytes, got 92");
  ck_assert_int_eq(tyto_batcher_next(b, NULL, 0, lab, 16, NULL),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(),
                         "4 labels (one-hot rows) needs 48 bytes, got 16");
  ck_assert_int_eq(tyto_batcher_seek(b, 0, 4), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "batch 4, expected 0 to 3");
  tyto_batcher_free(b);

  /* Class indices; the partial last batch dropped. */
  o.one_hot = 0;
  o.drop_last = 1;
  o.shuffle = 0;
  ck_assert(tyto_batcher_new(d, &o, &b) == TYTO_OK);
  ck_assert_int_eq(tyto_batcher_batches(b), 2);
  ck_assert_int_eq(tyto_batcher_count(b), 8);
  float idx[4];
  for (int batch = 0; batch < 2; batch++) {
    ck_assert(tyto_batcher_next(b, NULL, 0, idx, sizeof idx, &filled) ==
              TYTO_OK);
    ck_assert_int_eq(filled, 4);
    for (int k = 0; k < 4; k++)
      ck_assert_float_eq(idx[k], (float)((batch * 4 + k) % 3));
  }
  ck_assert(tyto_batcher_next(b, NULL, 0, idx, sizeof idx, &filled) == TYTO_OK);
  ck_assert_int_eq(filled, 0);
  tyto_batcher_free(b);
  tyto_dataset_free(d);
}
END_TEST

START_TEST(test_split) {
  tyto_dataset *d = load_set(0);
  tyto_batcher_options o;
  tyto_batcher_options_init(&o);
  o.count = 7;
  tyto_batcher *train, *val;
  ck_assert(tyto_batcher_new(d, &o, &train) == TYTO_OK);
  o.first = 7;
  o.count = -1;
  ck_assert(tyto_batcher_new(d, &o, &val) == TYTO_OK);
  ck_assert_int_eq(tyto_batcher_count(train), 7);
  ck_assert_int_eq(tyto_batcher_count(val), 3);
  int seen[N_ITEMS] = {0};
  for (int k = 0; k < 7; k++) {
    int64_t i = tyto_batcher_item(train, k);
    ck_assert_int_lt(i, 7);
    seen[i]++;
  }
  for (int k = 0; k < 3; k++) {
    int64_t i = tyto_batcher_item(val, k);
    ck_assert_int_ge(i, 7);
    seen[i]++;
  }
  for (int i = 0; i < N_ITEMS; i++)
    ck_assert_int_eq(seen[i], 1);
  ck_assert_int_eq(tyto_batcher_item(val, 3), -1);
  tyto_batcher_free(train);
  tyto_batcher_free(val);

  tyto_batcher *b = (tyto_batcher *)0x1;
  o.first = 8;
  o.count = 3;
  ck_assert_int_eq(tyto_batcher_new(d, &o, &b), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(b);
  ck_assert_msg_contains(tyto_errmsg(),
                         "items [8, 8 + 3) outside the dataset's 10 items");
  o.first = 0;
  o.batch_size = 0;
  ck_assert_int_eq(tyto_batcher_new(d, &o, &b), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "batch_size 0, expected 1 or more");
  tyto_dataset_free(d);
}
END_TEST

/* Fashion-MNIST, when installed: sizes, shapes, pixel range, and its
 * balanced classes (6000 / 1000 items of each of the 10). */
START_TEST(test_fashion_mnist) {
  const char *dir = getenv("TYTO_FASHION_MNIST");
  if (!dir)
    dir = "/usr/share/datasets/fashion-mnist";
  if (access(dir, R_OK) != 0) {
    printf("fashion-mnist checks skipped: %s not found\n", dir);
    return;
  }
  const char *splits[2] = {"train", "t10k"};
  for (int s = 0; s < 2; s++) {
    tyto_dataset *d;
    ck_assert_msg(tyto_dataset_load_dir(dir, splits[s], 0, &d) == TYTO_OK, "%s",
                  tyto_errmsg());
    int64_t n = tyto_dataset_count(d);
    ck_assert_int_eq(n, s ? 10000 : 60000);
    ck_assert_int_eq(tyto_dataset_item_rank(d), 2);
    ck_assert_int_eq(tyto_dataset_item_shape(d)[0], 28);
    ck_assert_int_eq(tyto_dataset_item_shape(d)[1], 28);
    ck_assert_int_eq(tyto_dataset_classes(d), 10);
    int64_t hist[10] = {0}, sum = 0;
    for (int64_t i = 0; i < n; i++)
      hist[tyto_dataset_label(d, i)]++;
    for (int c = 0; c < 10; c++) {
      ck_assert_int_eq(hist[c], n / 10);
      sum += hist[c];
    }
    ck_assert_int_eq(sum, n);
    static float px[1000 * 784];
    ck_assert(tyto_dataset_read_images(d, 0, 1000, TYTO_F32, 1, px,
                                       sizeof px) == TYTO_OK);
    float lo = 255, hi = 0;
    for (size_t i = 0; i < 1000 * 784; i++) {
      lo = px[i] < lo ? px[i] : lo;
      hi = px[i] > hi ? px[i] : hi;
    }
    ck_assert_float_eq(lo, 0);
    ck_assert_float_eq(hi, 255);
    tyto_dataset_free(d);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("dataset");
  TCase *tc = tcase_create("dataset");
  tcase_add_checked_fixture(tc, data_setup, data_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_load);
  tcase_add_test(tc, test_load_errors);
  tcase_add_test(tc, test_load_dir);
  tcase_add_test(tc, test_shuffle);
  tcase_add_test(tc, test_shuffle_stream);
  tcase_add_test(tc, test_batches);
  tcase_add_test(tc, test_split);
  tcase_add_test(tc, test_fashion_mnist);
  suite_add_tcase(s, tc);
  return test_run(s);
}
