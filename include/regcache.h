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
 *     asks for at regcache_destroy(), and regcache_print_entries() to the
 *     stream it is given;
 *   - "thread safe" means any number of threads may call the function on the
 *     same cache at once.
 *
 * Every REGCACHE_API function has a man page (man regcache_get), made from
 * docs/man/<function>.3.md or listed in the NAME line of its group's page
 * there: a new function needs one new file, or one more name in that line
 * (the test docs_man_pages checks).
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
typedef struct regcache_entry regcache_entry_t;

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/*
 * The one table of status codes: X(NAME, value, message).  It generates the
 * enum below, regcache_strerror() and regcache_err_name(), so a code, its
 * name and its text cannot drift apart.
 *
 *   OK                 success.
 *   ERR_INVALID        a NULL pointer, zero length, a range that wraps the
 *                      address space, a params struct of an unknown size, an
 *                      out-of-range option or rail, or a call that breaks the
 *                      API's rules (regcache_last_error() says which).
 *   ERR_NO_MEMORY      malloc() or mmap() failed inside the cache.
 *   ERR_NOT_GPU        the range is not GPU memory: host memory while
 *                      host_memory is off, memory CUDA does not know, or
 *                      memory that has been freed.
 *   ERR_MANAGED        CUDA managed (unified) memory: GPUDirect RDMA cannot
 *                      register it.
 *   ERR_NO_SPACE       the backend ran out of resources (BAR1, pinned memory)
 *                      and evicting unused entries of the device did not make
 *                      room.
 *   ERR_BACKEND        the registration backend failed for another reason.
 *   ERR_CUDA           a CUDA driver call failed unexpectedly.
 *   ERR_UNSUPPORTED    the requested method is not available here (no
 *                      nvidia-peermem, no dmabuf support in the GPU or the
 *                      verbs provider, no CUDA driver), or validation HOOKS
 *                      where no hook can see the process's CUDA frees.
 *   ERR_FORKED         the cache was created before fork() and used in the
 *                      child: its registrations belong to the parent.
 *   ERR_RANGE          the range is not one contiguous piece of mapped memory
 *                      (it spans two allocations, or a hole between VMM
 *                      mappings).
 *   ERR_HOLD_LIMIT     an entry already has 2^31-1 holders (gets without a
 *                      put): further holds are refused rather than corrupting
 *                      its count.
 *   ERR_REENTRANT      a backend callback asked for the range it is
 *                      registering: waiting for itself would never end.
 *   ERR_NOT_RDMA_CAPABLE  VMM memory created without
 *                      CUmemAllocationProp.allocFlags.gpuDirectRDMACapable:
 *                      refused before the NIC is asked.
 *   ERR_BAD_ADDRESS    host memory the backend refused with EFAULT, EINVAL
 *                      or EPERM: not mapped, PROT_NONE, or a protection
 *                      that does not allow params.access (read-only memory
 *                      with LOCAL_WRITE asked for).  Nothing is evicted.
 *   ERR_TOO_LARGE      the range, rounded to params.alignment, is longer
 *                      than the largest memory region a rail's NIC takes
 *                      (its max_mr_size, or REGCACHE_MAX_MR_SIZE);
 *                      regcache_last_error() names the limit: split the
 *                      transfer.  Nothing is registered.
 *   ERR_AGAIN          a non-blocking get (regcache_get_access() with
 *                      REGCACHE_GET_NONBLOCK) found no registration: it is
 *                      being made in the background; send another way
 *                      meanwhile and get again later.
 *   ERR_QUEUE_FULL     params.prefetch_queue ranges are already queued or
 *                      being registered in the background: nothing was
 *                      queued.
 *   ERR_CALLBACK       params.on_register returned non-zero for the
 *                      registration: it was undone (regcache_last_error()
 *                      gives the value).
 *   ERR_NOT_CACHED     a lookup (regcache_get_access() with
 *                      REGCACHE_GET_LOOKUP) found no cached registration
 *                      that covers the range with the access on the rail:
 *                      nothing was registered or queued.
 */
#define REGCACHE_STATUS_TABLE(X)                                                            \
    X(OK, 0, "success")                                                                     \
    X(ERR_INVALID, -1, "invalid argument")                                                  \
    X(ERR_NO_MEMORY, -2, "out of host memory")                                              \
    X(ERR_NOT_GPU, -3, "not GPU memory (host memory, unknown to CUDA, or already freed)")   \
    X(ERR_MANAGED, -4, "CUDA managed memory cannot be registered for GPUDirect RDMA")       \
    X(ERR_NO_SPACE, -5, "registration resources exhausted (BAR1 or pinned memory)")         \
    X(ERR_BACKEND, -6, "the registration backend failed")                                   \
    X(ERR_CUDA, -7, "a CUDA driver call failed")                                            \
    X(ERR_UNSUPPORTED, -8, "registration method or validation mode not available here")     \
    X(ERR_FORKED, -9, "cache was inherited across fork(); create a new cache in the child") \
    X(ERR_RANGE, -10, "range is not one contiguous piece of mapped memory")                 \
    X(ERR_HOLD_LIMIT, -11, "entry has too many holders (gets without put)")                 \
    X(ERR_REENTRANT, -12, "a backend callback asked for the range it is registering")       \
    X(ERR_NOT_RDMA_CAPABLE, -13, "VMM memory was created without the GPUDirect RDMA flag")   \
    X(ERR_BAD_ADDRESS, -14, "host memory is not mapped or does not allow the access asked for") \
    X(ERR_TOO_LARGE, -15, "range is larger than the NIC's largest memory region")          \
    X(ERR_AGAIN, -16, "not registered yet: being registered in the background")             \
    X(ERR_QUEUE_FULL, -17, "the background registration queue is full")                      \
    X(ERR_CALLBACK, -18, "params.on_register refused the registration")                     \
    X(ERR_NOT_CACHED, -19, "no cached registration covers the range (lookup)")

#define REGCACHE_STATUS_ENUM(name, value, message) REGCACHE_##name = value,
enum regcache_status { REGCACHE_STATUS_TABLE(REGCACHE_STATUS_ENUM) };
#undef REGCACHE_STATUS_ENUM

/* Human-readable text for a status code; "unknown status code" for others;
 * never NULL.  Thread safe. */
REGCACHE_API const char *regcache_strerror(int status);

/* The code's name as in this header ("REGCACHE_ERR_RANGE"); "unknown" for
 * others; never NULL.  Thread safe. */
REGCACHE_API const char *regcache_err_name(int status);

/* The library's version as "MAJOR.MINOR.PATCH"; never NULL.  Thread safe. */
REGCACHE_API const char *regcache_version(void);

/* ------------------------------------------------------------------------ */
/* Registration backends                                                     */
/* ------------------------------------------------------------------------ */

/* Device ordinal reported for host (CPU) memory. */
#define REGCACHE_DEVICE_HOST (-1)

/* The most NICs ("rails") one cache serves; see params.rails. */
#define REGCACHE_MAX_RAILS 8

enum regcache_mem_type {
    REGCACHE_MEM_DEVICE = 1, /* GPU memory (cuMemAlloc, pools, VMM) */
    REGCACHE_MEM_HOST = 2,   /* host memory, pinned or pageable */
    REGCACHE_MEM_MANAGED = 3 /* CUDA managed memory: never registered */
};

/* regcache_mem_info.flags */
enum regcache_mem_flags {
    /* The piece described is one mapping of a larger address reservation
     * (CUDA VMM: cuMemMap).  A request may run on into the adjacent mapping
     * when that one is flagged too: the cache then registers the mappings
     * together, as one range, and validates each of them. */
    REGCACHE_MEM_MAPPING = 1
};

