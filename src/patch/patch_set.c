/* Patching a set of functions (patch_set.h).  Each function gets, in one
 * mapping within 2 GiB of all of them, a tag (a mark and the set's owner),
 * a thunk (the undo of its entry's leading instructions, then a jump
 * through a word of the mapping's last page, which holds its wrapper) and
 * a trampoline (the leading instructions, the one at the patch site, then
 * a jump back past it); its patch site gets a jmp rel32 to the thunk
 * (prologue.h says why there).  The code pages are sealed; the last page
 * stays writable, so that a thunk can be sent past its wrapper with one
 * store. */
#include "patch_set.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "patch.h"
#include "proc_maps.h"
#include "resident.h"

/* Per function in the code pages: the tag, the thunk, the trampoline. */
#define TAG 16
#define THUNK_AT TAG
#define TRAMPOLINE_AT (TAG + RC_THUNK_MAX)
#define SLOT (TAG + RC_THUNK_MAX + RC_TRAMPOLINE_MAX)

/* The tag's mark, before the owner.  Its layout never changes: copies of
 * every version of the library read each other's. */
static const char mark[8] = { 'r', 'c', '-', 'p', 'a', 't', 'c', 'h' };

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
        if (!rc_patch_fits((uintptr_t)fns[i].entry + prologue[i].site)) {
            snprintf(why, n,
                     "%s: the jump at +%zu cannot be written with one atomic store (it crosses "
                     "an aligned 16-byte block)",
                     fns[i].name, prologue[i].site);
            return -1;
        }
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
                      const struct rc_prologue *prologue, void *owner, uint8_t *page,
                      _Atomic uintptr_t *targets, char *why, size_t n)
{
    for (size_t i = 0; i < count; i++) {
        if (!fns[i].entry)
            continue;
        uint8_t *tag = page + i * SLOT, *thunk = tag + THUNK_AT, *trampoline = tag + TRAMPOLINE_AT;
        memcpy(tag, mark, sizeof mark);
        memcpy(tag + sizeof mark, &owner, sizeof owner);
        atomic_init(&targets[i], (uintptr_t)fns[i].wrapper);
        if (rc_prologue_thunk(thunk, (uintptr_t)thunk, &prologue[i], (uintptr_t)&targets[i]) == 0 ||
            rc_prologue_trampoline(trampoline, (uintptr_t)trampoline, code[i], &prologue[i]) == 0) {
            snprintf(why, n, "%s: the trampoline cannot reach what its entry reads", fns[i].name);
            return -1;
        }
    }
    return 0;
}

/* The site of f and its jump. */
static uintptr_t site_of(const struct rc_patch_fn *f)
{
    return (uintptr_t)f->entry + f->site;
}

int rc_patch_set(struct rc_patch_fn *fns, size_t count, void *owner, int *patched, char *why,
                 size_t n)
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
    size_t page_size = (size_t)sysconf(_SC_PAGESIZE);
    size_t code_size = (count * SLOT + page_size - 1) & ~(page_size - 1);
    uint8_t *page = rc_patch_page_near(lo, hi, code_size + page_size, why, n);
    if (!page)
        return -1;
    _Atomic uintptr_t *targets = (_Atomic uintptr_t *)(page + code_size);
    memset(page, 0xcc, code_size); /* int3 between the pieces */
    /* Nothing leads into the page until it is sealed. */
    if (build_page(fns, count, code, prologue, owner, page, targets, why, n) != 0 ||
        rc_patch_seal(page, code_size, why, n) != 0) {
        munmap(page, code_size + page_size);
        return -1;
    }
    /* From the first jump on, the functions lead into this library's
     * wrappers for the rest of the process. */
    rc_stay_resident();
    void *before[RC_PATCH_SET_MAX];
    for (size_t i = 0; i < count; i++) {
        struct rc_patch_fn *f = &fns[i];
        f->written_len = 0;
        if (!f->entry)
            continue;
        f->site = prologue[i].site;
        f->thunk_target = &targets[i];
        f->trampoline = (uintptr_t)(page + i * SLOT + TRAMPOLINE_AT);
        uintptr_t site = site_of(f), thunk = (uintptr_t)(page + i * SLOT + THUNK_AT);
        int32_t rel = (int32_t)((intptr_t)thunk - (intptr_t)(site + RC_PATCH_LEN));
        size_t len = f->site + RC_PATCH_LEN;
        memcpy(f->was, code[i], len);
        memcpy(f->written, code[i], f->site);
        uint8_t *jmp = f->written + f->site;
        jmp[0] = 0xe9;
        memcpy(jmp + 1, &rel, sizeof rel);
        /* The wrapper calls on through the new trampoline from the moment
         * the jump can lead to it (a wrapper of an earlier patch of the
         * function, which a later patcher chains to, too). */
        before[i] =
            atomic_exchange_explicit(f->original, (void *)f->trampoline, memory_order_acq_rel);
        char detail[160];
        int rc = rc_patch_site(site, f->was + f->site, jmp, detail, sizeof detail);
        if (rc != 0) {
            rc_patch_set_undo(fns, i);
            for (size_t j = 0; j <= i; j++)
                if (fns[j].entry)
                    atomic_store_explicit(fns[j].original, before[j], memory_order_release);
            *patched = 0;
            if (rc > 0) {
                snprintf(why, n, "%s: its entry changed while it was being patched", f->name);
                return 1;
            }
            snprintf(why, n, "%s: %s", f->name, detail);
            return -1;
        }
        f->written_len = len;
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

void rc_patch_bypass(const struct rc_patch_fn *f)
{
    if (f->thunk_target)
        atomic_store_explicit(f->thunk_target, f->trampoline, memory_order_release);
}

void rc_patch_set_undo(struct rc_patch_fn *fns, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        struct rc_patch_fn *f = &fns[i];
        if (!f->written_len)
            continue;
        rc_patch_bypass(f);
        char why[160];
        /* Another patcher's bytes stay; so does a jump whose code cannot be
         * made writable again (it leads through the bypass). */
        (void)rc_patch_site(site_of(f), f->written + f->site, f->was + f->site, why, sizeof why);
        f->written_len = 0;
    }
}

/* Whether [at, at + len) lies in readable mappings. */
static bool readable(uintptr_t at, size_t len)
{
    struct rc_mapping m;
    return rc_maps_find(at, &m) == 0 && (m.prot & PROT_READ) &&
           (m.end >= at + len || readable(m.end, at + len - m.end));
}

void *rc_patch_owner(void *entry)
{
    uint8_t code[RC_PROLOGUE_MAX];
    struct rc_prologue p;
    struct rc_mapping m;
    uintptr_t at = (uintptr_t)entry;
    if (rc_maps_find(at, &m) != 0 || !(m.prot & PROT_READ))
        return NULL;
    size_t len = m.end - at < RC_PROLOGUE_MAX ? m.end - at : RC_PROLOGUE_MAX;
    memcpy(code, entry, len);
    if (rc_prologue_decode(code, len, at, &p) != 0 || !p.site_jumps || p.resume < TAG ||
        !readable(p.resume - TAG, TAG))
        return NULL;
    const uint8_t *tag = (const uint8_t *)(p.resume - TAG);
    void *owner;
    if (memcmp(tag, mark, sizeof mark) != 0)
        return NULL;
    memcpy(&owner, tag + sizeof mark, sizeof owner);
    return owner;
}
