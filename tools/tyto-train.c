/*
 * tyto-train: trains a network on an IDX image dataset (MNIST,
 * Fashion-MNIST) and reports its test accuracy.
 *
 * One static program per training step, as Owl's neural compiler does: the
 * forward pass, the loss, the gradients, clipping and the optimiser's
 * update compile into one program whose parameters and optimiser state stay
 * on the device; evaluation is a second program built from the same layers
 * in EVAL mode, to which the parameters are copied before each evaluation.
 *
 * Exit status: 0 trained; 1 a runtime failure (a kernel failed, a
 * checkpoint could not be written); 2 bad input (an unknown option, a bad
 * value, a missing or damaged dataset, a model file with an error, a
 * checkpoint from another model or run); 130 or 143 stopped by SIGINT or
 * SIGTERM during training, after writing --checkpoint when one was given.
 * Under an MPI launcher (mpirun, srun) each process is one rank of a
 * data-parallel run (docs/distributed.md): every rank reads the data and
 * trains its share of each global batch; rank 0 alone prints and writes
 * the checkpoint and the plot; a rank that fails stops them all.
 * docs/training.md is the guide. The run's state is train/run.h's;
 * checkpoints are train/checkpoint.c's, reports train/report.c's,
 * data-parallel training train/parallel.c's.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tyto/tyto.h>

#include "train/prefetch.h"
#include "train/run.h"

/* ---------------------------------------------------------------------- */
/* Data, model and programs                                                */

static int load_data(run *r, int *code) {
  tyto_status s = tyto_dataset_load_dir(r->o.data, "train", 0, &r->train);
  if (s == TYTO_OK)
    s = tyto_dataset_load_dir(r->o.data, "t10k", 0, &r->test);
  if (s != TYTO_OK) {
    /* A missing, unreadable or damaged dataset is bad input; running out
     * of memory is not. */
    *code = s == TYTO_ERR_OUT_OF_MEMORY ? EXIT_RUNTIME : EXIT_USAGE;
    fprintf(stderr, PROG ": data: %s\n", tyto_errmsg());
    return -1;
  }
  *code = EXIT_USAGE;
  r->classes = tyto_dataset_classes(r->train);
  if (tyto_dataset_classes(r->test) > r->classes)
    r->classes = tyto_dataset_classes(r->test);
  r->item_size = tyto_dataset_item_size(r->train);
  if (tyto_dataset_item_size(r->test) != r->item_size) {
    fprintf(stderr,
            PROG ": data: training images hold %lld values, test images %lld\n",
            (long long)r->item_size,
            (long long)tyto_dataset_item_size(r->test));
    return -1;
  }
  int64_t want = 1;
  for (int a = 0; a < mf_input_rank(r->model); a++)
    want *= mf_input_shape(r->model)[a];
  if (want != r->item_size) {
    fprintf(stderr,
            PROG ": the model's input holds %lld values, the data's images "
                 "%lld\n",
            (long long)want, (long long)r->item_size);
    return -1;
  }
  int64_t total = tyto_dataset_count(r->train);
  if (total == 0 || tyto_dataset_count(r->test) == 0) {
    fprintf(stderr,
            PROG ": data: %s holds no %s images (its %s-images file has a "
                 "count of 0)\n",
            r->o.data, total == 0 ? "training" : "test",
            total == 0 ? "train" : "t10k");
    return -1;
  }
  r->n_valid = r->o.validation;
  if (r->n_valid >= total) {
    fprintf(stderr,
            PROG ": --validation %lld leaves no training images (the data has "
                 "%lld)\n",
            (long long)r->n_valid, (long long)total);
    return -1;
  }
  r->n_train = total - r->n_valid;
  if (r->o.limit && r->o.limit < r->n_train)
    r->n_train = r->o.limit;
  r->n_test = tyto_dataset_count(r->test);
  if (r->o.test_limit && r->o.test_limit < r->n_test)
    r->n_test = r->o.test_limit;
  return 0;
}