/* What the cache knows about the memory holding an address.  Filled by the
 * CUDA driver, or by a custom backend's query callback (the cache zeroes it
 * before each call, so a callback may leave fields it does not know). */
struct regcache_mem_info {
    uintptr_t base;     /* start of the allocation (or VMM mapping) that
                           holds the address */
    size_t size;        /* its length in bytes */
    uint64_t buffer_id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID; 0 = no id
                           (pageable host memory): such entries are never
                           tag-checked */
    int device;         /* CUDA device ordinal, or REGCACHE_DEVICE_HOST */
    int type;           /* enum regcache_mem_type */
    unsigned flags;     /* enum regcache_mem_flags */
};

/*
 * A registration backend: how the cache pins memory.  NULL in the params
 * selects the built-in verbs backend (params.pd, params.access,
 * params.method).
 *
 * reg:   register [addr, addr+len) of `device` (REGCACHE_DEVICE_HOST for host
 *        memory) with NIC `rail` (0 .. params.rails-1); store an opaque
 *        handle in *handle and return 0, or return an errno value.  ENOMEM,
 *        ENOSPC, EAGAIN, EMFILE and ENFILE mean "resources exhausted": the
 *        cache evicts unused entries of that device and retries.  EFAULT counts as exhaustion
 *        only while the memory is still what the cache registered (the cache
 *        asks again; nvidia-peermem reports a full BAR1 so), else the get
 *        fails with NOT_GPU.  For host memory (REGCACHE_DEVICE_HOST)
 *        EFAULT, EINVAL and EPERM mean a bad address or an access the
 *        memory does not allow: the get fails with BAD_ADDRESS and nothing
 *        is evicted.  Any other non-zero value fails the get with
 *        REGCACHE_ERR_BACKEND.
 * dereg: release a handle that reg returned.
 * arg:   passed to both.
 * query: optional.  Describe the memory at addr in *info and return
 *        REGCACHE_OK, or return a REGCACHE_ERR_* code (NOT_GPU for memory
 *        that is gone).  Any other value (an errno, say) fails the get
 *        with REGCACHE_ERR_BACKEND.  When set, the cache asks it instead
 *        of the CUDA driver, both on a miss and for tag checks; this is
 *        how a custom backend describes memory the driver does not know.
 *
 * Whatever a callback returns, regcache_get() returns a status of this
 * header, and regcache_last_error() names the value the callback returned.
 *
 * What callbacks may do: the cache holds no lock of its own (neither a
 * cache lock nor the process-wide one) while it calls reg, dereg or query,
 * and calls them from several threads at once (for different ranges).  They
 * may call any regcache function, with two exceptions: regcache_destroy() of
 * the calling cache, and - from reg - a get overlapping the range being
 * registered, which fails with REGCACHE_ERR_REENTRANT instead of waiting for
 * itself.  An invalidation from reg of its own range is honoured: the
 * registration is then handed out once and deregistered at its put.
 *
 * reg_access (added in 0.4): optional.  When set it is called instead of
 * reg, with two more arguments: `access`, the IBV_ACCESS_* set the entry
 * is registered for (the union of the gets it serves, as
 * regcache_entry_access() reports it), and `get_arg`, the argument of the
 * regcache_get_with_arg() whose miss made the registration (NULL for other
 * gets and for background registrations); reg may then be NULL.  The
 * cache reads this member only from programs built against a 0.4 header
 * or later (params.size says which): an older program's struct ends
 * before it.
 */
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
/* Cache parameters                                                          */
/* ------------------------------------------------------------------------ */

enum regcache_method {
    REGCACHE_METHOD_AUTO = 0,   /* DMABUF where GPU and provider support it,
                                   else PEERMEM */
    REGCACHE_METHOD_DMABUF = 1, /* cuMemGetHandleForAddressRange +
                                   ibv_reg_dmabuf_mr */
    REGCACHE_METHOD_PEERMEM = 2, /* ibv_reg_mr on the GPU address; needs the
                                    nvidia_peermem kernel module */
    REGCACHE_METHOD_HOST = 3     /* regcache_method_used() only, never a
                                    params.method: ibv_reg_mr of host memory
                                    alone (AUTO found no GPU method, and
                                    params.host_memory is set) */
};

enum regcache_validation {
    REGCACHE_VALIDATE_AUTO = 0,      /* HOOKS when every CUDA free is provably
                                        seen - by the preload hook, or by the
                                        in-process interception that creating
                                        the cache installs (README) - else
                                        TAG_CHECK */
    REGCACHE_VALIDATE_TAG_CHECK = 1, /* re-read the buffer id on every hit */
    REGCACHE_VALIDATE_HOOKS = 2,     /* trust the hooks: the preload hook, or
                                        the in-process interception, which
                                        creating the cache installs; where
                                        neither can be had, regcache_create()
                                        fails with UNSUPPORTED */
    REGCACHE_VALIDATE_NOTIFY = 3     /* (since 0.4) trust the application, which
                                        calls regcache_notify_free() before
                                        each free and regcache_notify_alloc()
                                        after each allocation itself; nothing
                                        is installed */
};

/*
 * Cache parameters.  Always start from regcache_params_init(): it records the
 * struct's size, so a program built against an older header keeps working
 * when fields are added at the end.
 */
