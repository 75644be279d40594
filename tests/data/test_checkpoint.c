/* Checkpoints in the safetensors format: round trips, a byte-exact file
 * computed by hand, files written by other tools' rules, every malformed
 * file with its message, atomic saving (writers that fail or go past the
 * file-size limit), the model check and the parameters of a compiled program.
 */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static void setup(void) {
  test_dir_make(dir, "ckpt");
}

static void teardown(void) {
  test_dir_remove(dir);
}

static const char *in_dir(const char *name) {
  return test_dir_path(dir, name);
}

static size_t dir_entries(void) {
  return test_dir_count(dir);
}

/* The whole file in a malloc'd buffer. */
static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  unsigned char *buf = malloc(1 << 20);
  *len = fread(buf, 1, 1 << 20, f);
  fclose(f);
  return buf;
}

static void write_bytes(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, len, f), len);
  fclose(f);
}

#define OK(call) ck_assert_msg((call) == TYTO_OK, "%s", tyto_errmsg())

static void expect_error(tyto_status st, tyto_status want, const char *msg) {
  ck_assert_msg(st == want, "status %s, expected %s (%s)", tyto_status_name(st),
                tyto_status_name(want), tyto_errmsg());
  ck_assert_msg_contains(tyto_errmsg(), msg);
}

START_TEST(test_round_trip) {
  tyto_checkpoint *ck;
  OK(tyto_checkpoint_new(&ck));
  float w[6] = {1.5f, -2, 3, 0.25f, -0.0f, 1e-30f};
  double s = 3.141592653589793;
  int64_t step = -42;
  uint64_t rng[2] = {0xdeadbeefcafef00dULL, UINT64_MAX};
  char longname[301];
  memset(longname, 'n', 300);
  longname[300] = '\0';
  OK(tyto_checkpoint_add(ck, "fc1.w", TYTO_CHECKPOINT_F32, 2, (int64_t[]){2, 3},
                         w));
  OK(tyto_checkpoint_add(ck, "scale", TYTO_CHECKPOINT_F64, 0, NULL, &s));
  OK(tyto_checkpoint_add(ck, "empty", TYTO_CHECKPOINT_F32, 2, (int64_t[]){0, 5},
                         NULL));
  OK(tyto_checkpoint_add(ck, longname, TYTO_CHECKPOINT_F32, 1, (int64_t[]){1},
                         w));
  OK(tyto_checkpoint_add(ck, "step", TYTO_CHECKPOINT_I64, 0, NULL, &step));
  OK(tyto_checkpoint_add(ck, "rng", TYTO_CHECKPOINT_U64, 1, (int64_t[]){2},
                         rng));
  OK(tyto_checkpoint_set_meta(ck, "model", "{\"layers\":[784,10]}"));
  OK(tyto_checkpoint_set_meta(ck, "format", "pt"));
  OK(tyto_checkpoint_set_meta(ck, "model", "mlp \xc3\xa9")); /* replaces */
  const char *path = in_dir("a.safetensors");
  OK(tyto_checkpoint_save(ck, path));
  tyto_checkpoint_free(ck);
  ck_assert_uint_eq(dir_entries(), 1); /* no temporary left */

  OK(tyto_checkpoint_load(path, &ck));
  ck_assert_uint_eq(tyto_checkpoint_count(ck), 6);
  const char *names[] = {"fc1.w", "scale", "empty", longname, "step", "rng"};
  for (size_t i = 0; i < 6; i++)
    ck_assert_str_eq(tyto_checkpoint_name(ck, i), names[i]);
  ck_assert_ptr_null(tyto_checkpoint_name(ck, 6));
  tyto_checkpoint_dtype dt;
  int rank;
  const int64_t *shape;
  const void *data;
  size_t bytes;
  OK(tyto_checkpoint_find(ck, "fc1.w", &dt, &rank, &shape, &data, &bytes));
  ck_assert_int_eq(dt, TYTO_CHECKPOINT_F32);
  ck_assert_int_eq(rank, 2);
  ck_assert_int_eq(shape[0], 2);
  ck_assert_int_eq(shape[1], 3);
  ck_assert_uint_eq(bytes, sizeof w);
  ck_assert_mem_eq(data, w, sizeof w);
  OK(tyto_checkpoint_find(ck, "scale", &dt, &rank, NULL, &data, &bytes));
  ck_assert_int_eq(dt, TYTO_CHECKPOINT_F64);
  ck_assert_int_eq(rank, 0);
  ck_assert_uint_eq(bytes, 8);
  ck_assert_double_eq(*(const double *)data, s);
  OK(tyto_checkpoint_find(ck, "empty", &dt, &rank, &shape, NULL, &bytes));
  ck_assert_int_eq(rank, 2);
  ck_assert_int_eq(shape[0], 0);
  ck_assert_int_eq(shape[1], 5);
  ck_assert_uint_eq(bytes, 0);
  OK(tyto_checkpoint_find(ck, longname, NULL, NULL, NULL, &data, &bytes));
  ck_assert_uint_eq(bytes, 4);
  ck_assert_float_eq(*(const float *)data, 1.5f);
  OK(tyto_checkpoint_find(ck, "step", &dt, NULL, NULL, &data, NULL));
  ck_assert_int_eq(dt, TYTO_CHECKPOINT_I64);
  ck_assert_int_eq(*(const int64_t *)data, -42);
  OK(tyto_checkpoint_find(ck, "rng", &dt, NULL, NULL, &data, NULL));
  ck_assert_int_eq(dt, TYTO_CHECKPOINT_U64);
  ck_assert_mem_eq(data, rng, sizeof rng);
  ck_assert_uint_eq(tyto_checkpoint_meta_count(ck), 2);
  ck_assert_str_eq(tyto_checkpoint_meta_key(ck, 0), "model");
  ck_assert_str_eq(tyto_checkpoint_meta_key(ck, 1), "format");
  ck_assert_ptr_null(tyto_checkpoint_meta_key(ck, 2));
  ck_assert_str_eq(tyto_checkpoint_get_meta(ck, "model"), "mlp \xc3\xa9");
  ck_assert_str_eq(tyto_checkpoint_get_meta(ck, "format"), "pt");
  ck_assert_ptr_null(tyto_checkpoint_get_meta(ck, "nope"));
  expect_error(tyto_checkpoint_find(ck, "fc2.w", NULL, NULL, NULL, NULL, NULL),
               TYTO_ERR_NOT_FOUND, "no tensor 'fc2.w' in checkpoint '");
  ck_assert_msg_contains(tyto_errmsg(), "a.safetensors'");

  /* saved again, the same bytes */
  size_t len1, len2;
  unsigned char *b1 = slurp(path, &len1);
  const char *path2 = in_dir("b.safetensors");
  OK(tyto_checkpoint_save(ck, path2));
  unsigned char *b2 = slurp(path2, &len2);
  ck_assert_uint_eq(len1, len2);
  ck_assert_mem_eq(b1, b2, len1);
  free(b1);
  free(b2);
  tyto_checkpoint_free(ck);
}
END_TEST

