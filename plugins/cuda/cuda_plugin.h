/*
 * Internal declarations of the CUDA plugin: the handle structs behind the
 * opaque tyto_plugin_* types and the functions the plugin's files share.
 * Nothing here is exported: the shared object is built with
 * -fvisibility=hidden and exports only tyto_plugin_cuda_LTX_init.
 * Internal names carry the prefix tcu_ (tyto cuda).
 */
#ifndef TYTO_PLUGINS_CUDA_PLUGIN_H
#define TYTO_PLUGINS_CUDA_PLUGIN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include <tyto/plugin.h>

/* Oldest GPU generation the plugin drives (Pascal). */
#define TCU_MIN_CC_MAJOR 6
#define TCU_MIN_CC_MINOR 0

/* Ops remembered per stream for the message of a failed run. */
#define TCU_RECENT 8

/* Threads per block of every generated kernel (grid-stride loops). */
#define TCU_BLOCK 256

/* What probe() learned about one CUDA device; indexed by CUDA device
 * index, which is also the device's ordinal ("cuda:<index>"). */
typedef struct tcu_hw {
  int claimed; /* 0 when refused (too old, properties unreadable) */
  int cc_major, cc_minor;
  char name[256];
  /* What tyto-info shows: the name, and below compute capability 8.0 what
   * the GPU lacks for bf16 (read_device). */
  char label[384];
  char pci_bus_id[24]; /* normalised "dddd:bb:dd.f", "" when unknown */
  int32_t numa_node;   /* from the matched hwloc offer, -1 when none */
  uint64_t memory_bytes;
  uint32_t sm_count;
} tcu_hw;

struct tyto_plugin_state {
  const tyto_plugin_host *host;
  int allow_tf32; /* option allow_tf32; stored for matmul/conv kernels */
  int probed;
  int n_hw;                    /* cudaGetDeviceCount(), 0 when probing failed */
  tcu_hw *hw;                  /* n_hw entries */
  unsigned char *can_peer;     /* n_hw * n_hw, [dst * n_hw + src] */
  unsigned char *peer_enabled; /* same shape; guarded by peer_lock */
  pthread_mutex_t peer_lock;
  int any_peer;            /* some claimed pair can access each other */
  char driver_version[16]; /* "13.0", "" when unknown */
  /* TYTO_CUDA_FAULT_AT (a testing aid): the launch that faults on purpose
   * (0: none), and launches so far. */
  long long fault_at;
  _Atomic long long launches;
};

/* One compiled module, cached per open device and keyed by its source
 * text. Immutable once inserted; freed at device_close(). */
typedef struct tcu_module {
  struct tcu_module *next;
  char *source;
  cudaLibrary_t library; /* NULL on a compile_only device */
} tcu_module;

struct tyto_plugin_device {
  tyto_plugin_state *state;
  int index; /* CUDA device index == ordinal */
  uint32_t sm_count;
  /* NVRTC target chosen at open: "sm_90" (cubin) or "compute_120" (PTX
   * for a GPU newer than this NVRTC). Empty when NVRTC cannot target the
   * GPU; arch_error then says why, and prepare() reports it. */
  char arch[32];
  int arch_is_ptx;
  char arch_error[256];
  /* The GPU's compute capability, as tcu_arch_select() was given it. */
  int cc_major, cc_minor;
  pthread_mutex_t cache_lock;
  tcu_module *cache;
  /* Set by tests without a GPU: prepare() compiles with NVRTC and makes no
   * other CUDA call (ops.h). */
  int compile_only;
  /* NVRTC runs of this device (under cache_lock), so tests can tell a
   * disk cache hit from a compile (compile.c). */
  unsigned nvrtc_compiles;
  /* Library handles, created on first use and bound to a stream for each
   * call, so every use holds lib_lock from cu*SetStream to the last call
   * (libs.c). NULL until first used. */
  pthread_mutex_t lib_lock;
  void *cublas;   /* cublasHandle_t */
  void *cublaslt; /* cublasLtHandle_t */
  void *cudnn;    /* cudnnHandle_t */
  void *cusolver; /* cusolverDnHandle_t */
};

struct tyto_plugin_buffer {
  void *ptr; /* NULL when size is 0 */
  uint64_t size;
  int device; /* CUDA device index that owns it */
};

