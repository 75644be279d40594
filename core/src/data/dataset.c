/*
 * Labelled datasets (an images IDX file and a labels IDX file checked
 * against each other) and batchers: seeded, reproducible minibatches over a
 * range of a dataset.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include "../graph/dtype.h"
#include "data.h"
#include "../runtime/error.h"
#include "../runtime/strlist.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct tyto_dataset {
  tyto_idx *images;
  int64_t count;
  int64_t classes;
  int64_t *labels;
};

struct tyto_batcher {
  const tyto_dataset *d;
  tyto_batcher_options o;
  int64_t *order; /* dataset indices of the current epoch, in order */
  int64_t batches;
  uint64_t epoch;
  int64_t next; /* next batch of the epoch */
  /* Byte images into f32: each byte's value, v * scale rounded as
   * idx_convert() does, looked up instead of converted (lut_ok). */
  int lut_ok;
  float lut[256];
};

/* ---------------------------------------------------------------------- */
/* Shuffling                                                               */

uint64_t data_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

void data_shuffle(int64_t *order, int64_t n, uint64_t seed, uint64_t epoch) {
  for (int64_t i = 0; i < n; i++)
    order[i] = i;
  uint64_t st = seed;
  st = data_splitmix64(&st) ^ epoch;
  for (int64_t i = n - 1; i > 0; i--) {
    uint64_t bound = (uint64_t)i + 1;
    /* Lemire's threshold: reject the 2^64 mod bound lowest draws so that
     * r % bound is uniform. */
    uint64_t threshold = (0 - bound) % bound;
    uint64_t r;
    do
      r = data_splitmix64(&st);
    while (r < threshold);
    int64_t j = (int64_t)(r % bound);
    int64_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

/* ---------------------------------------------------------------------- */
/* Datasets                                                                */

static tyto_status check_labels(tyto_dataset *d, const tyto_idx *lab,
                                const char *path, int64_t classes) {
  d->labels = malloc((size_t)(d->count ? d->count : 1) * sizeof *d->labels);
  if (!d->labels)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "dataset: out of memory");
  int64_t max = -1;
  for (int64_t i = 0; i < d->count; i++) {
    double v = idx_value(lab, i);
    if (!(v >= 0) || v != floor(v) || v >= 2147483648.0 ||
        (classes > 0 && v >= (double)classes))
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dataset: %s: label %lld is %g, expected a whole number "
                     "in [0, %lld)",
                     path, (long long)i, v,
                     (long long)(classes > 0 ? classes : 2147483647));
    d->labels[i] = (int64_t)v;
    if (d->labels[i] > max)
      max = d->labels[i];
  }
  d->classes = classes > 0 ? classes : max + 1;
  return TYTO_OK;
}

/* Floating-point images must hold numbers: a NaN or an infinity would
 * only show up later as a diverged training run. */
static tyto_status check_images(const tyto_idx *img, const char *path) {
  if (img->type != TYTO_IDX_F32 && img->type != TYTO_IDX_F64)
    return TYTO_OK;
  int64_t n = img->shape[0] * img->item;
  for (int64_t i = 0; i < n; i++) {
    double v = idx_value(img, i);
    if (!isfinite(v))
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "dataset: %s: image %lld holds %s at value %lld; images "
                     "must hold finite numbers",
                     path, (long long)(i / img->item),
                     isnan(v) ? "NaN"
                     : v > 0  ? "+inf"
                              : "-inf",
                     (long long)(i % img->item));
  }
  return TYTO_OK;
}

tyto_status tyto_dataset_load_idx(const char *images_path,
                                  const char *labels_path, int64_t classes,
                                  tyto_dataset **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "dataset: out is NULL");
  *out = NULL;
  if (classes < 0)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dataset: classes is %lld, expected >= 0 (0: from the "
                   "labels)",
                   (long long)classes);
  tyto_idx *img = NULL, *lab = NULL;
  tyto_status s = tyto_idx_load(images_path, &img);
  if (s == TYTO_OK)
    s = tyto_idx_load(labels_path, &lab);
  if (s != TYTO_OK)
    goto fail;
  if (img->rank < 2) {
    s = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                "dataset: %s: images have rank %d, expected 2 or more (items "
                "x dims of one item)",
                images_path, img->rank);
    goto fail;
  }
  if (lab->rank != 1) {
    s = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                "dataset: %s: labels have rank %d, expected 1 (one label per "
                "item)",
                labels_path, lab->rank);
    goto fail;
  }
  if ((s = check_images(img, images_path)) != TYTO_OK)
    goto fail;
  if (img->shape[0] != lab->shape[0]) {
    s = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                "dataset: %lld images but %lld labels (%s, %s)",
                (long long)img->shape[0], (long long)lab->shape[0], images_path,
                labels_path);
    goto fail;
  }
  tyto_dataset *d = calloc(1, sizeof *d);
  if (!d) {
    s = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "dataset: out of memory");
    goto fail;
  }
  d->count = img->shape[0];
  d->images = img;
  s = check_labels(d, lab, labels_path, classes);
  tyto_idx_free(lab);
  if (s != TYTO_OK) {
    tyto_dataset_free(d);
    return s;
  }
  *out = d;
  return TYTO_OK;
