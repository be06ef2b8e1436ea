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
 *     negative REGCACHE_ERR_* code; regcache_strerror() turns it into text and
 *     regcache_last_error() says what exactly went wrong in this thread;
 *   - functions never print, except the statistics dump that REGCACHE_STATS
 *     asks for at regcache_destroy(), and regcache_print_entries() to the
 *     stream it is given;
 *   - "thread safe" means any number of threads may call the function on the
 *     same cache at once.
 *
 * Each call's contract - what it does, every error it returns and why, its
 * thread safety - is its man page (man regcache_get), made from
 * docs/man/<page>.3.md: the comment above each declaration here is a
 * summary that names that page.  A new function needs one more name in a
 * page's NAME line, or a page of its own (the test docs_contract_homes
 * checks that every public name has exactly one).
 */
#ifndef REGCACHE_H
#define REGCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define REGCACHE_API __attribute__((visibility("default")))
#else
#define REGCACHE_API
#endif

#define REGCACHE_VERSION_MAJOR 0
#define REGCACHE_VERSION_MINOR 4
#define REGCACHE_VERSION_PATCH 0

struct ibv_pd;
struct ibv_mr;
struct regcache_leave;
struct regcache_device_table;
typedef struct regcache regcache_t;
typedef struct regcache_entry regcache_entry_t;

/* ------------------------------------------------------------------------ */
/* Status codes and messages                                                 */
/* ------------------------------------------------------------------------ */

/*
 * The one table of status codes: X(NAME, value, message).  It generates the
 * enum below, regcache_strerror() and regcache_err_name(), so a code, its
 * name and its text cannot drift apart.  regcache_strerror(3) says when each
 * code is returned.
 */
#define REGCACHE_STATUS_TABLE(X)                                                                \
    X(OK, 0, "success")                                                                         \
    X(ERR_INVALID, -1, "invalid argument")                                                      \
    X(ERR_NO_MEMORY, -2, "out of host memory")                                                  \
    X(ERR_NOT_GPU, -3, "not GPU memory (host memory, unknown to CUDA, or already freed)")       \
    X(ERR_MANAGED, -4, "CUDA managed memory cannot be registered for GPUDirect RDMA")           \
    X(ERR_NO_SPACE, -5, "registration resources exhausted (BAR1 or pinned memory)")             \
    X(ERR_BACKEND, -6, "the registration backend failed")                                       \
    X(ERR_CUDA, -7, "a CUDA driver call failed")                                                \
    X(ERR_UNSUPPORTED, -8, "registration method or validation mode not available here")         \
    X(ERR_FORKED, -9, "cache was inherited across fork(); create a new cache in the child")     \
    X(ERR_RANGE, -10, "range is not one contiguous piece of mapped memory")                     \
    X(ERR_HOLD_LIMIT, -11, "entry has too many holders (gets without put)")                     \
    X(ERR_REENTRANT, -12, "a backend callback asked for the range it is registering")           \
    X(ERR_NOT_RDMA_CAPABLE, -13, "VMM memory was created without the GPUDirect RDMA flag")      \
    X(ERR_BAD_ADDRESS, -14, "host memory is not mapped or does not allow the access asked for") \
    X(ERR_TOO_LARGE, -15, "range is larger than the NIC's largest memory region")               \
    X(ERR_AGAIN, -16, "not registered yet: being registered in the background")                 \
    X(ERR_QUEUE_FULL, -17, "the background registration queue is full")                         \
    X(ERR_CALLBACK, -18, "params.on_register refused the registration")                         \
    X(ERR_NOT_CACHED, -19, "no cached registration covers the range (lookup)")

#define REGCACHE_STATUS_ENUM(name, value, message) REGCACHE_##name = value,
enum regcache_status { REGCACHE_STATUS_TABLE(REGCACHE_STATUS_ENUM) };
#undef REGCACHE_STATUS_ENUM

/* A text for a status code ("unknown status code" for other values), never
 * NULL.  Thread safe.  regcache_strerror(3). */
REGCACHE_API const char *regcache_strerror(int status);

/* The code's name as in this header ("REGCACHE_ERR_RANGE"; "unknown" for
 * other values), never NULL.  Thread safe.  regcache_strerror(3). */
REGCACHE_API const char *regcache_err_name(int status);

/* What the calling thread's last failing call went wrong on, in more detail
 * than regcache_strerror() (which module to load, which CUDA error came
 * back), or why the last regcache_create() with validation AUTO fell back
 * to TAG_CHECK; "" if there is none.  Per thread.  regcache_strerror(3). */
