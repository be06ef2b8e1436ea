/* The background workers' limit, by measurement (worker_sizer.h). */
#include "worker_sizer.h"

/* Jobs a window times per worker allowed: enough that one slow job (a
 * page fault, a preemption) moves its figure little. */
#define JOBS_PER_WORKER 8
#define MIN_JOBS 16
/* Windows a trial runs; the cheapest of them counts, as the cheapest of
 * the windows before it counts for the limit it is tried against: a
 * preempted worker or a busy host only ever makes a window dearer. */
#define TRIAL 3
/* Windows between trials, doubling (to MAX_HOLD) while trials fail: a
 * failed trial may cost many times a window at the limit kept (workers
 * sleeping on each other's locks), so after a few they come seldom. */
#define HOLD 8
#define MAX_HOLD 1024

void rc_sizer_init(struct rc_sizer *s, unsigned floor, unsigned ceil)
{
    if (ceil < 1)
        ceil = 1;
    if (floor < 1)
        floor = 1;
    if (floor > ceil)
        floor = ceil;
    *s = (struct rc_sizer){
        .limit = floor, .floor = floor, .ceil = ceil, .best = UINT64_MAX, .next_hold = HOLD
    };
}

static unsigned window_jobs(const struct rc_sizer *s)
{
    unsigned n = JOBS_PER_WORKER * s->limit;
    return n < MIN_JOBS ? MIN_JOBS : n;
}

void rc_sizer_started(struct rc_sizer *s, uint64_t now)
{
    if (!s->since) {
        s->since = now ? now : 1;
        s->done = 0;
        s->full = true;
    }
}

/* Start a trial of `limit` against the current one. */
static bool try_limit(struct rc_sizer *s, unsigned limit)
{
    s->base = s->limit;
    s->base_cost = s->best;
    s->best = UINT64_MAX;
    s->left = TRIAL;
    s->trying = true;
    bool rose = limit > s->limit;
    s->limit = limit;
    return rose;
}

static unsigned twice(const struct rc_sizer *s)
{
    return s->limit * 2 < s->ceil ? s->limit * 2 : s->ceil;
}

static unsigned half(const struct rc_sizer *s)
{
    return s->limit / 2 > s->floor ? s->limit / 2 : s->floor;
}

bool rc_sizer_decide(struct rc_sizer *s, uint64_t cost)
{
    if (cost < s->best)
        s->best = cost;
    if (s->trying) {
        /* Twice as dear: no window of it will do, and each costs. */
        if (--s->left && cost / 2 <= s->base_cost)
            return false;
        s->trying = false;
        bool up = s->limit > s->base;
        /* Up: a tenth cheaper at least; down: a twentieth dearer at most. */
        bool keep = up ? s->best * 10 <= s->base_cost * 9 : s->best * 20 <= s->base_cost * 21;
        s->down_next = !s->down_next;
        if (!keep) {
            s->limit = s->base;
            s->best = UINT64_MAX;
            s->hold = s->next_hold;
            s->next_hold = s->next_hold * 2 < MAX_HOLD ? s->next_hold * 2 : MAX_HOLD;
            return false;
        }
        s->next_hold = HOLD;
        /* A kept rise tries further at once, against what it measured. */
        if (up && s->limit < s->ceil)
            return try_limit(s, twice(s)) || up;
        s->hold = HOLD;
        return up;
    }
    if (s->hold) {
        s->hold--;
        return false;
    }
    bool can_up = s->limit < s->ceil;
    bool can_down = s->limit > s->floor;
    if (can_down && (s->down_next || !can_up))
        return try_limit(s, half(s));
    if (can_up)
        return try_limit(s, twice(s));
    s->hold = HOLD;
    return false;
}

bool rc_sizer_ended(struct rc_sizer *s, uint64_t now, unsigned queued)
{
    if (!s->since)
        return false;
    s->done++;
    /* Workers that found the queue empty waited, not registered: a window
     * in which it ran dry says nothing of what a job costs. */
    if (!queued)
        s->full = false;
    if (s->done < window_jobs(s))
        return false;
    bool full = s->full;
    uint64_t cost = now > s->since ? (now - s->since) / s->done : 0;
    s->since = 0;
    return full && cost && rc_sizer_decide(s, cost);
}
