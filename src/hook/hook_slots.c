/* The wrappers handed out: for each kind, RC_HOOK_SLOTS trampolines, each
 * bound to the real function stored in its slot.  A slot is claimed for a
 * real function the first time the driver hands that function out and is
 * never released, so a trampoline once returned stays valid; lookups of the
 * same function (another version asked, a second dlsym) share it.  The
 * table is static: wrapping allocates nothing and takes no lock.  The
 * memory kinds' bodies are shared with the in-process interception
 * (src/wrap); cuGetProcAddress's are here, as they wrap through the slots. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hook.h"

/* The variants one kind can meet: for cuMemFreeAsync the default-stream and
 * per-thread functions, for the context kinds the old and new symbols; twice
 * the most seen leaves room for drivers that differ per version. */
#define RC_HOOK_SLOTS 8

static _Atomic(void *) slots[RC_HOOK_KINDS][RC_HOOK_SLOTS];
static atomic_int escaped;

/* The hook's own kinds, cuGetProcAddress in both forms: what the driver
 * finds is wrapped in turn when it allocates or frees, so a function
 * fetched through a wrapped cuGetProcAddress lands in a slot too. */
static CUresult wrap_found(CUresult result, const char *symbol, int version, void **pfn)
{
    if (result == CUDA_SUCCESS && symbol && pfn)
        *pfn = rc_hook_wrap(rc_hook_kind_of_proc(symbol, version), *pfn);
    return result;
}

CUresult rc_wrap_get_proc(void *real, const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    CUresult (*fn)(const char *, void **, int, cuuint64_t) =
        (CUresult(*)(const char *, void **, int, cuuint64_t))real;
    return wrap_found(fn(symbol, pfn, version, flags), symbol, version, pfn);
}

CUresult rc_wrap_get_proc_v2(void *real, const char *symbol, void **pfn, int version,
                             cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    CUresult (*fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))real;
    return wrap_found(fn(symbol, pfn, version, flags, status), symbol, version, pfn);
}

#define RC_HOOK_TRAMPOLINE(kind, slot)                                                \
    static CUresult kind##_##slot(RC_WRAP_PARAMS_##kind)                              \
    {                                                                                 \
        return rc_wrap_##kind(                                                        \
            atomic_load_explicit(&slots[RC_HOOK_##kind][slot], memory_order_acquire), \
            RC_WRAP_ARGS_##kind);                                                     \
    }
/* clang-format off: one entry a line, which clang-format 14 does not keep */
#define RC_HOOK_TRAMPOLINES(kind) \
    RC_HOOK_TRAMPOLINE(kind, 0)   \
    RC_HOOK_TRAMPOLINE(kind, 1)   \
    RC_HOOK_TRAMPOLINE(kind, 2)   \
    RC_HOOK_TRAMPOLINE(kind, 3)   \
    RC_HOOK_TRAMPOLINE(kind, 4)   \
    RC_HOOK_TRAMPOLINE(kind, 5)   \
    RC_HOOK_TRAMPOLINE(kind, 6)   \
    RC_HOOK_TRAMPOLINE(kind, 7)
/* clang-format on */
RC_HOOK_KIND_LIST(RC_HOOK_TRAMPOLINES)

#define RC_HOOK_TRAMPOLINE_ROW(kind)                                                             \
    [RC_HOOK_##kind] = { (void *)kind##_0, (void *)kind##_1, (void *)kind##_2, (void *)kind##_3, \
                         (void *)kind##_4, (void *)kind##_5, (void *)kind##_6, (void *)kind##_7 },
static void *const trampolines[RC_HOOK_KINDS][RC_HOOK_SLOTS] = { RC_HOOK_KIND_LIST(
    RC_HOOK_TRAMPOLINE_ROW) };

static void note_escape(void)
{
    atomic_store_explicit(&escaped, 1, memory_order_release);
}

int rc_hook_escaped(void)
{
    return atomic_load_explicit(&escaped, memory_order_acquire);
}

int rc_hook_is_own(void *fn)
{
    Dl_info mine, theirs;
    return fn && dladdr((void *)rc_hook_is_own, &mine) && dladdr(fn, &theirs) &&
           mine.dli_fbase == theirs.dli_fbase;
}

void *rc_hook_wrap(int kind, void *real)
{
    if (!real || kind == RC_HOOK_NOT_OURS)
        return real;
    if (kind == RC_HOOK_LEGACY) {
        note_escape();
        return real;
    }
    /* An exported wrapper reached through a handle of the hook itself, or a
     * trampoline, is wrapped already. */
    if (rc_hook_is_own(real))
        return real;
    for (int i = 0; i < RC_HOOK_SLOTS; i++) {
        void *held = atomic_load_explicit(&slots[kind][i], memory_order_acquire);
        if (!held) {
            /* Publish the real function before anyone can be handed the
             * trampoline that reads it. */
            if (atomic_compare_exchange_strong_explicit(&slots[kind][i], &held, real,
                                                        memory_order_acq_rel, memory_order_acquire))
                return trampolines[kind][i];
        }
        if (held == real)
            return trampolines[kind][i];
    }
    note_escape();
    return real;
}
