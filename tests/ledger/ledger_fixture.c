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

int ledger_teardown(void **state)
{
    char p[RC_LEDGER_PREFIX_MAX];
    (void)state;
    unsetenv("REGCACHE_LEDGER");
    setenv("REGCACHE_LEDGER_NAMESPACE", ns, 1);
    prefix(p, sizeof p);
    DIR *dir = opendir(RC_LEDGER_DIR);
    for (struct dirent *d; dir && (d = readdir(dir)) != NULL;)
        if (!strncmp(d->d_name, p, strlen(p)))
            unlinkat(dirfd(dir), d->d_name, 0);
    if (dir)
        closedir(dir);
    return 0;
}

struct rc_ledger *ledger_attach(const char *key, size_t budget)
{
    struct rc_ledger *l = NULL;
    if (rc_ledger_attach(key, budget, &l) != REGCACHE_OK)
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
    void *p = mmap(NULL, sizeof(struct rc_ledger_segment), PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
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

void helper_start(struct helper *h, const char *key)
{
    char *argv[] = {LEDGER_HELPER, (char *)key, NULL};
    char line[512];
    int pid;
    h->pid = spawn(argv, &h->to, &h->from);
    assert_non_null(fgets(line, sizeof line, h->from));
    if (sscanf(line, "ready %d", &pid) != 1)
        fail_msg("helper did not attach: %s", line);
    assert_int_equal(pid, h->pid);
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