struct tyto_plugin_stream {
  cudaStream_t stream;
  int device;
  /* Faults kernels found in their inputs (a random draw's step outside
   * [0, 2^53]), reported by the next stream_synchronize(): page-locked
   * host memory the kernels write through its device address, so a
   * kernel never needs a read-back at launch and launches can be recorded
   * into graphs. Word 0 is 1 + the op that failed (0: none), words 2 and 3
   * the bits of the value it refused. NULL when it could not be mapped
   * (then such kernels read back at launch). */
  volatile uint32_t *fault;
  uint32_t *fault_dev;
  /* The ops launched since the last synchronisation (the last
   * TCU_RECENT of n_recent), for the message when that work fails; while
   * recording (graph_begin) they go to cap_ops / n_cap instead. */
  uint32_t recent[TCU_RECENT];
  uint64_t n_recent;
  int capturing;
  uint32_t cap_ops[TCU_RECENT];
  uint64_t n_cap;
};

/* A recorded and instantiated graph (graph_begin .. graph_end), with the
 * ops it holds for messages. */
struct tyto_plugin_graph {
  cudaGraphExec_t exec;
  int device;
  uint32_t ops[TCU_RECENT];
  uint64_t n_ops;
};

/* Notes a launch of `op` on s (kernels.c, after it was queued). */
void tcu_note_launch(tyto_plugin_stream *s, uint32_t op);

struct tyto_plugin_event {
  cudaEvent_t event;
  int device;
};

/* Element i of an array of ABI structs the host filled. The host lays the
 * array out with its own sizeof, which it records in each struct_size; a
 * newer host's struct is larger than ours (an older one's smaller), so
 * stride by what it says. A nonsensical struct_size falls back to ours.
 * Fields past struct_size are read only through TYTO_PLUGIN_HAS_FIELD. */
static inline const void *tcu_abi_at(const void *base, size_t our_size,
                                     uint32_t i) {
  size_t stride = *(const size_t *)base;
  if (stride <= sizeof(size_t))
    stride = our_size;
  return (const char *)base + (size_t)i * stride;
}

/* errors.c ------------------------------------------------------------- */

/* Maps a CUDA runtime error to the ABI's error codes. */
tyto_plugin_code tcu_code_of(cudaError_t e);

/* Error value for a failed CUDA call: "<call> failed: <name>: <string>",
 * plus a hint for sticky errors. `call` is printf-style. Owned by the
 * caller (returned to the host). Clears the runtime's last-error slot. */
tyto_plugin_error *tcu_cuda_error(const tyto_plugin_host *host, cudaError_t e,
                                  const char *call, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Marks CUDA device `device` lost after a sticky error (first story
 * wins), and the story, or NULL while the device is fine. */
void tcu_mark_lost(int device, const char *why);
const char *tcu_lost_reason(int device);

/* Writes "<name>: <string>" for `e` into buf. */
void tcu_describe(cudaError_t e, char *buf, size_t size);

/* plugin.c ------------------------------------------------------------- */

/* Makes `device` current on the calling thread; the host may call from any
 * thread and the runtime's current device is per thread. */
tyto_plugin_error *tcu_use(const tyto_plugin_host *host, int device);

/* probe.c -------------------------------------------------------------- */

/* tyto_plugin_fns.probe: finds the CUDA devices, claims those it drives
 * and refuses the rest (and every offered NVIDIA GPU when there is no
 * usable driver, returning the same reason as its error). */
tyto_plugin_error *tcu_probe(tyto_plugin_state *st,
                             const tyto_plugin_hw_device *offer,
                             uint32_t n_offer,
                             const tyto_plugin_claims *claims);

/* memory.c ------------------------------------------------------------- */

tyto_plugin_error *tcu_buffer_alloc(tyto_plugin_device *dev, uint64_t size,
                                    tyto_plugin_buffer **out);
void tcu_buffer_free(tyto_plugin_device *dev, tyto_plugin_buffer *buf);
tyto_plugin_error *tcu_copy_h2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                const void *src, uint64_t size);
tyto_plugin_error *tcu_copy_d2h(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                void *dst, tyto_plugin_buffer *src,
                                uint64_t src_offset, uint64_t size);
tyto_plugin_error *tcu_copy_d2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                tyto_plugin_buffer *src, uint64_t src_offset,
                                uint64_t size);