struct regcache_params {
    size_t size;                            /* sizeof(struct regcache_params); set by
                                               regcache_params_init() */
    struct ibv_pd *pd;                      /* protection domain (built-in backend) */
    int access;                             /* IBV_ACCESS_* flags (built-in backend);
                                               default LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ;
                                               LOCAL_WRITE is added to REMOTE_WRITE or
                                               REMOTE_ATOMIC (verbs requires it) */
    enum regcache_method method;            /* default AUTO */
    enum regcache_validation validation;    /* default AUTO */
    size_t alignment;                       /* registrations are rounded to this power of
                                               two; default 65536 (the GPU BAR page);
                                               pageable host memory is clipped to its
                                               mappings, and overlapping host entries
                                               merge (README) */
    size_t max_bytes;                       /* per device budget for cached bytes; 0 =
                                               free BAR1 (where NVML reports none, the
                                               GPU's memory) less a reserve for GPUs
                                               (see README), unlimited for host memory */
    size_t max_entries;                     /* per device entry limit; 0 = unlimited */
    int whole_allocation;                   /* register the whole CUDA allocation that
                                               holds a range (default 1), where it is
                                               at most whole_allocation_max */
    int host_memory;                        /* accept host memory (default 0: refused
                                               with REGCACHE_ERR_NOT_GPU) */
    const struct regcache_backend *backend; /* NULL = built-in verbs */
    /* Fields below were added in 0.2. */
    size_t whole_allocation_max; /* the largest allocation registered whole;
                                    larger ones register the request rounded
                                    to alignment.  0 = a quarter of the
                                    device's byte budget (no cap without a
                                    budget) */
    size_t rails;                /* NICs served by this cache, 1 (default)
                                    to REGCACHE_MAX_RAILS: each entry holds
                                    one registration per rail, made when a
                                    get first asks for that rail */
    struct ibv_pd *const *pds;   /* built-in backend with rails > 1: the
                                    protection domain of each rail
                                    (pds[0 .. rails-1]); pd is then unused */
    /* Fields below were added in 0.3. */
    size_t eager_min_bytes; /* eager registration: each allocation of at
                               least this many bytes that the hooks (or
                               regcache_notify_alloc() and
                               regcache_notify_host_alloc()) report is
                               queued for a background registration on
                               the rails of eager_rails as it is made
                               (see regcache_prefetch()); pinned host
                               memory with host_memory only.  0 = off
                               (default) */
    unsigned eager_rails;   /* bit r: eager registration on rail r;
                               default 1 (rail 0) */
    unsigned workers;       /* background registration threads, started
                               at the first queued range; 0 (default):
                               one per rail (registrations through the
                               CUDA driver gain nothing from more); as
                               many register at once as measurably
                               helps, one per rail at least */
    size_t prefetch_queue;  /* ranges queued or being registered in the
                               background at most; default 1024 */
    int host_monitor; /* enum regcache_host_monitor: whether host memory
                         (host_memory=1) is watched for unmapping (default
                         AUTO; docs/design.md "Host memory monitor") */
    /* The callbacks decorate whichever backend registers (built-in or
     * custom); each is optional, and all receive callback_arg.  Their
     * contract is regcache_callbacks(3).  They run under the rules of
     * backend callbacks ("What callbacks may do" above): no cache lock
     * held, from several threads at once (for different entries: the
     * getting thread, the background workers, the host memory monitor's
     * thread), and they may call any regcache function but
     * regcache_destroy() of this cache; a get from on_register overlapping
     * the entry being registered fails with REGCACHE_ERR_REENTRANT.  Once
     * exit() has begun, the library's own threads (the host memory monitor,
     * the background workers) start none of them, nor a backend's reg or
     * dereg: they stop before any library's destructor runs
     * (regcache_create(3)). */
    size_t priv_size; /* bytes of private data per entry
                         (regcache_entry_priv()), 0 (none) to 4096: 64-byte
                         aligned, zeroed before the entry's first
                         registration, valid until its last
                         deregistration */
    /* After the registration of an entry on `rail` was made: `handle` is
     * what the backend returned (the struct ibv_mr * of the built-in one),
     * `priv` the entry's private data (NULL when priv_size is 0), `entry`
     * a token valid during the call for regcache_entry_*() (it is no hold:
     * never put it; the registering get holds the entry meanwhile, so
     * regcache_entry_hold() and regcache_entry_invalidate() take it).
     * Return 0, or a non-zero value to refuse the registration: it is
     * deregistered (on_deregister is not called for it) and the get fails
     * with REGCACHE_ERR_CALLBACK, with the value in regcache_last_error(). */
    int (*on_register)(void *arg, regcache_entry_t *entry, unsigned rail, void *handle, void *priv);
    /* Before each registration that on_register accepted is deregistered
     * (per rail), still registered: release what on_register set up.
     * `entry` names an entry on its way out (the accessors work on it). */
    void (*on_deregister)(void *arg, regcache_entry_t *entry, unsigned rail, void *handle,
                          void *priv);
    /* An entry left the cache (struct regcache_leave says why): called once
     * per entry whose registration on_register accepted (on every rail it
     * had), never on a hit.  Unused: just before its deregistration.  Held,
     * its memory gone (freed, unmapped as the host memory monitor saw, a
     * tag changed, invalidated): at once, held = 1, while the registration
     * is still valid (priv too), which it stays until the last put; a
     * transport revokes the keys it gave out now.  Held, replaced or
     * merged: at its last put, just before its deregistration.  Handed out
     * once (its memory was invalidated while it was being registered):
     * before its get returns, with the reason of that invalidation.
     * Called without the cache lock by the thread whose call made the
     * entry leave (the one that invalidated, evicted, flushed, made room,
     * put last or destroyed) before that call returns, or by another
     * thread releasing entries of the cache at the same time; for the host
     * memory monitor's unmaps, in the next get of host memory or on its
     * thread regcache-mon, never the unmapping thread.  During
     * regcache_destroy() (REGCACHE_REASON_DESTROY) no callback may call
     * functions of the cache being destroyed. */
    void (*on_leave)(void *arg, const struct regcache_leave *leave);
    void *callback_arg;
    const char *name; /* what the statistics dump, regcache-stat and
                         regcache_name() call the cache: 1 to
                         REGCACHE_NAME_MAX - 1 of letters, digits and
                         _.:@+-/ (copied; else create fails with INVALID).
                         NULL = the REGCACHE_NAME variable, else
                         "cache<N>" for the process's N-th cache */
    /* Fields below were added in 0.4. */
    int host_merge; /* enum regcache_host_merge: which cached pageable host
                       entries a miss merges with (default AUTO) */
    int device_keys; /* 1: the cache may mirror its registrations into key
                        tables on GPUs (regcache_device_keys_attach()); 0
                        (default): it never does, and pays nothing */
};

/*
 * regcache_params.host_monitor.  The process's host memory monitor, one for
 * every cache, invalidates a cached pageable host range in every cache
 * when its pages are unmapped or replaced (munmap, mremap, mmap(MAP_FIXED)
 * over them, madvise(DONTNEED, FREE, REMOVE), brk shrinking, shmdt, free()
 * and realloc() of the chunks that libc unmaps), before any get can be
 * served from it once the unmapping call has returned; no
 * regcache_invalidate() is needed then.  It hears of unmaps in one of
 * three ways:
 *   UCM   UCX's memory events (libucm, where it is loaded): UCX already
 *         hooks those calls, and the monitor registers its handlers with
 *         it instead of patching libc on top of UCX's patches.
 *   LIBC  libc's functions are patched in the process (x86-64, the entries
 *         of the glibc builds known, proven by a self-test): the unmapping
 *         thread queues the range, some tens of nanoseconds.  A system call
 *         made without libc (syscall(SYS_munmap), a runtime with its own
 *         system calls) is not seen.  Copies of the library in one process
 *         share one set of hooks.
 *   UFFD  a userfaultfd sees every unmap, whatever made it, but the
 *         unmapping thread waits for the monitor thread to read the event
 *         (a few microseconds).  It cannot watch System V shared memory,
 *         file mappings it does not report, or a range another userfaultfd
 *         watches; the mappings it watches are registered whole, and no
 *         longer merge with a mapping placed next to them.
 * AUTO (the default): UCM where libucm is loaded, else LIBC where it
 * installs; never UFFD.  OFF: no monitor.
 * Where the chosen way cannot watch a range, its entries keep the explicit
 * contract: call regcache_invalidate() or regcache_notify_free() before the
 * memory goes; regcache_validation_reason() says which applies and the
 * statistics count such entries (host_unmonitored).
 * REGCACHE_HOST_MONITOR=auto|off|libc|uffd|ucm overrides the field.  The
 * invalidations run, with their dereg callbacks, in the next get of host
 * memory or on the thread regcache-mon (at the latest 50 ms after an unmap
 * seen by libc's hooks or UCX's events); a dereg callback must not unmap
 * host memory that a cache with UFFD holds (its unmap would wait for the
 * monitor itself).  See regcache_create(3).
 */
enum regcache_host_monitor {
    REGCACHE_HOST_MONITOR_AUTO = 0,
    REGCACHE_HOST_MONITOR_OFF = 1,
    REGCACHE_HOST_MONITOR_LIBC = 2,
    REGCACHE_HOST_MONITOR_UFFD = 3,
    REGCACHE_HOST_MONITOR_UCM = 4, /* added in 0.4 */
};

