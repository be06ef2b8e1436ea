/* The pause a spinning reader issues while a writer finishes: it yields
 * the core's pipeline (and, on SMT cores, the sibling) without sleeping. */
#ifndef RC_CPU_RELAX_H
#define RC_CPU_RELAX_H

static inline void rc_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
