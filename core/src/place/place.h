/*
 * Placement (DESIGN.md, "Placement"): which device runs each node of a
 * compiled graph. Device-agnostic and graph-agnostic, as the planner is:
 * it sees a DAG of nodes in topological order, what each costs on each
 * device (INFINITY where the device refuses it), how many bytes each
 * produces, and what moving bytes between two devices costs; it answers
 * one device per node.
 *
 * Sources (inputs, parameters, constants) cost nothing and, unless
 * pinned, go where their first reader goes. Under the pinned policy every
 * other node goes to its pin, or to device 0. Under the auto policy an
 * unpinned node goes where it finishes first in a list schedule that
 * models each compute resource (a device, or the devices that share one,
 * as the CPU plugin and an OpenCL driver on the same cores do) as running
 * one node at a time and each copy as a delay of latency + bytes / rate
 * (earliest finish time, as HEFT); that schedule is then compared with
 * putting every unpinned node on one device, for each device that can run
 * them all, and the cheapest estimate wins (a split must beat the best
 * single device by PLACE_SPLIT_GAIN: the model does not see the copies'
 * contention). Under either policy a node its device refuses goes to the
 * device that runs it cheapest, and is reported as a fallback.
 */
#ifndef TYTO_PLACE_H
#define TYTO_PLACE_H

#include <stddef.h>
#include <stdint.h>

/* A split must be estimated this much faster than one device. */
#define PLACE_SPLIT_GAIN 0.05

typedef enum place_policy { PLACE_PINNED = 1, PLACE_AUTO = 2 } place_policy;

typedef struct place_node {
  uint32_t pin; /* 0, or 1 + the device it must run on */
  int source;   /* an input, parameter or constant */
  size_t n_in;  /* inputs: indices of earlier nodes */
  const uint32_t *in;
  uint64_t bytes; /* what it produces (what a copy of it moves) */
} place_node;

typedef struct place_problem {
  size_t n_nodes, n_devs;
  const place_node *nodes; /* in topological order */
  /* n_nodes x n_devs: seconds to compute node i on device d, INFINITY
   * where d refuses it (sources: 0, and INFINITY where a device cannot
   * hold them). */
  const double *cost;
  /* n_devs x n_devs: a copy a -> b takes latency[a][b] + bytes *
   * per_byte[a][b] seconds (diagonals unused). */
  const double *per_byte, *latency;
  /* n_devs entries: the compute resource each device runs on. Devices of
   * one resource share one timeline in the schedule: they cannot run at
   * once. NULL: every device its own. */
  const uint32_t *resource;
  place_policy policy;
} place_problem;

typedef struct place_result {
  uint32_t *dev;           /* per node */
  unsigned char *fallback; /* per node: its wanted device refused it */
  uint32_t *wanted;        /* per node: that device (valid where fallback) */
  double estimate;         /* estimated seconds per run of the placement */
  /* The cheapest single-device estimate (INFINITY when no device runs
   * every unpinned node) and its device. */
  double single_estimate;
  uint32_t single_dev;
  int split; /* the placement uses more than one device */
} place_result;

/* Places p into *r (arrays malloc'd; free with place_result_free, also
 * after a failure). Returns 0; -1 on out of memory; -2 when a node can
 * run on no device (msg: its index). */
int place_run(const place_problem *p, place_result *r, char *msg,
              size_t msg_size);
void place_result_free(place_result *r);

/* The estimated seconds per run of placement dev (the list schedule
 * above): for tests and the benchmark. INFINITY when a node is on a
 * device that refuses it. */
double place_estimate(const place_problem *p, const uint32_t *dev);

#endif