/*
 * regcache_params.host_merge.  A miss of pageable host memory whose range,
 * rounded to params.alignment, overlaps cached entries of the same
 * mappings may register the union of them once; the entries it covers
 * then leave the cache (REGCACHE_REASON_MERGED) and a transport revokes
 * the keys it gave out for them.  Gets of random sub-ranges of a mapping
 * so converge to one registration; a transport's neighbouring buffers so
 * churn each other's keys.
 *   OFF          never merge: a miss registers its own rounded range, and
 *                replaces only an entry of exactly that range whose access
 *                it widens (REGCACHE_REASON_REPLACED).
 *   SAME_ACCESS  merge only with entries of the same access; an entry of
 *                other access is widened only when a get needs more.
 *   ALL          merge with every overlapping entry, their access united.
 *   AUTO         (the default) OFF when the cache tells a transport of its
 *                registrations (params.on_register or params.on_leave is
 *                set), else ALL.
 * REGCACHE_HOST_MERGE=auto|off|same_access|all overrides the field.  GPU
 * memory and pinned host memory never merge (their entries are clipped to
 * an allocation).
 */
enum regcache_host_merge {
    REGCACHE_HOST_MERGE_AUTO = 0,
    REGCACHE_HOST_MERGE_OFF = 1,
    REGCACHE_HOST_MERGE_SAME_ACCESS = 2,
    REGCACHE_HOST_MERGE_ALL = 3,
};

/* The longest cache name, with its terminating NUL. */
#define REGCACHE_NAME_MAX 64

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

/*
 * Create a cache.  The built-in backend needs params->pd (or params->pds
 * for several rails); it selects the method now and fails with
 * REGCACHE_ERR_UNSUPPORTED (and a message from regcache_last_error()) if
 * none is available.  With validation AUTO or HOOKS and without the preload
 * hook, the first call patches libcuda's memory functions in-process (once
 * per process, unless REGCACHE_HOOKS=off) and every call checks that the
 * patches see every free; when they cannot, an AUTO cache uses TAG_CHECK and
 * regcache_last_error() says why, although the call succeeds, and a HOOKS
 * cache is refused (UNSUPPORTED; NOTIFY is the application's own notices).
 * Errors: INVALID (NULL, unknown params size, alignment not a power of two
 * between 4096 and 1 GiB, method/validation out of range, rails outside
 * 1..REGCACHE_MAX_RAILS, priv_size over 4096, no pd for the built-in backend,
 * backend without reg or dereg, a name that is not one, a REGCACHE_*
 * variable that does not parse), NO_MEMORY, UNSUPPORTED (no method for the
 * built-in backend; validation HOOKS where no hook can be had).  The process's
 * first cache creates its statistics segment for regcache-stat (README);
 * where that cannot be made the cache works without it, and the
 * REGCACHE_STATS dump says why.
 * Thread safe.
 */
REGCACHE_API int regcache_create(const struct regcache_params *params, regcache_t **cache);

/*
 * Deregister every entry and free the cache.  Entries still held are
 * deregistered too: their pointers become invalid (do not put them), and
 * their holds end with the cache.  NULL is a no-op.
 * Must not race with other calls on the same cache (regcache_notify_free()
 * from other threads may: destroy waits for it to leave this cache, and
 * only for that, so a dereg of another cache that it runs may wait for a
 * lock the destroying thread holds).  In a fork child, an inherited cache
 * is freed without deregistering anything and without waiting for any lock
 * its parent's threads held; when one of them held the cache's lock at the
 * fork, what that lock guards (the index of entries) may be half changed
 * and is left allocated instead.
 */
REGCACHE_API void regcache_destroy(regcache_t *cache);

/* ------------------------------------------------------------------------ */
/* Get and put                                                               */
/* ------------------------------------------------------------------------ */

/*
 * Return in *entry a held registration that covers [addr, addr+len) on rail
 * 0.  A hit costs a hash lookup and one atomic store on a line of the
 * calling thread's own (and, in TAG_CHECK mode, one buffer-id query per
 * mapping); a miss registers the range rounded to params.alignment (the
 * whole allocation when whole_allocation is on and it fits).  Concurrent
 * misses on the same range register it once.  The entry stays valid until
 * regcache_put(), which any thread may call.  *entry is a token for this
 * one hold, not the registration's identity: two gets of the same
 * registration may return different pointers (compare
 * regcache_entry_handle() or regcache_entry_range() instead).
 * A get that overlaps an invalidation of its memory (the memory was freed
 * while the get registered it) is served a registration of its own that
 * never enters the cache and is deregistered at its put.  A get of a range
 * whose background registration (regcache_prefetch()) is in flight waits
 * for it; one whose background registration failed returns that failure
 * once (one of the statuses below).  A get made while the application
 * captures a CUDA graph, in any capture mode and on any thread, never
 * breaks the capture: the cache's own driver calls run in the RELAXED
 * capture mode (man regcache_get).
 * Errors: INVALID (NULL cache/addr/entry, len 0, addr+len wraps), NOT_GPU,
 * MANAGED, RANGE, NOT_RDMA_CAPABLE, TOO_LARGE, NO_SPACE, BACKEND, CUDA,
 * NO_MEMORY, FORKED, HOLD_LIMIT, REENTRANT, BAD_ADDRESS (host memory), CALLBACK.  On
 * error *entry is set to NULL, nothing is left registered and
 * regcache_last_error() says why.
 * Thread safe.
 */
REGCACHE_API int regcache_get(regcache_t *cache, const void *addr, size_t len,
                              regcache_entry_t **entry);

/*
 * regcache_get() on NIC `rail` (0 .. params.rails-1).  One entry serves all
 * rails of an allocation: one memory query, one share of the BAR1 budget;
 * its registration on a rail is made when a get first asks for that rail,
 * without waiting for registrations in flight on other rails.  Errors:
 * those of regcache_get(), and INVALID for a rail out of range.  Thread
 * safe.
 */
REGCACHE_API int regcache_get_rail(regcache_t *cache, unsigned rail, const void *addr, size_t len,
                                   regcache_entry_t **entry);

/* regcache_get_access() flags (at most one of them). */
enum regcache_get_flags {
    /* Never wait for a registration: a get that is no hit queues the
     * range for a background registration (regcache_prefetch()) and
     * returns REGCACHE_ERR_AGAIN at once. */
    REGCACHE_GET_NONBLOCK = 1,
    /* Only look (added in 0.4): a held entry when a cached registration
     * covers the range on the rail with the access, else
     * REGCACHE_ERR_NOT_CACHED; registers nothing, queues nothing, never
     * waits for a registration. */
    REGCACHE_GET_LOOKUP = 2
};

/*
 * Queue [addr, addr+len) for registration on `rail` by the cache's
 * background threads (params.workers, named regcache-reg, started by the
 * first queued range and joined by regcache_destroy()), and return at
 * once.  The worker registers it as a get would (the same rounding and
 * whole-allocation rule), but holds nothing after: the entry is
 * speculative until a get uses it - evicted before any entry a get used,
 * and making room by evicting only other speculative entries (with no
 * room so, the range is dropped, counted in prefetch_dropped).
 *  - A get of the range while it is registered waits for that
 *    registration instead of registering again.  A range already queued
 *    or in flight (the same addr, len and rail) is not queued twice; one
 *    already cached costs a worker a lookup.
 *  - Memory freed (invalidated) before the registration ends never enters
 *    the cache, as for a get racing a free.
 *  - A failed background registration is counted (prefetch_failures) and
 *    kept: the next get of an overlapping range on that rail returns its
 *    status, and regcache_last_error() its message, once.  Memory that was
 *    gone (NOT_GPU) is not kept, an invalidation of the range forgets the
 *    failure, and a get that finds other memory there (another buffer id;
 *    pageable pages mapped or unmapped since) drops it.
 *  - regcache_destroy() drops queued ranges and waits for registrations in
 *    flight.  A fork child has no workers: an inherited cache refuses with
 *    FORKED, and the parent's queued ranges are never registered there.
 * Errors: INVALID (NULL cache or addr, len 0, a wrapping range, a rail out
 * of range), FORKED, QUEUE_FULL (params.prefetch_queue ranges queued or in
 * flight), NO_MEMORY (the queue or the workers could not be made).
 * Thread safe.
 */
