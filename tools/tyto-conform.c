/*
 * tyto-conform: the plugin conformance kit. Runs a plugin's devices through
 * the op catalogue against the CPU plugin as reference (test mode), times
 * heavy kernels on both (perf mode), or compiles differentiated graphs with
 * libtyto for both and compares their values and gradients (grad mode).
 * Test and perf mode drive the plugin through <tyto/plugin.h> alone, as a
 * vendor's own host would; grad mode goes through libtyto.
 *
 *   tyto-conform PLUGIN.so [--mode test|perf|grad] [--json] [--dtype f32|f64]
 *                [--op NAME] [--reference CPU_PLUGIN.so]
 *
 * Exit status: 0 every supported case passed; 1 a case failed; 2 usage
 * error or a plugin could not be loaded; 3 the plugin loaded but no device
 * could be opened (nothing was tested). See sdk/docs/conformance.md.
 */
#define _DEFAULT_SOURCE
#include "config.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/graph.h>

#include "conform/catalogue.h"
#include "conform/compare.h"
#include "conform/contract.h"
#include "conform/device.h"
#include "conform/grad.h"
#include "conform/host.h"
#include "conform/perf.h"
#include "conform/specials.h"

#ifndef TYTO_CONFORM_PLUGIN_DIR
#define TYTO_CONFORM_PLUGIN_DIR "/usr/local/lib/tyto/plugins"
#endif

#define SEED UINT64_C(20240611)

/* The rows that are no op's: the device contract and the plugin's ABI. */
#define OP_CONTRACT "contract"
#define OP_ABI "abi"
#define NO_DTYPE UINT32_MAX

typedef struct options {
  const char *plugin, *reference, *op;
  int perf, grad, json, dtypes[2]; /* dtypes: run F32, F64 */
} options;

typedef struct tally {
  int pass, fail, oob, error, unsupported, noref;
} tally;

static void usage(FILE *f) {
  fprintf(f,
          "usage: tyto-conform PLUGIN.so [--mode test|perf|grad] [--json]\n"
          "                    [--dtype f32|f64] [--op NAME]\n"
          "                    [--reference CPU_PLUGIN.so]\n"
          "Checks a tyto device plugin against the CPU plugin "
          "(sdk/docs/conformance.md).\n"
          "The reference defaults to %s/tyto_plugin_cpu.so.\n",
          TYTO_CONFORM_PLUGIN_DIR);
}

static int parse(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->dtypes[0] = o->dtypes[1] = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 1;
    } else if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (strcmp(a, "--mode") == 0 && v) {
      o->perf = strcmp(v, "perf") == 0;
      o->grad = strcmp(v, "grad") == 0;
      if (!o->perf && !o->grad && strcmp(v, "test") != 0) {
        fprintf(stderr,
                "tyto-conform: --mode is test, perf or grad, not \"%s\"\n", v);
        return -1;
      }
      i++;
    } else if (strcmp(a, "--dtype") == 0 && v) {
      if (strcmp(v, "f32") != 0 && strcmp(v, "f64") != 0) {
        fprintf(stderr, "tyto-conform: --dtype is f32 or f64, not \"%s\"\n", v);
        return -1;
      }
      o->dtypes[0] = strcmp(v, "f32") == 0;
      o->dtypes[1] = !o->dtypes[0];
      i++;
    } else if (strcmp(a, "--op") == 0 && v) {
      o->op = v; /* checked below, once the mode is known */
      i++;
    } else if (strcmp(a, "--reference") == 0 && v) {
      o->reference = v;
      i++;
    } else if (a[0] == '-' || o->plugin) {
      fprintf(stderr, "tyto-conform: unexpected argument \"%s\"\n", a);
      return -1;
    } else {
      o->plugin = a;
    }
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

