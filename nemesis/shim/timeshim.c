/*
 * lockstorm time shim: an LD_PRELOAD library that shifts a process's wall
 * clock (CLOCK_REALTIME and everything derived from it) by an amount the
 * harness controls through a small memory-mapped file.
 *
 * Why not libfaketime: its initialisation calls dlsym/malloc from inside the
 * clock functions, and jemalloc-linked redis-server calls clock_gettime from
 * inside malloc initialisation, so the two recurse into each other and
 * deadlock. This shim therefore:
 *   - never allocates, never uses stdio, never calls dlsym;
 *   - reads the kernel's clocks through the vDSO's own clock_gettime, found
 *     by walking the vDSO's ELF symbols, or else raw syscalls (syscall(2));
 *     LOCKSTORM_TIME_NO_VDSO (any value) forces the syscalls;
 *   - maps the control file lazily (and eagerly from a constructor) with
 *     raw syscalls and mmap(2), lock-free, so any thread or signal handler
 *     may be first.
 *
 * Control file (path in LOCKSTORM_TIME_CONTROL), 64 bytes, little-endian:
 *   0  u32 magic   0x54534B4C ("LKST" in file order)
 *   4  u32 version 1
 *   8  u64 seq     seqlock counter, odd while the writer is updating
 *   16 i64 offset_ns
 *   24 f64 rate    1.0 = normal speed
 *   32 i64 anchor_real_ns  real CLOCK_REALTIME at which `rate` took effect
 *   40 .. 64 reserved, zero
 * shifted = real + offset_ns + (real - anchor_real_ns) * (rate - 1)
 *
 * Without the variable, or when the file cannot be opened/mapped, or when its
 * header is wrong, time passes through unchanged. CLOCK_MONOTONIC, BOOTTIME,
 * CPU-time clocks etc. are never touched.
 *
 * Keep the layout and formula in sync with nemesis/src/clock.rs.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define LKST_MAGIC 0x54534B4Cu
#define LKST_VERSION 1u
#define LKST_SIZE 64
#define NSEC_PER_SEC 1000000000LL

struct lkst_control {
    uint32_t magic;
    uint32_t version;
    uint64_t seq;
    int64_t offset_ns;
    uint64_t rate_bits; /* an f64, read as bits so it can be loaded atomically */
    int64_t anchor_real_ns;
    uint8_t reserved[LKST_SIZE - 40];
};

_Static_assert(sizeof(struct lkst_control) == LKST_SIZE, "control is 64 bytes");
_Static_assert(offsetof(struct lkst_control, seq) == 8, "seq at 8");
_Static_assert(offsetof(struct lkst_control, anchor_real_ns) == 32, "anchor at 32");

/* NULL: not yet initialised; NO_CONTROL: initialised, pass time through. */
#define NO_CONTROL ((struct lkst_control *)(uintptr_t)1)
static struct lkst_control *control_ptr;

static struct lkst_control *map_control(void) {
    const char *path = getenv("LOCKSTORM_TIME_CONTROL");
    if (path == NULL || path[0] == '\0')
        return NO_CONTROL;
    long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NO_CONTROL;
    /* A file shorter than 64 bytes would SIGBUS on access: check first. */
    long size = syscall(SYS_lseek, fd, 0L, SEEK_END);
    void *p = MAP_FAILED;
    if (size >= LKST_SIZE)
        p = mmap(NULL, LKST_SIZE, PROT_READ, MAP_SHARED, (int)fd, 0);
    syscall(SYS_close, fd);
    if (p == MAP_FAILED)
        return NO_CONTROL;
    return (struct lkst_control *)p;
}

/* Lock-free lazy init: every racer maps, one pointer wins, losers unmap. No
 * spinning, so a signal handler interrupting the init on the same thread is
 * safe. */
