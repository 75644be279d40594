/*
 * Linear algebra on the CPU: not written yet. Until they land the
 * device says so for each such op, and the host places it elsewhere.
 */
#include "config.h"

#include "ops.h"

tyto_plugin_error *cpu_linalg_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out) {
  (void)out;
  return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                      "%s is not yet supported by the cpu device",
                      cpu_op_name(desc->d->op));
}
