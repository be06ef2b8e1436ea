#include "ledger_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ledger.h"
#include "regcache.h"

static void prefix(char *out, size_t n)
{
    char why[128];
    assert_true(rc_ledger_prefix(out, n, why, sizeof why));
}

/* The namespace of the running test, set again at teardown: a test may
 * have changed it. */
static char ns[40];

int ledger_setup(void **state)
{
    static unsigned tests;
    (void)state;
    snprintf(ns, sizeof ns, "test%d_%u", (int)getpid(), tests++);
    setenv("REGCACHE_LEDGER_NAMESPACE", ns, 1);
    setenv("REGCACHE_BAR1_BYTES", "320M", 1);
    unsetenv("REGCACHE_LEDGER");
    /* A helper that hangs must not hang ctest. */
    alarm(120);
    return 0;
}

unsigned namespace_segments(bool remove)
{
    char p[RC_LEDGER_PREFIX_MAX];
    unsigned n = 0;
    prefix(p, sizeof p);
    DIR *dir = opendir(RC_LEDGER_DIR);
    for (struct dirent *d; dir && (d = readdir(dir));) {
        if (strncmp(d->d_name, p, strlen(p)))
            continue;
        /* Counted: the ledgers; the processes' statistics segments are
         * made whatever REGCACHE_LEDGER says. */
        n += rc_ledger_name_ok(d->d_name + strlen(p));
        if (remove)
            unlinkat(dirfd(dir), d->d_name, 0);
    }
    if (dir)
        closedir(dir);
    return n;
}

int ledger_teardown(void **state)
{
    (void)state;
    unsetenv("REGCACHE_LEDGER");
    unsetenv("REGCACHE_STATS");
    setenv("REGCACHE_LEDGER_NAMESPACE", ns, 1);
    namespace_segments(true);
    return 0;
}

struct rc_ledger *ledger_attach(const char *key, size_t budget)
{
    struct rc_ledger *l = NULL;
    if (rc_ledger_attach(key, budget, RC_BUDGET_CONFIGURED, &l) != REGCACHE_OK)
        fail_msg("attach %s: %s", key, regcache_last_error());
    return l;
}

void segment_make(const char *key)
{
    rc_ledger_detach(ledger_attach(key, BUDGET));
}

void segment_path(const char *key, char *path, size_t n)
{
    char p[RC_LEDGER_PREFIX_MAX];
    prefix(p, sizeof p);
    snprintf(path, n, "%s/%s%s", RC_LEDGER_DIR, p, key);
}

