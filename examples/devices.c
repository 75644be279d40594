/*
 * devices: open every selected device, move data through each one, and
 * print what it costs. Uses nothing but the public API:
 *
 *   cc devices.c $(pkg-config --cflags --libs tyto) -o devices
 *   TYTO_DEVICES=cpu,opencl:* ./devices
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tyto/tyto.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int check(tyto_status st, const char *what) {
  if (st != TYTO_OK)
    fprintf(stderr, "devices: %s: %s\n", what, tyto_errmsg());
  return st == TYTO_OK;
}

int main(void) {
  tyto_context *ctx;
  if (!check(tyto_context_new(NULL, &ctx), "cannot start tyto"))
    return 1;

  const size_t size = (size_t)64 << 20;
  unsigned char *src = malloc(size), *back = malloc(size);
  if (!src || !back)
    return 1;
  for (size_t i = 0; i < size; i++)
    src[i] = (unsigned char)(i * 2654435761u >> 24);

  printf("%-10s %-36s %12s %12s %12s  %s\n", "device", "name", "write GB/s",
         "copy GB/s", "read GB/s", "round trip");
  int failures = 0;
  for (size_t d = 0; d < tyto_context_device_count(ctx); d++) {
    tyto_device *dev = tyto_context_device(ctx, d);
    const tyto_device_info *info = tyto_device_get_info(dev);
    tyto_buffer *a = NULL, *b = NULL;
    if (!check(tyto_buffer_new(dev, size, &a), info->id) ||
        !check(tyto_buffer_new(dev, size, &b), info->id)) {
      tyto_buffer_free(a);
      failures++;
      continue;
    }
    /* Best of three: the first pass also pays for the pages' first touch. */
    double tw = 1e30, tc = 1e30, tr = 1e30;
    int ok = 1;
    for (int rep = 0; rep < 3 && ok; rep++) {
      double t0 = now();
      ok = check(tyto_buffer_write(a, 0, src, size), "write");
      double t1 = now();
      ok = ok && check(tyto_buffer_copy(b, 0, a, 0, size), "copy");
      double t2 = now();
      memset(back, 0, size);
      double t3 = now();
      ok = ok && check(tyto_buffer_read(b, 0, back, size), "read");
      double t4 = now();
      tw = t1 - t0 < tw ? t1 - t0 : tw;
      tc = t2 - t1 < tc ? t2 - t1 : tc;
      tr = t4 - t3 < tr ? t4 - t3 : tr;
    }
    ok = ok && memcmp(src, back, size) == 0;
    printf("%-10s %-36.36s %12.2f %12.2f %12.2f  %s\n", info->id, info->name,
           size / tw / 1e9, size / tc / 1e9, size / tr / 1e9,
           ok ? "ok" : "MISMATCH");
    failures += !ok;
    tyto_buffer_free(a);
    tyto_buffer_free(b);
  }

  /* Between every pair of selected devices (staged through host memory
   * when they belong to different plugins). */
  size_t n = tyto_context_device_count(ctx);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      if (i == j)
        continue;
      tyto_device *x = tyto_context_device(ctx, i),
                  *y = tyto_context_device(ctx, j);
      tyto_buffer *a = NULL, *b = NULL;
      int ok = check(tyto_buffer_new(x, size, &a), "alloc") &&
               check(tyto_buffer_new(y, size, &b), "alloc") &&
               check(tyto_buffer_write(a, 0, src, size), "write");
      double t0 = now();
      ok = ok && check(tyto_buffer_copy(b, 0, a, 0, size), "copy");
      double t1 = now();
      ok = ok && check(tyto_buffer_read(b, 0, back, size), "read") &&
           memcmp(src, back, size) == 0;
      printf("%s -> %s: %.2f GB/s %s\n", tyto_device_get_info(x)->id,
             tyto_device_get_info(y)->id, size / (t1 - t0) / 1e9,
             ok ? "ok" : "FAILED");
      failures += !ok;
      tyto_buffer_free(a);
      tyto_buffer_free(b);
    }
  free(src);
  free(back);
  tyto_context_free(ctx);
  return failures ? 1 : 0;
}