static int make_batchers(run *r) {
  tyto_batcher_options bo;
  tyto_batcher_options_init(&bo);
  bo.batch_size = r->o.batch;
  bo.scale = 1.0 / 255;
  bo.one_hot = 1;
  bo.seed = r->o.seed;
  bo.first = 0;
  bo.count = r->n_train;
  /* Cross-entropy ignores the zero rows that pad a partial batch; other
   * losses would count them, so they drop it. */
  bo.drop_last = mf_loss_kind(r->model) != MF_LOSS_CROSS_ENTROPY;
  if (tyto_batcher_new(r->train, &bo, &r->train_b) != TYTO_OK)
    return fail_status("data");
  bo.shuffle = 0;
  bo.drop_last = 0;
  bo.count = r->n_test;
  if (tyto_batcher_new(r->test, &bo, &r->test_b) != TYTO_OK)
    return fail_status("data");
  if (r->n_valid) {
    bo.first = tyto_dataset_count(r->train) - r->n_valid;
    bo.count = r->n_valid;
    if (tyto_batcher_new(r->train, &bo, &r->valid_b) != TYTO_OK)
      return fail_status("data");
  }
  r->batches_per_epoch = tyto_batcher_batches(r->train_b);
  if (r->batches_per_epoch == 0) {
    fprintf(stderr, PROG ": %lld training images make no full batch of %lld\n",
            (long long)r->n_train, (long long)r->o.batch);
    return -1;
  }
  r->xbytes = (size_t)(r->o.batch * r->item_size) * sizeof(float);
  r->ybytes = (size_t)(r->o.batch * r->classes) * sizeof(float);
  r->xbuf = malloc(r->xbytes);
  r->ybuf = malloc(r->ybytes);
  if (!r->xbuf || !r->ybuf) {
    fprintf(stderr, PROG ": out of memory\n");
    return -1;
  }
  return 0;
}

/* Builds both programs' graphs. Returns 0, or -1 with a message printed
 * and *code set. */
static int build(run *r, int *code) {
  char err[1024];
  *code = EXIT_USAGE;
  r->g = tyto_graph_new();
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  no.seed = r->o.seed;
  no.sync_batch_norm = r->o.sync_batch_norm;
  if (!r->g || tyto_nn_new(r->g, &no, &r->nn) != TYTO_OK)
    return fail_status("model");
  int rank = 1 + mf_input_rank(r->model);
  int64_t shape[TYTO_MAX_RANK];
  shape[0] = r->o.batch;
  memcpy(shape + 1, mf_input_shape(r->model),
         (size_t)(rank - 1) * sizeof *shape);
  int64_t lshape[2] = {r->o.batch, r->classes};

  r->x = tyto_nn_input(r->nn, rank, shape, "x");
  r->labels = tyto_nn_input(r->nn, 2, lshape, "labels");
  tyto_tensor *logits = mf_build(r->model, r->nn, r->x, err, sizeof err);
  if (!logits) {
    fprintf(stderr, PROG ": %s\n", err);
    return -1;
  }
  if (tyto_tensor_rank(logits) != 2 ||
      tyto_tensor_dim(logits, 1) != r->classes) {
    char s[128] = "";
    size_t k = 0;
    for (int a = 0; a < tyto_tensor_rank(logits) && k < sizeof s; a++)
      k += (size_t)snprintf(s + k, sizeof s - k, "%s%lld", a ? "," : "",
                            (long long)tyto_tensor_dim(logits, a));
    fprintf(stderr,
            PROG ": the model's output is [%s]; the data has %lld classes, "
                 "so it must be [%lld,%lld] (end with linear units=%lld)\n",
            s, (long long)r->classes, (long long)r->o.batch,
            (long long)r->classes, (long long)r->classes);
    return -1;
  }
  if (!(r->loss = train_loss(r->model, r->nn, logits, r->labels)))
    return fail_status("model");
  r->correct = tyto_nn_count_correct(logits, r->labels);

  size_t np = tyto_nn_parameter_count(r->nn);
  tyto_tensor *const *params = tyto_nn_parameters(r->nn);
  tyto_tensor **grads = calloc(np ? np : 1, sizeof *grads);
  if (!grads)
    return fail_status("model");
  tyto_grads(r->loss, np, params, grads);
  if (tyto_graph_status(r->g) != TYTO_OK) {
    fprintf(stderr, PROG ": model: %s\n", tyto_graph_error_message(r->g));
    free(grads);
    return -1;
  }
  options_optim(&r->o, &r->oo);
  tyto_status s = tyto_optim_build(&r->oo, np, params, grads, &r->optim);
  free(grads);
  if (s != TYTO_OK) {
    fprintf(stderr, PROG ": optimizer: %s\n", tyto_errmsg());
    return -1;
  }
  r->lr = tyto_optim_lr(r->optim);

  /* Evaluation: the same layers in EVAL mode, sharing the parameters. */
  tyto_nn_set_mode(r->nn, TYTO_NN_EVAL);
  r->xe = tyto_nn_input(r->nn, rank, shape, "x_eval");
  r->labels_e = tyto_nn_input(r->nn, 2, lshape, "labels_eval");
  tyto_tensor *le = mf_build(r->model, r->nn, r->xe, err, sizeof err);
  if (!le) {
    fprintf(stderr, PROG ": %s\n", err);
    return -1;
  }
  r->loss_e = model_loss(r->model, le, r->labels_e);
  r->correct_e = tyto_nn_count_correct(le, r->labels_e);
  if (tyto_graph_status(r->g) != TYTO_OK) {
    fprintf(stderr, PROG ": model: %s\n", tyto_graph_error_message(r->g));
    return -1;
  }
  return 0;
}

