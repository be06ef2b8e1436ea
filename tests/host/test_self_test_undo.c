/* A self-test that fails takes back every jump it wrote: libc's entries
 * are as they were.  The test fails here because free() of its 64 MiB
 * block reaches none of libc's unmapping functions: malloc is told never
 * to map a chunk of its own (M_MMAP_MAX 0) nor to trim its heap, and the
 * heap is grown beforehand, so that the block comes from it without moving
 * the break either - or, under a sanitizer, its allocator unmaps by system
 * call anyway. */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache_fixture.h"
#include "host_case.h"

static void failed_self_test_leaves_libc_as_it_was(void **state)
{
    struct fx *f = *state;
    uint8_t before[LIBC_FNS][ENTRY_BYTES], after[LIBC_FNS][ENTRY_BYTES];
    libc_entries_read(before);
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    void *volatile room = malloc((size_t)128 << 20);
    free(room);
    f->p.host_memory = 1;
    f->p.alignment = 4096;
    fx_create(f);
    const char *why = regcache_validation_reason(f->c);
    if (!strstr(why, "not monitored (") ||
        !strstr(why, "libc not patched: free() of a 64 MiB block"))
        fail_msg("the self-test did not fail as expected: %s", why);
    libc_entries_read(after);
    for (int i = 0; i < LIBC_FNS; i++)
        if (memcmp(before[i], after[i], ENTRY_BYTES) != 0)
            fail_msg("%s's entry still holds what the failed self-test wrote (%02x %02x %02x ...; "
                     "it was %02x %02x %02x ...)",
                     libc_fn_names[i], after[i][0], after[i][1], after[i][2], before[i][0],
                     before[i][1], before[i][2]);
}

FX_MAIN(failed_self_test_leaves_libc_as_it_was)
