/*
 * OpenCL C source of the plugin's kernels, embedded so the plugin is one
 * file. Built once per open device and dtype with -DT=float or
 * -DT=double -DTYTO_FP64 (see kernels.c).
 *
 * Shapes and strides arrive as long8 arguments (dimension 0 fastest, unused
 * ones ignored through `rank`) rather than being baked into the source, so
 * one build serves every layout: building costs far more than the few
 * divisions per element this costs. Indices are 64-bit, and the host has
 * checked that every index a launch computes stays inside its buffer.
 *
 * Each work-item strides through the elements by the global size, so the
 * launch size can be capped independently of the element count.
 */
#include "ocl.h"

const char ocl_kernel_source[] =
    "#if defined(TYTO_FP64) && defined(cl_khr_fp64)\n"
    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    "#endif\n"
    "\n"
    "/* Peels dimension k (vector component c) off linear index r. */\n"
    "#define TYTO_STEP2(c, k)                                     \\\n"
    "  if ((k) < rank) {                                          \\\n"
    "    long q = r / shape.c, j = r - q * shape.c;               \\\n"
    "    ia += j * istr.c; oa += j * ostr.c; r = q;               \\\n"
    "  }\n"
    "#define TYTO_STEP1(c, k)                                     \\\n"
    "  if ((k) < rank) {                                          \\\n"
    "    long q = r / shape.c, j = r - q * shape.c;               \\\n"
    "    oa += j * ostr.c; r = q;                                 \\\n"
    "  }\n"
    "\n"
    "__kernel void tyto_copy(__global const T *in, long in_base, long8 istr,\n"
    "                        __global T *out, long out_base, long8 ostr,\n"
    "                        long8 shape, int rank, long n) {\n"
    "  for (long i = get_global_id(0); i < n; i += (long)get_global_size(0)) "
    "{\n"
    "    long r = i, ia = in_base, oa = out_base;\n"
    "    TYTO_STEP2(s0, 0) TYTO_STEP2(s1, 1) TYTO_STEP2(s2, 2)\n"
    "    TYTO_STEP2(s3, 3) TYTO_STEP2(s4, 4) TYTO_STEP2(s5, 5)\n"
    "    TYTO_STEP2(s6, 6) TYTO_STEP2(s7, 7)\n"
    "    out[oa] = in[ia];\n"
    "  }\n"
    "}\n"
    "\n"
    "__kernel void tyto_fill(__global T *out, long out_base, long8 ostr,\n"
    "                        long8 shape, int rank, long n, T value) {\n"
    "  for (long i = get_global_id(0); i < n; i += (long)get_global_size(0)) "
    "{\n"
    "    long r = i, oa = out_base;\n"
    "    TYTO_STEP1(s0, 0) TYTO_STEP1(s1, 1) TYTO_STEP1(s2, 2)\n"
    "    TYTO_STEP1(s3, 3) TYTO_STEP1(s4, 4) TYTO_STEP1(s5, 5)\n"
    "    TYTO_STEP1(s6, 6) TYTO_STEP1(s7, 7)\n"
    "    out[oa] = value;\n"
    "  }\n"
    "}\n";
