/*
 * Internal types of the OpenCL plugin, shared by its source files.
 *
 * Include this header first in every file of the plugin: it fixes the POSIX
 * feature level and the OpenCL API level before any system header is read.
 *
 * The plugin targets the OpenCL 1.2 API so that any vendor's driver works
 * through the ICD loader. The headers are asked for 3.0 so that the 2.0 queue
 * constructor is declared (it is used only when a device reports >= 2.0), and
 * the 1.2 APIs deprecated since (clCreateCommandQueue) are requested
 * explicitly so -Werror builds stay quiet about them.
 */
#ifndef TYTO_OPENCL_OCL_H
#define TYTO_OPENCL_OCL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#ifndef CL_USE_DEPRECATED_OPENCL_1_2_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#endif

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <CL/cl.h>

#include <tyto/plugin.h>

/* One OpenCL device that probe() claimed. Filled once by probe() and read-only
 * afterwards, so device_query() and device_open() need no lock. Every string
 * is owned here and freed by shutdown(). */
typedef struct ocl_devinfo {
  cl_platform_id platform;
  cl_device_id id;
  char *name;
  char *vendor;
  char *driver_version;
  char *platform_name;
  char pci_bus_id[32];    /* "dddd:bb:dd.f" or "" */
  int32_t hw_index;       /* offered PCI entry driven, or -1 */
  int32_t numa_node;      /* from the offered entry, or -1 */
  int cl_major, cl_minor; /* from CL_DEVICE_VERSION */
  uint32_t dtypes;        /* TYTO_PLUGIN_DTYPE_BIT() set */
  int has_fp16;           /* cl_khr_fp16 */
  int fp16_emulated;      /* f16 without cl_khr_fp16 (fp16_without_extension) */
  char *driver_text;      /* driver_version and what it says on f16, for
                             device_query; NULL: driver_version alone */
  uint64_t memory_bytes;
  uint64_t max_alloc_bytes;
  uint64_t alignment; /* bytes */
  uint32_t compute_units;
  int has_compiler; /* CL_DEVICE_COMPILER_AVAILABLE */
  int has_int64;    /* 64-bit integers in kernels (absent on some EMBEDDED) */
  int gemm_own;     /* GEMM by tyto's kernels, not CLBlast (option gemm) */
  int host_memory;  /* buffers in fine-grained SVM: the host reads them in
                       place (TYTO_PLUGIN_CAP_UNIFIED_MEMORY) */
} ocl_devinfo;

struct tyto_plugin_state {
  const tyto_plugin_host *host;
  int probed;
  ocl_devinfo *devs; /* n_devs entries, indexed by ordinal */
  uint32_t n_devs;
};

/* A built program, cached per open device so that every kernel of one
 * (source, options) pair shares one clBuildProgram. */
typedef struct ocl_program {
  struct ocl_program *next;
  char *source;
  char *options;
  cl_program program;
} ocl_program;

struct tyto_plugin_device {
  tyto_plugin_state *state;
  const ocl_devinfo *info;
  cl_context context;
  /* In-order queue for operations called with stream == NULL; they block on
   * it, so it never holds work across calls. */
  cl_command_queue sync_queue;
  pthread_mutex_t lock; /* guards `programs` */
  ocl_program *programs;
};

struct tyto_plugin_buffer {
  cl_mem mem;    /* NULL for a zero-size buffer: OpenCL forbids size 0 */
  uint64_t size; /* bytes */
  void *svm;     /* host_memory devices: mem's storage, else NULL */
};

/* A command enqueued on a stream whose outcome has not been looked at yet. */
typedef struct ocl_pending {
  cl_event event;
  const char *what; /* static description for error messages */
} ocl_pending;

struct tyto_plugin_stream {
  tyto_plugin_device *dev;
  cl_command_queue queue;
  /* Commands since the last synchronize, oldest first, in [head, count).
   * The host never calls two functions on one stream at once, so these need
   * no lock. */
  ocl_pending *pending;
  size_t head, count, cap;
  cl_int first_error; /* CL_SUCCESS, or the first failed command's status */
  const char *first_error_what;
};

struct tyto_plugin_event {
  /* Streams of different threads may record and wait on one event, so the
   * swap of `event` on re-record is done under this lock. */
  pthread_mutex_t lock;
  cl_event event;     /* NULL: nothing recorded, counts as complete */
  cl_context context; /* context of the stream it was recorded on */
};

