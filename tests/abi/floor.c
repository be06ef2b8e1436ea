/* The oldest programs the library serves are those built against 0.2.  A
 * 0.1 program cannot be served whole: its stats struct is shorter than the
 * 0.2 one that its unversioned regcache_get_stats() reaches.  So its params
 * (params.size of the 0.1 layout, which ends at backend) are refused with
 * REGCACHE_ERR_INVALID and a message that says to rebuild, while every
 * layout from 0.2 on is taken.  Runs against the shared library, as a
 * program would. */
#include <regcache.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "abi_backend.h"

/* The layouts as the headers of each version ended the struct. */
#define PARAMS_0_1 (offsetof(struct regcache_params, backend) + sizeof(void *))
#define PARAMS_0_2 offsetof(struct regcache_params, eager_min_bytes)
#define PARAMS_0_3 offsetof(struct regcache_params, host_merge)

static int failures;

/* A cache from params of the layout `size`: its status, and the cache
 * destroyed again. */
static int create_with(size_t size)
{
    struct regcache_params p;
    regcache_params_init(&p);
    p.backend = &abi_backend;
    p.size = size;
    regcache_t *c = NULL;
    int rc = regcache_create(&p, &c);
    if (rc == REGCACHE_OK)
        regcache_destroy(c);
    else if (c) {
        printf("params.size %zu: create failed but left *cache set\n", size);
        failures++;
    }
    return rc;
}

int main(void)
{
    char refusal[512];
    int rc = create_with(PARAMS_0_1);
    snprintf(refusal, sizeof refusal, "%s", regcache_last_error());
    if (rc != REGCACHE_ERR_INVALID) {
        printf("params of the 0.1 layout (size %zu): %s, not REGCACHE_ERR_INVALID\n",
               (size_t)PARAMS_0_1, regcache_err_name(rc));
        failures++;
    } else if (!strstr(refusal, "0.1") || !strstr(refusal, "rebuild")) {
        printf("params of the 0.1 layout: the message does not say 0.1 and rebuild: \"%s\"\n",
               refusal);
        failures++;
    }
    const size_t served[] = { PARAMS_0_2, PARAMS_0_3, sizeof(struct regcache_params) };
    for (size_t i = 0; i < sizeof(served) / sizeof(served[0]); i++) {
        rc = create_with(served[i]);
        if (rc != REGCACHE_OK) {
            printf("params of the 0.%zu layout (size %zu): %s (%s)\n", i + 2, served[i],
                   regcache_err_name(rc), regcache_last_error());
            failures++;
        }
    }
    if (failures)
        return 1;
    printf("0.1 params refused (\"%s\"); 0.2, 0.3 and 0.4 params taken\n", refusal);
    return 0;
}
