/* Checks that build each expression in a fresh graph and expect its exact
 * message: the graph's status keeps the first one, so every check starts
 * anew. For the suites of graph-building errors (test_errors, test_int). */
#ifndef TYTO_TESTS_GRAPH_FRESH_GRAPH_H
#define TYTO_TESTS_GRAPH_FRESH_GRAPH_H

#include "common.h"

#include <stdint.h>

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define AX(...) ((const int[]){__VA_ARGS__})

static tyto_graph *g;

static tyto_graph *fresh(void) {
  tyto_graph_free(g);
  g = tyto_graph_new();
  ck_assert_ptr_nonnull(g);
  return g;
}

/* The checked fixture's teardown. */
static void teardown(void) {
  tyto_graph_free(g);
  g = NULL;
}

static tyto_tensor *in(tyto_dtype dt, int rank, const int64_t *shape) {
  return tyto_input(g, dt, rank, shape, NULL);
}

static void expect_error(tyto_tensor *t, const char *msg, int line) {
  ck_assert_msg(t == tyto_graph_error_tensor(g),
                "line %d: expected the error tensor for \"%s\"", line, msg);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strcmp(tyto_graph_error_message(g), msg) == 0,
                "line %d: expected\n  \"%s\"\ngot\n  \"%s\"", line, msg,
                tyto_graph_error_message(g));
}

/* FAILS(expression built in a fresh graph g, exact message) */
#define FAILS(expr, msg)                                                       \
  do {                                                                         \
    fresh();                                                                   \
    expect_error((expr), (msg), __LINE__);                                     \
  } while (0)

#endif
