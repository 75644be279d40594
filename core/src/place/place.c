/*
 * Placement: the list schedule, the policies and the estimate (place.h).
 * Linear in the nodes and edges times the devices.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "place.h"

#define NONE UINT32_MAX

/* The timeline of device d. */
static uint32_t res(const place_problem *p, uint32_t d) {
  return p->resource ? p->resource[d] : d;
}

static double cost(const place_problem *p, size_t n, uint32_t d) {
  return p->cost[n * p->n_devs + d];
}

static double copy_time(const place_problem *p, size_t i, uint32_t a,
                        uint32_t b) {
  if (a == b)
    return 0.0;
  size_t ab = (size_t)a * p->n_devs + b;
  return p->latency[ab] + (double)p->nodes[i].bytes * p->per_byte[ab];
}

/* When node n on device d can start, given where and when its inputs
 * are: the latest input's arrival and the device's own availability. */
static double ready_at(const place_problem *p, const uint32_t *dev,
                       const double *finish, size_t n, uint32_t d,
                       double avail) {
  double t = avail;
  const place_node *x = &p->nodes[n];
  for (size_t j = 0; j < x->n_in; j++) {
    uint32_t i = x->in[j];
    if (dev[i] == NONE)
      continue; /* a source not placed yet goes where its reader is */
    double a = finish[i] + copy_time(p, i, dev[i], d);
    if (a > t)
      t = a;
  }
  return t;
}

double place_estimate(const place_problem *p, const uint32_t *dev) {
  double *avail = calloc(p->n_devs ? p->n_devs : 1, sizeof *avail);
  double *finish = malloc((p->n_nodes ? p->n_nodes : 1) * sizeof *finish);
  double span = 0.0;
  if (!avail || !finish) {
    span = NAN;
    goto out;
  }
  for (size_t n = 0; n < p->n_nodes; n++) {
    uint32_t d = dev[n];
    double c = cost(p, n, d);
    if (isinf(c)) {
      span = INFINITY;
      goto out;
    }
    if (p->nodes[n].source) {
      finish[n] = 0.0;
      continue;
    }
    finish[n] = ready_at(p, dev, finish, n, d, avail[res(p, d)]) + c;
    avail[res(p, d)] = finish[n];
    if (finish[n] > span)
      span = finish[n];
  }
out:
  free(avail);
  free(finish);
  return span;
}

/* The device that runs node n cheapest (lowest index on ties), or NONE. */
static uint32_t cheapest(const place_problem *p, size_t n) {
  uint32_t best = NONE;
  for (uint32_t d = 0; d < p->n_devs; d++)
    if (!isinf(cost(p, n, d)) &&
        (best == NONE || cost(p, n, d) < cost(p, n, best)))
      best = d;
  return best;
}

/* Unpinned sources go to their first reader's device (device 0 when
 * nothing reads them), pinned ones to their pin. */
static void place_sources(const place_problem *p, uint32_t *dev) {
  for (size_t n = 0; n < p->n_nodes; n++)
    if (p->nodes[n].source)
      dev[n] = p->nodes[n].pin ? p->nodes[n].pin - 1 : NONE;
  for (size_t n = 0; n < p->n_nodes; n++) {
    const place_node *x = &p->nodes[n];
    if (x->source)
      continue;
    for (size_t j = 0; j < x->n_in; j++)
      if (dev[x->in[j]] == NONE)
        dev[x->in[j]] = dev[n];
  }
  for (size_t n = 0; n < p->n_nodes; n++)
    if (dev[n] == NONE)
      dev[n] = 0;
}

/* Node n (computed) on its pin or the policy's device, or where it runs
 * cheapest when that device refuses it. */
static int fixed(const place_problem *p, place_result *r, size_t n,
                 uint32_t want) {
  if (!isinf(cost(p, n, want))) {
    r->dev[n] = want;
    return 0;
  }
  uint32_t d = cheapest(p, n);
  if (d == NONE)
    return -2;
  r->dev[n] = d;
  r->fallback[n] = 1;
  r->wanted[n] = want;
  return 0;
}

