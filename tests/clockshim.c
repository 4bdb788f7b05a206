/* LD_PRELOAD shim for tests (see tests/clockstep.py): steps CLOCK_REALTIME only.
 *
 * The offset is a signed int64 of nanoseconds, little-endian, in the first 8
 * bytes of the file named by $TASKQ_TEST_CLOCK_FILE, mmapped shared at load
 * time, so the test can step the clock of a running process by storing a new
 * value in place. No variable, no file, or a file shorter than 8 bytes: offset 0.
 * Monotonic and CPU clocks, sleeps and the kernel's file stamps are untouched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*gettime_fn)(clockid_t, struct timespec *);
static gettime_fn real_gettime;
static const volatile int64_t *offset_ns;

__attribute__((constructor)) static void shim_init(void) {
    real_gettime = (gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    const char *path = getenv("TASKQ_TEST_CLOCK_FILE");
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= 8) {
        void *p = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) offset_ns = p;
    }
    if (fd >= 0) close(fd);
}

static int64_t offset(void) { /* one aligned 8-byte load: never torn on x86-64 */
    return offset_ns ? __atomic_load_n(offset_ns, __ATOMIC_RELAXED) : 0;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int rc = real_gettime ? real_gettime(clk, ts) : (int)syscall(SYS_clock_gettime, clk, ts);
    if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE || clk == CLOCK_TAI)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset();
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
        if (ts->tv_nsec < 0) ts->tv_sec -= 1, ts->tv_nsec += 1000000000;
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    if (tz) ((struct timezone *)tz)->tz_minuteswest = 0, ((struct timezone *)tz)->tz_dsttime = 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    tv->tv_sec = ts.tv_sec, tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    return base == TIME_UTC && clock_gettime(CLOCK_REALTIME, ts) == 0 ? base : 0;
}
