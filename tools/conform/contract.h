/*
 * The device contract of <tyto/plugin.h> beyond single kernels, checked
 * with the plugin's own streams, events, copies and kernels: streams run
 * their work in order; an event recorded on one stream orders work on
 * another; event_synchronize and event_query see the captured work done; a
 * queued copy has read the host's memory once its stream has passed it,
 * and a copy with no stream is complete on return; a released kernel's
 * queued launches still run; stream_destroy waits for the stream's work;
 * streams driven from several threads at once each get their own results.
 * The work the kit queues first is long (several copies of 4 MiB), so that
 * a device that breaks an ordering is caught in the act.
 */
#ifndef TYTO_CONFORM_CONTRACT_H
#define TYTO_CONFORM_CONTRACT_H

#include "device.h"

/* One finding: the check's name, its status (CF_RAN: passed;
 * CF_UNSUPPORTED: the device lacks what the check needs, e.g. a COPY
 * kernel; CF_FAILED) and, unless it passed, a message. */
typedef void (*cf_contract_row)(void *ctx, const char *check, cf_status st,
                                const char *msg);

/* Runs every check on d, reporting each through row(ctx, ...). A check
 * that does not finish within a minute (a stream or event that waits
 * forever) ends the process with a message and exit status 1. */
void cf_contract_run(cf_device *d, cf_contract_row row, void *ctx);

#endif