struct rc_ledger_segment *segment_open(const char *key)
{
    char path[256];
    segment_path(key, path, sizeof path);
    int fd = open(path, O_RDWR | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    void *p =
        mmap(NULL, sizeof(struct rc_ledger_segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(p != MAP_FAILED);
    return p;
}

unsigned live_records(const struct rc_ledger_segment *s, uint64_t *bytes)
{
    unsigned n = 0;
    *bytes = 0;
    for (unsigned i = 0; i < RC_LEDGER_RECORDS; i++) {
        uint64_t owner = atomic_load(&s->rec[i].owner);
        if (owner && !(owner & RC_LEDGER_CLAIMING)) {
            n++;
            *bytes += atomic_load(&s->rec[i].bytes);
        }
    }
    return n;
}

struct rc_ledger_record *record_of(struct rc_ledger_segment *s, pid_t pid)
{
    for (unsigned i = 0; i < RC_LEDGER_RECORDS; i++) {
        uint64_t owner = atomic_load(&s->rec[i].owner);
        if (owner && rc_ledger_owner_pid(owner) == pid)
            return &s->rec[i];
    }
    return NULL;
}

pid_t spawn(char *const argv[], FILE **to, FILE **from)
{
    int in[2], out[2];
    /* Close-on-exec: a helper started later must not hold this one's
     * stdin open, or closing it would never read as the end. */
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execv(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    *to = fdopen(in[1], "w");
    *from = fdopen(out[0], "r");
    assert_non_null(*to);
    assert_non_null(*from);
    setvbuf(*to, NULL, _IOLBF, 0);
    return pid;
}

/* Start argv[0] and wait for its "ready PID". */
static void start(struct helper *h, char *const argv[])
{
    char line[1024];
    int pid;
    h->pid = spawn(argv, &h->to, &h->from);
    assert_non_null(fgets(line, sizeof line, h->from));
    if (sscanf(line, "ready %d", &pid) != 1)
        fail_msg("%s did not start: %s", argv[0], line);
    assert_int_equal(pid, h->pid);
}

const char ledger_helper_path[] = LEDGER_HELPER;

void helper_start_with(struct helper *h, const char *key, const char *option)
{
    char *argv[] = { LEDGER_HELPER, (char *)key, (char *)option, NULL };
    start(h, argv);
}

void helper_start(struct helper *h, const char *key)
{
    helper_start_with(h, key, NULL);
}

void cache_start(struct helper *h, const char *err)
{
    char *argv[] = { CACHE_HELPER, (char *)err, NULL };
    start(h, argv);
}

unsigned long long cache_ask(struct helper *h, const char *command, struct cache_view *v)
{
    char line[512];
    fprintf(h->to, "%s\n", command);
    assert_non_null(fgets(line, sizeof line, h->from));
    if (sscanf(line, "stats %d %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v->rc,
               &v->bytes, &v->entries, &v->budget, &v->hits, &v->misses, &v->evictions, &v->tag,
               &v->notify, &v->failures, &v->held) != 11)
        fail_msg("cache_helper %d answered \"%s\" to \"%s\"", (int)h->pid, line, command);
    return v->bytes;
}

unsigned long long helper_ask(struct helper *h, const char *command)
{
    char line[256];
    unsigned long long mib;
    fprintf(h->to, "%s\n", command);
    assert_non_null(fgets(line, sizeof line, h->from));
    if (sscanf(line, "bytes %llu", &mib) != 1)
        fail_msg("helper answered \"%s\" to \"%s\"", line, command);
    return mib;
}

static void reap(struct helper *h, int expect_signal)
{
    int status;
    fclose(h->to);
    assert_int_equal(waitpid(h->pid, &status, 0), h->pid);
    fclose(h->from);
    if (expect_signal)
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == expect_signal);
    else
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

void helper_stop(struct helper *h)
{
    reap(h, 0);
}

void helper_kill(struct helper *h)
{
    kill(h->pid, SIGKILL);
    reap(h, SIGKILL);
}

char *run_stat(const char *args, int *status)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s %s", REGCACHE_STAT, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (size_t n; (n = fread(out + len, 1, cap - 1 - len, p)) > 0;)
        len += n;
    out[len] = '\0';
    int rc = pclose(p);
    *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    return out;
}

void assert_contains(const char *out, const char *text)
{
    if (!strstr(out, text))
        fail_msg("no \"%s\" in:\n%s", text, out);
}

void assert_json(const char *json)
{
    char path[] = "/tmp/regcache-stat-XXXXXX", command[256];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    snprintf(command, sizeof command,
             "python3 -c 'import json,sys; "
             "json.loads(open(sys.argv[1], \"rb\").read().decode(\"utf-8\"))' %s",
             path);
    int rc = system(command);
    unlink(path);
    if (rc != 0)
        fail_msg("not JSON: %s", json);
}

/* regcache-stat --json prints one line in a fixed layout (regcache_stat.c):
 * read with formats that match it exactly, so that a change of layout
 * fails here rather than reading wrong. */
static const char *parse_cache(const char *p, struct stat_cache *c)
{
    int end = 0;
    sscanf(p,
           "{\"pid\":%d,\"process\":\"%16[^\"]\",\"cache\":%llu,\"state\":\"%7[^\"]\","
           "\"entries\":%llu,\"bytes\":%llu,\"budget\":%llu,\"hits\":%llu,\"misses\":%llu,"
           "\"evictions\":%llu,\"inval_tag\":%llu,\"inval_notify\":%llu,"
           "\"reg_failures\":%llu}%n",
           &c->pid, c->process, &c->cache, c->state, &c->entries, &c->bytes, &c->budget, &c->hits,
           &c->misses, &c->evictions, &c->inval_tag, &c->inval_notify, &c->reg_failures, &end);
    return end ? p + end : NULL;
}

void stat_json(struct stat_gpu *g)
{
    int status, end = 0;
    char *out = run_stat("--json", &status);
    const char *p = strstr(out, "\"gpus\":[");
    memset(g, 0, sizeof *g);
    if (status != 0 || !p)
        fail_msg("regcache-stat --json exited %d: %s", status, out);
    sscanf(p,
           "\"gpus\":[{\"segment\":\"%*[^\"]\",\"gpu\":\"%63[^\"]\",\"budget\":%llu,"
           "\"budget_source\":\"%15[^\"]\",\"in_use\":%llu,\"pressure\":%llu,\"caches\":[%n",
           g->key, &g->budget, g->budget_source, &g->in_use, &g->pressure, &end);
    if (!end)
        fail_msg("not one GPU's ledger: %s", out);
    for (p += end; *p == '{' || (g->n && *p == ','); g->n++) {
        if (g->n == sizeof g->c / sizeof g->c[0])
            fail_msg("more caches than %u: %s", g->n, out);
        if (!(p = parse_cache(p + (*p == ','), &g->c[g->n])))
            fail_msg("cache %u unreadable: %s", g->n, out);
    }
    if (strcmp(p, "]}]}\n") != 0)
        fail_msg("more than one GPU's ledger, or unreadable: %s", out);
    free(out);
}

const struct stat_cache *stat_cache_of(const struct stat_gpu *g, pid_t pid)
{
    for (unsigned i = 0; i < g->n; i++)
        if (g->c[i].pid == pid)
            return &g->c[i];
    return NULL;
}

bool stat_row(const char *out, pid_t pid, struct stat_row *r)
{
    for (const char *line = out; line && *line; line = strchr(line, '\n'), line += !!line) {
        if (sscanf(line, "%d %16s %llu %7s %llu %15s %15s %llu %llu %llu %llu %llu %llu", &r->pid,
                   r->process, &r->cache, r->state, &r->entries, r->bytes, r->budget, &r->hits,
                   &r->misses, &r->evictions, &r->tag, &r->notify, &r->failures) == 13 &&
            r->pid == pid)
            return true;
    }
    return false;
}
