/*
 * oneDNN in the CPU plugin: see onednn.h.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

int cpu_dnnl_off(void) {
  const char *v = getenv("TYTO_CPU_NO_DNNL");
  return v && *v && strcmp(v, "0") != 0;
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

int cpu_dnnl_is_ref(const_dnnl_primitive_desc_t pd) {
  return strncmp(cpu_dnnl_impl(pd), "ref", 3) == 0;
}

dnnl_status_t cpu_dnnl_exec(dnnl_primitive_t p, int n, const cpu_dnnl_arg *a) {
  dnnl_engine_t eng = cpu_dnnl_engine();
  dnnl_memory_t mem[8] = {NULL};
  dnnl_exec_arg_t ea[8];
  dnnl_status_t st = eng && n <= 8 ? dnnl_success : dnnl_runtime_error;
  int made = 0;
  for (; made < n && st == dnnl_success; made++) {
    st = dnnl_memory_create(&mem[made], a[made].md, eng, a[made].ptr);
    ea[made].arg = a[made].arg;
    ea[made].memory = mem[made];
  }
  dnnl_stream_t s = NULL;
  if (st == dnnl_success)
    st = dnnl_stream_create(&s, eng, dnnl_stream_default_flags);
  if (st == dnnl_success)
    st = dnnl_primitive_execute(p, s, n, ea);
  if (st == dnnl_success)
    st = dnnl_stream_wait(s);
  if (s)
    dnnl_stream_destroy(s);
  for (int i = 0; i < made; i++)
    if (mem[i])
      dnnl_memory_destroy(mem[i]);
  return st;
}
#endif
