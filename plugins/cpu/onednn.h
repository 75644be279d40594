/*
 * oneDNN in the CPU plugin: the one engine the convolutions and the 16-bit
 * matmul share, running a primitive on bound pointers, and the line of the
 * device description that says which path bf16 and f16 GEMMs take here.
 */
#ifndef TYTO_PLUGIN_CPU_ONEDNN_H
#define TYTO_PLUGIN_CPU_ONEDNN_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#ifdef TYTO_HAVE_DNNL
#include <dnnl.h>
#endif

/* Whether TYTO_CPU_NO_DNNL is set (non-empty and not "0"): every op then
 * takes its portable path. Read at each prepare. */
int cpu_dnnl_off(void);

/* Writes how bf16 and f16 MATMUL and convolutions run on this machine
 * (oneDNN's 16-bit kernels, or converted to f32), with the CPU's
 * AVX512-BF16, AMX and AVX512-FP16 support, into buf: one line for the
 * device description. */
void cpu_gemm16_describe(char *buf, size_t size);

/* oneDNN's threads are OpenMP's (Debian's build), whose team size is the
 * calling thread's: a primitive takes it when it is made (its blocking,
 * its split of long sums) and again when it runs. So that cpu:0's work
 * runs on cpu:0's threads ([cpu] threads), and its bits do not follow
 * OMP_NUM_THREADS, prepare makes primitives between enter (the team for n
 * threads; returns what it replaced) and leave (the caller's team back),
 * and a stream's thread sets n with cpu_dnnl_threads_use before it runs a
 * kernel. No-ops without oneDNN or when its runtime is not OpenMP. */
int cpu_dnnl_threads_enter(unsigned n);
void cpu_dnnl_threads_leave(int prev);
void cpu_dnnl_threads_use(unsigned n);

#ifdef TYTO_HAVE_DNNL
/* The process's CPU engine, made on first use (oneDNN engines are
 * thread-safe); NULL when oneDNN cannot make one. */
dnnl_engine_t cpu_dnnl_engine(void);

/* A primitive attribute with a user scratchpad (the kernel's workspace:
 * oneDNN's own belongs to the thread that made the primitive, and ours
 * run on stream workers); NULL when out of memory. */
dnnl_primitive_attr_t cpu_dnnl_attr(void);

/* The implementation oneDNN picked ("brg:avx512_core_bf16"), and whether
 * it is its reference code ("ref:any"): correct, but slower than f32
 * copies through OpenBLAS by far, so the 16-bit ops refuse it. */
const char *cpu_dnnl_impl(const_dnnl_primitive_desc_t pd);
int cpu_dnnl_is_ref(const_dnnl_primitive_desc_t pd);

/* The primitive descriptor oneDNN prefers for op_desc among those whose
 * implementation's name does not hold `avoid` (NULL: the first it offers),
 * as dnnl_primitive_desc_create would make it; NULL when none. */
dnnl_primitive_desc_t cpu_dnnl_pd_avoiding(const_dnnl_op_desc_t op_desc,
                                           const_dnnl_primitive_attr_t attr,
                                           const_dnnl_primitive_desc_t hint,
                                           const char *avoid);

/* oneDNN's data type for a 16-bit plugin dtype (dnnl_bf16 or dnnl_f16). */
dnnl_data_type_t cpu_dnnl_type16(uint32_t dtype);

/* One argument of a primitive: oneDNN's argument id, the memory
 * descriptor, the data. */
typedef struct cpu_dnnl_arg {
  int arg;
  const dnnl_memory_desc_t *md;
  void *ptr;
} cpu_dnnl_arg;

/* Runs p on the calling thread with n arguments and waits for it; an
 * argument with a NULL pointer (an empty scratchpad) is left out. */
dnnl_status_t cpu_dnnl_exec(dnnl_primitive_t p, int n, const cpu_dnnl_arg *a);

/* oneDNN's data type for a plugin dtype it has (F32, BF16, F16). */
dnnl_data_type_t cpu_dnnl_type(uint32_t dtype);

/* A MATMUL C = op(A) op(B) on oneDNN's matmul primitive (matmul.c for
 * big f32 GEMMs, matmul16.c for bf16 and f16). */
typedef struct cpu_dnnl_mm {
  dnnl_primitive_t prim;         /* NULL until cpu_dnnl_mm_make succeeds */
  int swap;                      /* computes C^T = B^T A^T */
  dnnl_memory_desc_t md[3];      /* A, B, C as oneDNN reads them */
  dnnl_memory_desc_t scratch_md; /* its user scratchpad */
  char impl[64];                 /* the implementation, "brg:avx512_core" */
} cpu_dnnl_mm;

/* Makes the primitive for the bound layouts l (A, B, C: MATMUL's, batch
 * axes broadcast by NumPy rules, right-aligned to C's) with the transpose
 * flags t of A and B. Each operand is described by its strides over C's
 * batch axes (extent 1 where it broadcasts) and its matrix axes, swapped
 * where transposed; a column-major C turns the product around. Returns 1
 * when oneDNN gave a kernel whose implementation name starts with `want`
 * (NULL: any that is not its reference code); 0 when it offered none
 * (impl then names what it offered instead, "" for nothing: a negative
 * stride, or strides it does not take); -1 when it could not make the one
 * it offered, or allocate the request (out of memory). *mm is empty but
 * for impl unless 1 is returned. */
int cpu_dnnl_mm_make(cpu_dnnl_mm *mm, const tyto_plugin_layout *const l[3],
                     const int t[2], const char *want);

/* Bytes of workspace the primitive needs for its scratchpad. */
uint64_t cpu_dnnl_mm_scratch_bytes(const cpu_dnnl_mm *mm);

/* Runs it on A, B, C at their first elements (the layouts' offsets
 * applied) and the scratchpad (NULL when it needs no bytes). */
dnnl_status_t cpu_dnnl_mm_run(const cpu_dnnl_mm *mm, void *a, void *b, void *c,
                              void *scratch);

void cpu_dnnl_mm_free(cpu_dnnl_mm *mm);
#endif

#endif
