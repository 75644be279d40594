/*
 * Host C++ stand-ins for the CUDA built-ins that the CUDA plugin's
 * kernels use, so that a program the plugin generates can be compiled by
 * the host's C++ compiler and run on the host (tests/cuda/fake_cuda.c in
 * its executing mode, tests/cuda/emu_plugin.c). tyto_emu_launch() runs a
 * launch's blocks one after another and a block's threads as fibers
 * (ucontext) that switch only at __syncthreads(), so shared memory (a
 * static array, one block at a time) and barriers behave as on a GPU.
 * TYTO_EMU_KERNEL(name) defines name__emu(void **args), which calls the
 * kernel with the arguments of cudaLaunchKernel's array. Atomics are plain
 * reads and writes: threads never run at once.
 *
 * To catch what a GPU would not forgive: between barriers the threads run
 * in ascending order on one round and descending on the next, so a
 * missing barrier between a write and another thread's read shows; and
 * shared memory is filled with 0xff bytes (NaN, -1) at the start of every
 * block, so a read before any write shows.
 */
/* glibc's fortified longjmp refuses to jump between stacks. */
#undef _FORTIFY_SOURCE
#include <cmath>
#include <cstdint>
#include <csetjmp>
#include <cstring>
#include <type_traits>
#include <ucontext.h>
#include <utility>
#include <vector>

#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(n)
/* Shared arrays in a section of their own, refilled at each block. */
#define __shared__ static __attribute__((section("tyto_emu_shared")))
extern "C" char __start_tyto_emu_shared[] __attribute__((weak));
extern "C" char __stop_tyto_emu_shared[] __attribute__((weak));
#define __syncthreads() tyto_emu_sync()
#define __threadfence_system()                                                 \
  do {                                                                         \
  } while (0)

using std::isinf;
using std::isnan;

struct tyto_emu_dim3 {
  unsigned x, y, z;
};
static tyto_emu_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0},
                     blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

static inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, sizeof f);
  return f;
}
static inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline double __longlong_as_double(long long i) {
  double d;
  memcpy(&d, &i, sizeof d);
  return d;
}
static inline long long __double_as_longlong(double d) {
  long long i;
  memcpy(&i, &d, sizeof i);
  return i;
}
static inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}

template <typename T> static inline T atomicCAS(T *p, T cmp, T val) {
  T old = *p;
  if (old == cmp)
    *p = val;
  return old;
}
template <typename T> static inline T atomicMin(T *p, T val) {
  T old = *p;
  if (val < old)
    *p = val;
  return old;
}

/* ---- launches ------------------------------------------------------------ */

/* A block's threads are fibers, each on a stack of its own. A fiber is
 * started once per launch (swapcontext) and runs the kernel for every
 * block in turn; every other switch is _setjmp / _longjmp, which saves no
 * signal mask (swapcontext makes two system calls per switch). At a
 * barrier or at the end of its part of a block a fiber returns to the
 * scheduler, which resumes each fiber in thread order until all of them
 * have ended the block, then starts the next block. */
static ucontext_t tyto_emu_start_ctx;
static jmp_buf tyto_emu_main_jb;
struct tyto_emu_jmp {
  jmp_buf b;
};
static std::vector<tyto_emu_jmp> tyto_emu_jb;
static std::vector<ucontext_t> tyto_emu_ctx;
static std::vector<int> tyto_emu_state; /* 0 new, 1 waits, 2 block done */
static unsigned tyto_emu_cur, tyto_emu_gx, tyto_emu_gy;
static void (*tyto_emu_fn)(void **);
static void **tyto_emu_args;
static int tyto_emu_fibers; /* threads run as fibers (else directly) */

/* Back to the scheduler with the given state; returns when resumed. */
static void tyto_emu_yield(int state) {
  tyto_emu_state[tyto_emu_cur] = state;
  if (!_setjmp(tyto_emu_jb[tyto_emu_cur].b))
    _longjmp(tyto_emu_main_jb, 1);
}

static void tyto_emu_sync() {
  if (tyto_emu_fibers)
    tyto_emu_yield(1);
}

