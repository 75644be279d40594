/* Shapes: formatting for messages, validation, NumPy broadcasting, axes. */
#ifndef TYTO_GRAPH_SHAPE_H
#define TYTO_GRAPH_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"

/* Room for "[e0,...,e7]" with 20-digit extents, and a "^T" or dtype. */
#define SHAPE_STR 200

/* Writes "[64,784]" ("[]" for rank 0) into buf and returns buf. */
char *shape_str(char *buf, int rank, const int64_t *shape);
/* The same for a tensor's shape. */
char *tensor_shape_str(char *buf, const tyto_tensor *t);

int64_t shape_numel(int rank, const int64_t *shape);

/* Checks a caller's shape argument for op `name`: rank in 0..8, shape not
 * NULL when rank > 0, extents >= 0. 0, or -1 after graph_fail(). */
int shape_check(tyto_graph *g, const char *name, int rank,
                const int64_t *shape);

/* NumPy broadcast of two shapes into out (rank *out_rank). 0 or -1 when
 * they cannot be broadcast. */
int shape_broadcast(int ra, const int64_t *a, int rb, const int64_t *b,
                    int *out_rank, int64_t *out);

/* Normalises an axis of a rank-`rank` tensor (negative counts from the
 * end) into *out; -1 after graph_fail("<name>: axis A out of range for
 * [..]") using x's shape. */
int shape_axis(tyto_graph *g, const char *name, const tyto_tensor *x, int axis,
               int *out);

/* Normalises n axes into a set: mask bit i set for axis i. axes NULL: all
 * axes. -1 after graph_fail() for an out-of-range or repeated axis. */
int shape_axes(tyto_graph *g, const char *name, const tyto_tensor *x, int n,
               const int *axes, unsigned *mask);

#endif
