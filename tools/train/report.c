/*
 * tyto-train's reports (run.h): the summary as text or JSON, and the
 * loss and accuracy curves as SVG.
 */
#define _POSIX_C_SOURCE 200809L

#include "run.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "plot.h"

/* ---------------------------------------------------------------------- */
/* Reports                                                                 */

static long peak_rss_bytes(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss * 1024L : -1;
}

/* The training device's peak of device memory held by tyto (its buffers
 * and both programs'), or -1 when it cannot be read. */
static long long peak_device_bytes(const run *r) {
  tyto_device_memory m = {.struct_size = sizeof m};
  if (tyto_device_memory_get(tyto_context_device(r->ctx, 0), &m) != TYTO_OK)
    return -1;
  return (long long)m.peak_bytes;
}

/* Images trained (a partial batch counts its images, not its padding)
 * over training time. */
static double images_per_second(const run *r) {
  return r->train_seconds > 0 ? r->images_here / r->train_seconds : 0;
}

static double mean_epoch(const run *r) {
  double s = 0;
  for (int64_t i = 0; i < r->epochs_done_here; i++)
    s += r->epoch_seconds[i];
  return r->epochs_done_here ? s / (double)r->epochs_done_here : 0;
}

void report_json(const run *r, int64_t steps_here) {
  json_t *o = json_object(), *eps = json_array(), *devs = json_array();
  for (int64_t i = 0; i < r->epochs_done_here; i++)
    json_array_append_new(eps, json_real(r->epoch_seconds[i]));
  json_t *par = r->dp ? json_array() : json_null();
  for (size_t i = 0; i < (r->dp ? train_dp_count(r->dp) : 1); i++) {
    train_dp_device d = {.id = r->device_id};
    if (r->dp) {
      train_dp_device_get(r->dp, i, &d);
      json_t *e = json_object();
      json_object_set_new(e, "device", json_string(d.id));
      json_object_set_new(e, "shard", json_integer(d.shard));
      json_object_set_new(e, "images_per_second",
                          steps_here > 0 ? json_real(d.images_per_second)
                                         : json_null());
      json_object_set_new(e, "wait_seconds",
                          steps_here > 0 ? json_real(d.wait_seconds)
                                         : json_null());
      json_array_append_new(par, e);
    }
    json_array_append_new(devs, json_string(d.id));
  }
  json_object_set_new(o, "model", json_string(r->model_name));
  json_object_set_new(o, "optimizer",
                      json_string(tyto_optim_kind_name(r->oo.kind)));
  json_object_set_new(o, "lr", json_real(r->oo.lr));
  json_object_set_new(o, "epochs", json_integer(r->epoch));
  json_object_set_new(o, "steps", json_integer(r->steps));
  json_object_set_new(o, "batch", json_integer(r->o.batch));
  json_object_set_new(o, "seed", json_integer((json_int_t)r->o.seed));
  json_object_set_new(o, "train_images", json_integer(r->n_train));
  json_object_set_new(o, "test_images", json_integer(r->n_test));
  /* null when this process trained no step (a finished run resumed) */
  json_object_set_new(o, "train_loss",
                      r->epoch_images > 0
                          ? json_real(r->epoch_loss / r->epoch_images)
                      : steps_here > 0 ? json_real(r->last_loss)
                                       : json_null());
  json_object_set_new(o, "train_accuracy",
                      r->epoch_images > 0
                          ? json_real(r->epoch_correct / r->epoch_images)
                      : steps_here > 0 ? json_real(0)
                                       : json_null());
  json_object_set_new(o, "test_accuracy",
                      r->have_test ? json_real(r->test_accuracy) : json_null());
  json_object_set_new(o, "test_loss",
                      r->have_test ? json_real(r->test_loss) : json_null());
  /* null when no evaluation ran during training (--max-steps first) */
  if (r->valid_b)
    json_object_set_new(o, "validation_accuracy",
                        r->have_valid ? json_real(r->valid_accuracy)
                                      : json_null());
  json_object_set_new(o, "images_per_second",
                      steps_here > 0 ? json_real(images_per_second(r))
                                     : json_null());
  json_object_set_new(o, "seconds_per_epoch",
                      r->epochs_done_here ? json_real(mean_epoch(r))
                                          : json_null());
  json_object_set_new(o, "epoch_seconds", eps);
  json_object_set_new(o, "train_seconds", json_real(r->train_seconds));
  json_object_set_new(o, "data_seconds", json_real(r->data_seconds));
  json_object_set_new(o, "step_seconds", json_real(r->run_seconds));
  json_object_set_new(o, "compile_seconds", json_real(r->compile_seconds));
  json_object_set_new(o, "peak_rss_bytes", json_integer(peak_rss_bytes()));
  json_object_set_new(o, "peak_device_bytes",
                      json_integer((json_int_t)peak_device_bytes(r)));
  /* Training steps replayed from a recorded graph, or why none were. */
  tyto_program_device_stats ds = {.struct_size = sizeof ds};
  const tyto_program *tp = r->dp ? train_dp_program(r->dp) : r->train_p;
  int have_ds = tp && tyto_program_device_stats_get(tp, 0, &ds) == TYTO_OK;
  json_object_set_new(o, "graph_replays",
                      json_integer(have_ds ? (json_int_t)ds.graph_replays : 0));
  json_object_set_new(o, "graph_note",
                      have_ds && ds.graph_note ? json_string(ds.graph_note)
                                               : json_null());
  json_object_set_new(o, "devices", devs);
  json_object_set_new(o, "data_parallel", par);
  json_object_set_new(o, "sync_batch_norm", json_boolean(r->o.sync_batch_norm));
  double xs = 0, xe = 0;
  if (r->dp)
    train_dp_exchange(r->dp, &xs, &xe);
  json_object_set_new(o, "exchange_seconds",
                      r->dp ? json_real(xs) : json_null());
  json_object_set_new(o, "exchange_exposed_seconds",
                      r->dp ? json_real(xe) : json_null());
  /* Mixed precision (docs/precision.md). */
  json_object_set_new(o, "precision",
                      json_string(tyto_dtype_name(r->o.precision)));
  json_object_set_new(o, "loss_scale",
                      r->dp ? json_real(train_dp_loss_scale(r->dp))
                            : json_real(1));
  json_object_set_new(
      o, "skipped_steps",
      json_integer(r->dp ? (json_int_t)train_dp_skipped(r->dp) : 0));
  /* Processes (docs/distributed.md). */
  double nb = 0, ns = 0;
  if (r->dp)
    train_dp_network(r->dp, &nb, &ns);
  json_object_set_new(o, "ranks", json_integer(tyto_dist_size()));
  json_object_set_new(o, "rank_batch",
                      json_integer(r->dp
                                       ? (json_int_t)train_dp_rank_batch(r->dp)
                                       : (json_int_t)r->o.batch));
  json_object_set_new(o, "network_bytes_per_step", json_real(nb));
  json_object_set_new(o, "network_seconds", json_real(ns));
  json_t *left = r->dp ? json_array() : json_null();
  for (size_t i = 0; r->dp && i < train_dp_left_out_count(r->dp); i++) {
    train_dp_left l;
    train_dp_left_out_get(r->dp, i, &l);
    json_t *e = json_object();
    json_object_set_new(e, "device", json_string(l.id ? l.id : "?"));
    json_object_set_new(e, "step", json_integer(l.step));
    json_object_set_new(e, "unit_seconds", json_real(l.unit_seconds));
    json_object_set_new(e, "others_seconds", json_real(l.others_seconds));
    json_array_append_new(left, e);
  }
  json_object_set_new(o, "left_out", left);
  char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                              JSON_REAL_PRECISION(6));
  if (s)
    printf("%s\n", s);
  free(s);
  json_decref(o);
}

