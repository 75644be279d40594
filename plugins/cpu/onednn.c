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
#endif
