/* The dtype table (graph/dtype.c): every row, values outside it refused at
 * every public entry point, the 2-byte formats bit for bit against
 * reference converters written here, graphs built in f16 and bf16, and
 * the compile errors of a device that does not run them (the test plugin
 * "part") and of the CPU device for linear algebra in them. */
#include "common.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "graph/dtype.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

static const tyto_dtype BAD[] = {(tyto_dtype)-1, (tyto_dtype)6, (tyto_dtype)7,
                                 (tyto_dtype)1000};

START_TEST(every_row) {
  static const struct {
    tyto_dtype d;
    const char *name, *st;
    size_t size;
    uint32_t abi;
    tyto_dtype arith;
  } want[] = {
      {TYTO_F32, "f32", "F32", 4, TYTO_PLUGIN_DTYPE_F32, TYTO_F32},
      {TYTO_F64, "f64", "F64", 8, TYTO_PLUGIN_DTYPE_F64, TYTO_F64},
      {TYTO_F16, "f16", "F16", 2, TYTO_PLUGIN_DTYPE_F16, TYTO_F32},
      {TYTO_BF16, "bf16", "BF16", 2, TYTO_PLUGIN_DTYPE_BF16, TYTO_F32},
      {TYTO_I32, "i32", "I32", 4, TYTO_PLUGIN_DTYPE_I32, TYTO_I32},
      {TYTO_I64, "i64", "I64", 8, TYTO_PLUGIN_DTYPE_I64, TYTO_I64},
  };
  ck_assert_int_eq(dtype_count(), 6);
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    const dtype_info *di = dtype_info_of(want[i].d);
    ck_assert_ptr_nonnull(di);
    ck_assert_int_eq(di->dtype, want[i].d);
    ck_assert_str_eq(di->name, want[i].name);
    ck_assert_str_eq(tyto_dtype_name(want[i].d), want[i].name);
    ck_assert_str_eq(di->st_name, want[i].st);
    ck_assert_uint_eq(di->size, want[i].size);
    ck_assert_uint_eq(tyto_dtype_size(want[i].d), want[i].size);
    ck_assert_uint_eq(di->abi, want[i].abi);
    ck_assert_ptr_eq(dtype_info_of_abi(want[i].abi), di);
    ck_assert_int_eq(di->arith, want[i].arith);
    int integer = want[i].d == TYTO_I32 || want[i].d == TYTO_I64;
    ck_assert_int_eq(dtype_is_int(want[i].d), integer);
    ck_assert_int_eq(tyto_dtype_is_integer(want[i].d), integer);
    ck_assert_int_eq(dtype_host_arith(want[i].d),
                     !integer && want[i].arith == want[i].d);
    /* 1.5 is exact in every floating format: stored and loaded unchanged;
     * an integer truncates it toward zero. */
    _Alignas(8) unsigned char e[8] = {0};
    di->store(e, 0, 1.5);
    ck_assert_double_eq(di->load(e, 0), integer ? 1.0 : 1.5);
    di->store(e, 0, -1.5);
    ck_assert_double_eq(di->load(e, 0), integer ? -1.0 : -1.5);
    int c = tyto_checkpoint_dtype_of(want[i].d);
    static const tyto_checkpoint_dtype ck[] = {
        TYTO_CHECKPOINT_F32,  TYTO_CHECKPOINT_F64, TYTO_CHECKPOINT_F16,
        TYTO_CHECKPOINT_BF16, TYTO_CHECKPOINT_I32, TYTO_CHECKPOINT_I64};
    ck_assert_int_eq(c, (int)ck[i]);
  }
  for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
    ck_assert_ptr_null(dtype_info_of(BAD[i]));
    ck_assert_str_eq(tyto_dtype_name(BAD[i]), "?");
    ck_assert_uint_eq(tyto_dtype_size(BAD[i]), 0);
    ck_assert_int_eq(tyto_checkpoint_dtype_of(BAD[i]), -1);
    ck_assert_int_eq(dtype_host_arith(BAD[i]), 0);
  }
  ck_assert_ptr_null(dtype_info_of_abi(TYTO_PLUGIN_DTYPE_U8));
  ck_assert_int_eq(tyto_dtype_is_integer((tyto_dtype)6), 0);
}
END_TEST

