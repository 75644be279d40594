/*
 * tyto plugin ABI — the whole contract between libtyto (the host) and a
 * device plugin. A plugin is one shared object built against this header and
 * nothing else from tyto. See sdk/docs/plugin-abi.md for the versioning policy
 * and a walkthrough of writing a plugin.
 *
 * Conventions that hold for every declaration below:
 *
 *  - Versioning. TYTO_PLUGIN_ABI_MAJOR changes only when an existing struct or
 *    function changes meaning; the host refuses a plugin of another major.
 *    TYTO_PLUGIN_ABI_MINOR grows when something is appended; the host accepts
 *    any plugin whose minor is not newer than its own, and a newer-minor
 *    plugin as long as the structs it hands over begin with what the host
 *    knows (they always do: tables are append-only). The first three fields
 *    of tyto_plugin_info (struct_size, abi_major, abi_minor) keep their
 *    offsets in every major, so any host can read them and say why it
 *    refuses a plugin.
 *
 *  - struct_size. Every struct that crosses the boundary begins with
 *    `size_t struct_size`, set by whoever fills the struct to sizeof() as that
 *    party compiled it. A reader uses a field only if it lies wholly inside
 *    struct_size (TYTO_PLUGIN_HAS_FIELD); fields past it read as absent (NULL
 *    or 0). Fields are only ever appended.
 *
 *  - Arrays. An array of boundary structs (the hardware offer, op layouts,
 *    launch bindings) is an array of the writer's type: step through it by
 *    the first element's struct_size, not by your own sizeof.
 *
 *  - Optional functions. Every function pointer in a table may be NULL unless
 *    its comment says "required". The host never treats a NULL optional
 *    function as fatal: it falls back (see each comment) or reports the
 *    capability as missing.
 *
 *  - Errors are values. A function that can fail returns a tyto_plugin_error*,
 *    NULL on success. Plugins create errors only through the host's
 *    error_new(); ownership of a returned error passes to the host, which
 *    frees it. A plugin never calls abort(), exit() or assert() on anything a
 *    caller can influence, and never lets a C++ exception cross this boundary.
 *
 *  - Strings. Every const char* a plugin hands the host is NUL-terminated
 *    UTF-8 and stays valid until the plugin is shut down, unless the comment
 *    says otherwise. Strings the host hands the plugin are valid only for the
 *    duration of the call unless the comment says otherwise.
 *
 *  - Threading. Unless a comment says otherwise, the host may call device,
 *    buffer, stream and event functions from any thread, concurrently for
 *    distinct streams; a plugin protects its own shared state. Calls that
 *    take the same stream are never made concurrently by the host.
 *
 * This header includes only <stddef.h> and <stdint.h> on purpose.
 */
#ifndef TYTO_PLUGIN_H
#define TYTO_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TYTO_PLUGIN_ABI_MAJOR 1
#define TYTO_PLUGIN_ABI_MINOR 6

/* True when `field` of *ptr lies wholly inside ptr->struct_size. */
#define TYTO_PLUGIN_HAS_FIELD(ptr, type, field)                                \
  ((ptr) != NULL &&                                                            \
   (ptr)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

/* Element i of a const array of boundary structs of `type`, stepped by the
 * first element's struct_size (see "Arrays" above):
 *   const tyto_plugin_hw_device *o = TYTO_PLUGIN_AT(tyto_plugin_hw_device,
 * offer, i); */
#define TYTO_PLUGIN_AT(type, array, i)                                         \
  ((const type *)(const void *)((const char *)(array) +                        \
                                (size_t)(i) * (array)[0].struct_size))

#define TYTO_PLUGIN_MAX_RANK 8

/* Symbol visibility for the entry point. */
#if defined(_WIN32)
#define TYTO_PLUGIN_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define TYTO_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define TYTO_PLUGIN_EXPORT
#endif

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* Error codes. Append-only. */
typedef enum tyto_plugin_code {
  TYTO_PLUGIN_OK = 0,
  TYTO_PLUGIN_ERR_INVALID_ARGUMENT = 1, /* the caller passed something wrong */
  TYTO_PLUGIN_ERR_OUT_OF_MEMORY = 2,    /* host or device memory exhausted */
  TYTO_PLUGIN_ERR_UNSUPPORTED = 3,      /* op, dtype or feature not provided */
  TYTO_PLUGIN_ERR_NOT_FOUND = 4,        /* device, library or file missing */
  TYTO_PLUGIN_ERR_UNAVAILABLE = 5,      /* no driver, device busy or lost */
  TYTO_PLUGIN_ERR_DEVICE = 6,  /* the device or driver reported failure */
  TYTO_PLUGIN_ERR_INTERNAL = 7 /* a bug in the plugin */
} tyto_plugin_code;

/* Opaque error value. Created with tyto_plugin_host.error_new(); owned by the
 * host once returned from any plugin function. */
typedef struct tyto_plugin_error tyto_plugin_error;

/* ------------------------------------------------------------------------ */
/* Host services, handed to the plugin at init                               */
/* ------------------------------------------------------------------------ */

typedef enum tyto_plugin_log_level {
  TYTO_PLUGIN_LOG_ERROR = 0,
  TYTO_PLUGIN_LOG_WARN = 1,
  TYTO_PLUGIN_LOG_INFO = 2,
  TYTO_PLUGIN_LOG_DEBUG = 3
} tyto_plugin_log_level;

typedef struct tyto_plugin_host {
  size_t struct_size;
  uint32_t abi_major;       /* the host's TYTO_PLUGIN_ABI_MAJOR */
  uint32_t abi_minor;       /* the host's TYTO_PLUGIN_ABI_MINOR */
  const char *host_version; /* tyto's version string, e.g. "0.1.0" */

  /* Opaque to the plugin: pass it back as the first argument of the
   * functions below. Valid until the plugin's shutdown() returns. */
  void *ctx;

  /* Required. printf-style log line, attributed to this plugin. Lines above
   * the configured log level are dropped by the host. Thread-safe. */
  void (*log)(void *ctx, tyto_plugin_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 3, 4)))
