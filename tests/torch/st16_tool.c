/*
 * f16 and bf16 in safetensors, tyto's side (tests/torch/test_st16.sh):
 * st16_tool IN OUT loads IN, a file whose 16-bit tensors PyTorch made
 * (tests/torch/st16.py write), checks every such tensor "X" against its
 * exact float64 values "X.f64", decoding the 16-bit patterns with a
 * converter written here (sign, exponent, fraction: independent of the
 * library's), then writes the 16-bit tensors to OUT through
 * tyto_checkpoint_add and tyto_checkpoint_save, for st16.py check to read
 * back with torch. Exit 0 when every value matched, 1 otherwise.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/checkpoint.h>

/* The value of a 16-bit pattern with `eb` exponent bits and `fb` fraction
 * bits (bf16: 8, 7; f16: 5, 10). */
static double decode(uint16_t v, int eb, int fb) {
  int sign = v >> 15;
  int e = (v >> fb) & ((1 << eb) - 1);
  int f = v & ((1 << fb) - 1);
  int bias = (1 << (eb - 1)) - 1;
  double x;
  if (e == (1 << eb) - 1)
    x = f ? NAN : INFINITY;
  else if (e == 0)
    x = ldexp((double)f, 1 - bias - fb);
  else
    x = ldexp((double)(f | (1 << fb)), e - bias - fb);
  return sign ? -x : x;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: st16_tool IN OUT\n");
    return 2;
  }
  tyto_checkpoint *in = NULL, *out = NULL;
  if (tyto_checkpoint_load(argv[1], &in) != TYTO_OK ||
      tyto_checkpoint_new(&out) != TYTO_OK) {
    fprintf(stderr, "st16_tool: %s\n", tyto_errmsg());
    return 1;
  }
  int bad = 0, seen = 0;
  for (size_t i = 0; i < tyto_checkpoint_count(in); i++) {
    const char *name = tyto_checkpoint_name(in, i);
    tyto_checkpoint_dtype dt;
    int rank;
    const int64_t *shape;
    const void *data;
    size_t bytes;
    if (tyto_checkpoint_find(in, name, &dt, &rank, &shape, &data, &bytes) !=
        TYTO_OK)
      return 1;
    if (dt != TYTO_CHECKPOINT_BF16 && dt != TYTO_CHECKPOINT_F16)
      continue;
    seen++;
    char ref[256];
    snprintf(ref, sizeof ref, "%s.f64", name);
    tyto_checkpoint_dtype rdt;
    const void *rdata;
    size_t rbytes;
    if (tyto_checkpoint_find(in, ref, &rdt, NULL, NULL, &rdata, &rbytes) !=
            TYTO_OK ||
        rdt != TYTO_CHECKPOINT_F64 || rbytes != 4 * bytes) {
      fprintf(stderr, "st16_tool: %s: no float64 reference of %zu bytes\n",
              name, 4 * bytes);
      return 1;
    }
    const uint16_t *h = data;
    const double *r = rdata;
    for (size_t k = 0; k < bytes / 2; k++) {
      double v = dt == TYTO_CHECKPOINT_BF16 ? decode(h[k], 8, 7)
                                            : decode(h[k], 5, 10);
      if (!(v == r[k] || (isnan(v) && isnan(r[k]))) ||
          (v == 0 && signbit(v) != signbit(r[k]))) {
        fprintf(stderr, "st16_tool: %s[%zu]: 0x%04x reads %.17g, PyTorch %.17g\n",
                name, k, h[k], v, r[k]);
        bad++;
      }
    }
    printf("%s: %s, %zu values as PyTorch has them\n", name,
           dt == TYTO_CHECKPOINT_BF16 ? "bf16" : "f16", bytes / 2);
    if (tyto_checkpoint_add(out, name, dt, rank, shape, data) != TYTO_OK) {
      fprintf(stderr, "st16_tool: %s\n", tyto_errmsg());
      return 1;
    }
  }
  if (seen == 0) {
    fprintf(stderr, "st16_tool: %s holds no f16 or bf16 tensor\n", argv[1]);
    return 1;
  }
  if (tyto_checkpoint_save(out, argv[2]) != TYTO_OK) {
    fprintf(stderr, "st16_tool: %s\n", tyto_errmsg());
    return 1;
  }
  tyto_checkpoint_free(in);
  tyto_checkpoint_free(out);
  return bad ? 1 : 0;
}
