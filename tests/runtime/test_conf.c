/* The INI configuration file: good files, and every error with its line. */
#include "common.h"

#include "runtime/conf.h"

#include <sys/stat.h>
#include <unistd.h>

/* Parses len bytes of `text` as file "t.conf"; returns the errors joined
 * by '\n'. */
static char *parse_n(conf *c, const char *text, size_t len, int expect_ok) {
  conf_init(c);
  FILE *f = fmemopen((void *)text, len, "r");
  ck_assert_ptr_nonnull(f);
  int rc = conf_parse_stream(c, f, "t.conf");
  fclose(f);
  char *errors = strlist_join(&c->errors, "\n");
  ck_assert_msg(rc == (expect_ok ? 0 : -1), "rc %d, errors:\n%s", rc, errors);
  return errors;
}

static char *parse(conf *c, const char *text, int expect_ok) {
  return parse_n(c, text, strlen(text), expect_ok);
}

static void expect_error(const char *text, const char *message) {
  conf c;
  char *errors = parse(&c, text, 0);
  ck_assert_str_eq(errors, message);
  free(errors);
  conf_free(&c);
}

START_TEST(good_file) {
  conf c;
  char *errors = parse(&c,
                       "; tyto configuration\n"
                       "# global keys first\n"
                       "devices = cuda:0, cpu\n"
                       "plugin_path = /opt/a:/opt/b\n"
                       "\n"
                       "log_level = Info ; inline comment\n"
                       "[cpu]\n"
                       "threads = 2\n"
                       "  [opencl]\n"
                       "platform: Portable Computing Language\n",
                       1);
  ck_assert_str_eq(errors, "");
  ck_assert_str_eq(c.devices, "cuda:0, cpu");
  ck_assert_str_eq(c.plugin_path, "/opt/a:/opt/b");
  ck_assert_int_eq(c.log_level, TYTO_LOG_INFO);
  ck_assert_str_eq(conf_lookup(&c, "cpu", "threads"), "2");
  ck_assert_str_eq(conf_lookup(&c, "opencl", "platform"),
                   "Portable Computing Language");
  ck_assert_ptr_null(conf_lookup(&c, "cpu", "platform"));
  ck_assert_uint_eq(c.n_entries, 2);
  ck_assert_int_eq(c.entries[0].line, 8);
  ck_assert_int_eq(c.entries[1].line, 10);
  free(errors);
  conf_free(&c);
}
END_TEST

START_TEST(tyto_section_holds_global_keys) {
  conf c;
  char *errors = parse(&c, "[tyto]\ndevices = cpu\nlog_level = debug\n", 1);
  ck_assert_str_eq(c.devices, "cpu");
  ck_assert_int_eq(c.log_level, TYTO_LOG_DEBUG);
  ck_assert_uint_eq(c.n_entries, 0);
  free(errors);
  conf_free(&c);
}
END_TEST

START_TEST(indented_key_is_not_a_continuation) {
  /* inih would glue an indented line onto the previous value. */
  conf c;
  char *errors = parse(&c, "devices = cpu\n  log_level = error\n", 1);
  ck_assert_str_eq(c.devices, "cpu");
  ck_assert_int_eq(c.log_level, TYTO_LOG_ERROR);
  free(errors);
  conf_free(&c);
}
END_TEST

START_TEST(syntax_errors_with_lines) {
  expect_error("devices = cpu\n[cpu\n",
               "t.conf:2: section header is missing ']': '[cpu'");
  expect_error("\n\n[ ]\n", "t.conf:3: empty section name");
  expect_error("devices cpu\n",
               "t.conf:1: expected 'key = value' or '[section]', found "
               "'devices cpu'");
  expect_error("; ok\n= cpu\n", "t.conf:2: missing key before '='");
  /* Every bad line is reported, not only the first. */
  expect_error("oops\nlog_level = info\n[x\nalso bad\n",
               "t.conf:1: expected 'key = value' or '[section]', found "
               "'oops'\n"
               "t.conf:3: section header is missing ']': '[x'\n"
               "t.conf:4: expected 'key = value' or '[section]', found "
               "'also bad'");
}
END_TEST

