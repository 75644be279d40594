/* Helpers shared by the graph suites. */
#ifndef TYTO_TESTS_GRAPH_TEST_H
#define TYTO_TESTS_GRAPH_TEST_H

#include "common.h"

#include "graph/shape.h"

/* "[2,3]" for t, or "error: <message>" when t is an error tensor. */
static inline const char *sh(tyto_tensor *t) {
  static char buf[4][SHAPE_STR + 600];
  static int next;
  char *b = buf[next++ % 4];
  if (tyto_tensor_is_error(t))
    snprintf(b, sizeof buf[0], "error: %s",
             tyto_graph_error_message(tyto_tensor_graph(t)));
  else
    tensor_shape_str(b, t);
  return b;
}

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define AX(...) ((const int[]){__VA_ARGS__})
#define IN(g, r, ...) tyto_input((g), TYTO_F32, (r), S(__VA_ARGS__), NULL)

#endif
