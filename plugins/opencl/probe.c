/*
 * Discovery: enumerate OpenCL platforms and devices, describe each usable
 * device once (ocl_devinfo), match it to the hardware the host offered by
 * PCI address, and claim or refuse it.
 *
 * PCI addresses come from whichever query the driver answers:
 * cl_khr_pci_bus_info (domain included), NVIDIA's attribute query (domain
 * only on newer drivers) or AMD's topology query (no domain). Without a
 * domain a device matches an offered entry only when bus, device and
 * function single out one entry.
 */
#include "ocl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/pci.h"
#include "errors.h"
#include "pci.h"

/* Vendor queries, defined here because not every <CL/cl_ext.h> has them;
 * the values are fixed by each extension's registry entry. */
#define OCL_DEVICE_PCI_BUS_INFO_KHR 0x410F
#define OCL_DEVICE_PCI_BUS_ID_NV 0x4008
#define OCL_DEVICE_PCI_SLOT_ID_NV 0x4009
#define OCL_DEVICE_PCI_DOMAIN_ID_NV 0x400A
#define OCL_DEVICE_TOPOLOGY_AMD 0x4037
#define OCL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD 1
#define OCL_PLATFORM_NOT_FOUND_KHR (-1001)

/* Layout of cl_device_pci_bus_info_khr. */
typedef struct {
  cl_uint pci_domain, pci_bus, pci_device, pci_function;
} ocl_pci_bus_info_khr;

/* Layout of cl_device_topology_amd (24 bytes): a type word, 17 bytes of
 * padding, then bus, device and function as single bytes. */
typedef union {
  struct {
    cl_uint type;
    cl_uint data[5];
  } raw;
  struct {
    cl_uint type;
    cl_char unused[17];
    cl_char bus, device, function;
  } pcie;
} ocl_topology_amd;

/* A device found during enumeration, before the claim/refuse decision. */
typedef struct {
  ocl_devinfo info;
  cl_device_type type;
  pci_addr pci;
  char reason[384]; /* "" when usable */
  int moved;        /* info's strings now belong to the state */
} candidate;

typedef struct {
  const tyto_plugin_host *host;
  candidate *c;
  size_t n, cap;
} candidates;

/* ---- small string helpers --------------------------------------------- */

/* Case-insensitive substring test (strcasestr is a GNU extension). */
static int contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  if (n == 0)
    return 1;
  for (; *hay != '\0'; hay++) {
    size_t i = 0;
    while (i < n && hay[i] != '\0' &&
           tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      i++;
    if (i == n)
      return 1;
  }
  return 0;
}

static int equal_nocase(const char *a, const char *b) {
  for (; *a != '\0' && *b != '\0'; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
      return 0;
  return *a == *b;
}

/* Whether the space-separated list `exts` contains `name` as a whole word:
 * a plain substring test would let "cl_khr_fp64" match a longer name. */
static int has_extension(const char *exts, const char *name) {
  size_t n = strlen(name);
  for (const char *p = exts; (p = strstr(p, name)) != NULL; p += n) {
    int starts = p == exts || p[-1] == ' ';
    int ends = p[n] == '\0' || p[n] == ' ';
    if (starts && ends)
      return 1;
  }
  return 0;
}

/* Drivers pad some strings with spaces; users should not see them. */
static void trim(char *s) {
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1]))
    s[--n] = '\0';
  size_t lead = 0;
  while (isspace((unsigned char)s[lead]))
    lead++;
  if (lead > 0)
    memmove(s, s + lead, n - lead + 1);
}

/* A device or platform string as a malloc'd, trimmed copy; "" when the
 * query fails (these strings are descriptive only). NULL when out of
 * memory. */
static char *device_string(cl_device_id dev, cl_device_info param) {
  size_t size = 0;
  char *s;
  if (clGetDeviceInfo(dev, param, 0, NULL, &size) != CL_SUCCESS || size == 0)
    return ocl_strdup("");
  if ((s = malloc(size + 1)) == NULL)
    return NULL;
  if (clGetDeviceInfo(dev, param, size, s, NULL) != CL_SUCCESS)
    s[0] = '\0';
  s[size] = '\0';
  trim(s);
  return s;
}