REGCACHE_API const char *regcache_last_error(void);

/* The library's version as "MAJOR.MINOR.PATCH", never NULL.  Thread safe.
 * regcache_strerror(3). */
REGCACHE_API const char *regcache_version(void);

/* ------------------------------------------------------------------------ */
/* Registration backends (regcache_backend(3))                               */
/* ------------------------------------------------------------------------ */

/* The device ordinal of host (CPU) memory. */
#define REGCACHE_DEVICE_HOST (-1)

enum regcache_mem_type {
    REGCACHE_MEM_DEVICE = 1, /* GPU memory (cuMemAlloc, pools, VMM) */
    REGCACHE_MEM_HOST = 2,   /* host memory, pinned or pageable */
    REGCACHE_MEM_MANAGED = 3 /* CUDA managed memory: never registered */
};

/* regcache_mem_info.flags */
enum regcache_mem_flags {
    REGCACHE_MEM_MAPPING = 1 /* one mapping of a VMM reservation */
};

/* What the cache knows about the memory holding an address: from the CUDA
 * driver, or a custom backend's query (the cache zeroes it first). */
struct regcache_mem_info {
    uintptr_t base;     /* the allocation (or VMM mapping) that holds it */
    size_t size;        /* its length in bytes */
    uint64_t buffer_id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID; 0 = none (pageable
                           host memory, never tag-checked) */
    int device;         /* CUDA device ordinal, or REGCACHE_DEVICE_HOST */
    int type;           /* enum regcache_mem_type */
    unsigned flags;     /* enum regcache_mem_flags */
};

/* How the cache pins memory when params.backend is set: reg (or, from 0.4,
 * reg_access) registers, dereg releases, query (optional) describes memory
 * instead of the CUDA driver; arg goes to each.  The cache holds no lock of
 * its own while it calls them, from several threads at once. */
struct regcache_backend {
    int (*reg)(void *arg, void *addr, size_t len, int device, int rail, void **handle);
    void (*dereg)(void *arg, void *handle);
    void *arg;
    int (*query)(void *arg, const void *addr, size_t len, struct regcache_mem_info *info);
    /* Added in 0.4. */
    int (*reg_access)(void *arg, void *addr, size_t len, int device, int rail, int access,
                      void *get_arg, void **handle);
};

/* ------------------------------------------------------------------------ */
/* Cache parameters (regcache_create(3))                                     */
/* ------------------------------------------------------------------------ */

/* The most NICs ("rails") one cache serves; see params.rails. */
#define REGCACHE_MAX_RAILS 8

/* The longest cache name, with its terminating NUL. */
#define REGCACHE_NAME_MAX 64

/* params.method: how the built-in backend registers GPU memory. */
enum regcache_method {
    REGCACHE_METHOD_AUTO = 0,    /* DMABUF where supported, else PEERMEM */
    REGCACHE_METHOD_DMABUF = 1,  /* cuMemGetHandleForAddressRange +
                                    ibv_reg_dmabuf_mr */
    REGCACHE_METHOD_PEERMEM = 2, /* ibv_reg_mr on the GPU address
                                    (nvidia_peermem) */
    REGCACHE_METHOD_HOST = 3     /* regcache_method_used() only: host memory
                                    alone; never a params.method */
};

/* params.validation: how the cache learns that memory was freed. */
enum regcache_validation {
    REGCACHE_VALIDATE_AUTO = 0,      /* HOOKS where a hook can be had, else
                                        TAG_CHECK */
    REGCACHE_VALIDATE_TAG_CHECK = 1, /* re-read the buffer id on every hit */
    REGCACHE_VALIDATE_HOOKS = 2,     /* the preload hook or the in-process
                                        interception; refused without one */
    REGCACHE_VALIDATE_NOTIFY = 3     /* (since 0.4) the application's own
                                        regcache_notify_free() and
                                        regcache_notify_alloc() */
};

/* params.host_monitor: how the process's host memory monitor hears that
 * cached pageable host memory was unmapped.  AUTO: UCM where UCX's libucm
 * is loaded, else LIBC where it installs, never UFFD. */
enum regcache_host_monitor {
    REGCACHE_HOST_MONITOR_AUTO = 0,
    REGCACHE_HOST_MONITOR_OFF = 1,  /* no monitor: invalidate it yourself */
    REGCACHE_HOST_MONITOR_LIBC = 2, /* libc's functions patched */
    REGCACHE_HOST_MONITOR_UFFD = 3, /* a userfaultfd */
    REGCACHE_HOST_MONITOR_UCM = 4,  /* UCX's memory events (added in 0.4) */
};

