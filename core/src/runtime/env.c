/*
 * The environment variables that change how programs compile and run
 * (TYTO_GRAPHS, TYTO_PROFILE, TYTO_PLACEMENT), read where they act and
 * checked once more when a context is made, so that a bad value is
 * reported at start-up rather than when the first program compiles.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error.h"
#include "runtime.h"

int rt_env_switch(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v)
    return -1;
  static const char *const on[] = {"1", "on", "yes", "true"};
  static const char *const off[] = {"0", "off", "no", "false"};
  for (size_t i = 0; i < sizeof on / sizeof *on; i++) {
    if (strcasecmp(v, on[i]) == 0)
      return 1;
    if (strcasecmp(v, off[i]) == 0)
      return 0;
  }
  rt_fail(TYTO_ERR_INVALID_ARGUMENT,
          "%s=%.64s: expected on or off (1, yes, true; 0, no, false), or "
          "leave it unset",
          name, v);
  return -2;
}

tyto_status rt_env_placement(tyto_place_policy *policy, int *strict) {
  const char *v = getenv("TYTO_PLACEMENT");
  if (!v || !*v)
    return TYTO_OK;
  const char *s = v;
  while (*s) {
    size_t n = strcspn(s, ",");
    if (n == 6 && strncasecmp(s, "pinned", n) == 0)
      *policy = *policy ? *policy : TYTO_PLACE_PINNED;
    else if (n == 4 && strncasecmp(s, "auto", n) == 0)
      *policy = *policy ? *policy : TYTO_PLACE_AUTO;
    else if (n == 6 && strncasecmp(s, "strict", n) == 0)
      *strict = 1;
    else if (n)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "TYTO_PLACEMENT is \"%.100s\": \"%.*s\" is not a word "
                     "it takes (pinned, auto, strict, separated by commas)",
                     v, (int)(n > 40 ? 40 : n), s);
    s += n + (s[n] == ',');
  }
  return TYTO_OK;
}

tyto_status rt_env_check(void) {
  tyto_place_policy policy = 0;
  int strict = 0;
  if (rt_env_switch("TYTO_GRAPHS") == -2 ||
      rt_env_switch("TYTO_PROFILE") == -2 ||
      /* the CPU plugin's, which cannot say why it ignores a bad value */
      rt_env_switch("TYTO_CPU_NO_DNNL") == -2 ||
      rt_env_switch("TYTO_CPU_NO_HW16") == -2 ||
      rt_env_placement(&policy, &strict) != TYTO_OK)
    return TYTO_ERR_CONFIG;
  return TYTO_OK;
}