#endif
      ;

  /* Required. Looks up `key` in this plugin's section of the configuration
   * (the INI section named after the plugin, e.g. [cuda]). Returns NULL when
   * the key is not set. The string is owned by the host and stays valid until
   * shutdown() returns. Thread-safe. */
  const char *(*option)(void *ctx, const char *key);

  /* Required. Creates an error with a code and a printf-style message. The
   * message should say what was expected, what was found, and what to do.
   * Never returns NULL (on allocation failure it returns a static
   * out-of-memory error). Thread-safe. */
  tyto_plugin_error *(*error_new)(tyto_plugin_code code, const char *fmt, ...)
#if defined(__GNUC__)
      __attribute__((format(printf, 2, 3)))
#endif
      ;

  /* Required. Frees an error the plugin created but will not return (say,
   * a second failure while cleaning up after a first). Errors that are
   * returned to the host must not be freed. NULL is a no-op. Thread-safe. */
  void (*error_free)(tyto_plugin_error *err);

  /* Required. The message and code of an error made by error_new (for a
   * plugin that keeps an asynchronous error and reports it later). The
   * string lives as long as the error. Thread-safe. */
  const char *(*error_message)(const tyto_plugin_error *err);
  tyto_plugin_code (*error_code)(const tyto_plugin_error *err);
} tyto_plugin_host;

/* ------------------------------------------------------------------------ */
/* Hardware offer and claim                                                  */
/* ------------------------------------------------------------------------ */

typedef enum tyto_plugin_hw_kind {
  TYTO_PLUGIN_HW_CPU = 0, /* the machine's processors, one entry per machine */
  TYTO_PLUGIN_HW_PCI = 1  /* a PCI GPU, 3D controller or coprocessor */
} tyto_plugin_hw_kind;

/* One piece of hardware found by the host in the hwloc topology. Owned by
 * the host; valid for the duration of probe(). */
typedef struct tyto_plugin_hw_device {
  size_t struct_size;
  uint32_t index;      /* position in the offer; pass it to claim()/refuse() */
  uint32_t kind;       /* tyto_plugin_hw_kind */
  const char *name;    /* model name as hwloc reports it; may be "" */
  int32_t numa_node;   /* OS index of the nearest NUMA node, -1 if unknown */
  const char *cpuset;  /* CPUs near it, hwloc list syntax ("0-15,32-47") */
  const char *nodeset; /* NUMA nodes near it, hwloc list syntax */

  /* TYTO_PLUGIN_HW_PCI only (0 / "" otherwise). */
  uint16_t pci_vendor_id; /* e.g. 0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel */
  uint16_t pci_device_id;
  uint32_t pci_class_id;  /* e.g. 0x0300 VGA, 0x0302 3D, 0x1200 accelerator */
  const char *pci_bus_id; /* "dddd:bb:dd.f", lower-case hex */

  /* TYTO_PLUGIN_HW_CPU only (0 otherwise). */
  uint32_t packages;   /* sockets */
  uint32_t cores;      /* physical cores usable by this process */
  uint32_t pus;        /* hardware threads usable by this process */
  uint32_t numa_nodes; /* NUMA nodes */
} tyto_plugin_hw_device;

/* Where a plugin reports what it takes. Owned by the host; valid for the
 * duration of probe(). Both functions copy their string arguments. */
typedef struct tyto_plugin_claims {
  size_t struct_size;
  void *ctx; /* pass back as first argument */

  /* Required. Declares device number `ordinal` of this plugin (0, 1, ... in
   * the order the plugin wants them named: "<plugin>:<ordinal>"). hw_index
   * is the offered hardware it drives, or -1 when it drives nothing offered
   * (a software device, a device whose bus id the driver does not report). */
  void (*claim)(void *ctx, int32_t hw_index, uint32_t ordinal,
                const char *name);

  /* Required. Says why the plugin will not drive something. hw_index is an
   * offered device, or -1 for a device the plugin found on its own (say, an
   * OpenCL device of a version too old). `name` may be NULL for an offered
   * device. The reason is shown to users by tyto-info: make it actionable. */
  void (*refuse)(void *ctx, int32_t hw_index, const char *name,
                 const char *reason);
} tyto_plugin_claims;

/* ------------------------------------------------------------------------ */
/* Devices                                                                   */
/* ------------------------------------------------------------------------ */