static void tyto_emu_entry() {
  for (unsigned by = 0; by < tyto_emu_gy; by++)
    for (unsigned bx = 0; bx < tyto_emu_gx; bx++) {
      tyto_emu_fn(tyto_emu_args);
      tyto_emu_yield(2);
    }
  _longjmp(tyto_emu_main_jb, 1); /* the launch has ended for this fiber */
}

static void tyto_emu_fill_shared() {
  if (__start_tyto_emu_shared != NULL)
    memset(__start_tyto_emu_shared, 0xff,
           (size_t)(__stop_tyto_emu_shared - __start_tyto_emu_shared));
}

/* Runs w(args) as a launch of gx x gy blocks of nt threads, the fibers on
 * nt stacks of `stack` bytes from `stacks` (the caller's: one pool for
 * every program). */
extern "C" void tyto_emu_launch(void (*w)(void **), void **args, unsigned gx,
                                unsigned gy, unsigned nt, char *stacks,
                                size_t stack) {
  tyto_emu_fn = w;
  tyto_emu_args = args;
  tyto_emu_gx = gx;
  tyto_emu_gy = gy;
  gridDim = {gx, gy, 1};
  blockDim = {nt, 1, 1};
  tyto_emu_fibers = nt > 1;
  if (!tyto_emu_fibers) {
    threadIdx = {0, 0, 0};
    for (unsigned by = 0; by < gy; by++)
      for (unsigned bx = 0; bx < gx; bx++) {
        blockIdx = {bx, by, 0};
        tyto_emu_fill_shared();
        w(args);
      }
    return;
  }
  tyto_emu_jb.resize(nt);
  tyto_emu_ctx.resize(nt);
  tyto_emu_state.assign(nt, 0);
  for (unsigned by = 0; by < gy; by++)
    for (unsigned bx = 0; bx < gx; bx++) {
      blockIdx = {bx, by, 0};
      tyto_emu_fill_shared();
      /* Rounds: each thread runs to its next barrier or the block's end,
       * in ascending then descending order. */
      for (unsigned live = nt, round = 0; live > 0; round++)
        for (unsigned i = 0; i < nt; i++) {
          const unsigned t = round % 2 ? nt - 1 - i : i;
          if (tyto_emu_state[t] == 2)
            continue;
          tyto_emu_cur = t;
          threadIdx = {t, 0, 0};
          if (_setjmp(tyto_emu_main_jb) == 0) {
            if (tyto_emu_state[t] == 0 && by == 0 && bx == 0) {
              getcontext(&tyto_emu_ctx[t]);
              tyto_emu_ctx[t].uc_stack.ss_sp = stacks + (size_t)t * stack;
              tyto_emu_ctx[t].uc_stack.ss_size = stack;
              tyto_emu_ctx[t].uc_link = NULL;
              makecontext(&tyto_emu_ctx[t], tyto_emu_entry, 0);
              swapcontext(&tyto_emu_start_ctx, &tyto_emu_ctx[t]);
            } else {
              _longjmp(tyto_emu_jb[t].b, 1);
            }
          }
          if (tyto_emu_state[t] == 2)
            live--;
        }
      for (unsigned t = 0; t < nt; t++)
        tyto_emu_state[t] = 1; /* resumed into the next block */
    }
  /* Let every fiber leave its loop, so none is left mid-kernel. */
  for (unsigned t = 0; t < nt; t++) {
    tyto_emu_cur = t;
    if (_setjmp(tyto_emu_main_jb) == 0)
      _longjmp(tyto_emu_jb[t].b, 1);
  }
  tyto_emu_fibers = 0;
}

template <typename... A, size_t... I>
static void tyto_emu_call(void (*f)(A...), void **p,
                          std::index_sequence<I...>) {
  f(*static_cast<typename std::remove_reference<A>::type *>(p[I])...);
}
template <typename... A>
static void tyto_emu_invoke(void (*f)(A...), void **p) {
  tyto_emu_call(f, p, std::index_sequence_for<A...>{});
}
#define TYTO_EMU_KERNEL(name)                                                  \
  extern "C" void name##__emu(void **p) {                                      \
    tyto_emu_invoke(name, p);                                                  \
  }