START_TEST(unknown_and_bad_values) {
  expect_error("devics = cpu\n", "t.conf:1: unknown key 'devics' (expected "
                                 "devices, plugin_path or log_level)");
  expect_error("log_level = loud\n", "t.conf:1: log_level: expected error, "
                                     "warn, info or debug, found 'loud'");
  expect_error("devices = cpu,,cuda\n",
               "t.conf:1: devices: device entry 2 is empty (stray ',')");
  expect_error("devices = cpu\ndevices = cuda\n",
               "t.conf:2: 'devices' is already set at line 1");
  expect_error("[cpu]\nthreads = 1\n\nthreads = 2\n",
               "t.conf:4: 'threads' is already set at line 2");
}
END_TEST

START_TEST(long_line) {
  char text[600];
  memset(text, 'a', 400);
  memcpy(text + 400, " = 1\n", 6);
  conf c;
  char *errors = parse(&c, text, 0);
  ck_assert_msg_contains(errors, "t.conf:1: line too long (at most");
  free(errors);
  conf_free(&c);
}
END_TEST

START_TEST(missing_file) {
  conf c;
  conf_init(&c);
  ck_assert_int_eq(conf_parse_file(&c, "/nonexistent/tyto.conf"), -1);
  ck_assert_str_eq(c.errors.items[0],
                   "/nonexistent/tyto.conf: cannot read the config file: No "
                   "such file or directory");
  conf_free(&c);
}
END_TEST

/* A FIFO, a device or a directory is refused before it is read: a FIFO
 * with no writer would otherwise block the caller for ever. */
