/* One cache on one GPU, as the core will drive the ledger, for the
 * multi-process tests.  Started as `ledger_helper KEY`, it attaches with
 * rc_bar1_budget(0) (REGCACHE_BAR1_BYTES) and answers "ready PID" or
 * "error MESSAGE"; then it reads one command a line and answers one line:
 *   miss N    evict unused MiB down to rc_ledger_limit(N), register N MiB
 *   put       after pressure, evict down to rc_ledger_limit(0)
 *   hold N    N MiB of what it holds (at most all) are in use: never evicted
 *   count H M E T N F   publish counters (hits ... reg_failures)
 * Each answers "bytes B" (MiB held now).  Entries are 1 MiB each.  It
 * detaches at end of input. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bar1_budget.h"
#include "ledger.h"
#include "regcache.h"

#define MiB (1024ull * 1024ull)

static struct rc_ledger *ledger;
static unsigned long long held_mib, bytes_mib;

/* Whole unused entries go until at most `keep` bytes are left. */
static void evict_to(size_t keep)
{
    unsigned long long floor_mib = keep / MiB;
    if (bytes_mib > floor_mib)
        bytes_mib = floor_mib > held_mib ? floor_mib : held_mib;
}

static void publish(void)
{
    rc_ledger_usage(ledger, bytes_mib * MiB, bytes_mib);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t budget = rc_bar1_budget(0); /* before its source, which it reads */
    if (rc_ledger_attach(argv[1], budget, rc_bar1_budget_source(0), &ledger) != REGCACHE_OK) {
        printf("error %s\n", regcache_last_error());
        return 1;
    }
    printf("ready %d\n", (int)getpid());
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        unsigned long long n;
        struct rc_ledger_counts c;
        if (sscanf(line, "miss %llu", &n) == 1) {
            evict_to(rc_ledger_limit(ledger, n * MiB));
            bytes_mib += n;
        } else if (!strcmp(line, "put\n")) {
            if (rc_ledger_pressed(ledger))
                evict_to(rc_ledger_limit(ledger, 0));
        } else if (sscanf(line, "hold %llu", &n) == 1) {
            held_mib = n < bytes_mib ? n : bytes_mib;
        } else if (sscanf(line,
                          "count %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                          " %" SCNu64,
                          &c.hits, &c.misses, &c.evictions, &c.inval_tag, &c.inval_notify,
                          &c.reg_failures) == 6) {
            rc_ledger_publish(ledger, &c);
        } else {
            printf("unknown command %s", line);
            continue;
        }
        publish();
        printf("bytes %llu\n", bytes_mib);
    }
    rc_ledger_detach(ledger);
    return 0;
}
