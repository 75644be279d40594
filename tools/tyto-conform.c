/*
 * tyto-conform: the plugin conformance kit. Runs a plugin's devices through
 * the op catalogue against the CPU plugin as reference (test mode), times
 * heavy kernels on both (perf mode), or compiles differentiated graphs with
 * libtyto for both and compares their values and gradients (grad mode).
 * Test and perf mode drive the plugin through <tyto/plugin.h> alone, as a
 * vendor's own host would; grad mode goes through libtyto.
 *
 *   tyto-conform PLUGIN.so [--mode test|perf|grad] [--json]
 *                [--dtype f32,f64,f16,bf16,i32,i64] [--op NAME]
 *                [--reference CPU_PLUGIN.so]
 *
 * Exit status: 0 every supported case passed; 1 a case failed, or the
 * report could not be written to stdout; 2 usage error or a plugin could
 * not be loaded; 3 the plugin loaded but no device could be opened
 * (nothing was tested). See sdk/docs/conformance.md.
 */
#define _DEFAULT_SOURCE
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/version.h>

#include "conform/catalogue.h"
#include "conform/compare.h"
#include "conform/contract.h"
#include "conform/device.h"
#include "conform/fmt.h"
#include "conform/grad.h"
#include "conform/host.h"
#include "conform/perf.h"
#include "conform/specials.h"
#include "stdout_check.h"

#ifndef TYTO_CONFORM_PLUGIN_DIR
#define TYTO_CONFORM_PLUGIN_DIR "/usr/local/lib/tyto/plugins"
#endif

#define SEED UINT64_C(20240611)

/* The rows that are no op's: the device contract and the plugin's ABI. */
#define OP_CONTRACT "contract"
#define OP_ABI "abi"
#define NO_DTYPE UINT32_MAX

/* The dtypes the kit knows, in the order it runs them (ABI numbers). */
#define N_DTYPES 6

typedef struct options {
  const char *plugin, *reference, *op;
  int perf, grad, json;
  /* dtypes[d]: run dtype d; listed: only where the device lists it (no
   * --dtype given). */
  int dtypes[N_DTYPES], listed;
} options;

typedef struct tally {
  int pass, fail, oob, error, unsupported, noref;
} tally;

static void usage(FILE *f) {
  fprintf(f,
          "usage: tyto-conform PLUGIN.so [--mode test|perf|grad] [--json]\n"
          "                    [--dtype f32,f64,f16,bf16,i32,i64] [--op NAME]\n"
          "                    [--reference CPU_PLUGIN.so] [--version]\n"
          "Checks a tyto device plugin against the CPU plugin "
          "(sdk/docs/conformance.md).\n"
          "The reference defaults to %s/tyto_plugin_cpu.so.\n"
          "--dtype: the dtypes to run (default: every one the device lists);\n"
          "i32 and i64 run in test mode only (grad and perf mode skip them).\n",
          TYTO_CONFORM_PLUGIN_DIR);
}

/* --dtype's value: one or more of f32, f64, f16, bf16, i32, i64,
 * comma-separated. */
static int parse_dtypes(const char *v, options *o) {
  char buf[64];
  if (strlen(v) >= sizeof buf || v[0] == '\0')
    return -1;
  snprintf(buf, sizeof buf, "%s", v);
  for (int d = 0; d < N_DTYPES; d++)
    o->dtypes[d] = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    const uint32_t d = cf_fmt_parse(t);
    if (d >= N_DTYPES)
      return -1;
    o->dtypes[d] = 1;
  }
  o->listed = 0;
  return v[0] == ',' || v[strlen(v) - 1] == ',' || strstr(v, ",,") ? -1 : 0;
}

