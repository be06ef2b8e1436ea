/* A stand-in CUDA driver behind the CUDA seam: `device_count` GPUs and one
 * GPU allocation on device 0 (reserved address space, never touched), whose
 * dmabuf export hands out real file descriptors so that leaks show up in
 * /proc/self/fd. */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#define FAKE_CUDA_MAX_DEVICES 4
#define FAKE_CUDA_ALLOC_SIZE ((size_t)8 << 20)

struct fake_cuda {
    /* What the fake answers. */
    int device_count;
    int dmabuf_supported[FAKE_CUDA_MAX_DEVICES];
    CUresult export_result; /* of cuMemGetHandleForAddressRange */

    /* The allocation, and what the last export saw. */
    uintptr_t alloc_base;
    int export_calls;
    CUdeviceptr export_ptr;
    size_t export_size;
    int export_fd;
};

extern struct fake_cuda fake_cuda;

/* Reset (one device that exports dmabuf, exports succeed) and route the
 * library's driver calls to the fake. */
void fake_cuda_install(void);
void fake_cuda_uninstall(void);

#endif
