/*
 * An open device of a loaded plugin, and running one catalogue case on it
 * with every buffer fenced by sentinels (see sentinel.h).
 */
#ifndef TYTO_CONFORM_DEVICE_H
#define TYTO_CONFORM_DEVICE_H

#include "catalogue.h"
#include "host.h"

typedef struct cf_device {
  cf_plugin *p;
  const tyto_plugin_device_fns *fns;
  tyto_plugin_device *dev;
  tyto_plugin_stream *stream;
  tyto_plugin_device_info info;
  char id[160]; /* "cpu:0" */
} cf_device;

/* Opens claimed device number i of p and a stream on it. On failure returns
 * -1 with the plugin's message in err; nothing stays open. */
int cf_device_open(cf_device *d, cf_plugin *p, uint32_t i, char *err,
                   size_t size);

/* Destroys the stream and closes the device. */
void cf_device_close(cf_device *d);

/* Whether the device lists dtype in its info. */
int cf_device_has_dtype(const cf_device *d, uint32_t dtype);

typedef enum cf_status {
  CF_RAN = 0,         /* ran; outputs are in out[] */
  CF_UNSUPPORTED = 1, /* supports_op/prepare said UNSUPPORTED */
  CF_FAILED = 2       /* any other error: msg says which call */
} cf_status;

/* What running a case gave. */
typedef struct cf_run {
  cf_status status;
  char msg[1024];
  double *out[CF_MAX_OUT]; /* each output's whole storage, as doubles */
  /* An integer output's storage as it is (an i64 beyond 2^53 has no
   * double): compared exactly. NULL for a floating output. */
  int64_t *ints[CF_MAX_OUT];
  int oob;           /* sentinels hit or an input modified */
  char oob_msg[512]; /* the first such finding */
} cf_run;

/* Runs c on d: inputs are in_bytes[i] (c->in[i].storage elements of the
 * dtype), outputs start as out_init[i]. r->out[] are malloc'ed: release
 * with cf_run_clear(). Returns r->status. */
cf_status cf_run_case(cf_device *d, cf_case *c, const void *const *in_bytes,
                      const void *const *out_init, cf_run *r);
void cf_run_clear(cf_run *r);

/* Asks supports_op (when the device has it) and prepare about desc, which
 * must agree: CF_RAN with *k prepared (release it), CF_UNSUPPORTED when
 * both refuse it with UNSUPPORTED, CF_FAILED (r->msg says why) on any
 * other error or when they disagree. d must have prepare. */
cf_status cf_prepare_agreed(cf_device *d, const tyto_plugin_op_desc *desc,
                            tyto_plugin_kernel **k, tyto_plugin_kernel_info *ki,
                            cf_run *r);

/* Size in bytes of one element of ABI dtype `dtype`, from the core's dtype
 * table (0 for a dtype the graph does not have). */
size_t cf_dtype_size(uint32_t dtype);

#endif
