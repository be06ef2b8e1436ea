/* A plugin with a static buffer, for host_unseen_replacements: the
 * loader maps it with the object and unmaps it at dlclose() with its own
 * munmap, not libc's. */
#include <stddef.h>

#define PLUGIN_BUFFER (1 << 20)

static char buffer[PLUGIN_BUFFER] __attribute__((aligned(4096)));

char *host_plugin_buffer(size_t *len)
{
    *len = sizeof buffer;
    return buffer;
}