static struct lkst_control *control(void) {
    struct lkst_control *c = __atomic_load_n(&control_ptr, __ATOMIC_ACQUIRE);
    if (c != NULL)
        return c;
    struct lkst_control *mine = map_control();
    struct lkst_control *expected = NULL;
    if (__atomic_compare_exchange_n(&control_ptr, &expected, mine, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return mine;
    if (mine != NO_CONTROL)
        munmap(mine, LKST_SIZE);
    return expected;
}

/*
 * The kernel's clocks. A raw syscall costs ~0.5 us where the vDSO costs
 * ~40 ns, and redis reads the clock several times per command, so the shim
 * calls the vDSO's clock_gettime when it can find it: kernel code mapped into
 * the process, found by walking its ELF symbols (no libc, no dlsym, no
 * malloc). When it cannot, it falls back to syscall(SYS_clock_gettime).
 */
typedef long (*vdso_clock_gettime_fn)(clockid_t, struct timespec *);
#define VDSO_NONE ((vdso_clock_gettime_fn)(uintptr_t)1)
static vdso_clock_gettime_fn vdso_clock_gettime; /* NULL: not looked up yet */

#if defined(__x86_64__)
#define VDSO_CLOCK_GETTIME "__vdso_clock_gettime"
#elif defined(__aarch64__)
#define VDSO_CLOCK_GETTIME "__kernel_clock_gettime"
#endif

static vdso_clock_gettime_fn find_vdso_clock_gettime(void) {
#ifndef VDSO_CLOCK_GETTIME
    return VDSO_NONE;
#else
    if (getenv("LOCKSTORM_TIME_NO_VDSO") != NULL)
        return VDSO_NONE;
    uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (base == 0)
        return VDSO_NONE;
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64)
        return VDSO_NONE;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
    uintptr_t load = 0;
    int have_load = 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && !have_load) {
            load = base + ph[i].p_offset - ph[i].p_vaddr;
            have_load = 1;
        } else if (ph[i].p_type == PT_DYNAMIC) {
            dyn = (const ElfW(Dyn) *)(base + ph[i].p_offset);
        }
    }
    if (!have_load || dyn == NULL)
        return VDSO_NONE;
    const char *strtab = NULL;
    const ElfW(Sym) *symtab = NULL;
    const Elf32_Word *hash = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_STRTAB)
            strtab = (const char *)(load + dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_SYMTAB)
            symtab = (const ElfW(Sym) *)(load + dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_HASH)
            hash = (const Elf32_Word *)(load + dyn->d_un.d_ptr);
    }
    if (strtab == NULL || symtab == NULL || hash == NULL)
        return VDSO_NONE;
    for (Elf32_Word i = 0; i < hash[1]; i++) { /* hash[1]: number of symbols */
        const ElfW(Sym) *sym = &symtab[i];
        if (ELF64_ST_TYPE(sym->st_info) != STT_FUNC || sym->st_shndx == SHN_UNDEF ||
            sym->st_value == 0)
            continue;
        if (strcmp(strtab + sym->st_name, VDSO_CLOCK_GETTIME) == 0)
            return (vdso_clock_gettime_fn)(load + sym->st_value);
    }
    return VDSO_NONE;
#endif
}

/* clock_gettime without the shift; errors as clock_gettime(2) reports them. */
static int real_clock_gettime(clockid_t id, struct timespec *ts) {
    vdso_clock_gettime_fn f = __atomic_load_n(&vdso_clock_gettime, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        /* Idempotent, so racing threads may all look it up. */
        f = find_vdso_clock_gettime();
        __atomic_store_n(&vdso_clock_gettime, f, __ATOMIC_RELEASE);
    }
    if (f == VDSO_NONE)
        return (int)syscall(SYS_clock_gettime, id, ts);
    /* The vDSO returns -errno, like the raw system call instruction. */
    long rc = f(id, ts);
    if (rc != 0) {
        errno = (int)-rc;
        return -1;
    }
    return 0;
}