/* params.host_merge: which cached pageable host entries a miss merges
 * with.  AUTO: OFF for a cache with on_register or on_leave, else ALL. */
enum regcache_host_merge {
    REGCACHE_HOST_MERGE_AUTO = 0,
    REGCACHE_HOST_MERGE_OFF = 1,         /* never */
    REGCACHE_HOST_MERGE_SAME_ACCESS = 2, /* entries of the same access */
    REGCACHE_HOST_MERGE_ALL = 3,         /* every overlapping entry */
};

/*
 * Cache parameters.  Always start from regcache_params_init(): it records the
 * struct's size, so a program built against an older header keeps working
 * when fields are added at the end.  The REGCACHE_* environment variables
 * override the fields they name.  Each field's contract, and each default
 * written here, is regcache_create(3)'s (the test core_options_docs checks
 * these defaults against regcache_params_init()).
 */
struct regcache_params {
    size_t size;                            /* set by regcache_params_init() */
    struct ibv_pd *pd;                      /* the built-in backend's protection
                                               domain; default NULL */
    int access;                             /* IBV_ACCESS_* set registered; default
                                               IBV_ACCESS_LOCAL_WRITE|
                                               IBV_ACCESS_REMOTE_WRITE|
                                               IBV_ACCESS_REMOTE_READ */
    enum regcache_method method;            /* default REGCACHE_METHOD_AUTO */
    enum regcache_validation validation;    /* default REGCACHE_VALIDATE_AUTO */
    size_t alignment;                       /* registrations rounded to this power of
                                               two, 4096 to 1 GiB; default 65536 */
    size_t max_bytes;                       /* per device byte budget; 0 = free BAR1
                                               less a reserve (GPU), none (host);
                                               default 0 */
    size_t max_entries;                     /* per device entry limit; 0 = none;
                                               default 0 */
    int whole_allocation;                   /* register the whole allocation that
                                               holds a range; default 1 */
    int host_memory;                        /* take host memory too; default 0 */
    const struct regcache_backend *backend; /* NULL = built-in verbs; default NULL */
    /* Fields below were added in 0.2. */
    size_t whole_allocation_max; /* the largest allocation registered whole;
                                    0 = a quarter of the device's budget;
                                    default 0 */
    size_t rails;                /* NICs served, 1 to REGCACHE_MAX_RAILS;
                                    default 1 */
    struct ibv_pd *const *pds;   /* with rails > 1: pds[0 .. rails-1];
                                    default NULL */
    /* Fields below were added in 0.3. */
    size_t eager_min_bytes; /* register allocations of at least this size
                               in the background as they are made; 0 =
                               off; default 0 */
    unsigned eager_rails;   /* bit r: eager registration on rail r;
                               default 1 */
    unsigned workers;       /* background registration threads, up to 256;
                               0 = one per rail; default 0 */
    size_t prefetch_queue;  /* ranges queued or in flight at most, 1 to
                               1M; default 1024 */
    int host_monitor;       /* enum regcache_host_monitor; default
                               REGCACHE_HOST_MONITOR_AUTO */
    /* The transport's fields: regcache_callbacks(3). */
    size_t priv_size; /* bytes of private data per entry, 0 to 4096;
                         default 0 */
    /* After each registration of an entry on a rail; non-zero refuses it.
     * Default NULL. */
    int (*on_register)(void *arg, regcache_entry_t *entry, unsigned rail, void *handle, void *priv);
    /* Before each deregistration that on_register accepted.  Default NULL. */
    void (*on_deregister)(void *arg, regcache_entry_t *entry, unsigned rail, void *handle,
                          void *priv);
    /* An entry left the cache (struct regcache_leave says why).  Default
     * NULL. */
    void (*on_leave)(void *arg, const struct regcache_leave *leave);
    void *callback_arg; /* the callbacks' arg; default NULL */
    const char *name;   /* the cache's name (copied); NULL = REGCACHE_NAME,
                           else "cache<N>"; default NULL */
    /* Fields below were added in 0.4. */
    int host_merge;  /* enum regcache_host_merge; default
                        REGCACHE_HOST_MERGE_AUTO */
    int device_keys; /* 1: may mirror registrations into key tables on
                        GPUs; default 0 */
};

/* Fill *params with every default and record its size.  Thread safe.
 * regcache_create(3). */
REGCACHE_API int regcache_params_init(struct regcache_params *params);

/* ------------------------------------------------------------------------ */
/* Cache life cycle (regcache_create(3))                                     */
/* ------------------------------------------------------------------------ */

