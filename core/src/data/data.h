/* Internals shared by the IDX reader and the datasets. */
#ifndef TYTO_DATA_DATA_H
#define TYTO_DATA_DATA_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/data.h>

struct tyto_idx {
  tyto_idx_type type;
  int rank;
  int64_t shape[TYTO_IDX_MAX_RANK];
  size_t esize;        /* bytes per element */
  int64_t item;        /* elements per item: product of shape[1..] */
  unsigned char *data; /* the elements as stored: big-endian */
};

/* Bytes per element of an IDX type code; 0 for an unknown code. */
size_t idx_type_size(int code);

/* Converts n elements starting at element `start` (no bounds check) to
 * dtype times scale into dst. */
void idx_convert(const tyto_idx *x, int64_t start, int64_t n, tyto_dtype dtype,
                 double scale, void *dst);

/* Element i as a double (no bounds check). */
double idx_value(const tyto_idx *x, int64_t i);

/* splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014): advances *state and returns the next value. */
uint64_t data_splitmix64(uint64_t *state);

/* Fills order[0..n) with the order of epoch `epoch` for `seed`: the
 * identity shuffled by Fisher-Yates, each swap index drawn without bias
 * by rejection from splitmix64 seeded with
 * splitmix64-mix(seed) ^ epoch. */
void data_shuffle(int64_t *order, int64_t n, uint64_t seed, uint64_t epoch);

#endif