static int compile(run *r) {
  double t0 = now();
  /* The updates: the layers' state (dropout's step, batch norm's running
   * statistics), then the optimiser's parameters and state. */
  size_t nn_u = tyto_nn_update_count(r->nn),
         op_u = tyto_optim_update_count(r->optim);
  size_t nu = nn_u + op_u;
  tyto_tensor **up = malloc((nu ? nu : 1) * sizeof *up),
              **uv = malloc((nu ? nu : 1) * sizeof *uv);
  if (!up || !uv) {
    free(up);
    free(uv);
    return fail_status("compile");
  }
  /* Either list may be empty (and its array NULL). */
  for (size_t i = 0; i < nn_u; i++) {
    up[i] = tyto_nn_update_params(r->nn)[i];
    uv[i] = tyto_nn_update_values(r->nn)[i];
  }
  for (size_t i = 0; i < op_u; i++) {
    up[nn_u + i] = tyto_optim_update_params(r->optim)[i];
    uv[nn_u + i] = tyto_optim_update_values(r->optim)[i];
  }
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_updates = nu;
  po.update_params = up;
  po.update_values = uv;
  tyto_tensor *outs[3] = {r->loss, r->correct, r->lr};
  tyto_status s = tyto_program_compile(r->ctx, r->g, 3, outs, &po, &r->train_p);
  free(up);
  free(uv);
  if (s != TYTO_OK)
    return fail_status("compiling the training step");
  tyto_tensor *eouts[2] = {r->loss_e, r->correct_e};
  if (tyto_program_compile(r->ctx, r->g, 2, eouts, NULL, &r->eval_p) != TYTO_OK)
    return fail_status("compiling the evaluation");
  r->compile_seconds = now() - t0;

  /* The checkpointed state: every parameter the training step uses, in
   * graph order (layers' parameters and state, then the optimiser's). */
  size_t n = tyto_graph_size(r->g);
  r->state = malloc(n * sizeof *r->state);
  if (!r->state)
    return fail_status("compile");
  for (size_t i = 0; i < n; i++) {
    tyto_tensor *t = tyto_graph_tensor(r->g, i);
    if (tyto_tensor_kind(t) == TYTO_KIND_PARAMETER &&
        tyto_program_uses(r->train_p, t))
      r->state[r->n_state++] = t;
  }
  if (tyto_nn_initialize(r->nn, r->train_p) != TYTO_OK)
    return fail_status("initialising the parameters");
  return 0;
}

/* Data-parallel: the replicas' state into the training program, which
 * checkpoints and the evaluation read. */
int dp_pull(run *r) {
  if (!r->dp)
    return 0;
  int rc = train_dp_pull(r->dp, r->train_p, r->n_state, r->state);
  if (rc == -2)
    fprintf(stderr, PROG ": out of memory\n");
  else if (rc < 0)
    fprintf(stderr, PROG ": reading the state of the devices: %s\n",
            tyto_errmsg());
  return rc < 0 ? -1 : 0;
}

/* Copies the parameters the evaluation reads from the training program. */
static int sync_eval(run *r) {
  size_t cap = 0;
  void *buf = NULL;
  if (dp_pull(r) < 0)
    return -1;
  for (size_t i = 0; i < r->n_state; i++) {
    tyto_tensor *t = r->state[i];
    if (!tyto_program_uses(r->eval_p, t))
      continue;
    size_t bytes =
        (size_t)tyto_tensor_numel(t) * tyto_dtype_size(tyto_tensor_dtype(t));
    if (bytes > cap) {
      void *nb = realloc(buf, bytes);
      if (!nb) {
        free(buf);
        return fail_status("evaluation");
      }
      buf = nb;
      cap = bytes;
    }
    if (tyto_program_read_parameter(r->train_p, t, buf, bytes) != TYTO_OK ||
        tyto_program_write_parameter(r->eval_p, t, buf, bytes) != TYTO_OK) {
      free(buf);
      return fail_status("evaluation");
    }
  }
  free(buf);
  return 0;
}