/* Create a cache from *params; on error *cache is NULL and
 * regcache_last_error() says why.  Thread safe.  regcache_create(3). */
REGCACHE_API int regcache_create(const struct regcache_params *params, regcache_t **cache);

/* Deregister every entry, held ones too, and free the cache; NULL is a
 * no-op.  Must not race with other calls on the same cache.
 * regcache_create(3). */
REGCACHE_API void regcache_destroy(regcache_t *cache);

/* ------------------------------------------------------------------------ */
/* Getting a registration                                                    */
/* ------------------------------------------------------------------------ */

/*
 * The get family.  regcache_get_access() is the general form: a held
 * registration of [addr, addr+len) on a rail, for an access, with flags
 * that look only or never wait.  regcache_get_rail() is it with
 * params.access and no flags, and regcache_get() is regcache_get_rail() on
 * rail 0.  Every get is put once, by regcache_put().
 */

/* Hold a registration that covers [addr, addr+len) on rail 0, registering
 * it on a miss; on error *entry is NULL and nothing is left registered.
 * Thread safe.  regcache_get(3). */
REGCACHE_API int regcache_get(regcache_t *cache, const void *addr, size_t len,
                              regcache_entry_t **entry);

/* regcache_get() on NIC `rail` (0 .. params.rails-1).  Thread safe.
 * regcache_get(3). */
REGCACHE_API int regcache_get_rail(regcache_t *cache, unsigned rail, const void *addr, size_t len,
                                   regcache_entry_t **entry);

/* regcache_get_access() flags (at most one of them). */
enum regcache_get_flags {
    REGCACHE_GET_NONBLOCK = 1, /* never wait: queue what is no hit and
                                  return REGCACHE_ERR_AGAIN */
    REGCACHE_GET_LOOKUP = 2    /* only look (added in 0.4): no hit is
                                  REGCACHE_ERR_NOT_CACHED */
};

/* The general get: regcache_get_rail() for the IBV_ACCESS_* set `access`
 * instead of params.access, with flags 0, REGCACHE_GET_NONBLOCK or
 * REGCACHE_GET_LOOKUP.  An entry serves every get whose access its own
 * covers.  Thread safe.  regcache_get_access(3). */
REGCACHE_API int regcache_get_access(regcache_t *cache, unsigned rail, const void *addr, size_t len,
                                     int access, unsigned flags, regcache_entry_t **entry);

/* regcache_get_access() that hands `get_arg` to a custom backend's
 * reg_access when this get registers.  Thread safe.
 * regcache_get_access(3). */
REGCACHE_API int regcache_get_with_arg(regcache_t *cache, unsigned rail, const void *addr,
                                       size_t len, int access, unsigned flags, void *get_arg,
                                       regcache_entry_t **entry);

/* Release an entry from a get: it stays registered and becomes the most
 * recently used (or, invalidated while held, is deregistered now).  NULL is
 * a no-op; `cache` is the entry's cache or NULL.  Thread safe, from any
 * thread.  regcache_get(3). */
REGCACHE_API void regcache_put(regcache_t *cache, regcache_entry_t *entry);

/* ------------------------------------------------------------------------ */
/* A holder's calls on its entry                                             */
/* ------------------------------------------------------------------------ */

/* Another hold on the registration of `entry`, a token the caller holds:
 * *token, released by its own regcache_put().  Nothing is looked up or
 * registered.  Thread safe.  regcache_entry_hold(3). */
REGCACHE_API int regcache_entry_hold(regcache_t *cache, const regcache_entry_t *entry,
                                     regcache_entry_t **token);

/* Take the registration of `entry`, a token the caller holds, out of the
 * cache now; cb(arg) runs once, after its deregistration at the put of its
 * last token.  Thread safe.  regcache_entry_invalidate(3). */
REGCACHE_API int regcache_entry_invalidate(regcache_t *cache, regcache_entry_t *entry,
                                           void (*cb)(void *arg), void *arg);

/* The backend's handle of a held entry on the rail it was got on (the
 * struct ibv_mr * of the built-in backend); NULL for NULL.  Thread safe.
 * regcache_entry(3). */
REGCACHE_API void *regcache_entry_handle(const regcache_entry_t *entry);

/* The struct ibv_mr * of a held entry of the built-in backend; NULL for a
 * custom backend or NULL.  Thread safe.  regcache_entry(3). */
REGCACHE_API struct ibv_mr *regcache_entry_mr(const regcache_entry_t *entry);