fail:
  tyto_idx_free(img);
  tyto_idx_free(lab);
  return s;
}

tyto_status tyto_dataset_load_dir(const char *dir, const char *split,
                                  int64_t classes, tyto_dataset **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "dataset: out is NULL");
  *out = NULL;
  if (!split || (strcmp(split, "train") && strcmp(split, "t10k")))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "dataset: split \"%s\", expected \"train\" or \"t10k\"",
                   split ? split : "(null)");
  struct stat st;
  if (!dir || stat(dir, &st) != 0)
    return rt_fail(dir && errno != ENOENT ? TYTO_ERR_IO : TYTO_ERR_NOT_FOUND,
                   "dataset: data directory %s: %s (expected the MNIST or "
                   "Fashion-MNIST files %s-images-idx3-ubyte[.gz] and "
                   "%s-labels-idx1-ubyte[.gz] there)",
                   dir ? dir : "(null)", dir ? strerror(errno) : "none given",
                   split, split);
  if (!S_ISDIR(st.st_mode))
    return rt_fail(TYTO_ERR_NOT_FOUND,
                   "dataset: data directory %s is not a directory", dir);
  char *img = rt_asprintf("%s/%s-images-idx3-ubyte", dir, split);
  char *lab = rt_asprintf("%s/%s-labels-idx1-ubyte", dir, split);
  tyto_status s =
      img && lab ? tyto_dataset_load_idx(img, lab, classes, out)
                 : rt_fail(TYTO_ERR_OUT_OF_MEMORY, "dataset: out of memory");
  free(img);
  free(lab);
  return s;
}

void tyto_dataset_free(tyto_dataset *d) {
  if (!d)
    return;
  tyto_idx_free(d->images);
  free(d->labels);
  free(d);
}

int64_t tyto_dataset_count(const tyto_dataset *d) {
  return d->count;
}

int tyto_dataset_item_rank(const tyto_dataset *d) {
  return d->images->rank - 1;
}

const int64_t *tyto_dataset_item_shape(const tyto_dataset *d) {
  return d->images->shape + 1;
}

int64_t tyto_dataset_item_size(const tyto_dataset *d) {
  return d->images->item;
}

int64_t tyto_dataset_classes(const tyto_dataset *d) {
  return d->classes;
}

int64_t tyto_dataset_label(const tyto_dataset *d, int64_t i) {
  return i >= 0 && i < d->count ? d->labels[i] : -1;
}

tyto_status tyto_dataset_read_images(const tyto_dataset *d, int64_t first,
                                     int64_t n, tyto_dtype dtype, double scale,
                                     void *dst, size_t bytes) {
  return tyto_idx_read(d->images, first, n, dtype, scale, dst, bytes);
}

/* ---------------------------------------------------------------------- */
/* Batchers                                                                */

void tyto_batcher_options_init(tyto_batcher_options *opts) {
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
  opts->count = -1;
  opts->batch_size = 32;
  opts->shuffle = 1;
  opts->dtype = TYTO_F32;
  opts->scale = 1;
  opts->one_hot = 1;
}

tyto_status tyto_batcher_new(const tyto_dataset *d,
                             const tyto_batcher_options *opts,
                             tyto_batcher **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "batcher: out is NULL");
  *out = NULL;
  if (!d)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "batcher: no dataset given");
  tyto_batcher_options o;
  tyto_batcher_options_init(&o);
  if (opts) {
    size_t n = opts->struct_size < sizeof o ? opts->struct_size : sizeof o;
    memcpy(&o, opts, n);
    o.struct_size = sizeof o;
  }
  if (o.count == -1 && o.first >= 0 && o.first <= d->count)
    o.count = d->count - o.first;
  if (o.first < 0 || o.count < 0 || o.first > d->count ||
      o.count > d->count - o.first)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "batcher: items [%lld, %lld + %lld) outside the dataset's "
                   "%lld items",
                   (long long)o.first, (long long)o.first, (long long)o.count,
                   (long long)d->count);
  if (o.batch_size < 1)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "batcher: batch_size %lld, expected 1 or more",
                   (long long)o.batch_size);
  if (!tyto_dtype_size(o.dtype))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "batcher: unknown dtype %d (expected f32, f64, f16 or "
                   "bf16)",
                   (int)o.dtype);
  /* Class indices must survive the dtype: bf16 holds every integer only up
   * to 256, f16 up to 2048. */
  const dtype_info *di = dtype_info_of(o.dtype);
  for (int64_t c = 0; !o.one_hot && c < d->classes; c++) {
    _Alignas(8) unsigned char e[8];
    di->store(e, 0, (double)c);
    if (di->load(e, 0) != (double)c)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "batcher: class index %lld is not exact in %s (the "
                     "dataset has %lld classes); use one_hot or f32",
                     (long long)c, tyto_dtype_name(o.dtype),
                     (long long)d->classes);
  }
  tyto_batcher *b = calloc(1, sizeof *b);
  if (b)
    b->order = malloc((size_t)(o.count ? o.count : 1) * sizeof *b->order);
  if (!b || !b->order) {
    free(b);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "batcher: out of memory");
  }
  b->d = d;
  b->o = o;
  if (d->images->type == TYTO_IDX_U8 && o.dtype == TYTO_F32) {
    for (int v = 0; v < 256; v++) {
      unsigned char byte = (unsigned char)v;
      tyto_idx one = *d->images;
      one.data = &byte;
      idx_convert(&one, 0, 1, TYTO_F32, o.scale, &b->lut[v]);
    }
    b->lut_ok = 1;
  }
  b->batches = o.drop_last ? o.count / o.batch_size
                           : (o.count + o.batch_size - 1) / o.batch_size;
  tyto_batcher_seek(b, 0, 0);
  *out = b;
  return TYTO_OK;
}

