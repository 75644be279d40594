/*
 * The run's processes (<tyto/distributed.h>, dist.h): joining them
 * through MPI when a launcher started this one, and the waits on them
 * with a timeout that names the ranks that did not come.
 *
 * Liveness: before each collective a rank sends every other rank the
 * collective's number (a few bytes, eager) and keeps one receive posted
 * per peer for theirs. A wait that times out on collective s names the
 * peers whose last number is below s: they never reached it (dead, or
 * stuck in their own computation); when every peer reached it, the wait
 * says so instead (a peer stuck inside the collective itself).
 *
 * Interrupts: once the program passes on a SIGINT or SIGTERM
 * (tyto_dist_interrupt), a wait still pending a sixth of its timeout
 * later (at least INTERRUPT_GRACE seconds) gives up, so that a rank told
 * to stop (by Slurm after another rank died, say) says which rank it was
 * waiting for and stops before the launcher's SIGKILL, instead of waiting
 * out the whole timeout. A sixth: a program whose steps are long sets a
 * long timeout, and its healthy ranks need the time to finish their step
 * (tyto-train's wait for a checkpoint, at ten times the timeout, gets
 * 100 s by default).
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tyto/distributed.h>

#include "dist.h"
#include "../runtime/error.h"

#define DEFAULT_TIMEOUT 60.0
/* The least time a wait goes on after an interrupt (a sixth of its
 * timeout when that is more): time for a healthy peer, which was sent the
 * same signal, to reach the step's end, and with the default timeout
 * under the 30 s Slurm gives a task between SIGTERM and SIGKILL. */
#define INTERRUPT_GRACE 10.0
#define HB_TAG 7301
#define HB_SLOTS 8 /* heartbeat sends in flight per peer */

typedef struct peer_rec {
  char version[24];
  char host[64];
  int64_t pid;
} peer_rec;

static struct {
  int joined; /* tyto_dist_init ran */
  int rank, size;
  double timeout; /* 0: not set yet (the default, or TYTO_DIST_TIMEOUT) */
  char *broken;   /* the failure that ended the ranks' talk, or NULL */
#ifdef TYTO_HAVE_MPI
  int mpi;     /* we talk through MPI (size may still be 1) */
  int we_init; /* MPI_Init was ours, and so is MPI_Finalize */
  int met;     /* meet() succeeded: every rank is known, heartbeats on */
  MPI_Comm comm;
  peer_rec *peers;
  int64_t seq;    /* collectives this rank started */
  int64_t *heard; /* per peer: the last collective it announced */
  int64_t *hb_in; /* per peer: the receive's buffer */
  MPI_Request *hb_rq;
  int64_t *hb_out; /* per peer, HB_SLOTS: the sends' buffers */
  MPI_Request *hb_sq;
#endif
} D = {.rank = 0, .size = 1};

/* The signal tyto_dist_interrupt passed on; 0: none. Apart from D: set
 * from any thread, read by the waits. */
static atomic_int interrupt_sig;
/* A store a signal handler may make. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "atomic_int is not lock-free");

void tyto_dist_interrupt(int sig) {
  atomic_store_explicit(&interrupt_sig, sig, memory_order_relaxed);
}

uint64_t dist_hash(uint64_t h, const void *data, size_t bytes) {
  const unsigned char *p = data;
  for (size_t i = 0; i < bytes; i++) {
    h ^= p[i];
    h *= UINT64_C(1099511628211);
  }
  return h;
}

/* TYTO_DIST_TIMEOUT's seconds into *v: 1 when set and valid, 0 when
 * unset or empty, -1 when set to something else. */
static int env_timeout(double *v) {
  const char *s = getenv("TYTO_DIST_TIMEOUT");
  if (!s || !*s)
    return 0;
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return !errno && *end == '\0' && *v > 0 && isfinite(*v) ? 1 : -1;
}

double tyto_dist_timeout(void) {
  if (D.timeout > 0)
    return D.timeout;
  double v;
  return env_timeout(&v) == 1 ? v : DEFAULT_TIMEOUT;
}

double tyto_dist_set_timeout(double seconds) {
  if (!(seconds > 0) || !isfinite(seconds))
    return -1;
  double old = tyto_dist_timeout();
  D.timeout = seconds;
  return old;
}

