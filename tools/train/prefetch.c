/*
 * tyto-train's data thread (prefetch.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "prefetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *prefetch_main(void *arg) {
  prefetch *pf = arg;
  for (int slot = 0;; slot ^= 1) {
    sem_wait(&pf->empty[slot]);
    if (pf->stop) {
      pf->filled[slot] = 0;
      pf->st[slot] = TYTO_OK;
      sem_post(&pf->full[slot]);
      return NULL;
    }
    pf->st[slot] =
        tyto_batcher_next(pf->b, pf->x[slot], pf->xbytes, pf->y[slot],
                          pf->ybytes, &pf->filled[slot]);
    if (pf->st[slot] != TYTO_OK)
      snprintf(pf->msg[slot], sizeof pf->msg[slot], "%s", tyto_errmsg());
    int last = pf->st[slot] != TYTO_OK || pf->filled[slot] == 0;
    sem_post(&pf->full[slot]);
    if (last)
      return NULL;
  }
}

int prefetch_init(prefetch *pf, tyto_batcher *b, size_t xbytes, size_t ybytes) {
  memset(pf, 0, sizeof *pf);
  pf->b = b;
  pf->xbytes = xbytes;
  pf->ybytes = ybytes;
  for (int i = 0; i < 2; i++) {
    pf->x[i] = malloc(xbytes);
    pf->y[i] = malloc(ybytes);
    if (!pf->x[i] || !pf->y[i])
      return -1;
  }
  return 0;
}

/* Starts filling from the batcher's current position. */
int prefetch_start(prefetch *pf) {
  pf->stop = 0;
  for (int i = 0; i < 2; i++) {
    sem_init(&pf->empty[i], 0, 1);
    sem_init(&pf->full[i], 0, 0);
  }
  if (pthread_create(&pf->thread, NULL, prefetch_main, pf) != 0)
    return -1;
  pf->running = 1;
  return 0;
}

/* Waits for slot's batch. */
void prefetch_take(prefetch *pf, int slot) {
  sem_wait(&pf->full[slot]);
}

/* Gives slot back to be filled again. */
void prefetch_give(prefetch *pf, int slot) {
  sem_post(&pf->empty[slot]);
}

void prefetch_stop(prefetch *pf) {
  if (!pf->running)
    return;
  pf->stop = 1;
  for (int i = 0; i < 2; i++)
    sem_post(&pf->empty[i]);
  pthread_join(pf->thread, NULL);
  for (int i = 0; i < 2; i++) {
    sem_destroy(&pf->empty[i]);
    sem_destroy(&pf->full[i]);
  }
  pf->running = 0;
}

void prefetch_free(prefetch *pf) {
  prefetch_stop(pf);
  for (int i = 0; i < 2; i++) {
    free(pf->x[i]);
    free(pf->y[i]);
  }
}
