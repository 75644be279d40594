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

#if defined(TYTO_HAVE_DNNL) && defined(TYTO_HAVE_OMP_API)
#include <omp.h>
#endif

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

#if defined(TYTO_HAVE_DNNL) && defined(TYTO_HAVE_OMP_API)
/* Whether oneDNN runs on OpenMP, the runtime this plugin links (the one
 * whose team size it can set). */
static int omp_runtime(void) {
  static int known = -1;
  int k = __atomic_load_n(&known, __ATOMIC_ACQUIRE);
  if (k < 0) {
    const dnnl_version_t *v = dnnl_version();
    k = v && v->cpu_runtime == DNNL_RUNTIME_OMP;
    __atomic_store_n(&known, k, __ATOMIC_RELEASE);
  }
  return k;
}

int cpu_dnnl_threads_enter(unsigned n) {
  if (!omp_runtime() || n == 0)
    return 0;
  int prev = omp_get_max_threads();
  if ((unsigned)prev != n)
    omp_set_num_threads((int)n);
  return prev;
}

void cpu_dnnl_threads_leave(int prev) {
  if (prev > 0 && omp_runtime() && omp_get_max_threads() != prev)
    omp_set_num_threads(prev);
}

/* Read, not remembered: OpenMP's OpenBLAS sets the same team size when
 * told its thread count. */
void cpu_dnnl_threads_use(unsigned n) {
  if (n && omp_runtime() && (unsigned)omp_get_max_threads() != n)
    omp_set_num_threads((int)n);
}
#else
int cpu_dnnl_threads_enter(unsigned n) {
  (void)n;
  return 0;
}

void cpu_dnnl_threads_leave(int prev) {
  (void)prev;
}

void cpu_dnnl_threads_use(unsigned n) {
  (void)n;
}
#endif

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

dnnl_primitive_desc_t cpu_dnnl_pd_avoiding(const_dnnl_op_desc_t op_desc,
                                           const_dnnl_primitive_attr_t attr,
                                           const_dnnl_primitive_desc_t hint,
                                           const char *avoid) {
  dnnl_engine_t eng = cpu_dnnl_engine();
  dnnl_primitive_desc_iterator_t it = NULL;
  if (!eng || dnnl_primitive_desc_iterator_create(&it, op_desc, attr, eng,
                                                  hint) != dnnl_success)
    return NULL;
  dnnl_primitive_desc_t pd = NULL;
  do {
    pd = dnnl_primitive_desc_iterator_fetch(it);
    if (pd && avoid && strstr(cpu_dnnl_impl(pd), avoid)) {
      dnnl_primitive_desc_destroy(pd);
      pd = NULL;
    }
  } while (!pd && dnnl_primitive_desc_iterator_next(it) == dnnl_success);
  dnnl_primitive_desc_iterator_destroy(it);
  return pd;
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

dnnl_data_type_t cpu_dnnl_type(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F32 ? dnnl_f32 : cpu_dnnl_type16(dtype);
}

/* Operand l (A, B or C: a matrix [r, c] after the transpose t, over the
 * output's nb batch axes) as a oneDNN memory descriptor: the output's
 * batch axes (extent 1 where l broadcasts, as oneDNN's matmul broadcasts),
 * then the matrix axes, swapped again when `swap`. Returns 0 when strides
 * cannot say it (a negative one). */
static int mm_md(const tyto_plugin_layout *l, uint32_t nb, int t, int swap,
                 dnnl_memory_desc_t *md) {
  dnnl_dims_t dims, str;
  uint32_t lb = l->rank - 2;
  int n = (int)nb + 2;
  for (uint32_t ax = 0; ax < nb; ax++) {
    int64_t src = (int64_t)ax - (int64_t)(nb - lb);
    int used = src >= 0 && l->shape[src] > 1 && l->strides[src] != 0;
    dims[ax] = used ? l->shape[src] : 1;
    str[ax] = used ? l->strides[src] : 0;
  }
  int r = (int)nb, c = (int)nb + 1;
  if (t ^ swap)
    r = (int)nb + 1, c = (int)nb;
  dims[r] = l->shape[l->rank - 2];
  str[r] = l->strides[l->rank - 2];
  dims[c] = l->shape[l->rank - 1];
  str[c] = l->strides[l->rank - 1];
  /* Axes of extent 1 never step: give them the span of the rest, the
   * stride of an outermost axis, which oneDNN accepts in any order. */
  int64_t span = 1;
  for (int i = 0; i < n; i++) {
    if (dims[i] > 1 && str[i] < 0)
      return 0;
    if (dims[i] > 1)
      span += (dims[i] - 1) * str[i];
  }
  for (int i = 0; i < n; i++)
    if (dims[i] == 1)
      str[i] = span;
  return dnnl_memory_desc_init_by_strides(md, n, dims, cpu_dnnl_type(l->dtype),
                                          str) == dnnl_success;
}

/* Whether oneDNN's implementation for pd is one the caller takes: its
 * name starts with `want`, or (want NULL) it is not the reference code. */
static int impl_is(const_dnnl_primitive_desc_t pd, const char *want) {
  return want ? strncmp(cpu_dnnl_impl(pd), want, strlen(want)) == 0
              : !cpu_dnnl_is_ref(pd);
}

int cpu_dnnl_mm_make(cpu_dnnl_mm *mm, const tyto_plugin_layout *const l[3],
                     const int t[2], const char *want) {
  memset(mm, 0, sizeof *mm);
  dnnl_engine_t eng = cpu_dnnl_engine();
  if (!eng)
    return 0;
  uint32_t nb = l[2]->rank - 2;
  /* A column-major output: C^T = B^T A^T is row-major. */
  const tyto_plugin_layout *c = l[2];
  mm->swap = c->shape[nb] > 1 && c->shape[nb + 1] > 1 && c->strides[nb] == 1 &&
             c->strides[nb + 1] != 1;
  int tt[3] = {t[0], t[1], 0};
  for (int i = 0; i < 3; i++)
    if (!mm_md(l[i], nb, tt[i], mm->swap, &mm->md[i]))
      return 0;
  int s = mm->swap;
  dnnl_matmul_desc_t md;
  if (dnnl_matmul_desc_init(&md, &mm->md[s], &mm->md[!s], NULL, &mm->md[2]) !=
      dnnl_success)
    return 0;
  dnnl_primitive_attr_t attr = cpu_dnnl_attr();
  if (!attr)
    return -1;
  dnnl_primitive_desc_t pd = NULL;
  int ok =
      dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL) == dnnl_success;
  dnnl_primitive_attr_destroy(attr);
  if (ok) {
    snprintf(mm->impl, sizeof mm->impl, "%s", cpu_dnnl_impl(pd));
    ok = impl_is(pd, want);
  }
  if (ok) {
    const dnnl_memory_desc_t *sp =
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp)
      mm->scratch_md = *sp;
    /* Offered, but not made (out of memory for its code): a failure, not
     * a reason to take another path. */
    if (dnnl_primitive_create(&mm->prim, pd) != dnnl_success)
      ok = -1;
  }
  if (pd)
    dnnl_primitive_desc_destroy(pd);
  if (ok != 1) { /* empty, but for the implementation oneDNN offered */
    char impl[sizeof mm->impl];
    memcpy(impl, mm->impl, sizeof impl);
    memset(mm, 0, sizeof *mm);
    memcpy(mm->impl, impl, sizeof impl);
  }
  return ok;
}