/* The file as the format's description gives it, computed by hand: the
 * header is 193 bytes of JSON padded with 7 spaces to 200 (0xc8). */
static const char exact_header[] =
    "{\"__metadata__\":{\"model\":\"mlp\"},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[8,8]},"
    "\"b\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[8,16]}}"
    "       ";
static const unsigned char exact_data[16] = {
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, /* 1.0f, 2.0f */
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xe0, 0x3f  /* 0.5 */
};

START_TEST(test_byte_exact) {
  ck_assert_uint_eq(sizeof exact_header - 1, 200);
  tyto_checkpoint *ck;
  OK(tyto_checkpoint_new(&ck));
  OK(tyto_checkpoint_add(ck, "a", TYTO_CHECKPOINT_F32, 1, (int64_t[]){2},
                         (float[]){1, 2}));
  OK(tyto_checkpoint_add(ck, "e", TYTO_CHECKPOINT_F32, 2, (int64_t[]){0, 3},
                         NULL));
  OK(tyto_checkpoint_add(ck, "b", TYTO_CHECKPOINT_F64, 0, NULL,
                         (double[]){0.5}));
  OK(tyto_checkpoint_set_meta(ck, "model", "mlp"));
  const char *path = in_dir("exact.safetensors");
  OK(tyto_checkpoint_save(ck, path));
  tyto_checkpoint_free(ck);
  size_t len;
  unsigned char *got = slurp(path, &len);
  ck_assert_uint_eq(len, 8 + 200 + 16);
  static const unsigned char size[8] = {0xc8, 0, 0, 0, 0, 0, 0, 0};
  ck_assert_mem_eq(got, size, 8);
  ck_assert_msg(memcmp(got + 8, exact_header, 200) == 0, "header:\n%.*s", 200,
                (const char *)got + 8);
  ck_assert_mem_eq(got + 208, exact_data, 16);
  free(got);
}
END_TEST

/* Builds 8-byte size + header + data in buf; returns the length. */
static size_t make_file(unsigned char *buf, const char *header,
                        const void *data, size_t data_len) {
  size_t n = strlen(header);
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, header, n);
  if (data_len)
    memcpy(buf + 8 + n, data, data_len);
  return 8 + n + data_len;
}

/* f16 and bf16 as PyTorch's safetensors writes them: "F16" and "BF16" in
 * the header, 2-byte little-endian patterns in the data. The bytes are
 * written here by hand: f16 1, -2, 0.1 (0x3c00, 0xc000, 0x2e66) and bf16
 * 1, pi, -inf, 0.1 (0x3f80, 0x4049, 0xff80, 0x3dcd). */
