/*
 * tyto-train's checkpoints (run.h): one safetensors file holding the
 * training program's state by name and the run's position, written
 * atomically; a resume checks that the file belongs to this run (model,
 * seed, batch, data) before it restores anything.
 */
#define _POSIX_C_SOURCE 200809L

#include "run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Checkpoints                                                             */

static int write_checkpoint(run *r);

/* Every rank holds the same state: rank 0 writes it, and over several
 * ranks the others wait for it here, with a longer timeout than a step's
 * (a checkpoint on a network file system can take minutes), so that the
 * write does not count against the next step's exchange. */
int save_checkpoint(run *r) {
  int rc = tyto_dist_rank() == 0 ? write_checkpoint(r) : 0;
  if (tyto_dist_size() > 1) {
    double t = tyto_dist_timeout();
    tyto_dist_set_timeout(t * 10 > 600 ? t * 10 : 600);
    tyto_status st = tyto_dist_barrier();
    tyto_dist_set_timeout(t);
    if (st != TYTO_OK) {
      fprintf(stderr, PROG ": waiting for rank 0's checkpoint: %s\n",
              tyto_errmsg());
      rc = -1;
    }
  }
  return rc;
}

static int write_checkpoint(run *r) {
  tyto_checkpoint *ck = NULL;
  char v[64];
  if (dp_pull(r) < 0)
    return -1;
  tyto_status s = tyto_checkpoint_new(&ck);
  if (s == TYTO_OK)
    s = tyto_checkpoint_add_parameters(ck, r->train_p, r->n_state, r->state);
  struct {
    const char *k;
    int64_t v;
  } ints[] = {{"tyto.seed", (int64_t)r->o.seed},
              {"tyto.batch", r->o.batch},
              {"tyto.classes", r->classes},
              {"tyto.train_images", r->n_train},
              {"tyto.epoch", r->epoch},
              {"tyto.batch_in_epoch", r->batch_in_epoch},
              {"tyto.steps", r->steps}};
  if (s == TYTO_OK)
    s = tyto_checkpoint_set_meta(ck, "tyto.format", CHECKPOINT_FORMAT);
  if (s == TYTO_OK)
    s = tyto_checkpoint_set_meta(ck, "tyto.model", mf_canonical(r->model));
  if (s == TYTO_OK)
    s = tyto_checkpoint_set_meta(ck, "tyto.optimizer",
                                 tyto_optim_kind_name(r->oo.kind));
  for (size_t i = 0; s == TYTO_OK && i < sizeof ints / sizeof ints[0]; i++) {
    snprintf(v, sizeof v, "%lld", (long long)ints[i].v);
    s = tyto_checkpoint_set_meta(ck, ints[i].k, v);
  }
  if (s == TYTO_OK)
    s = tyto_checkpoint_save(ck, r->o.checkpoint);
  tyto_checkpoint_free(ck);
  if (s != TYTO_OK) {
    fprintf(stderr, PROG ": checkpoint %s: %s\n", r->o.checkpoint,
            tyto_errmsg());
    return -1;
  }
  return 0;
}

static int meta_int(const tyto_checkpoint *ck, const char *key, int64_t *v) {
  const char *s = tyto_checkpoint_get_meta(ck, key);
  char *end;
  if (!s)
    return -1;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (!*s || *end || errno)
    return -1;
  *v = x;
  return 0;
}

/* The first tensor of ck holding a NaN or an infinity: 0, or -1 after a
 * message naming it. A damaged file or a diverged run would otherwise
 * resume and end in "training diverged". */
static int check_finite(const tyto_checkpoint *ck, const char *path) {
  for (size_t i = 0; i < tyto_checkpoint_count(ck); i++) {
    const char *name = tyto_checkpoint_name(ck, i);
    tyto_checkpoint_dtype dt;
    const void *data;
    size_t bytes;
    if (tyto_checkpoint_find(ck, name, &dt, NULL, NULL, &data, &bytes) !=
            TYTO_OK ||
        (dt != TYTO_CHECKPOINT_F32 && dt != TYTO_CHECKPOINT_F64))
      continue;
    size_t n = bytes / (dt == TYTO_CHECKPOINT_F32 ? 4 : 8);
    for (size_t k = 0; k < n; k++) {
      double v = dt == TYTO_CHECKPOINT_F32 ? ((const float *)data)[k]
                                           : ((const double *)data)[k];
      if (!isfinite(v)) {
        fprintf(stderr,
                PROG ": --resume: %s: tensor '%s' holds %s at element %zu; "
                     "the checkpoint is damaged or its run had diverged\n",
                path, name,
                isnan(v) ? "NaN"
                : v > 0  ? "+inf"
                         : "-inf",
                k);
        return -1;
      }
    }
  }
  return 0;
}

