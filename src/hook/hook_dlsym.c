/* The hook's dlsym.
 *
 * glibc's dlsym looks at its return address: RTLD_NEXT searches after the
 * caller's object, and RTLD_DEFAULT searches the caller's scope (which holds
 * its RTLD_LOCAL group).  A C wrapper would make every lookup look as if the
 * hook made it, so the entry is a few instructions of assembly: lookups on
 * those two pseudo-handles jump straight into glibc with the caller's return
 * address intact (they find the hook's exported wrappers anyway, since a live
 * hook precedes libcuda), and only lookups on a real handle - the way the CUDA
 * runtime fetches cuGetProcAddress_v2 from libcuda - reach C.
 *
 * Sanitizer runtimes call dlsym(RTLD_NEXT, ...) before they are initialised,
 * so this file is built without instrumentation. */
#include <dlfcn.h>
#include <stdatomic.h>

#include "hook.h"

/* Hidden whatever the build's default: the assembly below reaches them
 * PC-relative, which only symbols bound inside the library allow. */
#define RC_HOOK_LOCAL __attribute__((visibility("hidden")))

RC_HOOK_LOCAL _Atomic(void *) rc_hook_real_dlsym_ptr;

RC_HOOK_LOCAL void *rc_hook_resolve_real_dlsym(void);
RC_HOOK_LOCAL void *rc_hook_dlsym_handle(void *handle, const char *symbol);

void *rc_hook_resolve_real_dlsym(void)
{
    void *fn = atomic_load_explicit(&rc_hook_real_dlsym_ptr, memory_order_acquire);
    if (fn)
        return fn;
    /* Racing threads find the same function: storing it twice is harmless. */
    fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!fn)
        fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    atomic_store_explicit(&rc_hook_real_dlsym_ptr, fn, memory_order_release);
    return fn;
}

rc_dlsym_fn rc_hook_real_dlsym(void)
{
    return (rc_dlsym_fn)rc_hook_resolve_real_dlsym();
}

void *rc_hook_dlsym_handle(void *handle, const char *symbol)
{
    void *found = rc_hook_real_dlsym()(handle, symbol);
    if (!found || !symbol)
        return found;
    return rc_hook_wrap(rc_hook_kind_of_symbol(symbol), found);
}

/* dlsym: RTLD_DEFAULT (0) and RTLD_NEXT (-1) tail-jump to glibc; other
 * handles go to rc_hook_dlsym_handle. */
#if defined(__x86_64__)
#if defined(__CET__)
#define RC_HOOK_ENDBR "endbr64\n"
#else
#define RC_HOOK_ENDBR ""
#endif
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n" RC_HOOK_ENDBR "    testq %rdi, %rdi\n"
        "    je 1f\n"
        "    cmpq $-1, %rdi\n"
        "    je 1f\n"
        "    jmp rc_hook_dlsym_handle\n"
        "1:  movq rc_hook_real_dlsym_ptr(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    je 2f\n"
        "    jmp *%rax\n"
        /* First use: resolve glibc's dlsym, keeping the arguments and the
         * 16-byte stack alignment of the call. */
        "2:  pushq %rdi\n"
        "    pushq %rsi\n"
        "    subq $8, %rsp\n"
        "    call rc_hook_resolve_real_dlsym\n"
        "    addq $8, %rsp\n"
        "    popq %rsi\n"
        "    popq %rdi\n"
        "    jmp *%rax\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        "dlsym:\n"
        "    cbz x0, 1f\n"
        "    cmn x0, #1\n"
        "    b.eq 1f\n"
        "    b rc_hook_dlsym_handle\n"
        "1:  adrp x16, rc_hook_real_dlsym_ptr\n"
        "    ldr x16, [x16, :lo12:rc_hook_real_dlsym_ptr]\n"
        "    cbz x16, 2f\n"
        "    br x16\n"
        /* First use: resolve glibc's dlsym, keeping the arguments and the
         * caller's return address (x30), which glibc reads. */
        "2:  stp x0, x1, [sp, #-32]!\n"
        "    str x30, [sp, #16]\n"
        "    bl rc_hook_resolve_real_dlsym\n"
        "    mov x16, x0\n"
        "    ldr x30, [sp, #16]\n"
        "    ldp x0, x1, [sp], #32\n"
        "    br x16\n"
        ".size dlsym, .-dlsym\n");
#else
#error "libregcache-hook.so has a dlsym entry for x86_64 and aarch64 only"
#endif