START_TEST(test_half_formats) {
  static const unsigned char half_data[14] = {
      0x00, 0x3c, 0x00, 0xc0, 0x66, 0x2e,              /* h, F16 */
      0x80, 0x3f, 0x49, 0x40, 0x80, 0xff, 0xcd, 0x3d}; /* b, BF16 */
  static const uint16_t h_want[3] = {0x3c00, 0xc000, 0x2e66};
  static const uint16_t b_want[4] = {0x3f80, 0x4049, 0xff80, 0x3dcd};
  /* Padded with spaces to a multiple of 8, as PyTorch does. */
  const char *header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[6,14]},"
      "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}  ";
  ck_assert_uint_eq(strlen(header) % 8, 0);
  unsigned char buf[512];
  size_t len = make_file(buf, header, half_data, sizeof half_data);
  const char *path = in_dir("torch-half.safetensors");
  write_bytes(path, buf, len);
  for (int pass = 0; pass < 2; pass++) {
    tyto_checkpoint *ck;
    OK(tyto_checkpoint_load(path, &ck));
    ck_assert_uint_eq(tyto_checkpoint_count(ck), 2);
    tyto_checkpoint_dtype dt;
    int rank;
    const int64_t *shape;
    const void *data;
    size_t bytes;
    OK(tyto_checkpoint_find(ck, "h", &dt, &rank, &shape, &data, &bytes));
    ck_assert_int_eq(dt, TYTO_CHECKPOINT_F16);
    ck_assert_int_eq(dt, tyto_checkpoint_dtype_of(TYTO_F16));
    ck_assert_int_eq(rank, 1);
    ck_assert_int_eq(shape[0], 3);
    ck_assert_uint_eq(bytes, 6);
    ck_assert_mem_eq(data, h_want, 6);
    OK(tyto_checkpoint_find(ck, "b", &dt, &rank, &shape, &data, &bytes));
    ck_assert_int_eq(dt, TYTO_CHECKPOINT_BF16);
    ck_assert_int_eq(dt, tyto_checkpoint_dtype_of(TYTO_BF16));
    ck_assert_int_eq(rank, 2);
    ck_assert_uint_eq(bytes, 8);
    ck_assert_mem_eq(data, b_want, 8);

    /* A model that wants them in f32 is told the file's dtype. */
    tyto_checkpoint_spec spec = {"b", TYTO_CHECKPOINT_F32, 2,
                                 (int64_t[]){2, 2}};
    expect_error(
        tyto_checkpoint_expect(ck, 1, &spec, TYTO_CHECKPOINT_ALLOW_EXTRA),
        TYTO_ERR_INVALID_ARGUMENT,
        "'b' is bf16[2,2] in the file, f32[2,2] here");
    if (pass == 0) {
      /* tyto writes them back under the same names and bytes. */
      path = in_dir("tyto-half.safetensors");
      OK(tyto_checkpoint_save(ck, path));
      size_t n;
      unsigned char *got = slurp(path, &n);
      uint64_t hl = 0;
      for (int i = 0; i < 8; i++)
        hl |= (uint64_t)got[i] << (8 * i);
      ck_assert_uint_eq(n, 8 + hl + 14);
      ck_assert_ptr_nonnull(strstr((const char *)got + 8,
                                   "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],"
                                   "\"data_offsets\":[0,8]}"));
      ck_assert_ptr_nonnull(strstr((const char *)got + 8,
                                   "\"h\":{\"dtype\":\"F16\",\"shape\":[3],"
                                   "\"data_offsets\":[8,14]}"));
      ck_assert_mem_eq(got + 8 + hl, half_data + 6, 8);
      ck_assert_mem_eq(got + 8 + hl + 8, half_data, 6);
      free(got);
    }
    tyto_checkpoint_free(ck);
  }
}
END_TEST

/* i32 and i64 tensors as PyTorch writes them (I32, I64, little-endian):
 * read with their graph dtypes and written back under the same names. */
START_TEST(test_integer_formats) {
  static const unsigned char int_data[24] = {
      0xff, 0xff, 0xff, 0x7f, 0x00, 0x00, 0x00, 0x80,  /* i32 max, min */
      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00,  /* i64 2^53 + 1 */
      0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}; /* i64 -2 */
  const char *header =
      "{\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"l\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[8,24]}}";
  char padded[256];
  snprintf(padded, sizeof padded, "%-*s", (int)((strlen(header) + 7) / 8 * 8),
           header);
  unsigned char buf[512];
  size_t len = make_file(buf, padded, int_data, sizeof int_data);
  const char *path = in_dir("torch-int.safetensors");
  write_bytes(path, buf, len);
  tyto_checkpoint *ck;
  OK(tyto_checkpoint_load(path, &ck));
  tyto_checkpoint_dtype dt;
  int rank;
  const int64_t *shape;
  const void *data;
  size_t bytes;
  OK(tyto_checkpoint_find(ck, "i", &dt, &rank, &shape, &data, &bytes));
  ck_assert_int_eq(dt, TYTO_CHECKPOINT_I32);
  ck_assert_int_eq(dt, tyto_checkpoint_dtype_of(TYTO_I32));
  ck_assert_uint_eq(bytes, 8);
  ck_assert_mem_eq(data, int_data, 8);
  OK(tyto_checkpoint_find(ck, "l", &dt, &rank, &shape, &data, &bytes));
  ck_assert_int_eq(dt, TYTO_CHECKPOINT_I64);
  ck_assert_int_eq(dt, tyto_checkpoint_dtype_of(TYTO_I64));
  ck_assert_mem_eq(data, int_data + 8, 16);
  path = in_dir("tyto-int.safetensors");
  OK(tyto_checkpoint_save(ck, path));
  tyto_checkpoint_free(ck);
  size_t n;
  unsigned char *got = slurp(path, &n);
  ck_assert_ptr_nonnull(strstr((const char *)got + 8, "\"dtype\":\"I32\""));
  ck_assert_ptr_nonnull(strstr((const char *)got + 8, "\"dtype\":\"I64\""));
  ck_assert_mem_eq(got + n - 24, int_data, 24);
  free(got);
}
END_TEST