REGCACHE_API int regcache_prefetch(regcache_t *cache, unsigned rail, const void *addr, size_t len);

/*
 * regcache_prefetch() for the IBV_ACCESS_* set the range will be used with
 * instead of params.access, under the rule of regcache_get_access(): an
 * entry whose access covers it serves (the range costs a worker a lookup),
 * else the worker registers the union of this access and that of the
 * narrower entries of the same memory, which leave the cache.  A send
 * buffer prefetched for IBV_ACCESS_REMOTE_READ is registered for that
 * alone.  The same range with another access is queued apart.
 * Errors: those of regcache_prefetch(); INVALID for a negative access.
 * Thread safe.
 */
REGCACHE_API int regcache_prefetch_access(regcache_t *cache, unsigned rail, const void *addr,
                                          size_t len, int access);

/*
 * Wait until every range queued for a background registration (by any
 * thread) is registered, failed or dropped.  Errors: INVALID (NULL),
 * FORKED, REENTRANT (from a backend callback of a background
 * registration, which would wait for itself).  Thread safe.
 */
REGCACHE_API int regcache_prefetch_wait(regcache_t *cache);

/* A range to register (regcache_prefetch_batch()). */
struct regcache_range {
    const void *addr;
    size_t len;
    unsigned rail;
};

/*
 * regcache_prefetch() of each of the n ranges, in order, until one fails:
 * *queued (if not NULL) says how many were queued (or were queued or
 * cached already); the status is that of the first that failed, or OK.
 * A range of several rails is queued once per rail, and different workers
 * register its rails side by side.
 * Errors: those of regcache_prefetch(); INVALID for NULL ranges with n > 0.
 * Thread safe.
 */
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

/*
 * regcache_prefetch_batch() of ranges that each carry their access:
 * regcache_prefetch_access() of each, in order, until one fails; *queued
 * (if not NULL) says how many were queued.
 * Errors: those of regcache_prefetch_access(); INVALID for NULL ranges
 * with n > 0.  Thread safe.
 */
REGCACHE_API int regcache_prefetch_batch_access(regcache_t *cache,
                                                const struct regcache_access_range *ranges,
                                                size_t n, size_t *queued);

/*
 * regcache_get_rail() for the access this transfer needs instead of
 * params.access: an IBV_ACCESS_* set (IBV_ACCESS_REMOTE_READ alone, say,
 * for a source that the peer reads; IBV_ACCESS_REMOTE_ATOMIC for an atomic
 * target).  REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is registered
 * with LOCAL_WRITE added, as verbs requires (params.access too).  An entry
 * serves every get whose access its own covers; a get that needs more
 * registers the union of the two once, and the narrower entry leaves the
 * cache (REGCACHE_REASON_REPLACED; held, it stays valid until its put).
 * So access 0 or any subset of params.access is served by the entries of
 * regcache_get(), and read-only memory (a PROT_READ mapping) registers
 * with access that asks for no write (LOCAL_WRITE, REMOTE_WRITE,
 * REMOTE_ATOMIC); with params.access it fails with
 * REGCACHE_ERR_BAD_ADDRESS.  IBV_ACCESS_RELAXED_ORDERING is registered
 * where the rail's provider takes it: one that refuses it (EINVAL, an old
 * provider or kernel) gets the registration without it, and from then on
 * that rail is not asked again; such a registration still serves gets
 * that ask for it.  A custom backend learns the access through its
 * reg_access callback; one with reg alone is not told it, and entries
 * still serve gets by it.
 * flags: 0, REGCACHE_GET_NONBLOCK or REGCACHE_GET_LOOKUP.
 * With REGCACHE_GET_LOOKUP a hit costs what it costs without; anything
 * else - no cached entry covering the range with the access, none
 * registered on `rail`, a registration of the range in flight - returns
 * REGCACHE_ERR_NOT_CACHED with *entry NULL, having registered nothing and
 * queued nothing.  It never waits for a registration; where the hit path
 * cannot serve (the range not yet indexed under its page, or every hold
 * slot of the thread in use) it looks under the cache's lock, and in
 * TAG_CHECK mode queries the memory's buffer ids as a hit does.
 * With REGCACHE_GET_NONBLOCK a hit
 * costs what it costs without; anything else - no entry covering the
 * access, an entry without a registration on `rail` yet, a registration of
 * the range in flight - returns REGCACHE_ERR_AGAIN with *entry NULL, after
 * queueing the range (with this access) as regcache_prefetch() does,
 * without waiting for a registration, the cache's lock or the host memory
 * monitor's drain (a range an unhandled unmap concerns is no hit), and
 * without a system call (except the wake of an idle worker, the start of
 * the workers at the first one, and a look at the memory of a failure
 * kept for the range).  When the background registration of the
 * range failed, the next get returns that failure instead (see
 * regcache_prefetch()).
 * Hit cost: that of regcache_get() and one comparison.
 * Errors: those of regcache_get_rail(); INVALID for a negative access or
 * an unknown flag (or both flags); with REGCACHE_GET_NONBLOCK, AGAIN, and
 * QUEUE_FULL and NO_MEMORY (workers could not start) for a get that could
 * not queue; with REGCACHE_GET_LOOKUP, NOT_CACHED (and HOLD_LIMIT).
 * Thread safe.
 */
REGCACHE_API int regcache_get_access(regcache_t *cache, unsigned rail, const void *addr, size_t len,
                                     int access, unsigned flags, regcache_entry_t **entry);

/*
 * regcache_get_access() that hands `get_arg` to a custom backend's
 * reg_access callback when the get registers (a miss, or a rail the entry
 * lacks), the way UCX's rcache passes the arg of its get to mem_reg; a
 * get that waits for another's registration, or is served by one, passes
 * nothing.  Background registrations (the queue of a non-blocking get
 * included) pass NULL.  Errors: those of regcache_get_access().  Cost:
 * that of regcache_get_access() and three stores to thread-local memory.
 * Thread safe.
 */
REGCACHE_API int regcache_get_with_arg(regcache_t *cache, unsigned rail, const void *addr,
                                       size_t len, int access, unsigned flags, void *get_arg,
                                       regcache_entry_t **entry);

/*
 * Release an entry from regcache_get().  It stays registered and becomes the
 * most recently used; if it was invalidated while held, its last put
 * deregisters it, on the putting thread, before it returns (with
 * params.on_leave, the thread still giving its leave notice may instead).
 * NULL entry is a no-op.  `cache` must be the cache the
 * entry came from (debug builds abort otherwise); NULL also works, at the
 * cost of reading the entry's own memory.
 * Each get is put once: a second put of the same entry is undefined (debug
 * builds abort).  Thread safe, from any thread.
 */
REGCACHE_API void regcache_put(regcache_t *cache, regcache_entry_t *entry);

