/* What the figures were measured on. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void cpu_model(char *out, size_t len)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(out, len, "unknown");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon)
            continue;
        colon += 2;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(out, len, "%s", colon);
        break;
    }
    fclose(f);
}

void bench_machine_read(struct bench_machine *m)
{
    memset(m, 0, sizeof(*m));
    cpu_model(m->cpu, sizeof(m->cpu));
    m->cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(m->regcache_version, sizeof(m->regcache_version), "%s",
             regcache_version());
    /* Other work on the machine shows in every figure, most in the thread
     * rows: the report says how busy it was. */
    if (getloadavg(&m->load, 1) != 1)
        m->load = -1.0;
#ifdef BENCH_UCX_VERSION
    snprintf(m->ucx_version, sizeof(m->ucx_version), "%s", BENCH_UCX_VERSION);
#endif
}