static char *platform_string(cl_platform_id p, cl_platform_info param) {
  size_t size = 0;
  char *s;
  if (clGetPlatformInfo(p, param, 0, NULL, &size) != CL_SUCCESS || size == 0)
    return ocl_strdup("");
  if ((s = malloc(size + 1)) == NULL)
    return NULL;
  if (clGetPlatformInfo(p, param, size, s, NULL) != CL_SUCCESS)
    s[0] = '\0';
  s[size] = '\0';
  trim(s);
  return s;
}

static cl_ulong device_ulong(cl_device_id dev, cl_device_info param) {
  cl_ulong v = 0;
  if (clGetDeviceInfo(dev, param, sizeof v, &v, NULL) != CL_SUCCESS)
    return 0;
  return v;
}

static cl_uint device_uint(cl_device_id dev, cl_device_info param) {
  cl_uint v = 0;
  if (clGetDeviceInfo(dev, param, sizeof v, &v, NULL) != CL_SUCCESS)
    return 0;
  return v;
}

/* ---- PCI addresses ----------------------------------------------------- */

static pci_addr query_pci(cl_device_id dev, const char *exts) {
  pci_addr a = {0, 0, 0, 0, 0, 0};
  if (has_extension(exts, "cl_khr_pci_bus_info")) {
    ocl_pci_bus_info_khr k;
    if (clGetDeviceInfo(dev, OCL_DEVICE_PCI_BUS_INFO_KHR, sizeof k, &k, NULL) ==
        CL_SUCCESS) {
      a = (pci_addr){
          1, 1, k.pci_domain, k.pci_bus, k.pci_device, k.pci_function};
      return a;
    }
  }
  if (has_extension(exts, "cl_nv_device_attribute_query")) {
    cl_uint bus, slot, domain;
    if (clGetDeviceInfo(dev, OCL_DEVICE_PCI_BUS_ID_NV, sizeof bus, &bus,
                        NULL) == CL_SUCCESS &&
        clGetDeviceInfo(dev, OCL_DEVICE_PCI_SLOT_ID_NV, sizeof slot, &slot,
                        NULL) == CL_SUCCESS) {
      /* The slot id packs device (bits 3..7) and function (bits 0..2). */
      a = (pci_addr){1, 0, 0, bus & 0xff, (slot >> 3) & 0x1f, slot & 7};
      /* The domain query exists only on newer drivers; older ones answer
       * CL_INVALID_VALUE. */
      if (clGetDeviceInfo(dev, OCL_DEVICE_PCI_DOMAIN_ID_NV, sizeof domain,
                          &domain, NULL) == CL_SUCCESS) {
        a.domain_known = 1;
        a.domain = domain;
      }
      return a;
    }
  }
  if (has_extension(exts, "cl_amd_device_attribute_query")) {
    ocl_topology_amd t;
    memset(&t, 0, sizeof t);
    if (clGetDeviceInfo(dev, OCL_DEVICE_TOPOLOGY_AMD, sizeof t, &t, NULL) ==
            CL_SUCCESS &&
        t.raw.type == OCL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD) {
      /* cl_char is signed: a bus above 127 would come out negative. */
      a = (pci_addr){1,
                     0,
                     0,
                     (unsigned char)t.pcie.bus,
                     (unsigned char)t.pcie.device,
                     (unsigned char)t.pcie.function};
    }
  }
  return a;
}

/* ---- one device -------------------------------------------------------- */

static void devinfo_free(ocl_devinfo *d) {
  free(d->name);
  free(d->vendor);
  free(d->driver_version);
  free(d->platform_name);
  free(d->driver_text);
  d->name = d->vendor = d->driver_version = d->platform_name = NULL;
  d->driver_text = NULL;
}

static uint64_t round_pow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v && p < (UINT64_C(1) << 62))
    p <<= 1;
  return p;
}

/* Describes one device into `c`; a device tyto cannot use gets a reason.
 * Returns 0 when out of host memory. */