static int parse(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  for (int d = 0; d < N_DTYPES; d++)
    o->dtypes[d] = 1;
  o->listed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    /* --name=value, as the other tools take it: the value is inline, and
     * the next argument is not consumed. */
    char name[32];
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    int inline_v = eq != NULL && (size_t)(eq - a) < sizeof name;
    if (inline_v) {
      memcpy(name, a, (size_t)(eq - a));
      name[eq - a] = '\0';
      a = name;
      v = eq + 1;
    }
    /* An option that takes a value, given last: say what it expects. */
    static const char *const takes[][2] = {
        {"--mode", "test, perf or grad"},
        {"--dtype", "f32, f64, f16, bf16, i32 or i64, comma-separated"},
        {"--op", "an op or grad-mode group name"},
        {"--reference", "the path of the CPU plugin .so"}};
    int valued = 0;
    for (size_t k = 0; k < sizeof takes / sizeof takes[0]; k++)
      if (strcmp(a, takes[k][0]) == 0) {
        valued = 1;
        if (!v || !*v) {
          fprintf(stderr, "tyto-conform: %s needs a value (%s)\n", a,
                  takes[k][1]);
          return -1;
        }
      }
    if (inline_v && !valued) {
      fprintf(stderr, "tyto-conform: %s takes no value, got \"%s\"\n", a,
              argv[i]);
      return -1;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 1;
    } else if (strcmp(a, "--version") == 0) {
      printf("tyto-conform %s\n", tyto_version());
      return 1;
    } else if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (strcmp(a, "--mode") == 0) {
      o->perf = strcmp(v, "perf") == 0;
      o->grad = strcmp(v, "grad") == 0;
      if (!o->perf && !o->grad && strcmp(v, "test") != 0) {
        fprintf(stderr,
                "tyto-conform: --mode is test, perf or grad, not \"%s\"\n", v);
        return -1;
      }
    } else if (strcmp(a, "--dtype") == 0) {
      if (parse_dtypes(v, o) != 0) {
        fprintf(stderr,
                "tyto-conform: --dtype takes f32, f64, f16, bf16, i32 or i64, "
                "or "
                "several of them comma-separated (f32,bf16), not \"%s\"\n",
                v);
        return -1;
      }
    } else if (strcmp(a, "--op") == 0) {
      o->op = v; /* checked below, once the mode is known */
    } else if (strcmp(a, "--reference") == 0) {
      o->reference = v;
    } else if (a[0] == '-' || o->plugin) {
      fprintf(stderr, "tyto-conform: unexpected argument \"%s\"\n", argv[i]);
      return -1;
    } else {
      o->plugin = a;
    }
    if (valued && !inline_v)
      i++;
  }
  if (o->plugin == NULL) {
    fprintf(stderr, "tyto-conform: no plugin given\n");
    return -1;
  }
  if (o->op && o->grad && !cf_grad_group_known(o->op)) {
    fprintf(stderr,
            "tyto-conform: no group \"%s\" among grad mode's cases (names "
            "as in the table: elementwise, reduce, matmul, conv2d, ...)\n",
            o->op);
    return -1;
  }
  if (o->op && !o->grad && !cf_op_known(o->op) &&
      strcmp(o->op, OP_CONTRACT) != 0) {
    fprintf(stderr,
            "tyto-conform: no op \"%s\" in the catalogue (names as in "
            "the table: add, matmul, conv2d, fused, ...)\n",
            o->op);
    return -1;
  }
  return 0;
}

static const char *dtype_name(uint32_t d) {
  return cf_fmt_name(d);
}

/* ------------------------------------------------------------ test mode -- */

/* One row of the table and of the JSON. */
static void report(const options *o, json_t *cases, const cf_case *c,
                   const char *result, double err, const char *msg) {
  if (!o->json) {
    printf("%-22s %-5s %-34s %s%s%s\n", c->op_name, dtype_name(c->dtype),
           c->name, result, msg && msg[0] ? ": " : "", msg ? msg : "");
  } else {
    json_t *r =
        json_pack("{s:s, s:s, s:s, s:s}", "op", c->op_name, "dtype",
                  dtype_name(c->dtype), "case", c->name, "result", result);
    if (err >= 0)
      json_object_set_new(r, "max_normalised_error", json_real(err));
    if (msg && msg[0])
      json_object_set_new(r, "message", json_string(msg));
    json_array_append_new(cases, r);
  }
}

