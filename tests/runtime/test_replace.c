/* Replacing a file whole (runtime/file.h), as checkpoints, graph exports,
 * the profile cache and tyto-train's plots are written: through symbolic
 * links, never over a FIFO, a device or a directory, with the old file's
 * mode or the umask's, and nothing left behind when a write fails. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include "runtime/file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void setup(void) {
  test_dir_make(dir, "replace");
}

static void teardown(void) {
  test_dir_remove(dir);
}

static const char *in_dir(const char *name) {
  return test_dir_path(dir, name);
}

static size_t entries(void) {
  return test_dir_count(dir);
}

/* Writes `text` over path through rt_replace; 0 or -1 (why set). */
static int replace(const char *path, const char *text, const char **why) {
  rt_replace r;
  const char *step = NULL;
  if (rt_replace_open(&r, path, why) != 0)
    return -1;
  ssize_t n = write(r.fd, text, strlen(text));
  return rt_replace_commit(&r, n == (ssize_t)strlen(text) ? 0 : EIO, why,
                           &step);
}

static void expect_text(const char *path, const char *text) {
  char buf[256] = "";
  int fd = open(path, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  ck_assert_int_ge(n, 0);
  buf[n] = '\0';
  ck_assert_str_eq(buf, text);
}

START_TEST(links_are_followed_and_stay) {
  const char *why = NULL;
  ck_assert_int_eq(replace(in_dir("target"), "one", &why), 0);
  /* a relative link, and a link to that link */
  ck_assert_int_eq(symlink("target", in_dir("link")), 0);
  ck_assert_int_eq(symlink("link", in_dir("link2")), 0);
  ck_assert_int_eq(replace(in_dir("link2"), "two", &why), 0);
  struct stat st;
  ck_assert_int_eq(lstat(in_dir("link2"), &st), 0);
  ck_assert(S_ISLNK(st.st_mode));
  ck_assert_int_eq(lstat(in_dir("link"), &st), 0);
  ck_assert(S_ISLNK(st.st_mode));
  expect_text(in_dir("target"), "two");
  /* a dangling link creates its target */
  ck_assert_int_eq(symlink("new", in_dir("dangling")), 0);
  ck_assert_int_eq(replace(in_dir("dangling"), "three", &why), 0);
  expect_text(in_dir("new"), "three");
  ck_assert_uint_eq(entries(), 5); /* no temporary left */
  /* a loop of links is refused */
  ck_assert_int_eq(symlink("loop2", in_dir("loop1")), 0);
  ck_assert_int_eq(symlink("loop1", in_dir("loop2")), 0);
  ck_assert_int_eq(replace(in_dir("loop1"), "x", &why), -1);
  ck_assert_int_eq(errno, ELOOP);
  ck_assert_uint_eq(entries(), 7);
}
END_TEST

START_TEST(what_is_not_a_file_is_refused_untouched) {
  const char *why = NULL;
  ck_assert_int_eq(mkfifo(in_dir("fifo"), 0600), 0);
  ck_assert_int_eq(replace(in_dir("fifo"), "x", &why), -1);
  ck_assert_int_eq(errno, EINVAL);
  ck_assert_str_eq(why, "is a FIFO, not a regular file");
  struct stat st;
  ck_assert_int_eq(lstat(in_dir("fifo"), &st), 0);
  ck_assert(S_ISFIFO(st.st_mode));
  /* a link to it is refused too */
  ck_assert_int_eq(symlink("fifo", in_dir("to-fifo")), 0);
  ck_assert_int_eq(replace(in_dir("to-fifo"), "x", &why), -1);
  ck_assert_str_eq(why, "is a FIFO, not a regular file");
  ck_assert_int_eq(mkdir(in_dir("sub"), 0755), 0);
  ck_assert_int_eq(replace(in_dir("sub"), "x", &why), -1);
  ck_assert_str_eq(why, "is a directory, not a regular file");
  /* /dev/null: a character device, wherever the test runs */
  ck_assert_int_eq(replace("/dev/null", "x", &why), -1);
  ck_assert_str_eq(why, "is a character device, not a regular file");
  ck_assert_int_eq(stat("/dev/null", &st), 0);
  ck_assert(S_ISCHR(st.st_mode));
  ck_assert_int_eq(replace("", "x", &why), -1);
  ck_assert_str_eq(why, "the path is empty");
  /* the path refused (-2), not a file that could not be made (-1) */
  rt_replace r;
  ck_assert_int_eq(rt_replace_open(&r, in_dir("fifo"), &why), -2);
  ck_assert_int_eq(rt_replace_open(&r, "", &why), -2);
  ck_assert_int_eq(rt_replace_open(&r, in_dir("no/such/dir/f"), &why), -1);
  ck_assert_int_eq(replace(in_dir("no/such/dir/f"), "x", &why), -1);
  ck_assert_int_eq(errno, ENOENT);
  ck_assert_uint_eq(entries(), 3);
}
END_TEST

START_TEST(modes_and_failed_writes) {
  const char *why = NULL;
  mode_t old = umask(027);
  ck_assert_int_eq(replace(in_dir("new"), "a", &why), 0);
  struct stat st;
  ck_assert_int_eq(stat(in_dir("new"), &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0640); /* 0666 less the umask */
  ck_assert_int_eq(chmod(in_dir("new"), 0604), 0);
  ck_assert_int_eq(replace(in_dir("new"), "b", &why), 0);
  ck_assert_int_eq(stat(in_dir("new"), &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0604); /* the old file's */
  umask(old);
  /* a failed write leaves the old file and no temporary */
  rt_replace r;
  const char *step = NULL;
  ck_assert_int_eq(rt_replace_open(&r, in_dir("new"), &why), 0);
  ck_assert_int_eq(write(r.fd, "half", 4), 4);
  ck_assert_int_eq(rt_replace_commit(&r, ENOSPC, &why, &step), -1);
  ck_assert_str_eq(step, "write");
  ck_assert_int_eq(errno, ENOSPC);
  expect_text(in_dir("new"), "b");
  ck_assert_int_eq(rt_replace_open(&r, in_dir("new"), &why), 0);
  rt_replace_abort(&r);
  expect_text(in_dir("new"), "b");
  ck_assert_uint_eq(entries(), 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("replace");
  TCase *tc = tcase_create("replace");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, links_are_followed_and_stay);
  tcase_add_test(tc, what_is_not_a_file_is_refused_untouched);
  tcase_add_test(tc, modes_and_failed_writes);
  suite_add_tcase(s, tc);
  return test_run(s);
}
