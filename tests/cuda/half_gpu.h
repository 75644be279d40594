/*
 * The harness of tests/cuda/test_cuda_half (a real GPU, or any plugin that
 * lists f16 and bf16): one op at a time through the plugin ABI on host
 * arrays, and the comparisons with f64 references. test_cuda_half.c has
 * the harness, CAST, the elementwise ops, fused programs and the
 * reductions; half_gpu_nn.c the matrix products, convolutions, pooling,
 * index ops and random numbers.
 */
#ifndef TYTO_TESTS_CUDA_HALF_GPU_H
#define TYTO_TESTS_CUDA_HALF_GPU_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "half_ref.h"

#define F32 TYTO_PLUGIN_DTYPE_F32
#define F64 TYTO_PLUGIN_DTYPE_F64
#define F16 TYTO_PLUGIN_DTYPE_F16
#define BF16 TYTO_PLUGIN_DTYPE_BF16

extern int hg_checks, hg_failures;

/* Counts a check; prints the message of a failed one (the first 30). */
void hg_check(int ok, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "f16", "bf16", "f32", "f64"; bytes per element; the format of a
 * non-f64 dtype; the unit roundoff of dtype (2^-11 f16, 2^-8 bf16, 2^-24
 * f32, 2^-53 f64). */
const char *hg_name(uint32_t dt);
size_t hg_size(uint32_t dt);
const ref_fmt *hg_fmt(uint32_t dt);
double hg_u(uint32_t dt);

/* A host tensor: a dense row-major layout and its elements' bytes. */
typedef struct hg_tensor {
  tyto_plugin_layout l;
  void *data;
  int64_t n;
} hg_tensor;

/* A zeroed dense tensor of dtype dt and shape (rank extents); free with
 * hg_free. */
hg_tensor hg_new(uint32_t dt, uint32_t rank, const int64_t *shape);
void hg_free(hg_tensor *t);
/* Element i as a double (exactly); element i set to x rounded to the
 * dtype. */
double hg_get(const hg_tensor *t, int64_t i);
void hg_set(hg_tensor *t, int64_t i, double x);
/* Each element set to a uniform draw in [lo, hi] rounded to the dtype. */
void hg_random(hg_tensor *t, double lo, double hi);
double hg_uniform(double lo, double hi);

/* Runs op on the device under test: inputs uploaded, outputs downloaded
 * into out[] (their data replaced), iattrs / fattrs / blob as given.
 * Returns 1, or 0 after a failed check naming what failed. */
int hg_run(const char *what, uint32_t op, int n_in, hg_tensor *in, int n_out,
           hg_tensor *out, int n_i, const int64_t *ia, int n_f,
           const double *fa, const void *blob, size_t blob_size);

/* The code supports_op gives for a descriptor of these layouts (0: the
 * device runs it), its message into why. */
int hg_supports(uint32_t op, int n_in, const hg_tensor *in, int n_out,
                const hg_tensor *out, int n_i, const int64_t *ia, int n_f,
                const double *fa, char *why, size_t why_size);

/* Compares got (element i of t) with the f64 reference want: NaN must be
 * NaN, an infinity the same one, a finite value within tol of want (or
 * the infinity of its sign where want + tol is beyond the dtype's range).
 * Counts mismatches into *bad and reports the first. */
void hg_near(const char *what, const hg_tensor *t, int64_t i, double want,
             double tol, int *bad);
/* The reported total of one comparison loop. */
void hg_done(const char *what, int bad, int64_t n);

/* half_gpu_nn.c: the families below each test dtype dt. */
void hg_matmul(uint32_t dt);
void hg_conv(uint32_t dt);
void hg_pool(uint32_t dt);
void hg_index(uint32_t dt);
void hg_random_ops(uint32_t dt);

#endif /* TYTO_TESTS_CUDA_HALF_GPU_H */