/* The integers' host conversions are CAST's: toward zero, saturated at the
 * limits, NaN giving 0; i64 values beyond 2^53 load rounded. */
START_TEST(integer_store_and_load) {
  const dtype_info *i32 = dtype_info_of(TYTO_I32),
                   *i64 = dtype_info_of(TYTO_I64);
  int32_t a[8];
  const double in32[8] = {NAN,           INFINITY, -INFINITY, 2147483647.9,
                          -2147483648.9, 3e9,      -0.0,      -7.99};
  const int32_t want32[8] = {0,         INT32_MAX, INT32_MIN, INT32_MAX,
                             INT32_MIN, INT32_MAX, 0,         -7};
  for (int k = 0; k < 8; k++) {
    i32->store(a, (size_t)k, in32[k]);
    ck_assert_int_eq(a[k], want32[k]);
  }
  int64_t b[6];
  const double in64[6] = {NAN,   0x1p63,        -0x1p63,
                          1e300, -0x1p62 - 0.5, 9007199254740993.0};
  const int64_t want64[6] = {
      0,         INT64_MAX,           INT64_MIN,
      INT64_MAX, -(INT64_C(1) << 62), INT64_C(9007199254740992)};
  for (int k = 0; k < 6; k++) {
    i64->store(b, (size_t)k, in64[k]);
    ck_assert_int_eq(b[k], want64[k]);
  }
  b[0] = INT64_MAX;
  ck_assert_double_eq(i64->load(b, 0), 0x1p63);
  /* Which dtypes hold which exactly. */
  ck_assert(dtype_holds(TYTO_I64, TYTO_I32));
  ck_assert(!dtype_holds(TYTO_I32, TYTO_I64));
  ck_assert(dtype_holds(TYTO_F64, TYTO_I32));
  ck_assert(!dtype_holds(TYTO_F32, TYTO_I32));
  ck_assert(!dtype_holds(TYTO_F64, TYTO_I64));
  ck_assert(!dtype_holds(TYTO_I64, TYTO_F16));
  ck_assert(!dtype_holds(TYTO_I32, TYTO_BF16));
}
END_TEST

/* bfloat16 is float32's top half, rounded to nearest even: the usual bit
 * trick, for floats that are not NaN. */
static uint16_t ref_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static uint32_t rng = 12345;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

/* enc agrees with ref on 200000 random floats (NaNs left out). */
static void check_random_floats(const char *name, uint16_t (*enc)(double),
                                uint16_t (*ref)(float)) {
  for (int i = 0; i < 200000; i++) {
    uint32_t u = next_u32();
    float f;
    memcpy(&f, &u, sizeof f);
    if (isnan(f))
      continue;
    uint16_t got = enc((double)f), want = ref(f);
    ck_assert_msg(got == want, "%s(%a) = 0x%04x, expected 0x%04x", name,
                  (double)f, got, want);
  }
}

/* Every pattern decodes to a value that encodes back to it, but the NaNs
 * (all of exp's bits set), which decode to NaN. */
static void check_every_pattern(uint16_t (*enc)(double),
                                double (*dec)(uint16_t), uint16_t exp) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    double v = dec((uint16_t)h);
    if (!isnan(v))
      ck_assert_uint_eq(enc(v), h);
    else
      ck_assert_uint_eq(h & exp, exp);
  }
}