/* The IBV_ACCESS_* set a held entry was registered for; 0 for NULL.  Thread
 * safe.  regcache_entry(3). */
REGCACHE_API int regcache_entry_access(const regcache_entry_t *entry);

/* The private data of an entry (params.priv_size bytes, 64-byte aligned);
 * NULL when priv_size is 0 or for NULL.  Thread safe.  regcache_entry(3). */
REGCACHE_API void *regcache_entry_priv(const regcache_entry_t *entry);

/* The registered range of a held entry (rounded; may be larger than the
 * request); either output may be NULL.  Thread safe.  regcache_entry(3). */
REGCACHE_API void regcache_entry_range(const regcache_entry_t *entry, uintptr_t *start,
                                       size_t *len);

/* ------------------------------------------------------------------------ */
/* Registering ahead of use (regcache_prefetch(3))                           */
/* ------------------------------------------------------------------------ */

/* Queue [addr, addr+len) for registration on `rail` by the cache's
 * background threads and return at once.  Thread safe.
 * regcache_prefetch(3). */
REGCACHE_API int regcache_prefetch(regcache_t *cache, unsigned rail, const void *addr, size_t len);

/* regcache_prefetch() for the IBV_ACCESS_* set the range will be used with.
 * Thread safe.  regcache_prefetch(3). */
REGCACHE_API int regcache_prefetch_access(regcache_t *cache, unsigned rail, const void *addr,
                                          size_t len, int access);

/* Wait until every range queued so far is registered, failed or dropped.
 * Thread safe.  regcache_prefetch(3). */
REGCACHE_API int regcache_prefetch_wait(regcache_t *cache);

/* A range to register (regcache_prefetch_batch()). */
struct regcache_range {
    const void *addr;
    size_t len;
    unsigned rail;
};

/* regcache_prefetch() of each of the n ranges, in order, until one fails;
 * *queued (if not NULL) says how many were queued.  Thread safe.
 * regcache_prefetch(3). */
REGCACHE_API int regcache_prefetch_batch(regcache_t *cache, const struct regcache_range *ranges,
                                         size_t n, size_t *queued);

/* A range to register with the access it will be used with
 * (regcache_prefetch_batch_access()). */
struct regcache_access_range {
    const void *addr;
    size_t len;
    unsigned rail;
    int access; /* IBV_ACCESS_* set, as for regcache_prefetch_access() */
};

/* regcache_prefetch_access() of each of the n ranges, in order, until one
 * fails; *queued (if not NULL) says how many were queued.  Thread safe.
 * regcache_prefetch(3). */
REGCACHE_API int regcache_prefetch_batch_access(regcache_t *cache,
                                                const struct regcache_access_range *ranges,
                                                size_t n, size_t *queued);

/* ------------------------------------------------------------------------ */
/* Invalidation and eviction                                                 */
/* ------------------------------------------------------------------------ */

/* Drop every entry of the cache overlapping [addr, addr+len): unused ones
 * now, held ones at their last put.  Thread safe.  regcache_invalidate(3). */
REGCACHE_API int regcache_invalidate(regcache_t *cache, const void *addr, size_t len);

/* Deregister every unused entry.  Thread safe.  regcache_invalidate(3). */
REGCACHE_API int regcache_flush(regcache_t *cache);

/* regcache_invalidate() on every live cache of the process: what the hooks
 * call before memory is freed.  May be called from any callback.  Thread
 * safe.  regcache_notify_free(3). */
REGCACHE_API void regcache_notify_free(const void *addr, size_t len);

/* Tell every live cache that [addr, addr+len) was just allocated (or
 * mapped).  HOOKS and NOTIFY need both notices.  Thread safe.
 * regcache_notify_free(3). */
REGCACHE_API void regcache_notify_alloc(const void *addr, size_t len);

/* regcache_notify_alloc() for pinned host memory just allocated
 * (cuMemAllocHost, cuMemHostAlloc).  Thread safe.  regcache_notify_free(3). */
REGCACHE_API void regcache_notify_host_alloc(const void *addr, size_t len);

/* The number of caches alive in this process.  Thread safe.
 * regcache_notify_free(3). */
REGCACHE_API int regcache_cache_count(void);

/* ------------------------------------------------------------------------ */
/* Why entries leave (regcache_reason_name(3))                               */
/* ------------------------------------------------------------------------ */