/* Element types. F16 is IEEE 754 binary16 and BF16 bfloat16 (the top 16
 * bits of a binary32); both are storage formats (ABI 1.5): an op on them
 * computes in at least f32 and rounds its result to the dtype once
 * (sdk/docs/ops.md, "Dtypes"). I32 and I64 (ABI 1.6) are two's-complement
 * integers for indices and counts, taken by the ops sdk/docs/ops.md lists
 * under "Integer dtypes" (casts, layout, indexing, ARGMAX/ARGMIN results,
 * the whole-number elementwise ops and SUM, MAX_REDUCE, MIN_REDUCE),
 * wrapping on overflow; never in a fused program. U8 is reserved. */
typedef enum tyto_plugin_dtype {
  TYTO_PLUGIN_DTYPE_F32 = 0,
  TYTO_PLUGIN_DTYPE_F64 = 1,
  TYTO_PLUGIN_DTYPE_F16 = 2,
  TYTO_PLUGIN_DTYPE_BF16 = 3,
  TYTO_PLUGIN_DTYPE_I32 = 4,
  TYTO_PLUGIN_DTYPE_I64 = 5,
  TYTO_PLUGIN_DTYPE_U8 = 6
} tyto_plugin_dtype;

#define TYTO_PLUGIN_DTYPE_BIT(d) (UINT32_C(1) << (d))

/* Device capability flags. */
enum {
  /* Buffers are ordinary host memory: buffer_host_ptr() returns a pointer the
   * host may read and write directly once the device is idle; may read
   * bytes that queued work wrote once an event recorded after that work has
   * completed, while later work runs (the core reads the gradients a
   * backward pass sends this way: no copy); and may write a buffer that no
   * queued or running work reads or writes, while other work runs, the
   * writes seen by work queued after them (the core writes the combined
   * gradients into each replica's update input this way). */
  TYTO_PLUGIN_CAP_UNIFIED_MEMORY = 1u << 0,
  /* host_alloc_pinned() gives page-locked memory for fast async copies. */
  TYTO_PLUGIN_CAP_PINNED_HOST = 1u << 1,
  /* copy_peer() moves data directly between two devices of this plugin. */
  TYTO_PLUGIN_CAP_PEER_COPY = 1u << 2,
  /* Streams run work asynchronously to the calling thread. */
  TYTO_PLUGIN_CAP_ASYNC = 1u << 3
};

/* What a device is and can do. Filled by device_query(). */
typedef struct tyto_plugin_device_info {
  size_t struct_size;
  const char *name;           /* "NVIDIA H100 80GB HBM3", "AMD EPYC 9R14" */
  const char *vendor;         /* "NVIDIA", "AMD", "Intel", "PoCL", ... */
  const char *driver_version; /* "" when not meaningful */
  uint32_t dtypes;            /* TYTO_PLUGIN_DTYPE_BIT() of each dtype */
  uint32_t flags;             /* TYTO_PLUGIN_CAP_* */
  uint64_t memory_bytes;      /* memory the device can allocate from */
  uint64_t alignment;       /* every buffer is aligned to this, a power of 2 */
  uint64_t max_alloc_bytes; /* largest single buffer, 0 = memory_bytes */
  uint32_t compute_units;   /* cores, SMs, CUs ... */
  int32_t numa_node;        /* nearest NUMA node, -1 if unknown */
  const char *pci_bus_id;   /* "dddd:bb:dd.f" or "" */
} tyto_plugin_device_info;

/* Opaque handles, defined by each plugin. */
typedef struct tyto_plugin_state tyto_plugin_state;
typedef struct tyto_plugin_device tyto_plugin_device;
typedef struct tyto_plugin_buffer tyto_plugin_buffer;
typedef struct tyto_plugin_stream tyto_plugin_stream;
typedef struct tyto_plugin_event tyto_plugin_event;
typedef struct tyto_plugin_kernel tyto_plugin_kernel;
typedef struct tyto_plugin_graph tyto_plugin_graph; /* ABI 1.4 */

/* ------------------------------------------------------------------------ */
/* Op descriptors                                                            */
/* ------------------------------------------------------------------------ */

/* Op codes. Append-only: a value never changes meaning. Inputs, outputs
 * and attributes (iattrs/fattrs/blob) are specified per op in
 * sdk/docs/ops.md; the groups below summarise them. Unless said otherwise
 * every input and output has the same dtype, and an elementwise op's
 * inputs arrive already broadcast to the output's shape (stride 0 on
 * broadcast dimensions). */
