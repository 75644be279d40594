/* The IDX reader: every type code read back exactly from plain and gzip
 * files (big-endian conversion, scale, ranges), and every malformed input
 * refused with a message that says what was expected and what was found. */
#include "data/data_test.h"

#include <math.h>
#include <sys/stat.h>

/* One type's test values, as doubles and as their big-endian bytes. */
typedef struct {
  int code;
  const char *name;
  size_t esize;
  double v[6];
} typed_values;

static const typed_values cases[] = {
    {0x08, "u8", 1, {0, 1, 127, 128, 254, 255}},
    {0x09, "i8", 1, {0, 1, 127, -128, -2, -1}},
    {0x0B, "i16", 2, {-32768, -1, 0, 1, 258, 32767}},
    {0x0C, "i32", 4, {-2147483648.0, -1, 0, 1, 16909060, 2147483647}},
    {0x0D, "f32", 4, {1.5, -2.25, 0, 3.0517578125e-05, 1e30, -0.0}},
    {0x0E, "f64", 8, {0.1, -1e300, 0, 1.0 / 3, 5e-324, -7.0}},
};

/* Big-endian bytes of v as the IDX type `code`, written independently of
 * the reader (shifts of the integer or the float's bits). */
static void encode(int code, double v, unsigned char *p) {
  uint64_t u;
  size_t n;
  switch (code) {
  case 0x08:
  case 0x09: p[0] = (unsigned char)(int)v; return;
  case 0x0B: u = (uint16_t)(int16_t)v, n = 2; break;
  case 0x0C: u = (uint32_t)(int32_t)v, n = 4; break;
  case 0x0D: {
    float f = (float)v;
    uint32_t w;
    memcpy(&w, &f, 4);
    u = w, n = 4;
    break;
  }
  default: memcpy(&u, &v, 8), n = 8;
  }
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(u >> (8 * (n - 1 - i)));
}

START_TEST(test_every_type) {
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const typed_values *t = &cases[c];
    unsigned char data[48], buf[128];
    for (int i = 0; i < 6; i++)
      encode(t->code, t->v[i], data + (size_t)i * t->esize);
    uint32_t dims[2] = {3, 2};
    size_t n = test_idx_bytes(buf, t->code, 2, dims, data, 6 * t->esize);
    for (int gz = 0; gz < 2; gz++) {
      char name[32];
      snprintf(name, sizeof name, "%s%s", t->name, gz ? ".gz" : "");
      const char *path = test_write_bytes(name, buf, n, gz);
      tyto_idx *x;
      ck_assert_msg(tyto_idx_load(path, &x) == TYTO_OK, "%s", tyto_errmsg());
      ck_assert_int_eq(tyto_idx_rank(x), 2);
      ck_assert_int_eq(tyto_idx_shape(x)[0], 3);
      ck_assert_int_eq(tyto_idx_shape(x)[1], 2);
      ck_assert_int_eq(tyto_idx_count(x), 3);
      ck_assert_int_eq(tyto_idx_elem_type(x), t->code);
      ck_assert_str_eq(tyto_idx_type_name(tyto_idx_elem_type(x)), t->name);
      double d[6];
      ck_assert(tyto_idx_read(x, 0, 3, TYTO_F64, 1, d, sizeof d) == TYTO_OK);
      for (int i = 0; i < 6; i++) {
        double want = t->code == 0x0D ? (double)(float)t->v[i] : t->v[i];
        ck_assert_msg(d[i] == want && signbit(d[i]) == signbit(want),
                      "%s[%d]: %.17g, expected %.17g", t->name, i, d[i], want);
      }
      /* f32 output with a scale: items 1..2 only. */
      float f[4];
      ck_assert(tyto_idx_read(x, 1, 2, TYTO_F32, 0.5, f, sizeof f) == TYTO_OK);
      for (int i = 0; i < 4; i++)
        ck_assert_float_eq(f[i], (float)(t->v[2 + i] * 0.5));
      tyto_idx_free(x);
    }
  }
}
END_TEST

