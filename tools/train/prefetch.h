/*
 * tyto-train's data thread. One thread fills the next batch while the current
 * step runs: two slots, handed back and forth with semaphores, in the batcher's
 * order (so a run sees the batches it would see without it). It stops after the
 * epoch's last batch (a slot with filled 0) or when asked.
 */
#ifndef TYTO_TOOLS_TRAIN_PREFETCH_H
#define TYTO_TOOLS_TRAIN_PREFETCH_H

#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>

#include <tyto/tyto.h>

typedef struct prefetch {
  tyto_batcher *b;
  size_t xbytes, ybytes;
  float *x[2], *y[2];
  int64_t filled[2];
  tyto_status st[2];
  char msg[2][512];
  sem_t empty[2], full[2];
  volatile int stop;
  pthread_t thread;
  int running;
} prefetch;

/* Buffers for batches of b (xbytes of images, ybytes of labels). 0, or -1
 * out of memory; prefetch_free() either way. */
int prefetch_init(prefetch *pf, tyto_batcher *b, size_t xbytes, size_t ybytes);
/* Starts filling from the batcher's current position. */
int prefetch_start(prefetch *pf);
/* Waits for slot's batch (slots alternate 0, 1, 0, ...). */
void prefetch_take(prefetch *pf, int slot);
/* Gives slot back to be filled again. */
void prefetch_give(prefetch *pf, int slot);
/* Stops the thread (nothing when not started). */
void prefetch_stop(prefetch *pf);
void prefetch_free(prefetch *pf);

#endif /* TYTO_TOOLS_TRAIN_PREFETCH_H */
