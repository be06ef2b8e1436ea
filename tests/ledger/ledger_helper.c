/* One cache on one GPU, as the core will drive the ledger, for the
 * multi-process tests.  Started as `ledger_helper KEY [OPTION]`, it
 * attaches with rc_bar1_budget(0) (REGCACHE_BAR1_BYTES) and answers
 * "ready PID" or "error MESSAGE".  OPTION:
 *   --name=NAME     take the process name NAME first (shown in the ledger)
 *   --die-claiming  SIGKILL itself in the middle of claiming its record
 * Then it reads one command a line and answers one line:
 *   miss N    evict unused MiB down to rc_ledger_limit(N), register N MiB
 *   put       after pressure, evict down to rc_ledger_limit(0)
 *   hold N    N MiB of what it holds (at most all) are in use: never evicted
 *   count H M E T N F   publish counters (hits ... reg_failures)
 *   nofd      use up its file descriptors: it can open nothing more
 *   fds       give them back
 *   crash     exit at once, leaving its record behind (as a kill would; a
 *             pid namespace's init cannot SIGKILL itself)
 * Each answers "bytes B" (MiB held now).  Entries are 1 MiB each.  It
 * detaches at end of input. */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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

static void die(void)
{
    raise(SIGKILL);
}

/* A low limit, then descriptors up to it: /proc cannot be opened.  Given
 * back before exit (a leak checker reads /proc then). */
static struct rlimit limit;
static int spare[64], nspare;

static void use_up_descriptors(void)
{
    getrlimit(RLIMIT_NOFILE, &limit);
    struct rlimit low = { 64, limit.rlim_max };
    setrlimit(RLIMIT_NOFILE, &low);
    while (nspare < 64 && (spare[nspare] = fcntl(0, F_DUPFD_CLOEXEC, 0)) >= 0)
        nspare++;
}

static void give_back_descriptors(void)
{
    while (nspare)
        close(spare[--nspare]);
    setrlimit(RLIMIT_NOFILE, &limit);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strncmp(argv[2], "--name=", 7))
        prctl(PR_SET_NAME, argv[2] + 7);
    else if (argc == 3 && !strcmp(argv[2], "--die-claiming"))
        rc_ledger_claiming = die;
    else if (argc == 3)
        return 2;
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
        } else if (!strcmp(line, "nofd\n")) {
            use_up_descriptors();
        } else if (!strcmp(line, "fds\n")) {
            give_back_descriptors();
        } else if (!strcmp(line, "crash\n")) {
            _exit(1);
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
