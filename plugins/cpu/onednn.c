/*
 * oneDNN in the CPU plugin: see onednn.h.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <tyto/plugin.h>

#include "../common/common.h"
#include "onednn.h"

int cpu_dnnl_off(void) {
  return tpc_env_on("TYTO_CPU_NO_DNNL");
}

/* What CPUID says of the 16-bit arithmetic instructions. */
static void cpu_features(int *avx512_bf16, int *amx_bf16, int *avx512_fp16) {
  *avx512_bf16 = *amx_bf16 = *avx512_fp16 = 0;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, NULL) < 7)
    return;
  __cpuid_count(7, 0, a, b, c, d);
  *amx_bf16 = (d >> 22) & 1;    /* AMX-BF16 */
  *avx512_fp16 = (d >> 23) & 1; /* AVX512-FP16 */
  if (a >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    *avx512_bf16 = (a >> 5) & 1; /* AVX512_BF16 */
  }
#endif
}

#ifdef TYTO_HAVE_DNNL
static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_init(void) {
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
    engine = NULL;
}

/* The engine goes when the plugin is unloaded (the plugin ABI has no
 * per-process hook for it; kernels using it are all released by then). */
__attribute__((destructor)) static void engine_fini(void) {
  if (engine)
    dnnl_engine_destroy(engine);
  engine = NULL;
}

dnnl_engine_t cpu_dnnl_engine(void) {
  pthread_once(&engine_once, engine_init);
  return engine;
}

dnnl_primitive_attr_t cpu_dnnl_attr(void) {
  dnnl_primitive_attr_t attr = NULL;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success)
    return NULL;
  if (dnnl_primitive_attr_set_scratchpad_mode(
          attr, dnnl_scratchpad_mode_user) != dnnl_success) {
    dnnl_primitive_attr_destroy(attr);
    return NULL;
  }
  return attr;
}

const char *cpu_dnnl_impl(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) !=
          dnnl_success ||
      !impl)
    return "unknown";
  return impl;
}

dnnl_data_type_t cpu_dnnl_type16(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F16 ? dnnl_f16 : dnnl_bf16;
}

int cpu_dnnl_is_ref(const_dnnl_primitive_desc_t pd) {
  return strncmp(cpu_dnnl_impl(pd), "ref", 3) == 0;
}

dnnl_status_t cpu_dnnl_exec(dnnl_primitive_t p, int n, const cpu_dnnl_arg *a) {
  dnnl_engine_t eng = cpu_dnnl_engine();
  dnnl_memory_t mem[8] = {NULL};
  dnnl_exec_arg_t ea[8];
  dnnl_status_t st = eng && n <= 8 ? dnnl_success : dnnl_runtime_error;
  int made = 0;
  for (int i = 0; i < n && st == dnnl_success; i++) {
    if (!a[i].ptr)
      continue;
    st = dnnl_memory_create(&mem[made], a[i].md, eng, a[i].ptr);
    ea[made].arg = a[i].arg;
    ea[made].memory = mem[made];
    made += st == dnnl_success;
  }
  dnnl_stream_t s = NULL;
  if (st == dnnl_success)
    st = dnnl_stream_create(&s, eng, dnnl_stream_default_flags);
  if (st == dnnl_success)
    st = dnnl_primitive_execute(p, s, made, ea);
  if (st == dnnl_success)
    st = dnnl_stream_wait(s);
  if (s)
    dnnl_stream_destroy(s);
  for (int i = 0; i < made; i++)
    if (mem[i])
      dnnl_memory_destroy(mem[i]);
  return st;
}

/* The implementation oneDNN gives a matmul of 256^3 in dt (16-bit in
 * and out, plain row-major), or NULL when it gives none or only its
 * reference code. */
static const char *gemm16_impl(dnnl_data_type_t dt, char *buf, size_t size) {
  dnnl_engine_t eng = cpu_dnnl_engine();
  if (!eng)
    return NULL;
  dnnl_dims_t d = {256, 256};
  dnnl_memory_desc_t md;
  dnnl_matmul_desc_t mm;
  dnnl_primitive_desc_t pd = NULL;
  if (dnnl_memory_desc_init_by_tag(&md, 2, d, dt, dnnl_ab) ||
      dnnl_matmul_desc_init(&mm, &md, &md, NULL, &md) ||
      dnnl_primitive_desc_create(&pd, &mm, NULL, eng, NULL))
    return NULL;
  int ref = cpu_dnnl_is_ref(pd);
  snprintf(buf, size, "%s", cpu_dnnl_impl(pd));
  dnnl_primitive_desc_destroy(pd);
  return ref ? NULL : buf;
}
#endif

void cpu_gemm16_describe(char *buf, size_t size) {
  int bf16, amx, fp16;
  cpu_features(&bf16, &amx, &fp16);
  char hw[80];
  snprintf(hw, sizeof hw, "CPU: %s, %s, %s",
           bf16 ? "AVX512-BF16" : "no AVX512-BF16", amx ? "AMX-BF16" : "no AMX",
           fp16 ? "AVX512-FP16" : "no AVX512-FP16");
#ifdef TYTO_HAVE_DNNL
  const dnnl_version_t *v = dnnl_version();
  char ib[64], ih[64], what[200];
  const char *kb =
                 cpu_dnnl_off() ? NULL : gemm16_impl(dnnl_bf16, ib, sizeof ib),
             *kh = cpu_dnnl_off() ? NULL : gemm16_impl(dnnl_f16, ih, sizeof ih);
  if (kb && kh)
    snprintf(what, sizeof what,
             "bf16 and f16 matmul and convolutions on its 16-bit kernels "
             "(%s, %s)",
             kb, kh);
  else if (kb)
    snprintf(what, sizeof what,
             "bf16 matmul and convolutions on its bf16 kernels (%s), f16 "
             "converted to f32",
             kb);
  else if (kh)
    snprintf(what, sizeof what,
             "f16 matmul and convolutions on its f16 kernels (%s), bf16 "
             "converted to f32",
             kh);
  else
    snprintf(what, sizeof what,
             "bf16 and f16 matmul and convolutions converted to f32%s",
             cpu_dnnl_off() ? " (TYTO_CPU_NO_DNNL)" : " (no fast kernel)");
  snprintf(buf, size, "oneDNN %d.%d.%d: %s; %s", v->major, v->minor, v->patch,
           what, hw);
#else
  snprintf(buf, size,
           "built without oneDNN: bf16 and f16 matmul and convolutions "
           "converted to f32; %s",
           hw);
#endif
}
