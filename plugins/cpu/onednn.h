/*
 * oneDNN in the CPU plugin: the one engine the convolutions and the 16-bit
 * matmul share, running a primitive on bound pointers, and the line of the
 * device description that says which path bf16 and f16 GEMMs take here.
 */
#ifndef TYTO_PLUGIN_CPU_ONEDNN_H
#define TYTO_PLUGIN_CPU_ONEDNN_H

#include <stddef.h>

#ifdef TYTO_HAVE_DNNL
#include <dnnl.h>
#endif

/* Whether TYTO_CPU_NO_DNNL is set (non-empty and not "0"): every op then
 * takes its portable path. Read at each prepare. */
int cpu_dnnl_off(void);

/* Writes how bf16 and f16 MATMUL and convolutions run on this machine
 * (oneDNN's bf16 kernels, or converted to f32), with the CPU's AVX512-BF16
 * and AMX support, into buf: one line for the device description. */
void cpu_gemm16_describe(char *buf, size_t size);

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
#endif

#endif