/* Accuracy and mean loss of the evaluation program over batcher b. */
static int evaluate(run *r, tyto_batcher *b, double *acc, double *loss) {
  if (sync_eval(r) < 0 || tyto_batcher_seek(b, 0, 0) != TYTO_OK)
    return -1;
  double correct = 0, loss_sum = 0;
  int64_t seen = 0, filled;
  for (;;) {
    if (tyto_batcher_next(b, r->xbuf, r->xbytes, r->ybuf, r->ybytes, &filled) !=
        TYTO_OK)
      return fail_status("evaluation");
    if (filled == 0)
      break;
    float out[2];
    if (tyto_program_set_input(r->eval_p, r->xe, r->xbuf, r->xbytes) ||
        tyto_program_set_input(r->eval_p, r->labels_e, r->ybuf, r->ybytes) ||
        tyto_program_run(r->eval_p) ||
        tyto_program_read_output(r->eval_p, 0, &out[0], sizeof(float)) ||
        tyto_program_read_output(r->eval_p, 1, &out[1], sizeof(float)))
      return fail_status("evaluation");
    /* Cross-entropy is already the mean over the filled rows. */
    loss_sum += (double)out[0] * (double)filled;
    correct += out[1];
    seen += filled;
  }
  *acc = seen ? correct / (double)seen : 0;
  *loss = seen ? loss_sum / (double)seen : 0;
  return 0;
}

