/* Memory of one GPU for a device key table: device memory, pinned host
 * memory mapped into the device, and copies from host to device on a
 * stream of the library's own, all under the device's primary context.
 * The copies never wait for the application's work: the stream does not
 * synchronise with the legacy default stream, and copies run on the copy
 * engines while kernels hold every SM. */
#ifndef RC_DEVICE_MEMORY_H
#define RC_DEVICE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

struct rc_devmem {
    int device;
    void *ctx;    /* CUcontext: the device's primary context, retained */
    void *stream; /* CUstream, non-blocking */
};

/* Retain device's primary context and make the stream.  REGCACHE_OK, or
 * ERR_UNSUPPORTED (no driver), ERR_INVALID (no such device), ERR_CUDA; the
 * last error says why. */
int rc_devmem_open(struct rc_devmem *m, int device);
void rc_devmem_close(struct rc_devmem *m);

/* Device memory: *dptr, or ERR_CUDA / ERR_NO_SPACE (out of device memory). */
int rc_devmem_alloc(struct rc_devmem *m, size_t bytes, uint64_t *dptr);
void rc_devmem_free(struct rc_devmem *m, uint64_t dptr);

/* Pinned host memory the device reads and writes: *host and, as the
 * device sees it, *dptr; zeroed.  ERR_CUDA / ERR_NO_MEMORY. */
int rc_devmem_host_alloc(struct rc_devmem *m, size_t bytes, void **host, uint64_t *dptr);
void rc_devmem_host_free(struct rc_devmem *m, void *host);

/* One copy: bytes from host (pinned by rc_devmem_host_alloc, so that the
 * copy is one DMA) to dst in device memory. */
struct rc_copy {
    uint64_t dst;
    const void *src;
    size_t bytes;
};

/* Copy each of n copies in order, each done before the next starts, and
 * return once all are: a kernel that sees a copy's bytes sees those of
 * every copy before it.  REGCACHE_OK or ERR_CUDA. */
int rc_devmem_copy(struct rc_devmem *m, const struct rc_copy *copies, size_t n);

#endif
