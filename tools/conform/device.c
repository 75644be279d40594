/*
 * Devices and case runs of tyto-conform (see device.h).
 */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/graph.h>

#include "fmt.h"
#include "sentinel.h"

size_t cf_dtype_size(uint32_t dtype) {
  /* The graph's dtypes carry the ABI's numbers (checked in core's
   * graph/dtype.c), so the core's table answers for both. */
  return dtype < 32 ? tyto_dtype_size((tyto_dtype)dtype) : 0;
}

int cf_device_open(cf_device *d, cf_plugin *p, uint32_t i, char *err,
                   size_t size) {
  tyto_plugin_error *e;
  char msg[1024];
  memset(d, 0, sizeof *d);
  d->p = p;
  d->fns = &p->dfns;
  snprintf(d->id, sizeof d->id, "%s:%u", p->info->name, p->ordinals[i]);
  d->info.struct_size = sizeof d->info;
  e = p->fns.device_query(p->state, p->ordinals[i], &d->info);
  if (e == NULL)
    e = p->fns.device_open(p->state, p->ordinals[i], &d->dev);
  if (e != NULL) {
    cf_error_take(e, msg, sizeof msg);
    snprintf(err, size, "%.160s: cannot open: %.900s", d->id, msg);
    d->dev = NULL;
    return -1;
  }
  e = d->fns->stream_create(d->dev, &d->stream);
  if (e != NULL) {
    cf_error_take(e, msg, sizeof msg);
    snprintf(err, size, "%.160s: stream_create failed: %.900s", d->id, msg);
    d->fns->device_close(d->dev);
    d->dev = NULL;
    return -1;
  }
  if (d->info.name == NULL)
    d->info.name = "";
  return 0;
}

void cf_device_close(cf_device *d) {
  if (d->stream)
    d->fns->stream_destroy(d->dev, d->stream);
  if (d->dev)
    d->fns->device_close(d->dev);
  d->stream = NULL;
  d->dev = NULL;
}

int cf_device_has_dtype(const cf_device *d, uint32_t dtype) {
  return (d->info.dtypes & TYTO_PLUGIN_DTYPE_BIT(dtype)) != 0;
}

void cf_run_clear(cf_run *r) {
  for (int i = 0; i < CF_MAX_OUT; i++) {
    free(r->out[i]);
    free(r->ints[i]);
    r->out[i] = NULL;
    r->ints[i] = NULL;
  }
}

/* Records a failure of `what`, taking e. */
static cf_status fail(cf_run *r, const char *what, tyto_plugin_error *e) {
  char msg[1024];
  tyto_plugin_code code = cf_error_take(e, msg, sizeof msg);
  if (code == TYTO_PLUGIN_ERR_UNSUPPORTED &&
      (strcmp(what, "supports_op") == 0 || strcmp(what, "prepare") == 0)) {
    memcpy(r->msg, msg, sizeof r->msg);
    return r->status = CF_UNSUPPORTED;
  }
  snprintf(r->msg, sizeof r->msg, "%.40s: %.900s", what, msg);
  return r->status = CF_FAILED;
}

cf_status cf_prepare_agreed(cf_device *d, const tyto_plugin_op_desc *desc,
                            tyto_plugin_kernel **k, tyto_plugin_kernel_info *ki,
                            cf_run *r) {
  tyto_plugin_error *se = NULL, *pe;
  char smsg[1024];
  *k = NULL;
  if (d->fns->supports_op)
    se = d->fns->supports_op(d->dev, desc);
  if (se != NULL && se->code != TYTO_PLUGIN_ERR_UNSUPPORTED)
    return fail(r, "supports_op", se);
  pe = d->fns->prepare(d->dev, desc, k, ki);
  if (pe != NULL && pe->code != TYTO_PLUGIN_ERR_UNSUPPORTED) {
    cf_error_free(se);
    return fail(r, "prepare", pe);
  }
  /* supports_op must say yes exactly when prepare succeeds: the host
   * places nodes by it and prepares only what it accepted. */
  if (d->fns->supports_op && (se == NULL) != (pe == NULL)) {
    cf_error_take(se ? se : pe, smsg, sizeof smsg);
    snprintf(r->msg, sizeof r->msg,
             se ? "supports_op refused it (%.400s) but prepare accepted it: "
                  "supports_op must accept exactly what prepare accepts"
                : "supports_op accepted it but prepare refused it with "
                  "UNSUPPORTED (%.400s): supports_op must accept exactly "
                  "what prepare accepts",
             smsg);
    if (*k && d->fns->kernel_release)
      d->fns->kernel_release(d->dev, *k);
    *k = NULL;
    return r->status = CF_FAILED;
  }
  cf_error_free(se);
  if (pe != NULL)
    return fail(r, "prepare", pe);
  return r->status = CF_RAN;
}

static void to_double(uint32_t dtype, const unsigned char *src, int64_t n,
                      double *dst) {
  for (int64_t i = 0; i < n; i++)
    dst[i] = cf_fmt_load(dtype, src, i);
}

/* Checks the sentinels of g (and, for an input, that its body is as
 * uploaded); records the first finding in r. */
