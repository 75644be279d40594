/*
 * PCI bus ids as the host's offer (hwloc: "0000:65:00.0"), CUDA
 * ("00000000:65:00.0") and drivers without a domain ("65:00.0") spell them,
 * read into one address that prints as "dddd:bb:dd.f". Header-only (static
 * inline), so that a plugin's matching code compiled on its own (opencl/pci.c
 * in its unit test) needs nothing else; depends on the C library only.
 */
#ifndef TYTO_PLUGINS_PCI_H
#define TYTO_PLUGINS_PCI_H

#include <stddef.h>
#include <stdio.h>

typedef struct tpc_pci {
  int domain_known; /* the id carried a domain (else domain is 0) */
  unsigned domain, bus, device, function;
} tpc_pci;

/* Reads up to `max` hex digits at *p into *v, moving *p past them; returns
 * 0 when there are none. */
static inline int tpc_hex_field(const char **p, int max, unsigned *v) {
  int n = 0;
  *v = 0;
  for (; n < max; n++, (*p)++) {
    char c = **p;
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0)
      break;
    *v = *v * 16 + (unsigned)d;
  }
  return n > 0;
}

/* Parses "[domain:]bus:device.function" in hex, upper or lower case, into
 * *out. Domains may exceed 16 bits (Intel VMD puts GPUs in 10000:...).
 * Returns 0 when `in` is NULL or not a bus id (a bus above ff, a device
 * above 1f, a function above 7, anything after the function). */
static inline int tpc_pci_parse(const char *in, tpc_pci *out) {
  unsigned f[3], fn;
  const char *p = in;
  int n = 0;
  if (in == NULL)
    return 0;
  /* [domain:]bus:device, then .function */
  for (;;) {
    if (n == 3 || !tpc_hex_field(&p, 8, &f[n]))
      return 0;
    n++;
    if (*p == '.')
      break;
    if (*p++ != ':')
      return 0;
  }
  p++;
  if (n < 2 || !tpc_hex_field(&p, 1, &fn) || *p != '\0')
    return 0;
  if (f[n - 2] > 0xff || f[n - 1] > 0x1f || fn > 0x7)
    return 0;
  *out = (tpc_pci){n == 3, n == 3 ? f[0] : 0u, f[n - 2], f[n - 1], fn};
  return 1;
}

/* *a as "dddd:bb:dd.f", lower case (a wider domain prints wider, as hwloc
 * prints it), into buf (always terminated). */
static inline void tpc_pci_format(const tpc_pci *a, char *buf, size_t size) {
  snprintf(buf, size, "%04x:%02x:%02x.%x", a->domain, a->bus, a->device,
           a->function);
}

#endif /* TYTO_PLUGINS_PCI_H */
