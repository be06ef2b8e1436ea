/* The process's mappings as /proc/self/maps lists them: the protection a
 * patched code page must get back, and free room near a library. */
#ifndef RC_PROC_MAPS_H
#define RC_PROC_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rc_mapping {
    uintptr_t start, end;
    int prot;    /* PROT_READ | PROT_WRITE | PROT_EXEC */
    bool shared; /* its pages are shared (MAP_SHARED, System V, a memfd's) */
};

/* The mapping that holds addr: 0 and *m, or -1 (none, or maps unreadable). */
int rc_maps_find(uintptr_t addr, struct rc_mapping *m);

/* The start of `size` unmapped bytes inside [lo, hi), as close to `near`
 * as the free gaps allow: 0 and *out, or -1 when no gap has room. */
int rc_maps_free_near(uintptr_t lo, uintptr_t hi, size_t size, uintptr_t near, uintptr_t *out);

/* Calls fn for each mapping that overlaps [lo, hi), in address order,
 * until it returns non-zero: 0, or -1 when the file cannot be read. */
int rc_maps_visit(uintptr_t lo, uintptr_t hi, int (*fn)(const struct rc_mapping *m, void *arg),
                  void *arg);

#endif