START_TEST(bf16_bits) {
  static const struct {
    double v;
    uint16_t b;
  } known[] = {
      {1.0, 0x3f80},
      {-2.0, 0xc000},
      {0.0, 0x0000},
      {-0.0, 0x8000},
      {3.140625, 0x4049},
      {M_PI, 0x4049},
      {INFINITY, 0x7f80},
      {-INFINITY, 0xff80},
      /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1). */
      {1.0 + 1.0 / 256, 0x3f80},
      /* 1 + 3 * 2^-8 is halfway between two: to even (1 + 2^-6). */
      {1.0 + 3.0 / 256, 0x3f82},
      /* Just above halfway, from a double: up (no double rounding). */
      {1.0 + 1.0 / 256 + 1e-12, 0x3f81},
      {FLT_MAX, 0x7f80},               /* rounds past bf16's largest to inf */
      {3.3895313892515355e38, 0x7f7f}, /* bf16's largest */
      {9.183549615799121e-41, 0x0001}, /* the smallest subnormal, 2^-133 */
      {4.591774807899561e-41, 0x0000}, /* half of it: to even (0) */
  };
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    ck_assert_msg(dtype_bf16_from_double(known[i].v) == known[i].b,
                  "bf16(%a) = 0x%04x, expected 0x%04x", known[i].v,
                  dtype_bf16_from_double(known[i].v), known[i].b);
  ck_assert_uint_eq(dtype_bf16_from_double(NAN) & 0x7fc0, 0x7fc0);
  ck_assert(isnan(dtype_bf16_to_double(0x7fc1)));
  ck_assert(signbit(dtype_bf16_to_double(0x8000)));
  check_random_floats("bf16", dtype_bf16_from_double, ref_bf16);
  check_every_pattern(dtype_bf16_from_double, dtype_bf16_to_double, 0x7f80);
}
END_TEST

#ifdef __FLT16_MAX__
/* The compiler's binary16 conversion, an independent reference that rounds
 * to nearest even too. */
__extension__ typedef _Float16 ref_half;
static uint16_t ref_f16(float f) {
  ref_half r = (ref_half)f;
  uint16_t u;
  memcpy(&u, &r, sizeof u);
  return u;
}
#endif

START_TEST(f16_bits) {
  static const struct {
    double v;
    uint16_t h;
  } known[] = {
      {1.0, 0x3c00},
      {-2.0, 0xc000},
      {0.5, 0x3800},
      {0.1, 0x2e66},
      {65504.0, 0x7bff},
      {65519.99, 0x7bff},
      {65520.0, 0x7c00}, /* halfway past the largest: to even, inf */
      {-INFINITY, 0xfc00},
      {0x1p-24, 0x0001},
      {0x1p-25, 0x0000},
      {0x1.8p-25, 0x0001},
      {0x1p-14, 0x0400},
      {0x1.ffcp-15, 0x0400}, /* halfway below 2^-14: even */
      {1.0 + 0x1p-11, 0x3c00},
      {1.0 + 0x3p-11, 0x3c02},
      {-0.0, 0x8000},
  };
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    ck_assert_msg(dtype_f16_from_double(known[i].v) == known[i].h,
                  "f16(%a) = 0x%04x, expected 0x%04x", known[i].v,
                  dtype_f16_from_double(known[i].v), known[i].h);
  ck_assert_uint_eq(dtype_f16_from_double(NAN) & 0x7e00, 0x7e00);
  ck_assert_uint_eq(dtype_f16_from_double(-NAN) & 0x8000, 0x8000);
#ifdef __FLT16_MAX__
  check_random_floats("f16", dtype_f16_from_double, ref_f16);
#endif
  check_every_pattern(dtype_f16_from_double, dtype_f16_to_double, 0x7c00);
}
END_TEST

