/* A program outside the tree: it only sees the installed header and
 * library. */
#include <regcache.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    struct regcache_params p;
    regcache_t *c;
    if (regcache_params_init(&p) != REGCACHE_OK)
        return 1;
    /* No pd and no backend: the documented error, not a crash. */
    int rc = regcache_create(&p, &c);
    printf("regcache %s: create without pd -> %s\n", regcache_version(), regcache_strerror(rc));
    return rc == REGCACHE_ERR_INVALID && strlen(regcache_version()) > 0 ? 0 : 1;
}