static int describe(candidate *c, cl_platform_id platform,
                    const char *platform_name, cl_device_id id) {
  ocl_devinfo *d = &c->info;
  memset(c, 0, sizeof *c);
  d->platform = platform;
  d->id = id;
  d->hw_index = -1;
  d->numa_node = -1;
  d->name = device_string(id, CL_DEVICE_NAME);
  d->vendor = device_string(id, CL_DEVICE_VENDOR);
  d->driver_version = device_string(id, CL_DRIVER_VERSION);
  d->platform_name = ocl_strdup(platform_name);
  char *version = device_string(id, CL_DEVICE_VERSION);
  char *exts = device_string(id, CL_DEVICE_EXTENSIONS);
  char *profile = device_string(id, CL_DEVICE_PROFILE);
  int ok = d->name && d->vendor && d->driver_version && d->platform_name &&
           version && exts && profile;
  if (!ok)
    goto done;

  if (clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof c->type, &c->type, NULL) !=
      CL_SUCCESS)
    c->type = CL_DEVICE_TYPE_DEFAULT;
  c->pci = query_pci(id, exts);

  /* CL_DEVICE_VERSION reads "OpenCL <major>.<minor> <vendor text>". */
  if (sscanf(version, "OpenCL %d.%d", &d->cl_major, &d->cl_minor) != 2) {
    snprintf(c->reason, sizeof c->reason,
             "its CL_DEVICE_VERSION \"%.100s\" is not of the form \"OpenCL "
             "<major>.<minor>\"; the driver is broken, reinstall or update it",
             version);
    goto done;
  }
  if (d->cl_major < 1 || (d->cl_major == 1 && d->cl_minor < 2)) {
    snprintf(c->reason, sizeof c->reason,
             "it supports OpenCL %d.%d and tyto needs OpenCL 1.2 or newer; "
             "update the driver (%.60s %.40s) or use another device",
             d->cl_major, d->cl_minor, platform_name, d->driver_version);
    goto done;
  }
  cl_bool available = CL_FALSE;
  if (clGetDeviceInfo(id, CL_DEVICE_AVAILABLE, sizeof available, &available,
                      NULL) != CL_SUCCESS ||
      !available) {
    snprintf(c->reason, sizeof c->reason,
             "the driver reports it unavailable (CL_DEVICE_AVAILABLE is "
             "false): it may be in exclusive use by another process, in a "
             "bad state, or lost; check the vendor's tools (e.g. nvidia-smi, "
             "rocm-smi) and retry");
    goto done;
  }

  /* bf16 is stored as ushort and converted with integer operations, so
   * every device runs it; f16 needs cl_khr_fp16 (or the testing option
   * fp16_without_extension, applied by ocl_probe). */
  d->dtypes = TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F32) |
              TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_BF16);
  if (has_extension(exts, "cl_khr_fp64") ||
      device_ulong(id, CL_DEVICE_DOUBLE_FP_CONFIG) != 0)
    d->dtypes |= TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F64);
  d->has_fp16 = has_extension(exts, "cl_khr_fp16");
  if (d->has_fp16)
    d->dtypes |= TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F16);
  d->memory_bytes = device_ulong(id, CL_DEVICE_GLOBAL_MEM_SIZE);
  d->max_alloc_bytes = device_ulong(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  /* CL_DEVICE_MEM_BASE_ADDR_ALIGN is in bits. */
  uint64_t align = device_uint(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8;
  d->alignment = round_pow2(align < 64 ? 64 : align);
  d->compute_units = device_uint(id, CL_DEVICE_MAX_COMPUTE_UNITS);
  cl_bool compiler = CL_FALSE;
  if (clGetDeviceInfo(id, CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler,
                      &compiler, NULL) == CL_SUCCESS)
    d->has_compiler = compiler != CL_FALSE;
  /* The embedded profile makes 64-bit integers optional; the kernels index
   * with them. */
  d->has_int64 = strcmp(profile, "EMBEDDED_PROFILE") != 0 ||
                 has_extension(exts, "cles_khr_int64");
  /* i32 and i64 (ABI 1.6) are OpenCL C's int and long: i64 needs the
   * 64-bit integers an embedded-profile device may lack (and without
   * which no kernel runs at all). */
  d->dtypes |= TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_I32);
  if (d->has_int64)
    d->dtypes |= TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_I64);
  /* A CPU device (PoCL, Intel's CPU runtime) computes in the host's own
   * memory: with fine-grained SVM, a buffer made over an SVM allocation
   * (CL_MEM_USE_HOST_PTR, OpenCL 2.0 section 5.6.1: the allocation is
   * its storage) is read by the host in place once an event says the
   * writing work is done, so gradients leave it without a copy. GPUs that
   * share the host's memory could too, but fine-grained SVM may cost them
   * caching; they keep device buffers. */
  cl_device_svm_capabilities svm = 0;
  cl_bool unified = CL_FALSE;
  if (d->cl_major >= 2 && (c->type & CL_DEVICE_TYPE_CPU) &&
      clGetDeviceInfo(id, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, NULL) ==
          CL_SUCCESS &&
      clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified,
                      &unified, NULL) == CL_SUCCESS)
    d->host_memory = unified && (svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) &&
                     d->alignment <= 128; /* clSVMAlloc aligns to at most
                                             the largest type, long16 */

