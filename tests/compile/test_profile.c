/* Device profiles for placement: measured figures that make sense, the
 * on-disk cache (written once, read back, refreshed on request), and a
 * cache that is damaged, a FIFO or unwritable (a warning, never a hang or
 * a failure). */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static char logged[8192];

static void capture(void *user, tyto_log_level level, const char *origin,
                    const char *msg) {
  (void)user;
  size_t n = strlen(logged);
  snprintf(logged + n, sizeof logged - n, "%d %s: %s\n", (int)level, origin,
           msg);
}

static tyto_context *new_context(void) {
  tyto_context_options o;
  test_options(&o, 0);
  o.flags &= ~(unsigned)TYTO_CONTEXT_IGNORE_ENV; /* XDG_CACHE_HOME is read */
  o.config_path = "";
  o.devices = "cpu";
  o.log_level = TYTO_LOG_WARN;
  o.log_fn = capture;
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  return ctx;
}

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/tyto-profile-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  setenv("XDG_CACHE_HOME", dir, 1);
  unsetenv("TYTO_DEVICES");
  unsetenv("TYTO_CONFIG");
  logged[0] = '\0';
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static void check_sane(const tyto_device_profile *p) {
  /* Loose bounds that any machine meets and a wrong unit would not. */
  ck_assert_msg(p->gemm_flops > 1e7 && p->gemm_flops < 1e16, "%g",
                p->gemm_flops);
  ck_assert_msg(p->eltwise_bytes > 1e6 && p->eltwise_bytes < 1e14, "%g",
                p->eltwise_bytes);
  ck_assert_msg(p->launch_seconds > 0 && p->launch_seconds < 1, "%g",
                p->launch_seconds);
  ck_assert_msg(p->h2d_bytes > 1e6 && p->d2h_bytes > 1e6, "%g %g", p->h2d_bytes,
                p->d2h_bytes);
}

START_TEST(quick_profile_measures_and_leaves_no_cache) {
  tyto_context *ctx = new_context();
  tyto_device_profile p = {.struct_size = sizeof p};
  ck_assert_int_eq(tyto_device_profile_get(ctx, 0, TYTO_PROFILE_QUICK, &p),
                   TYTO_OK);
  check_sane(&p);
  ck_assert_int_eq(p.cached, 0);
  ck_assert_msg(strncmp(p.key, "cpu|", 4) == 0, "%s", p.key);
  double bps = 0;
  ck_assert_int_eq(tyto_link_profile_get(ctx, 0, 0, TYTO_PROFILE_QUICK, &bps),
                   TYTO_OK);
  ck_assert_msg(bps > 1e6, "%g", bps);
  char path[128];
  snprintf(path, sizeof path, "%s/tyto/profiles.json", dir);
  ck_assert_str_eq(tyto_profile_cache_path(ctx), path);
  struct stat st;
  ck_assert_int_ne(stat(path, &st), 0); /* quick results are not cached */
  /* bad arguments */
  ck_assert_int_eq(tyto_device_profile_get(ctx, 3, TYTO_PROFILE_QUICK, &p),
                   TYTO_ERR_NOT_FOUND);
  ck_assert_msg_contains(tyto_errmsg(), "no selected device 3");
  p.struct_size = 0;
  ck_assert_int_eq(tyto_device_profile_get(ctx, 0, TYTO_PROFILE_QUICK, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  tyto_context_free(ctx);
  ck_assert_str_eq(logged, "");
}
END_TEST

/* The full calibration once, then the cache: another context reads it
 * instead of measuring; REMEASURE measures and rewrites. */
START_TEST(profiles_are_cached_on_disk) {
  if (getenv("TYTO_TEST_UNDER_VALGRIND")) {
    fprintf(stderr, "skipped under valgrind: a full calibration is slow\n");
    return;
  }
  tyto_context *ctx = new_context();
  tyto_device_profile a = {.struct_size = sizeof a};
  ck_assert_int_eq(tyto_device_profile_get(ctx, 0, 0, &a), TYTO_OK);
  check_sane(&a);
  ck_assert_int_eq(a.cached, 0);
  ck_assert(a.measure_seconds > 0);
  /* this context remembers it */
  tyto_device_profile b = {.struct_size = sizeof b};
  ck_assert_int_eq(tyto_device_profile_get(ctx, 0, 0, &b), TYTO_OK);
  ck_assert(b.gemm_flops == a.gemm_flops);
  tyto_context_free(ctx);

  ctx = new_context();
  ck_assert_int_eq(tyto_device_profile_get(ctx, 0, 0, &b), TYTO_OK);
  ck_assert_int_eq(b.cached, 1);
  ck_assert(b.gemm_flops == a.gemm_flops);
  ck_assert(b.launch_seconds == a.launch_seconds);
  ck_assert_int_eq(tyto_device_profile_get(ctx, 0, TYTO_PROFILE_REMEASURE, &b),
                   TYTO_OK);
  ck_assert_int_eq(b.cached, 0);
  tyto_context_free(ctx);
  ck_assert_str_eq(logged, "");
}
END_TEST

/* A damaged cache is replaced, with a warning; a FIFO in its place is
 * refused at once (no hang); a cache that cannot be written is a warning
 * and the figures still come back. */
START_TEST(bad_caches_are_warnings) {
  char tdir[128], path[160];
  snprintf(tdir, sizeof tdir, "%s/tyto", dir);
  snprintf(path, sizeof path, "%s/profiles.json", tdir);
  ck_assert_int_eq(mkdir(tdir, 0755), 0);
  FILE *f = fopen(path, "w");
  fputs("{\"version\": 1, \"devices\": [", f);
  fclose(f);
  tyto_context *ctx = new_context();
  double bps;
  ck_assert_int_eq(tyto_link_profile_get(ctx, 0, 0, 0, &bps), TYTO_OK);
  ck_assert_msg_contains(logged, "is not a tyto profile cache");
  tyto_context_free(ctx);
  /* rewritten: read back without a warning */
  logged[0] = '\0';
  ctx = new_context();
  double again;
  ck_assert_int_eq(tyto_link_profile_get(ctx, 0, 0, 0, &again), TYTO_OK);
  ck_assert(again == bps);
  ck_assert_str_eq(logged, "");
  tyto_context_free(ctx);

  unlink(path);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  ctx = new_context();
  ck_assert_int_eq(tyto_link_profile_get(ctx, 0, 0, 0, &bps), TYTO_OK);
  ck_assert_msg_contains(logged, "cannot be read: is a FIFO, not a regular "
                                 "file");
  ck_assert_msg_contains(logged, "cannot be written: is a FIFO");
  struct stat st;
  ck_assert_int_eq(lstat(path, &st), 0);
  ck_assert(S_ISFIFO(st.st_mode)); /* left as it was */
  tyto_context_free(ctx);
  unlink(path);

  /* a directory where the cache file goes: cannot be written */
  logged[0] = '\0';
  ck_assert_int_eq(mkdir(path, 0755), 0);
  ctx = new_context();
  ck_assert_int_eq(tyto_link_profile_get(ctx, 0, 0, 0, &bps), TYTO_OK);
  ck_assert_msg_contains(logged, "cannot be written");
  tyto_context_free(ctx);
  rmdir(path);
}
END_TEST

int main(void) {
  Suite *s = suite_create("profile");
  TCase *tc = tcase_create("profile");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, quick_profile_measures_and_leaves_no_cache);
  tcase_add_test(tc, profiles_are_cached_on_disk);
  tcase_add_test(tc, bad_caches_are_warnings);
  suite_add_tcase(s, tc);
  return test_run(s);
}