void tyto_batcher_free(tyto_batcher *b) {
  if (!b)
    return;
  free(b->order);
  free(b);
}

tyto_status tyto_batcher_seek(tyto_batcher *b, uint64_t epoch, int64_t batch) {
  if (batch < 0 || batch > b->batches)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "batcher: batch %lld, expected 0 to %lld (batches per "
                   "epoch)",
                   (long long)batch, (long long)b->batches);
  int64_t n = b->o.count;
  if (b->o.shuffle)
    data_shuffle(b->order, n, b->o.seed, epoch);
  else
    for (int64_t i = 0; i < n; i++)
      b->order[i] = i;
  for (int64_t i = 0; i < n; i++)
    b->order[i] += b->o.first;
  b->epoch = epoch;
  b->next = batch;
  return TYTO_OK;
}

int64_t tyto_batcher_batches(const tyto_batcher *b) {
  return b->batches;
}

int64_t tyto_batcher_count(const tyto_batcher *b) {
  return b->o.drop_last ? b->batches * b->o.batch_size : b->o.count;
}

int64_t tyto_batcher_item(const tyto_batcher *b, int64_t k) {
  return k >= 0 && k < b->o.count ? b->order[k] : -1;
}

uint64_t tyto_batcher_epoch(const tyto_batcher *b) {
  return b->epoch;
}

int64_t tyto_batcher_position(const tyto_batcher *b) {
  return b->next;
}

tyto_status tyto_batcher_next(tyto_batcher *b, void *images, size_t image_bytes,
                              void *labels, size_t label_bytes,
                              int64_t *filled) {
  if (filled)
    *filled = 0;
  const tyto_dataset *d = b->d;
  size_t es = tyto_dtype_size(b->o.dtype);
  size_t bs = (size_t)b->o.batch_size;
  size_t item = (size_t)d->images->item;
  size_t lrow = b->o.one_hot ? (size_t)d->classes : 1;
  size_t iwant = bs * item * es, lwant = bs * lrow * es;
  if ((images && image_bytes != iwant) || (!images && image_bytes))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "batcher: a batch of %zu images of %zu %s values needs "
                   "%zu bytes, got %zu%s",
                   bs, item, tyto_dtype_name(b->o.dtype), iwant, image_bytes,
                   images ? "" : " with a NULL buffer");
  if ((labels && label_bytes != lwant) || (!labels && label_bytes))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "batcher: a batch of %zu labels (%s) needs %zu bytes, got "
                   "%zu%s",
                   bs, b->o.one_hot ? "one-hot rows" : "class indices", lwant,
                   label_bytes, labels ? "" : " with a NULL buffer");
  if (b->next >= b->batches) {
    tyto_batcher_seek(b, b->epoch + 1, 0);
    return TYTO_OK;
  }
  int64_t start = b->next * b->o.batch_size;
  int64_t n = b->o.count - start < b->o.batch_size ? b->o.count - start
                                                   : b->o.batch_size;
  if (images) {
    /* Only the rows past the last item are zeroed: the rest is written. */
    memset((unsigned char *)images + (size_t)n * item * es, 0,
           iwant - (size_t)n * item * es);
    for (int64_t k = 0; k < n; k++) {
      int64_t at = b->order[start + k] * (int64_t)item;
      if (b->lut_ok) {
        const unsigned char *src = d->images->data + at;
        float *dst = (float *)images + (size_t)k * item;
        for (size_t i = 0; i < item; i++)
          dst[i] = b->lut[src[i]];
      } else {
        idx_convert(d->images, at, (int64_t)item, b->o.dtype, b->o.scale,
                    (unsigned char *)images + (size_t)k * item * es);
      }
    }
  }
  if (labels) {
    memset(labels, 0, lwant);
    for (int64_t k = 0; k < n; k++) {
      int64_t l = d->labels[b->order[start + k]];
      size_t at = (size_t)k * lrow + (b->o.one_hot ? (size_t)l : 0);
      double v = b->o.one_hot ? 1.0 : (double)l;
      dtype_info_of(b->o.dtype)->store(labels, at, v);
    }
  }
  b->next++;
  if (filled)
    *filled = n;
  return TYTO_OK;
}
