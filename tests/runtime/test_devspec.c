/* Device selection lists (TYTO_DEVICES and the config's `devices`). */
#include "common.h"

#include "runtime/devspec.h"

static devspec parse_ok(const char *text) {
  devspec s;
  char err[512] = "";
  int rc = devspec_parse(text, &s, err, sizeof err);
  ck_assert_msg(rc == 0, "'%s' should parse, got: %s", text, err);
  return s;
}

static void parse_fails(const char *text, const char *message) {
  devspec s;
  char err[512] = "";
  ck_assert_int_eq(devspec_parse(text, &s, err, sizeof err), -1);
  ck_assert_str_eq(err, message);
}

START_TEST(priority_list) {
  devspec s = parse_ok("cuda:0,opencl:*,cpu");
  ck_assert_uint_eq(s.n, 3);
  ck_assert_str_eq(s.items[0].plugin, "cuda");
  ck_assert_int_eq(s.items[0].index, 0);
  ck_assert_str_eq(s.items[1].plugin, "opencl");
  ck_assert_int_eq(s.items[1].index, DEVSPEC_ALL);
  ck_assert_str_eq(s.items[2].plugin, "cpu");
  ck_assert_int_eq(s.items[2].index, DEVSPEC_ALL);
  for (size_t i = 0; i < 3; i++)
    ck_assert_int_eq(s.items[i].optional, 0);
  devspec_free(&s);
}
END_TEST

START_TEST(whitespace_optional_and_numbers) {
  devspec s = parse_ok("  cuda:12? , my_vendor2:3 ,cpu?");
  ck_assert_uint_eq(s.n, 3);
  ck_assert_str_eq(s.items[0].plugin, "cuda");
  ck_assert_int_eq(s.items[0].index, 12);
  ck_assert_int_eq(s.items[0].optional, 1);
  ck_assert_str_eq(s.items[1].plugin, "my_vendor2");
  ck_assert_int_eq(s.items[1].index, 3);
  ck_assert_int_eq(s.items[1].optional, 0);
  ck_assert_int_eq(s.items[2].index, DEVSPEC_ALL);
  ck_assert_int_eq(s.items[2].optional, 1);
  devspec_free(&s);
}
END_TEST

START_TEST(errors_name_the_entry) {
  parse_fails("", "empty device list (expected entries like 'cpu', 'cuda:0' "
                  "or 'opencl:*', separated by commas)");
  parse_fails("   ", "empty device list (expected entries like 'cpu', "
                     "'cuda:0' or 'opencl:*', separated by commas)");
  parse_fails("cpu,,cuda", "device entry 2 is empty (stray ',')");
  parse_fails("cpu,", "device entry 2 is empty (stray ',')");
  parse_fails("cuda:x", "device entry 1 ('cuda:x'): expected a device number "
                        "or '*' after ':'");
  parse_fails("cpu,cuda:", "device entry 2 ('cuda:'): expected a device "
                           "number or '*' after ':'");
  parse_fails("cuda:-1", "device entry 1 ('cuda:-1'): expected a device "
                         "number or '*' after ':'");
  parse_fails("cuda:1234567890", "device entry 1 ('cuda:1234567890'): "
                                 "expected a device number or '*' after ':'");
  parse_fails("CUDA:0", "device entry 1 ('CUDA:0'): plugin names use a-z, "
                        "0-9 and '_' only");
  parse_fails("cpu, :0", "device entry 2 (':0'): missing plugin name");
  parse_fails("cuda:0:1", "device entry 1 ('cuda:0:1'): expected a device "
                          "number or '*' after ':'");
}
END_TEST

int main(void) {
  Suite *s = suite_create("devspec");
  TCase *tc = tcase_create("parse");
  tcase_add_test(tc, priority_list);
  tcase_add_test(tc, whitespace_optional_and_numbers);
  tcase_add_test(tc, errors_name_the_entry);
  suite_add_tcase(s, tc);
  return test_run(s);
}
