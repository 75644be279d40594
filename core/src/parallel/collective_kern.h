/*
 * The in-process collective's loops (collective.c), included once per
 * instruction set with COLL_SUF naming it. Each element sees the same
 * operations in every version, a product and a sum rounded to double one
 * after the other (ISO C compiles without contracting them into a fused
 * multiply-add), so the bits do not depend on the machine's vector width.
 */
#define COLL_CAT2(a, b) a##_##b
#define COLL_CAT(a, b) COLL_CAT2(a, b)

/* acc[0 .. n) = w * x[off .. off + n) (first) or += it: one
 * contribution. */
static void COLL_CAT(fold, COLL_SUF)(double *restrict acc, const void *x,
                                     size_t off, tyto_dtype dt, double w,
                                     int first, size_t n) {
  if (dt == TYTO_F64) {
    const double *restrict v = (const double *)x + off;
    if (first)
      for (size_t j = 0; j < n; j++)
        acc[j] = w * v[j];
    else
      for (size_t j = 0; j < n; j++)
        acc[j] += w * v[j];
  } else {
    const float *restrict v = (const float *)x + off;
    if (first)
      for (size_t j = 0; j < n; j++)
        acc[j] = w * (double)v[j];
    else
      for (size_t j = 0; j < n; j++)
        acc[j] += w * (double)v[j];
  }
}

/* out[off .. off + n) = acc[0 .. n) rounded to dt, or zeros when
 * nothing was added. */
static void COLL_CAT(round_out, COLL_SUF)(void *out, size_t off,
                                          const double *restrict acc,
                                          tyto_dtype dt, int empty, size_t n) {
  if (dt == TYTO_F64) {
    double *restrict o = (double *)out + off;
    if (empty)
      for (size_t j = 0; j < n; j++)
        o[j] = 0;
    else
      for (size_t j = 0; j < n; j++)
        o[j] = acc[j];
  } else {
    float *restrict o = (float *)out + off;
    if (empty)
      for (size_t j = 0; j < n; j++)
        o[j] = 0.0f;
    else
      for (size_t j = 0; j < n; j++)
        o[j] = (float)acc[j];
  }
}

#ifdef COLL_NT_STORE
/* round_out, f32 written around the caches where it is aligned (the same
 * rounding: cvtpd2ps rounds to nearest as the cast does). */
static void COLL_CAT(round_out_nt, COLL_SUF)(void *out, size_t off,
                                             const double *restrict acc,
                                             tyto_dtype dt, int empty,
                                             size_t n) {
  float *o = (float *)out + off;
  if (dt != TYTO_F32 || empty || (uintptr_t)o % COLL_NT_ALIGN != 0) {
    COLL_CAT(round_out, COLL_SUF)(out, off, acc, dt, empty, n);
    return;
  }
  size_t j = 0;
  for (; j + COLL_NT_W <= n; j += COLL_NT_W)
    COLL_NT_STORE(o + j, acc + j);
  for (; j < n; j++)
    o[j] = (float)acc[j];
}
#define COLL_ROUND_NT COLL_CAT(round_out_nt, COLL_SUF)
#else
#define COLL_ROUND_NT COLL_CAT(round_out, COLL_SUF)
#endif

static const coll_kern COLL_CAT(kern, COLL_SUF) = {
    COLL_CAT(fold, COLL_SUF), COLL_CAT(round_out, COLL_SUF), COLL_ROUND_NT};

#undef COLL_ROUND_NT
#undef COLL_NT_STORE
#undef COLL_NT_W
#undef COLL_NT_ALIGN

#undef COLL_CAT
#undef COLL_CAT2