/* Runs one case on dut and ref and reports it. */
static void run_one(const options *o, cf_device *dut, cf_device *ref,
                    cf_case *c, json_t *cases, tally *t) {
  void *in[CF_MAX_IN], *out[CF_MAX_OUT];
  cf_run rd, rr;
  char msg[1400];
  if (cf_values_make(c, SEED ^ ((uint64_t)c->op << 32), in, out) != 0) {
    report(o, cases, c, "error", -1, "out of host memory");
    t->error++;
    return;
  }
  if (c->special) {
    /* Checked against ops.md (the host model), not the reference. */
    static const char *const result[] = {"pass", "FAIL", "unsupported",
                                         "out-of-bounds", "FAIL"};
    cf_verdict v = cf_special_run(dut, c, (const void *const *)in,
                                  (const void *const *)out, msg, sizeof msg);
    report(o, cases, c, result[v], -1, v == CF_V_PASS ? NULL : msg);
    switch (v) {
    case CF_V_PASS: t->pass++; break;
    case CF_V_FAIL: t->fail++; break;
    case CF_V_UNSUPPORTED: t->unsupported++; break;
    case CF_V_OOB: t->oob++; break;
    default: t->error++; break;
    }
    cf_values_free(in, out);
    return;
  }
  cf_status sd = cf_run_case(dut, c, (const void *const *)in,
                             (const void *const *)out, &rd);
  if (sd == CF_UNSUPPORTED) {
    report(o, cases, c, "unsupported", -1, rd.msg);
    t->unsupported++;
  } else if (sd == CF_FAILED) {
    report(o, cases, c, "FAIL", -1, rd.msg);
    t->error++;
  } else if (rd.oob) {
    report(o, cases, c, "out-of-bounds", -1, rd.oob_msg);
    t->oob++;
  } else if (cf_run_case(ref, c, (const void *const *)in,
                         (const void *const *)out, &rr) != CF_RAN) {
    snprintf(msg, sizeof msg, "the reference cannot run it: %s", rr.msg);
    report(o, cases, c, "no-reference", -1, msg);
    t->noref++;
  } else {
    cf_cmp cmp;
    cf_post_apply(c, rd.out);
    cf_post_apply(c, rr.out);
    cf_compare(c, rd.out, rr.out, &cmp);
    if (cf_cmp_pass(&cmp)) {
      report(o, cases, c, "pass", cmp.max_err, NULL);
      t->pass++;
    } else {
      if (cmp.specials)
        snprintf(msg, sizeof msg,
                 "%lld NaN/Inf positions differ, first output %u element "
                 "%lld: got %.9g, want %.9g",
                 (long long)cmp.specials, cmp.sp_out, (long long)cmp.sp_at,
                 cmp.sp_got, cmp.sp_want);
      else
        snprintf(msg, sizeof msg,
                 "max normalised error %.3g at output %u element %lld: got "
                 "%.9g, want %.9g (rtol %g, atol %g)",
                 cmp.max_err, cmp.out, (long long)cmp.at, cmp.got, cmp.want,
                 c->rtol, c->atol);
      report(o, cases, c, "FAIL", cmp.max_err, msg);
      t->fail++;
    }
    cf_run_clear(&rr);
  }
  cf_run_clear(&rd);
  cf_values_free(in, out);
}

/* A row of the device contract (contract.h). */
typedef struct contract_ctx {
  const options *o;
  json_t *cases;
  tally *t;
} contract_ctx;

static void contract_row(void *ctx, const char *check, cf_status st,
                         const char *msg) {
  contract_ctx *k = ctx;
  cf_case c;
  memset(&c, 0, sizeof c);
  c.op_name = OP_CONTRACT;
  c.dtype = NO_DTYPE;
  snprintf(c.name, sizeof c.name, "%s", check);
  if (st == CF_RAN)
    k->t->pass++;
  else if (st == CF_UNSUPPORTED)
    k->t->unsupported++;
  else
    k->t->fail++;
  report(k->o, k->cases, &c,
         st == CF_RAN           ? "pass"
         : st == CF_UNSUPPORTED ? "unsupported"
                                : "FAIL",
         -1, msg);
}