static void check_buf(cf_run *r, const cf_case *c, const cf_gbuf *g,
                      const char *what, uint32_t index, const void *orig) {
  int side;
  uint64_t off;
  if (r->oob)
    return;
  if (cf_gbuf_check(g, &side, &off)) {
    r->oob = 1;
    if (side < 0)
      snprintf(r->oob_msg, sizeof r->oob_msg,
               "%s: %s %u written before its first byte (%llu bytes before)",
               c->op_name, what, index, (unsigned long long)(g->guard - off));
    else
      snprintf(r->oob_msg, sizeof r->oob_msg,
               "%s: %s %u written past its end (first bad byte %llu bytes "
               "after the last, 0 = adjacent)",
               c->op_name, what, index, (unsigned long long)off);
    return;
  }
  if (orig && g->body && memcmp(cf_gbuf_body(g), orig, g->body) != 0) {
    uint64_t i = 0;
    while (cf_gbuf_body(g)[i] == ((const unsigned char *)orig)[i])
      i++;
    r->oob = 1;
    snprintf(r->oob_msg, sizeof r->oob_msg,
             "%s: %s %u modified (first changed byte at offset %llu)",
             c->op_name, what, index, (unsigned long long)i);
  }
}

cf_status cf_run_case(cf_device *d, cf_case *c, const void *const *in_bytes,
                      const void *const *out_init, cf_run *r) {
  tyto_plugin_op_desc desc;
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki;
  cf_gbuf in[CF_MAX_IN], out[CF_MAX_OUT], ws;
  tyto_plugin_binding bin[CF_MAX_IN], bout[CF_MAX_OUT], bws;
  tyto_plugin_error *e = NULL;
  uint32_t n_in = 0, n_out = 0;
  int have_ws = 0;

  memset(r, 0, sizeof *r);
  memset(&ws, 0, sizeof ws);
  cf_case_desc(c, &desc);
  if (d->fns->prepare == NULL) {
    snprintf(r->msg, sizeof r->msg, "memory-only device (no prepare)");
    return r->status = CF_UNSUPPORTED;
  }
  memset(&ki, 0, sizeof ki);
  ki.struct_size = sizeof ki;
  if (cf_prepare_agreed(d, &desc, &k, &ki, r) != CF_RAN)
    return r->status;

  for (; n_in < c->n_in && e == NULL; n_in++) {
    e = cf_gbuf_alloc(d, &in[n_in],
                      (uint64_t)c->in[n_in].storage *
                          cf_dtype_size(c->in[n_in].l.dtype),
                      in_bytes[n_in]);
    bin[n_in] =
        (tyto_plugin_binding){sizeof bin[0], in[n_in].buf, in[n_in].guard};
  }
  for (; n_out < c->n_out && e == NULL; n_out++) {
    e = cf_gbuf_alloc(d, &out[n_out],
                      (uint64_t)c->out[n_out].storage *
                          cf_dtype_size(c->out[n_out].l.dtype),
                      out_init[n_out]);
    bout[n_out] =
        (tyto_plugin_binding){sizeof bout[0], out[n_out].buf, out[n_out].guard};
  }
  if (e == NULL && ki.workspace_bytes) {
    have_ws = 1;
    e = cf_gbuf_alloc(d, &ws, ki.workspace_bytes, NULL);
    bws = (tyto_plugin_binding){sizeof bws, ws.buf, ws.guard};
  }
  if (e != NULL) {
    fail(r, "buffer_alloc/copy_h2d", e);
    goto done;
  }
  e = d->fns->launch(d->dev, d->stream, k, bin, c->n_in, bout, c->n_out,
                     have_ws ? &bws : NULL);
  if (e == NULL)
    e = d->fns->stream_synchronize(d->dev, d->stream);
  if (e != NULL) {
    fail(r, "launch", e);
    goto done;
  }
  for (uint32_t i = 0; i < n_in && e == NULL; i++)
    if ((e = cf_gbuf_read(d, &in[i])) == NULL)
      check_buf(r, c, &in[i], "input", i, in_bytes[i]);
  for (uint32_t i = 0; i < n_out && e == NULL; i++)
    if ((e = cf_gbuf_read(d, &out[i])) == NULL)
      check_buf(r, c, &out[i], "output", i, NULL);
  if (e == NULL && have_ws && (e = cf_gbuf_read(d, &ws)) == NULL)
    check_buf(r, c, &ws, "workspace", 0, NULL);
  if (e != NULL) {
    fail(r, "copy_d2h", e);
    goto done;
  }
  for (uint32_t i = 0; i < c->n_out; i++) {
    int64_t n = c->out[i].storage;
    r->out[i] = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (r->out[i] == NULL) {
      fail(r, "host", cf_error(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory"));
      cf_run_clear(r);
      goto done;
    }
    to_double(c->out[i].l.dtype, cf_gbuf_body(&out[i]), n, r->out[i]);
    if (!cf_fmt_int(c->out[i].l.dtype))
      continue;
    r->ints[i] = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (r->ints[i] == NULL) {
      fail(r, "host", cf_error(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory"));
      cf_run_clear(r);
      goto done;
    }
    for (int64_t j = 0; j < n; j++)
      r->ints[i][j] = cf_fmt_wrap(
          c->out[i].l.dtype,
          cf_fmt_load_bits(c->out[i].l.dtype, cf_gbuf_body(&out[i]), j));
  }
  r->status = CF_RAN;
done:
  for (uint32_t i = 0; i < n_in; i++)
    cf_gbuf_free(d, &in[i]);
  for (uint32_t i = 0; i < n_out; i++)
    cf_gbuf_free(d, &out[i]);
  if (have_ws)
    cf_gbuf_free(d, &ws);
  if (k && d->fns->kernel_release)
    d->fns->kernel_release(d->dev, k);
  return r->status;
}
