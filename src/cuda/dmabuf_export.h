/* dmabuf export of GPU memory for ibv_reg_dmabuf_mr. */
#ifndef RC_DMABUF_EXPORT_H
#define RC_DMABUF_EXPORT_H

#include <stddef.h>
#include <stdint.h>

/* Export the host pages around [addr, addr+len) of GPU memory as a dmabuf
 * (cuMemGetHandleForAddressRange, DMA_BUF_FD).  On REGCACHE_OK *fd is a new
 * file descriptor the caller must close, *offset is where addr lies inside
 * the exported range.  Errors: UNSUPPORTED (no driver, no dmabuf), CUDA. */
int rc_dmabuf_export(uintptr_t addr, size_t len, int *fd, uint64_t *offset);

/* The same with CUmemRangeFlags `flags` (0, or
 * CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE); a driver that refuses the
 * flags (NOT_SUPPORTED, INVALID_VALUE) makes it UNSUPPORTED. */
int rc_dmabuf_export_mapped(uintptr_t addr, size_t len, unsigned long long flags, int *fd,
                            uint64_t *offset);

/* 1 if CUDA device `device` reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
 * 0 if not or if there is no driver. */
int rc_dmabuf_supported(int device);

#endif
