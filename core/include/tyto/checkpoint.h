/*
 * Checkpoints: named tensors and string metadata, saved in Hugging Face's
 * safetensors format so that other tools read them.
 *
 * A tyto_checkpoint is an in-memory set of tensors (each a name, a dtype, a
 * shape and a copy of its values, row-major, little-endian on disk) plus a
 * string-to-string metadata map (the model description, versions...). The
 * dtypes are those of the graph (f32, f64, f16, bf16) for parameters and
 * optimiser state, and i64 and u64 for counters and random-number state
 * (the step, Philox keys). f16 and bf16 are stored as PyTorch stores them:
 * 2-byte IEEE binary16 and bfloat16 bit patterns, little-endian.
 *
 * The file: an 8-byte little-endian header size N, N bytes of JSON (an
 * object mapping each tensor name to {"dtype","shape","data_offsets"}, plus
 * "__metadata__"), padded with spaces to a multiple of 8, then the tensors'
 * bytes packed without gaps. tyto writes "__metadata__" first (when there
 * is any) and the tensors in the order they were added; it reads any order.
 *
 * Saving is atomic: the file is written beside its destination, synced and
 * renamed over it, so a crash leaves either the old checkpoint or the new
 * one. Loading is strict and names the file, the tensor and what was
 * expected and found; tyto_checkpoint_expect() tells every difference
 * between a checkpoint and a model at once.
 *
 * A checkpoint is used by one thread at a time.
 */
#ifndef TYTO_CHECKPOINT_H
#define TYTO_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/graph.h>
#include <tyto/program.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tyto_checkpoint tyto_checkpoint;

/* Element types of checkpoint tensors. On disk: "F32", "F64", "I64",
 * "U64", "F16", "BF16", "I32" (PyTorch's names). Only F32 and F64 have the
 * numbers of their tyto_dtype: convert a graph dtype with
 * tyto_checkpoint_dtype_of(), never with a cast. Append-only. */
typedef enum tyto_checkpoint_dtype {
  TYTO_CHECKPOINT_F32 = 0,
  TYTO_CHECKPOINT_F64 = 1,
  TYTO_CHECKPOINT_I64 = 2,
  TYTO_CHECKPOINT_U64 = 3,
  TYTO_CHECKPOINT_F16 = 4,
  TYTO_CHECKPOINT_BF16 = 5,
  TYTO_CHECKPOINT_I32 = 6
} tyto_checkpoint_dtype;

/* The checkpoint dtype that stores tensors of graph dtype dtype (a
 * tyto_checkpoint_dtype value), or -1 when dtype is not a tyto_dtype. */
TYTO_API int tyto_checkpoint_dtype_of(tyto_dtype dtype);

/* One tensor a caller expects (tyto_checkpoint_expect()). */
typedef struct tyto_checkpoint_spec {
  const char *name;
  tyto_checkpoint_dtype dtype;
  int rank;
  const int64_t *shape; /* rank extents; may be NULL for rank 0 */
} tyto_checkpoint_spec;

/* Flags of tyto_checkpoint_expect(). */
typedef enum tyto_checkpoint_flags {
  /* Tensors of the checkpoint that are not expected are no error. */
  TYTO_CHECKPOINT_ALLOW_EXTRA = 1 << 0
} tyto_checkpoint_flags;

/* *out owns a new, empty checkpoint; free it with tyto_checkpoint_free().
 * TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_checkpoint_new(tyto_checkpoint **out);
TYTO_API void tyto_checkpoint_free(tyto_checkpoint *ck); /* NULL ok */

