/* Graphviz dot and text export of a small graph, compared with the
 * expected text, and the failures of writing. */
#include "common.h"

#include <sys/stat.h>
#include <unistd.h>

#include "passes/passes.h"

/* Runs write(g, f) into a temporary file and returns what it wrote
 * (static storage). */
static const char *captured(tyto_status (*write)(const tyto_graph *, FILE *),
                            const tyto_graph *g) {
  static char buf[8192];
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(write(g, f), TYTO_OK);
  rewind(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static tyto_tensor *const *dot_outputs;
static size_t dot_n_outputs;

static tyto_status write_dot(const tyto_graph *g, FILE *f) {
  return tyto_graph_write_dot(g, f, dot_n_outputs, dot_outputs);
}

/* Owl's first figure, sin(x * y) with y broadcast, then scaled and summed. */
static tyto_tensor *build(tyto_graph *g) {
  tyto_tensor *x = tyto_input(g, TYTO_F32, 2, (const int64_t[]){8, 4}, "x");
  tyto_tensor *y = tyto_parameter(g, TYTO_F32, 2, (const int64_t[]){1, 4}, "y");
  tyto_tensor *s = tyto_sin(tyto_mul(x, y));
  tyto_tensor *o = tyto_mul(s, tyto_scalar(g, TYTO_F32, 2));
  return tyto_sum(o, 1, (const int[]){0}, 0);
}

START_TEST(text_dump) {
  tyto_graph *g = tyto_graph_new();
  build(g);
  tyto_tensor *c = tyto_constant(g, TYTO_F64, 1, (const int64_t[]){2},
                                 (const double[]){1, 2});
  tyto_tensor_set_name(c, "c");
  tyto_leaky_relu(c, 0.25);
  ck_assert_str_eq(captured(tyto_graph_write_text, g),
                   "  0 input f32[8,4] 'x'\n"
                   "  1 parameter f32[1,4] 'y'\n"
                   "  2 mul f32[8,4] <- #0 #1\n"
                   "  3 sin f32[8,4] <- #2\n"
                   "  4 full f32[] f=[2]\n"
                   "  5 mul f32[8,4] <- #3 #4\n"
                   "  6 sum f32[4] <- #5 i=[0,0]\n"
                   "  7 constant f64[2] 'c'\n"
                   "  8 leaky_relu f64[2] <- #7 f=[0.25]\n");
  /* a graph in error says so at the end */
  tyto_add(c, tyto_input(g, TYTO_F64, 1, (const int64_t[]){3}, NULL));
  const char *text = captured(tyto_graph_write_text, g);
  const char *tail = "  9 input f64[3]\n"
                     "error: add: shapes cannot be broadcast: [2] and [3]\n";
  ck_assert_str_eq(text + strlen(text) - strlen(tail), tail);
  tyto_graph_free(g);
}
END_TEST

/* A FUSED node made by the fuse pass shows its program, each value with
 * its dtype: here a bf16 product converted to f32, added to an f32 bias,
 * leaky_relu'd, scaled and converted back to bf16. */
START_TEST(text_dump_of_a_fused_program) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_BF16, 2, (const int64_t[]){4, 8}, "a");
  tyto_tensor *b = tyto_input(g, TYTO_BF16, 2, (const int64_t[]){8, 16}, "b");
  tyto_tensor *bias = tyto_input(g, TYTO_F32, 1, (const int64_t[]){16}, NULL);
  tyto_tensor *h = tyto_add(tyto_cast(tyto_matmul(a, b, 0, 0), TYTO_F32), bias);
  tyto_tensor *y =
      tyto_cast(tyto_mul(tyto_leaky_relu(h, 0.25), tyto_scalar(g, TYTO_F32, 2)),
                TYTO_BF16);
  pass_graph in = {g, 1, &y}, out = {NULL, 0, NULL};
  tyto_tensor *map[16];
  pass_options opt = {1, 0, NULL, 0, NULL};
  char msg[256] = "";
  ck_assert_uint_le(g->n_nodes, 16);
  ck_assert_int_eq(pass_fuse(&in, &out, map, &opt, msg, sizeof msg), 5);
  ck_assert_str_eq(captured(tyto_graph_write_text, out.g),
                   "  0 input bf16[4,8] 'a'\n"
                   "  1 input bf16[8,16] 'b'\n"
                   "  2 input f32[16]\n"
                   "  3 matmul bf16[4,16] <- #0 #1 i=[0,0]\n"
                   "  4 fused bf16[4,16] <- #3 #2 {v0=in0 bf16; v1=in1 f32; "
                   "v2=cast(v0) f32; v3=add(v2,v1) f32; "
                   "v4=leaky_relu(v3;0.25) f32; v5=const(2) f32; "
                   "v6=mul(v4,v5) f32; v7=cast(v6) bf16; out0=v7 bf16}\n"
                   "  5 full f32[] f=[2]\n");
  pass_graph_free(&out);
  tyto_graph_free(g);
}
END_TEST