START_TEST(unknown_dtypes_refused) {
  for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
    char want[160];
    snprintf(want, sizeof want,
             "unknown dtype %d (expected TYTO_F32, TYTO_F64, TYTO_F16, "
             "TYTO_BF16, TYTO_I32 or TYTO_I64)",
             (int)BAD[i]);
    for (int k = 0; k < 7; k++) {
      tyto_graph *g = tyto_graph_new();
      double one = 1;
      tyto_tensor *t =
          k == 0   ? tyto_input(g, BAD[i], 1, S(2), "x")
          : k == 1 ? tyto_parameter(g, BAD[i], 1, S(2), "w")
          : k == 2 ? tyto_constant(g, BAD[i], 0, NULL, &one)
          : k == 3 ? tyto_full(g, BAD[i], 1, S(2), 1.0)
          : k == 4 ? tyto_random_uniform(g, BAD[i], 1, S(2), 0, 1, 1)
          : k == 5 ? tyto_random_normal(g, BAD[i], 1, S(2), 0, 1, 1)
                   : tyto_random_bernoulli(g, BAD[i], 1, S(2), 0.5, 1);
      ck_assert(tyto_tensor_is_error(t));
      ck_assert_int_eq(tyto_graph_status(g), TYTO_ERR_INVALID_ARGUMENT);
      ck_assert_msg_contains(tyto_graph_error_message(g), want);
      tyto_graph_free(g);
    }
  }
}
END_TEST

START_TEST(graphs_in_f16_and_bf16) {
  const tyto_dtype dts[] = {TYTO_F16, TYTO_BF16};
  for (int k = 0; k < 2; k++) {
    tyto_dtype dt = dts[k];
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *x = tyto_input(g, dt, 2, S(2, 3), "x");
    tyto_tensor *w = tyto_parameter(g, dt, 2, S(3, 4), "w");
    /* 0.1 rounds to nearest even in the format, from the double. */
    const double vals[3] = {0.1, -2.0, 65520.0};
    tyto_tensor *c = tyto_constant(g, dt, 1, S(3), vals);
    tyto_tensor *h = tyto_matmul(tyto_add(tyto_exp(x), c), w, 0, 0);
    tyto_tensor *y = tyto_sum(tyto_square(h), 0, NULL, 0);
    tyto_tensor *gw = tyto_grad(y, w);
    ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                  tyto_graph_error_message(g));
    ck_assert_int_eq(tyto_tensor_dtype(h), dt);
    ck_assert_int_eq(tyto_tensor_dtype(y), dt);
    ck_assert_int_eq(tyto_tensor_dtype(gw), dt);
    ck_assert_int_eq(tyto_tensor_rank(gw), 2);
    const uint16_t *bits = tyto_tensor_data(c);
    if (dt == TYTO_F16) {
      ck_assert_uint_eq(bits[0], 0x2e66);
      ck_assert_uint_eq(bits[1], 0xc000);
      ck_assert_uint_eq(bits[2], 0x7c00);
    } else {
      ck_assert_uint_eq(bits[0], 0x3dcd);
      ck_assert_uint_eq(bits[1], 0xc000);
      ck_assert_uint_eq(bits[2], 0x4780); /* 65536: bf16 has 8 bits */
    }
    /* Mixing with f32 names both dtypes. */
    tyto_tensor *f = tyto_input(g, TYTO_F32, 2, S(2, 3), "f");
    ck_assert(tyto_tensor_is_error(tyto_add(x, f)));
    char want[80];
    snprintf(want, sizeof want, "add: dtypes differ: %s[2,3] and f32[2,3]",
             tyto_dtype_name(dt));
    ck_assert_str_eq(tyto_graph_error_message(g), want);
    tyto_graph_free(g);
  }
}
END_TEST

static tyto_context *context_on(const char *devices) {
  tyto_context_options o;
  test_options(&o, 0);
  o.plugin_path = test_plugin_dirs_and(TEST_PART_PLUGIN_DIR);
  o.devices = devices;
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  return ctx;
}

static tyto_context *cpu_context(void) {
  return context_on("cpu");
}

/* A device whose dtypes mask lacks the 16-bit formats (the test plugin
 * "part" runs f32 only) is refused by the compiler, with what it runs. */
