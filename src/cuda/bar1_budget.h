/* The per-device byte budget derived from BAR1 when params.max_bytes is 0. */
#ifndef RC_BAR1_BUDGET_H
#define RC_BAR1_BUDGET_H

#include <stddef.h>

/* Free BAR1 of CUDA device `device` less the reserve (see README), or 0
 * (= unlimited) when NVML or the device cannot be read.  Read once per
 * device and process; REGCACHE_BAR1_BYTES=size stands for an empty BAR1 of
 * that size. */
size_t rc_bar1_budget(int device);

/* The rule behind it: free less max(10% of total, 32 MiB); 1 (keep nothing
 * unused) when the reserve takes all that is free. */
size_t rc_bar1_budget_rule(unsigned long long total, unsigned long long free);

#endif