typedef enum tyto_plugin_op {
  TYTO_PLUGIN_OP_INVALID = 0,
  TYTO_PLUGIN_OP_COPY = 1, /* strided copy: output = input (layouts differ) */
  TYTO_PLUGIN_OP_FILL = 2, /* output = fattrs[0] */

  /* Elementwise unary, 1 input. LEAKY_RELU: fattrs[0] = negative slope;
   * ELU: fattrs[0] = alpha. */
  TYTO_PLUGIN_OP_NEG = 16,
  TYTO_PLUGIN_OP_ABS = 17,
  TYTO_PLUGIN_OP_SIGN = 18,
  TYTO_PLUGIN_OP_EXP = 19,
  TYTO_PLUGIN_OP_LOG = 20,
  TYTO_PLUGIN_OP_LOG1P = 21,
  TYTO_PLUGIN_OP_EXPM1 = 22,
  TYTO_PLUGIN_OP_SQRT = 23,
  TYTO_PLUGIN_OP_RSQRT = 24,
  TYTO_PLUGIN_OP_SQUARE = 25,
  TYTO_PLUGIN_OP_RECIPROCAL = 26,
  TYTO_PLUGIN_OP_SIN = 27,
  TYTO_PLUGIN_OP_COS = 28,
  TYTO_PLUGIN_OP_TAN = 29,
  TYTO_PLUGIN_OP_ASIN = 30,
  TYTO_PLUGIN_OP_ACOS = 31,
  TYTO_PLUGIN_OP_ATAN = 32,
  TYTO_PLUGIN_OP_SINH = 33,
  TYTO_PLUGIN_OP_COSH = 34,
  TYTO_PLUGIN_OP_TANH = 35,
  TYTO_PLUGIN_OP_ASINH = 36,
  TYTO_PLUGIN_OP_ACOSH = 37,
  TYTO_PLUGIN_OP_ATANH = 38,
  TYTO_PLUGIN_OP_SIGMOID = 39,
  TYTO_PLUGIN_OP_RELU = 40,
  TYTO_PLUGIN_OP_LEAKY_RELU = 41,
  TYTO_PLUGIN_OP_ELU = 42,
  TYTO_PLUGIN_OP_SOFTPLUS = 43,
  TYTO_PLUGIN_OP_ERF = 44,
  TYTO_PLUGIN_OP_FLOOR = 45,
  TYTO_PLUGIN_OP_CEIL = 46,
  TYTO_PLUGIN_OP_ROUND = 47, /* halves away from zero, as C's round() */

  /* Conversion (ABI 1.5), 1 input, the output of the same shape and
   * (unlike every other op) any dtype: the input's value rounded to the
   * output's dtype, to nearest with ties to even; NaN stays NaN,
   * infinities and signed zeros are kept, a finite value beyond the
   * output's range becomes an infinity. Any pair of F32, F64, F16, BF16.
   * ABI 1.6, with I32 and I64: to an integer, truncated toward zero and
   * saturated at its limits, NaN giving 0; from an integer, rounded to
   * nearest (ties to even); I64 to I32 keeps the low 32 bits. */
  TYTO_PLUGIN_OP_CAST = 48,

  /* Elementwise binary, 2 inputs. Comparisons give 1 or 0 in the dtype. */
  TYTO_PLUGIN_OP_ADD = 64,
  TYTO_PLUGIN_OP_SUB = 65,
  TYTO_PLUGIN_OP_MUL = 66,
  TYTO_PLUGIN_OP_DIV = 67,
  TYTO_PLUGIN_OP_POW = 68,
  TYTO_PLUGIN_OP_MAX = 69,
  TYTO_PLUGIN_OP_MIN = 70,
  TYTO_PLUGIN_OP_ATAN2 = 71,
  TYTO_PLUGIN_OP_EQ = 72,
  TYTO_PLUGIN_OP_NE = 73,
  TYTO_PLUGIN_OP_LT = 74,
  TYTO_PLUGIN_OP_LE = 75,
  TYTO_PLUGIN_OP_GT = 76,
  TYTO_PLUGIN_OP_GE = 77,

  /* Elementwise ternary, 3 inputs. WHERE: cond != 0 ? a : b. FMA: a*b + c. */
  TYTO_PLUGIN_OP_WHERE = 96,
  TYTO_PLUGIN_OP_FMA = 97,

  /* Reductions, 1 input. iattrs: the reduced axes, ascending. The output
   * keeps every axis (reduced ones with extent 1). ARG*: one axis; the
   * index is stored in the output's (floating) dtype. */
  TYTO_PLUGIN_OP_SUM = 128,
  TYTO_PLUGIN_OP_MEAN = 129,
  TYTO_PLUGIN_OP_MAX_REDUCE = 130,
  TYTO_PLUGIN_OP_MIN_REDUCE = 131,
  TYTO_PLUGIN_OP_PROD = 132,
  TYTO_PLUGIN_OP_ARGMAX = 133,
  TYTO_PLUGIN_OP_ARGMIN = 134,
  TYTO_PLUGIN_OP_LOG_SUM_EXP = 135,
  TYTO_PLUGIN_OP_NORM_L1 = 136,
  TYTO_PLUGIN_OP_NORM_L2 = 137,

  /* Matrix product, 2 inputs [..., m, k] and [..., k, n] (batch axes
   * broadcast), output [..., m, n]. iattrs[0], iattrs[1]: transpose the
   * last two axes of input 0, input 1 before multiplying. */
  TYTO_PLUGIN_OP_MATMUL = 160,

  /* Layout ops that are not a strided COPY. PAD: iattrs = mode (0 constant,
   * 1 reflect) then (before, after) per axis; fattrs[0] = constant.
   * GATHER: inputs data, indices (whole numbers in the dtype); iattrs[0] =
   * axis. SCATTER_ADD: inputs base, indices, updates; iattrs[0] = axis.
   * ONE_HOT: input indices; output [..., depth]. */
  TYTO_PLUGIN_OP_PAD = 192,
  TYTO_PLUGIN_OP_GATHER = 193,
  TYTO_PLUGIN_OP_SCATTER_ADD = 194,
  TYTO_PLUGIN_OP_ONE_HOT = 195,

  /* Neural ops. SOFTMAX, LOG_SOFTMAX: iattrs[0] = axis. CONV2D: inputs x
   * [N, C, H, W], w [O, C/groups, KH, KW], optional bias [O]; iattrs =
   * stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups.
   * MAX_POOL2D, AVG_POOL2D: iattrs = kernel_h, kernel_w, stride_h,
   * stride_w, pad_h, pad_w (AVG: padding not counted).
   * Derivatives (ABI 1.1): CONV2D_BACKWARD_DATA: inputs dy [N, O, OH, OW],
   * w; output dx [N, C, H, W]; iattrs = CONV2D's seven. CONV2D_BACKWARD_FILTER:
   * inputs x, dy; output dw [O, C/groups, KH, KW]; iattrs = CONV2D's
   * seven. MAX_POOL2D_BACKWARD: inputs x, dy [N, C, OH, OW]; output [N, C,
   * H, W] = zeros plus each dy element at the first maximum (row-major,
   * padding never wins) of its window of x. MAX_POOL2D_SELECT: inputs x,
   * t [N, C, H, W]; output [N, C, OH, OW] = t at that position.
   * AVG_POOL2D_BACKWARD: input dy; output [N, C, H, W], each dy element
   * spread evenly over the unpadded part of its window. Pool iattrs as
   * MAX_POOL2D / AVG_POOL2D. Output shapes carry H, W, KH, KW. */
  TYTO_PLUGIN_OP_SOFTMAX = 224,
  TYTO_PLUGIN_OP_LOG_SOFTMAX = 225,
  TYTO_PLUGIN_OP_CONV2D = 226,
  TYTO_PLUGIN_OP_MAX_POOL2D = 227,
  TYTO_PLUGIN_OP_AVG_POOL2D = 228,
  TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA = 229,
  TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER = 230,
  TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD = 231,
  TYTO_PLUGIN_OP_MAX_POOL2D_SELECT = 232,
  TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD = 233,

  /* Random numbers from Philox-4x32-10: no inputs; iattrs[0] = seed (64
   * bits), iattrs[1] = stream offset. Element i of the row-major output
   * takes counter (offset + i/4) and lane i%4, identically on every
   * device. UNIFORM: fattrs low, high. NORMAL: fattrs mean, stddev
   * (Box-Muller on lanes pairs). BERNOULLI: fattrs[0] = p. ABI 1.3: an
   * optional input, the step: a rank-0 tensor of the output's dtype whose
   * value s (truncated; in [0, 2^53]) fills counter words 2 and 3
   * (sdk/docs/random.md); a plugin that cannot honour it must refuse the
   * op at prepare. */
  TYTO_PLUGIN_OP_RANDOM_UNIFORM = 256,
  TYTO_PLUGIN_OP_RANDOM_NORMAL = 257,
  TYTO_PLUGIN_OP_RANDOM_BERNOULLI = 258,

  /* Linear algebra on the last two axes, batched over the rest: INV,
   * DET, LOGDET (log |det|), SOLVE (A, B) -> X with A X = B, CHOLESKY
   * (lower), QR (two outputs Q, R; reduced). TRIANGULAR_SOLVE (ABI 1.1):
   * (A, B) -> X with op(A) X = B, reading one triangle of A; iattrs =
   * lower, transpose, unit_diagonal; batch axes of A and B arrive
   * broadcast to X's (stride 0), as for SOLVE. */
  TYTO_PLUGIN_OP_INV = 288,
  TYTO_PLUGIN_OP_DET = 289,
  TYTO_PLUGIN_OP_LOGDET = 290,
  TYTO_PLUGIN_OP_SOLVE = 291,
  TYTO_PLUGIN_OP_CHOLESKY = 292,
  TYTO_PLUGIN_OP_QR = 293,
  TYTO_PLUGIN_OP_TRIANGULAR_SOLVE = 294,

  /* A fused elementwise expression (ABI 1.2): n_inputs inputs (1 ..
   * TYTO_PLUGIN_FUSED_MAX_IO), already broadcast to the outputs' shape as
   * for any elementwise op, and n_outputs outputs (1 ..
   * TYTO_PLUGIN_FUSED_MAX_IO) of that one shape; the operands have one
   * dtype unless the program converts between dtypes with CAST (ABI
   * 1.5). The blob is a tyto_plugin_fused_program evaluated for each
   * element position; no iattrs or fattrs. An output may be bound to the
   * same memory as an input with the same layout (the host plans such
   * in-place updates): a kernel reads all of an element's inputs before
   * writing any of its outputs. */
  TYTO_PLUGIN_OP_FUSED = 320
} tyto_plugin_op;

