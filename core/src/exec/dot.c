/*
 * The compiled program as Graphviz dot, after the memory-reuse figures of
 * Owl's computation-graph chapter (seeds 002/004): one node per slot, and
 * one fill colour per arena block, so tensors that share memory share a
 * colour. Pinned tensors (inputs, parameters, constants, outputs) are
 * white; fused nodes show their instruction and output counts.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program.h"
#include "../graph/shape.h"
#include "../runtime/error.h"

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Index of offset o among the sorted distinct offsets. */
static size_t block_of(const uint64_t *offs, size_t n, uint64_t o) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (offs[mid] < o)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static tyto_status write_program_dot(FILE *f, const void *ctx) {
  const tyto_program *p = ctx;
  uint64_t *offs = malloc((p->n_slots ? p->n_slots : 1) * sizeof *offs);
  if (!offs)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "program dot: out of memory");
  size_t n = 0;
  for (size_t s = 0; s < p->n_slots; s++)
    if (!p->slots[s].owned)
      offs[n++] = p->slots[s].offset;
  qsort(offs, n, sizeof *offs, cmp_u64);
  size_t blocks = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || offs[i] != offs[blocks - 1])
      offs[blocks++] = offs[i];
  errno = 0;
  fprintf(f,
          "digraph tyto_program {\n"
          "  label=\"%zu tensors, %zu memory blocks; planned %" PRIu64
          " bytes (naive %" PRIu64 ", lower bound %" PRIu64 ")\";\n"
          "  node [fontname=\"Helvetica\", style=filled];\n",
          p->n_slots, blocks, p->stats.planned_bytes, p->stats.naive_bytes,
          p->stats.lower_bound_bytes);
  for (size_t s = 0; s < p->n_slots; s++) {
    const exec_slot *sl = &p->slots[s];
    const tyto_tensor *t = sl->t;
    char shape[SHAPE_STR], colour[32] = "white";
    if (!sl->owned) {
      /* Golden-ratio hues keep neighbouring blocks apart. */
      double h = (double)block_of(offs, blocks, sl->offset) * 0.618033988749895;
      snprintf(colour, sizeof colour, "%.3f 0.45 0.95", h - (double)(long)h);
    }
    fprintf(f, "  n%zu [shape=%s, fillcolor=\"%s\", label=\"#%zu %s", s,
            t->kind == TYTO_KIND_COMPUTED ? "ellipse" : "box", colour, s,
            tyto_op_name(t->op));
    if (t->op == TYTO_OP_FUSED)
      fprintf(f, " (%zu instrs, %" PRId64 " outputs)", t->n_fattrs,
              t->iattrs[0]);
    fprintf(f, "\\n%s %s", tensor_shape_str(shape, t),
            tyto_dtype_name(t->dtype));
    if (!sl->owned)
      fprintf(f, "\\n@%" PRIu64 " +%" PRIu64, sl->offset, sl->bytes);
    fputs("\"];\n", f);
  }
  for (size_t s = 0; s < p->n_slots; s++) {
    const tyto_tensor *t = p->slots[s].t;
    for (size_t j = 0; j < t->n_inputs; j++) {
      int from = p->slot_of[t->inputs[j]->index];
      if (from >= 0)
        fprintf(f, "  n%d -> n%zu;\n", from, s);
    }
  }
  fputs("}\n", f);
  free(offs);
  if (fflush(f) != 0 || ferror(f))
    return rt_fail(TYTO_ERR_IO, "program dot: writing failed: %s",
                   strerror(errno ? errno : EIO));
  return TYTO_OK;
}

tyto_status tyto_program_export_dot(const tyto_program *p, const char *path) {
  if (!p || !path)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_program_export_dot: %s is NULL",
                   p ? "path" : "program");
  return export_atomic(path, "program dot", write_program_dot, p);
}