int tyto_dist_rank(void) {
  return D.rank;
}

int tyto_dist_size(void) {
  return D.size;
}

const char *tyto_dist_transport(void) {
#ifdef TYTO_HAVE_MPI
  if (D.mpi)
    return "mpi";
#endif
  return "none";
}

const char *tyto_dist_library(void) {
#ifdef TYTO_HAVE_MPI
  static char name[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (!name[0] && MPI_Get_library_version(name, &len) == MPI_SUCCESS) {
    name[strcspn(name, "\r\n")] = '\0';
    if (!name[0])
      snprintf(name, sizeof name, "MPI %d.%d", MPI_VERSION, MPI_SUBVERSION);
  }
  return name[0] ? name : "MPI";
#else
  return NULL;
#endif
}

/* The number of ranks a launcher's environment announces: 0 none, -1 a
 * launcher whose count only MPI knows (PMIx). */
static long launcher_size(void) {
  static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                      "SLURM_STEP_NUM_TASKS"};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    const char *s = getenv(sizes[i]);
    char *end;
    long v;
    if (s && *s && (v = strtol(s, &end, 10)) > 0 && *end == '\0')
      return v;
  }
  return getenv("PMIX_RANK") ? -1 : 0;
}

tyto_status dist_usable(void) {
  if (D.broken)
    return rt_fail(TYTO_ERR_UNAVAILABLE, "%s", D.broken);
  return TYTO_OK;
}

#ifdef TYTO_HAVE_MPI

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Marks the run broken with a formatted reason, raised as the error. */
static tyto_status broken(tyto_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static tyto_status broken(tyto_status st, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!D.broken)
    D.broken = strdup(msg);
  return rt_fail(st, "%s", msg);
}

MPI_Comm dist_comm(void) {
  return D.comm;
}

static const char *mpi_says(int rc, char *buf) {
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
    snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
  return buf;
}