/*
 * Another hold on the registration of `entry`, a token the caller holds:
 * *token is a new token of its own, for the same registration and rail,
 * released by its own regcache_put(); the two tokens may be put in either
 * order, from any thread.  Nothing is looked up, registered or waited
 * for: for a token of a hit, a hold slot of the calling thread where one
 * is free (no lock, no locked instruction), else a counted hold under the
 * cache's lock.  An entry that already left the cache (invalidated while
 * held) can be held again too: its registration then lives until the last
 * of its tokens is put.  The token params.on_register is given may be held
 * so (the registering get holds the entry during the call); that of
 * params.on_deregister may not.
 * Errors: INVALID (NULL cache, entry or token; an entry of another cache;
 * a token already put, where that can be seen: its hold slot is empty, or
 * its entry has no holder; the on_deregister token), FORKED, HOLD_LIMIT.
 * On error *token is NULL.  Thread safe.
 */
REGCACHE_API int regcache_entry_hold(regcache_t *cache, const regcache_entry_t *entry,
                                     regcache_entry_t **token);

/*
 * The registration of `entry`, a token the caller holds, leaves the cache
 * now: no get is served from it any more (a later get of its memory
 * registers anew), params.on_leave is told (REGCACHE_REASON_INVALIDATE,
 * held; an entry that had left already was told then), and it is
 * deregistered at the put of its last token.  Then -
 * after its deregistration on every rail, without any cache lock, on the
 * thread of that put - cb(arg) runs, exactly once; cb may be NULL.
 * The caller's token stays what it was: the registration, its handle,
 * keys, range and private data stay valid until the token's put, which
 * the caller still owes, exactly once; regcache_entry_hold() of it gives
 * further tokens of the same (uncached) registration.  An entry that
 * already left the cache (evicted while held, replaced, invalidated, its
 * memory freed) gets the callback all the same, at its last put; each
 * call's cb runs once.  During regcache_destroy() the callbacks of entries
 * still held run with their deregistration, and may call no function of
 * that cache.
 * From params.on_register, its token invalidates the entry being
 * registered: the get is served the registration once (as a get racing a
 * free), and cb runs at that get's put.
 * Errors: INVALID (NULL cache or entry, an entry of another cache, a token
 * already put where that can be seen, the token passed to on_deregister),
 * NO_MEMORY (for cb's record; nothing changed), FORKED.
 * Thread safe.
 */
REGCACHE_API int regcache_entry_invalidate(regcache_t *cache, regcache_entry_t *entry,
                                           void (*cb)(void *arg), void *arg);

/* The backend's handle for a held entry on the rail it was got on (the
 * struct ibv_mr * for the built-in backend); NULL for a NULL entry.
 * Thread safe. */
REGCACHE_API void *regcache_entry_handle(const regcache_entry_t *entry);

/* The struct ibv_mr * of a held entry from the built-in backend, on the rail
 * it was got on; NULL for custom backends and for a NULL entry.  For dmabuf
 * registrations mr->addr is an iova: use regcache_entry_range() for the
 * virtual address.  Thread safe. */
REGCACHE_API struct ibv_mr *regcache_entry_mr(const regcache_entry_t *entry);

/* The IBV_ACCESS_* set a held entry was registered for (the union of the
 * gets it was registered for; RELAXED_ORDERING included where a rail's
 * provider refused it: that rail registered without it); 0 for a NULL
 * entry.  Thread safe. */
REGCACHE_API int regcache_entry_access(const regcache_entry_t *entry);

/* The private data of an entry (params.priv_size bytes, 64-byte aligned),
 * held or passed to a callback; NULL when priv_size is 0 or for a NULL
 * entry.  Thread safe: the cache never touches it after zeroing it; what
 * the callbacks and holders write there is theirs to order. */
REGCACHE_API void *regcache_entry_priv(const regcache_entry_t *entry);

/* The registered range of a held entry (rounded; may be larger than the
 * request).  Either output may be NULL; both are zeroed for a NULL entry.
 * Thread safe. */
REGCACHE_API void regcache_entry_range(const regcache_entry_t *entry, uintptr_t *start,
                                       size_t *len);

/* ------------------------------------------------------------------------ */
/* Invalidation and eviction                                                 */
/* ------------------------------------------------------------------------ */

/*
 * Drop every entry overlapping [addr, addr+len): unused ones are
 * deregistered now, held ones leave the cache at once (no new hits) and are
 * deregistered on their last put.
 * Errors: INVALID (NULL cache, len 0, wrapping range), FORKED.  Thread safe.
 */
REGCACHE_API int regcache_invalidate(regcache_t *cache, const void *addr, size_t len);

/*
 * regcache_invalidate() on every live cache in the process; what the hooks
 * call before memory is freed (regcache_notify_alloc() follows each
 * allocation).  It costs
 * one atomic load when no cache exists, and a few loads per cache that
 * holds nothing in the range; it takes no lock then and allocates nothing
 * after the calling thread's first call.  No lock is held while backends
 * deregister, so it may be called from any callback, dereg included.
 * Zero-length and wrapping ranges are ignored.  Thread safe.
 */
REGCACHE_API void regcache_notify_free(const void *addr, size_t len);

/*
 * Tell every live cache that [addr, addr+len) was just allocated (or
 * mapped): entries overlapping it are dropped as by regcache_notify_free().
 * HOOKS mode needs both notices.  A get that runs between the
 * regcache_notify_free() before a free and the free itself finds the old
 * memory still there and may cache its registration; only this notice,
 * after the next allocation at that address, tells the cache that the
 * memory is gone.  An application or custom backend that notifies by
 * itself (REGCACHE_VALIDATE_NOTIFY) therefore calls regcache_notify_free()
 * before each free and regcache_notify_alloc() after each allocation,
 * before the new memory is used; the preload hook and the in-process
 * interception do both.  Costs and rules as regcache_notify_free().
 * Thread safe.
 */
REGCACHE_API void regcache_notify_alloc(const void *addr, size_t len);

/*
 * regcache_notify_alloc() for pinned (page-locked) host memory just
 * allocated, as by cuMemAllocHost() or cuMemHostAlloc(), which the hooks
 * call it for.  The same notice, but eager registration (eager_min_bytes)
 * queues the range only in caches that take host memory (host_memory), and
 * registers it as the allocation alone, never together with the memory
 * before it.  Costs and rules as regcache_notify_free().  Thread safe.
 */
REGCACHE_API void regcache_notify_host_alloc(const void *addr, size_t len);

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
/* Keys for GPU kernels (include/regcache_device.h)                          */
/* ------------------------------------------------------------------------ */

struct regcache_device_table;

/* The table's shape; start from regcache_device_keys_params_init(). */
struct regcache_device_keys_params {
    size_t size;          /* sizeof(struct regcache_device_keys_params) */
    size_t page_slots;    /* slots, one per 64 KiB page of each registration:
                             a power of two, 1024 to 2^28; default 2^20
                             (16 MiB of GPU memory, 16 bytes each) */
    size_t records;       /* registrations mirrored at most, 2 to 2^24;
                             default 65536 (64 bytes each) */
    unsigned max_probe;   /* slots a lookup reads at most, 1 to 64;
                             default 16 */
    size_t hold_slots;    /* hold sections open at once, 1 to 2^20;
                             default 1024 */
    size_t ring_slots;    /* misses posted and unread at once: a power of
                             two, 2 to 2^20; default 1024 */
    uint64_t drain_timeout_ns; /* the longest a deregistration waits for hold
                                  sections; default 1 s */
    uint64_t poll_ns;     /* the longest the table's thread sleeps between
                             looks at the ring; default 100 us */
    /* The local key of a registration handle on a rail; NULL: the built-in
     * backend's (struct ibv_mr *)->lkey.  Required with a custom backend.
     * Called under the cache lock: return at once. */
    uint32_t (*lkey)(void *arg, void *handle, unsigned rail);
    void *lkey_arg;
};