/* The instructions of a fused program that are not elementwise ops. */
enum {
  TYTO_PLUGIN_FUSED_INPUT = 0x10001,  /* value = input arg[0] */
  TYTO_PLUGIN_FUSED_CONST = 0x10002,  /* value = attr */
  TYTO_PLUGIN_FUSED_OUTPUT = 0x10003, /* output arg[1] = value arg[0] */
  TYTO_PLUGIN_FUSED_MAX_IO = 16
};

/* One instruction of a fused program. Instruction i defines value i (an
 * OUTPUT defines none): op is TYTO_PLUGIN_FUSED_INPUT/CONST/OUTPUT or an
 * elementwise op code (NEG .. ROUND and CAST with arg[0]; ADD .. GE with
 * arg[0], arg[1]; WHERE, FMA with arg[0..2]), whose operands are values of
 * earlier instructions (arg[k] < i). LEAKY_RELU and ELU take their
 * parameter from attr. Results are exactly those of the op run alone,
 * rounded to the value's dtype after every instruction.
 *
 * Dtypes (ABI 1.5). Every value has a dtype: an INPUT's is its input's, a
 * CAST's is `dtype`, any other instruction's is its operands' (which all
 * have one dtype), and a CONST's is `dtype`. An OUTPUT's value has its
 * output's dtype. So a program whose operands differ in dtype converts
 * between them only through CAST instructions; the host sends such
 * programs only to plugins of ABI 1.5 or later. `dtype` is read only for
 * CAST and CONST, and an instruction whose struct_size stops before it
 * (a host older than 1.5) has the dtype of every operand of the op. */
