/* Checkpoints against models (see <tyto/checkpoint.h>): what a checkpoint
 * must hold for a model, and a compiled program's parameters saved into one
 * and restored from one. */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/checkpoint.h>
#include <tyto/program.h>

#include "../runtime/error.h"
#include "checkpoint.h"

/* ---------------------------------------------------------------------- */
/* Checking against a model                                                */

static int same_type(const entry *e, const tyto_checkpoint_spec *sp) {
  if (e->dtype != sp->dtype || e->rank != sp->rank)
    return 0;
  for (int i = 0; i < sp->rank; i++)
    if (e->shape[i] != sp->shape[i])
      return 0;
  return 1;
}

/* Checks every spec and indexes them by name (into *ix, freed by the
 * caller), so that matching a checkpoint against a model stays linear in
 * the number of tensors. */
static tyto_status check_specs(const char *fn, size_t n,
                               const tyto_checkpoint_spec *specs, nameidx *ix) {
  for (size_t i = 0; i < n; i++) {
    const tyto_checkpoint_spec *sp = &specs[i];
    const char *nm = sp->name ? sp->name : "";
    if (!sp->name)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: spec %zu has a NULL name; expected a tensor name", fn,
                     i);
    if (!ck_dtype_ok(sp->dtype))
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: spec %zu ('%s') has unknown dtype %d; expected a "
                     "tyto_checkpoint_dtype (TYTO_CHECKPOINT_F32 ..)",
                     fn, i, nm, (int)sp->dtype);
    if (sp->rank < 0 || sp->rank > TYTO_MAX_RANK)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: spec %zu ('%s') has rank %d; expected 0..%d", fn, i,
                     nm, sp->rank, TYTO_MAX_RANK);
    if (sp->rank && !sp->shape)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: spec %zu ('%s') has rank %d but a NULL shape", fn, i,
                     nm, sp->rank);
    for (int k = 0; k < sp->rank; k++)
      if (sp->shape[k] < 0)
        return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                       "%s: spec %zu ('%s') has extent %" PRId64
                       " on axis %d; expected a non-negative extent",
                       fn, i, nm, sp->shape[k], k);
    size_t j;
    if (nameidx_get(ix, sp->name, &j))
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: '%s' is expected twice (specs %zu and %zu)", fn,
                     sp->name, j, i);
    if (nameidx_put(ix, sp->name, i) < 0)
      return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  return TYTO_OK;
}

tyto_status tyto_checkpoint_expect(const tyto_checkpoint *ck, size_t n,
                                   const tyto_checkpoint_spec *specs,
                                   unsigned flags) {
  const char *fn = "tyto_checkpoint_expect";
  if (!ck || (n && !specs))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   !ck ? "ck" : "specs");
  nameidx ix = {0};
  tyto_status st = check_specs(fn, n, specs, &ix);
  if (st != TYTO_OK) {
    nameidx_free(&ix);
    return st;
  }
  strbuf b = {0};
  int diffs = 0;
  ck_printf(&b, "checkpoint '%s' does not match this model: ", ck_source(ck));
  for (size_t i = 0; i < n; i++)
    if (!ck_find(ck, specs[i].name)) {
      ck_printf(&b, "%smissing '%s' ", diffs++ ? "; " : "", specs[i].name);
      ck_type(&b, specs[i].dtype, specs[i].rank, specs[i].shape);
    }
  for (size_t i = 0; i < ck->n && !(flags & TYTO_CHECKPOINT_ALLOW_EXTRA); i++) {
    const entry *e = &ck->e[i];
    size_t j;
    if (!nameidx_get(&ix, e->name, &j)) {
      ck_printf(&b, "%sunexpected '%s' ", diffs++ ? "; " : "", e->name);
      ck_type(&b, e->dtype, e->rank, e->shape);
    }
  }
  for (size_t i = 0; i < n; i++) {
    const entry *e = ck_find(ck, specs[i].name);
    if (e && !same_type(e, &specs[i])) {
      ck_printf(&b, "%s'%s' is ", diffs++ ? "; " : "", e->name);
      ck_type(&b, e->dtype, e->rank, e->shape);
      ck_printf(&b, " in the file, ");
      ck_type(&b, specs[i].dtype, specs[i].rank, specs[i].shape);
      ck_printf(&b, " here");
    }
  }
  if (b.oom)
    st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  else if (diffs)
    st = rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s", b.s);
  free(b.s);
  nameidx_free(&ix);
  return st;
}

/* ---------------------------------------------------------------------- */
/* Parameters of a compiled program                                        */

static tyto_status param_spec(const char *fn, tyto_tensor *t, size_t i,
                              tyto_checkpoint_spec *sp) {
  if (!t || tyto_tensor_kind(t) != TYTO_KIND_PARAMETER)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: params[%zu] (#%" PRId64 ") is not a parameter", fn, i,
                   t ? tyto_tensor_index(t) : -1);
  const char *name = tyto_tensor_name(t);
  if (!name || !*name)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: parameter #%" PRId64 " has no name; name it with "
                   "tyto_tensor_set_name() to keep it in a checkpoint",
                   fn, tyto_tensor_index(t));
  /* Every graph dtype has a checkpoint dtype (safetensors.c). */
  sp->name = name;
  sp->dtype =
      (tyto_checkpoint_dtype)tyto_checkpoint_dtype_of(tyto_tensor_dtype(t));
  sp->rank = tyto_tensor_rank(t);
  sp->shape = tyto_tensor_shape(t);
  return TYTO_OK;
}

tyto_status tyto_checkpoint_add_parameters(tyto_checkpoint *ck, tyto_program *p,
                                           size_t n,
                                           tyto_tensor *const *params) {
  const char *fn = "tyto_checkpoint_add_parameters";
  if (!ck || !p || (n && !params))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   !ck  ? "ck"
                   : !p ? "the program"
                        : "params");
  for (size_t i = 0; i < n; i++) {
    tyto_checkpoint_spec sp;
    tyto_status st = param_spec(fn, params[i], i, &sp);
    if (st != TYTO_OK)
      return st;
    size_t bytes =
        (size_t)tyto_tensor_numel(params[i]) * ck_dtype_size(sp.dtype);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf)
      return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    st = tyto_program_read_parameter(p, params[i], buf, bytes);
    if (st == TYTO_OK)
      st = tyto_checkpoint_add(ck, sp.name, sp.dtype, sp.rank, sp.shape, buf);
    free(buf);
    if (st != TYTO_OK)
      return st;
  }
  return TYTO_OK;
}

tyto_status tyto_checkpoint_restore_parameters(const tyto_checkpoint *ck,
                                               tyto_program *p, size_t n,
                                               tyto_tensor *const *params) {
  const char *fn = "tyto_checkpoint_restore_parameters";
  if (!ck || !p || (n && !params))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   !ck  ? "ck"
                   : !p ? "the program"
                        : "params");
  tyto_checkpoint_spec *specs = calloc(n ? n : 1, sizeof *specs);
  if (!specs)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  tyto_status st = TYTO_OK;
  for (size_t i = 0; i < n && st == TYTO_OK; i++)
    st = param_spec(fn, params[i], i, &specs[i]);
  if (st == TYTO_OK)
    st = tyto_checkpoint_expect(ck, n, specs, TYTO_CHECKPOINT_ALLOW_EXTRA);
  for (size_t i = 0; i < n && st == TYTO_OK; i++) {
    const entry *e = ck_find(ck, specs[i].name);
    st = tyto_program_write_parameter(p, params[i], e->data, e->bytes);
  }
  free(specs);
  return st;
}