/* Why an entry left the cache (params.on_leave, statistics' leaves[]). */
enum regcache_reason {
    REGCACHE_REASON_EVICT_BUDGET = 0, /* evicted for the byte or entry budget */
    REGCACHE_REASON_EVICT_EXHAUSTED,  /* evicted to retry a registration that ran out of
                                         resources (BAR1, pinned memory, MRs) */
    REGCACHE_REASON_FLUSH,            /* regcache_flush() */
    REGCACHE_REASON_FREED_HOOK,       /* memory freed, seen by the CUDA hooks or
                                         regcache_notify_free() */
    REGCACHE_REASON_FREED_MONITOR,    /* host memory unmapped or replaced, seen by the
                                         memory monitor */
    REGCACHE_REASON_FREED_TAG,        /* a tag check found the buffer replaced */
    REGCACHE_REASON_INVALIDATE,       /* regcache_invalidate(),
                                         regcache_entry_invalidate() */
    REGCACHE_REASON_DESTROY,          /* regcache_destroy() */
    REGCACHE_REASON_REPLACED,         /* replaced by a registration with wider access
                                         that covers it (an access upgrade) */
    REGCACHE_REASON_MERGED,           /* pageable host memory merged into a wider
                                         registration (added in 0.4: older programs
                                         are told REGCACHE_REASON_REPLACED) */
    REGCACHE_REASON_COUNT
};

/* The reason's short name ("evict-budget", ...; "unknown" for other
 * values), never NULL.  Thread safe.  regcache_reason_name(3). */
REGCACHE_API const char *regcache_reason_name(int reason);

/* What params.on_leave is told of an entry that left the cache, valid
 * during the call only (regcache_callbacks(3)). */
struct regcache_leave {
    int reason;      /* enum regcache_reason */
    uintptr_t start; /* the registered range (rounded) */
    size_t len;
    unsigned rails; /* bit r: registered on rail r */
    /* handles[r] for each rail in `rails` (the struct ibv_mr * of the
     * built-in backend). */
    void *const *handles;
    void *priv; /* the entry's private data, or NULL */
    int access; /* as regcache_entry_access() */
    int held;   /* 1: held now, deregistered at its last put */
};

/* ------------------------------------------------------------------------ */
/* Introspection (regcache_get_stats(3), regcache_validation_mode(3))        */
/* ------------------------------------------------------------------------ */

/* A cache's (or one device's) counters; regcache_get_stats(3) says what
 * each counts. */
struct regcache_stats {
    uint64_t hits;                   /* gets served by a cached entry */
    uint64_t misses;                 /* gets that needed a registration */
    uint64_t registrations;          /* successful backend reg calls */
    uint64_t deregistrations;        /* backend dereg calls */
    uint64_t evictions;              /* entries evicted (budget or exhaustion) */
    uint64_t invalidations_tag;      /* entries dropped by a failed tag check */
    uint64_t invalidations_notify;   /* entries dropped by regcache_notify_free */
    uint64_t invalidations_explicit; /* entries dropped by regcache_invalidate */
    uint64_t reg_failures;           /* failed backend reg calls (retries count) */
    uint64_t entries;                /* entries in the cache now */
    uint64_t bytes;                  /* registered bytes in the cache now
                                        (counted once however many rails) */
    uint64_t peak_bytes;             /* highest value of bytes so far */
    /* Fields below were added in 0.2. */
    uint64_t one_shots; /* gets served a registration that never
                           entered the cache */
    uint64_t budget;    /* byte budget now; 0 = none */
    /* Fields below were added in 0.3. */
    uint64_t fds;                   /* file descriptors the cache holds now */
    uint64_t mrs;                   /* registrations (one per rail) held now */
    uint64_t prefetches;            /* ranges queued in the background */
    uint64_t prefetch_failures;     /* their registrations that failed */
    uint64_t prefetch_dropped;      /* queued ranges never registered */
    uint64_t invalidations_monitor; /* entries dropped by the host memory
                                       monitor */
    uint64_t host_unmonitored;      /* host entries no monitor watches now */
    uint64_t reg_latency_p50_ns;    /* registration latency, all rails */
    uint64_t reg_latency_p99_ns;
    uint32_t rails;                                  /* params.rails */
    uint32_t dmabuf_mapping[REGCACHE_MAX_RAILS];     /* enum regcache_dmabuf_mapping */
    uint32_t data_direct[REGCACHE_MAX_RAILS];        /* 1: the rail takes it data-direct */
    uint64_t rail_registrations[REGCACHE_MAX_RAILS]; /* successful reg calls per rail */
    uint64_t rail_reg_failures[REGCACHE_MAX_RAILS];  /* failed reg calls per rail */
    uint64_t rail_bytes[REGCACHE_MAX_RAILS];         /* bytes registered on the rail
                                                        now (one-shots included) */
    uint64_t leaves[16]; /* entries that left, by enum regcache_reason */
};

