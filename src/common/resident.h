/* Keeping the library mapped once code outside it points into it. */
#ifndef RC_RESIDENT_H
#define RC_RESIDENT_H

/*
 * Make the object that holds this library (libregcache.so, or the program
 * or plugin it is linked into) stay mapped until the process exits, even
 * when whoever dlopen()ed it dlclose()s it.  Called before the library
 * hands the process a pointer into its code that outlives every cache: a
 * jump patched into libcuda, a thread-key destructor.  Best effort: an
 * object that dlopen() cannot name (the main program) is never unmapped
 * anyway.  Thread safe.
 */
void rc_stay_resident(void);

#endif