/* Map before main(): redis rewrites its environment for setproctitle. */
__attribute__((constructor)) static void lkst_init(void) {
    (void)control();
    struct timespec ts;
    (void)real_clock_gettime(CLOCK_MONOTONIC, &ts);
}

static int64_t real_now_ns(void) {
    struct timespec ts;
    if (real_clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

/* The shift to add to `real` (ns), 0 when there is no usable control. */
static int64_t shift_ns(int64_t real) {
    struct lkst_control *c = control();
    if (c == NO_CONTROL)
        return 0;
    if (__atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) != LKST_MAGIC ||
        __atomic_load_n(&c->version, __ATOMIC_RELAXED) != LKST_VERSION)
        return 0;
    int64_t offset, anchor;
    uint64_t rate_bits;
    /* A writer never holds the lock for more than a few stores; the bound only
     * guards against a writer that died mid-update (then: no shift). */
    for (unsigned long tries = 0;; tries++) {
        if (tries > (1ul << 22))
            return 0;
        uint64_t s1 = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1) {
            if ((tries & 63) == 63)
                syscall(SYS_sched_yield);
            continue;
        }
        offset = __atomic_load_n(&c->offset_ns, __ATOMIC_RELAXED);
        rate_bits = __atomic_load_n(&c->rate_bits, __ATOMIC_RELAXED);
        anchor = __atomic_load_n(&c->anchor_real_ns, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        uint64_t s2 = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
        if (s1 == s2)
            break;
    }
    double rate;
    memcpy(&rate, &rate_bits, sizeof rate);
    int64_t drift = 0;
    /* NaN or infinite rates are ignored (the writer refuses them anyway). */
    if (__builtin_isfinite(rate) && rate != 1.0)
        drift = (int64_t)((double)(real - anchor) * (rate - 1.0));
    return offset + drift;
}

static int64_t shifted_now_ns(void) {
    int64_t real = real_now_ns();
    return real + shift_ns(real);
}

static void ns_to_timespec(int64_t ns, struct timespec *ts) {
    int64_t sec = ns / NSEC_PER_SEC, rem = ns % NSEC_PER_SEC;
    if (rem < 0) {
        rem += NSEC_PER_SEC;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)rem;
}

static int is_realtime(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE ||
           id == CLOCK_REALTIME_ALARM || id == CLOCK_TAI;
}

#define EXPORT __attribute__((visibility("default")))

EXPORT int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = real_clock_gettime(id, ts);
    if (rc != 0 || !is_realtime(id))
        return rc;
    int64_t real = (int64_t)ts->tv_sec * NSEC_PER_SEC + ts->tv_nsec;
    ns_to_timespec(real + shift_ns(real), ts);
    return 0;
}

EXPORT int __clock_gettime(clockid_t id, struct timespec *ts) { return clock_gettime(id, ts); }

/* glibc declares gettimeofday's first argument nonnull, which would let the
 * compiler drop the NULL check below; define the body under another name and
 * export it under the real one by alias. */
static int lkst_gettimeofday(struct timeval *tv, void *tz) {
    if (tz != NULL && syscall(SYS_gettimeofday, NULL, tz) != 0)
        return -1;
    if (tv != NULL) {
        struct timespec ts;
        ns_to_timespec(shifted_now_ns(), &ts);
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

EXPORT int gettimeofday(struct timeval *restrict tv, void *restrict tz)
    __attribute__((alias("lkst_gettimeofday")));
EXPORT int __gettimeofday(struct timeval *restrict tv, void *restrict tz)
    __attribute__((alias("lkst_gettimeofday")));

EXPORT time_t time(time_t *t) {
    struct timespec ts;
    ns_to_timespec(shifted_now_ns(), &ts);
    if (t != NULL)
        *t = ts.tv_sec;
    return ts.tv_sec;
}

EXPORT int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC)
        return 0;
    ns_to_timespec(shifted_now_ns(), ts);
    return base;
}