/* How a rail's exports of GPU memory are mapped (regcache_stats). */
enum regcache_dmabuf_mapping {
    REGCACHE_DMABUF_NONE = 0,   /* no dmabuf: peermem, host memory, or a
                                   custom backend */
    REGCACHE_DMABUF_PCIE = 1,   /* exports ask for the PCIe mapping */
    REGCACHE_DMABUF_DEFAULT = 2 /* the driver's default mapping */
};

/* Copy the cache's counters into *stats (each exact, the set not a
 * snapshot).  Thread safe.  regcache_get_stats(3). */
REGCACHE_API int regcache_get_stats(const regcache_t *cache, struct regcache_stats *stats);

/* The counters of one device the cache has seen (a CUDA ordinal, or
 * REGCACHE_DEVICE_HOST).  Thread safe.  regcache_get_stats(3). */
REGCACHE_API int regcache_get_device_stats(const regcache_t *cache, int device,
                                           struct regcache_stats *stats);

/* The devices the cache has seen, in ascending order, into devices[0 ..
 * max); *count says how many there are.  Thread safe.
 * regcache_get_stats(3). */
REGCACHE_API int regcache_get_devices(const regcache_t *cache, int *devices, size_t max,
                                      size_t *count);

/* regcache_get_latency(): every device, or every rail. */
#define REGCACHE_DEVICE_ALL (-2)
#define REGCACHE_RAIL_ALL (-1)

/* The histogram's buckets: bucket i counts registrations that took
 * [2^i, 2^(i+1)) ns. */
#define REGCACHE_LATENCY_BUCKETS 40

struct regcache_latency {
    uint64_t count;  /* successful registrations counted */
    uint64_t p50_ns; /* upper bound of the bucket holding the median; 0 if none */
    uint64_t p99_ns; /* same for the 99th percentile */
    uint64_t bucket[REGCACHE_LATENCY_BUCKETS];
};

/* The registration-latency histogram of a device (or REGCACHE_DEVICE_ALL)
 * on a rail (or REGCACHE_RAIL_ALL).  Thread safe.  regcache_get_stats(3). */
REGCACHE_API int regcache_get_latency(const regcache_t *cache, int device, int rail,
                                      struct regcache_latency *latency);

/* Start the counters and histograms again from zero; what describes the
 * cache now is kept.  Thread safe.  regcache_get_stats(3). */
REGCACHE_API int regcache_reset_stats(regcache_t *cache);

/* One entry of the cache, as regcache_foreach_entry() shows it. */
struct regcache_entry_info {
    uintptr_t start;  /* the registered range: [start, start+bytes) */
    size_t bytes;     /* its length, counted once however many rails */
    int device;       /* CUDA ordinal or REGCACHE_DEVICE_HOST */
    unsigned rails;   /* bit r set: registered on rail r */
    unsigned holders; /* gets not yet put, as seen at the look */
    uint64_t age_ns;  /* since it was registered (a coarse clock: a
                         few milliseconds) */
};

/* Call cb(arg, info) for every entry, in ascending order of address, on a
 * copy taken under the cache's lock, until cb returns non-zero.  Thread
 * safe.  regcache_get_stats(3). */
REGCACHE_API int
regcache_foreach_entry(regcache_t *cache,
                       int (*cb)(void *arg, const struct regcache_entry_info *info), void *arg);

/* Print the cache's entries to `out`, one line each.  Thread safe.
 * regcache_get_stats(3). */
REGCACHE_API int regcache_print_entries(regcache_t *cache, FILE *out);

/* The cache's name; NULL for NULL.  Thread safe.  regcache_get_stats(3). */
REGCACHE_API const char *regcache_name(const regcache_t *cache);

/* The validation mode the cache uses (AUTO resolved), or
 * REGCACHE_ERR_INVALID for NULL.  Thread safe.
 * regcache_validation_mode(3). */
REGCACHE_API int regcache_validation_mode(const regcache_t *cache);

/* Why the cache validates as it does, and what applies to host memory;
 * NULL for NULL.  Thread safe.  regcache_validation_mode(3). */
REGCACHE_API const char *regcache_validation_reason(const regcache_t *cache);

/* The method the built-in backend selected, 0 for a custom backend, or
 * REGCACHE_ERR_INVALID for NULL.  Thread safe.
 * regcache_validation_mode(3). */
REGCACHE_API int regcache_method_used(const regcache_t *cache);