void report_text(const run *r, int64_t steps_here) {
  printf("model %s on %s: %lld step%s of %lld images, %lld epoch%s\n",
         r->model_name, r->devices_text, (long long)r->steps,
         r->steps == 1 ? "" : "s", (long long)r->o.batch, (long long)r->epoch,
         r->epoch == 1 ? "" : "s");
  for (size_t i = 0; r->dp && i < train_dp_count(r->dp); i++) {
    train_dp_device d;
    train_dp_device_get(r->dp, i, &d);
    if (steps_here > 0)
      printf("  %-12s %lld images per step, %.0f images/s, waited %.2f s\n",
             d.id, (long long)d.shard, d.images_per_second, d.wait_seconds);
    else
      printf("  %-12s %lld images per step\n", d.id, (long long)d.shard);
  }
  for (size_t i = 0; r->dp && i < train_dp_left_out_count(r->dp); i++) {
    train_dp_left l;
    train_dp_left_out_get(r->dp, i, &l);
    printf("  %-12s left out at step %lld, too slow to help: %.2f ms for "
           "its fewest examples, the others %.2f ms for the whole batch\n",
           l.id ? l.id : "?", (long long)l.step, 1e3 * l.unit_seconds,
           1e3 * l.others_seconds);
  }
  if (r->dp) {
    double xs, xe;
    train_dp_exchange(r->dp, &xs, &xe);
    printf("  gradient exchange %.2f s, %.2f s of it after the backward "
           "pass\n",
           xs, xe);
  }
  if (r->have_test)
    printf("test accuracy %.2f%% (loss %.4f) on %lld images\n",
           100 * r->test_accuracy, r->test_loss, (long long)r->n_test);
  /* No rate from a run that trained nothing (a finished run resumed), no
   * epoch time before an epoch ends. */
  if (steps_here > 0)
    printf("%.0f images/s, ", images_per_second(r));
  else
    printf("no step trained, ");
  if (r->epochs_done_here)
    printf("%.1f s per epoch, ", mean_epoch(r));
  else
    printf("no whole epoch, ");
  printf("compile %.2f s, peak RSS %.0f MB, peak device memory %.0f MB\n",
         r->compile_seconds, (double)peak_rss_bytes() / 1e6,
         (double)peak_device_bytes(r) / 1e6);
}