static void say(const run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const run *r, const char *fmt, ...) {
  if (r->o.quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  fputs(PROG ": ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

static int eval_now(run *r) {
  double acc, loss;
  tyto_batcher *b = r->valid_b ? r->valid_b : r->test_b;
  if (evaluate(r, b, &acc, &loss) < 0)
    return -1;
  curve_add(&r->eval_acc_curve, (double)r->steps, acc);
  say(r, "step %lld: %s accuracy %.2f%%, loss %.4f\n", (long long)r->steps,
      r->valid_b ? "validation" : "test", 100 * acc, loss);
  if (r->valid_b) {
    r->valid_accuracy = acc;
    r->have_valid = 1;
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Training                                                                */

/* Signals. SIGINT and SIGTERM stop training after the current step, with
 * a checkpoint written (before training starts, they stop the tool at
 * once; a second one always does). They are blocked in every thread and
 * taken by one thread of ours with sigwait(), so that no library can take
 * them from us: PoCL's LLVM, for one, installs its own handlers for them
 * when it loads, which would otherwise kill the process without the
 * checkpoint. SIGXFSZ is blocked too, so that a checkpoint past the
 * file-size limit fails with an error (EFBIG) instead of killing the run;
 * SIGPIPE is ignored, so that a closed stdout is an error we report. */
static volatile sig_atomic_t interrupted, training;
/* The signal that stops the run: interrupted, or over several ranks the
 * one they agreed on after a step (agree_stop). */
static int stop_signal;

static void *signal_thread(void *arg) {
  const sigset_t *set = arg;
  for (;;) {
    int sig;
    if (sigwait(set, &sig) != 0 || sig == SIGXFSZ)
      continue;
    if (!training || interrupted) {
      static const char msg[] = PROG ": interrupted\n";
      ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)w;
      _exit(128 + sig);
    }
    interrupted = sig;
    tyto_dist_interrupt(sig); /* waits for a dead rank end sooner */
  }
  return NULL;
}

/* Called first in main, before any other thread exists, so that every
 * thread (ours, the plugins', their libraries') inherits the mask. */
static int take_signals(void) {
  static sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGXFSZ);
  signal(SIGPIPE, SIG_IGN);
  pthread_t t;
  if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0 ||
      pthread_create(&t, NULL, signal_thread, &set) != 0)
    return -1;
  pthread_detach(t);
  return 0;
}

/* The devices training runs on, joined by '+', into r->devices_text. */
static void devices_now(run *r) {
  size_t n = r->dp ? train_dp_count(r->dp) : 1, k = 0;
  r->devices_text[0] = '\0';
  for (size_t i = 0; i < n && k < sizeof r->devices_text; i++) {
    train_dp_device d = {.id = r->device_id};
    if (r->dp)
      train_dp_device_get(r->dp, i, &d);
    k += (size_t)snprintf(r->devices_text + k, sizeof r->devices_text - k,
                          "%s%s", i ? "+" : "", d.id);
  }
}

/* Over several ranks a signal reaches each rank at a step of its own: the
 * ranks agree after every step (one small sum), so that all stop after
 * the same step, and rank 0's checkpoint holds it. */
static int agree_stop(void) {
  double f = interrupted ? (double)interrupted : 0; /* one read */
  if (tyto_dist_sum(&f, 1) != TYTO_OK) {
    fprintf(stderr, PROG ": %s\n", tyto_errmsg());
    return -1;
  }
  if (f > 0 && !stop_signal)
    stop_signal = interrupted ? (int)interrupted : SIGINT;
  return 0;
}

static int train_epochs(run *r, prefetch *pf);

static int train(run *r) {
  if (r->o.max_steps && r->steps >= r->o.max_steps) {
    say(r,
        "the run is at step %lld already (--max-steps %lld): nothing to "
        "train\n",
        (long long)r->steps, (long long)r->o.max_steps);
    return 0; /* and the checkpoint stays as it is */
  }
  prefetch pf;
  int pf_ok = prefetch_init(&pf, r->train_b, r->xbytes, r->ybytes) == 0;
  r->epoch_seconds = calloc((size_t)r->o.epochs, sizeof *r->epoch_seconds);
  if (!r->epoch_seconds || !pf_ok) {
    prefetch_free(&pf);
    return fail_status("train");
  }
  int rc = train_epochs(r, &pf);
  prefetch_free(&pf);
  return rc;
}

static int train_epochs(run *r, prefetch *pf) {
  int stopped = 0, at_max = 0;
  while (r->epoch < r->o.epochs && !stopped) {
    if (tyto_batcher_seek(r->train_b, (uint64_t)r->epoch, r->batch_in_epoch) !=
        TYTO_OK)
      return fail_status("data");
    if (prefetch_start(pf) < 0) {
      fprintf(stderr, PROG ": cannot start the data thread\n");
      return -1;
    }
    r->epoch_loss = r->epoch_correct = r->epoch_images = 0;
    r->bar_t0 = now();
    r->last_log = r->bar_t0;
    double t0 = r->bar_t0;
    for (int slot = 0;; slot ^= 1) {
      if (tyto_dist_size() > 1 ? stop_signal : interrupted) {
        say(r, "interrupted\n");
        stopped = 1;
        break;
      }
      double ts = now();
      prefetch_take(pf, slot);
      int64_t filled = pf->filled[slot];
      if (pf->st[slot] != TYTO_OK) {
        fprintf(stderr, PROG ": data: %s\n", pf->msg[slot]);
        return -1;
      }
      if (filled == 0)
        break;
      float out[3];
      double tr;
      if (r->dp) {
        /* The replicas copy their shards in; the batch stays ours until
         * the step returns. */
        double loss, correct;
        const char *lost = NULL;
        tr = now();
        r->data_seconds += tr - ts;
        if (train_dp_step(r->dp, pf->x[slot], pf->y[slot],
                          r->o.continue_on_failure, &loss, &correct, &lost) < 0)
          return fail_status("training step");
        prefetch_give(pf, slot);
        if (lost) {
          devices_now(r);
          say(r,
              "%s failed at step %lld; going on without it, on %s "
              "(--on-device-failure continue)\n",
              lost, (long long)r->steps + 1, r->devices_text);
        }
        char shares[256];
        if (train_dp_shares_changed(r->dp, shares, sizeof shares))
          say(r,
              "shares from the devices' measured speed after step %lld: %s "
              "images a step\n",
              (long long)r->steps + 1, shares);
        if (train_dp_left_out_count(r->dp) > r->n_left_out) {
          train_dp_left l;
          train_dp_left_out_get(r->dp, r->n_left_out++, &l);
          devices_now(r);
          say(r,
              "%s is too slow to help (%.2f ms for its fewest examples, "
              "the others %.2f ms for the whole batch): left out after "
              "step %lld; training on %s\n",
              l.id ? l.id : "?", 1e3 * l.unit_seconds, 1e3 * l.others_seconds,
              (long long)l.step, r->devices_text);
        }
        out[0] = (float)loss;
        out[1] = (float)correct;
        out[2] = (float)r->oo.lr; /* the base rate (schedules: see JSON) */
      } else {
        if (tyto_program_set_input(r->train_p, r->x, pf->x[slot], r->xbytes) ||
            tyto_program_set_input(r->train_p, r->labels, pf->y[slot],
                                   r->ybytes))
          return fail_status("training step");
        prefetch_give(pf, slot);
        tr = now();
        r->data_seconds += tr - ts;
        if (tyto_program_run(r->train_p) ||
            tyto_program_read_output(r->train_p, 0, &out[0], sizeof(float)) ||
            tyto_program_read_output(r->train_p, 1, &out[1], sizeof(float)) ||
            tyto_program_read_output(r->train_p, 2, &out[2], sizeof(float)))
          return fail_status("training step");
      }
      r->run_seconds += now() - tr;
      if (tyto_dist_size() > 1 && agree_stop() < 0)
        return -1;
      r->steps++;
      r->batch_in_epoch++;
      r->last_loss = out[0];
      r->last_lr = out[2];
      r->epoch_loss += (double)out[0] * (double)filled;
      r->epoch_correct += out[1];
      r->epoch_images += (double)filled;
      r->images_here += (double)filled;
      if (!isfinite(out[0])) {
        fprintf(stderr,
                PROG ": the loss is %g at step %lld (learning rate %g): "
                     "training diverged; lower --lr or clip gradients "
                     "(--clip-norm)\n",
                (double)out[0], (long long)r->steps, (double)out[2]);
        return -1;
      }
      if (r->steps % 10 == 0 || r->batch_in_epoch == r->batches_per_epoch)
        curve_add(&r->loss_curve, (double)r->steps, out[0]);
      progress(r, 0);
      if (r->o.checkpoint_every && r->steps % r->o.checkpoint_every == 0 &&
          save_checkpoint(r) < 0)
        return -1;
      if (r->o.eval_every && r->steps % r->o.eval_every == 0) {
        double te = now();
        if (eval_now(r) < 0)
          return -1;
        t0 += now() - te; /* evaluation is not training time */
        r->bar_t0 += now() - te;
      }
      if (r->o.max_steps && r->steps >= r->o.max_steps) {
        stopped = at_max = 1;
        break;
      }
    }
    prefetch_stop(pf);
    double dt = now() - t0;
    progress(r, 1);
    r->train_seconds += dt;
    /* An epoch whose last batch was trained is complete, also when
     * --max-steps stops the run right there. */
    if (!stopped || (at_max && r->batch_in_epoch == r->batches_per_epoch)) {
      r->epoch_seconds[r->epochs_done_here++] = dt;
      curve_add(&r->train_acc_curve, (double)r->steps,
                r->epoch_images > 0 ? r->epoch_correct / r->epoch_images : 0);
      r->epoch++;
      r->batch_in_epoch = 0;
      if (!r->o.eval_every && eval_now(r) < 0)
        return -1;
    }
    if (r->o.checkpoint &&
        (!stopped || r->o.max_steps || interrupted || stop_signal) &&
        save_checkpoint(r) < 0)
      return -1;
  }
  return interrupted || stop_signal ? -1 : 0;
}

static void run_free(run *r) {
  train_dp_free(r->dp);
  tyto_program_free(r->train_p);
  tyto_program_free(r->eval_p);
  tyto_optim_free(r->optim);
  tyto_nn_free(r->nn);
  tyto_graph_free(r->g);
  tyto_context_free(r->ctx);
  tyto_batcher_free(r->train_b);
  tyto_batcher_free(r->test_b);
  tyto_batcher_free(r->valid_b);
  tyto_dataset_free(r->train);
  tyto_dataset_free(r->test);
  mf_free(r->model);
  free(r->state);
  free(r->xbuf);
  free(r->ybuf);
  free(r->epoch_seconds);
  curve_free(&r->loss_curve);
  curve_free(&r->train_acc_curve);
  curve_free(&r->eval_acc_curve);
}

int main(int argc, char **argv) {
  if (take_signals() != 0) {
    fprintf(stderr, PROG ": cannot set up signal handling\n");
    return EXIT_RUNTIME;
  }
  run r;
  memset(&r, 0, sizeof r);
  int prc = options_parse(argc, argv, &r.o);
  if (prc != 0)
    return prc > 0 ? 0 : EXIT_USAGE;
  /* Under mpirun or srun: one rank of several. */
  tyto_status dst = tyto_dist_init(&argc, &argv);
  if (dst != TYTO_OK) {
    fprintf(stderr, PROG ": %s\n", tyto_errmsg());
    /* A bad TYTO_DIST_TIMEOUT is bad input; a failed launch is not. */
    return dst == TYTO_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_RUNTIME;
  }
  int rank = tyto_dist_rank(), ranks = tyto_dist_size();
  if (!isnan(r.o.dist_timeout))
    tyto_dist_set_timeout(r.o.dist_timeout);
  if (rank != 0) {
    r.o.quiet = 1; /* rank 0 speaks for the run */
    r.o.progress = 0;
  }
  int code = EXIT_USAGE;
  char err[2048];
  if (ranks > 1 && r.o.continue_on_failure) {
    fprintf(stderr, PROG ": --on-device-failure continue is not supported over "
                         "several ranks: a failed device stops the run, which "
                         "resumes from its checkpoint\n");
    goto done;
  }
  if (rank == 0 &&
      ((r.o.checkpoint && check_writable("checkpoint", r.o.checkpoint) < 0) ||
       (r.o.plot && check_writable("plot", r.o.plot) < 0)))
    goto done;

  if (r.o.model_file) {
    if (mf_load(r.o.model_file, &r.model, err, sizeof err) < 0) {
      fprintf(stderr, PROG ": %s\n", err);
      goto done;
    }
    r.model_name = r.o.model_file;
  } else {
    char name[64];
    snprintf(name, sizeof name, "(preset %s)", r.o.model);
    if (mf_parse(mf_preset(r.o.model), name, &r.model, err, sizeof err) < 0) {
      fprintf(stderr, PROG ": %s\n", err);
      code = EXIT_RUNTIME;
      goto done;
    }
    r.model_name = r.o.model;
  }
  if (load_data(&r, &code) < 0 || make_batchers(&r) < 0)
    goto done;

  tyto_context_options co;
  tyto_context_options_init(&co);
  if (r.o.devices)
    co.devices = r.o.devices;
  co.devices_from = "--devices";
  if (tyto_context_new(&co, &r.ctx) != TYTO_OK) {
    fprintf(stderr, PROG ": %s\n", tyto_errmsg());
    goto done;
  }
  size_t n_devs = tyto_context_device_count(r.ctx);
  r.device_id = tyto_device_get_info(tyto_context_device(r.ctx, 0))->id;
  /* auto: several devices someone chose (--devices, TYTO_DEVICES, the
   * config) train together; the default selection (everything found)
   * does not, as devices found on one machine may share its cores (PoCL
   * runs on the CPU). */
  int chosen = strcmp(tyto_context_selection_source(r.ctx), "default") != 0;
  int all_devs = n_devs > 1 && (r.o.data_parallel == 1 ||
                                (r.o.data_parallel == -1 && chosen));
  /* Over several ranks every rank trains data-parallel, on its devices
   * as above (its first alone, or all). */
  int use_dp = ranks > 1 || all_devs || r.o.precision != TYTO_F32;
  if (n_devs > 1 && !all_devs)
    say(&r,
        r.o.data_parallel == 0
            ? "%zu devices selected; --data-parallel off: training runs on "
              "the first (%s)\n"
            : "%zu devices found and none chosen: training runs on the first "
              "(%s); choose several with --devices (or TYTO_DEVICES), or give "
              "--data-parallel on, to train on them at once\n",
        n_devs, r.device_id);

  /* Options for a split over several devices, on a run that has none,
   * are mistakes, not silently dropped (the granularity also splits the
   * batch between ranks). */
  const char *split_opt = all_devs                   ? NULL
                          : r.o.calibrate_steps >= 0 ? "--calibrate-steps"
                          : r.o.rebalance_every >= 0 ? "--rebalance-every"
                          : r.o.shard_granularity > 0 && ranks == 1
                              ? "--shard-granularity"
                              : NULL;
  if (split_opt) {
    fprintf(stderr,
            PROG ": %s applies to data-parallel training over several "
                 "devices; this %s trains on %s alone%s\n",
            split_opt, ranks > 1 ? "rank" : "run", r.device_id,
            n_devs > 1 ? " (--data-parallel on trains on every selected "
                         "device)"
                       : "");
    goto done;
  }
  if (build(&r, &code) < 0)
    goto done;
  code = EXIT_RUNTIME;
  if (compile(&r) < 0)
    goto done;
  /* Every rank must train the same run: the model, the data, the
   * options that shape a step. */
  if (ranks > 1 && agree_run(&r) < 0)
    goto done;
  if (r.o.resume) {
    code = EXIT_USAGE;
    if (resume(&r) < 0)
      goto done;
    if (ranks > 1) {
      int64_t at[3] = {r.epoch, r.batch_in_epoch, r.steps};
      if (tyto_dist_agree("the checkpoint's position (each rank reads "
                          "--checkpoint itself: put it where every rank "
                          "sees the same file)",
                          at, sizeof at) != TYTO_OK) {
        fprintf(stderr, PROG ": %s\n", tyto_errmsg());
        goto done;
      }
    }
    say(&r, "resumed from %s at epoch %lld, step %lld\n", r.o.checkpoint,
        (long long)r.epoch + 1, (long long)r.steps);
  }
  code = EXIT_RUNTIME;
  if (use_dp) {
    /* One replica per device, set to the state the training program holds
     * (initial, or resumed whatever devices wrote it). */
    if (r.o.batch < (int64_t)n_devs) {
      fprintf(stderr,
              PROG ": --batch %lld is smaller than the %zu selected devices: "
                   "data-parallel training gives each at least one example "
                   "per step (raise --batch, select fewer devices, or "
                   "--data-parallel off)\n",
              (long long)r.o.batch, n_devs);
      code = EXIT_USAGE;
      goto done;
    }
    double t0 = now();
    train_dp_spec sp = {.ctx = r.ctx,
                        .model = r.model,
                        .seed = r.o.seed,
                        .batch = r.o.batch,
                        .classes = r.classes,
                        .optim = r.oo,
                        .exact_exchange = r.o.exact_exchange,
                        .sync_batch_norm = r.o.sync_batch_norm,
                        .precision = r.o.precision,
                        .loss_scale = r.o.loss_scale,
                        .quiet = r.o.quiet,
                        .first_only = !all_devs,
                        .calibrate_steps = r.o.calibrate_steps,
                        .rebalance_every = r.o.rebalance_every,
                        .granularity = r.o.shard_granularity};
    if (train_dp_new(&sp, &r.dp, err, sizeof err) < 0) {
      fprintf(stderr, PROG ": data-parallel training: %s\n", err);
      goto done;
    }
    int prc2 = train_dp_push(r.dp, r.train_p, r.n_state, r.state);
    if (prc2 < 0) {
      fprintf(stderr, PROG ": data-parallel training: %s\n",
              prc2 == -2 ? "out of memory" : tyto_errmsg());
      goto done;
    }
    r.compile_seconds += now() - t0;
  }
  devices_now(&r);
  r.bar = r.o.progress < 0 ? isatty(STDERR_FILENO) : r.o.progress;
  if (ranks > 1)
    say(&r,
        "training %s on %d ranks (this one on %s, %lld of each batch): %lld "
        "images, %lld batches of %lld per epoch, %s lr %g\n",
        r.model_name, ranks, r.devices_text,
        (long long)train_dp_rank_batch(r.dp), (long long)r.n_train,
        (long long)r.batches_per_epoch, (long long)r.o.batch,
        tyto_optim_kind_name(r.oo.kind), r.oo.lr);
  else
    say(&r,
        "training %s on %s%s: %lld images, %lld batches of %lld per epoch, "
        "%s lr %g\n",
        r.model_name, r.devices_text, r.dp ? " (data-parallel)" : "",
        (long long)r.n_train, (long long)r.batches_per_epoch,
        (long long)r.o.batch, tyto_optim_kind_name(r.oo.kind), r.oo.lr);

  int64_t steps0 = r.steps;
  training = 1;
  int trc = train(&r);
  training = 0;
  if (trc < 0)
    goto done;
  if (evaluate(&r, r.test_b, &r.test_accuracy, &r.test_loss) < 0)
    goto done;
  r.have_test = 1;
  if (rank == 0 && r.o.plot && write_plot(&r) < 0)
    goto done;
  if (rank != 0)
    ; /* rank 0 reports for the run */
  else if (r.o.json)
    report_json(&r, r.steps - steps0);
  else
    report_text(&r, r.steps - steps0);
  code = 0;
done:
  if ((interrupted || stop_signal) && code == EXIT_RUNTIME)
    /* as the shell shows a process it stopped */
    code = 128 + (interrupted ? interrupted : stop_signal);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, PROG ": cannot write the report to stdout: %s\n",
            strerror(errno));
    if (code == 0)
      code = EXIT_RUNTIME;
  }
  /* A rank that fails alone stops the others at once (they would wait
   * for it until their timeout), before anything MPI may still write to
   * is freed; ranks that stopped together on a signal end normally. */
  if (ranks > 1 && code != 0 && !(stop_signal && code == 128 + stop_signal)) {
    fflush(stderr);
    tyto_dist_abort(code);
  }
  run_free(&r);
  if (tyto_dist_finalize() != TYTO_OK) {
    fprintf(stderr, PROG ": %s\n", tyto_errmsg());
    code = code ? code : EXIT_RUNTIME;
  }
  return code;
}