START_TEST(test_other_writers) {
  /* Tensors in another order than their offsets, metadata last, spaces
   * inside and a padding that is not ours (the reference writer pads to
   * 8; any JSON whitespace is allowed). */
  const char *header =
      "{ \"b\": {\"data_offsets\": [8, 16], \"shape\": [], \"dtype\": "
      "\"F64\"},\n  \"a\": {\"shape\": [2], \"dtype\": \"F32\", "
      "\"data_offsets\": [0, 8]}, \"__metadata__\": {\"format\": \"pt\"}}  "
      "   ";
  unsigned char buf[512];
  size_t len = make_file(buf, header, exact_data, 16);
  const char *path = in_dir("other.safetensors");
  write_bytes(path, buf, len);
  tyto_checkpoint *ck;
  OK(tyto_checkpoint_load(path, &ck));
  ck_assert_uint_eq(tyto_checkpoint_count(ck), 2);
  ck_assert_str_eq(tyto_checkpoint_name(ck, 0), "b");
  const void *data;
  OK(tyto_checkpoint_find(ck, "a", NULL, NULL, NULL, &data, NULL));
  ck_assert_float_eq(((const float *)data)[0], 1);
  ck_assert_float_eq(((const float *)data)[1], 2);
  OK(tyto_checkpoint_find(ck, "b", NULL, NULL, NULL, &data, NULL));
  ck_assert_double_eq(*(const double *)data, 0.5);
  ck_assert_str_eq(tyto_checkpoint_get_meta(ck, "format"), "pt");
  tyto_checkpoint_free(ck);

  /* the same from memory */
  OK(tyto_checkpoint_parse(buf, len, "mem", &ck));
  ck_assert_uint_eq(tyto_checkpoint_count(ck), 2);
  tyto_checkpoint_free(ck);
}
END_TEST

typedef struct bad_case {
  const char *header; /* NULL: raw bytes below */
  size_t data_len;
  const char *message;
} bad_case;

static const bad_case bad_cases[] = {
    {"[1, 2]", 0,
     "header is an array, expected a JSON "
     "object"},
    {"{\"a\":", 0, "header is not valid JSON: "},
    {"", 0, "header is not valid JSON"},
    {"{\"w\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
     "tensor 'w': dtype \"I8\" is not supported (tyto reads F32, F64, F16, "
     "BF16, I32, I64 and U64)"},
    {"{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24,
     "tensor 'w': bf16[2,3] needs 12 bytes, data_offsets [0, 24] hold 24"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
     "tensor 'w': f32[2,3] needs 24 bytes, data_offsets "
     "[0, 20] hold 20"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     12, "tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a' ([0, 8])"},
    {"{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
     12,
     "gap: bytes [4, 8) of the data belong to no tensor (before tensor "
     "'b')"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
     "trailing bytes: the tensors end at byte 4 of the data but it holds 8 "
     "bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, "header is not valid JSON: duplicate object key"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
     "tensor 'a': data_offsets [0, 8] run past the end of the data (4 bytes)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0,
     "tensor 'a': extent 0 of the shape is not a non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
     "\"data_offsets\":[0,4]}}",
     4, "tensor 'a': rank 9 is over tyto's limit of 8"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4,
     "tensor 'a': data_offsets must be [begin, end] with 0 <= begin <= end"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0,
     "tensor 'a' lacks its "
     "data_offsets"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
     "\"x\":1}}",
     4, "tensor 'a' has an unknown field 'x'"},
    {"{\"a\":[]}", 0, "tensor 'a' is an array, expected an object"},
    {"{\"__metadata__\":{\"k\":1}}", 0,
     "metadata 'k' is an integer, "
     "expected a string"},
    {"{\"__metadata__\":[]}", 0, "\"__metadata__\" is an array"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
     "\"data_offsets\":[0,4]}}",
     4, "tensor 'a': f32[4294967296,4294967296] is too large"},
};

START_TEST(test_bad_files) {
  static unsigned char buf[1024];
  static const unsigned char zeros[64];
  const bad_case *c = &bad_cases[_i];
  size_t len = make_file(buf, c->header, zeros, c->data_len);
  tyto_checkpoint *ck = (tyto_checkpoint *)&ck;
  char want[1024];
  snprintf(want, sizeof want, "tyto_checkpoint_parse: 'bad.safetensors': %s",
           c->message);
  expect_error(tyto_checkpoint_parse(buf, len, "bad.safetensors", &ck),
               TYTO_ERR_INVALID_ARGUMENT, want);
  ck_assert_ptr_null(ck);
  /* the same through a file: the message names it */
  const char *path = in_dir("bad.safetensors");
  write_bytes(path, buf, len);
  snprintf(want, sizeof want, "tyto_checkpoint_load: '%s': %s", path,
           c->message);
  expect_error(tyto_checkpoint_load(path, &ck), TYTO_ERR_INVALID_ARGUMENT,
               want);
}
END_TEST