uint64_t cpu_dnnl_mm_scratch_bytes(const cpu_dnnl_mm *mm) {
  return mm->prim ? (uint64_t)dnnl_memory_desc_get_size(&mm->scratch_md) : 0;
}

dnnl_status_t cpu_dnnl_mm_run(const cpu_dnnl_mm *mm, void *a, void *b, void *c,
                              void *scratch) {
  void *p[2] = {a, b};
  int s = mm->swap;
  cpu_dnnl_arg arg[4] = {
      {DNNL_ARG_SRC, &mm->md[s], p[s]},
      {DNNL_ARG_WEIGHTS, &mm->md[!s], p[!s]},
      {DNNL_ARG_DST, &mm->md[2], c},
      {DNNL_ARG_SCRATCHPAD, &mm->scratch_md,
       cpu_dnnl_mm_scratch_bytes(mm) ? scratch : NULL},
  };
  return cpu_dnnl_exec(mm->prim, 4, arg);
}

void cpu_dnnl_mm_free(cpu_dnnl_mm *mm) {
  if (mm->prim)
    dnnl_primitive_destroy(mm->prim);
  mm->prim = NULL;
}

/* The implementation oneDNN gives a plain row-major matmul of 256^3 in
 * dt (in and out), or NULL when it gives none; `want` its name's start
 * ("brg"), or NULL for any but its reference code. */
static const char *gemm_impl(dnnl_data_type_t dt, const char *want, char *buf,
                             size_t size) {
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
  int ok = impl_is(pd, want);
  snprintf(buf, size, "%s", cpu_dnnl_impl(pd));
  dnnl_primitive_desc_destroy(pd);
  return ok ? buf : NULL;
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
  const char *kb = cpu_dnnl_off() ? NULL
                                  : gemm_impl(dnnl_bf16, NULL, ib, sizeof ib),
             *kh = cpu_dnnl_off() ? NULL
                                  : gemm_impl(dnnl_f16, NULL, ih, sizeof ih);
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
  char i32[64];
  const char *k32 =
      cpu_dnnl_off() ? NULL : gemm_impl(dnnl_f32, "brg", i32, sizeof i32);
  char f32[200];
  if (k32)
    snprintf(f32, sizeof f32,
             "f32 matmul on its %s kernels from 2^21 multiply-adds and "
             "32 rows and columns, smaller ones on OpenBLAS",
             k32);
  else
    snprintf(f32, sizeof f32, "f32 matmul on OpenBLAS");
  snprintf(buf, size, "oneDNN %d.%d.%d: %s; %s; %s", v->major, v->minor,
           v->patch, f32, what, hw);
#else
  snprintf(buf, size,
           "built without oneDNN: f32 matmul on OpenBLAS; bf16 and f16 "
           "matmul and convolutions converted to f32; %s",
           hw);
#endif
}