/* Takes every heartbeat that has come. */
static void drain(void) {
  for (int p = 0; p < D.size; p++) {
    if (p == D.rank || D.hb_rq[p] == MPI_REQUEST_NULL)
      continue;
    for (;;) {
      int done = 0;
      if (MPI_Test(&D.hb_rq[p], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
          !done)
        break;
      if (D.hb_in[p] > D.heard[p])
        D.heard[p] = D.hb_in[p];
      if (MPI_Irecv(&D.hb_in[p], 1, MPI_INT64_T, p, HB_TAG, D.comm,
                    &D.hb_rq[p]) != MPI_SUCCESS) {
        D.hb_rq[p] = MPI_REQUEST_NULL;
        break;
      }
    }
  }
}

int64_t dist_announce(void) {
  int64_t s = ++D.seq;
  if (!D.mpi || D.size < 2)
    return s;
  for (int p = 0; p < D.size; p++) {
    if (p == D.rank)
      continue;
    /* A free slot: a send still in flight (a peer that stopped taking
     * them) keeps its slot; with none free this announcement is skipped,
     * which only that peer could notice. */
    for (int k = 0; k < HB_SLOTS; k++) {
      size_t j = (size_t)p * HB_SLOTS + (size_t)k;
      int done = 1;
      if (D.hb_sq[j] != MPI_REQUEST_NULL)
        MPI_Test(&D.hb_sq[j], &done, MPI_STATUS_IGNORE);
      if (!done)
        continue;
      D.hb_out[j] = s;
      if (MPI_Isend(&D.hb_out[j], 1, MPI_INT64_T, p, HB_TAG, D.comm,
                    &D.hb_sq[j]) != MPI_SUCCESS)
        D.hb_sq[j] = MPI_REQUEST_NULL;
      break;
    }
  }
  drain();
  return s;
}

/* A signal's name for the messages. */
static const char *sig_name(int sig, char *b, size_t len) {
  if (sig == SIGINT)
    return "SIGINT";
  if (sig == SIGTERM)
    return "SIGTERM";
  snprintf(b, len, "signal %d", sig);
  return b;
}

/* The failed wait's message: the ranks that never reached collective
 * seq, after the timeout (sig 0) or the interrupt's grace. */
static tyto_status lost(int64_t seq, const char *what, double waited, int sig) {
  drain();
  char who[1024], head[320], sb[24];
  size_t k = 0;
  int n_lost = 0;
  who[0] = '\0';
  for (int p = 0; p < D.size; p++) {
    if (p == D.rank || D.heard[p] >= seq)
      continue;
    n_lost++;
    if (k < sizeof who - 1)
      k +=
          (size_t)snprintf(who + k, sizeof who - k,
                           "%srank %d (pid %lld on %s)", n_lost > 1 ? ", " : "",
                           p, (long long)D.peers[p].pid, D.peers[p].host);
  }
  /* "gave up on step 5's sums after SIGTERM (waited 10 s more)", "step
   * 5's sums did not complete within 60 s" */
  if (sig)
    snprintf(head, sizeof head, "gave up on %s after %s (waited %.0f s more)",
             what, sig_name(sig, sb, sizeof sb), waited);
  else
    snprintf(head, sizeof head, "%s did not complete within %.0f s", what,
             waited);
  if (n_lost)
    return broken(TYTO_ERR_UNAVAILABLE,
                  "rank %d: %s: %s never reached it (the rank died or hangs); "
                  "the run cannot go on",
                  D.rank, head, who);
  return broken(TYTO_ERR_UNAVAILABLE,
                "rank %d: %s, though every rank reached it (a rank hangs "
                "inside it); the run cannot go on",
                D.rank, head);
}

tyto_status dist_fail(int rc, const char *what) {
  char b[MPI_MAX_ERROR_STRING];
  return broken(TYTO_ERR_UNAVAILABLE, "rank %d: %s: %s", D.rank, what,
                mpi_says(rc, b));
}

int dist_test(MPI_Request *rq, int n, const char *what) {
  int done = 0, rc = MPI_Testall(n, rq, &done, MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS) {
    char b[MPI_MAX_ERROR_STRING];
    broken(TYTO_ERR_UNAVAILABLE, "rank %d: %s: %s", D.rank, what,
           mpi_says(rc, b));
    return -1;
  }
  return done;
}

tyto_status dist_wait(MPI_Request *rq, int n, int64_t seq, const char *what) {
  if (D.broken)
    return dist_usable();
  double t0 = now(), limit = tyto_dist_timeout(), told = -1;
  double grace = limit / 6 > INTERRUPT_GRACE ? limit / 6 : INTERRUPT_GRACE;
  for (long spins = 0;; spins++) {
    int done = dist_test(rq, n, what);
    if (done < 0)
      return TYTO_ERR_UNAVAILABLE;
    if (done)
      return TYTO_OK;
    if (spins % 64 == 0) {
      drain();
      double t = now() - t0;
      int sig = atomic_load_explicit(&interrupt_sig, memory_order_relaxed);
      if (!sig)
        told = -1; /* none, or taken back */
      else if (told < 0)
        told = t; /* the grace counts from when this wait saw it */
      if (t > limit)
        return lost(seq, what, t, 0);
      if (sig && t - told > grace)
        return lost(seq, what, t - told, sig);
    }
    if (spins > 1000) {
      /* Past a millisecond or so: no need to take a core from the
       * devices' own threads. */
      struct timespec ts = {0, spins > 20000 ? 500000 : 20000};
      nanosleep(&ts, NULL);
    }
  }
}

static tyto_status mpi_fail(int rc, const char *doing) {
  char b[MPI_MAX_ERROR_STRING];
  return rt_fail(TYTO_ERR_UNAVAILABLE, "distributed: %s: %s", doing,
                 mpi_says(rc, b));
}

static void free_peers(void) {
  free(D.peers);
  free(D.heard);
  free(D.hb_in);
  free(D.hb_rq);
  free(D.hb_out);
  free(D.hb_sq);
  D.peers = NULL;
  D.heard = D.hb_in = D.hb_out = NULL;
  D.hb_rq = D.hb_sq = NULL;
}

/* Every rank's version, host and pid; the heartbeats' receives. */
static tyto_status meet(void) {
  size_t n = (size_t)D.size;
  D.peers = calloc(n, sizeof *D.peers);
  D.heard = calloc(n, sizeof *D.heard);
  D.hb_in = calloc(n, sizeof *D.hb_in);
  D.hb_rq = malloc(n * sizeof *D.hb_rq);
  D.hb_out = calloc(n * HB_SLOTS, sizeof *D.hb_out);
  D.hb_sq = malloc(n * HB_SLOTS * sizeof *D.hb_sq);
  if (!D.peers || !D.heard || !D.hb_in || !D.hb_rq || !D.hb_out || !D.hb_sq)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "distributed: out of memory");
  for (size_t i = 0; i < n * HB_SLOTS; i++)
    D.hb_sq[i] = MPI_REQUEST_NULL;
  for (size_t i = 0; i < n; i++)
    D.hb_rq[i] = MPI_REQUEST_NULL;
  peer_rec me;
  memset(&me, 0, sizeof me);
  snprintf(me.version, sizeof me.version, "%s", tyto_version());
  if (gethostname(me.host, sizeof me.host - 1) != 0)
    snprintf(me.host, sizeof me.host, "?");
  me.pid = (int64_t)getpid();
  MPI_Request rq;
  int64_t seq = dist_announce();
  int rc = MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, D.peers,
                          (int)sizeof me, MPI_BYTE, D.comm, &rq);
  if (rc != MPI_SUCCESS)
    return mpi_fail(rc, "exchanging the ranks' versions");
  for (int p = 0; p < D.size; p++)
    if (p != D.rank && MPI_Irecv(&D.hb_in[p], 1, MPI_INT64_T, p, HB_TAG, D.comm,
                                 &D.hb_rq[p]) != MPI_SUCCESS)
      D.hb_rq[p] = MPI_REQUEST_NULL;
  tyto_status st = dist_wait(&rq, 1, seq, "meeting the other ranks");
  if (st != TYTO_OK)
    return st;
  for (int p = 1; p < D.size; p++)
    if (strcmp(D.peers[p].version, D.peers[0].version) != 0)
      return rt_fail(TYTO_ERR_CONFIG,
                     "distributed: rank %d (on %s) runs tyto %s, rank 0 (on "
                     "%s) tyto %s: every rank must run the same tyto",
                     p, D.peers[p].host, D.peers[p].version, D.peers[0].host,
                     D.peers[0].version);
  return TYTO_OK;
}

