/* Another patcher of the same functions, for the tests of living beside
 * one: it writes a jmp rel32 over the first instruction of a function's
 * entry after an endbr64 (a jmp rel32 that another patcher left there, or
 * mov $imm32,%eax, how libc's system call stubs start) to a stub of its own that goes to its
 * hook, as funchook and Frida do.  Its hook may chain to what it displaced
 * (that instruction, relocated, then the rest of the function) or make the
 * system call itself, as UCX's ucm does. */
#ifndef CHAIN_PATCHER_H
#define CHAIN_PATCHER_H

#include <stddef.h>
#include <stdint.h>

struct chain_patch {
    void *fn;
    size_t site; /* where the jump is: 4 past an endbr64, else 0 */
    /* What the patch displaced, as a function: the hook's way on. */
    void *displaced;
    uint8_t was[5];
};

/* Patch fn to lead to hook: 0, or -1 (an entry it does not know, no room
 * near fn, code it cannot write).  The page of its stub and trampoline is
 * never unmapped. */
int chain_patch(struct chain_patch *p, void *fn, void *hook);

/* Put back the bytes the patch displaced: 0, or -1. */
int chain_unpatch(struct chain_patch *p);

#endif
