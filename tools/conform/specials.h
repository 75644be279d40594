/*
 * Special values: for every op, cases whose inputs hold NaN, both
 * infinities, both zeros, subnormals, the largest finite values and the
 * edges of the op's domain, checked against the host model of
 * sdk/docs/ops.md (model.h) rather than against the reference plugin: the
 * reference is held to the document too. Ops whose attributes or step can
 * be invalid (the random ops) get invalid ones and must refuse them; the
 * linear algebra ops get a NaN in one matrix of a batch.
 */
#ifndef TYTO_CONFORM_SPECIALS_H
#define TYTO_CONFORM_SPECIALS_H

#include "device.h"

typedef enum cf_verdict {
  CF_V_PASS = 0,
  CF_V_FAIL = 1,        /* a result differs from ops.md */
  CF_V_UNSUPPORTED = 2, /* the device does not run the op */
  CF_V_OOB = 3,         /* sentinels hit or an input modified */
  CF_V_ERROR = 4        /* an ABI call failed where it must not */
} cf_verdict;

/* Runs special-value case c on d (inputs in_bytes, outputs starting as
 * out_init, as cf_run_case takes them) and checks it as c->expect says.
 * msg[size] says what differs, or why unsupported. */
cf_verdict cf_special_run(cf_device *d, cf_case *c, const void *const *in_bytes,
                          const void *const *out_init, char *msg, size_t size);

/* The special values of dtype for one input of an op of `arity` 1, 2 or 3
 * (shorter lists for more inputs, whose cases take every combination).
 * Static storage. */
const double *cf_special_list(uint32_t dtype, int arity, uint32_t *n);

#endif