#endif /* TYTO_HAVE_MPI */

tyto_status tyto_dist_init(int *argc, char ***argv) {
  if (D.joined)
    return TYTO_OK;
  /* A timeout that cannot be read is an error, not the default: a user
   * who set it meant something. */
  double tv;
  if (env_timeout(&tv) < 0)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "distributed: TYTO_DIST_TIMEOUT='%.64s': expected a "
                   "number of seconds > 0 (unset it for the default, %g)",
                   getenv("TYTO_DIST_TIMEOUT"), (double)DEFAULT_TIMEOUT);
  long ls = launcher_size();
#ifdef TYTO_HAVE_MPI
  int already = 0;
  MPI_Initialized(&already);
  if ((ls == 0 || ls == 1) && !already) {
    /* No launcher, or one that started this process alone (mpirun -np 1,
     * a Slurm batch script's own step): one rank, no MPI. */
    D.joined = 1;
    return TYTO_OK;
  }
  int rc = MPI_SUCCESS, provided = 0;
  if (!already) {
    rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS)
      return mpi_fail(rc, "starting MPI");
    D.we_init = 1;
  } else {
    MPI_Query_thread(&provided);
  }
  /* tyto's own threads never call MPI; the caller's thread does, which
   * needs FUNNELED when it is the main thread, SERIALIZED otherwise. */
  if (provided < MPI_THREAD_FUNNELED) {
    if (D.we_init)
      MPI_Finalize();
    D.we_init = 0;
    return rt_fail(TYTO_ERR_UNSUPPORTED,
                   "distributed: this MPI gives thread level %d; tyto needs "
                   "MPI_THREAD_FUNNELED (%d) or more%s",
                   provided, MPI_THREAD_FUNNELED,
                   already ? " (initialise MPI with MPI_Init_thread)" : "");
  }
  if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &D.comm)) != MPI_SUCCESS)
    return mpi_fail(rc, "duplicating MPI_COMM_WORLD");
  MPI_Comm_set_errhandler(D.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(D.comm, &D.rank);
  MPI_Comm_size(D.comm, &D.size);
  D.mpi = 1;
  D.joined = 1;
  /* A launcher this MPI does not speak to (MPICH's mpiexec with Open
   * MPI, srun without PMI support) leaves every process a world of one:
   * each would train alone. */
  if (ls > 1 && D.size != ls) {
    int size = D.size;
    tyto_dist_finalize();
    return rt_fail(TYTO_ERR_CONFIG,
                   "distributed: the launcher started %ld processes, but MPI "
                   "sees %d: this MPI (%s) does not speak that launcher's "
                   "protocol; start the run with the mpirun of this MPI, or "
                   "srun with its PMI support (srun --mpi=pmix)",
                   ls, size, tyto_dist_library());
  }
  tyto_status st = D.size > 1 ? meet() : TYTO_OK;
  D.met = st == TYTO_OK;
  if (st != TYTO_OK) {
    char *msg = strdup(tyto_errmsg());
    tyto_dist_finalize();
    rt_fail(st, "%s", msg ? msg : "distributed: start-up failed");
    free(msg);
  }
  return st;
#else
  (void)argc;
  (void)argv;
  const char *pr = getenv("PMIX_RANK");
  char n_text[32] = "several";
  if (ls > 1)
    snprintf(n_text, sizeof n_text, "%ld", ls);
  if (ls > 1 || (ls < 0 && pr && strcmp(pr, "0") != 0))
    return rt_fail(TYTO_ERR_UNSUPPORTED,
                   "distributed: started by an MPI launcher as one of %s "
                   "ranks, but this tyto was built without MPI: every rank "
                   "would train alone; rebuild tyto with MPI (install "
                   "libopenmpi-dev and run configure again) or start one "
                   "process",
                   n_text);
  D.joined = 1;
  return TYTO_OK;
#endif
}