done:
  free(version);
  free(exts);
  free(profile);
  return ok;
}

static int candidates_push(candidates *cs, cl_platform_id platform,
                           const char *platform_name, cl_device_id id) {
  if (cs->n == cs->cap) {
    size_t cap = cs->cap ? cs->cap * 2 : 8;
    candidate *c = realloc(cs->c, cap * sizeof *c);
    if (c == NULL)
      return 0;
    cs->c = c;
    cs->cap = cap;
  }
  if (!describe(&cs->c[cs->n], platform, platform_name, id)) {
    devinfo_free(&cs->c[cs->n].info);
    return 0;
  }
  cs->n++;
  return 1;
}

static void candidates_free(candidates *cs) {
  for (size_t i = 0; i < cs->n; i++)
    if (!cs->c[i].moved)
      devinfo_free(&cs->c[i].info);
  free(cs->c);
}

/* ---- options ----------------------------------------------------------- */

static tyto_plugin_error *parse_device_type(const tyto_plugin_host *host,
                                            const char *v,
                                            cl_device_type *out) {
  static const struct {
    const char *name;
    cl_device_type type;
  } types[] = {{"all", CL_DEVICE_TYPE_ALL},
               {"gpu", CL_DEVICE_TYPE_GPU},
               {"cpu", CL_DEVICE_TYPE_CPU},
               {"accelerator", CL_DEVICE_TYPE_ACCELERATOR}};
  *out = CL_DEVICE_TYPE_ALL;
  if (v == NULL)
    return NULL;
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (equal_nocase(v, types[i].name)) {
      *out = types[i].type;
      return NULL;
    }
  return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                   "option device_type=\"%.100s\" is not valid; allowed "
                   "values: all, gpu, cpu, accelerator (default all)",
                   v);
}

/* The option gemm: auto (default), clblast or tyto, as GEMM_* below. */
enum { GEMM_AUTO, GEMM_CLBLAST, GEMM_TYTO };
static tyto_plugin_error *parse_gemm_option(const tyto_plugin_host *host,
                                            const char *v, int *out) {
  *out = GEMM_AUTO;
  if (v == NULL || equal_nocase(v, "auto"))
    return NULL;
  if (equal_nocase(v, "clblast")) {
    *out = GEMM_CLBLAST;
    return NULL;
  }
  if (equal_nocase(v, "tyto")) {
    *out = GEMM_TYTO;
    return NULL;
  }
  return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                   "option gemm=\"%.100s\" is not valid; allowed values: "
                   "auto, clblast, tyto (default auto: tyto's kernels on CPU "
                   "devices, CLBlast elsewhere)",
                   v);
}

/* The testing option fp16_without_extension: 0 (default) or 1. */
static tyto_plugin_error *parse_fp16_option(const tyto_plugin_host *host,
                                            const char *v, int *out) {
  *out = 0;
  if (v == NULL || equal_nocase(v, "0") || equal_nocase(v, "off") ||
      equal_nocase(v, "no") || equal_nocase(v, "false"))
    return NULL;
  if (equal_nocase(v, "1") || equal_nocase(v, "on") || equal_nocase(v, "yes") ||
      equal_nocase(v, "true")) {
    *out = 1;
    return NULL;
  }
  return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                   "option fp16_without_extension=\"%.100s\" is not valid; "
                   "allowed values: 0 or 1 (default 0; 1 is for testing)",
                   v);
}

/* What device_query reports as the driver (tyto-info shows it): its
 * version, then where f16 is not plain cl_khr_fp16 why, and who computes
 * matrix products. Applies the testing option first. Returns 0 when out
 * of host memory. */
