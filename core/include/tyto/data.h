/*
 * Training data: IDX files (the format of MNIST and Fashion-MNIST), labelled
 * datasets built from a pair of them, and batchers that hand out seeded,
 * reproducible minibatches of a range of a dataset.
 *
 * An IDX file is a 4-byte magic (two zero bytes, a type code, the rank), one
 * big-endian uint32 per dimension, then the elements, big-endian, row-major.
 * Files are read whole into host memory; a name ending in ".gz" (or a name
 * that does not exist while name".gz" does) is read through zlib. Every
 * check that fails says what was expected and what was found (see
 * docs/data.md for the list).
 *
 * A train/validation split is two ranges of one dataset: a batcher over
 * items [0, n - v) and another over [n - v, n). Datasets are read-only once
 * loaded; several batchers may share one, each used by one thread at a
 * time.
 */
#ifndef TYTO_DATA_H
#define TYTO_DATA_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/graph.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------- */
/* IDX files                                                               */

typedef struct tyto_idx tyto_idx;

/* IDX element types: the third byte of the magic. */
typedef enum tyto_idx_type {
  TYTO_IDX_U8 = 0x08,
  TYTO_IDX_I8 = 0x09,
  TYTO_IDX_I16 = 0x0B,
  TYTO_IDX_I32 = 0x0C,
  TYTO_IDX_F32 = 0x0D,
  TYTO_IDX_F64 = 0x0E
} tyto_idx_type;

#define TYTO_IDX_MAX_RANK 8

/* Reads and checks an IDX file: the magic, the rank (1..8), and that the
 * data is exactly the product of the dims times the element size. On
 * success *out owns the file's contents; free with tyto_idx_free(). Errors:
 * TYTO_ERR_NOT_FOUND for a missing file (the message names every path
 * looked for); TYTO_ERR_IO when reading fails (the system's or zlib's
 * reason); TYTO_ERR_INVALID_ARGUMENT for content that is not a valid IDX
 * file (bad magic, type code or rank, a header shorter than its dims, a
 * truncated or over-long file: expected and found bytes);
 * TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_idx_load(const char *path, tyto_idx **out);
TYTO_API void tyto_idx_free(tyto_idx *x); /* NULL ok */

/* Number of dims, 1..TYTO_IDX_MAX_RANK. */
TYTO_API int tyto_idx_rank(const tyto_idx *x);
/* The dims, rank of them. Owned by x. */
TYTO_API const int64_t *tyto_idx_shape(const tyto_idx *x);
/* Number of items: the first dim. */
TYTO_API int64_t tyto_idx_count(const tyto_idx *x);
TYTO_API tyto_idx_type tyto_idx_elem_type(const tyto_idx *x);
/* "u8", "i8", "i16", "i32", "f32", "f64"; "?" for another value. */
TYTO_API const char *tyto_idx_type_name(tyto_idx_type type);

/* Converts items [first, first + n) (each the product of the dims after the
 * first) to dtype, multiplied by scale, into dst, which holds exactly
 * `bytes` = n * item elements * dtype size. Errors:
 * TYTO_ERR_INVALID_ARGUMENT for a range outside the file or a wrong byte
 * count (the message gives the right one). */
TYTO_API tyto_status tyto_idx_read(const tyto_idx *x, int64_t first, int64_t n,
                                   tyto_dtype dtype, double scale, void *dst,
                                   size_t bytes);

/* ---------------------------------------------------------------------- */
/* Labelled datasets                                                       */

typedef struct tyto_dataset tyto_dataset;

/* Loads images (rank >= 2: one item per first index) and labels (rank 1,
 * whole numbers) as tyto_idx_load() does, and checks that the counts
 * agree and every label lies in [0, classes). classes 0: the largest
 * label + 1. On success *out owns both; free with tyto_dataset_free().
 * Errors: those of tyto_idx_load(), and TYTO_ERR_INVALID_ARGUMENT for a
 * wrong rank, a count mismatch ("60000 images but 59999 labels"), a
 * label that is not whole or out of range (its index and value), a
 * floating-point image value that is NaN or infinite (its image and
 * position). */
TYTO_API tyto_status tyto_dataset_load_idx(const char *images_path,
                                           const char *labels_path,
                                           int64_t classes, tyto_dataset **out);

/* Loads split "train" or "t10k" of MNIST or Fashion-MNIST from directory
 * dir: <split>-images-idx3-ubyte and <split>-labels-idx1-ubyte, each with
 * or without ".gz". Errors: as tyto_dataset_load_idx(), and
 * TYTO_ERR_NOT_FOUND for a missing directory or file (what was looked
 * for), TYTO_ERR_INVALID_ARGUMENT for another split name. */
TYTO_API tyto_status tyto_dataset_load_dir(const char *dir, const char *split,
                                           int64_t classes, tyto_dataset **out);
TYTO_API void tyto_dataset_free(tyto_dataset *d); /* NULL ok */