int write_plot(const run *r) {
  char title[160], err[512];
  snprintf(title, sizeof title, "tyto-train: %s", r->model_name);
  for (char *c = title; *c; c++)
    if (*c == '<' || *c == '>' || *c == '&' || *c == '"')
      *c = '_';
  plot_series loss = {"training loss", "#1f77b4", r->loss_curve.n,
                      r->loss_curve.x, r->loss_curve.y};
  plot_series acc[2] = {
      {"training accuracy (epoch)", "#1f77b4", r->train_acc_curve.n,
       r->train_acc_curve.x, r->train_acc_curve.y},
      {r->valid_b ? "validation accuracy" : "test accuracy", "#d62728",
       r->eval_acc_curve.n, r->eval_acc_curve.x, r->eval_acc_curve.y}};
  if (plot_write_svg(r->o.plot, title, 1, &loss, 2, acc, err, sizeof err) < 0) {
    fprintf(stderr, PROG ": --plot: %s\n", err);
    return -1;
  }
  return 0;
}

/* The progress bar on a terminal, else a log line about every 10 s and
 * at the end of each epoch. */
static void format_eta(double s, char *buf, size_t n) {
  if (!isfinite(s) || s < 0)
    s = 0;
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

void progress(run *r, int final) {
  if (r->o.quiet)
    return;
  double t = now(), el = t - r->bar_t0;
  double done = (double)r->batch_in_epoch;
  double ips = el > 0 ? r->epoch_images / el : 0;
  double left = (double)(r->batches_per_epoch - r->batch_in_epoch) *
                (double)r->o.batch / (ips > 0 ? ips : 1);
  double loss = r->epoch_images > 0 ? r->epoch_loss / r->epoch_images : 0;
  double acc = r->epoch_images > 0 ? r->epoch_correct / r->epoch_images : 0;
  char eta[32];
  format_eta(left, eta, sizeof eta);
  if (r->bar) {
    if (!final && t - r->last_log < 0.1)
      return;
    r->last_log = t;
    enum { W = 24 };
    int fill = (int)(W * done / (double)r->batches_per_epoch);
    char bar[W + 1];
    for (int i = 0; i < W; i++)
      bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[W] = '\0';
    fprintf(stderr,
            "\r\033[Kepoch %lld/%lld [%s] %lld/%lld  loss %.4f  acc %5.1f%%  "
            "%.0f img/s  ETA %s",
            (long long)r->epoch + 1, (long long)r->o.epochs, bar,
            (long long)r->batch_in_epoch, (long long)r->batches_per_epoch, loss,
            100 * acc, ips, eta);
    if (final)
      fputc('\n', stderr);
    fflush(stderr);
    return;
  }
  /* Plain log lines: about every 10 s, and at the end of each epoch. */
  if (!final && t - r->last_log < 10)
    return;
  r->last_log = t;
  fprintf(stderr,
          PROG ": epoch %lld/%lld step %lld/%lld loss %.4f acc %.1f%% "
               "%.0f img/s ETA %s\n",
          (long long)r->epoch + 1, (long long)r->o.epochs,
          (long long)r->batch_in_epoch, (long long)r->batches_per_epoch, loss,
          100 * acc, ips, eta);
}