START_TEST(test_bad_sizes) {
  tyto_checkpoint *ck;
  expect_error(tyto_checkpoint_parse("\x10\x00\x00", 3, "t.st", &ck),
               TYTO_ERR_INVALID_ARGUMENT,
               "tyto_checkpoint_parse: 't.st': truncated header: the file is 3 "
               "bytes, too short for the 8-byte header size");
  unsigned char buf[18] = {0xe8, 0x03}; /* 1000, then 10 bytes */
  memcpy(buf + 8, "{}        ", 10);
  expect_error(tyto_checkpoint_parse(buf, sizeof buf, "t.st", &ck),
               TYTO_ERR_INVALID_ARGUMENT,
               "'t.st': header size 1000 runs past the end of the file (10 "
               "bytes after the size)");
  memset(buf, 0xff, 8);
  expect_error(tyto_checkpoint_parse(buf, sizeof buf, NULL, &ck),
               TYTO_ERR_INVALID_ARGUMENT,
               "'(memory)': header size "
               "18446744073709551615 runs past");
  /* the smallest valid file: no tensors */
  buf[0] = 2;
  memset(buf + 1, 0, 7);
  OK(tyto_checkpoint_parse(buf, 10, NULL, &ck));
  ck_assert_uint_eq(tyto_checkpoint_count(ck), 0);
  tyto_checkpoint_free(ck);
  expect_error(tyto_checkpoint_load(in_dir("none.safetensors"), &ck),
               TYTO_ERR_NOT_FOUND, "cannot read '");
  expect_error(tyto_checkpoint_load(dir, &ck), TYTO_ERR_IO,
               "is a directory, not a regular file");
  /* A FIFO with no writer is refused at once, not waited on. */
  const char *fifo = in_dir("fifo.safetensors");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  expect_error(tyto_checkpoint_load(fifo, &ck), TYTO_ERR_IO,
               "is a FIFO, not a regular file");
  unlink(fifo);
}
END_TEST

START_TEST(test_add_errors) {
  tyto_checkpoint *ck;
  OK(tyto_checkpoint_new(&ck));
  float v[2] = {0};
  OK(tyto_checkpoint_add(ck, "w", TYTO_CHECKPOINT_F32, 1, (int64_t[]){2}, v));
  expect_error(
      tyto_checkpoint_add(ck, "w", TYTO_CHECKPOINT_F64, 0, NULL, v),
      TYTO_ERR_INVALID_ARGUMENT,
      "tyto_checkpoint_add: tensor name 'w' is already in the checkpoint");
  expect_error(tyto_checkpoint_add(ck, "", TYTO_CHECKPOINT_F32, 0, NULL, v),
               TYTO_ERR_INVALID_ARGUMENT, "tensor name '' is empty");
  expect_error(
      tyto_checkpoint_add(ck, "__metadata__", TYTO_CHECKPOINT_F32, 0, NULL, v),
      TYTO_ERR_INVALID_ARGUMENT, "is reserved for the metadata");
  expect_error(
      tyto_checkpoint_add(ck, "bad\xff", TYTO_CHECKPOINT_F32, 0, NULL, v),
      TYTO_ERR_INVALID_ARGUMENT, "is not valid UTF-8");
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  expect_error(tyto_checkpoint_add(ck, "r", TYTO_CHECKPOINT_F32, 9, nine, v),
               TYTO_ERR_INVALID_ARGUMENT, "tensor 'r': rank 9 is outside 0..8");
  expect_error(
      tyto_checkpoint_add(ck, "n", TYTO_CHECKPOINT_F32, 1, (int64_t[]){-2}, v),
      TYTO_ERR_INVALID_ARGUMENT, "tensor 'n': extent -2 of axis 0 is negative");
  expect_error(
      tyto_checkpoint_add(ck, "d", (tyto_checkpoint_dtype)7, 0, NULL, v),
      TYTO_ERR_INVALID_ARGUMENT, "tensor 'd': unknown dtype 7");
  expect_error(tyto_checkpoint_add(ck, "z", TYTO_CHECKPOINT_F32, 1,
                                   (int64_t[]){2}, NULL),
               TYTO_ERR_INVALID_ARGUMENT,
               "tensor 'z': data is NULL for 8 bytes");
  expect_error(tyto_checkpoint_set_meta(ck, "k", "\xc3"),
               TYTO_ERR_INVALID_ARGUMENT, "not valid UTF-8");
  expect_error(tyto_checkpoint_save(ck, in_dir("missing/x.safetensors")),
               TYTO_ERR_IO,
               "tyto_checkpoint_save: cannot create a file "
               "beside '");
  ck_assert_msg_contains(tyto_errmsg(), "No such file or directory");
  ck_assert_uint_eq(tyto_checkpoint_count(ck), 1);
  tyto_checkpoint_free(ck);
}
END_TEST

/* A checkpoint of n floats i * k. */
static tyto_checkpoint *floats(size_t n, float k) {
  tyto_checkpoint *ck;
  OK(tyto_checkpoint_new(&ck));
  float *v = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++)
    v[i] = (float)i * k;
  OK(tyto_checkpoint_add(ck, "w", TYTO_CHECKPOINT_F32, 1,
                         (int64_t[]){(int64_t)n}, v));
  free(v);
  return ck;
}