/* ABI dtypes carry the graph's numbers: the core's table names them. */
static const char *dtype_name(uint32_t d) {
  return d < 32 && tyto_dtype_size((tyto_dtype)d)
             ? tyto_dtype_name((tyto_dtype)d)
             : "-";
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

/* Runs the device contract and every case of every wanted dtype on dut.
 * Ops whose every case is unsupported print as one row. */
static int test_device(const options *o, cf_device *dut, cf_device *ref,
                       json_t *jdev, tally *t) {
  json_t *cases = json_array();
  if (o->op == NULL || strcmp(o->op, OP_CONTRACT) == 0) {
    contract_ctx k = {o, cases, t};
    cf_contract_run(dut, contract_row, &k);
  }
  for (uint32_t dt = 0; dt < 2; dt++) {
    cf_case *cs = NULL;
    size_t n = 0;
    if (!o->dtypes[dt] || (o->op && strcmp(o->op, OP_CONTRACT) == 0))
      continue;
    if (cf_catalogue_build(dt, o->op, &cs, &n) != 0) {
      fprintf(stderr, "tyto-conform: out of host memory\n");
      json_decref(cases);
      return -1;
    }
    const int has = cf_device_has_dtype(dut, dt);
    for (size_t i = 0; i < n;) {
      size_t j = i;
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
      /* Ask first: one row for an op the device refuses in every case,
       * when prepare refuses each of them too (where the two disagree,
       * the case's own row says so). */
      size_t refused = 0;
      char why[1024] = "";
      for (size_t k = i; k < j && dut->fns->supports_op; k++) {
        tyto_plugin_op_desc d;
        cf_case_desc(&cs[k], &d);
        tyto_plugin_error *e = dut->fns->supports_op(dut->dev, &d);
        if (e && e->code == TYTO_PLUGIN_ERR_UNSUPPORTED)
          refused++;
        if (e && k == i)
          snprintf(why, sizeof why, "%s", e->msg);
        cf_error_free(e);
      }
      for (size_t k = i; k < j && refused == j - i && dut->fns->prepare; k++) {
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
        refused = j - i;
        snprintf(why, sizeof why, "memory-only device (no prepare)");
      }
      if (refused == j - i) {
        cf_case all = cs[i];
        snprintf(all.name, sizeof all.name, "(all %zu cases)", j - i);
        report(o, cases, &all, "unsupported", -1, why);
        t->unsupported += (int)(j - i);
      } else {
        for (size_t k = i; k < j; k++)
          run_one(o, dut, ref, &cs[k], cases, t);
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
  for (uint32_t dt = 0; dt < 2; dt++) {
    cf_bench *b = NULL;
    size_t n = 0;
    if (!o->dtypes[dt] || cf_perf_benches(dt, &b, &n) != 0)
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

int main(int argc, char **argv) {
  options o;
  cf_plugin *dutp = calloc(1, sizeof *dutp), *refp = calloc(1, sizeof *refp);
  cf_plugin *rp = refp;
  cf_device ref;
  char err[2048], ref_path[PATH_MAX];
  int rc = 0, opened = 0, pr = parse(argc, argv, &o);
  json_t *root = NULL, *jdevs = NULL;
  tally t;

  memset(&t, 0, sizeof t);
  if (dutp == NULL || refp == NULL || pr != 0) {
    if (pr < 0)
      usage(stderr);
    free(dutp);
    free(refp);
    return pr > 0 ? 0 : 2;
  }
  if (o.reference)
    snprintf(ref_path, sizeof ref_path, "%s", o.reference);
  else
    snprintf(ref_path, sizeof ref_path, "%s/tyto_plugin_cpu.so",
             TYTO_CONFORM_PLUGIN_DIR);
  if (o.grad) {
    free(dutp);
    free(refp);
    return cf_grad_main(o.plugin, ref_path, o.op, o.json, o.dtypes);
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
  json_decref(root);
unload:
  if (rp != dutp)
    cf_plugin_unload(refp);
  cf_plugin_unload(dutp);
  free(dutp);
  free(refp);
  return rc;
}
