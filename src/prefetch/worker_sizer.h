/* How many background workers register at once, by measurement.
 *
 * More workers help only where registrations spend their time outside
 * what they share: the cache lock, which a miss takes twice, and the
 * backend's own locks (the CUDA driver's, which an export takes).  Where
 * they do not - the null backend, or the driver's export - every worker
 * more only queues on those locks, and sleeping on them and waking costs
 * system calls: 16 workers took 7x the time per registration of one with
 * the null backend and 2x with CUDA exports.  So the workers register at
 * most `limit` at a time, and the limit follows what the registrations
 * cost: while the queue stays full it times windows of jobs, and from a
 * steady limit it tries twice as many (or, every other time, half as
 * many) for a few windows, keeping the new limit only when a job then
 * costs clearly less (or, going down, hardly more), each side judged by
 * its cheapest window; trials that fail come ever more rarely.  The
 * limit never falls below the rails a job of several rails registers side
 * by side, nor rises above the workers.  Under the queue's lock
 * (prefetch.h). */
#ifndef RC_WORKER_SIZER_H
#define RC_WORKER_SIZER_H

#include <stdbool.h>
#include <stdint.h>

struct rc_sizer {
    unsigned limit;       /* workers that may register at once */
    unsigned floor, ceil; /* its bounds */
    /* The window being timed: its first job's start (a clock reading) and
     * the jobs ended since; `full` while the queue has not run dry in it. */
    uint64_t since;
    unsigned done;
    bool full;
    /* What a job cost in the cheapest window at this limit (clock counts);
     * during a trial, the limit tried against and its cost, and the
     * trial's windows left. */
    uint64_t best;
    unsigned base;
    uint64_t base_cost;
    unsigned left;
    bool trying;
    bool down_next;     /* the next trial halves the limit */
    unsigned hold;      /* windows left before the next trial */
    unsigned next_hold; /* the hold after a trial that fails */
};

void rc_sizer_init(struct rc_sizer *s, unsigned floor, unsigned ceil);

/* A worker took a job at clock reading now. */
void rc_sizer_started(struct rc_sizer *s, uint64_t now);

/* A job ended at clock reading now; `queued`: jobs still waiting.  Returns
 * true when the limit rose (sleeping workers may run). */
bool rc_sizer_ended(struct rc_sizer *s, uint64_t now, unsigned queued);

/* A full window ended: a job cost `cost` at the current limit.  The
 * decision itself, apart from the clock for tests.  Returns true when the
 * limit rose. */
bool rc_sizer_decide(struct rc_sizer *s, uint64_t cost);

#endif
