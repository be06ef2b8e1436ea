/* Interleavings on demand (see test_sync.h). */
#include "test_sync.h"

#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap(void)
{
    struct timespec ts = { 0, 1000000 }; /* 1 ms */
    nanosleep(&ts, NULL);
}

void gate_init(struct gate *g)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->open = false;
    g->arrived = 0;
}

void gate_pass(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->arrived++;
    pthread_cond_broadcast(&g->cond);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

bool gate_await(struct gate *g, int n, double seconds)
{
    double end = now() + seconds;
    pthread_mutex_lock(&g->lock);
    while (g->arrived < n && now() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10000000; /* recheck the deadline every 10 ms */
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&g->cond, &g->lock, &ts);
    }
    bool ok = g->arrived >= n;
    pthread_mutex_unlock(&g->lock);
    return ok;
}

bool wait_until(bool (*done)(const void *arg), const void *arg, double seconds)
{
    double end = now() + seconds;
    while (!done(arg)) {
        if (now() > end)
            return false;
        nap();
    }
    return true;
}

pid_t thread_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* The state letter of /proc/self/task/<tid>/stat: "pid (comm) S ...". */
static char thread_state(pid_t tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' ? paren[2] : '?';
}

static bool sleeping(const void *arg)
{
    char s = thread_state(*(const pid_t *)arg);
    return s == 'S' || s == 'D';
}

bool await_sleeping(pid_t tid, double seconds)
{
    return wait_until(sleeping, &tid, seconds);
}

static void *dthread_main(void *arg)
{
    struct dthread *t = arg;
    atomic_store(&t->tid, thread_tid());
    t->fn(t->arg);
    atomic_store(&t->done, true);
    return NULL;
}

void dthread_start(struct dthread *t, void (*fn)(void *arg), void *arg)
{
    t->fn = fn;
    t->arg = arg;
    atomic_store(&t->tid, 0);
    atomic_store(&t->done, false);
    if (pthread_create(&t->thread, NULL, dthread_main, t))
        abort();
}

static bool has_tid(const void *arg)
{
    return atomic_load(&((struct dthread *)arg)->tid) != 0;
}

pid_t dthread_tid(struct dthread *t)
{
    if (!wait_until(has_tid, t, HANG_SECONDS))
        abort();
    return atomic_load(&t->tid);
}

static bool dthread_done(const void *arg)
{
    return atomic_load(&((struct dthread *)arg)->done);
}

bool dthread_join(struct dthread *t, double seconds)
{
    if (!wait_until(dthread_done, t, seconds))
        return false;
    pthread_join(t->thread, NULL);
    return true;
}

/* A child that hangs is about to be killed: where it waits is what tells a
 * deadlock (asleep on a lock no thread will release) from slowness, and a
 * hang seen once under load may not come back on demand.  Its stacks go to
 * stderr, through gdb where there is one. */
static void show_stacks(pid_t pid)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "command -v gdb >/dev/null && timeout 60 gdb -p %d -batch -nx "
             "-ex 'thread apply all bt' </dev/null >&2 2>/dev/null",
             (int)pid);
    fprintf(stderr, "child %d hung; its stacks:\n", (int)pid);
    fflush(NULL);
    if (system(cmd) != 0)
        fprintf(stderr, "(none: no gdb, or it could not attach)\n");
}

bool child_wait(pid_t pid, double seconds, int *status)
{
    double end = now() + seconds;
    pid_t got;
    for (;;) {
        got = waitpid(pid, status, WNOHANG);
        if (got == pid)
            return true;
        if (got < 0 || now() > end)
            break;
        nap();
    }
    if (got == 0) /* still running, not already gone */
        show_stacks(pid);
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return false;
}

bool run_self(const char *arg, double seconds, int *status, char *out, size_t n)
{
    FILE *tmp = tmpfile();
    if (!tmp || n == 0)
        abort();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        dup2(fileno(tmp), 1);
        dup2(fileno(tmp), 2);
        char self[4096];
        ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (len > 0) {
            self[len] = '\0';
            execl(self, self, arg, (char *)NULL);
        }
        _exit(127);
    }
    bool ended = child_wait(pid, seconds, status);
    rewind(tmp);
    size_t got = fread(out, 1, n - 1, tmp);
    out[got] = '\0';
    fclose(tmp);
    return ended;
}