/* The dtypes of mask the device does not list, named ("f16, bf16"). */
static void unlisted(const cf_device *d, uint32_t mask, char *buf,
                     size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (uint32_t dt = 0; dt < N_DTYPES; dt++)
    if ((mask & TYTO_PLUGIN_DTYPE_BIT(dt)) && !cf_device_has_dtype(d, dt) &&
        n < size)
      n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? ", " : "",
                            dtype_name(dt));
}

/* A row that is no result: cases not run, and why. Counted nowhere. */
static void skipped(const options *o, json_t *cases, const cf_case *first,
                    const char *what, const char *why) {
  cf_case all = *first;
  snprintf(all.name, sizeof all.name, "%s", what);
  report(o, cases, &all, "skipped", -1, why);
}

/* Runs the cases cs[0 .. n) of one op: one row when the device refuses
 * every one (asked first, supports_op and prepare agreeing; where the two
 * disagree, the case's own row says so), else a row each. A case that
 * expects a refusal (CF_EXPECT_UNSUPPORTED) always has its own row. */
static void test_op(const options *o, cf_device *dut, cf_device *ref,
                    cf_case *cs, size_t n, json_t *cases, tally *t) {
  size_t refused = 0;
  char why[1024] = "";
  int expects_refusal = 0;
  for (size_t k = 0; k < n; k++)
    expects_refusal |= cs[k].expect == CF_EXPECT_UNSUPPORTED;
  for (size_t k = 0; k < n && dut->fns->supports_op && !expects_refusal; k++) {
    tyto_plugin_op_desc d;
    cf_case_desc(&cs[k], &d);
    tyto_plugin_error *e = dut->fns->supports_op(dut->dev, &d);
    if (e && e->code == TYTO_PLUGIN_ERR_UNSUPPORTED)
      refused++;
    if (e && k == 0)
      snprintf(why, sizeof why, "%s", e->msg);
    cf_error_free(e);
  }
  for (size_t k = 0; k < n && refused == n && dut->fns->prepare; k++) {
    tyto_plugin_op_desc d;
    tyto_plugin_kernel *kern = NULL;
    tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
    cf_case_desc(&cs[k], &d);
    tyto_plugin_error *e = dut->fns->prepare(dut->dev, &d, &kern, &ki);
    if (e == NULL || e->code != TYTO_PLUGIN_ERR_UNSUPPORTED)
      refused = 0;
    if (e == NULL && kern && dut->fns->kernel_release)
      dut->fns->kernel_release(dut->dev, kern);
    cf_error_free(e);
  }
  if (dut->fns->prepare == NULL) {
    refused = n;
    snprintf(why, sizeof why, "memory-only device (no prepare)");
  }
  if (refused == n && n > 0) {
    cf_case all = cs[0];
    snprintf(all.name, sizeof all.name, "(all %zu cases)", n);
    report(o, cases, &all, "unsupported", -1, why);
    t->unsupported += (int)n;
  } else {
    for (size_t k = 0; k < n; k++)
      run_one(o, dut, ref, &cs[k], cases, t);
  }
}

/* Runs the device contract and every case of every wanted dtype on dut.
 * By default (no --dtype) the dtypes the device lists; a case that also
 * needs a dtype the device does not list (a CAST to it, a program that
 * converts) is skipped, in one row per op. */
