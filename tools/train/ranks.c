/*
 * tyto-train over several processes (run.h, docs/distributed.md): what
 * every rank must share before the first step, and where the files the
 * run writes may go.
 */
#define _POSIX_C_SOURCE 200809L

#include "run.h"
#include "runtime/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A file the run will write (--checkpoint, --plot) is checked before the
 * first step, so that a bad path is not found only after training: the
 * writer's own temporary (runtime/file.h) is created and removed, which
 * refuses an empty path, a path that is not a regular file once its links
 * are followed, and a directory where no file can be created. */
int check_writable(const char *flag, const char *path) {
  rt_replace r;
  const char *why = NULL;
  int rc = rt_replace_open(&r, path, &why);
  if (rc == 0) {
    rt_replace_abort(&r);
    return 0;
  }
  if (!*path)
    fprintf(stderr, PROG ": --%s: %s; give the path of a file\n", flag, why);
  else if (rc == -2)
    fprintf(stderr, PROG ": --%s: %s %s; give the path of a file\n", flag, path,
            why);
  else
    fprintf(stderr,
            PROG ": --%s: cannot write %s: cannot create a file beside it: "
                 "%s\n",
            flag, path, why);
  return -1;
}

/* Every rank must train the same run: each setting that shapes a step,
 * compared across the ranks by name, so that the error names it. */
int agree_run(const run *r) {
  char v[16][256];
  const char *what[16];
  const void *data[16];
  size_t bytes[16], n = 0;
#define SETTING(name, ...)                                                     \
  do {                                                                         \
    snprintf(v[n], sizeof v[n], __VA_ARGS__);                                  \
    what[n] = name;                                                            \
    data[n] = v[n];                                                            \
    bytes[n] = strlen(v[n]);                                                   \
    n++;                                                                       \
  } while (0)
  SETTING("--batch", "%lld", (long long)r->o.batch);
  SETTING("--seed", "%llu", (unsigned long long)r->o.seed);
  SETTING("--epochs", "%lld", (long long)r->o.epochs);
  SETTING("--max-steps", "%lld", (long long)r->o.max_steps);
  SETTING("training image count (--data, --limit, --validation)", "%lld",
          (long long)r->n_train);
  const tyto_optim_options *o = &r->oo;
  SETTING("optimiser (--optimizer, --lr and their options)",
          "%s %.17g %.17g %.17g %d %.17g %.17g %.17g %.17g",
          tyto_optim_kind_name(o->kind), o->lr, o->weight_decay, o->momentum,
          o->nesterov, o->beta1, o->beta2, o->alpha, o->eps);
  SETTING("schedule and clipping (--schedule, --clip-*, --accumulate)",
          "%d %lld %.17g %lld %.17g %lld %.17g %.17g %lld", (int)o->schedule,
          (long long)o->step_size, o->gamma, (long long)o->total_steps,
          o->min_lr, (long long)o->warmup_steps, o->clip_value, o->clip_norm,
          (long long)o->accumulate);
  SETTING("--checkpoint-every", "%lld", (long long)r->o.checkpoint_every);
  SETTING("--eval-every", "%lld", (long long)r->o.eval_every);
  SETTING("--resume", "%d", r->o.resume);
  SETTING("--exact-exchange", "%d", r->o.exact_exchange);
  SETTING("--sync-batch-norm", "%d", r->o.sync_batch_norm);
  SETTING("--precision and --loss-scale", "%s %.17g",
          tyto_dtype_name(r->o.precision), r->o.loss_scale);
#undef SETTING
  const char *model = mf_canonical(r->model);
  what[n] = "model (--model, --model-file)";
  data[n] = model;
  bytes[n++] = strlen(model);
  for (size_t i = 0; i < n; i++)
    if (tyto_dist_agree(what[i], data[i], bytes[i]) != TYTO_OK) {
      fprintf(stderr, PROG ": %s\n", tyto_errmsg());
      return -1;
    }
  return 0;
}