/* Fill *params with every default.  Errors: INVALID (NULL).  Thread safe. */
REGCACHE_API int regcache_device_keys_params_init(struct regcache_device_keys_params *params);

/*
 * Mirror the cache's registrations into a key table on CUDA device
 * `device`, for kernels (regcache_device.h), and start the table's
 * threads: regcache-keys answers the misses kernels post (from host
 * memory, submitting no GPU work), regcache-kwrite writes the table.  The
 * table holds every registration the cache has now and every one it makes
 * later whose access covers params.access; it is written before this call
 * returns, and a registration made later is written within poll_ns (or at
 * regcache_device_keys_sync()), unless the copy waits behind the
 * application's GPU work.  What the first registration on the device needs
 * (its budget) is read here.  Before a registration the table mirrored is
 * deregistered, its record leaves the table and the hold sections open
 * then end (at most drain_timeout_ns).  *table receives the table as
 * kernels take it.  params may be NULL (every default).
 * Needs every CUDA free seen: a cache in HOOKS mode, or one whose frees the
 * preload hook or the in-process interception reports (this call installs
 * the interception if it can).
 * Errors: INVALID (NULL cache or table, params of an unknown size or out of
 * range, a cache created without params.device_keys, a device out of range
 * or already attached, a custom backend without params.lkey), FORKED,
 * UNSUPPORTED (no CUDA driver, or frees not seen), NO_SPACE (no GPU memory
 * for the table), NO_MEMORY, CUDA.  Thread safe.
 */
REGCACHE_API int regcache_device_keys_attach(regcache_t *cache, int device,
                                             const struct regcache_device_keys_params *params,
                                             struct regcache_device_table *table);

/*
 * Take the table off `device`: its thread stops, every record leaves, the
 * hold sections open end (at most drain_timeout_ns), and its memory is
 * freed; kernels must not use it afterwards.  regcache_destroy() detaches
 * every table.  Errors: INVALID (NULL, no table on device), FORKED.  Thread
 * safe.
 */
REGCACHE_API int regcache_device_keys_detach(regcache_t *cache, int device);

/* The table on `device`, as kernels take it, into *table.  Errors: INVALID
 * (NULL, no table on device), FORKED.  Thread safe. */
REGCACHE_API int regcache_device_keys_table(const regcache_t *cache, int device,
                                            struct regcache_device_table *table);

/* Write to the table on `device` every registration made so far (eager
 * registration and regcache_prefetch() fill a table so before the first
 * kernel runs), and return once written.  Errors: INVALID (NULL, no table
 * on device), FORKED, CUDA.  Thread safe. */
REGCACHE_API int regcache_device_keys_sync(regcache_t *cache, int device);

struct regcache_device_keys_stats {
    uint64_t records;          /* registrations in the table now */
    uint64_t published;        /* records written (a registration, or one
                                  more of its rails) */
    uint64_t removed;          /* records taken out */
    uint64_t unmirrored;       /* registrations or pages without room */
    uint64_t flushes;          /* writes to the device */
    uint64_t flush_failures;   /* writes the driver failed */
    uint64_t flush_ns_total;   /* time the writes took, in all */
    uint64_t flush_ns_max;     /* the longest write */
    uint64_t requests;         /* misses kernels posted */
    uint64_t request_failures; /* of them, answered with an error */
    uint64_t answer_ns_total;  /* from the table's thread reading a miss
                                  to its answer, summed over misses */
    uint64_t answer_ns_max;    /* the longest of those */
    uint64_t register_ns_total; /* of that, the thread's gets (the
                                   registrations), in all */
    uint64_t register_ns_max;   /* the longest of its gets */
    uint64_t drains;           /* deregistrations that waited for hold
                                  sections */
    uint64_t drain_ns_total;   /* how long they waited, in all */
    uint64_t drain_ns_max;     /* the longest wait */
    uint64_t drain_timeouts;   /* waits that reached drain_timeout_ns: the
                                  registration went with sections open */
    uint64_t reserved[4];
};

/* The counters of the table on `device`.  Errors: INVALID (NULL, no table
 * on device), FORKED.  Thread safe. */
REGCACHE_API int regcache_device_keys_stats(const regcache_t *cache, int device,
                                            struct regcache_device_keys_stats *stats);

/* ------------------------------------------------------------------------ */
/* Introspection                                                             */
/* ------------------------------------------------------------------------ */

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
                           entered the cache (its memory was
                           invalidated while it was registered) */
    uint64_t budget;    /* byte budget now (per device; summed over
                           devices that have one); 0 = none */
    /* Fields below were added in 0.3. */
    uint64_t fds; /* file descriptors the cache holds now: one per
                     dmabuf registration in flight, none per cached
                     entry (the whole cache's, in device stats too) */
    uint64_t mrs; /* registrations (MRs, one per rail) held now,
                     cached or handed out once */
    /* Background registrations (regcache_prefetch()), the whole cache's
     * (in device stats too): */
    uint64_t prefetches;        /* ranges queued */
    uint64_t prefetch_failures; /* their registrations that failed */
    uint64_t prefetch_dropped;  /* queued ranges never registered (destroy,
                                   no room without evicting used entries)
                                   and eager ranges the full queue refused */
    uint64_t invalidations_monitor; /* entries dropped by the host memory
                                       monitor (their pages were unmapped
                                       or replaced) */
    uint64_t host_unmonitored;      /* host entries held or cached now
                                       that no monitor watches: they keep
                                       the explicit-notify contract */
    /* Registration latency: how long a successful registration took (the
     * backend's reg call, with the evictions and retries that exhaustion
     * caused), from the histogram of regcache_get_latency() over every
     * rail: the upper bound of the log2 bucket that holds the median and
     * the 99th percentile; 0 before the first registration. */
    uint64_t reg_latency_p50_ns;
    uint64_t reg_latency_p99_ns;
    uint32_t rails; /* params.rails: the rail_* entries that count */
    /* How each rail registers GPU memory: enum regcache_dmabuf_mapping and
     * whether the NIC takes it data-direct (mlx5dv DATA_DIRECT, 1) or not
     * (0).  For a device's stats, that GPU's choice (a GPU whose driver
     * refused the PCIe mapping says DEFAULT); for the cache's, that of the
     * lowest-numbered GPU it has seen (or of one not seen yet). */
    uint32_t dmabuf_mapping[REGCACHE_MAX_RAILS];
    uint32_t data_direct[REGCACHE_MAX_RAILS];
    uint64_t rail_registrations[REGCACHE_MAX_RAILS]; /* successful reg calls per rail */
    uint64_t rail_reg_failures[REGCACHE_MAX_RAILS];  /* failed reg calls per rail */
    uint64_t rail_bytes[REGCACHE_MAX_RAILS];         /* bytes registered on the rail
                                                        now (one-shots included) */
    /* Entries that left the cache, by why (leaves[REGCACHE_REASON_...]);
     * entries after REGCACHE_REASON_COUNT stay 0, room for later reasons. */
    uint64_t leaves[16];
};

/* How a rail's exports of GPU memory are mapped (regcache_stats). */
enum regcache_dmabuf_mapping {
    REGCACHE_DMABUF_NONE = 0,   /* no dmabuf: peermem, host memory, or a
                                   custom backend */
    REGCACHE_DMABUF_PCIE = 1,   /* exports ask for the PCIe mapping */
    REGCACHE_DMABUF_DEFAULT = 2 /* the driver's default mapping */
};

