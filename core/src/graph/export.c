/* Export of a graph: Graphviz dot (after the figures of Owl's computation
 * graph chapter) and a one-line-per-tensor text dump. */
#include "config.h"

#include <tyto/plugin.h>

#include "node.h"
#include "shape.h"
#include "../runtime/error.h"
#include "../runtime/file.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes s with the characters dot strings need escaped. */
static void dot_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fputc('\\', f);
    if (*s == '\n')
      fputs("\\n", f);
    else
      fputc(*s, f);
  }
}

static const char *dot_style(const tyto_tensor *t) {
  switch (t->kind) {
  case TYTO_KIND_INPUT: return "shape=box";
  case TYTO_KIND_PARAMETER: return "shape=box, style=filled, fillcolor=gray85";
  case TYTO_KIND_CONSTANT: return "shape=note";
  default: return "shape=ellipse";
  }
}

static int is_output(const tyto_tensor *t, size_t n,
                     tyto_tensor *const *outputs) {
  for (size_t i = 0; i < n; i++)
    if (outputs[i] == t)
      return 1;
  return 0;
}

static tyto_status finish(FILE *f, const char *what) {
  if (fflush(f) != 0 || ferror(f))
    return rt_fail(TYTO_ERR_IO, "%s: writing failed: %s", what,
                   strerror(errno ? errno : EIO));
  return TYTO_OK;
}

tyto_status tyto_graph_write_dot(const tyto_graph *g, FILE *f, size_t n_outputs,
                                 tyto_tensor *const *outputs) {
  if (!g || !f)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "graph dot: %s is NULL",
                   !g ? "the graph" : "the stream f");
  for (size_t i = 0; i < n_outputs; i++)
    if (!outputs || !outputs[i] || outputs[i]->graph != g ||
        outputs[i]->kind == TYTO_KIND_ERROR)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "graph dot: output %zu is %s",
                     i + 1,
                     !outputs || !outputs[i]  ? "NULL"
                     : outputs[i]->graph != g ? "a tensor of another graph"
                                              : "the error tensor");
  errno = 0;
  fputs("digraph tyto {\n  node [fontname=\"Helvetica\"];\n", f);
  for (size_t i = 0; i < g->n_nodes; i++) {
    const tyto_tensor *t = g->nodes[i];
    char s[SHAPE_STR];
    fprintf(f, "  n%zu [%s%s, label=\"#%zu %s", i, dot_style(t),
            is_output(t, n_outputs, outputs) ? ", peripheries=2" : "", i,
            tyto_op_name(t->op));
    if (t->name) {
      fputc(' ', f);
      dot_escaped(f, t->name);
    }
    fprintf(f, "\\n%s %s\"];\n", tensor_shape_str(s, t),
            tyto_dtype_name(t->dtype));
  }
  for (size_t i = 0; i < g->n_nodes; i++) {
    const tyto_tensor *t = g->nodes[i];
    for (size_t j = 0; j < t->n_inputs; j++)
      fprintf(f, "  n%" PRId64 " -> n%zu;\n", t->inputs[j]->index, i);
  }
  fputs("}\n", f);
  return finish(f, "graph dot");
}

tyto_status export_atomic(const char *path, const char *what,
                          tyto_status (*write)(FILE *, const void *),
                          const void *ctx) {
  rt_replace r;
  const char *why = NULL, *step = NULL;
  int rc = rt_replace_open(&r, path, &why);
  if (rc != 0)
    return rt_replace_fail(what, path, why, rc);
  FILE *f = rt_replace_stream(&r);
  if (!f) {
    int err = errno;
    rt_replace_abort(&r);
    return rt_fail(TYTO_ERR_IO, "%s: %s", what, strerror(err));
  }
  rt_xfsz_guard guard;
  rt_xfsz_block(&guard);
  tyto_status st = write(f, ctx);
  if (st != TYTO_OK) {
    rt_replace_abort(&r);
  } else if (rt_replace_commit(&r, 0, &why, &step) != 0) {
    st = strcmp(step, "sync") == 0
             ? rt_fail(TYTO_ERR_IO,
                       "%s: '%s' was written but its directory could not be "
                       "synced: %s",
                       what, path, why)
             : rt_fail(TYTO_ERR_IO,
                       "%s: writing '%s' failed: %s; it is "
                       "unchanged",
                       what, path, why);
  }
  rt_xfsz_restore(&guard);
  return st;
}

