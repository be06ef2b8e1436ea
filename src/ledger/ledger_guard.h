/* Mappings of ledger segments that survive being truncated.
 *
 * Any process of the user can truncate a segment that others have mapped;
 * their next access to a page past the new end raises SIGBUS, which would
 * kill them at a miss or a put.  A guarded mapping is instead replaced, at
 * its first such fault, by private zeroed memory whose first word reads
 * RC_LEDGER_CUT: the access goes on, and the ledger sees a segment it no
 * longer shares and falls back to its own budget.  The SIGBUS handler is
 * installed at the first guard and passes every other SIGBUS on to the
 * handler it replaced (or to the default action). */
#ifndef RC_LEDGER_GUARD_H
#define RC_LEDGER_GUARD_H

#include <stdbool.h>
#include <stddef.h>

/* Guard the `len` mapped bytes at `base`.  false when the handler cannot
 * be installed or RC_LEDGER_GUARDS mappings are guarded already.  Thread
 * safe. */
#define RC_LEDGER_GUARDS 1024
bool rc_ledger_guard(void *base, size_t len);

/* Stop guarding the mapping at `base`, before it is unmapped.  Thread safe,
 * but not while the mapping is in use. */
void rc_ledger_unguard(void *base);

#endif