tyto_status tyto_dist_finalize(void) {
  tyto_status st = TYTO_OK;
#ifdef TYTO_HAVE_MPI
  /* MPI_Finalize waits for every process with no timeout: a rank that
   * hung after the last collective (stopped, or agreed to stop on a
   * signal and then stuck) would hold it forever. A barrier with the
   * usual timeout (and grace after a signal) finds such a rank first. */
  if (D.mpi && D.met && !D.broken && D.size > 1 &&
      tyto_dist_barrier() != TYTO_OK && !D.broken)
    D.broken = strdup(tyto_errmsg());
  if (D.mpi && D.broken) {
    /* A lost or hung rank would hold MPI_Finalize (a fence over every
     * process) forever, and requests may still be in flight: MPI is left
     * as it is, and the process should exit (or tyto_dist_abort). */
    st = rt_fail(TYTO_ERR_UNAVAILABLE,
                 "distributed: not finalising MPI after a failure (%s); exit "
                 "the process, or call tyto_dist_abort",
                 D.broken);
  } else if (D.mpi) {
    if (D.hb_rq)
      for (int p = 0; p < D.size; p++)
        if (D.hb_rq[p] != MPI_REQUEST_NULL) {
          MPI_Cancel(&D.hb_rq[p]);
          MPI_Wait(&D.hb_rq[p], MPI_STATUS_IGNORE);
        }
    if (D.hb_sq)
      MPI_Waitall(D.size * HB_SLOTS, D.hb_sq, MPI_STATUSES_IGNORE);
    free_peers();
    MPI_Comm_free(&D.comm);
    if (D.we_init) {
      int rc = MPI_Finalize();
      if (rc != MPI_SUCCESS)
        st = mpi_fail(rc, "finalising MPI");
    }
  }
  if (D.mpi) {
    D.mpi = D.we_init = D.met = 0;
    D.seq = 0;
  }
#endif
  free(D.broken);
  D.broken = NULL;
  D.joined = 0;
  D.rank = 0;
  D.size = 1;
  return st;
}

void tyto_dist_abort(int code) {
#ifdef TYTO_HAVE_MPI
  if (D.mpi && D.size > 1)
    MPI_Abort(MPI_COMM_WORLD, code);
#endif
  exit(code);
}

