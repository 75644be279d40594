/*
 * TYTO_PROFILE: where a program's time goes. With the variable set (and
 * not "0") when a program is compiled, every run synchronises after each
 * kernel and charges the wait to it; freeing the program prints, to
 * stderr, the mean time per run and the kernels that took the most, with
 * the op and shape each computes. Timing one kernel at a time removes the
 * overlap a device could have found between them, so the sum can exceed an
 * unprofiled run: the table is for finding the heavy kernels.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "program.h"
#include "../runtime/runtime.h"

enum { PROFILE_ROWS = 25 };

static const double *sort_seconds;

static int by_time(const void *a, const void *b) {
  double x = sort_seconds[*(const size_t *)a],
         y = sort_seconds[*(const size_t *)b];
  return x < y ? 1 : x > y ? -1 : 0;
}

void exec_profile_report(const tyto_program *p) {
  size_t n = p->n_kernels;
  size_t *order = malloc((n ? n : 1) * sizeof *order);
  if (!order)
    return;
  double sum = 0;
  for (size_t i = 0; i < n; i++) {
    order[i] = i;
    sum += p->prof_seconds[i];
  }
  sort_seconds = p->prof_seconds;
  qsort(order, n, sizeof *order, by_time);
  double runs = (double)p->prof_runs;
  fprintf(stderr,
          "tyto profile: %zu kernels on %s%s, %llu runs, %.1f us per run "
          "(kernels %.1f us)\n",
          p->n_launch, exec_dev_id(p, 0),
          p->n_devs > 1 ? " and other devices" : "",
          (unsigned long long)p->prof_runs, 1e6 * p->prof_total / runs,
          1e6 * sum / runs);
  fprintf(stderr, "  %8s %6s  %-22s %s\n", "us/run", "share", "op", "shape");
  for (size_t r = 0; r < n && r < PROFILE_ROWS; r++) {
    const exec_kernel *k = &p->kernels[order[r]];
    if (p->prof_seconds[order[r]] <= 0)
      break;
    const tyto_tensor *t = p->slots[k->slot].t;
    char dims[TYTO_MAX_RANK * 21 + 3] = "[";
    size_t d = 1;
    for (int i = 0; i < t->rank; i++)
      d += (size_t)snprintf(dims + d, sizeof dims - d, "%s%lld", i ? "," : "",
                            (long long)t->shape[i]);
    snprintf(dims + d, sizeof dims - d, "]");
    fprintf(stderr, "  %8.1f %5.1f%%  %-22s %s%s%s%s\n",
            1e6 * p->prof_seconds[order[r]] / runs,
            sum > 0 ? 100 * p->prof_seconds[order[r]] / sum : 0,
            k->update ? "(update copy)"
            : k->xfer ? "(copy between devices)"
                      : tyto_op_name(t->op),
            dims, k->skip ? " (in place)" : "", p->n_devs > 1 ? " on " : "",
            p->n_devs > 1 ? exec_dev_id(p, k->dev) : "");
  }
  free(order);
}