typedef struct tyto_plugin_fused_instr {
  size_t struct_size;
  uint32_t op;
  uint32_t arg[3];
  double attr;
  uint32_t dtype; /* tyto_plugin_dtype (ABI 1.5) */
} tyto_plugin_fused_instr;

/* The blob of TYTO_PLUGIN_OP_FUSED: every output is written by exactly one
 * OUTPUT instruction. instrs is an array (stride: instrs[0].struct_size)
 * valid during supports_op()/prepare() only. */
typedef struct tyto_plugin_fused_program {
  size_t struct_size;
  uint32_t n_instrs;
  const tyto_plugin_fused_instr *instrs;
} tyto_plugin_fused_program;

/* A tensor as a kernel sees it: dtype, shape, strides in elements (may be 0
 * for broadcast dimensions, negative for flipped ones) and an offset in
 * elements from the bound buffer position. */
typedef struct tyto_plugin_layout {
  size_t struct_size;
  uint32_t dtype; /* tyto_plugin_dtype */
  uint32_t rank;  /* 0 .. TYTO_PLUGIN_MAX_RANK */
  int64_t shape[TYTO_PLUGIN_MAX_RANK];
  int64_t strides[TYTO_PLUGIN_MAX_RANK];
  int64_t offset;
} tyto_plugin_layout;

/* Everything a plugin needs to prepare one kernel. Owned by the host and
 * valid only during supports_op()/prepare(): copy what you keep. */
typedef struct tyto_plugin_op_desc {
  size_t struct_size;
  uint32_t op; /* tyto_plugin_op */
  uint32_t n_inputs;
  uint32_t n_outputs;
  const tyto_plugin_layout *inputs;  /* n_inputs entries */
  const tyto_plugin_layout *outputs; /* n_outputs entries */
  uint32_t n_iattrs;                 /* integer attributes, per-op meaning */
  const int64_t *iattrs;
  uint32_t n_fattrs; /* real attributes, per-op meaning */
  const double *fattrs;
  size_t blob_size; /* opaque payload, e.g. a fused program */
  const void *blob;
} tyto_plugin_op_desc;

/* Flags of a prepared kernel (tyto_plugin_kernel_info.flags). */
enum {
  /* launch() waits for the stream or reads device memory on the host (to
   * check indices, say), so its launches cannot be recorded into a graph
   * (graph_begin). */
  TYTO_PLUGIN_KERNEL_HOST_SYNC = 1u << 0
};

/* Filled by prepare(). */
typedef struct tyto_plugin_kernel_info {
  size_t struct_size;
  uint64_t workspace_bytes; /* scratch the host must bind at launch, or 0 */
  uint32_t flags;           /* TYTO_PLUGIN_KERNEL_* (ABI 1.4) */
} tyto_plugin_kernel_info;

/* A buffer position bound to a kernel argument at launch. */
typedef struct tyto_plugin_binding {
  size_t struct_size;
  tyto_plugin_buffer *buffer;
  uint64_t
      offset; /* bytes from the buffer's start, aligned as the layout's dtype */
} tyto_plugin_binding;

/* ------------------------------------------------------------------------ */
/* The device table                                                          */
/* ------------------------------------------------------------------------ */

/* Functions on open devices. One table per plugin, shared by its devices.
 * `stream` arguments may be NULL where noted: the operation then runs
 * synchronously on the calling thread, ordered with no stream. */
