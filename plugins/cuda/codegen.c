/*
 * CUDA C++ source for the plugin's kernels. A kernel is specialised on what
 * changes its code — op, element type, rank, index width — and takes shape,
 * strides, offsets and the fill value as a by-value argument struct, so one
 * compiled module serves every tensor of the same rank and type and the
 * per-device cache (keyed by the source text) stays small.
 *
 * Each thread of a grid-stride loop turns its linear output index into
 * coordinates (row-major, last dimension fastest) and from them into input
 * and output element offsets; strides may be zero or negative.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_plugin.h"

/* The generated struct tyto_args below has these 28 eight-byte fields. */
_Static_assert(sizeof(tcu_args) == 28 * 8,
               "tcu_args must match struct tyto_args in generated kernels");

typedef struct sbuf {
  char *text;
  size_t len, cap;
  int failed;
} sbuf;

static void put(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void put(sbuf *b, const char *fmt, ...) {
  va_list ap;
  int n;
  if (b->failed)
    return;
  for (;;) {
    size_t room = b->cap - b->len;
    va_start(ap, fmt);
    n = vsnprintf(b->text ? b->text + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = 1;
      return;
    }
    if ((size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 2048;
    while (cap - b->len <= (size_t)n)
      cap *= 2;
    char *t = realloc(b->text, cap);
    if (t == NULL) {
      b->failed = 1;
      return;
    }
    b->text = t;
    b->cap = cap;
  }
}

/* Unsigned integers of the element's size: a copy moves bits, so one kernel
 * serves every dtype of a size (f32 and i32, f16 and bf16, ...). */
static const char *bits_type(size_t elem_size) {
  switch (elem_size) {
  case 1: return "unsigned char";
  case 2: return "unsigned short";
  case 4: return "unsigned int";
  case 8: return "unsigned long long";
  default: return NULL;
  }
}

char *tcu_codegen(uint32_t op, uint32_t dtype, size_t elem_size, uint32_t rank,
                  int idx32) {
  sbuf b = {NULL, 0, 0, 0};
  const char *elem;
  int copy = op == TYTO_PLUGIN_OP_COPY;

  if (rank > TYTO_PLUGIN_MAX_RANK)
    return NULL;
  if (copy)
    elem = bits_type(elem_size);
  else if (op == TYTO_PLUGIN_OP_FILL && dtype == TYTO_PLUGIN_DTYPE_F32)
    elem = "float";
  else if (op == TYTO_PLUGIN_OP_FILL && dtype == TYTO_PLUGIN_DTYPE_F64)
    elem = "double";
  else
    elem = NULL;
  if (elem == NULL)
    return NULL;

  put(&b, "/* tyto cuda plugin: %s of %s, rank %u, %d-bit indexing */\n",
      copy ? "copy" : "fill", elem, rank, idx32 ? 32 : 64);
  put(&b, "typedef %s tyto_elem;\n", elem);
  put(&b, "typedef %s tyto_idx;\n", idx32 ? "int" : "long long");
  /* Must match tcu_args in cuda_plugin.h field for field. */
  put(&b,
      "struct tyto_args {\n"
      "  long long n;\n"
      "  long long shape[%d];\n"
      "  long long in_stride[%d];\n"
      "  long long out_stride[%d];\n"
      "  long long in_offset;\n"
      "  long long out_offset;\n"
      "  double value;\n"
      "};\n",
      TYTO_PLUGIN_MAX_RANK, TYTO_PLUGIN_MAX_RANK, TYTO_PLUGIN_MAX_RANK);
  put(&b, "extern \"C\" __global__ void __launch_bounds__(%d)\n", TCU_BLOCK);
  if (copy)
    put(&b, "tyto_kernel(const tyto_elem *in, tyto_elem *out, "
            "const tyto_args a)\n{\n");
  else
    put(&b, "tyto_kernel(tyto_elem *out, const tyto_args a)\n{\n");
  put(&b, "  const long long step = (long long)blockDim.x * gridDim.x;\n"
          "  for (long long i = (long long)blockIdx.x * blockDim.x + "
          "threadIdx.x;\n"
          "       i < a.n; i += step) {\n");
  put(&b, "    tyto_idx dst = (tyto_idx)a.out_offset;\n");
  if (copy)
    put(&b, "    tyto_idx src = (tyto_idx)a.in_offset;\n");
  if (rank > 0)
    put(&b, "    tyto_idx rem = (tyto_idx)i;\n");
  for (uint32_t k = rank; k-- > 1;) {
    put(&b,
        "    {\n"
        "      tyto_idx c = rem %% (tyto_idx)a.shape[%u];\n"
        "      rem /= (tyto_idx)a.shape[%u];\n"
        "      dst += c * (tyto_idx)a.out_stride[%u];\n",
        k, k, k);
    if (copy)
      put(&b, "      src += c * (tyto_idx)a.in_stride[%u];\n", k);
    put(&b, "    }\n");
  }
  /* What is left of the index after the inner dimensions is dimension 0's
   * coordinate: no division needed. */
  if (rank > 0) {
    put(&b, "    dst += rem * (tyto_idx)a.out_stride[0];\n");
    if (copy)
      put(&b, "    src += rem * (tyto_idx)a.in_stride[0];\n");
  }
  if (copy)
    put(&b, "    out[dst] = in[src];\n");
  else
    put(&b, "    out[dst] = (tyto_elem)a.value;\n");
  put(&b, "  }\n}\n");

  if (b.failed) {
    free(b.text);
    return NULL;
  }
  return b.text;
}
