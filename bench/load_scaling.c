/*
 * How loading scales with what a file holds: checkpoint metadata keys and
 * tensors (safetensors), config keys (tyto.conf) and model-file layers,
 * each at n, 4n and 16n. Linear loading keeps t(16n)/t(n) near 16; a loop
 * quadratic in the count gives 256. A benchmark, not a test: it prints a
 * table and one JSON line.
 *
 *   bench/load_scaling [N]     (default N = 20000)
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tyto/checkpoint.h>

#include "runtime/conf.h"
#include "train/model_file.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A growing text buffer. */
typedef struct text {
  char *s;
  size_t len, cap;
} text;

static void put(text *t, const char *fmt, long long i) {
  for (;;) {
    int n = snprintf(t->s + t->len, t->cap - t->len, fmt, i, i);
    if (n >= 0 && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    t->cap = t->cap ? 2 * t->cap : 1 << 16;
    t->s = realloc(t->s, t->cap);
    if (!t->s) {
      fprintf(stderr, "out of memory\n");
      exit(1);
    }
  }
}

/* A checkpoint of n metadata keys and n scalar tensors, serialised. */
static unsigned char *checkpoint_bytes(long long n, size_t *len) {
  tyto_checkpoint *ck;
  if (tyto_checkpoint_new(&ck) != TYTO_OK)
    exit(1);
  char key[64], val[64];
  float v = 1;
  for (long long i = 0; i < n; i++) {
    snprintf(key, sizeof key, "key%lld", i);
    snprintf(val, sizeof val, "%lld", i);
    if (tyto_checkpoint_set_meta(ck, key, val) != TYTO_OK ||
        tyto_checkpoint_add(ck, key, TYTO_CHECKPOINT_F32, 0, NULL, &v) !=
            TYTO_OK) {
      fprintf(stderr, "%s\n", tyto_errmsg());
      exit(1);
    }
  }
  char path[] = "/tmp/tyto-bench-ck-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || tyto_checkpoint_save(ck, path) != TYTO_OK)
    exit(1);
  close(fd); /* the save replaced that file: read the new one */
  tyto_checkpoint_free(ck);
  FILE *f = fopen(path, "rb");
  if (!f)
    exit(1);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  rewind(f);
  unsigned char *b = malloc(*len);
  if (!b || fread(b, 1, *len, f) != *len)
    exit(1);
  fclose(f);
  unlink(path);
  return b;
}

static double time_checkpoint(long long n) {
  size_t len;
  unsigned char *b = checkpoint_bytes(n, &len);
  double t0 = now();
  tyto_checkpoint *ck;
  if (tyto_checkpoint_parse(b, len, "bench", &ck) != TYTO_OK) {
    fprintf(stderr, "%s\n", tyto_errmsg());
    exit(1);
  }
  double t = now() - t0;
  tyto_checkpoint_free(ck);
  free(b);
  return t;
}

static double time_conf(long long n) {
  text t = {0};
  put(&t, "[cpu]\n", 0);
  for (long long i = 0; i < n; i++)
    put(&t, "key%lld = %lld\n", i);
  FILE *f = fmemopen(t.s, t.len, "r");
  conf c;
  conf_init(&c);
  double t0 = now();
  conf_parse_stream(&c, f, "bench.conf");
  double dt = now() - t0;
  fclose(f);
  conf_free(&c);
  free(t.s);
  return dt;
}

static double time_model_file(long long n) {
  text t = {0};
  put(&t, "input shape=784\n", 0);
  for (long long i = 0; i < n; i++)
    put(&t, "relu name=r%lld\n", i);
  put(&t, "linear units=10\n", 0);
  char err[512];
  mf_model *m;
  double t0 = now();
  if (mf_parse(t.s, "bench.model", &m, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  double dt = now() - t0;
  mf_free(m);
  free(t.s);
  return dt;
}

int main(int argc, char **argv) {
  long long n = argc > 1 ? atoll(argv[1]) : 20000;
  if (n < 1) {
    fprintf(stderr, "usage: load_scaling [N >= 1]\n");
    return 2;
  }
  static const struct {
    const char *name, *what;
    double (*fn)(long long);
  } cases[] = {
      {"checkpoint", "metadata keys + tensors", time_checkpoint},
      {"config", "keys of one section", time_conf},
      {"model_file", "layers", time_model_file},
  };
  printf("Loading time against what the file holds (n = %lld)\n\n", n);
  printf("%-11s %-24s %10s %10s %10s %9s %9s\n", "file", "count", "t(n) ms",
         "t(4n) ms", "t(16n) ms", "4n/n", "16n/n");
  char json[1024];
  int jn =
      snprintf(json, sizeof json, "{\"bench\":\"load_scaling\",\"n\":%lld", n);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double t[3];
    for (int k = 0; k < 3; k++)
      t[k] = cases[i].fn(n << (2 * k));
    printf("%-11s %-24s %10.1f %10.1f %10.1f %9.1f %9.1f\n", cases[i].name,
           cases[i].what, 1e3 * t[0], 1e3 * t[1], 1e3 * t[2], t[1] / t[0],
           t[2] / t[0]);
    jn += snprintf(json + jn, sizeof json - (size_t)jn,
                   ",\"%s\":{\"ms\":[%.2f,%.2f,%.2f],\"ratio_16n\":%.1f}",
                   cases[i].name, 1e3 * t[0], 1e3 * t[1], 1e3 * t[2],
                   t[2] / t[0]);
  }
  printf("\nlinear: 16n/n near 16; quadratic: near 256\n");
  printf("%s}\n", json);
  return 0;
}
