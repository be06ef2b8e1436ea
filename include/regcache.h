/*
 * regcache -- a registration (pin-down) cache for GPU and host memory used by
 * RDMA NICs.
 *
 * A communication library creates one cache per protection domain, then wraps
 * every transfer in regcache_get() / regcache_put().  The first get on a range
 * registers it (ibv_reg_mr through nvidia-peermem, or ibv_reg_dmabuf_mr on a
 * dmabuf exported by CUDA); later gets on memory the registration covers are
 * served from the cache.  Registrations stay alive after the last put and are
 * dropped when the memory goes away (tag check, preload hook, or an explicit
 * invalidate) or when the least-recently-used ones must make room.
 *
 * Conventions (as in libuv and libibverbs):
 *   - every function that can fail returns an int status: REGCACHE_OK (0) or a
 *     negative REGCACHE_ERR_* code; regcache_strerror() turns it into text;
 *   - functions never print, except the statistics dump that REGCACHE_STATS
 *     asks for at regcache_destroy();
 *   - "thread safe" means any number of threads may call the function on the
 *     same cache at once.
 */
#ifndef REGCACHE_H
#define REGCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define REGCACHE_API __attribute__((visibility("default")))
#else
#define REGCACHE_API
#endif

#define REGCACHE_VERSION_MAJOR 0
#define REGCACHE_VERSION_MINOR 1
#define REGCACHE_VERSION_PATCH 0

struct ibv_pd;
struct ibv_mr;

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

enum regcache_status {
    REGCACHE_OK = 0,
    /* A NULL pointer, zero length, a range that wraps the address space, a
     * params struct of an unknown size, or an out-of-range option. */
    REGCACHE_ERR_INVALID = -1,
    /* malloc() failed inside the cache. */
    REGCACHE_ERR_NO_MEMORY = -2,
    /* The range is not GPU memory (host memory while host_memory is off,
     * memory CUDA does not know, or memory that has been freed). */
    REGCACHE_ERR_NOT_GPU = -3,
    /* The range is CUDA managed (unified) memory: GPUDirect RDMA cannot
     * register it. */
    REGCACHE_ERR_MANAGED = -4,
    /* The registration backend ran out of resources (BAR1, pinned memory)
     * and evicting every unused entry of the device did not make room. */
    REGCACHE_ERR_NO_SPACE = -5,
    /* The registration backend failed for another reason. */
    REGCACHE_ERR_BACKEND = -6,
    /* A CUDA driver call failed unexpectedly. */
    REGCACHE_ERR_CUDA = -7,
    /* The requested method is not available here (no nvidia-peermem module,
     * no dmabuf support in the GPU or the verbs provider, no CUDA driver). */
    REGCACHE_ERR_UNSUPPORTED = -8,
    /* The cache was created before fork() and used in the child: the
     * registrations belong to the parent.  Create a new cache in the child. */
    REGCACHE_ERR_FORKED = -9,
    /* The range is partly outside the allocation that holds its start (it
     * spans two CUDA allocations). */
    REGCACHE_ERR_RANGE = -10
};

/* Human-readable text for a status code; never NULL.  Thread safe. */
REGCACHE_API const char *regcache_strerror(int status);

/* The library's version as "MAJOR.MINOR.PATCH"; never NULL.  Thread safe. */
REGCACHE_API const char *regcache_version(void);

/* ------------------------------------------------------------------------ */
/* Registration backends                                                     */
/* ------------------------------------------------------------------------ */

/* Device ordinal reported for host (CPU) memory. */
#define REGCACHE_DEVICE_HOST (-1)

enum regcache_mem_type {
    REGCACHE_MEM_DEVICE = 1,  /* GPU memory (cuMemAlloc, pools, VMM) */
    REGCACHE_MEM_HOST = 2,    /* host memory, pinned or pageable */
    REGCACHE_MEM_MANAGED = 3  /* CUDA managed memory: never registered */
};

/* What the cache knows about the memory holding an address.  Filled by the
 * CUDA driver, or by a custom backend's query callback. */