/* Every unpinned computed node on device d (where d runs it): 1 when d
 * ran them all. */
static int all_on(const place_problem *p, const place_result *r, uint32_t d,
                  uint32_t *dev) {
  int all = 1;
  for (size_t n = 0; n < p->n_nodes; n++) {
    const place_node *x = &p->nodes[n];
    dev[n] = r->dev[n];
    if (x->source || x->pin)
      continue;
    if (!isinf(cost(p, n, d)))
      dev[n] = d;
    else
      all = 0;
  }
  for (size_t n = 0; n < p->n_nodes; n++)
    if (p->nodes[n].source && !p->nodes[n].pin)
      dev[n] = NONE;
  place_sources(p, dev);
  return all;
}

void place_result_free(place_result *r) {
  if (!r)
    return;
  free(r->dev);
  free(r->fallback);
  free(r->wanted);
  memset(r, 0, sizeof *r);
}

int place_run(const place_problem *p, place_result *r, char *msg,
              size_t msg_size) {
  memset(r, 0, sizeof *r);
  size_t nn = p->n_nodes ? p->n_nodes : 1, nd = p->n_devs;
  r->dev = malloc(nn * sizeof *r->dev);
  r->fallback = calloc(nn, 1);
  r->wanted = malloc(nn * sizeof *r->wanted);
  double *finish = malloc(nn * sizeof *finish);
  double *avail = calloc(nd ? nd : 1, sizeof *avail);
  uint32_t *alt = malloc(nn * sizeof *alt);
  int rc = -1;
  if (!r->dev || !r->fallback || !r->wanted || !finish || !avail || !alt)
    goto out;
  for (size_t n = 0; n < p->n_nodes; n++) {
    r->dev[n] = NONE;
    r->wanted[n] = NONE;
    finish[n] = 0.0;
  }
  for (size_t n = 0; n < p->n_nodes; n++) {
    const place_node *x = &p->nodes[n];
    if (x->source) {
      if (x->pin)
        r->dev[n] = x->pin - 1;
      continue;
    }
    if (x->pin || p->policy == PLACE_PINNED) {
      if ((rc = fixed(p, r, n, x->pin ? x->pin - 1 : 0)) < 0) {
        snprintf(msg, msg_size, "node %zu runs on no device", n);
        goto out;
      }
    } else {
      /* Earliest finish time over the devices that run it. */
      double best = INFINITY;
      uint32_t bd = NONE;
      for (uint32_t d = 0; d < nd; d++) {
        double c = cost(p, n, d);
        if (isinf(c))
          continue;
        double t = ready_at(p, r->dev, finish, n, d, avail[res(p, d)]) + c;
        if (t < best) {
          best = t;
          bd = d;
        }
      }
      if (bd == NONE) {
        rc = -2;
        snprintf(msg, msg_size, "node %zu runs on no device", n);
        goto out;
      }
      r->dev[n] = bd;
    }
    uint32_t d = r->dev[n];
    finish[n] =
        ready_at(p, r->dev, finish, n, d, avail[res(p, d)]) + cost(p, n, d);
    avail[res(p, d)] = finish[n];
  }
  place_sources(p, r->dev);
  r->estimate = place_estimate(p, r->dev);
  r->single_estimate = INFINITY;
  r->single_dev = 0;
  if (p->policy == PLACE_AUTO) {
    for (uint32_t d = 0; d < nd; d++) {
      if (!all_on(p, r, d, alt))
        continue;
      double e = place_estimate(p, alt);
      if (e < r->single_estimate) {
        r->single_estimate = e;
        r->single_dev = d;
      }
    }
    if (!isinf(r->single_estimate) &&
        !(r->estimate < r->single_estimate * (1.0 - PLACE_SPLIT_GAIN))) {
      all_on(p, r, r->single_dev, r->dev);
      r->estimate = r->single_estimate;
    }
  }
  r->split = 0;
  for (size_t n = 1; n < p->n_nodes; n++)
    r->split |= r->dev[n] != r->dev[0];
  rc = 0;
out:
  free(finish);
  free(avail);
  free(alt);
  return rc;
}