/* Restores the run from --checkpoint; nothing is written to any file. */
int resume(run *r) {
  const char *path = r->o.checkpoint;
  tyto_checkpoint *ck = NULL;
  if (tyto_checkpoint_load(path, &ck) != TYTO_OK) {
    fprintf(stderr, PROG ": --resume: %s\n", tyto_errmsg());
    return -1;
  }
  int rc = -1;
  const char *fmt = tyto_checkpoint_get_meta(ck, "tyto.format");
  const char *model = tyto_checkpoint_get_meta(ck, "tyto.model");
  int64_t seed, batch, classes, train_images, epoch, bie, steps;
  if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT) != 0 || !model ||
      meta_int(ck, "tyto.seed", &seed) || meta_int(ck, "tyto.batch", &batch) ||
      meta_int(ck, "tyto.classes", &classes) ||
      meta_int(ck, "tyto.train_images", &train_images) ||
      meta_int(ck, "tyto.epoch", &epoch) ||
      meta_int(ck, "tyto.batch_in_epoch", &bie) ||
      meta_int(ck, "tyto.steps", &steps)) {
    fprintf(stderr,
            PROG ": --resume: %s is not a " PROG " checkpoint (its metadata "
                 "lacks tyto.format \"" CHECKPOINT_FORMAT "\" or the run's "
                 "position)\n",
            path);
    goto out;
  }
  /* Another optimiser keeps other state (or reads the same state another
   * way): say so, rather than list the state tensors that differ. */
  const char *opt = tyto_checkpoint_get_meta(ck, "tyto.optimizer"),
             *opt_here = tyto_optim_kind_name(r->oo.kind);
  int differ = opt && strcmp(opt, opt_here) != 0;
  if (differ)
    fprintf(stderr,
            PROG ": --resume: --optimizer was %.40s in the checkpoint's run "
                 "and is %s in this one; resume with --optimizer %.40s (the "
                 "checkpoint holds its state)\n",
            opt, opt_here, opt);
  /* The parameters first: their names and shapes tell the most. */
  tyto_checkpoint_spec *specs = calloc(r->n_state, sizeof *specs);
  if (!specs) {
    fprintf(stderr, PROG ": out of memory\n");
    goto out;
  }
  for (size_t i = 0; i < r->n_state; i++) {
    specs[i].name = tyto_tensor_name(r->state[i]);
    specs[i].dtype = (tyto_checkpoint_dtype)tyto_checkpoint_dtype_of(
        tyto_tensor_dtype(r->state[i]));
    specs[i].rank = tyto_tensor_rank(r->state[i]);
    specs[i].shape = tyto_tensor_shape(r->state[i]);
  }
  tyto_status s =
      differ ? TYTO_OK : tyto_checkpoint_expect(ck, r->n_state, specs, 0);
  free(specs);
  if (s != TYTO_OK) {
    fprintf(stderr, PROG ": --resume: %s\n", tyto_errmsg());
    if (strcmp(model, mf_canonical(r->model)) != 0)
      fprintf(stderr, PROG ": --resume: the checkpoint's model is:\n%s", model);
    differ = 1;
  } else if (strcmp(model, mf_canonical(r->model)) != 0) {
    fprintf(stderr,
            PROG ": --resume: %s holds another model; it was trained with:\n"
                 "%sand this run builds:\n%s",
            path, model, mf_canonical(r->model));
    differ = 1;
  }
  struct {
    const char *what;
    int64_t file, here;
  } same[] = {
      {"--seed", seed, (int64_t)r->o.seed},
      {"--batch", batch, r->o.batch},
      {"classes", classes, r->classes},
      {"training images (--limit, --validation)", train_images, r->n_train}};
  /* Every difference, not the first alone (docs/training.md). */
  for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
    if (same[i].file != same[i].here) {
      fprintf(stderr,
              PROG ": --resume: %s was %lld in the checkpoint's run and is "
                   "%lld in this one; resume with the same value\n",
              same[i].what, (long long)same[i].file, (long long)same[i].here);
      differ = 1;
    }
  if (differ)
    goto out;
  /* Every step is one batch, so the position must add up: this also keeps
   * a forged counter (INT64_MAX) from wrapping round when the run goes on. */
  int64_t bpe = r->batches_per_epoch;
  if (epoch < 0 || epoch >= MAX_EPOCHS || bie < 0 || bie > bpe ||
      steps != epoch * bpe + bie) {
    fprintf(stderr,
            PROG ": --resume: %s: position epoch %lld, batch %lld, step %lld "
                 "is not possible here (expected epoch in [0, %lld), batch in "
                 "[0, %lld] and step = epoch x %lld + batch)\n",
            path, (long long)epoch, (long long)bie, (long long)steps,
            (long long)MAX_EPOCHS, (long long)bpe, (long long)bpe);
    goto out;
  }
  if (check_finite(ck, path) < 0)
    goto out;
  const void *cp;
  tyto_checkpoint_dtype cdt;
  size_t cbytes;
  if (tyto_checkpoint_find(ck, "optim.step", &cdt, NULL, NULL, &cp, &cbytes) ==
          TYTO_OK &&
      (cdt == TYTO_CHECKPOINT_F32 || cdt == TYTO_CHECKPOINT_F64) &&
      cbytes == (cdt == TYTO_CHECKPOINT_F32 ? 4u : 8u)) {
    double k =
        cdt == TYTO_CHECKPOINT_F32 ? *(const float *)cp : *(const double *)cp;
    if (!(k >= 0 && k <= (double)steps && k == floor(k))) {
      fprintf(stderr,
              PROG ": --resume: %s: the optimiser's step counter optim.step "
                   "is %g, expected a whole number in [0, %lld] (the run's "
                   "steps)\n",
              path, k, (long long)steps);
      goto out;
    }
  }
  if (tyto_checkpoint_restore_parameters(ck, r->train_p, r->n_state,
                                         r->state) != TYTO_OK) {
    fprintf(stderr, PROG ": --resume: %s\n", tyto_errmsg());
    goto out;
  }
  if (bie == r->batches_per_epoch) {
    epoch++;
    bie = 0;
  }
  r->epoch = epoch;
  r->batch_in_epoch = bie;
  r->steps = steps;
  rc = 0;
out:
  tyto_checkpoint_free(ck);
  return rc;
}
