/*
 * tyto — differentiable array programs and neural-network training in C.
 * Include this header for the whole public API.
 */
#ifndef TYTO_H
#define TYTO_H

#include <tyto/status.h>
#include <tyto/version.h>
#include <tyto/context.h>
#include <tyto/device.h>
#include <tyto/graph.h>
#include <tyto/ops.h>
#include <tyto/program.h>
#include <tyto/placement.h>
#include <tyto/precision.h>
#include <tyto/ad.h>
#include <tyto/data.h>
#include <tyto/checkpoint.h>
#include <tyto/nn.h>
#include <tyto/optim.h>
#include <tyto/parallel.h>
#include <tyto/distributed.h>

#endif /* TYTO_H */
