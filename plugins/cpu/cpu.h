/*
 * The CPU plugin's internals. Buffers are NUMA-local host memory; each
 * stream is a worker thread draining a FIFO of commands, so work enqueued on
 * a stream really runs behind the caller's back, as on a GPU.
 */
#ifndef TYTO_PLUGIN_CPU_H
#define TYTO_PLUGIN_CPU_H

#include <hwloc.h>
#include <pthread.h>
#include <stdint.h>

#include <tyto/plugin.h>

/* Alignment of every buffer: a cache line, and an AVX-512 vector. */
#define CPU_ALIGN 64
/* Buffers at least this big are bound to the device's NUMA nodes. */
#define CPU_NUMA_MIN ((uint64_t)64 << 10)

/* Events complete when their stream reaches them; a marker is that point.
 * Markers are shared by an event and the commands that signal or wait on
 * them, and are guarded by the plugin's marker lock. */
typedef struct cpu_marker {
  int done;
  int failed; /* work before it on its stream raised an error */
  int refs;
} cpu_marker;

struct tyto_plugin_state {
  const tyto_plugin_host *host;
  hwloc_topology_t topo; /* without I/O devices: for memory binding */
  char name[256];
  char vendor[64];
  char nodeset[256];
  char cpuset[256];
  char gemm16[512]; /* the path of bf16 and f16 GEMMs (onednn.h) and of
                       the 16-bit conversions (convert.h) */
  uint32_t cores, pus, numa_nodes;
  /* The kernels' threads: the pool's, the stream's thread included, and
   * oneDNN's OpenMP team ([cpu] threads; default one per core). */
  uint32_t threads;
  uint64_t memory_bytes;
  int32_t numa_node;
  pthread_mutex_t marker_mu;
  pthread_cond_t marker_cv;
};

struct tyto_plugin_device {
  tyto_plugin_state *st;
  hwloc_bitmap_t nodeset;
  struct cpu_pool *pool; /* kernels' worker threads */
};

struct tyto_plugin_buffer {
  unsigned char *ptr;
  uint64_t size;
  int bound; /* allocated by hwloc (free with hwloc_free) */
};

typedef enum cpu_cmd_kind {
  CPU_CMD_COPY,
  CPU_CMD_LAUNCH,
  CPU_CMD_SIGNAL,
  CPU_CMD_WAIT
} cpu_cmd_kind;

typedef struct cpu_cmd {
  struct cpu_cmd *next;
  cpu_cmd_kind kind;
  union {
    struct {
      void *dst;
      const void *src;
      uint64_t size;
    } copy;
    struct {
      tyto_plugin_kernel *kernel;
      unsigned char **args; /* inputs then outputs, resolved addresses */
      uint32_t n_args;
    } launch;
    cpu_marker *marker;
  } u;
} cpu_cmd;

struct tyto_plugin_stream {
  tyto_plugin_device *dev;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cpu_cmd *head, *tail;
  uint64_t enqueued, completed;
  int quit;
  tyto_plugin_error *error; /* first error raised by queued work */
};

struct tyto_plugin_event {
  tyto_plugin_device *dev;
  cpu_marker *marker; /* NULL: complete */
};

/* memory.c */
tyto_plugin_error *cpu_buffer_alloc(tyto_plugin_device *dev, uint64_t size,
                                    tyto_plugin_buffer **out);
void cpu_buffer_free(tyto_plugin_device *dev, tyto_plugin_buffer *buf);
void *cpu_buffer_host_ptr(tyto_plugin_device *dev, tyto_plugin_buffer *buf);
tyto_plugin_error *cpu_copy_h2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                const void *src, uint64_t size);
tyto_plugin_error *cpu_copy_d2h(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                void *dst, tyto_plugin_buffer *src,
                                uint64_t src_offset, uint64_t size);
tyto_plugin_error *cpu_copy_d2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                tyto_plugin_buffer *src, uint64_t src_offset,
                                uint64_t size);
tyto_plugin_error *cpu_copy_peer(tyto_plugin_device *dst_dev,
                                 tyto_plugin_stream *s, tyto_plugin_buffer *dst,
                                 uint64_t dst_offset,
                                 tyto_plugin_device *src_dev,
                                 tyto_plugin_buffer *src, uint64_t src_offset,
                                 uint64_t size);

/* stream.c */
tyto_plugin_error *cpu_stream_create(tyto_plugin_device *dev,
                                     tyto_plugin_stream **out);
void cpu_stream_destroy(tyto_plugin_device *dev, tyto_plugin_stream *s);
tyto_plugin_error *cpu_stream_synchronize(tyto_plugin_device *dev,
                                          tyto_plugin_stream *s);
/* Takes ownership of cmd (a malloc'd cpu_cmd) and queues it. */
tyto_plugin_error *cpu_stream_enqueue(tyto_plugin_stream *s, cpu_cmd *cmd);
tyto_plugin_error *cpu_event_create(tyto_plugin_device *dev,
                                    tyto_plugin_event **out);
void cpu_event_destroy(tyto_plugin_device *dev, tyto_plugin_event *e);
tyto_plugin_error *cpu_event_record(tyto_plugin_device *dev,
                                    tyto_plugin_event *e,
                                    tyto_plugin_stream *s);
tyto_plugin_error *cpu_event_wait(tyto_plugin_device *dev,
                                  tyto_plugin_stream *s, tyto_plugin_event *e);
tyto_plugin_error *cpu_event_synchronize(tyto_plugin_device *dev,
                                         tyto_plugin_event *e);
tyto_plugin_error *cpu_event_query(tyto_plugin_device *dev,
                                   tyto_plugin_event *e, int *complete);

/* kernels.c */
tyto_plugin_error *cpu_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *desc);
tyto_plugin_error *cpu_prepare(tyto_plugin_device *dev,
                               const tyto_plugin_op_desc *desc,
                               tyto_plugin_kernel **out,
                               tyto_plugin_kernel_info *info);
void cpu_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k);
tyto_plugin_error *
cpu_launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
           tyto_plugin_kernel *k, const tyto_plugin_binding *inputs,
           uint32_t n_inputs, const tyto_plugin_binding *outputs,
           uint32_t n_outputs, const tyto_plugin_binding *workspace);
/* Runs a launched kernel on the stream's thread, then drops the launch's
 * reference to it. */
tyto_plugin_error *cpu_kernel_run(const tyto_plugin_host *host,
                                  tyto_plugin_kernel *k, unsigned char **args);

#endif