static int test_device(const options *o, cf_device *dut, cf_device *ref,
                       json_t *jdev, tally *t) {
  json_t *cases = json_array();
  if (o->op == NULL || strcmp(o->op, OP_CONTRACT) == 0) {
    contract_ctx k = {o, cases, t};
    cf_contract_run(dut, contract_row, &k);
  }
  for (uint32_t dt = 0; dt < N_DTYPES; dt++) {
    cf_case *cs = NULL;
    size_t n = 0;
    if (!o->dtypes[dt] || (o->op && strcmp(o->op, OP_CONTRACT) == 0))
      continue;
    const int has = cf_device_has_dtype(dut, dt);
    if (!has && o->listed)
      continue;
    if (cf_catalogue_build(dt, o->op, &cs, &n) != 0) {
      fprintf(stderr, "tyto-conform: out of host memory\n");
      json_decref(cases);
      return -1;
    }
    for (size_t i = 0; i < n;) {
      size_t j = i, kept = i;
      while (j < n && cs[j].op == cs[i].op)
        j++;
      if (!has) {
        cf_case all = cs[i];
        snprintf(all.name, sizeof all.name, "(all %zu cases)", j - i);
        report(o, cases, &all, "unsupported", -1,
               "the device does not list this dtype");
        t->unsupported += (int)(j - i);
        i = j;
        continue;
      }
      /* Cases that need another dtype the device lacks go last, told. */
      uint32_t lacking = 0;
      for (size_t k = i; k < j; k++) {
        char none[64];
        unlisted(dut, cf_case_dtypes(&cs[k]), none, sizeof none);
        if (none[0]) {
          lacking |= cf_case_dtypes(&cs[k]);
        } else if (k != kept) {
          cf_case tmp = cs[kept];
          cs[kept] = cs[k];
          cs[k] = tmp;
          kept++;
        } else {
          kept++;
        }
      }
      test_op(o, dut, ref, cs + i, kept - i, cases, t);
      if (kept < j) {
        char none[32], what[64], why[160];
        unlisted(dut, lacking, none, sizeof none);
        snprintf(what, sizeof what, "(%u cases with %.24s)",
                 (unsigned)(j - kept) % 100000u, none);
        snprintf(why, sizeof why,
                 "the device does not list %s: a case runs where it lists "
                 "every dtype the case has",
                 none);
        skipped(o, cases, &cs[kept], what, why);
      }
      i = j;
    }
    free(cs);
  }
  json_object_set_new(jdev, "cases", cases);
  return 0;
}

/* ------------------------------------------------------------ perf mode -- */

static void perf_device(const options *o, cf_device *dut, cf_device *ref,
                        json_t *jdev) {
  json_t *rows = json_array();
  if (!o->json)
    printf("%-10s %-5s %-28s %12s %12s  %s\n", "op", "dtype", "size", dut->id,
           ref->id, "unit");
  for (uint32_t dt = 0; dt < N_DTYPES; dt++) {
    cf_bench *b = NULL;
    size_t n = 0;
    if (!o->dtypes[dt] || (o->listed && !cf_device_has_dtype(dut, dt)) ||
        cf_fmt_int(dt) || cf_perf_benches(dt, &b, &n) != 0)
      continue;
    for (size_t i = 0; i < n; i++) {
      if (o->op && strcmp(o->op, b[i].c.op_name) != 0)
        continue;
      double s[2] = {0, 0};
      char err[2][1024] = {"", ""};
      cf_status st[2];
      cf_device *d[2] = {dut, ref};
      for (int k = 0; k < 2; k++)
        st[k] =
            cf_device_has_dtype(d[k], dt)
                ? cf_perf_time(d[k], &b[i], 2, 5, &s[k], err[k], sizeof err[k])
                : CF_UNSUPPORTED;
      char col[2][32];
      double rate[2] = {0, 0};
      for (int k = 0; k < 2; k++) {
        if (st[k] == CF_RAN && s[k] > 0) {
          rate[k] = b[i].work / s[k] * 1e-9;
          snprintf(col[k], sizeof col[k], "%.2f", rate[k]);
        } else {
          snprintf(col[k], sizeof col[k], "%s",
                   st[k] == CF_UNSUPPORTED ? "unsupported" : "error");
        }
      }
      if (!o->json) {
        printf("%-10s %-5s %-28s %12s %12s  %s\n", b[i].c.op_name,
               dtype_name(dt), b[i].c.name, col[0], col[1], b[i].unit);
        for (int k = 0; k < 2; k++)
          if (st[k] == CF_FAILED)
            printf("  %s: %s\n", d[k]->id, err[k]);
      }
      /* The rows also make the table's closing BENCH line. */
      {
        json_t *r =
            json_pack("{s:s, s:s, s:s, s:s}", "op", b[i].c.op_name, "dtype",
                      dtype_name(dt), "case", b[i].c.name, "unit", b[i].unit);
        for (int k = 0; k < 2; k++)
          json_object_set_new(
              r, k ? "reference" : "device",
              st[k] == CF_RAN
                  ? json_pack("{s:f, s:f}", "rate", rate[k], "seconds", s[k])
                  : json_string(col[k]));
        json_array_append_new(rows, r);
      }
    }
    free(b);
  }
  json_object_set_new(jdev, "perf", rows);
}