static int describe_driver(ocl_devinfo *d, int fp16_option) {
  const char *f16 =
      d->has_fp16   ? ""
      : fp16_option ? "; f16: yes, without cl_khr_fp16 (option "
                      "fp16_without_extension, for testing)"
                    : "; f16: no (needs cl_khr_fp16, which this device lacks)";
  const char *gemm =
      d->gemm_own ? "; GEMM: tyto's kernels (option gemm)" : "; GEMM: CLBlast";
  const char *mem =
      d->host_memory ? "; buffers: host memory (fine-grained SVM)" : "";
  if (!d->has_fp16 && fp16_option) {
    d->fp16_emulated = 1;
    d->dtypes |= TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F16);
  }
  size_t n =
      strlen(d->driver_version) + strlen(f16) + strlen(gemm) + strlen(mem) + 1;
  if ((d->driver_text = malloc(n)) == NULL)
    return 0;
  /* Without a version the notes start the text. */
  int skip = d->driver_version[0] == '\0' ? 2 : 0;
  snprintf(d->driver_text, n, "%s%s%s%s", d->driver_version,
           (f16[0] ? f16 : gemm) + skip, f16[0] ? gemm : "", mem);
  return 1;
}

/* ---- probe ------------------------------------------------------------- */

/* The platforms, and their names joined for messages ("A", "B"). */
static tyto_plugin_error *list_platforms(const tyto_plugin_host *host,
                                         cl_platform_id **out, cl_uint *n,
                                         char ***names) {
  cl_uint count = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &count);
  if (err == OCL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && count == 0))
    return ocl_error(host, TYTO_PLUGIN_ERR_UNAVAILABLE,
                     "no OpenCL platform found (the ICD loader found no "
                     "vendor .icd file under /etc/OpenCL/vendors, or "
                     "OCL_ICD_VENDORS points elsewhere); install your "
                     "vendor's OpenCL driver, e.g. pocl-opencl-icd for CPUs, "
                     "nvidia-opencl-icd, mesa-opencl-icd or "
                     "intel-opencl-icd");
  if (err != CL_SUCCESS)
    return ocl_error_cl(host, "clGetPlatformIDs", err,
                        "listing OpenCL platforms; check the OpenCL ICD "
                        "loader (libOpenCL.so.1) and the files under "
                        "/etc/OpenCL/vendors");
  cl_platform_id *ids = calloc(count, sizeof *ids);
  char **nm = calloc(count, sizeof *nm);
  if (ids == NULL || nm == NULL) {
    free(ids);
    free(nm);
    return ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "probe: out of host memory");
  }
  err = clGetPlatformIDs(count, ids, &count);
  if (err != CL_SUCCESS) {
    free(ids);
    free(nm);
    return ocl_error_cl(host, "clGetPlatformIDs", err,
                        "listing %u OpenCL platforms", (unsigned)count);
  }
  for (cl_uint i = 0; i < count; i++) {
    if ((nm[i] = platform_string(ids[i], CL_PLATFORM_NAME)) == NULL) {
      for (cl_uint j = 0; j < i; j++)
        free(nm[j]);
      free(ids);
      free(nm);
      return ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                       "probe: out of host memory");
    }
  }
  *out = ids;
  *n = count;
  *names = nm;
  return NULL;
}

static void join_names(char *buf, size_t size, char **names, cl_uint n) {
  size_t used = 0;
  buf[0] = '\0';
  for (cl_uint i = 0; i < n && used + 1 < size; i++) {
    int w =
        snprintf(buf + used, size - used, "%s\"%s\"", i ? ", " : "", names[i]);
    if (w < 0)
      break;
    used += (size_t)w;
  }
}

static int gpu_like_class(uint32_t class_id) {
  uint32_t base = class_id >> 8;
  /* Display controllers, processing accelerators, co-processors. */
  return base == 0x03 || base == 0x12 || class_id == 0x0b40;
}

/* Refuses offered GPUs that no enumerated OpenCL device sits at, so that
 * tyto-info says why a card goes unused. Skipped when some device did not
 * report its address: it might be that card. */