START_TEST(test_rank1_and_empty) {
  unsigned char v[5] = {9, 8, 7, 6, 5};
  uint32_t d1[1] = {5};
  tyto_idx *x;
  ck_assert(tyto_idx_load(test_write_u8("r1", 1, d1, v, 5, 0), &x) == TYTO_OK);
  float f[5];
  ck_assert(tyto_idx_read(x, 0, 5, TYTO_F32, 1, f, sizeof f) == TYTO_OK);
  ck_assert_float_eq(f[4], 5);
  tyto_idx_free(x);

  /* No items: a valid, empty file. */
  uint32_t d0[2] = {0, 28};
  ck_assert(tyto_idx_load(test_write_u8("r0", 2, d0, NULL, 0, 1), &x) ==
            TYTO_OK);
  ck_assert_int_eq(tyto_idx_count(x), 0);
  ck_assert(tyto_idx_read(x, 0, 0, TYTO_F32, 1, NULL, 0) == TYTO_OK);
  tyto_idx_free(x);

  /* Rank 8, the largest. */
  uint32_t d8[8] = {1, 1, 2, 1, 1, 1, 1, 1};
  ck_assert(tyto_idx_load(test_write_u8("r8", 8, d8, v, 2, 0), &x) == TYTO_OK);
  ck_assert_int_eq(tyto_idx_rank(x), 8);
  ck_assert_int_eq(tyto_idx_shape(x)[2], 2);
  tyto_idx_free(x);
}
END_TEST

START_TEST(test_gz_fallback) {
  unsigned char v[4] = {1, 2, 3, 4};
  uint32_t dims[2] = {2, 2};
  test_write_u8("only-gz.gz", 2, dims, v, 4, 1);
  tyto_idx *x;
  ck_assert_msg(tyto_idx_load(test_path("only-gz"), &x) == TYTO_OK, "%s",
                tyto_errmsg());
  double d[4];
  ck_assert(tyto_idx_read(x, 0, 2, TYTO_F64, 1, d, sizeof d) == TYTO_OK);
  ck_assert_double_eq(d[3], 4);
  tyto_idx_free(x);
  /* A gzip file without the suffix is recognised by its content. */
  ck_assert(tyto_idx_load(test_write_u8("no-suffix", 2, dims, v, 4, 1), &x) ==
            TYTO_OK);
  tyto_idx_free(x);
}
END_TEST