static const char *self; /* this program, for the limited writer */

/* The child's part: saves a 4096-float checkpoint over path with files
 * limited to 100 bytes. No ck_assert here: Check logs each one to a file,
 * which the limit would cut short. Returns the exit status. */
static int limited_save(const char *path) {
  tyto_checkpoint *ck;
  static float v[4096];
  if (tyto_checkpoint_new(&ck) != TYTO_OK ||
      tyto_checkpoint_add(ck, "w", TYTO_CHECKPOINT_F32, 1, (int64_t[]){4096},
                          v) != TYTO_OK)
    return 2;
  struct rlimit rl = {100, 100};
  setrlimit(RLIMIT_FSIZE, &rl);
  tyto_status st = tyto_checkpoint_save(ck, path);
  int ok = st == TYTO_ERR_IO &&
           strstr(tyto_errmsg(), "File too large") != NULL &&
           strstr(tyto_errmsg(), "is unchanged") != NULL;
  tyto_checkpoint_free(ck);
  return ok ? 0 : 1;
}

/* Saves over path in a child whose files may not grow past 100 bytes,
 * with SIGXFSZ ignored or (sigxfsz_default) left at its default action,
 * which kills a process whose write goes past the limit: the library's
 * write path must keep it from doing so. The default-action child is this
 * program run again, so that under valgrind it runs alone. Returns the
 * wait status. */
static int save_in_limited_child(const char *path, int sigxfsz_default) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (sigxfsz_default) {
      signal(SIGXFSZ, SIG_DFL);
      execl(self, self, "--save-limited", path, (char *)NULL);
      _exit(3);
    }
    signal(SIGXFSZ, SIG_IGN);
    _exit(limited_save(path));
  }
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  return ws;
}

static void check_old(const char *path, const unsigned char *old,
                      size_t old_len) {
  size_t len;
  unsigned char *now = slurp(path, &len);
  ck_assert_uint_eq(len, old_len);
  ck_assert_mem_eq(now, old, len);
  free(now);
  tyto_checkpoint *ck;
  OK(tyto_checkpoint_load(path, &ck));
  const void *data;
  size_t bytes;
  OK(tyto_checkpoint_find(ck, "w", NULL, NULL, NULL, &data, &bytes));
  ck_assert_uint_eq(bytes, 8 * sizeof(float));
  ck_assert_float_eq(((const float *)data)[7], 7);
  tyto_checkpoint_free(ck);
}

START_TEST(test_failed_save_keeps_old) {
  const char *path = in_dir("model.safetensors");
  tyto_checkpoint *ck = floats(8, 1);
  OK(tyto_checkpoint_save(ck, path));
  tyto_checkpoint_free(ck);
  chmod(path, 0640);
  size_t old_len;
  unsigned char *old = slurp(path, &old_len);

  int ws = save_in_limited_child(path, 0);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                "the child's save did not fail with EFBIG (status %d)", ws);
  check_old(path, old, old_len);
  ck_assert_uint_eq(dir_entries(), 1); /* the temporary was removed */

  /* a save that works replaces it and keeps its mode */
  ck = floats(4096, 2);
  OK(tyto_checkpoint_save(ck, path));
  tyto_checkpoint_free(ck);
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_eq(sb.st_mode & 0777, 0640);
  OK(tyto_checkpoint_load(path, &ck));
  const void *data;
  OK(tyto_checkpoint_find(ck, "w", NULL, NULL, NULL, &data, NULL));
  ck_assert_float_eq(((const float *)data)[4095], 8190);
  ck_assert_uint_eq(dir_entries(), 1);
  tyto_checkpoint_free(ck);
  free(old);
}
END_TEST

START_TEST(test_sigxfsz_save_keeps_old) {
  const char *path = in_dir("model.safetensors");
  tyto_checkpoint *ck = floats(8, 1);
  OK(tyto_checkpoint_save(ck, path));
  tyto_checkpoint_free(ck);
  size_t old_len;
  unsigned char *old = slurp(path, &old_len);

  int ws = save_in_limited_child(path, 1);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                "with SIGXFSZ at its default action, the save did not fail "
                "cleanly with EFBIG (status %d%s)",
                ws, WIFSIGNALED(ws) ? ", killed by a signal" : "");
  ck_assert_uint_eq(dir_entries(), 1); /* the temporary was removed */
  check_old(path, old, old_len);

  /* a crashed writer's leftover temporary does not stand in the way */
  FILE *f = fopen(in_dir("model.safetensors.Xy12Zw"), "w");
  ck_assert_ptr_nonnull(f);
  fputs("half a checkpoint", f);
  fclose(f);
  check_old(path, old, old_len);
  ck = floats(16, 3);
  OK(tyto_checkpoint_save(ck, path));
  tyto_checkpoint_free(ck);
  OK(tyto_checkpoint_load(path, &ck));
  size_t bytes;
  OK(tyto_checkpoint_find(ck, "w", NULL, NULL, NULL, NULL, &bytes));
  ck_assert_uint_eq(bytes, 16 * sizeof(float));
  tyto_checkpoint_free(ck);
  free(old);
}
END_TEST