static void refuse_unmatched(const tyto_plugin_hw_device *offer,
                             uint32_t n_offer, const candidates *cs,
                             const tyto_plugin_claims *claims,
                             const char *platform_opt, cl_device_type type,
                             const char *platform_list) {
  for (size_t i = 0; i < cs->n; i++)
    if (!(cs->c[i].type & CL_DEVICE_TYPE_CPU) && !cs->c[i].pci.known)
      return;
  for (uint32_t i = 0; i < n_offer; i++) {
    const tyto_plugin_hw_device *o = tpc_at(offer, i);
    pci_addr oa;
    if (!ocl_offer_pci(o, &oa) ||
        !TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, pci_class_id) ||
        !gpu_like_class(o->pci_class_id))
      continue;
    int matched = 0;
    for (size_t j = 0; j < cs->n && !matched; j++)
      matched = cs->c[j].info.hw_index == (int32_t)o->index;
    if (matched)
      continue;
    char reason[512];
    if (type == CL_DEVICE_TYPE_CPU)
      snprintf(reason, sizeof reason,
               "not examined: the opencl option device_type=cpu excludes "
               "GPUs and accelerators");
    else if (platform_opt != NULL)
      snprintf(reason, sizeof reason,
               "no OpenCL device of the platforms matching option "
               "platform=\"%.80s\" is at PCI %s; remove the option or "
               "install this device's OpenCL driver",
               platform_opt, o->pci_bus_id);
    else
      snprintf(reason, sizeof reason,
               "no OpenCL device is at PCI %s (platforms found: %.200s); "
               "install this device's vendor OpenCL driver (an .icd file "
               "under /etc/OpenCL/vendors)",
               o->pci_bus_id, platform_list);
    claims->refuse(claims->ctx, (int32_t)o->index, NULL, reason);
  }
}

