/*
 * tyto-train --plot: the training curves as an SVG file, written
 * atomically (a temporary file renamed over the path). Internal to tools/.
 */
#ifndef TYTO_TOOLS_PLOT_H
#define TYTO_TOOLS_PLOT_H

#include <stddef.h>

/* One series of (x, y) points. */
typedef struct plot_series {
  const char *label;
  const char *color; /* an SVG colour, "#1f77b4" */
  size_t n;
  const double *x, *y;
} plot_series;

/* Two panels side by side: loss against step (left), accuracy against
 * step (right, 0..1 shown as percent). Returns 0, or -1 with the reason in
 * err; on failure path is left as it was. */
int plot_write_svg(const char *path, const char *title, size_t n_loss,
                   const plot_series *loss, size_t n_acc,
                   const plot_series *acc, char *err, size_t n);

#endif /* TYTO_TOOLS_PLOT_H */
