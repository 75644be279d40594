/* Streamed sends (sends.c): phase 0 hands each send to the caller as soon
 * as it is computed (tyto_program_stream_sends). */
#ifndef TYTO_EXEC_SENDS_H
#define TYTO_EXEC_SENDS_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

struct tyto_program;

/* One streamed send: where its copy lands and the event behind it. */
typedef struct exec_sent {
  size_t send;  /* its index among the program's sends */
  size_t stage; /* the phase that computes it */
  size_t ready; /* launches [0, ready) of p->launch compute it (sends.c) */
  size_t bytes;
  void *host; /* bytes of host memory, pinned when the plugin offers it */
  int pinned;
  int mapped; /* host is the send's own memory on a unified-memory device:
                 no copy (the slot is the send's alone until the next run) */
  tyto_plugin_event *ev; /* on the send's device: its copy landed */
} exec_sent;

/* The streamed sends (p->streamed), their memory and events, freed. */
void exec_sends_free(struct tyto_program *p);
/* Before the first launch of phase `stage` (which streams that stage's
 * sends). */
void exec_sends_begin(struct tyto_program *p, size_t stage);
/* Once launches [0, done) of p->launch are queued: queues the copy of
 * every send of the phase they complete. On failure *dev is the device
 * that failed. */
tyto_plugin_error *exec_sends_queue(struct tyto_program *p, size_t done,
                                    uint32_t *dev);
/* Once the phase is queued (and its copies between devices finished):
 * queues what is left, then waits for each send in turn and hands it to
 * the caller's function. */
tyto_plugin_error *exec_sends_deliver(struct tyto_program *p, uint32_t *dev);

#endif
