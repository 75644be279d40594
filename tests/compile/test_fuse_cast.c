/* Casts fused into elementwise kernels, compiled and run (issue 19): on
 * the cast test device (tests/plugins/castplug.c: f32 and f64, CAST alone
 * and in fused programs, each program checked strictly against its
 * layouts) a chain f32 -> cast f64 -> add an f64 bias -> relu -> cast f32
 * is one kernel that gives the bits of the passes switched off; on its
 * twin that runs CAST only alone, the refused fused node is split and
 * the casts run alone, with the same bits, on one device as on two
 * (where placement splits only what the refusing device runs). All match
 * a reference computed here in C, exactly: every value is a correctly
 * rounded f64 or f32 result of exact operands. The CPU plugin is not in the
 * context: it runs no CAST yet. */
#include "common.h"

#include <math.h>

#ifndef TEST_CAST_PLUGIN_DIR
#error "TEST_CAST_PLUGIN_DIR must name the directory of the cast test plugins"
#endif

enum { N = 64, M = 16 };

/* A context of the cast test devices named (one or two). */
static tyto_context *context(const char *devices, size_t n_devs) {
  tyto_context_options o;
  test_options(&o, 0);
  /* Only the cast test plugins (the CPU plugin would take what they
   * refuse), or only the build's plugins for the CPU. */
  if (strncmp(devices, "cpu", 3) != 0)
    o.plugin_path = TEST_CAST_PLUGIN_DIR;
  o.devices = devices;
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_uint_eq(tyto_context_device_count(ctx), n_devs);
  return ctx;
}

/* x f32 [N/M, M], bias f64 [M], w f64 [N/M, M]:
 *   y = cast(relu(cast(x, f64) + bias), f32)                      (f32)
 *   z = max(cast(x, f64) * w, 0.5)                                 (f64)
 * (no product feeds a sum: the fuse pass would make an FMA of it, which
 * rounds once where the ops alone round twice)
 * and y2 = cast(cast(y, f64), f32), which algebra folds to y; all in the
 * device scope `scope` (-1: none). */
typedef struct net {
  tyto_tensor *x, *bias, *w, *outs[3];
} net;

static net build(tyto_graph *g, int scope) {
  net n;
  int old = tyto_graph_set_device_scope(g, scope);
  int64_t s[2] = {N / M, M};
  n.x = tyto_input(g, TYTO_F32, 2, s, "x");
  n.bias = tyto_input(g, TYTO_F64, 1, s + 1, "bias");
  n.w = tyto_input(g, TYTO_F64, 2, s, "w");
  tyto_tensor *x64 = tyto_cast(n.x, TYTO_F64);
  n.outs[0] = tyto_cast(tyto_relu(tyto_add(x64, n.bias)), TYTO_F32);
  n.outs[1] = tyto_max(tyto_mul(x64, n.w), tyto_scalar(g, TYTO_F64, 0.5));
  n.outs[2] = tyto_cast(tyto_cast(n.outs[0], TYTO_F64), TYTO_F32);
  tyto_graph_set_device_scope(g, old);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  return n;
}

typedef struct data {
  float x[N];
  double bias[M], w[N];
} data;

/* Values whose sums and products round in both f32 and f64: x with 24
 * significant bits, bias and w with 53. */
static void fill(data *d) {
  uint64_t s = 0x243f6a8885a308d3ULL;
  for (int i = 0; i < N; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    d->x[i] = (float)((double)(s >> 40) / (double)(1 << 23) - 1.0);
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    d->w[i] = (double)(s >> 11) / 0x1p53 * 3.0 - 1.5;
  }
  for (int j = 0; j < M; j++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    d->bias[j] = (double)(s >> 11) / 0x1p52 - 1.0;
  }
  d->x[0] = -0.0f;       /* relu(-0 + bias) */
  d->bias[1] = -d->x[1]; /* a zero sum: +0 */
}

typedef struct result {
  float y[N], y2[N];
  double z[N];
  size_t fused_nodes, kernels;
} result;

/* Compiles the net on `devices` (n_devs of them, the net in device scope
 * `scope`) under the pinned policy, runs it on d and reads it back. */
static result run(const char *devices, size_t n_devs, int scope,
                  unsigned passes_off, const data *d) {
  static const size_t both[2] = {0, 1};
  tyto_context *ctx = context(devices, n_devs);
  tyto_graph *g = tyto_graph_new();
  net n = build(g, scope);
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.passes_off = passes_off;
  po.n_devices = n_devs;
  po.devices = both;
  po.placement = TYTO_PLACE_PINNED;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 3, n.outs, &po, &p) == TYTO_OK,
                "%s: %s", devices, tyto_errmsg());
  ck_assert_int_eq(tyto_program_set_input(p, n.x, d->x, sizeof d->x), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, n.bias, d->bias, sizeof d->bias),
                   TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, n.w, d->w, sizeof d->w), TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  result r;
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(tyto_program_read_output(p, 0, r.y, sizeof r.y), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 1, r.z, sizeof r.z), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 2, r.y2, sizeof r.y2), TYTO_OK);
  tyto_program_stats st;
  st.struct_size = sizeof st;
  ck_assert_int_eq(tyto_program_stats_get(p, &st), TYTO_OK);
  r.fused_nodes = st.fused_nodes;
  r.kernels = st.kernels;
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
  return r;
}

/* Every output bit for bit as the reference: (f32) relu((f64) x + bias)
 * and max((f64) x * w, 0.5). */
