/* Patching a set of functions (patch_set.h).  Each function gets, in one
 * page mapped within 2 GiB of all of them, a thunk (the undo of its
 * entry's leading instructions, then an absolute jump to its wrapper) and
 * a trampoline (the leading instructions, the one at the patch site, then
 * a jump back past it); its patch site gets a jmp rel32 to the thunk
 * (prologue.h says why there). */
#include "patch_set.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "patch.h"
#include "proc_maps.h"
#include "resident.h"

/* Per function in the page: the thunk, then the trampoline. */
#define TRAMPOLINE_AT RC_THUNK_MAX
#define SLOT (RC_THUNK_MAX + RC_TRAMPOLINE_MAX)

/* Copy and decode the entry of f. */
static int read_entry(const struct rc_patch_fn *f, uint8_t *code, struct rc_prologue *p, char *why,
                      size_t n)
{
    uintptr_t at = (uintptr_t)f->entry;
    struct rc_mapping m;
    if (rc_maps_find(at, &m) != 0) {
        snprintf(why, n, "%s at %#jx is in no mapping", f->name, (uintmax_t)at);
        return -1;
    }
    size_t len = m.end - at < RC_PROLOGUE_MAX ? m.end - at : RC_PROLOGUE_MAX;
    memcpy(code, f->entry, len);
    if (rc_prologue_decode(code, len, at, p) == 0)
        return 0;
    int k = snprintf(why, n, "%s prologue not recognised (bytes", f->name);
    for (size_t b = 0; b < len && k > 0 && (size_t)k < n; b++)
        k += snprintf(why + k, n - (size_t)k, " %02x", code[b]);
    if (k > 0 && (size_t)k < n)
        snprintf(why + k, n - (size_t)k, ")");
    return -1;
}

/* Decode every entry and widen [*lo, *hi) to what the page must reach: the
 * entries, and what their relocated site instructions read. */
static int decode_all(struct rc_patch_fn *fns, size_t count, uint8_t (*code)[RC_PROLOGUE_MAX],
                      struct rc_prologue *prologue, uintptr_t *lo, uintptr_t *hi, char *why,
                      size_t n)
{
    for (size_t i = 0; i < count; i++) {
        if (!fns[i].entry)
            continue;
        if (read_entry(&fns[i], code[i], &prologue[i], why, n) != 0)
            return -1;
        uintptr_t at = (uintptr_t)fns[i].entry, far = prologue[i].rip_target;
        *lo = at < *lo ? at : *lo;
        *hi = at + RC_PROLOGUE_MAX > *hi ? at + RC_PROLOGUE_MAX : *hi;
        if (far) {
            *lo = far < *lo ? far : *lo;
            *hi = far + 1 > *hi ? far + 1 : *hi;
        }
    }
    return 0;
}

static int build_page(struct rc_patch_fn *fns, size_t count, uint8_t (*code)[RC_PROLOGUE_MAX],
                      const struct rc_prologue *prologue, uint8_t *page, char *why, size_t n)
{
    for (size_t i = 0; i < count; i++) {
        if (!fns[i].entry)
            continue;
        uint8_t *thunk = page + i * SLOT, *trampoline = thunk + TRAMPOLINE_AT;
        rc_prologue_thunk(thunk, &prologue[i], (uintptr_t)fns[i].wrapper);
        if (rc_prologue_trampoline(trampoline, (uintptr_t)trampoline, code[i], &prologue[i]) == 0) {
            snprintf(why, n, "%s: the trampoline cannot reach what its entry reads", fns[i].name);
            return -1;
        }
    }
    return 0;
}

int rc_patch_set(struct rc_patch_fn *fns, size_t count, int *patched, char *why, size_t n)
{
    *patched = 0;
    if (count > RC_PATCH_SET_MAX) {
        snprintf(why, n, "%zu functions, more than one set takes", count);
        return -1;
    }
    uint8_t code[RC_PATCH_SET_MAX][RC_PROLOGUE_MAX];
    struct rc_prologue prologue[RC_PATCH_SET_MAX];
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    if (decode_all(fns, count, code, prologue, &lo, &hi, why, n) != 0)
        return -1;
    if (hi == 0) {
        snprintf(why, n, "none of the functions is there");
        return -1;
    }
    size_t size = count * SLOT;
    uint8_t *page = rc_patch_page_near(lo, hi, size, why, n);
    if (!page)
        return -1;
    memset(page, 0xcc, size); /* int3 between the pieces */
    /* Nothing leads into the page until it is sealed. */
    if (build_page(fns, count, code, prologue, page, why, n) != 0 ||
        rc_patch_seal(page, size, why, n) != 0) {
        munmap(page, size);
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        if (fns[i].entry)
            atomic_store_explicit(fns[i].original, page + i * SLOT + TRAMPOLINE_AT,
                                  memory_order_release);
    /* From the first jump on, the functions lead into this library's
     * wrappers for the rest of the process. */
    rc_stay_resident();
    for (size_t i = 0; i < count; i++) {
        struct rc_patch_fn *f = &fns[i];
        if (!f->entry)
            continue;
        uintptr_t site = (uintptr_t)f->entry + prologue[i].site;
        uintptr_t thunk = (uintptr_t)(page + i * SLOT);
        int32_t rel = (int32_t)((intptr_t)thunk - (intptr_t)(site + RC_PATCH_LEN));
        memcpy(f->written, code[i], prologue[i].site);
        uint8_t *jmp = f->written + prologue[i].site;
        jmp[0] = 0xe9;
        memcpy(jmp + 1, &rel, sizeof rel);
        f->written_len = prologue[i].site + RC_PATCH_LEN;
        char detail[160];
        if (rc_patch_site(site, jmp, thunk, detail, sizeof detail) != 0) {
            snprintf(why, n, "%s: %s", f->name, detail);
            f->written_len = 0;
            return -1;
        }
        (*patched)++;
    }
    return 0;
}

const struct rc_patch_fn *rc_patch_set_lost(const struct rc_patch_fn *fns, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (fns[i].written_len &&
            !rc_patch_holds((uintptr_t)fns[i].entry, fns[i].written, fns[i].written_len))
            return &fns[i];
    return NULL;
}
