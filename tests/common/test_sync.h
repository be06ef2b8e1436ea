/* Interleavings on demand, for tests that must put one thread at a chosen
 * point of the cache while another acts: a gate that a callback waits at
 * until the test opens it, waiting (with a deadline) for a condition or for
 * a thread to sleep, threads and child processes whose end is awaited with
 * a deadline.  Deadlines only turn a hang into a failure: they are generous
 * (sanitizers, loaded machines) and no test claims anything about time. */
#ifndef TEST_SYNC_H
#define TEST_SYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A fast pseudo-random sequence (xorshift32) for stress tests; *s must
 * start non-zero. */
static inline uint32_t test_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Seconds after which a wait that should end at once is a hang. */
#define HANG_SECONDS 10.0

struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool open;
    int arrived; /* threads that reached the gate, open or not */
};

void gate_init(struct gate *g);
/* Arrive, and wait until the gate is open. */
void gate_pass(struct gate *g);
void gate_open(struct gate *g);
/* Wait until n threads arrived; false after `seconds`. */
bool gate_await(struct gate *g, int n, double seconds);

/* Poll done(arg) until it is true; false after `seconds`. */
bool wait_until(bool (*done)(const void *arg), const void *arg, double seconds);

/* The calling thread's kernel id. */
pid_t thread_tid(void);
/* Wait until thread `tid` of this process sleeps (blocked in the kernel:
 * on a futex, a condition variable, a mutex); false after `seconds`. */
bool await_sleeping(pid_t tid, double seconds);

/* A thread that can be waited for with a deadline. */
struct dthread {
    pthread_t thread;
    void (*fn)(void *arg);
    void *arg;
    _Atomic pid_t tid; /* set as it starts */
    atomic_bool done;
};

void dthread_start(struct dthread *t, void (*fn)(void *arg), void *arg);
/* The thread's kernel id, once it runs. */
pid_t dthread_tid(struct dthread *t);
/* Join it if it ends within `seconds`; false (and not joined) otherwise. */
bool dthread_join(struct dthread *t, double seconds);

/* Wait for child `pid` at most `seconds`; when it does not end by then,
 * kill it (SIGKILL) and reap it.  *status: its wait status.  False on
 * timeout. */
bool child_wait(pid_t pid, double seconds, int *status);

/* Run this test binary again (a fresh exec, not only a fork) with one
 * argument and stdout/stderr captured into out[n] (always terminated);
 * waits as child_wait.  The test's main() dispatches on the argument. */
bool run_self(const char *arg, double seconds, int *status, char *out, size_t n);

#endif
