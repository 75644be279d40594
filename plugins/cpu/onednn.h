/*
 * oneDNN in the CPU plugin: the one engine its primitives share.
 */
#ifndef TYTO_PLUGIN_CPU_ONEDNN_H
#define TYTO_PLUGIN_CPU_ONEDNN_H

#include <stddef.h>

#ifdef TYTO_HAVE_DNNL
#include <dnnl.h>
#endif

/* Whether TYTO_CPU_NO_DNNL is set (non-empty and not "0"): every op then
 * takes its portable path. Read at each prepare. */
int cpu_dnnl_off(void);

#ifdef TYTO_HAVE_DNNL
/* The process's CPU engine, made on first use (oneDNN engines are
 * thread-safe); NULL when oneDNN cannot make one. */
dnnl_engine_t cpu_dnnl_engine(void);
#endif

#endif
