/*
 * Inputs and comparison: deterministic random inputs from a seed, and the
 * normalised error |got - want| / (atol + rtol * |want|) with NaN and
 * infinity positions required to match.
 */
#ifndef TYTO_CONFORM_COMPARE_H
#define TYTO_CONFORM_COMPARE_H

#include "catalogue.h"

typedef struct cf_cmp {
  double max_err; /* largest normalised error over finite pairs */
  uint32_t out;   /* where it is: output, storage element, values */
  int64_t at;
  double got, want;
  int64_t specials; /* positions where NaN/Inf differ */
  uint32_t sp_out;
  int64_t sp_at;
  double sp_got, sp_want;
} cf_cmp;

/* Compares the outputs of c (whole storages) got[] against want[]. */
void cf_compare(const cf_case *c, double *const *got, double *const *want,
                cf_cmp *r);

/* The same over n_out arrays of count[o] doubles with one tolerance. */
void cf_compare_n(uint32_t n_out, const int64_t *count, double *const *got,
                  double *const *want, double rtol, double atol, cf_cmp *r);

/* Applies c->post (see cf_post) to one device's outputs (whole storages,
 * as cf_run_case gives them), in place. */
void cf_post_apply(const cf_case *c, double *const *out);

/* Whether the comparison passes (max_err <= 1, no special mismatch). */
int cf_cmp_pass(const cf_cmp *r);

/* Bytes of c's inputs (values from each input's domain) and outputs' initial
 * contents, drawn from `seed`. Every pointer is malloc'ed (never NULL
 * unless out of memory: returns -1); free with cf_values_free(). */
int cf_values_make(const cf_case *c, uint64_t seed, void **in, void **out);
void cf_values_free(void **in, void **out);

/* Fills the whole storage of t (t->storage elements of dtype at p) with
 * values of t's domain drawn from `seed` (CF_DIAG_DOMINANT and CF_SPD:
 * matrices as cf_values says). */
void cf_values_fill(const cf_tensor *t, uint32_t dtype, void *p, uint64_t seed);

#endif