struct regcache_mem_info {
    uintptr_t base;     /* start of the allocation that holds the address */
    size_t size;        /* its length in bytes */
    uint64_t buffer_id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID; 0 = no id (host):
                           such entries are never tag-checked */
    int device;         /* CUDA device ordinal, or REGCACHE_DEVICE_HOST */
    int type;           /* enum regcache_mem_type */
};

/*
 * A registration backend: how the cache pins memory.  NULL in the params
 * selects the built-in verbs backend (params.pd, params.access,
 * params.method).
 *
 * reg:   register [addr, addr+len) of `device` (REGCACHE_DEVICE_HOST for host
 *        memory); store an opaque handle in *handle and return 0, or return an
 *        errno value.  ENOMEM, ENOSPC, EAGAIN and EFAULT mean "resources
 *        exhausted": the cache evicts unused entries of that device and
 *        retries.  Called without any cache lock held, possibly from several
 *        threads at once (for different ranges).
 * dereg: release a handle that reg returned.  Called without any cache lock
 *        held.  Must not call back into the cache.
 * arg:   passed to both.
 * query: optional.  Describe the memory at [addr, addr+len) in *info and
 *        return REGCACHE_OK, or return a REGCACHE_ERR_* code (NOT_GPU for
 *        memory that is gone).  When set, the cache asks it instead of the
 *        CUDA driver, both on a miss and for tag checks; this is how a custom
 *        backend describes memory the driver does not know.
 */
struct regcache_backend {
    int (*reg)(void *arg, void *addr, size_t len, int device, void **handle);
    void (*dereg)(void *arg, void *handle);
    void *arg;
    int (*query)(void *arg, const void *addr, size_t len,
                 struct regcache_mem_info *info);
};

/* ------------------------------------------------------------------------ */
/* Cache parameters                                                          */
/* ------------------------------------------------------------------------ */

enum regcache_method {
    REGCACHE_METHOD_AUTO = 0,    /* DMABUF where GPU and provider support it,
                                    else PEERMEM */
    REGCACHE_METHOD_DMABUF = 1,  /* cuMemGetHandleForAddressRange + 
                                    ibv_reg_dmabuf_mr */
    REGCACHE_METHOD_PEERMEM = 2  /* ibv_reg_mr on the GPU address; needs the
                                    nvidia_peermem kernel module */
};

enum regcache_validation {
    REGCACHE_VALIDATE_AUTO = 0,      /* HOOKS when every CUDA free is provably
                                        seen - by the preload hook, or by the
                                        in-process interception that creating
                                        the cache installs (README) - else
                                        TAG_CHECK */
    REGCACHE_VALIDATE_TAG_CHECK = 1, /* re-read the buffer id on every hit */
    REGCACHE_VALIDATE_HOOKS = 2      /* trust regcache_notify_free() calls
                                        (from the hook or the application) */
};

/*
 * Cache parameters.  Always start from regcache_params_init(): it records the
 * struct's size, so a program built against an older header keeps working
 * when fields are added at the end.
 */
struct regcache_params {
    size_t size;                 /* sizeof(struct regcache_params); set by
                                    regcache_params_init() */
    struct ibv_pd *pd;           /* protection domain (built-in backend) */
    int access;                  /* IBV_ACCESS_* flags (built-in backend);
                                    default LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ */
    enum regcache_method method; /* default AUTO */
    enum regcache_validation validation; /* default AUTO */
    size_t alignment;            /* registrations are rounded to this power of
                                    two; default 65536 (the GPU BAR page) */
    size_t max_bytes;            /* per device budget for cached bytes; 0 =
                                    free BAR1 less a reserve for GPUs (see
                                    README), unlimited for host memory */
    size_t max_entries;          /* per device entry limit; 0 = unlimited */
    int whole_allocation;        /* register the whole CUDA allocation that
                                    holds a range (default 1) */
    int host_memory;             /* accept host memory (default 0: refused
                                    with REGCACHE_ERR_NOT_GPU) */
    const struct regcache_backend *backend; /* NULL = built-in verbs */
};