/* ---- plugin.c ---------------------------------------------------------- */
/* Creates an in-order command queue on the device of `dev`, choosing the
 * 2.0 constructor only when the device reports OpenCL >= 2.0. */
tyto_plugin_error *ocl_queue_create(tyto_plugin_device *dev,
                                    cl_command_queue *out);

/* ---- probe.c ----------------------------------------------------------- */
tyto_plugin_error *ocl_probe(tyto_plugin_state *state,
                             const tyto_plugin_hw_device *offer,
                             uint32_t n_offer,
                             const tyto_plugin_claims *claims);
/* Frees what probe() stored in `state` (the claimed devices). */
void ocl_probe_release(tyto_plugin_state *state);

/* ---- memory.c ---------------------------------------------------------- */
tyto_plugin_error *ocl_buffer_alloc(tyto_plugin_device *dev, uint64_t size,
                                    tyto_plugin_buffer **out);
void ocl_buffer_free(tyto_plugin_device *dev, tyto_plugin_buffer *buf);
void *ocl_buffer_host_ptr(tyto_plugin_device *dev, tyto_plugin_buffer *buf);
tyto_plugin_error *ocl_copy_h2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                const void *src, uint64_t size);
tyto_plugin_error *ocl_copy_d2h(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                void *dst, tyto_plugin_buffer *src,
                                uint64_t src_offset, uint64_t size);
tyto_plugin_error *ocl_copy_d2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                tyto_plugin_buffer *src, uint64_t src_offset,
                                uint64_t size);

/* ---- stream.c ---------------------------------------------------------- */
tyto_plugin_error *ocl_stream_create(tyto_plugin_device *dev,
                                     tyto_plugin_stream **out);
void ocl_stream_destroy(tyto_plugin_device *dev, tyto_plugin_stream *s);
tyto_plugin_error *ocl_stream_synchronize(tyto_plugin_device *dev,
                                          tyto_plugin_stream *s);
/* Checks that `s` is a stream of `dev`; `what` names the caller. */
tyto_plugin_error *ocl_stream_check(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s, const char *what);
/* Makes room to track one more command, so that tracking after the enqueue
 * cannot fail. Call before enqueueing. */
tyto_plugin_error *ocl_stream_reserve(tyto_plugin_stream *s);
/* Takes ownership of `ev`, the event of a command just enqueued on `s`, to
 * surface its failure from the next synchronize. Needs a prior reserve. */
void ocl_stream_track(tyto_plugin_stream *s, cl_event ev, const char *what);
/* Waits for `ev` (a command of the NULL stream) and turns a failed status
 * into an error. Releases `ev`. */
tyto_plugin_error *ocl_wait_sync(tyto_plugin_device *dev, cl_event ev,
                                 const char *what);

tyto_plugin_error *ocl_event_create(tyto_plugin_device *dev,
                                    tyto_plugin_event **out);
void ocl_event_destroy(tyto_plugin_device *dev, tyto_plugin_event *e);
tyto_plugin_error *ocl_event_record(tyto_plugin_device *dev,
                                    tyto_plugin_event *e,
                                    tyto_plugin_stream *s);
tyto_plugin_error *ocl_event_wait(tyto_plugin_device *dev,
                                  tyto_plugin_stream *s, tyto_plugin_event *e);
tyto_plugin_error *ocl_event_synchronize(tyto_plugin_device *dev,
                                         tyto_plugin_event *e);
tyto_plugin_error *ocl_event_query(tyto_plugin_device *dev,
                                   tyto_plugin_event *e, int *complete);

/* ---- kernels.c --------------------------------------------------------- */
tyto_plugin_error *ocl_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *desc);
tyto_plugin_error *ocl_prepare(tyto_plugin_device *dev,
                               const tyto_plugin_op_desc *desc,
                               tyto_plugin_kernel **out,
                               tyto_plugin_kernel_info *info);
void ocl_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k);
tyto_plugin_error *
ocl_launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
           tyto_plugin_kernel *k, const tyto_plugin_binding *inputs,
           uint32_t n_inputs, const tyto_plugin_binding *outputs,
           uint32_t n_outputs, const tyto_plugin_binding *workspace);
/* ---- cache.c ----------------------------------------------------------- */
/* Releases every program cached for `dev` (at device_close). */
void ocl_programs_release(tyto_plugin_device *dev);

#endif /* TYTO_OPENCL_OCL_H */