START_TEST(test_expect) {
  tyto_checkpoint *ck;
  OK(tyto_checkpoint_new(&ck));
  static float z[784 * 64];
  OK(tyto_checkpoint_add(ck, "fc1.w", TYTO_CHECKPOINT_F32, 2,
                         (int64_t[]){784, 64}, z));
  OK(tyto_checkpoint_add(ck, "conv.w", TYTO_CHECKPOINT_F32, 4,
                         (int64_t[]){8, 1, 3, 3}, z));
  OK(tyto_checkpoint_add(ck, "fc1.b", TYTO_CHECKPOINT_F64, 1, (int64_t[]){128},
                         z));
  OK(tyto_checkpoint_add(ck, "step", TYTO_CHECKPOINT_I64, 0, NULL, z));
  const char *path = in_dir("model.safetensors");
  OK(tyto_checkpoint_save(ck, path));
  tyto_checkpoint_free(ck);
  OK(tyto_checkpoint_load(path, &ck));

  tyto_checkpoint_spec specs[] = {
      {"fc1.w", TYTO_CHECKPOINT_F32, 2, (int64_t[]){784, 128}},
      {"fc1.b", TYTO_CHECKPOINT_F32, 1, (int64_t[]){128}},
      {"fc2.w", TYTO_CHECKPOINT_F32, 2, (int64_t[]){128, 10}},
      {"step", TYTO_CHECKPOINT_I64, 0, NULL},
  };
  char want[1024];
  snprintf(want, sizeof want,
           "checkpoint '%s' does not match this model: missing 'fc2.w' "
           "f32[128,10]; unexpected 'conv.w' f32[8,1,3,3]; 'fc1.w' is "
           "f32[784,64] in the file, f32[784,128] here; 'fc1.b' is f64[128] "
           "in the file, f32[128] here",
           path);
  expect_error(tyto_checkpoint_expect(ck, 4, specs, 0),
               TYTO_ERR_INVALID_ARGUMENT, want);
  ck_assert_str_eq(tyto_errmsg(), want);
  /* extra tensors allowed: the rest remain */
  expect_error(
      tyto_checkpoint_expect(ck, 4, specs, TYTO_CHECKPOINT_ALLOW_EXTRA),
      TYTO_ERR_INVALID_ARGUMENT,
      "missing 'fc2.w' f32[128,10]; "
      "'fc1.w' is f32[784,64]");
  ck_assert_ptr_null(strstr(tyto_errmsg(), "unexpected"));
  /* matching */
  tyto_checkpoint_spec good[] = {
      {"step", TYTO_CHECKPOINT_I64, 0, NULL},
      {"fc1.b", TYTO_CHECKPOINT_F64, 1, (int64_t[]){128}},
      {"conv.w", TYTO_CHECKPOINT_F32, 4, (int64_t[]){8, 1, 3, 3}},
      {"fc1.w", TYTO_CHECKPOINT_F32, 2, (int64_t[]){784, 64}},
  };
  OK(tyto_checkpoint_expect(ck, 4, good, 0));
  OK(tyto_checkpoint_expect(ck, 1, good, TYTO_CHECKPOINT_ALLOW_EXTRA));
  expect_error(tyto_checkpoint_expect(ck, 1, good, 0),
               TYTO_ERR_INVALID_ARGUMENT,
               "unexpected 'fc1.w' f32[784,64]; unexpected 'conv.w' "
               "f32[8,1,3,3]; unexpected 'fc1.b' f64[128]");
  good[1].name = "step";
  expect_error(tyto_checkpoint_expect(ck, 2, good, 0),
               TYTO_ERR_INVALID_ARGUMENT,
               "'step' is expected twice (specs 0 and 1)");
  /* A bad spec is named with what is wrong with it. */
  tyto_checkpoint_spec bad = {"w", TYTO_CHECKPOINT_F32, 2, NULL};
  expect_error(tyto_checkpoint_expect(ck, 1, &bad, 0),
               TYTO_ERR_INVALID_ARGUMENT,
               "spec 0 ('w') has rank 2 but a NULL shape");
  bad.rank = 9;
  expect_error(tyto_checkpoint_expect(ck, 1, &bad, 0),
               TYTO_ERR_INVALID_ARGUMENT,
               "spec 0 ('w') has rank 9; expected 0..8");
  bad.rank = 1;
  bad.shape = (int64_t[]){-2};
  expect_error(tyto_checkpoint_expect(ck, 1, &bad, 0),
               TYTO_ERR_INVALID_ARGUMENT,
               "spec 0 ('w') has extent -2 on axis 0");
  bad.dtype = (tyto_checkpoint_dtype)42;
  expect_error(tyto_checkpoint_expect(ck, 1, &bad, 0),
               TYTO_ERR_INVALID_ARGUMENT, "spec 0 ('w') has unknown dtype 42");
  bad.name = NULL;
  expect_error(tyto_checkpoint_expect(ck, 1, &bad, 0),
               TYTO_ERR_INVALID_ARGUMENT, "spec 0 has a NULL name");
  tyto_checkpoint_free(ck);
}
END_TEST

/* A model with two named parameters of shape [2,3] (or w_cols columns)
 * and [3], compiled on the CPU device. */
typedef struct model {
  tyto_graph *g;
  tyto_tensor *params[2];
  tyto_program *p;
} model;