/*
 * Fill *params with every default.  Environment variables (REGCACHE_*, see
 * README) are applied later, by regcache_create(), and override these.
 * Errors: REGCACHE_ERR_INVALID if params is NULL.  Thread safe.
 */
REGCACHE_API int regcache_params_init(struct regcache_params *params);

/* ------------------------------------------------------------------------ */
/* Cache life cycle                                                          */
/* ------------------------------------------------------------------------ */

typedef struct regcache regcache_t;
typedef struct regcache_entry regcache_entry_t;

/*
 * Create a cache.  The built-in backend needs params->pd; it selects the
 * method now and fails with REGCACHE_ERR_UNSUPPORTED (and a message from
 * regcache_last_error()) if none is available.  With validation AUTO and
 * without the preload hook, the first call patches libcuda's memory
 * functions in-process (once per process, unless REGCACHE_HOOKS=off) and
 * every call checks that the patches see every free; when they cannot, the
 * cache uses TAG_CHECK and regcache_last_error() says why, although the call
 * succeeds.
 * Errors: INVALID (NULL, unknown params size, alignment not a power of two
 * or below 4096, method/validation out of range, no pd for the built-in
 * backend, backend without reg or dereg), NO_MEMORY, UNSUPPORTED.
 * Thread safe.
 */
REGCACHE_API int regcache_create(const struct regcache_params *params,
                                 regcache_t **cache);

/*
 * Deregister every entry and free the cache.  Entries still held are
 * deregistered too: their pointers become invalid.  NULL is a no-op.
 * Must not race with other calls on the same cache.
 */
REGCACHE_API void regcache_destroy(regcache_t *cache);

/* ------------------------------------------------------------------------ */
/* Get and put                                                               */
/* ------------------------------------------------------------------------ */

/*
 * Return in *entry a held registration that covers [addr, addr+len).  A hit
 * costs a hash lookup (and, in TAG_CHECK mode, one buffer-id query); a miss
 * registers the range rounded to params.alignment (the whole allocation when
 * whole_allocation is on).  Concurrent misses on the same range register it
 * once.  The entry stays valid until regcache_put().
 * Errors: INVALID (NULL cache/addr/entry, len 0, addr+len wraps), NOT_GPU,
 * MANAGED, RANGE, NO_SPACE, BACKEND, CUDA, NO_MEMORY, FORKED.  On error
 * *entry is set to NULL and nothing is left registered.
 * Thread safe.
 */
REGCACHE_API int regcache_get(regcache_t *cache, const void *addr, size_t len,
                              regcache_entry_t **entry);

/*
 * Release an entry from regcache_get().  It stays registered and becomes the
 * most recently used; if it was invalidated while held, it is deregistered
 * now.  NULL entry is a no-op.  Thread safe.
 */
REGCACHE_API void regcache_put(regcache_t *cache, regcache_entry_t *entry);

/* The backend's handle for a held entry (the struct ibv_mr * for the
 * built-in backend); NULL for a NULL entry.  Thread safe. */
REGCACHE_API void *regcache_entry_handle(const regcache_entry_t *entry);

/* The struct ibv_mr * of a held entry from the built-in backend; NULL for
 * custom backends and for a NULL entry.  For dmabuf registrations mr->addr
 * is an iova: use regcache_entry_range() for the virtual address.
 * Thread safe. */
REGCACHE_API struct ibv_mr *regcache_entry_mr(const regcache_entry_t *entry);

/* The registered range of a held entry (rounded; may be larger than the
 * request).  Either output may be NULL; both are zeroed for a NULL entry.
 * Thread safe. */
REGCACHE_API void regcache_entry_range(const regcache_entry_t *entry,
                                       uintptr_t *start, size_t *len);

/* ------------------------------------------------------------------------ */
/* Invalidation and eviction                                                 */
/* ------------------------------------------------------------------------ */

