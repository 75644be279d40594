/*
 * FUSED against its own instructions: ops.md says a program gives exactly
 * what its ops run one by one give, rounded to each value's dtype. The kit
 * runs the program, then each of its instructions as an op of its own on
 * the same device (CONST as FILL, CAST as CAST, an input read in its own
 * layout, every other value a contiguous tensor of the outputs' shape in
 * its dtype), and compares the outputs bit for bit: NaN for NaN, zeros by
 * sign.
 */
#ifndef TYTO_CONFORM_STEPWISE_H
#define TYTO_CONFORM_STEPWISE_H

#include "specials.h"

/* Runs FUSED case c on d (inputs in_bytes, outputs starting as out_init)
 * and its instructions one by one, and compares. msg[size] says what
 * differs, or why unsupported (the program, or one of its ops run alone,
 * refused). */
cf_verdict cf_stepwise_run(cf_device *d, cf_case *c,
                           const void *const *in_bytes,
                           const void *const *out_init, char *msg, size_t size);

#endif