START_TEST(dot_export) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *out = build(g);
  dot_outputs = &out;
  dot_n_outputs = 1;
  ck_assert_str_eq(
      captured(write_dot, g),
      "digraph tyto {\n"
      "  node [fontname=\"Helvetica\"];\n"
      "  n0 [shape=box, label=\"#0 input x\\n[8,4] f32\"];\n"
      "  n1 [shape=box, style=filled, fillcolor=gray85, "
      "label=\"#1 parameter y\\n[1,4] f32\"];\n"
      "  n2 [shape=ellipse, label=\"#2 mul\\n[8,4] f32\"];\n"
      "  n3 [shape=ellipse, label=\"#3 sin\\n[8,4] f32\"];\n"
      "  n4 [shape=note, label=\"#4 full\\n[] f32\"];\n"
      "  n5 [shape=ellipse, label=\"#5 mul\\n[8,4] f32\"];\n"
      "  n6 [shape=ellipse, peripheries=2, label=\"#6 sum\\n[4] f32\"];\n"
      "  n0 -> n2;\n"
      "  n1 -> n2;\n"
      "  n2 -> n3;\n"
      "  n3 -> n5;\n"
      "  n4 -> n5;\n"
      "  n5 -> n6;\n"
      "}\n");
  /* names are escaped for dot */
  tyto_tensor_set_name(out, "say \"hi\"\\");
  dot_n_outputs = 0;
  dot_outputs = NULL;
  ck_assert_msg_contains(captured(write_dot, g),
                         "label=\"#6 sum say \\\"hi\\\"\\\\\\n[4] f32\"");
  tyto_graph_free(g);
}
END_TEST

START_TEST(export_failures) {
  tyto_graph *g = tyto_graph_new(), *h = tyto_graph_new();
  build(g);
  tyto_tensor *other = tyto_scalar(h, TYTO_F32, 1);
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(tyto_graph_write_dot(g, f, 1, &other),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(),
                   "graph dot: output 1 is a tensor of another graph");
  tyto_tensor *err = tyto_graph_error_tensor(g);
  ck_assert_int_eq(tyto_graph_write_dot(g, f, 1, &err),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "graph dot: output 1 is the error tensor");
  /* NULL arguments are refused, not written through. */
  ck_assert_int_eq(tyto_graph_write_dot(g, NULL, 0, NULL),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "graph dot: the stream f is NULL");
  ck_assert_int_eq(tyto_graph_write_dot(NULL, f, 0, NULL),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "graph dot: the graph is NULL");
  ck_assert_int_eq(tyto_graph_write_text(g, NULL), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "graph text: the stream f is NULL");
  ck_assert_int_eq(tyto_graph_write_text(NULL, f), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "graph text: the graph is NULL");
  fclose(f);
  ck_assert_int_eq(
      tyto_graph_save_dot(g, "/nonexistent-tyto-dir/g.dot", 0, NULL),
      TYTO_ERR_IO);
  ck_assert_str_eq(tyto_errmsg(), "graph dot: cannot create a file beside "
                                  "'/nonexistent-tyto-dir/g.dot': No such "
                                  "file or directory");
  /* A device is not replaced by a file. */
  ck_assert_int_eq(tyto_graph_save_dot(g, "/dev/null", 0, NULL),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "graph dot: '/dev/null' is a character "
                                  "device, not a regular file; give the "
                                  "path of a file");
  struct stat dn;
  ck_assert_int_eq(stat("/dev/null", &dn), 0);
  ck_assert(S_ISCHR(dn.st_mode));
  /* A failed save leaves an existing file exactly as it was. */
  {
    char keep[] = "/tmp/tyto-test-keep-XXXXXX";
    int kfd = mkstemp(keep);
    ck_assert_int_ge(kfd, 0);
    ck_assert_int_eq(write(kfd, "digraph good {}\n", 16), 16);
    close(kfd);
    ck_assert_int_eq(tyto_graph_save_dot(g, keep, 1, &err),
                     TYTO_ERR_INVALID_ARGUMENT);
    FILE *k = fopen(keep, "r");
    char kept[64] = "";
    ck_assert_ptr_nonnull(fgets(kept, sizeof kept, k));
    fclose(k);
    ck_assert_str_eq(kept, "digraph good {}\n");
    remove(keep);
  }
  FILE *full = fopen("/dev/full", "w");
  if (full) {
    ck_assert_int_eq(tyto_graph_write_text(g, full), TYTO_ERR_IO);
    ck_assert_str_eq(tyto_errmsg(),
                     "graph text: writing failed: No space left on device");
    fclose(full);
  }
  /* saving to a path writes the same text as writing to a stream */
  char path[] = "/tmp/tyto-test-dot-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(tyto_graph_save_dot(g, path, 0, NULL), TYTO_OK);
  FILE *r = fopen(path, "r");
  ck_assert_ptr_nonnull(r);
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, r);
  buf[n] = '\0';
  fclose(r);
  remove(path);
  dot_outputs = NULL;
  dot_n_outputs = 0;
  ck_assert_str_eq(buf, captured(write_dot, g));
  tyto_graph_free(h);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("graph_export");
  TCase *tc = tcase_create("export");
  tcase_add_test(tc, text_dump);
  tcase_add_test(tc, text_dump_of_a_fused_program);
  tcase_add_test(tc, dot_export);
  tcase_add_test(tc, export_failures);
  suite_add_tcase(s, tc);
  return test_run(s);
}