/* Number of items. */
TYTO_API int64_t tyto_dataset_count(const tyto_dataset *d);
/* One item's dims (the images' dims after the first), and their product.
 * The shape is owned by d. */
TYTO_API int tyto_dataset_item_rank(const tyto_dataset *d);
TYTO_API const int64_t *tyto_dataset_item_shape(const tyto_dataset *d);
TYTO_API int64_t tyto_dataset_item_size(const tyto_dataset *d);
/* Number of classes: as given, or the largest label + 1. */
TYTO_API int64_t tyto_dataset_classes(const tyto_dataset *d);
/* Label of item i; -1 when i is out of range. */
TYTO_API int64_t tyto_dataset_label(const tyto_dataset *d, int64_t i);
/* The images as tyto_idx_read() gives them (items of d, bytes checked). */
TYTO_API tyto_status tyto_dataset_read_images(const tyto_dataset *d,
                                              int64_t first, int64_t n,
                                              tyto_dtype dtype, double scale,
                                              void *dst, size_t bytes);

/* ---------------------------------------------------------------------- */
/* Minibatches                                                             */

typedef struct tyto_batcher tyto_batcher;

/* Batcher options; fill with tyto_batcher_options_init() first. */
typedef struct tyto_batcher_options {
  /* sizeof(tyto_batcher_options) as the caller compiled it; set by
   * tyto_batcher_options_init(). Fields past it are taken as defaults. */
  size_t struct_size;
  /* The items served: [first, first + count). count -1 (the default):
   * to the end of the dataset. */
  int64_t first;
  int64_t count;
  /* Items per batch (default 32). */
  int64_t batch_size;
  /* Non-zero (default): each epoch visits the range in its own order, a
   * function of seed and epoch only. Zero: in file order. */
  int shuffle;
  uint64_t seed;
  /* Non-zero: a last batch smaller than batch_size is not served (default:
   * it is, partly filled). */
  int drop_last;
  /* Element type of both buffers (default TYTO_F32; f16 and bf16 are
   * rounded to nearest). */
  tyto_dtype dtype;
  /* Images are multiplied by it (default 1; 1.0 / 255 maps bytes to
   * [0, 1]). */
  double scale;
  /* Non-zero (default): labels as one-hot rows of classes values; zero: one
   * class index per item. */
  int one_hot;
} tyto_batcher_options;

TYTO_API void tyto_batcher_options_init(tyto_batcher_options *opts);

/* A batcher over a range of d, positioned at the start of epoch 0. d must
 * outlive it. On success *out owns it; free with tyto_batcher_free().
 * Errors: TYTO_ERR_INVALID_ARGUMENT for a range outside d, batch_size < 1,
 * an unknown dtype, class indices (one_hot zero) that the dtype cannot
 * hold exactly; TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_batcher_new(const tyto_dataset *d,
                                      const tyto_batcher_options *opts,
                                      tyto_batcher **out);
TYTO_API void tyto_batcher_free(tyto_batcher *b); /* NULL ok */

/* Positions b before batch `batch` of epoch `epoch`, so that a resumed run
 * sees the batches it would have seen. The order of an epoch is a
 * Fisher-Yates shuffle of the range driven by splitmix64 (docs/data.md),
 * seeded from (seed, epoch). Errors: TYTO_ERR_INVALID_ARGUMENT when batch
 * is negative or past the epoch's batches. */
TYTO_API tyto_status tyto_batcher_seek(tyto_batcher *b, uint64_t epoch,
                                       int64_t batch);

/* Batches per epoch (counting a partial last one unless drop_last). */
TYTO_API int64_t tyto_batcher_batches(const tyto_batcher *b);
/* Number of items served per epoch. */
TYTO_API int64_t tyto_batcher_count(const tyto_batcher *b);
/* The dataset index of the k-th item of the current epoch's order; -1
 * when k is out of range. */
TYTO_API int64_t tyto_batcher_item(const tyto_batcher *b, int64_t k);

/* Fills the next batch of the current epoch: images (batch_size * item size
 * values, exactly image_bytes) and labels (batch_size class indices, or
 * batch_size * classes one-hot values, exactly label_bytes), both in the
 * options' dtype; either buffer may be NULL (with 0 bytes) to skip it.
 * *filled (may be NULL) tells how many items were filled; rows past them
 * are zero. At the end of the epoch it fills nothing (*filled = 0) and
 * moves to the start of the next epoch. Errors: TYTO_ERR_INVALID_ARGUMENT
 * for a wrong byte count (the message gives the right one). */
TYTO_API tyto_status tyto_batcher_next(tyto_batcher *b, void *images,
                                       size_t image_bytes, void *labels,
                                       size_t label_bytes, int64_t *filled);

/* The current epoch and the index of the next batch in it. */
TYTO_API uint64_t tyto_batcher_epoch(const tyto_batcher *b);
TYTO_API int64_t tyto_batcher_position(const tyto_batcher *b);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_DATA_H */
