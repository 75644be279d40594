/*
 * A small SVG line-chart writer for tyto-train --plot: axes with "nice"
 * ticks (1, 2, 5 times a power of ten), one polyline per series, a legend.
 */
#define _POSIX_C_SOURCE 200809L

#include "plot.h"
#include "runtime/file.h" /* libtyto's atomic replace, compiled in */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  PANEL_W = 480,
  PANEL_H = 320,
  MARGIN_L = 64,
  MARGIN_R = 16,
  MARGIN_T = 40,
  MARGIN_B = 48
};

static double nice_step(double span, int ticks) {
  double raw = span / ticks, p = pow(10, floor(log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void range_of(size_t n, const plot_series *s, int want_y, double *lo,
                     double *hi) {
  *lo = INFINITY;
  *hi = -INFINITY;
  for (size_t k = 0; k < n; k++)
    for (size_t i = 0; i < s[k].n; i++) {
      double v = want_y ? s[k].y[i] : s[k].x[i];
      if (isfinite(v)) {
        *lo = v < *lo ? v : *lo;
        *hi = v > *hi ? v : *hi;
      }
    }
  if (!isfinite(*lo)) {
    *lo = 0;
    *hi = 1;
  }
  if (*hi - *lo < 1e-12) {
    *lo -= 0.5;
    *hi += 0.5;
  }
}

static void panel(FILE *f, int x0, const char *title, const char *ylabel,
                  size_t n, const plot_series *s, int percent) {
  double xlo, xhi, ylo, yhi;
  range_of(n, s, 0, &xlo, &xhi);
  range_of(n, s, 1, &ylo, &yhi);
  if (ylo > 0 && !percent && ylo < 0.5 * yhi)
    ylo = 0;
  double xs = nice_step(xhi - xlo, 5), ys = nice_step(yhi - ylo, 5);
  xlo = floor(xlo / xs) * xs;
  xhi = ceil(xhi / xs) * xs;
  ylo = floor(ylo / ys) * ys;
  yhi = ceil(yhi / ys) * ys;
  int pw = PANEL_W - MARGIN_L - MARGIN_R, ph = PANEL_H - MARGIN_T - MARGIN_B;
  int left = x0 + MARGIN_L, top = MARGIN_T;
#define PX(v) (left + (double)pw * ((v)-xlo) / (xhi - xlo))
#define PY(v) (top + (double)ph * (1 - ((v)-ylo) / (yhi - ylo)))
  fprintf(f,
          "<text x=\"%d\" y=\"24\" font-size=\"15\" "
          "text-anchor=\"middle\">%s</text>\n",
          left + pw / 2, title);
  fprintf(f,
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
          "stroke=\"#444\"/>\n",
          left, top, pw, ph);
  for (double v = xlo; v <= xhi + xs / 2; v += xs)
    fprintf(
        f,
        "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" "
        "text-anchor=\"middle\">%g</text>\n",
        PX(v), top, PX(v), top + ph, PX(v), top + ph + 16, v);
  for (double v = ylo; v <= yhi + ys / 2; v += ys)
    fprintf(
        f,
        "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
        "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" "
        "text-anchor=\"end\">%g%s</text>\n",
        left, PY(v), left + pw, PY(v), left - 6, PY(v) + 4,
        percent ? 100 * v : v, percent ? "%" : "");
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" font-size=\"12\" "
          "text-anchor=\"middle\">step</text>\n",
          left + pw / 2, top + ph + 36);
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" "
          "transform=\"rotate(-90 %d %d)\">%s</text>\n",
          x0 + 16, top + ph / 2, x0 + 16, top + ph / 2, ylabel);
  for (size_t k = 0; k < n; k++) {
    fprintf(
        f,
        "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
        s[k].color);
    for (size_t i = 0; i < s[k].n; i++)
      if (isfinite(s[k].y[i]))
        fprintf(f, "%.1f,%.1f ", PX(s[k].x[i]), PY(s[k].y[i]));
    fprintf(f, "\"/>\n");
    if (s[k].n == 1)
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
              PX(s[k].x[0]), PY(s[k].y[0]), s[k].color);
    fprintf(f,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
            "stroke-width=\"2\"/>"
            "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n",
            left + 8, top + 14 + 16 * (int)k, left + 28, top + 14 + 16 * (int)k,
            s[k].color, left + 32, top + 18 + 16 * (int)k, s[k].label);
  }
#undef PX
#undef PY
}

int plot_write_svg(const char *path, const char *title, size_t n_loss,
                   const plot_series *loss, size_t n_acc,
                   const plot_series *acc, char *err, size_t n) {
  rt_replace r;
  const char *why = NULL, *step = NULL;
  if (rt_replace_open(&r, path, &why) != 0) {
    snprintf(err, n, "%s: %s", path, why);
    return -1;
  }
  FILE *f = rt_replace_stream(&r);
  if (!f) {
    snprintf(err, n, "%s: %s", path, strerror(errno));
    rt_replace_abort(&r);
    return -1;
  }
  fprintf(
      f,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\">\n<title>%s</title>\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      2 * PANEL_W, PANEL_H, title);
  panel(f, 0, "loss", "loss", n_loss, loss, 0);
  panel(f, PANEL_W, "accuracy", "accuracy", n_acc, acc, 1);
  fprintf(f, "</svg>\n");
  if (rt_replace_commit(&r, 0, &why, &step) != 0) {
    snprintf(err, n, "%s: %s", path, why);
    return -1;
  }
  return 0;
}