static void model_new(tyto_context *ctx, model *m, int64_t w_cols,
                      const char *b_name) {
  m->g = tyto_graph_new();
  m->params[0] =
      tyto_parameter(m->g, TYTO_F32, 2, (int64_t[]){2, w_cols}, "fc.w");
  m->params[1] = tyto_parameter(m->g, TYTO_F32, 1, (int64_t[]){3}, b_name);
  tyto_tensor *outs[2] = {tyto_mul(m->params[0], m->params[0]),
                          tyto_add(m->params[1], m->params[1])};
  OK(tyto_program_compile(ctx, m->g, 2, outs, NULL, &m->p));
}

static void model_free(model *m) {
  tyto_program_free(m->p);
  tyto_graph_free(m->g);
}

START_TEST(test_program_parameters) {
  tyto_context_options o;
  test_options(&o, 0);
  /* Only the CPU plugin's directory (the first): the OpenCL ICDs keep
   * memory valgrind reports, and this test needs none of them. */
  static char cpu_dir[4096];
  snprintf(cpu_dir, sizeof cpu_dir, "%s", TEST_PLUGIN_DIRS);
  cpu_dir[strcspn(cpu_dir, ":")] = '\0';
  o.plugin_path = cpu_dir;
  o.devices = "cpu";
  tyto_context *ctx;
  OK(tyto_context_new(&o, &ctx));
  model a, b, c;
  model_new(ctx, &a, 3, "fc.b");
  float w[6] = {1, -2, 3.5f, 4, 0.125f, -6}, bias[3] = {7, 8, -9};
  OK(tyto_program_write_parameter(a.p, a.params[0], w, sizeof w));
  OK(tyto_program_write_parameter(a.p, a.params[1], bias, sizeof bias));
  tyto_checkpoint *ck;
  OK(tyto_checkpoint_new(&ck));
  OK(tyto_checkpoint_add_parameters(ck, a.p, 2, a.params));
  OK(tyto_checkpoint_add(ck, "step", TYTO_CHECKPOINT_I64, 0, NULL,
                         (int64_t[]){100}));
  const char *path = in_dir("params.safetensors");
  OK(tyto_checkpoint_save(ck, path));
  tyto_checkpoint_free(ck);

  /* a fresh program of the same model gets the values back */
  model_new(ctx, &b, 3, "fc.b");
  OK(tyto_checkpoint_load(path, &ck));
  OK(tyto_checkpoint_restore_parameters(ck, b.p, 2, b.params));
  float got[6];
  OK(tyto_program_read_parameter(b.p, b.params[0], got, sizeof got));
  ck_assert_mem_eq(got, w, sizeof w);
  OK(tyto_program_read_parameter(b.p, b.params[1], got, sizeof bias));
  ck_assert_mem_eq(got, bias, sizeof bias);
  OK(tyto_program_run(b.p));
  OK(tyto_program_read_output(b.p, 0, got, sizeof w));
  for (int i = 0; i < 6; i++)
    ck_assert_float_eq(got[i], w[i] * w[i]);

  /* another model: nothing is written, every difference is told */
  model_new(ctx, &c, 4, "fc.bias");
  char want[512];
  snprintf(want, sizeof want,
           "checkpoint '%s' does not match this model: missing 'fc.bias' "
           "f32[3]; 'fc.w' is f32[2,3] in the file, f32[2,4] here",
           path);
  expect_error(tyto_checkpoint_restore_parameters(ck, c.p, 2, c.params),
               TYTO_ERR_INVALID_ARGUMENT, want);
  OK(tyto_program_read_parameter(c.p, c.params[1], got, sizeof bias));
  for (int i = 0; i < 3; i++)
    ck_assert_float_eq(got[i], 0);
  tyto_checkpoint_free(ck);

  /* a parameter without a name cannot be saved */
  tyto_tensor_set_name(c.params[1], NULL);
  OK(tyto_checkpoint_new(&ck));
  expect_error(tyto_checkpoint_add_parameters(ck, c.p, 2, c.params),
               TYTO_ERR_INVALID_ARGUMENT,
               "has no name; name it with tyto_tensor_set_name()");
  tyto_checkpoint_free(ck);
  model_free(&a);
  model_free(&b);
  model_free(&c);
  tyto_context_free(ctx);
}
END_TEST

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--save-limited") == 0)
    return limited_save(argv[2]);
  self = argv[0];
  Suite *s = suite_create("checkpoint");
  TCase *tc = tcase_create("checkpoint");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_byte_exact);
  tcase_add_test(tc, test_other_writers);
  tcase_add_test(tc, test_half_formats);
  tcase_add_test(tc, test_integer_formats);
  tcase_add_loop_test(tc, test_bad_files, 0,
                      (int)(sizeof bad_cases / sizeof bad_cases[0]));
  tcase_add_test(tc, test_bad_sizes);
  tcase_add_test(tc, test_add_errors);
  tcase_add_test(tc, test_failed_save_keeps_old);
  tcase_add_test(tc, test_sigxfsz_save_keeps_old);
  tcase_add_test(tc, test_expect);
  tcase_add_test(tc, test_program_parameters);
  suite_add_tcase(s, tc);
  return test_run(s);
}