/* ----------------------------------------------------------------- main -- */

static int same_file(const char *a, const char *b) {
  char ra[PATH_MAX], rb[PATH_MAX];
  return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* The exit status, a report that did not reach stdout making it 1. */
static int exit_status(int rc) {
  return stdout_flushed("tyto-conform") != 0 && rc == 0 ? 1 : rc;
}

int main(int argc, char **argv) {
  options o;
  cf_plugin *dutp = calloc(1, sizeof *dutp), *refp = calloc(1, sizeof *refp);
  cf_plugin *rp = refp;
  cf_device ref;
  char err[2048], ref_path[PATH_MAX];
  int rc = 0, opened = 0, pr = parse(argc, argv, &o);
  json_t *root = NULL, *jdevs = NULL;
  tally t;

  /* A closed pipe is a write error we report, not a signal that kills
   * the kit. */
  signal(SIGPIPE, SIG_IGN);
  memset(&t, 0, sizeof t);
  if (dutp == NULL || refp == NULL || pr != 0) {
    if (pr < 0)
      usage(stderr);
    free(dutp);
    free(refp);
    return pr > 0 ? exit_status(0) : 2;
  }
  if (o.reference)
    snprintf(ref_path, sizeof ref_path, "%s", o.reference);
  else
    snprintf(ref_path, sizeof ref_path, "%s/tyto_plugin_cpu.so",
             TYTO_CONFORM_PLUGIN_DIR);
  if (o.grad) {
    free(dutp);
    free(refp);
    return exit_status(
        cf_grad_main(o.plugin, ref_path, o.op, o.json, o.dtypes, o.listed));
  }

  if (cf_plugin_load(dutp, o.plugin, err, sizeof err) != 0) {
    fprintf(stderr, "tyto-conform: %s\n", err);
    free(dutp);
    free(refp);
    return 2;
  }
  if (same_file(o.plugin, ref_path)) {
    rp = dutp; /* a second open of the same plugin's device */
  } else if (cf_plugin_load(refp, ref_path, err, sizeof err) != 0) {
    fprintf(stderr,
            "tyto-conform: reference: %s (pass the CPU plugin with "
            "--reference PATH)\n",
            err);
    cf_plugin_unload(dutp);
    free(dutp);
    free(refp);
    return 2;
  }
  if (rp->n_devices == 0 || cf_device_open(&ref, rp, 0, err, sizeof err)) {
    fprintf(stderr, "tyto-conform: reference %s: %s\n", ref_path,
            rp->n_devices ? err
                          : (rp->probe_error[0] ? rp->probe_error
                                                : "it claimed no device"));
    rc = 2;
    goto unload;
  }

  root = json_object();
  jdevs = json_array();
  json_object_set_new(
      root, "plugin",
      json_pack("{s:s, s:s, s:s, s:s, s:i, s:i}", "path", o.plugin, "name",
                dutp->info->name ? dutp->info->name : "", "vendor",
                dutp->info->vendor ? dutp->info->vendor : "", "version",
                dutp->info->version ? dutp->info->version : "", "abi_major",
                (int)dutp->info->abi_major, "abi_minor",
                (int)dutp->info->abi_minor));
  json_object_set_new(
      root, "reference",
      json_pack("{s:s, s:s}", "path", ref_path, "device", ref.id));
  json_object_set_new(root, "mode", json_string(o.perf ? "perf" : "test"));
  if (!o.json)
    printf("tyto-conform: plugin %s %s (%s, ABI %u.%u), reference %s\n",
           dutp->info->name, dutp->info->version ? dutp->info->version : "",
           dutp->info->vendor ? dutp->info->vendor : "", dutp->info->abi_major,
           dutp->info->abi_minor, ref.id);
  if (dutp->bad_claims[0]) {
    /* Claims libtyto would ignore: a fault of the probe. */
    cf_case c;
    memset(&c, 0, sizeof c);
    c.op_name = OP_ABI;
    c.dtype = NO_DTYPE;
    snprintf(c.name, sizeof c.name, "probe's claims");
    json_t *rows = json_array();
    report(&o, rows, &c, "FAIL", -1, dutp->bad_claims);
    json_object_set_new(root, "probe", rows);
    t.fail++;
  }
  if (dutp->n_devices == 0) {
    const char *why = dutp->probe_error[0] ? dutp->probe_error
                      : dutp->refusals[0]  ? dutp->refusals
                                           : "it claimed no device";
    if (!o.json)
      printf("no device: %s\n", why);
    json_object_set_new(root, "no_device", json_string(why));
  }
  for (uint32_t i = 0; i < dutp->n_devices; i++) {
    cf_device dut;
    json_t *jdev = json_object();
    if (cf_device_open(&dut, dutp, i, err, sizeof err) != 0) {
      if (!o.json)
        printf("%s\n", err);
      json_object_set_new(jdev, "open_error", json_string(err));
      json_array_append_new(jdevs, jdev);
      continue;
    }
    opened++;
    json_object_set_new(jdev, "id", json_string(dut.id));
    json_object_set_new(jdev, "name", json_string(dut.info.name));
    if (!o.json)
      printf("\ndevice %s \"%s\"\n", dut.id, dut.info.name);
    if (!o.json && !o.perf)
      printf("%-22s %-5s %-34s %s\n", "op", "dtype", "case", "result");
    if (o.perf)
      perf_device(&o, &dut, &ref, jdev);
    else if (test_device(&o, &dut, &ref, jdev, &t) != 0)
      rc = 2;
    json_array_append_new(jdevs, jdev);
    cf_device_close(&dut);
  }
  cf_device_close(&ref);
  json_object_set_new(root, "devices", jdevs);

  if (rc == 0 && opened == 0)
    rc = 3;
  else if (rc == 0 && (t.fail || t.oob || t.error))
    rc = 1;
  if (!o.perf) {
    json_object_set_new(root, "summary",
                        json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "pass",
                                  t.pass, "fail", t.fail, "out_of_bounds",
                                  t.oob, "error", t.error, "unsupported",
                                  t.unsupported, "no_reference", t.noref));
    if (!o.json)
      printf("\nsummary: %d pass, %d FAIL, %d out-of-bounds, %d error, %d "
             "unsupported, %d without reference -- %s\n",
             t.pass, t.fail, t.oob, t.error, t.unsupported, t.noref,
             rc == 0   ? "CONFORMS"
             : rc == 3 ? "NOTHING TESTED (no device could be opened)"
                       : "DOES NOT CONFORM");
  }
  json_object_set_new(root, "exit", json_integer(rc));
  if (o.json) {
    json_dumpf(root, stdout, JSON_INDENT(1));
    fputc('\n', stdout);
  } else if (o.perf) {
    /* As every benchmark of bench/: the table's numbers as one JSON line. */
    fputs("BENCH ", stdout);
    json_dumpf(root, stdout, JSON_COMPACT);
    fputc('\n', stdout);
  }
  rc = exit_status(rc);
  json_decref(root);
unload:
  if (rp != dutp)
    cf_plugin_unload(refp);
  cf_plugin_unload(dutp);
  free(dutp);
  free(refp);
  return rc;
}
