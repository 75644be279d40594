/* Tensor queries, names, and the names of kinds and ops (dtypes: dtype.c). */
#include "node.h"

#include <string.h>

const char *tyto_kind_name(tyto_kind kind) {
  switch (kind) {
  case TYTO_KIND_INPUT: return "input";
  case TYTO_KIND_PARAMETER: return "parameter";
  case TYTO_KIND_CONSTANT: return "constant";
  case TYTO_KIND_COMPUTED: return "computed";
  case TYTO_KIND_ERROR: return "error";
  }
  return "?";
}

tyto_graph *tyto_tensor_graph(const tyto_tensor *t) {
  return t->graph;
}

int64_t tyto_tensor_index(const tyto_tensor *t) {
  return t->index;
}

tyto_dtype tyto_tensor_dtype(const tyto_tensor *t) {
  return t->dtype;
}

int tyto_tensor_rank(const tyto_tensor *t) {
  return t->rank;
}

const int64_t *tyto_tensor_shape(const tyto_tensor *t) {
  return t->shape;
}

int64_t tyto_tensor_dim(const tyto_tensor *t, int axis) {
  int a = axis < 0 ? axis + t->rank : axis;
  return a >= 0 && a < t->rank ? t->shape[a] : -1;
}

int64_t tyto_tensor_numel(const tyto_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    n *= t->shape[i];
  return n;
}

tyto_kind tyto_tensor_kind(const tyto_tensor *t) {
  return t->kind;
}

tyto_op tyto_tensor_op(const tyto_tensor *t) {
  return t->op;
}

int tyto_tensor_is_error(const tyto_tensor *t) {
  return t->kind == TYTO_KIND_ERROR;
}

const char *tyto_tensor_name(const tyto_tensor *t) {
  return t->name;
}

void tyto_tensor_set_name(tyto_tensor *t, const char *name) {
  if (t->kind == TYTO_KIND_ERROR)
    return;
  if (!name) {
    t->name = NULL;
    return;
  }
  size_t n = strlen(name) + 1;
  char *copy = graph_alloc(t->graph, n);
  if (!copy) {
    graph_oom(t->graph, "set_name");
    return;
  }
  memcpy(copy, name, n);
  t->name = copy;
}

size_t tyto_tensor_input_count(const tyto_tensor *t) {
  return t->n_inputs;
}

tyto_tensor *tyto_tensor_input(const tyto_tensor *t, size_t i) {
  return i < t->n_inputs ? t->inputs[i] : NULL;
}

size_t tyto_tensor_iattr_count(const tyto_tensor *t) {
  return t->n_iattrs;
}

const int64_t *tyto_tensor_iattrs(const tyto_tensor *t) {
  return t->iattrs;
}

size_t tyto_tensor_fattr_count(const tyto_tensor *t) {
  return t->n_fattrs;
}

const double *tyto_tensor_fattrs(const tyto_tensor *t) {
  return t->fattrs;
}

const void *tyto_tensor_data(const tyto_tensor *t) {
  return t->data;
}

#define PIN_MAX 65534

static int pin_ok(tyto_graph *g, const char *fn, int device) {
  if (device >= -1 && device <= PIN_MAX)
    return 1;
  graph_fail(g, "%s: device %d is not a device index (0..%d) or -1", fn, device,
             PIN_MAX);
  return 0;
}

void tyto_tensor_set_device(tyto_tensor *t, int device) {
  if (!t || t->kind == TYTO_KIND_ERROR ||
      !pin_ok(t->graph, "tyto_tensor_set_device", device))
    return;
  t->pin = (uint32_t)(device + 1);
}

int tyto_tensor_device(const tyto_tensor *t) {
  return t ? (int)t->pin - 1 : -1;
}

int tyto_graph_set_device_scope(tyto_graph *g, int device) {
  if (!g)
    return -1;
  int old = (int)g->scope - 1;
  if (pin_ok(g, "tyto_graph_set_device_scope", device))
    g->scope = (uint32_t)(device + 1);
  return old;
}

int tyto_graph_device_scope(const tyto_graph *g) {
  return g ? (int)g->scope - 1 : -1;
}