typedef struct dot_args {
  const tyto_graph *g;
  size_t n_outputs;
  tyto_tensor *const *outputs;
} dot_args;

static tyto_status write_graph_dot(FILE *f, const void *ctx) {
  const dot_args *a = ctx;
  return tyto_graph_write_dot(a->g, f, a->n_outputs, a->outputs);
}

tyto_status tyto_graph_save_dot(const tyto_graph *g, const char *path,
                                size_t n_outputs, tyto_tensor *const *outputs) {
  if (!g || !path)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "graph dot: graph and path must not be NULL");
  dot_args a = {g, n_outputs, outputs};
  return export_atomic(path, "graph dot", write_graph_dot, &a);
}

/* A FUSED node's program, one instruction after another with the dtype
 * of its value: " {v0=in0 bf16; v1=cast(v0) f32; v2=const(0.5) f32;
 * v3=add(v1,v2) f32; out0=v3 f32}". */
static void write_program(FILE *f, const tyto_tensor *t) {
  size_t n = fused_n_instrs(t);
  fputs(" {", f);
  for (size_t i = 0; i < n; i++) {
    int64_t op = fused_field(t, i, FUSED_OP),
            a0 = fused_field(t, i, FUSED_ARG0);
    const char *dt =
        tyto_dtype_name((tyto_dtype)fused_field(t, i, FUSED_DTYPE));
    if (i)
      fputs("; ", f);
    if (op == TYTO_PLUGIN_FUSED_INPUT) {
      fprintf(f, "v%zu=in%" PRId64 " %s", i, a0, dt);
    } else if (op == TYTO_PLUGIN_FUSED_CONST) {
      fprintf(f, "v%zu=const(%.17g) %s", i, t->fattrs[i], dt);
    } else if (op == TYTO_PLUGIN_FUSED_OUTPUT) {
      fprintf(f, "out%" PRId64 "=v%" PRId64 " %s",
              fused_field(t, i, FUSED_ARG1), a0, dt);
    } else {
      int arity = op >= TYTO_OP_WHERE ? 3 : op >= TYTO_OP_ADD ? 2 : 1;
      fprintf(f, "v%zu=%s(", i, tyto_op_name((tyto_op)op));
      for (int k = 0; k < arity; k++)
        fprintf(f, "%sv%" PRId64, k ? "," : "",
                fused_field(t, i, FUSED_ARG0 + k));
      if (op == TYTO_OP_LEAKY_RELU || op == TYTO_OP_ELU)
        fprintf(f, ";%.17g", t->fattrs[i]);
      fprintf(f, ") %s", dt);
    }
  }
  fputc('}', f);
}

tyto_status tyto_graph_write_text(const tyto_graph *g, FILE *f) {
  if (!g || !f)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "graph text: %s is NULL",
                   !g ? "the graph" : "the stream f");
  errno = 0;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const tyto_tensor *t = g->nodes[i];
    char s[SHAPE_STR];
    fprintf(f, "%3zu %s %s%s", i, tyto_op_name(t->op),
            tyto_dtype_name(t->dtype), tensor_shape_str(s, t));
    if (t->n_inputs)
      fputs(" <-", f);
    for (size_t j = 0; j < t->n_inputs; j++)
      fprintf(f, " #%" PRId64, t->inputs[j]->index);
    if (t->op == TYTO_OP_FUSED) {
      write_program(f, t);
    } else {
      for (size_t j = 0; j < t->n_iattrs; j++)
        fprintf(f, "%s%" PRId64, j ? "," : " i=[", t->iattrs[j]);
      if (t->n_iattrs)
        fputc(']', f);
      for (size_t j = 0; j < t->n_fattrs; j++)
        fprintf(f, "%s%.17g", j ? "," : " f=[", t->fattrs[j]);
      if (t->n_fattrs)
        fputc(']', f);
    }
    if (t->name)
      fprintf(f, " '%s'", t->name);
    fputc('\n', f);
  }
  if (g->status != TYTO_OK)
    fprintf(f, "error: %s\n", g->message);
  return finish(f, "graph text");
}