typedef struct tyto_plugin_device_fns {
  size_t struct_size;

  /* Required. Closes a device opened by tyto_plugin_fns.device_open. The host
   * has destroyed every buffer, stream, event and kernel of it first. */
  void (*device_close)(tyto_plugin_device *dev);

  /* Required. Allocates `size` bytes (size may be 0) of device memory,
   * aligned to device_info.alignment. Contents are undefined. The buffer is
   * freed with buffer_free(). */
  tyto_plugin_error *(*buffer_alloc)(tyto_plugin_device *dev, uint64_t size,
                                     tyto_plugin_buffer **out);

  /* Required. Frees a buffer; no stream may still be using it. NULL is a
   * no-op. */
  void (*buffer_free)(tyto_plugin_device *dev, tyto_plugin_buffer *buf);

  /* Optional. For TYTO_PLUGIN_CAP_UNIFIED_MEMORY devices: the host address
   * of the buffer's first byte, valid until buffer_free(). NULL otherwise. */
  void *(*buffer_host_ptr)(tyto_plugin_device *dev, tyto_plugin_buffer *buf);

  /* Required. Creates an in-order stream: work enqueued on one stream runs in
   * the order enqueued. Destroyed with stream_destroy(), which waits for the
   * stream's queued work first. */
  tyto_plugin_error *(*stream_create)(tyto_plugin_device *dev,
                                      tyto_plugin_stream **out);
  void (*stream_destroy)(tyto_plugin_device *dev, tyto_plugin_stream *s);

  /* Required. Blocks until all work enqueued on `s` so far has completed.
   * Returns the first error any of that work raised, if one did. */
  tyto_plugin_error *(*stream_synchronize)(tyto_plugin_device *dev,
                                           tyto_plugin_stream *s);

  /* Required. Events mark a point in a stream. A new event counts as
   * already complete. event_record() captures the work enqueued on `s` so
   * far; event_wait() makes later work on `s` wait until the event's
   * captured work completes (s may belong to another device of the same
   * plugin, not of another plugin); event_synchronize() blocks the caller
   * until then; event_query() sets *complete to 1 or 0 without blocking and
   * returns an error only when the captured work failed. Recording again
   * replaces the captured point. In event_record() and event_wait(), `dev`
   * is the device of the stream. */
  tyto_plugin_error *(*event_create)(tyto_plugin_device *dev,
                                     tyto_plugin_event **out);
  void (*event_destroy)(tyto_plugin_device *dev, tyto_plugin_event *e);
  tyto_plugin_error *(*event_record)(tyto_plugin_device *dev,
                                     tyto_plugin_event *e,
                                     tyto_plugin_stream *s);
  tyto_plugin_error *(*event_wait)(tyto_plugin_device *dev,
                                   tyto_plugin_stream *s, tyto_plugin_event *e);
  tyto_plugin_error *(*event_synchronize)(tyto_plugin_device *dev,
                                          tyto_plugin_event *e);
  tyto_plugin_error *(*event_query)(tyto_plugin_device *dev,
                                    tyto_plugin_event *e, int *complete);

  /* Required. Copies between host memory and a buffer, and within a device.
   * With a stream the copy is enqueued and the host memory must stay valid
   * and untouched until the stream passes it; with stream NULL the copy is
   * complete on return. Ranges are checked against the buffer's size. */
  tyto_plugin_error *(*copy_h2d)(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t dst_offset,
                                 const void *src, uint64_t size);
  tyto_plugin_error *(*copy_d2h)(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 void *dst, tyto_plugin_buffer *src,
                                 uint64_t src_offset, uint64_t size);
  tyto_plugin_error *(*copy_d2d)(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t dst_offset,
                                 tyto_plugin_buffer *src, uint64_t src_offset,
                                 uint64_t size);

  /* Optional (TYTO_PLUGIN_CAP_PEER_COPY). Copies from a buffer of device
   * `src_dev` to one of `dst_dev`, both of this plugin, enqueued on `s`,
   * a stream of dst_dev. When NULL or failing with UNSUPPORTED, the host
   * stages the copy through host memory. */
  tyto_plugin_error *(*copy_peer)(tyto_plugin_device *dst_dev,
                                  tyto_plugin_stream *s,
                                  tyto_plugin_buffer *dst, uint64_t dst_offset,
                                  tyto_plugin_device *src_dev,
                                  tyto_plugin_buffer *src, uint64_t src_offset,
                                  uint64_t size);

  /* Optional (TYTO_PLUGIN_CAP_PINNED_HOST). Page-locked host memory for
   * staging; freed with host_free_pinned(). When NULL the host uses
   * ordinary aligned memory. */
  tyto_plugin_error *(*host_alloc_pinned)(tyto_plugin_device *dev,
                                          uint64_t size, void **out);
  void (*host_free_pinned)(tyto_plugin_device *dev, void *ptr);

  /* Optional. NULL when the device can run the described op; otherwise an
   * error (usually UNSUPPORTED) whose message says why ("conv2d: f64 not
   * supported by this device"). When the function is NULL the host calls
   * prepare() and treats UNSUPPORTED from it the same way. */
  tyto_plugin_error *(*supports_op)(tyto_plugin_device *dev,
                                    const tyto_plugin_op_desc *desc);

  /* Optional (a device without it is a memory-only device). Builds a kernel
   * for one op descriptor: this is where code is generated and compiled.
   * May be slow; never called concurrently for the same device. The kernel
   * lives until kernel_release(). */
  tyto_plugin_error *(*prepare)(tyto_plugin_device *dev,
                                const tyto_plugin_op_desc *desc,
                                tyto_plugin_kernel **out,
                                tyto_plugin_kernel_info *info);
  /* Releases a kernel. Launches of it still queued on a stream must still
   * run correctly: the plugin keeps whatever they need alive. */
  void (*kernel_release)(tyto_plugin_device *dev, tyto_plugin_kernel *k);

  /* Required with prepare(). Enqueues a kernel on `s` (never NULL) with
   * n_inputs then n_outputs bindings, in descriptor order, and the workspace
   * binding when info.workspace_bytes was non-zero (NULL otherwise). Errors
   * found while enqueuing are returned; errors raised while running surface
   * from stream_synchronize(). */
  tyto_plugin_error *(*launch)(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               tyto_plugin_kernel *k,
                               const tyto_plugin_binding *inputs,
                               uint32_t n_inputs,
                               const tyto_plugin_binding *outputs,
                               uint32_t n_outputs,
                               const tyto_plugin_binding *workspace);

  /* Optional, all four or none (ABI 1.4). Graphs: a run's launches
   * recorded once and replayed as one unit, so that a program of many
   * small kernels costs one call from the host per run.
   *
   * graph_begin() starts recording on `s`. Until graph_end(), the host
   * calls only launch() on `s` (never copies, events or synchronisation on
   * it, never a kernel with TYTO_PLUGIN_KERNEL_HOST_SYNC); those launches
   * are recorded, not run. graph_end() stops recording and returns the
   * graph, or an error (UNSUPPORTED when something recorded cannot be
   * replayed) and no graph; either way none of the recorded work has run.
   * graph_launch() enqueues one replay on `s`: the same work as the
   * recorded launch() calls, with the same bindings, whose buffers and
   * kernels the host keeps alive until graph_destroy(). The host records
   * only after the same launches ran once without recording, so lazy
   * set-up inside launch() (library handles, their workspaces) is done by
   * then. */
  tyto_plugin_error *(*graph_begin)(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s);
  tyto_plugin_error *(*graph_end)(tyto_plugin_device *dev,
                                  tyto_plugin_stream *s,
                                  tyto_plugin_graph **out);
  tyto_plugin_error *(*graph_launch)(tyto_plugin_device *dev,
                                     tyto_plugin_stream *s,
                                     tyto_plugin_graph *g);
  void (*graph_destroy)(tyto_plugin_device *dev, tyto_plugin_graph *g);
} tyto_plugin_device_fns;

