/* What the ABI tests register: one 64 KiB host buffer, through a backend
 * that pins nothing (its handle is the address) and a query that names the
 * buffer as host memory - enough for a get to miss, register and hit. */
#ifndef ABI_BACKEND_H
#define ABI_BACKEND_H

#include <regcache.h>

extern char abi_buffer[65536];
extern const struct regcache_backend abi_backend;

#endif