tyto_plugin_error *tcu_copy_peer(tyto_plugin_device *dst_dev,
                                 tyto_plugin_stream *s, tyto_plugin_buffer *dst,
                                 uint64_t dst_offset,
                                 tyto_plugin_device *src_dev,
                                 tyto_plugin_buffer *src, uint64_t src_offset,
                                 uint64_t size);
tyto_plugin_error *tcu_host_alloc_pinned(tyto_plugin_device *dev, uint64_t size,
                                         void **out);
void tcu_host_free_pinned(tyto_plugin_device *dev, void *ptr);

/* stream.c ------------------------------------------------------------- */

tyto_plugin_error *tcu_stream_create(tyto_plugin_device *dev,
                                     tyto_plugin_stream **out);
void tcu_stream_destroy(tyto_plugin_device *dev, tyto_plugin_stream *s);
tyto_plugin_error *tcu_stream_synchronize(tyto_plugin_device *dev,
                                          tyto_plugin_stream *s);
tyto_plugin_error *tcu_event_create(tyto_plugin_device *dev,
                                    tyto_plugin_event **out);
void tcu_event_destroy(tyto_plugin_device *dev, tyto_plugin_event *e);
tyto_plugin_error *tcu_event_record(tyto_plugin_device *dev,
                                    tyto_plugin_event *e,
                                    tyto_plugin_stream *s);
tyto_plugin_error *tcu_event_wait(tyto_plugin_device *dev,
                                  tyto_plugin_stream *s, tyto_plugin_event *e);
tyto_plugin_error *tcu_event_synchronize(tyto_plugin_device *dev,
                                         tyto_plugin_event *e);
tyto_plugin_error *tcu_event_query(tyto_plugin_device *dev,
                                   tyto_plugin_event *e, int *complete);
tyto_plugin_error *tcu_graph_begin(tyto_plugin_device *dev,
                                   tyto_plugin_stream *s);
tyto_plugin_error *tcu_graph_end(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_graph **out);
tyto_plugin_error *tcu_graph_launch(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s,
                                    tyto_plugin_graph *g);
void tcu_graph_destroy(tyto_plugin_device *dev, tyto_plugin_graph *g);

/* kernels.c ------------------------------------------------------------ */

tyto_plugin_error *tcu_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *desc);
tyto_plugin_error *tcu_prepare(tyto_plugin_device *dev,
                               const tyto_plugin_op_desc *desc,
                               tyto_plugin_kernel **out,
                               tyto_plugin_kernel_info *info);
void tcu_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k);
tyto_plugin_error *
tcu_launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
           tyto_plugin_kernel *k, const tyto_plugin_binding *inputs,
           uint32_t n_inputs, const tyto_plugin_binding *outputs,
           uint32_t n_outputs, const tyto_plugin_binding *workspace);

/* compile.c ------------------------------------------------------------ */

/* Picks the NVRTC target for a device of compute capability major.minor,
 * filling dev->arch / arch_is_ptx, or dev->arch_error when none fits, and
 * dev->cc_major / cc_minor. */
void tcu_arch_select(tyto_plugin_device *dev, int major, int minor);

/* Returns the cached module for `source` (complete CUDA C++), compiling
 * and loading it on first use; on a compile_only device the module has no
 * library. The module stays owned by the device's cache. */
tyto_plugin_error *tcu_module_get(tyto_plugin_device *dev, const char *source,
                                  tcu_module **out);

/* Unloads and frees every cached module of the device. */
void tcu_cache_clear(tyto_plugin_device *dev);

/* libs.c --------------------------------------------------------------- */

/* The device's library handles, created on first use. Call with
 * dev->lib_lock held, the device current; bind the handle to the stream
 * (cublasSetStream, ...) before each use. */
tyto_plugin_error *tcu_cublas(tyto_plugin_device *dev, void **out);
tyto_plugin_error *tcu_cublaslt(tyto_plugin_device *dev, void **out);
tyto_plugin_error *tcu_cudnn(tyto_plugin_device *dev, void **out);
tyto_plugin_error *tcu_cusolver(tyto_plugin_device *dev, void **out);
/* Destroys the handles (device_close). */
void tcu_libs_release(tyto_plugin_device *dev);

#endif /* TYTO_PLUGINS_CUDA_PLUGIN_H */
