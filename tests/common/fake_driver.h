/* The one fake CUDA driver of the tests, behind the CUDA seam (the cuda and
 * verbs tests, and the VM test of the method choice): allocations of every
 * kind (legacy, pool, VMM, managed, pinned host) laid out in one reserved,
 * never-touched address range, GPUs that can or cannot export dmabuf, an
 * error to inject per driver call, call counts, a current-context model, and
 * stream capture (below).  dmabuf exports hand out real file descriptors so
 * that leaks show up in /proc/self/fd.  One thread calls it at a time.
 *
 * (tests/common/fake_libcuda.c is another thing: a libcuda.so.1 whose
 * exported entry points the hooks wrap and patch.) */
#ifndef FAKE_DRIVER_H
#define FAKE_DRIVER_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

enum drv_call {
    FC_GET_ATTRIBUTE,
    FC_GET_ATTRIBUTES,
    FC_SET_ATTRIBUTE,
    FC_GET_HANDLE,
    FC_DEVICE_GET,
    FC_DEVICE_GET_ATTRIBUTE,
    FC_BUS_ID,
    FC_UUID,
    FC_TOTAL_MEM,
    FC_CTX_GET_CURRENT,
    FC_CTX_PUSH,
    FC_CTX_POP,
    FC_PRIMARY_RETAIN,
    FC_PRIMARY_RELEASE,
    FC_ERROR_NAME,
    FC_DEVICE_COUNT,
    FC_EXCHANGE, /* cuThreadExchangeStreamCaptureMode */
    FC_COUNT
};

/*
 * Stream capture, as cuThreadExchangeStreamCaptureMode documents it.  Each
 * thread has a capture interaction mode (GLOBAL until it exchanges it).  A
 * thread whose mode is not RELAXED is restricted while it has a capture of
 * its own in progress begun in another mode than RELAXED, and, when its
 * mode is GLOBAL, while any other thread has a capture begun in GLOBAL mode.
 * A restricted thread's call of a function the driver deems unsafe fails
 * with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures
 * that restrict it.  Unsafe here: cuPointerSetAttribute (measured on driver
 * 580 for SYNC_MEMOPS), and, strictly, since the driver documents no list,
 * the export and the context calls.  Queries are answered, and counted in
 * drv.unrelaxed when they ran restricted.
 */
#define DRV_MAX_CAPTURES 4
struct drv_capture {
    int active;
    CUstreamCaptureMode mode; /* it was begun in */
    const void *owner;        /* the thread that began it */
    int invalidated;
};

#define DRV_MAX_ALLOCS 8
#define DRV_MAX_DEVICES 4
/* Reserved, never backed: room for an allocation of a 64 KiB region per
 * slot of the largest L1 data caches (tests/cuda/test_cache.c). */
#define DRV_ARENA_SIZE ((size_t)256 << 20)

struct drv_alloc {
    int live;
    uintptr_t base; /* the allocation */
    size_t size;
    uintptr_t range_start; /* RANGE_START/SIZE as the driver reports them */
    size_t range_size;
    uintptr_t map_start; /* MAPPING_BASE/SIZE */
    size_t map_size;
    unsigned long long id;
    unsigned int type; /* CUmemorytype */
    unsigned int managed;
    int device;
    unsigned int sync_memops;
    int refuses_sync;          /* VMM: SYNC_MEMOPS is NOT_SUPPORTED */
    unsigned int legacy_ipc;   /* cuMemAlloc memory */
    CUmemoryPool pool;         /* pool memory */
    unsigned int rdma_capable; /* IS_GPU_DIRECT_RDMA_CAPABLE */
    CUcontext owner;           /* NULL for pool and VMM memory */
};

struct drv_state {
    uintptr_t arena; /* DRV_ARENA_SIZE bytes of reserved address space */
    struct drv_alloc allocs[DRV_MAX_ALLOCS];
    unsigned long long next_id;
    int unknown_invalid; /* unknown pointers: INVALID_VALUE, not zeros */
    int device_count;    /* GPUs 0 .. device_count-1 */
    int dmabuf_supported[DRV_MAX_DEVICES];
    size_t device_memory;    /* of every GPU; 0: cuDeviceTotalMem fails */
    CUresult fail[FC_COUNT]; /* returned by that call when non-zero */
    unsigned int calls[FC_COUNT];
    CUcontext current;      /* the calling thread's context (NULL: none) */
    int pushed;             /* contexts pushed and not popped */
    int retained;           /* primary contexts retained and not released */
    CUdeviceptr export_ptr; /* what the last export was asked for */
    size_t export_size;
    int export_fd; /* and the fd it handed out (-1: none) */
    unsigned long long export_flags;
    /* The answer to an export with the PCIe mapping type (H200:
     * CUDA_ERROR_NOT_SUPPORTED); CUDA_SUCCESS, the default, takes it. */
    CUresult pcie_answer;
    unsigned int pcie_exports; /* exports asked for the PCIe mapping */
    struct drv_capture captures[DRV_MAX_CAPTURES];
    unsigned int unrelaxed[FC_COUNT]; /* calls made while restricted */
    unsigned int refused;             /* of them, refused for the capture */
};

extern struct drv_state drv;

struct rc_cuda_api;

/* Contexts the fake driver hands out. */
#define DRV_PRIMARY_CTX ((CUcontext)&drv.allocs[0])
#define DRV_OTHER_CTX ((CUcontext)&drv.allocs[1])

/* Reset to one device that exports dmabuf, a current context, no
 * allocations, and route the library's driver calls here. */
void drv_install(void);
void drv_uninstall(void);
/* The fake's own functions, as the seam is given them. */
const struct rc_cuda_api *drv_raw_api(void);

/* Allocations, `offset` bytes into the arena.  Each gets a new buffer id and
 * returns its index in drv.allocs. */
int drv_legacy(size_t offset, size_t size); /* cuMemAlloc: 2 MiB chunk */
int drv_pool(size_t offset, size_t size);   /* cuMemAllocAsync: 32 MiB chunk */
int drv_vmm(size_t reserve_offset, size_t reserve_size, size_t offset,
            size_t size); /* cuMemCreate + cuMemMap */
int drv_managed(size_t offset, size_t size);
int drv_pinned_host(size_t offset, size_t size);
/* IS_GPU_DIRECT_RDMA_CAPABLE of allocation i (VMM memory is created with it
 * by default). */
void drv_set_rdma_capable(int i, int capable);
/* Free allocation i; `realloc` gives it back at the same place, new id. */
void drv_free(int i);
void drv_realloc(int i);

/* The live allocation that holds addr, or NULL. */
struct drv_alloc *drv_alloc_at(uintptr_t addr);

/* Address `offset` bytes into the arena. */
uintptr_t drv_addr(size_t offset);

/* Begin a capture on the calling thread, in `mode`; its index. */
int drv_capture_begin(CUstreamCaptureMode mode);
/* End capture i: CUDA_SUCCESS, or CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. */
CUresult drv_capture_end(int i);
/* The calling thread's capture interaction mode (no call counted). */
CUstreamCaptureMode drv_thread_mode(void);
/* The calls counted in drv.unrelaxed, all kinds together. */
unsigned int drv_unrelaxed_calls(void);

/* Open file descriptors of this process. */
int drv_open_fds(void);

#endif
