/* Initialisers: their names, and the initial values, drawn from a stream
 * that depends only on the network's seed and the tensor's name (so the
 * order layers are built in does not matter). */
#include "config.h"

#include <math.h>
#include <string.h>

#include "nn_internal.h"

static const char *const init_names[] = {
    "default",    "zeros",     "ones",           "constant",
    "uniform",    "normal",    "glorot_uniform", "glorot_normal",
    "he_uniform", "he_normal", "lecun_uniform",  "lecun_normal"};

#define N_INIT_NAMES (sizeof init_names / sizeof init_names[0])

const char *tyto_init_name(tyto_init_kind kind) {
  if ((int)kind >= 0 && (size_t)kind < N_INIT_NAMES)
    return init_names[kind];
  return "?";
}

int tyto_init_from_name(const char *name) {
  if (!name)
    return -1;
  for (size_t i = 0; i < N_INIT_NAMES; i++)
    if (!strcmp(name, init_names[i]))
      return (int)i;
  return -1;
}

/* FNV-1a, 64 bits (Fowler, Noll, Vo). */
static uint64_t fnv1a64(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ull;
  }
  return h;
}

/* splitmix64 (Steele, Lea, Flood 2014): the next uniform in (0, 1), 53
 * bits, never 0 (Box-Muller takes its log). */
static double next_uniform(uint64_t *state) {
  *state += 0x9e3779b97f4a7c15ull;
  uint64_t z = nn_mix64(*state);
  return ((double)(z >> 11) + 0.5) * 0x1.0p-53;
}

/* Standard normals by Box-Muller, both of each pair used. */
static void fill_normal(uint64_t *state, double mean, double stddev,
                        double *out, int64_t n) {
  const double two_pi = 6.283185307179586476925286766559;
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = next_uniform(state), u2 = next_uniform(state);
    double r = sqrt(-2.0 * log(u1));
    out[i] = mean + stddev * r * cos(two_pi * u2);
    if (i + 1 < n)
      out[i + 1] = mean + stddev * r * sin(two_pi * u2);
  }
}

static void fill_uniform(uint64_t *state, double lo, double hi, double *out,
                         int64_t n) {
  for (int64_t i = 0; i < n; i++)
    out[i] = lo + (hi - lo) * next_uniform(state);
}

static void fill_const(double v, double *out, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    out[i] = v;
}

void nn_init_fill(const nn_entry *e, uint64_t seed, double *out, int64_t n) {
  uint64_t state = nn_mix64(seed ^ 0x6e6e2e696e697400ull) ^
                   fnv1a64(e->t->name ? e->t->name : "");
  double fi = (double)e->fan_in, fo = (double)e->fan_out;
  double gain = e->init.gain > 0 ? e->init.gain : 1.0, l;
  if (n <= 0)
    return;
  switch ((int)e->init.kind) {
  case TYTO_INIT_ONES: fill_const(1, out, n); break;
  case TYTO_INIT_CONSTANT: fill_const(e->init.a, out, n); break;
  case TYTO_INIT_UNIFORM:
    fill_uniform(&state, e->init.a, e->init.b, out, n);
    break;
  case TYTO_INIT_NORMAL:
    fill_normal(&state, e->init.a, e->init.b, out, n);
    break;
  case TYTO_INIT_GLOROT_UNIFORM:
    l = gain * sqrt(6.0 / (fi + fo));
    fill_uniform(&state, -l, l, out, n);
    break;
  case TYTO_INIT_GLOROT_NORMAL:
    fill_normal(&state, 0, gain * sqrt(2.0 / (fi + fo)), out, n);
    break;
  case TYTO_INIT_HE_UNIFORM:
    l = gain * sqrt(6.0 / fi);
    fill_uniform(&state, -l, l, out, n);
    break;
  case TYTO_INIT_HE_NORMAL:
    fill_normal(&state, 0, gain * sqrt(2.0 / fi), out, n);
    break;
  case TYTO_INIT_LECUN_UNIFORM:
    l = gain * sqrt(3.0 / fi);
    fill_uniform(&state, -l, l, out, n);
    break;
  case TYTO_INIT_LECUN_NORMAL:
    fill_normal(&state, 0, gain * sqrt(1.0 / fi), out, n);
    break;
  case NN_INIT_LSTM_BIAS:
    fill_const(0, out, n);
    for (int64_t i = n / 4; i < n / 2; i++)
      out[i] = 1;
    break;
  default: /* ZEROS */ fill_const(0, out, n); break;
  }
}