/*
 * Copy the cache's counters into *stats.  Counters are read without
 * stopping other threads: each is exact, the set is not a snapshot.
 * Programs built against 0.2 keep getting the 0.2 struct (up to budget):
 * the library's symbol versions give them entry points that write no more.
 * Errors: INVALID (NULL).  Thread safe.
 */
REGCACHE_API int regcache_get_stats(const regcache_t *cache, struct regcache_stats *stats);

/*
 * The counters of one device (a CUDA ordinal, or REGCACHE_DEVICE_HOST for
 * host memory); peak_bytes is the device's own peak.  fds is the whole
 * cache's.
 * Errors: INVALID (NULL, device out of range, or a device the cache has
 * never seen: regcache_get_devices() lists those it has).  Programs built
 * against 0.2 keep the 0.2 answer for a device never seen: REGCACHE_OK
 * with every figure 0.  Thread safe.
 */
REGCACHE_API int regcache_get_device_stats(const regcache_t *cache, int device,
                                           struct regcache_stats *stats);

/* ------------------------------------------------------------------------ */
/* Why entries leave                                                         */
/* ------------------------------------------------------------------------ */

/* Why an entry left the cache (regcache_params.on_leave, statistics). */
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
    REGCACHE_REASON_MERGED,           /* pageable host memory: replaced by a
                                         registration of a wider range that merged it
                                         (params.host_merge).  Added in 0.4: programs
                                         built against an older header are told
                                         REGCACHE_REASON_REPLACED instead */
    REGCACHE_REASON_COUNT
};

/* The reason's short name: "evict-budget", "evict-exhausted", "flush",
 * "freed-hook", "freed-monitor", "freed-tag", "invalidate", "destroy",
 * "replaced", "merged"; "unknown" for other values; never NULL.  Thread
 * safe. */
REGCACHE_API const char *regcache_reason_name(int reason);

/* What params.on_leave is told of an entry that left the cache.  Valid
 * during the call only. */
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

/*
 * Store in devices[0 .. max) the devices the cache has seen (a get asked
 * for memory of them), in ascending order, REGCACHE_DEVICE_HOST first; set
 * *count to how many there are, which may exceed max (devices may be NULL
 * when max is 0).  A device stays listed once seen, even when it holds no
 * entry any more.
 * Errors: INVALID (NULL cache or count, NULL devices with max > 0).
 * Thread safe.
 */
REGCACHE_API int regcache_get_devices(const regcache_t *cache, int *devices, size_t max,
                                      size_t *count);

/* regcache_get_latency(): every device, or every rail. */
#define REGCACHE_DEVICE_ALL (-2)
#define REGCACHE_RAIL_ALL (-1)

/* The histogram's buckets: bucket i counts registrations that took
 * [2^i, 2^(i+1)) ns (bucket 0 also those under 1 ns, the last also those
 * longer). */
#define REGCACHE_LATENCY_BUCKETS 40

struct regcache_latency {
    uint64_t count;  /* successful registrations counted */
    uint64_t p50_ns; /* upper bound of the bucket holding the median; 0 if none */
    uint64_t p99_ns; /* same for the 99th percentile */
    uint64_t bucket[REGCACHE_LATENCY_BUCKETS];
};

/*
 * The registration-latency histogram of `device` (as for
 * regcache_get_device_stats(), or REGCACHE_DEVICE_ALL) on `rail` (0 ..
 * params.rails-1, or REGCACHE_RAIL_ALL), since the cache was created or
 * its statistics reset.  Only misses are timed (two clock readings around
 * the registration); hits cost nothing more.
 * Errors: INVALID (NULL, device out of range or never seen, rail out of
 * range).  Thread safe.
 */
REGCACHE_API int regcache_get_latency(const regcache_t *cache, int device, int rail,
                                      struct regcache_latency *latency);

/*
 * Start the counters again from zero: hits, misses, registrations,
 * deregistrations, evictions, invalidations, reg_failures, one_shots, the
 * per-rail registrations and failures, the latency histograms; peak_bytes
 * restarts from the bytes held now.  What describes the cache now is not
 * reset: entries, bytes, budget, fds, mrs, rail_bytes, the devices seen.
 * Gets running meanwhile are counted before or after the reset, each once.
 * Errors: INVALID (NULL), FORKED (the cache was created before fork() in
 * this child).  Thread safe.
 */
REGCACHE_API int regcache_reset_stats(regcache_t *cache);

/* One entry of the cache, as regcache_foreach_entry() shows it. */
struct regcache_entry_info {
    uintptr_t start;   /* the registered range: [start, start+bytes) */
    size_t bytes;      /* its length, counted once however many rails */
    int device;        /* CUDA ordinal or REGCACHE_DEVICE_HOST */
    unsigned rails;    /* bit r set: registered on rail r */
    unsigned holders;  /* gets not yet put, as seen at the look */
    uint64_t age_ns;   /* since it was registered (a coarse clock: a
                          few milliseconds) */
};

/*
 * Call cb(arg, info) for every entry in the cache, in ascending order of
 * address, until cb returns non-zero.  The entries are copied under the
 * cache's lock and cb runs after it is released, on that copy: cb may call
 * any function of the library, on this cache too, except
 * regcache_destroy() of it; entries that leave meanwhile are still shown.
 * Entries that left the cache while held (invalidated) are not listed.
 * Returns REGCACHE_OK, or what cb returned when it stopped the walk.
 * Errors: INVALID (NULL cache or cb), NO_MEMORY (for the copy), FORKED.
 * Thread safe.
 */
REGCACHE_API int regcache_foreach_entry(regcache_t *cache,
                                        int (*cb)(void *arg, const struct regcache_entry_info *info),
                                        void *arg);

/*
 * Print the cache's entries to `out`, one line each (range, bytes, device,
 * rails, holders, age), after a line with the cache's name and how many.
 * Errors: those of regcache_foreach_entry(), INVALID for a NULL out, and
 * BACKEND when writing to out failed.  Thread safe.
 */
REGCACHE_API int regcache_print_entries(regcache_t *cache, FILE *out);

/* The cache's name (params.name, REGCACHE_NAME or "cache<N>"); NULL for
 * NULL.  The text lives as long as the cache.  Thread safe. */
REGCACHE_API const char *regcache_name(const regcache_t *cache);

/*
 * The validation mode the cache actually uses (AUTO resolved: TAG_CHECK,
 * HOOKS or NOTIFY), or REGCACHE_ERR_INVALID for NULL.  A cache whose HOOKS rest on the
 * in-process interception turns to TAG_CHECK for good when a miss finds
 * that another patcher rewrote libcuda's patched entries (README).
 * Thread safe.
 */
REGCACHE_API int regcache_validation_mode(const regcache_t *cache);

/*
 * Why the cache uses the validation mode it does: set by the caller, the
 * preload hook, the in-process interception (with what it patched), or why
 * none of these could be trusted (REGCACHE_HOOKS=off, "in-process
 * interception unavailable: cuMemUnmap prologue not recognised (bytes
 * ...)"), or why a HOOKS cache turned to TAG_CHECK later ("in-process
 * interception lost: ...").  Never empty for a cache; NULL for NULL.  The text lives as long
 * as the cache.  Thread safe.
 */
REGCACHE_API const char *regcache_validation_reason(const regcache_t *cache);

/*
 * The method the built-in backend selected (DMABUF or PEERMEM; HOST when
 * it registers host memory only), 0 for a custom backend, or
 * REGCACHE_ERR_INVALID for NULL.  Thread safe.
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