tyto_status dist_sum(double *x, size_t n, const char *what) {
  if (D.size < 2 || n == 0)
    return dist_usable();
#ifdef TYTO_HAVE_MPI
  if (D.broken)
    return dist_usable();
  if (n > (size_t)INT32_MAX)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "distributed: %s: %zu values",
                   what, n);
  MPI_Request rq;
  int64_t seq = dist_announce();
  int rc =
      MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_DOUBLE, MPI_SUM, D.comm, &rq);
  if (rc != MPI_SUCCESS) {
    char b[MPI_MAX_ERROR_STRING];
    return broken(TYTO_ERR_UNAVAILABLE, "rank %d: %s: %s", D.rank, what,
                  mpi_says(rc, b));
  }
  return dist_wait(&rq, 1, seq, what);
#else
  (void)x;
  (void)what;
  return TYTO_OK;
#endif
}

tyto_status dist_agree_values(const char *what, size_t n,
                              const char *const *names, const int64_t *vals) {
  if (D.size < 2 || n == 0)
    return dist_usable();
#ifdef TYTO_HAVE_MPI
  if (D.broken)
    return dist_usable();
  size_t total = n * (size_t)D.size;
  int64_t *all = malloc(total * sizeof *all);
  if (!all || n > (size_t)INT32_MAX / sizeof *all) {
    free(all);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "distributed: out of memory");
  }
  MPI_Request rq;
  int64_t seq = dist_announce();
  int rc = MPI_Iallgather(vals, (int)n, MPI_INT64_T, all, (int)n, MPI_INT64_T,
                          D.comm, &rq);
  tyto_status st;
  if (rc != MPI_SUCCESS) {
    char b[MPI_MAX_ERROR_STRING];
    st = broken(TYTO_ERR_UNAVAILABLE, "rank %d: %s: %s", D.rank, what,
                mpi_says(rc, b));
  } else {
    st = dist_wait(&rq, 1, seq, what);
  }
  for (int p = 1; p < D.size && st == TYTO_OK; p++)
    for (size_t i = 0; i < n; i++) {
      int64_t a = all[i], b = all[(size_t)p * n + i];
      if (a == b)
        continue;
      if (names[i][0] == '#')
        st = rt_fail(TYTO_ERR_CONFIG,
                     "%s: rank %d's %s differs from rank 0's: every rank "
                     "must run the same",
                     what, p, names[i] + 1);
      else
        st = rt_fail(TYTO_ERR_CONFIG,
                     "%s: rank %d has %s %lld, rank 0 has %lld: every rank "
                     "must run the same",
                     what, p, names[i], (long long)b, (long long)a);
      break;
    }
  free(all);
  return st;
#else
  (void)what;
  (void)names;
  (void)vals;
  return TYTO_OK;
#endif
}

tyto_status tyto_dist_agree(const char *what, const void *data, size_t bytes) {
  if (!what)
    what = "the data";
  if (!data && bytes)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dist_agree: data is NULL for %zu bytes", bytes);
  uint64_t h = dist_hash(DIST_FNV0, &bytes, sizeof bytes);
  int64_t v[1] = {(int64_t)dist_hash(h, data, bytes)};
  char name[256];
  snprintf(name, sizeof name, "#%s", what);
  const char *const names[1] = {name};
  return dist_agree_values("distributed", 1, names, v);
}

tyto_status tyto_dist_sum(double *x, size_t n) {
  if (!x && n)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_dist_sum: x is NULL for %zu values", n);
  return dist_sum(x, n, "tyto_dist_sum");
}

tyto_status tyto_dist_barrier(void) {
  if (D.size < 2)
    return dist_usable();
#ifdef TYTO_HAVE_MPI
  if (D.broken)
    return dist_usable();
  MPI_Request rq;
  int64_t seq = dist_announce();
  int rc = MPI_Ibarrier(D.comm, &rq);
  if (rc != MPI_SUCCESS) {
    char b[MPI_MAX_ERROR_STRING];
    return broken(TYTO_ERR_UNAVAILABLE, "rank %d: a barrier: %s", D.rank,
                  mpi_says(rc, b));
  }
  return dist_wait(&rq, 1, seq, "a barrier");
#else
  return TYTO_OK;
#endif
}