tyto_plugin_error *ocl_probe(tyto_plugin_state *state,
                             const tyto_plugin_hw_device *offer,
                             uint32_t n_offer,
                             const tyto_plugin_claims *claims) {
  const tyto_plugin_host *host = state->host;
  if (claims == NULL || claims->claim == NULL || claims->refuse == NULL)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "probe: the claims table is NULL or incomplete");
  if (state->probed)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "probe: called a second time; the plugin probes once "
                     "per load");
  if (offer == NULL || n_offer == 0 ||
      offer->struct_size <
          offsetof(tyto_plugin_hw_device, kind) + sizeof offer->kind)
    n_offer = 0;

  const char *platform_opt = host->option(host->ctx, "platform");
  if (platform_opt != NULL && platform_opt[0] == '\0')
    platform_opt = NULL;
  cl_device_type type;
  tyto_plugin_error *e =
      parse_device_type(host, host->option(host->ctx, "device_type"), &type);
  if (e != NULL)
    return e;
  int fp16_option, gemm_option;
  e = parse_fp16_option(host, host->option(host->ctx, "fp16_without_extension"),
                        &fp16_option);
  if (e == NULL)
    e = parse_gemm_option(host, host->option(host->ctx, "gemm"), &gemm_option);
  if (e != NULL)
    return e;

  cl_platform_id *platforms = NULL;
  char **names = NULL;
  cl_uint n_platforms = 0;
  if ((e = list_platforms(host, &platforms, &n_platforms, &names)) != NULL)
    return e;
  char platform_list[512];
  join_names(platform_list, sizeof platform_list, names, n_platforms);

  candidates cs = {host, NULL, 0, 0};
  cl_uint n_selected = 0;
  for (cl_uint p = 0; p < n_platforms && e == NULL; p++) {
    if (platform_opt != NULL && !contains_nocase(names[p], platform_opt))
      continue;
    n_selected++;
    cl_uint nd = 0;
    cl_int err = clGetDeviceIDs(platforms[p], type, 0, NULL, &nd);
    if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && nd == 0))
      continue;
    cl_device_id *ids = err == CL_SUCCESS ? calloc(nd, sizeof *ids) : NULL;
    if (err == CL_SUCCESS && ids == NULL) {
      e = ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                    "probe: out of host memory");
      break;
    }
    if (err == CL_SUCCESS)
      err = clGetDeviceIDs(platforms[p], type, nd, ids, NULL);
    if (err != CL_SUCCESS) {
      /* One broken driver must not hide the others' devices. */
      char reason[256];
      snprintf(reason, sizeof reason,
               "clGetDeviceIDs failed with %s (%d) on this platform; its "
               "driver is broken or misconfigured, reinstall or update it",
               ocl_code_name(err), (int)err);
      claims->refuse(claims->ctx, -1, names[p], reason);
      free(ids);
      continue;
    }
    for (cl_uint i = 0; i < nd; i++)
      if (!candidates_push(&cs, platforms[p], names[p], ids[i])) {
        e = ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                      "probe: out of host memory");
        break;
      }
    free(ids);
  }
  if (e == NULL && platform_opt != NULL && n_selected == 0)
    e = ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                  "option platform=\"%.100s\" matches none of the OpenCL "
                  "platforms: %s; set it to part of one of these names or "
                  "remove it",
                  platform_opt, platform_list);
  if (e == NULL)
    state->devs = calloc(cs.n ? cs.n : 1, sizeof *state->devs);
  if (e == NULL && state->devs == NULL)
    e = ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                  "probe: out of host memory");
  if (e != NULL) {
    candidates_free(&cs);
    for (cl_uint p = 0; p < n_platforms; p++)
      free(names[p]);
    free(names);
    free(platforms);
    return e;
  }

  /* Decide and report, in enumeration order. */
  for (size_t i = 0; i < cs.n; i++) {
    candidate *c = &cs.c[i];
    ocl_devinfo *d = &c->info;
    d->hw_index = ocl_match_offer(&c->pci, offer, n_offer, &d->numa_node,
                                  d->pci_bus_id, sizeof d->pci_bus_id);
    /* Unmatched, the driver's own address is shown; without a reported
     * domain 0 is assumed, as clinfo does (wrong only on multi-domain
     * machines, where matching has already declined to guess). */
    if (d->hw_index < 0 && c->pci.known)
      tpc_pci_format(&(tpc_pci){1, c->pci.domain, c->pci.bus, c->pci.device,
                                c->pci.function},
                     d->pci_bus_id, sizeof d->pci_bus_id);
    /* Two platforms (say, a vendor driver and Mesa's rusticl) can expose
     * one card; driving it twice would double-count it. */
    for (size_t j = 0; j < i && c->reason[0] == '\0' && d->hw_index >= 0; j++)
      if (cs.c[j].reason[0] == '\0' && cs.c[j].info.hw_index == d->hw_index)
        snprintf(c->reason, sizeof c->reason,
                 "PCI device %s is already driven through platform "
                 "\"%.80s\"; set the opencl option platform=... to choose "
                 "the other driver",
                 d->pci_bus_id, cs.c[j].info.platform_name);
    if (c->reason[0] != '\0') {
      char name[256];
      snprintf(name, sizeof name, "%.150s (%.90s)", d->name, d->platform_name);
      claims->refuse(claims->ctx, d->hw_index, name, c->reason);
      continue;
    }
    d->gemm_own = gemm_option == GEMM_TYTO ||
                  (gemm_option == GEMM_AUTO && (c->type & CL_DEVICE_TYPE_CPU));
    if (!describe_driver(d, fp16_option))
      host->log(host->ctx, TYTO_PLUGIN_LOG_WARN,
                "probe: out of host memory describing \"%s\"", d->name);
    uint32_t ordinal = state->n_devs;
    claims->claim(claims->ctx, d->hw_index, ordinal, d->name);
    host->log(host->ctx, TYTO_PLUGIN_LOG_INFO,
              "opencl:%u is \"%s\" (platform \"%s\", OpenCL %d.%d, %s%s)",
              (unsigned)ordinal, d->name, d->platform_name, d->cl_major,
              d->cl_minor, d->pci_bus_id[0] ? "PCI " : "no PCI address",
              d->pci_bus_id);
    state->devs[state->n_devs++] = *d;
    c->moved = 1;
  }
  refuse_unmatched(offer, n_offer, &cs, claims, platform_opt, type,
                   platform_list);

  state->probed = 1;
  candidates_free(&cs);
  for (cl_uint p = 0; p < n_platforms; p++)
    free(names[p]);
  free(names);
  free(platforms);
  return NULL;
}

void ocl_probe_release(tyto_plugin_state *state) {
  for (uint32_t i = 0; i < state->n_devs; i++)
    devinfo_free(&state->devs[i]);
  free(state->devs);
  state->devs = NULL;
  state->n_devs = 0;
}