/* ------------------------------------------------------------------------ */
/* The plugin table and info                                                 */
/* ------------------------------------------------------------------------ */

/* One configuration key a plugin understands, shown by tyto-info and used to
 * report unknown keys in the plugin's config section. */
typedef struct tyto_plugin_option_doc {
  size_t struct_size;
  const char *key;         /* [a-z0-9_]+ */
  const char *description; /* one line */
} tyto_plugin_option_doc;

typedef struct tyto_plugin_fns {
  size_t struct_size;

  /* Required. Looks at the hardware offer and reports, through `claims`,
   * every device the plugin will drive and every offered device it will not
   * (with a reason). Devices the plugin does not recognise at all need not
   * be refused. Called once, after init(), on the host's thread. An error
   * means the plugin could not look at all (say, its driver is missing);
   * the host then reports the plugin as loaded with no devices and shows
   * the error's message. */
  tyto_plugin_error *(*probe)(tyto_plugin_state *state,
                              const tyto_plugin_hw_device *offer,
                              uint32_t n_offer,
                              const tyto_plugin_claims *claims);

  /* Required. Describes claimed device `ordinal` without opening it. The
   * host zeroes *info and sets info->struct_size to its own size; the
   * plugin writes only the fields inside that size (TYTO_PLUGIN_HAS_FIELD).
   * Strings stay valid until shutdown(). */
  tyto_plugin_error *(*device_query)(tyto_plugin_state *state, uint32_t ordinal,
                                     tyto_plugin_device_info *info);

  /* Required. Opens claimed device `ordinal` for use. Each open gives a new
   * handle; closing it is device_fns.device_close. */
  tyto_plugin_error *(*device_open)(tyto_plugin_state *state, uint32_t ordinal,
                                    tyto_plugin_device **out);

  /* Required. Releases everything the plugin holds. Called once, after every
   * device is closed, before the shared object is unloaded. */
  void (*shutdown)(tyto_plugin_state *state);
} tyto_plugin_fns;

/* What the plugin says about itself. The plugin owns this struct (usually a
 * static const object) and everything it points to; all of it stays valid
 * until shutdown() returns. */
typedef struct tyto_plugin_info {
  size_t struct_size;
  uint32_t abi_major;      /* TYTO_PLUGIN_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;      /* TYTO_PLUGIN_ABI_MINOR the plugin was built with */
  const char *name;        /* short, [a-z0-9_]+, used in device ids: "cuda" */
  const char *vendor;      /* who ships it */
  const char *version;     /* the plugin's own version */
  const char *license;     /* SPDX identifier, e.g. "MIT" */
  const char *description; /* one line for tyto-info */
  const tyto_plugin_fns *fns;               /* required */
  const tyto_plugin_device_fns *device_fns; /* required */
  const tyto_plugin_option_doc *options;    /* n_options entries, may be NULL */
  uint32_t n_options;
} tyto_plugin_info;

/* The entry point. A plugin in the file tyto_plugin_NAME.so exports exactly
 * one symbol, named after its module as libtool's -dlpreopen requires:
 *
 *   TYTO_PLUGIN_EXPORT tyto_plugin_error *
 *   tyto_plugin_NAME_LTX_init(const tyto_plugin_host *host,
 *                             const tyto_plugin_info **info,
 *                             tyto_plugin_state **state);
 *
 * It sets *info to the plugin's description and *state to its private state
 * (which may be NULL), or returns an error and leaves the plugin unusable
 * (the host then unloads it without calling shutdown()). The host table and
 * everything it points to stay valid until shutdown() returns; the plugin
 * may keep the pointer. Called once, on the host's thread. It should be
 * cheap: heavy work (driver initialisation) belongs in probe(). */
typedef tyto_plugin_error *(*tyto_plugin_init_fn)(const tyto_plugin_host *host,
                                                  const tyto_plugin_info **info,
                                                  tyto_plugin_state **state);

#define TYTO_PLUGIN_ENTRY_SUFFIX "_LTX_init"

#ifdef __cplusplus
}
#endif

#endif /* TYTO_PLUGIN_H */
