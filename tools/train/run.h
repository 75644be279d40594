/*
 * tyto-train's run: what one invocation of the tool holds (its options,
 * data, programs, progress and figures), shared by the tool's files:
 * tyto-train.c (building, training, progress, signals), checkpoint.c
 * (saving and resuming), report.c (the summary, the JSON, the plot) and
 * run.c (small helpers). Internal to tools/.
 */
#ifndef TYTO_TOOLS_TRAIN_RUN_H
#define TYTO_TOOLS_TRAIN_RUN_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/tyto.h>

#include "model_file.h"
#include "options.h"
#include "parallel.h"

#define CHECKPOINT_FORMAT "tyto-train 1"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* A curve for the plot: points (x[i], y[i]). */
typedef struct curve {
  size_t n, cap;
  double *x, *y;
} curve;

typedef struct run {
  options o;
  mf_model *model;
  const char *model_name;
  tyto_dataset *train, *test;
  tyto_batcher *train_b, *test_b, *valid_b;
  int64_t classes, item_size, n_train, n_valid, n_test;
  tyto_context *ctx;
  const char *device_id; /* "cpu:0", or "cpu:0+opencl:0" data-parallel */
  char devices_text[256];
  /* Data-parallel training over every selected device (train/parallel.h);
   * NULL on one device. train_p then holds the state between
   * checkpoints and evaluations. */
  train_dp *dp;
  size_t n_left_out; /* of dp's devices left out, those said so */
  tyto_graph *g;
  tyto_nn *nn;
  tyto_optim *optim;
  tyto_optim_options oo;
  tyto_tensor *x, *labels, *loss, *correct, *lr;
  tyto_tensor *xe, *labels_e, *loss_e, *correct_e;
  tyto_program *train_p, *eval_p;
  /* Everything a checkpoint holds: the train program's parameters. */
  size_t n_state;
  tyto_tensor **state;
  float *xbuf, *ybuf;
  size_t xbytes, ybytes;
  /* Progress. */
  int64_t steps, epoch, batch_in_epoch, batches_per_epoch;
  double epoch_loss, epoch_correct, epoch_images;
  double images_here; /* images trained by this process (padding not) */
  double last_loss, last_lr;
  double compile_seconds, train_seconds;
  /* Of train_seconds: filling and binding batches, and running steps. */
  double data_seconds, run_seconds;
  double *epoch_seconds;
  int64_t epochs_done_here; /* epochs completed by this process */
  double test_accuracy, test_loss, valid_accuracy;
  int have_test;
  int have_valid; /* an evaluation during training saw the validation set */
  curve loss_curve, train_acc_curve, eval_acc_curve;
  int bar; /* a live progress bar on stderr */
  double bar_t0;
  double last_log;
} run;

/* run.c: appends a point (-1 when out of memory); frees the points. */
int curve_add(curve *c, double x, double y);
void curve_free(curve *c);
/* Seconds on a monotonic clock. */
double now(void);
/* Prints "tyto-train: <what>: <tyto_errmsg()>"; returns -1. */
int fail_status(const char *what);

/* tyto-train.c: data-parallel runs gather the replicas' state into the
 * training program, which checkpoints and evaluation read (0, or -1 with
 * the message printed). */
int dp_pull(run *r);

/* checkpoint.c: writes --checkpoint from the training program's state
 * and the run's position; restores both from it (--resume), checking that
 * it belongs to this run. 0, or -1 with the message printed. */
int save_checkpoint(run *r);

/* A file the run will write (--checkpoint, --plot, named by flag): a
 * regular file or none yet, in a directory where a file can be created;
 * -1 with the message printed otherwise (ranks.c). */
int check_writable(const char *flag, const char *path);

/* Over several ranks: every setting that shapes a step is the same on
 * every rank (compared by name); -1 with the message printed (ranks.c). */
int agree_run(const run *r);
int resume(run *r);

/* report.c: the summary on stdout, as text or JSON (steps_here: the steps
 * this process ran), and --plot (0, or -1 with the message printed). */
void report_json(const run *r, int64_t steps_here);
/* The bar or log line of training's progress (final: at an epoch's end). */
void progress(run *r, int final);
void report_text(const run *r, int64_t steps_here);
int write_plot(const run *r);

#endif /* TYTO_TOOLS_TRAIN_RUN_H */