START_TEST(compile_refused_by_mask) {
  tyto_context *ctx = context_on("part:0");
  const tyto_dtype dts[] = {TYTO_F16, TYTO_BF16};
  for (int k = 0; k < 2; k++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *a = tyto_input(g, dts[k], 2, S(2, 3), "a");
    tyto_tensor *b = tyto_input(g, dts[k], 2, S(2, 3), "b");
    tyto_tensor *y = tyto_add(a, b);
    tyto_program *p = NULL;
    ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, NULL, &p),
                     TYTO_ERR_UNSUPPORTED);
    ck_assert_ptr_null(p);
    /* The core's reason, then the plugin's own (its supports_op). */
    char want[300];
    snprintf(want, sizeof want,
             "compile on part:0: add (tensor #2) needs %s, which plugin "
             "part does not run (it runs f32) (part: add: dtype %s is not "
             "run by this test device (f32 only)); select a device that "
             "runs it with TYTO_DEVICES",
             tyto_dtype_name(dts[k]), tyto_dtype_name(dts[k]));
    ck_assert_str_eq(tyto_errmsg(), want);
    tyto_graph_free(g);
  }
  tyto_context_free(ctx);
}
END_TEST

/* The CPU device runs f16 and bf16, but not linear algebra in them
 * (sdk/docs/ops.md): its refusal reaches the user with what to do. */
START_TEST(compile_refused_by_cpu) {
  tyto_context *ctx = cpu_context();
  const tyto_dtype dts[] = {TYTO_F16, TYTO_BF16};
  for (int k = 0; k < 2; k++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *a = tyto_input(g, dts[k], 2, S(3, 3), "a");
    tyto_tensor *y = tyto_inv(a);
    tyto_program *p = NULL;
    ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, NULL, &p),
                     TYTO_ERR_UNSUPPORTED);
    ck_assert_ptr_null(p);
    char want[80];
    snprintf(want, sizeof want,
             "inv runs in f32 or f64, not %s; cast to f32 "
             "first",
             tyto_dtype_name(dts[k]));
    ck_assert_msg_contains(tyto_errmsg(), want);
    tyto_graph_free(g);
  }
  tyto_context_free(ctx);
}
END_TEST

START_TEST(host_helpers_refuse_two_byte_formats) {
  tyto_nn_options o;
  tyto_nn_options_init(&o);
  o.dtype = TYTO_BF16;
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = NULL;
  ck_assert_int_eq(tyto_nn_new(g, &o, &nn), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(nn);
  ck_assert_msg_contains(tyto_errmsg(), "tyto_nn_new: dtype bf16 is not "
                                        "supported for a network's "
                                        "parameters");
  o.dtype = (tyto_dtype)9;
  ck_assert_int_eq(tyto_nn_new(g, &o, &nn), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "unknown dtype 9");

  tyto_context *ctx = cpu_context();
  tyto_tensor *x = tyto_input(g, TYTO_F16, 1, S(2), "x");
  tyto_tensor *y = tyto_sum(tyto_square(x), 0, NULL, 0);
  const uint16_t xv[2] = {0x3c00, 0x4000};
  const void *vals[1] = {xv};
  tyto_gradcheck_report r;
  ck_assert_int_eq(tyto_gradcheck(ctx, y, 1, &x, vals, NULL, &r),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "gradcheck: y is f16, expected f32 "
                                        "or f64");
  tyto_context_free(ctx);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("graph_dtype");
  TCase *tc = tcase_create("dtype");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, every_row);
  tcase_add_test(tc, integer_store_and_load);
  tcase_add_test(tc, bf16_bits);
  tcase_add_test(tc, f16_bits);
  tcase_add_test(tc, unknown_dtypes_refused);
  tcase_add_test(tc, graphs_in_f16_and_bf16);
  tcase_add_test(tc, compile_refused_by_mask);
  tcase_add_test(tc, compile_refused_by_cpu);
  tcase_add_test(tc, host_helpers_refuse_two_byte_formats);
  suite_add_tcase(s, tc);
  return test_run(s);
}
