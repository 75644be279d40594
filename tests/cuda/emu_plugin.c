/*
 * tests/plugins/cudaemu/tyto_plugin_cuda.so: the CUDA plugin itself
 * (libtcu, every line of it, its entry point included) over the fake CUDA
 * of fake_cuda.h in its executing mode, so that tests written for a GPU
 * run without one: each program the plugin generates is compiled by the
 * host's C++ compiler (TYTO_TEST_CXX, else c++) with tests/cuda/
 * emu_shim.h for CUDA's built-ins, and its kernels run on the host;
 * cuBLAS's GEMMs, cuDNN's convolutions and the batched factorisations are
 * computed by the fake. What it checks is the plugin's logic (descriptors,
 * geometry, launch arguments, the kernels' arithmetic), not NVIDIA's
 * compiler, hardware or libraries. Not covered: graphs (capture is
 * refused), several GPUs (one fake H100), PTX.
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/plugin.h>

#include "fake_cuda.h"

static void remove_dir(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", fake_dir);
  if (fake_dir[0] != '\0' && system(cmd) != 0)
    fprintf(stderr, "cudaemu: could not remove %s\n", fake_dir);
}

/* At load, before the plugin's init: the executing mode, and a directory
 * for the compiled programs and the kernel cache (removed at exit). */
__attribute__((constructor)) static void setup(void) {
  fake_execute = 1;
  fake_cxx = getenv("TYTO_TEST_CXX") != NULL ? getenv("TYTO_TEST_CXX") : "c++";
  fake_shim = TEST_EMU_SHIM;
  const char *tmp = getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp";
  snprintf(fake_dir, sizeof fake_dir, "%s/tyto-cudaemu-XXXXXX", tmp);
  if (mkdtemp(fake_dir) == NULL) {
    /* Every compile then fails, saying so (fake_cuda.c). */
    fprintf(stderr, "cudaemu: cannot make a directory in %s\n", tmp);
    fake_dir[0] = '\0';
    return;
  }
  atexit(remove_dir);
  /* The kernel cache too: an image here is a handle of this process, and
   * must never reach the user's cache, where a GPU would find it. */
  char cache[300];
  snprintf(cache, sizeof cache, "%s/cache", fake_dir);
  setenv("XDG_CACHE_HOME", cache, 1);
}