/* Adds a tensor, copying name, shape and the numel * dtype size bytes at
 * data (data may be NULL when numel is 0). TYTO_ERR_INVALID_ARGUMENT for a
 * name that is empty, "__metadata__", not UTF-8 or already there, an
 * unknown dtype, rank outside 0..TYTO_MAX_RANK, a negative extent;
 * TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_checkpoint_add(tyto_checkpoint *ck, const char *name,
                                         tyto_checkpoint_dtype dtype, int rank,
                                         const int64_t *shape,
                                         const void *data);

/* Sets metadata key to value (both copied, UTF-8; a key set again is
 * replaced). TYTO_ERR_INVALID_ARGUMENT, TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_checkpoint_set_meta(tyto_checkpoint *ck,
                                              const char *key,
                                              const char *value);

/* Writes ck to path atomically: a temporary "path.XXXXXX" in the same
 * directory is written, fsynced and renamed over path, then the directory
 * is fsynced. The file takes the mode of the one it replaces (0644 when
 * new). On failure the file at path is untouched and the temporary
 * removed; a process killed while saving may leave a "path.XXXXXX" behind
 * (never path itself half-written), which is safe to delete. Errors:
 * TYTO_ERR_IO with the system's reason, TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_checkpoint_save(const tyto_checkpoint *ck,
                                          const char *path);

/* Reads a safetensors file. On success *out owns the checkpoint (free it
 * with tyto_checkpoint_free()). TYTO_ERR_NOT_FOUND when path does not
 * exist, TYTO_ERR_IO when it cannot be read, TYTO_ERR_INVALID_ARGUMENT
 * when it is not a valid safetensors file of supported dtypes: the message
 * names the file, the tensor and what was expected and found ("...: tensor
 * 'w': f32[2,3] needs 24 bytes, data_offsets [0, 20] hold 20");
 * TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_checkpoint_load(const char *path,
                                          tyto_checkpoint **out);

/* As tyto_checkpoint_load(), from the size bytes at data; `name` stands for
 * the file in messages (NULL: "(memory)"). */
TYTO_API tyto_status tyto_checkpoint_parse(const void *data, size_t size,
                                           const char *name,
                                           tyto_checkpoint **out);

/* Number of tensors, and the name of the i-th in file (or adding) order:
 * owned by ck, NULL when out of range. */
TYTO_API size_t tyto_checkpoint_count(const tyto_checkpoint *ck);
TYTO_API const char *tyto_checkpoint_name(const tyto_checkpoint *ck, size_t i);

/* Looks a tensor up by name; each output pointer may be NULL. *shape and
 * *data are owned by ck and valid while it lives; *bytes = numel * dtype
 * size. TYTO_ERR_NOT_FOUND ("no tensor 'x' in checkpoint 'a.safetensors'"),
 * TYTO_ERR_INVALID_ARGUMENT. */
TYTO_API tyto_status tyto_checkpoint_find(const tyto_checkpoint *ck,
                                          const char *name,
                                          tyto_checkpoint_dtype *dtype,
                                          int *rank, const int64_t **shape,
                                          const void **data, size_t *bytes);

/* The metadata value of key, owned by ck; NULL when absent. */
TYTO_API const char *tyto_checkpoint_get_meta(const tyto_checkpoint *ck,
                                              const char *key);
/* Number of metadata entries and the i-th key (owned by ck; NULL when out
 * of range), in file (or setting) order. */
TYTO_API size_t tyto_checkpoint_meta_count(const tyto_checkpoint *ck);
TYTO_API const char *tyto_checkpoint_meta_key(const tyto_checkpoint *ck,
                                              size_t i);

/* Checks that ck holds the n tensors of specs with their dtypes and
 * shapes, and (without TYTO_CHECKPOINT_ALLOW_EXTRA in flags) nothing else.
 * TYTO_ERR_INVALID_ARGUMENT with every difference in one message:
 * "checkpoint 'model.safetensors' does not match this model: missing
 * 'fc2.w' f32[128,10]; unexpected 'conv.w' f32[8,1,3,3]; 'fc1.w' is
 * f32[784,64] in the file, f32[784,128] here", or for bad specs. */
TYTO_API tyto_status tyto_checkpoint_expect(const tyto_checkpoint *ck, size_t n,
                                            const tyto_checkpoint_spec *specs,
                                            unsigned flags);

/* Adds the current values of the n parameters of program p, read from its
 * device, each under its tensor name (tyto_tensor_name()). Errors:
 * TYTO_ERR_INVALID_ARGUMENT for a parameter without a name or that p does
 * not use, others as tyto_checkpoint_add() and
 * tyto_program_read_parameter(). */
TYTO_API tyto_status tyto_checkpoint_add_parameters(tyto_checkpoint *ck,
                                                    tyto_program *p, size_t n,
                                                    tyto_tensor *const *params);

/* Writes the n parameters of p from the tensors of ck with their names.
 * First checks them all as tyto_checkpoint_expect() with
 * TYTO_CHECKPOINT_ALLOW_EXTRA (other tensors, such as optimiser state, may
 * be in ck), so on a mismatch nothing is written and the message lists
 * every difference. Other errors as tyto_program_write_parameter(). */
TYTO_API tyto_status
tyto_checkpoint_restore_parameters(const tyto_checkpoint *ck, tyto_program *p,
                                   size_t n, tyto_tensor *const *params);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_CHECKPOINT_H */