static void matches_reference(const result *r, const data *d,
                              const char *what) {
  for (int i = 0; i < N; i++) {
    double s = (double)d->x[i] + d->bias[i % M];
    float y = (float)(s < 0 ? 0 : s);
    double m = (double)d->x[i] * d->w[i], z = m > 0.5 ? m : 0.5;
    ck_assert_msg(memcmp(&r->y[i], &y, sizeof y) == 0,
                  "%s: y[%d] = %a, expected %a", what, i, (double)r->y[i],
                  (double)y);
    ck_assert_msg(memcmp(&r->y2[i], &y, sizeof y) == 0,
                  "%s: y2[%d] = %a, expected %a", what, i, (double)r->y2[i],
                  (double)y);
    ck_assert_msg(memcmp(&r->z[i], &z, sizeof z) == 0,
                  "%s: z[%d] = %a, expected %a", what, i, r->z[i], z);
  }
}

START_TEST(fused_casts_give_the_bits_of_unfused_ones) {
  data d;
  fill(&d);
  result off = run("castfuse:0", 1, -1, TYTO_PASS_ALL, &d);
  result on = run("castfuse:0", 1, -1, 0, &d);
  matches_reference(&off, &d, "passes off");
  matches_reference(&on, &d, "passes on");
  ck_assert_mem_eq(on.y, off.y, sizeof on.y);
  ck_assert_mem_eq(on.z, off.z, sizeof on.z);
  /* Off: cast, add, relu, cast, mul, max, and y2's two casts, each a
   * kernel. On: one fused node (y and z are its outputs, the casts inside
   * it, y2 is y) and nothing else. */
  ck_assert_uint_eq(off.fused_nodes, 0);
  ck_assert_uint_ge(off.kernels, 8);
  ck_assert_uint_eq(on.fused_nodes, 1);
  ck_assert_uint_eq(on.kernels, 1);
}
END_TEST

START_TEST(a_device_that_runs_cast_only_alone_gets_the_casts_unfused) {
  data d;
  fill(&d);
  result ref = run("castfuse:0", 1, -1, TYTO_PASS_ALL, &d);
  result on = run("castalone:0", 1, -1, 0, &d);
  matches_reference(&on, &d, "castalone");
  ck_assert_mem_eq(on.y, ref.y, sizeof on.y);
  ck_assert_mem_eq(on.z, ref.z, sizeof on.z);
  /* The refused node is split: the one cast of x runs alone, and so does
   * y's cast back to f32; the f64 parts, add and relu, mul and max, are
   * two fused nodes (fusion joins a node to the groups of its operands,
   * and the two share only the cast, now outside). */
  ck_assert_uint_eq(on.fused_nodes, 2);
  ck_assert_uint_eq(on.kernels, 4);
}
END_TEST

START_TEST(on_two_devices_only_the_one_that_refuses_gets_a_split) {
  /* Placement's path: the net pinned to castalone (device 1) is split as
   * on castalone alone; pinned to castfuse (device 0), it is not. */
  data d;
  fill(&d);
  result ref = run("castfuse:0", 1, -1, TYTO_PASS_ALL, &d);
  result alone = run("castfuse:0,castalone:0", 2, 1, 0, &d);
  result fused = run("castfuse:0,castalone:0", 2, 0, 0, &d);
  matches_reference(&alone, &d, "pinned to castalone");
  matches_reference(&fused, &d, "pinned to castfuse");
  ck_assert_mem_eq(alone.y, ref.y, sizeof ref.y);
  ck_assert_mem_eq(fused.z, ref.z, sizeof ref.z);
  ck_assert_uint_eq(alone.fused_nodes, 2);
  ck_assert_uint_eq(alone.kernels, 4);
  ck_assert_uint_eq(fused.fused_nodes, 1);
  ck_assert_uint_eq(fused.kernels, 1);
}
END_TEST

/* Whether cpu:0 compiles a lone f32 -> f64 cast; when it does not, the
 * reason, which must be that it runs no CAST. */
static int cpu_runs_cast(void) {
  tyto_context *ctx = context("cpu:0", 1);
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, (const int64_t[]){4}, "x");
  tyto_tensor *y = tyto_cast(x, TYTO_F64);
  tyto_program *p = NULL;
  tyto_status st = tyto_program_compile(ctx, g, 1, &y, NULL, &p);
  if (st != TYTO_OK) {
    ck_assert_int_eq(st, TYTO_ERR_UNSUPPORTED);
    ck_assert_msg_contains(tyto_errmsg(), "cast");
    fprintf(stderr,
            "cpu:0 runs no CAST yet, so the CPU test checks only "
            "that: %s\n",
            tyto_errmsg());
  }
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
  return st == TYTO_OK;
}

START_TEST(the_cpu_plugin_gives_fused_casts_the_bits_of_unfused_ones) {
  /* Real once the CPU plugin runs CAST (alone, and fused or not: the
   * compile splits what it refuses). */
  if (!cpu_runs_cast())
    return;
  data d;
  fill(&d);
  result off = run("cpu:0", 1, -1, TYTO_PASS_ALL, &d);
  result on = run("cpu:0", 1, -1, 0, &d);
  matches_reference(&off, &d, "cpu, passes off");
  matches_reference(&on, &d, "cpu, passes on");
  ck_assert_uint_ge(on.fused_nodes, 1);
  ck_assert_uint_lt(on.kernels, off.kernels);
}
END_TEST

int main(void) {
  Suite *s = suite_create("compile_fuse_cast");
  TCase *tc = tcase_create("fuse_cast");
  tcase_add_test(tc, fused_casts_give_the_bits_of_unfused_ones);
  tcase_add_test(tc, a_device_that_runs_cast_only_alone_gets_the_casts_unfused);
  tcase_add_test(tc, on_two_devices_only_the_one_that_refuses_gets_a_split);
  tcase_add_test(tc, the_cpu_plugin_gives_fused_casts_the_bits_of_unfused_ones);
  suite_add_tcase(s, tc);
  return test_run(s);
}
