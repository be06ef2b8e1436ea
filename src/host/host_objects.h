/* Whether a range of host memory lies in a loaded shared object: the
 * loader maps each object's segments (its static data among them) with
 * its own mmap and unmaps them at dlclose() with its own munmap, which
 * libc's hooks never see. */
#ifndef RC_HOST_OBJECTS_H
#define RC_HOST_OBJECTS_H

#include <stdbool.h>
#include <stdint.h>

/* Whether [start, end) meets a loaded segment of a shared object (not the
 * program's own, which stays for the life of the process).  Takes the
 * loader's lock; no allocation.  Thread safe. */
bool rc_host_object_overlaps(uintptr_t start, uintptr_t end);

#endif
