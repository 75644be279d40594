/*
 * The compiled program as Graphviz dot, after the memory-reuse figures of
 * Owl's computation-graph chapter (seeds 002/004): one node per slot, and
 * one fill colour per arena block, so tensors that share memory share a
 * colour. Pinned tensors (inputs, parameters, constants, outputs) are
 * white; fused nodes show their instruction and output counts. A program
 * over several devices draws one cluster per device, and each copy
 * between devices as a node of its own reached by a dashed edge.
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

/* A memory block: an offset in one device's arena. */
typedef struct block {
  uint32_t dev;
  uint64_t off;
} block;

static int cmp_block(const void *a, const void *b) {
  const block *x = a, *y = b;
  if (x->dev != y->dev)
    return x->dev < y->dev ? -1 : 1;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* Index of block k among the sorted distinct blocks. */
static size_t block_of(const block *bl, size_t n, block k) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cmp_block(&bl[mid], &k) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void write_slot(FILE *f, const tyto_program *p, size_t s,
                       const block *bl, size_t blocks, const char *indent) {
  const exec_slot *sl = &p->slots[s];
  const tyto_tensor *t = sl->t;
  char shape[SHAPE_STR], colour[32] = "white";
  if (!sl->owned) {
    /* Golden-ratio hues keep neighbouring blocks apart. */
    block k = {sl->dev, sl->offset};
    double h = (double)block_of(bl, blocks, k) * 0.618033988749895;
    snprintf(colour, sizeof colour, "%.3f 0.45 0.95", h - (double)(long)h);
  }
  fprintf(f, "%sn%zu [shape=%s, fillcolor=\"%s\", label=\"#%zu %s%s", indent, s,
          sl->src >= 0                    ? "cds"
          : t->kind == TYTO_KIND_COMPUTED ? "ellipse"
                                          : "box",
          colour, s, sl->src >= 0 ? "copy of " : "", tyto_op_name(t->op));
  if (t->op == TYTO_OP_FUSED)
    fprintf(f, " (%zu instrs, %" PRId64 " outputs)", t->n_fattrs, t->iattrs[0]);
  fprintf(f, "\\n%s %s", tensor_shape_str(shape, t), tyto_dtype_name(t->dtype));
  if (!sl->owned)
    fprintf(f, "\\n@%" PRIu64 " +%" PRIu64, sl->offset, sl->bytes);
  fputs("\"];\n", f);
}

static tyto_status write_program_dot(FILE *f, const void *ctx) {
  const tyto_program *p = ctx;
  size_t ns1 = p->n_slots ? p->n_slots : 1;
  block *bl = malloc(ns1 * sizeof *bl);
  /* The copies of each slot on other devices: a list through next. */
  int *first = malloc(ns1 * sizeof *first), *next = malloc(ns1 * sizeof *next);
  if (!bl || !first || !next) {
    free(bl);
    free(first);
    free(next);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "program dot: out of memory");
  }
  size_t n = 0;
  for (size_t s = 0; s < p->n_slots; s++) {
    first[s] = next[s] = -1;
    if (!p->slots[s].owned)
      bl[n++] = (block){p->slots[s].dev, p->slots[s].offset};
  }
  for (size_t s = p->n_slots; s-- > 0;)
    if (p->slots[s].src >= 0) {
      next[s] = first[p->slots[s].src];
      first[p->slots[s].src] = (int)s;
    }
  qsort(bl, n, sizeof *bl, cmp_block);
  size_t blocks = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || cmp_block(&bl[i], &bl[blocks - 1]) != 0)
      bl[blocks++] = bl[i];
  errno = 0;
  fprintf(f,
          "digraph tyto_program {\n"
          "  label=\"%zu tensors, %zu memory blocks; planned %" PRIu64
          " bytes (naive %" PRIu64 ", lower bound %" PRIu64 ")%s\";\n"
          "  node [fontname=\"Helvetica\", style=filled];\n",
          p->n_slots, blocks, p->stats.planned_bytes, p->stats.naive_bytes,
          p->stats.lower_bound_bytes,
          p->n_devs > 1 ? "; one cluster per device" : "");
  if (p->n_devs == 1) {
    for (size_t s = 0; s < p->n_slots; s++)
      write_slot(f, p, s, bl, blocks, "  ");
  } else {
    for (uint32_t d = 0; d < p->n_devs; d++) {
      fprintf(f, "  subgraph cluster_%u {\n    label=\"%s\";\n", d,
              exec_dev_id(p, d));
      for (size_t s = 0; s < p->n_slots; s++)
        if (p->slots[s].dev == d)
          write_slot(f, p, s, bl, blocks, "    ");
      fputs("  }\n", f);
    }
  }
  for (size_t s = 0; s < p->n_slots; s++) {
    const exec_slot *sl = &p->slots[s];
    if (sl->src >= 0) {
      fprintf(f, "  n%d -> n%zu [style=dashed, label=\"%" PRIu64 " B\"];\n",
              sl->src, s, sl->bytes);
      continue;
    }
    const tyto_tensor *t = sl->t;
    if (t->op == TYTO_OP_CONSTANT)
      continue;
    for (size_t j = 0; j < t->n_inputs; j++) {
      int from = p->slot_of[t->inputs[j]->index];
      if (from < 0)
        continue;
      /* Read through its copy on this slot's device, if it has one. */
      for (int c = first[from]; c >= 0; c = next[c])
        if (p->slots[c].dev == sl->dev)
          from = c;
      fprintf(f, "  n%d -> n%zu;\n", from, s);
    }
  }
  fputs("}\n", f);
  free(bl);
  free(first);
  free(next);
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