/*
 * Drop every entry overlapping [addr, addr+len): unused ones are
 * deregistered now, held ones leave the cache at once (no new hits) and are
 * deregistered on their last put.
 * Errors: INVALID (NULL cache, len 0, wrapping range), FORKED.  Thread safe.
 */
REGCACHE_API int regcache_invalidate(regcache_t *cache, const void *addr,
                                     size_t len);

/*
 * regcache_invalidate() on every live cache in the process; what the preload
 * hook calls before memory is freed.  Safe inside an allocator hook: it
 * allocates nothing and costs one atomic load when no cache exists; a call
 * made from a backend's dereg that this function itself triggered is
 * ignored rather than deadlocking.  Zero-length and wrapping ranges are
 * ignored.  Callbacks may call it from reg (the registration then starts
 * over).  Thread safe.
 */
REGCACHE_API void regcache_notify_free(const void *addr, size_t len);

/*
 * The number of caches alive in this process (created, not yet destroyed;
 * a fork child counts none of its parent's).  The preload hook reads it to
 * skip its per-free range query while there is no cache.  Thread safe.
 */
REGCACHE_API int regcache_cache_count(void);

/*
 * Deregister every unused entry.  Held entries are untouched.
 * Errors: INVALID (NULL), FORKED.  Thread safe.
 */
REGCACHE_API int regcache_flush(regcache_t *cache);

/* ------------------------------------------------------------------------ */
/* Introspection                                                             */
/* ------------------------------------------------------------------------ */

struct regcache_stats {
    uint64_t hits;              /* gets served by a cached entry */
    uint64_t misses;            /* gets that needed a registration */
    uint64_t registrations;     /* successful backend reg calls */
    uint64_t deregistrations;   /* backend dereg calls */
    uint64_t evictions;         /* entries evicted (budget or exhaustion) */
    uint64_t invalidations_tag; /* entries dropped by a failed tag check */
    uint64_t invalidations_notify; /* entries dropped by regcache_notify_free */
    uint64_t invalidations_explicit; /* entries dropped by regcache_invalidate */
    uint64_t reg_failures;      /* failed backend reg calls (retries count) */
    uint64_t entries;           /* entries in the cache now */
    uint64_t bytes;             /* registered bytes in the cache now */
    uint64_t peak_bytes;        /* highest value of bytes so far */
};

/*
 * Copy the cache's counters into *stats.  Counters are read without
 * stopping other threads: each is exact, the set is not a snapshot.
 * Errors: INVALID (NULL).  Thread safe.
 */
REGCACHE_API int regcache_get_stats(const regcache_t *cache,
                                    struct regcache_stats *stats);

/*
 * The validation mode the cache actually uses (AUTO resolved), or
 * REGCACHE_ERR_INVALID for NULL.  Thread safe.
 */
REGCACHE_API int regcache_validation_mode(const regcache_t *cache);

/*
 * Why the cache uses the validation mode it does: set by the caller, the
 * preload hook, the in-process interception (with what it patched), or why
 * none of these could be trusted (REGCACHE_HOOKS=off, "in-process
 * interception unavailable: cuMemUnmap prologue not recognised (bytes
 * ...)").  Never empty for a cache; NULL for NULL.  The text lives as long
 * as the cache.  Thread safe.
 */
REGCACHE_API const char *regcache_validation_reason(const regcache_t *cache);

/*
 * The method the built-in backend selected (DMABUF or PEERMEM), 0 for a
 * custom backend, or REGCACHE_ERR_INVALID for NULL.  Thread safe.
 */
REGCACHE_API int regcache_method_used(const regcache_t *cache);

/*
 * A message that explains the last failing call of this thread in more
 * detail than regcache_strerror() (which module to load, which CUDA error
 * came back), or why the last regcache_create() with validation AUTO fell
 * back to TAG_CHECK.  Empty string if there is none.  Thread safe (per
 * thread).
 */
REGCACHE_API const char *regcache_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* REGCACHE_H */