START_TEST(test_read_errors) {
  unsigned char v[6] = {1, 2, 3, 4, 5, 6};
  uint32_t dims[2] = {3, 2};
  tyto_idx *x;
  ck_assert(tyto_idx_load(test_write_u8("a", 2, dims, v, 6, 0), &x) == TYTO_OK);
  float f[6];
  ck_assert_int_eq(tyto_idx_read(x, 2, 2, TYTO_F32, 1, f, 8 * 4),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "items [2, 2 + 2) outside the "
                                        "file's 3 items");
  ck_assert_int_eq(tyto_idx_read(x, -1, 1, TYTO_F32, 1, f, 8),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(tyto_idx_read(x, 0, 3, TYTO_F32, 1, f, 20),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(),
                         "3 items of 2 f32 values need 24 bytes, got 20");
  ck_assert_int_eq(tyto_idx_read(x, 0, 3, (tyto_dtype)7, 1, f, 24),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "unknown dtype 7");
  tyto_idx_free(x);
}
END_TEST

START_TEST(test_missing) {
  const char *p = test_path("nothing");
  check_idx_fails(p, TYTO_ERR_NOT_FOUND, "no such file");
  char want[600];
  snprintf(want, sizeof want, "looked for %s and %s.gz", p, p);
  ck_assert_msg_contains(tyto_errmsg(), want);
  check_idx_fails(test_path("nothing.gz"), TYTO_ERR_NOT_FOUND,
                  "nothing.gz: no such file");
  check_idx_fails(test_dir, TYTO_ERR_INVALID_ARGUMENT,
                  "is a directory, not a regular file, expected an IDX file");
  /* a FIFO with no writer is refused at once, not waited on */
  const char *fifo = test_path("fifo-idx3-ubyte");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  check_idx_fails(fifo, TYTO_ERR_INVALID_ARGUMENT,
                  "is a FIFO, not a regular file, expected an IDX file");
  unlink(fifo);
  check_idx_fails("", TYTO_ERR_INVALID_ARGUMENT, "no path given");
}
END_TEST

START_TEST(test_bad_header) {
  unsigned char buf[64];
  uint32_t dims[2] = {1, 1};
  unsigned char one = 7;

  unsigned char bad[8] = {0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1};
  check_idx_fails(test_write_bytes("magic", bad, 8, 0),
                  TYTO_ERR_INVALID_ARGUMENT, "bad magic 0x12345678 (expected");
  ck_assert_msg_contains(tyto_errmsg(), "magic: bad magic");

  size_t n = test_idx_bytes(buf, 0x0A, 2, dims, &one, 1);
  check_idx_fails(test_write_bytes("type", buf, n, 0),
                  TYTO_ERR_INVALID_ARGUMENT, "bad magic 0x00000a02");
  ck_assert_msg_contains(tyto_errmsg(), "0D f32 or 0E f64");

  n = test_idx_bytes(buf, 0x08, 0, dims, &one, 1);
  check_idx_fails(test_write_bytes("rank0", buf, n, 1),
                  TYTO_ERR_INVALID_ARGUMENT, "bad magic 0x00000800");
  ck_assert_msg_contains(tyto_errmsg(), "rank RR of 01 to 08");

  uint32_t dims9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  n = test_idx_bytes(buf, 0x08, 9, dims9, &one, 1);
  check_idx_fails(test_write_bytes("rank9", buf, n, 0),
                  TYTO_ERR_INVALID_ARGUMENT, "bad magic 0x00000809");

  check_idx_fails(test_write_bytes("empty", buf, 0, 0),
                  TYTO_ERR_INVALID_ARGUMENT,
                  "file is 0 bytes, shorter than the 4-byte magic");
  check_idx_fails(test_write_bytes("two", buf, 2, 1), TYTO_ERR_INVALID_ARGUMENT,
                  "file is 2 bytes");

  /* Rank 3 announces 12 bytes of dims; only 8 follow. */
  uint32_t dims3[2] = {2, 2};
  n = test_idx_bytes(buf, 0x08, 2, dims3, NULL, 0);
  buf[3] = 3;
  check_idx_fails(test_write_bytes("short-head", buf, n, 0),
                  TYTO_ERR_INVALID_ARGUMENT,
                  "header shorter than its dims: rank 3 needs 16 header "
                  "bytes, the file has 12");
}
END_TEST

START_TEST(test_bad_size) {
  unsigned char v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint32_t dims[2] = {2, 3};
  for (int gz = 0; gz < 2; gz++) {
    check_idx_fails(test_write_u8(gz ? "trunc.gz" : "trunc", 2, dims, v, 5, gz),
                    TYTO_ERR_INVALID_ARGUMENT,
                    "truncated: the header's dims (2x3 u8) need 6 data "
                    "bytes, found 5");
    check_idx_fails(test_write_u8(gz ? "long.gz" : "long", 2, dims, v, 8, gz),
                    TYTO_ERR_INVALID_ARGUMENT,
                    "2 trailing bytes: the header's dims (2x3 u8) need 6 "
                    "data bytes, found 8");
  }
  /* i16 counts bytes, not elements. */
  unsigned char buf[64];
  size_t n = test_idx_bytes(buf, 0x0B, 2, dims, v, 8);
  check_idx_fails(test_write_bytes("i16", buf, n, 0), TYTO_ERR_INVALID_ARGUMENT,
                  "(2x3 i16) need 12 data bytes, found 8");
  /* Dims whose product overflows, with or without an item count of 0. */
  uint32_t huge[8] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
                      0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  check_idx_fails(test_write_u8("huge", 8, huge, v, 8, 0),
                  TYTO_ERR_INVALID_ARGUMENT, "more bytes than fit in memory");
  huge[0] = 0;
  check_idx_fails(test_write_u8("huge0", 8, huge, NULL, 0, 0),
                  TYTO_ERR_INVALID_ARGUMENT, "more bytes than fit in memory");
  /* Large dims, few bytes: refused without reserving the claimed size. */
  uint32_t big[2] = {60000, 0x10000};
  check_idx_fails(test_write_u8("big", 2, big, v, 8, 0),
                  TYTO_ERR_INVALID_ARGUMENT,
                  "need 3932160000 data bytes, found 8");
}
END_TEST

START_TEST(test_corrupt_gz) {
  /* A gzip stream cut short: zlib's reason, as an I/O error. */
  unsigned char v[600];
  for (int i = 0; i < 600; i++)
    v[i] = (unsigned char)(i * 37);
  uint32_t dims[2] = {20, 30};
  const char *p = test_write_u8("cut.gz", 2, dims, v, 600, 1);
  FILE *f = fopen(p, "rb");
  ck_assert_ptr_nonnull(f);
  unsigned char buf[2048];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  ck_assert_uint_gt(n, 40);
  check_idx_fails(test_write_bytes("cut2.gz", buf, n - 12, 0), TYTO_ERR_IO,
                  "cut2.gz: read failed: ");
}
END_TEST

int main(void) {
  Suite *s = suite_create("idx");
  TCase *tc = tcase_create("idx");
  tcase_add_checked_fixture(tc, data_setup, data_teardown);
  tcase_add_test(tc, test_every_type);
  tcase_add_test(tc, test_rank1_and_empty);
  tcase_add_test(tc, test_gz_fallback);
  tcase_add_test(tc, test_read_errors);
  tcase_add_test(tc, test_missing);
  tcase_add_test(tc, test_bad_header);
  tcase_add_test(tc, test_bad_size);
  tcase_add_test(tc, test_corrupt_gz);
  suite_add_tcase(s, tc);
  return test_run(s);
}
