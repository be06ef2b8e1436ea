/* Loaded objects' segments (host_objects.h), from the loader's own list. */
#include "host_objects.h"

#include <link.h>
#include <stddef.h>

struct query {
    uintptr_t start, end;
};

/* The program is the first object listed, the only one without a name. */
static int meets(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    const struct query *q = arg;
    if (!info->dlpi_name || !info->dlpi_name[0])
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && lo < q->end && q->start < lo + ph->p_memsz)
            return 1;
    }
    return 0;
}

bool rc_host_object_overlaps(uintptr_t start, uintptr_t end)
{
    struct query q = { start, end };
    return dl_iterate_phdr(meets, &q) != 0;
}