/* ------------------------------------------------------------------------ */
/* Keys for GPU kernels: the host's side (regcache_device_keys_attach(3);   */
/* the kernel's side is include/regcache_device.h)                           */
/* ------------------------------------------------------------------------ */

/* The table's shape; start from regcache_device_keys_params_init().  The
 * defaults written here are checked against it (core_options_docs). */
struct regcache_device_keys_params {
    size_t size;               /* sizeof(struct regcache_device_keys_params) */
    size_t page_slots;         /* slots, one per 64 KiB page of each
                                  registration: a power of two, 1024 to
                                  2^28; default 2^20 */
    size_t records;            /* registrations mirrored at most, 2 to 2^24;
                                  default 65536 */
    unsigned max_probe;        /* slots a lookup reads at most, 1 to 64;
                                  default 16 */
    size_t hold_slots;         /* hold sections open at once, 1 to 2^20;
                                  default 1024 */
    size_t ring_slots;         /* misses posted and unread at once: a power
                                  of two, 2 to 2^20; default 1024 */
    uint64_t drain_timeout_ns; /* the longest a deregistration waits for
                                  hold sections; default 1 s */
    uint64_t poll_ns;          /* the longest the table's threads sleep
                                  between looks; default 100 us */
    /* The local key of a registration handle on a rail, called under the
     * cache lock; NULL: the built-in backend's.  Default NULL. */
    uint32_t (*lkey)(void *arg, void *handle, unsigned rail);
    void *lkey_arg; /* default NULL */
};

/* Fill *params with every default.  Thread safe.
 * regcache_device_keys_attach(3). */
REGCACHE_API int regcache_device_keys_params_init(struct regcache_device_keys_params *params);

/* Mirror the cache's registrations into a key table on CUDA device
 * `device` for kernels, start the table's threads (regcache-keys answers
 * kernels' misses, regcache-kwrite writes the table), and fill *table as
 * kernels take it; params may be NULL.  Thread safe.
 * regcache_device_keys_attach(3). */
REGCACHE_API int regcache_device_keys_attach(regcache_t *cache, int device,
                                             const struct regcache_device_keys_params *params,
                                             struct regcache_device_table *table);

/* Take the table off `device` (regcache_destroy() detaches every table).
 * Thread safe.  regcache_device_keys_attach(3). */
REGCACHE_API int regcache_device_keys_detach(regcache_t *cache, int device);

/* The table on `device`, as kernels take it, into *table.  Thread safe.
 * regcache_device_keys_attach(3). */
REGCACHE_API int regcache_device_keys_table(const regcache_t *cache, int device,
                                            struct regcache_device_table *table);

/* Write every registration made so far to the table on `device`, and
 * return once written.  Thread safe.  regcache_device_keys_attach(3). */
REGCACHE_API int regcache_device_keys_sync(regcache_t *cache, int device);

/* A table's counters (regcache_device_keys_attach(3)). */
struct regcache_device_keys_stats {
    uint64_t records;           /* registrations in the table now */
    uint64_t published;         /* records written (a registration, or one
                                   more of its rails) */
    uint64_t removed;           /* records taken out */
    uint64_t unmirrored;        /* registrations or pages without room */
    uint64_t flushes;           /* writes to the device: the writer's,
                                   sync's, and each removal's number */
    uint64_t flush_failures;    /* writes the driver failed */
    uint64_t flush_ns_total;    /* time the writes took, in all */
    uint64_t flush_ns_max;      /* the longest write */
    uint64_t requests;          /* misses kernels posted */
    uint64_t request_failures;  /* of them, answered with an error */
    uint64_t answer_ns_total;   /* from the table's thread reading a miss
                                   to its answer, summed over misses */
    uint64_t answer_ns_max;     /* the longest of those */
    uint64_t register_ns_total; /* of that, the thread's gets (the
                                   registrations), in all */
    uint64_t register_ns_max;   /* the longest of its gets */
    uint64_t drains;            /* deregistrations that waited for hold
                                   sections */
    uint64_t drain_ns_total;    /* how long they waited, in all */
    uint64_t drain_ns_max;      /* the longest wait */
    uint64_t drain_timeouts;    /* waits that reached drain_timeout_ns: the
                                   registration went with sections open */
    uint64_t reserved[4];
};

/* The counters of the table on `device`.  Thread safe.
 * regcache_device_keys_attach(3). */
REGCACHE_API int regcache_device_keys_stats(const regcache_t *cache, int device,
                                            struct regcache_device_keys_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* REGCACHE_H */
