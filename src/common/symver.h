/* Versioned entry points of the shared library (regcache.map). */
#ifndef RC_SYMVER_H
#define RC_SYMVER_H

/*
 * RC_SYMVER(local, api, "@@REGCACHE_x.y") declares `local`, of api's type,
 * as the definition of api at that version: "@@" for the default version,
 * which programs link against now, "@" for an older one that only programs
 * linked before keep using.  The map lists api in every version it has.
 * gcc's attribute survives link-time optimisation, which drops the symbol
 * a top-level .symver names; clang 14 knows only the directive.  The
 * static library keeps these names too: there the default version is what
 * a call of api reaches.
 */
#if defined(__has_attribute)
#if __has_attribute(symver)
#define RC_SYMVER(local, api, version) \
    extern __typeof__(api) local __attribute__((visibility("default"), symver(#api version)))
#endif
#endif
#ifndef RC_SYMVER
#define RC_SYMVER(local, api, version)                                   \
    extern __typeof__(api) local __attribute__((visibility("default"))); \
    __asm__(".symver " #local ", " #api version)
#endif

#endif