START_TEST(not_a_regular_file) {
  char dir[] = "/tmp/tyto-conf-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char fifo[64];
  snprintf(fifo, sizeof fifo, "%s/fifo.conf", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  const char *cases[][2] = {
      {fifo, "is a FIFO, not a regular file"},
      {"/dev/null", "is a character device, not a regular file"},
      {dir, "is a directory, not a regular file"}};
  for (size_t i = 0; i < 3; i++) {
    conf c;
    conf_init(&c);
    ck_assert_int_eq(conf_parse_file(&c, cases[i][0]), -1);
    char want[160];
    snprintf(want, sizeof want, "%s: cannot read the config file: %s",
             cases[i][0], cases[i][1]);
    ck_assert_str_eq(c.errors.items[0], want);
    conf_free(&c);
  }
  unlink(fifo);
  rmdir(dir);
}
END_TEST

/* Binary data and NUL bytes are refused with the line and column, instead
 * of hiding the rest of a line (NUL) or passing as blank lines. */
START_TEST(not_text) {
  static const struct {
    const char *text;
    size_t len;
    const char *error;
  } cases[] = {
      {"devices = cpu\0, cuda:0\n", 23,
       "t.conf:1: column 14 holds a NUL byte: a config file must be text; "
       "not reading further"},
      {"log_level = info\n\x7f"
       "ELF\x02\x01\x01\0\0\0",
       27,
       "t.conf:2: column 1 holds the control character 0x7f: a config file "
       "must be text; not reading further"},
      {"[cpu]\nthreads = 2\x1b[0m\n", 22,
       "t.conf:2: column 12 holds the control character 0x1b: a config file "
       "must be text; not reading further"},
      {"devices = caf\xe9\n", 15,
       "t.conf:1: column 14 holds 0xe9, which is not valid UTF-8 there: a "
       "config file must be text; not reading further"},
      {"\xff\xfe[\0t\0y\0t\0o\0]\0", 14,
       "t.conf:1: column 1 holds 0xff, which is not valid UTF-8 there: a "
       "config file must be text; not reading further"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    conf c;
    char *errors = parse_n(&c, cases[i].text, cases[i].len, 0);
    ck_assert_str_eq(errors, cases[i].error);
    free(errors);
    conf_free(&c);
  }
  /* UTF-8 text, tabs and CRLF line ends are text */
  conf c;
  char *errors = parse(&c,
                       "; caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\xa6\x89\r\n"
                       "[cpu]\r\n\tthreads\t= 2\r\n",
                       1);
  ck_assert_str_eq(errors, "");
  ck_assert_str_eq(conf_lookup(&c, "cpu", "threads"), "2");
  free(errors);
  conf_free(&c);
}
END_TEST

/* Many keys: duplicates are still found, at the right lines (the check is
 * an index, not a scan of every earlier key). */
START_TEST(many_keys) {
  enum { N = 50000 };
  size_t cap = (size_t)N * 24 + 64, len = 0;
  char *text = malloc(cap);
  ck_assert_ptr_nonnull(text);
  len += (size_t)snprintf(text + len, cap - len, "[cpu]\n");
  for (int i = 0; i < N; i++)
    len += (size_t)snprintf(text + len, cap - len, "key%d = %d\n", i, i);
  len += (size_t)snprintf(text + len, cap - len, "key777 = again\n");
  conf c;
  char *errors = parse_n(&c, text, len, 0);
  ck_assert_str_eq(errors, "t.conf:50002: 'key777' is already set at line 779");
  ck_assert_str_eq(conf_lookup(&c, "cpu", "key49999"), "49999");
  ck_assert_ptr_null(conf_lookup(&c, "cpu", "key50000"));
  ck_assert_ptr_null(conf_lookup(&c, "opencl", "key1"));
  free(errors);
  free(text);
  conf_free(&c);
}
END_TEST

START_TEST(byte_order_mark) {
  conf c;
  char *errors = parse(&c, "\xEF\xBB\xBF[tyto]\ndevices = cpu\n", 1);
  ck_assert_str_eq(c.devices, "cpu");
  free(errors);
  conf_free(&c);
}
END_TEST

START_TEST(keys_under_a_broken_header_are_not_reported_again) {
  expect_error("[cpu\nthreads = 2\nflavour = x\n[opencl]\nplatform = y\n",
               "t.conf:1: section header is missing ']': '[cpu'");
}
END_TEST

/* A file of many errors reports the first CONF_MAX_ERRORS (20) and counts
 * the rest in one line: a binary or generated file does not flood the
 * log with a line per error. */
START_TEST(errors_are_capped) {
  char text[50 * 16 + 1];
  size_t n = 0;
  for (int i = 0; i < 50; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "bogus%02d = 1\n", i);
  conf c;
  char *errors = parse(&c, text, 0);
  ck_assert_uint_eq(c.errors.n, 21);
  ck_assert_msg(strstr(errors, "t.conf:20: unknown key 'bogus19'") &&
                    !strstr(errors, "bogus20") &&
                    strstr(errors, "t.conf: 30 more errors not shown (the "
                                   "first 20 are above)"),
                "%s", errors);
  free(errors);
  conf_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("conf");
  TCase *tc = tcase_create("parse");
  tcase_add_test(tc, good_file);
  tcase_add_test(tc, tyto_section_holds_global_keys);
  tcase_add_test(tc, indented_key_is_not_a_continuation);
  tcase_add_test(tc, syntax_errors_with_lines);
  tcase_add_test(tc, unknown_and_bad_values);
  tcase_add_test(tc, long_line);
  tcase_add_test(tc, missing_file);
  tcase_add_test(tc, not_a_regular_file);
  tcase_add_test(tc, not_text);
  tcase_add_test(tc, many_keys);
  tcase_add_test(tc, byte_order_mark);
  tcase_add_test(tc, keys_under_a_broken_header_are_not_reported_again);
  tcase_add_test(tc, errors_are_capped);
  suite_add_tcase(s, tc);
  return test_run(s);
}
