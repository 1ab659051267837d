/* A library for LD_PRELOAD in tests: open, pread or fsync of the files whose path holds a given part fail with a
 * chosen errno, as they do on a failing disk, a full one (ENOSPC: a write's data fails at the latest when it is
 * made durable), a soft NFS mount that times out (ETIMEDOUT), after a file server's failover (ESTALE) or when a
 * process has no descriptors left (EMFILE). Nothing else changes.
 *   IO_FAULT_PATH   a part of the file's path (as opened, or as /proc/self/fd names it); unset: no fault
 *   IO_FAULT_CALL   "open" (open, openat), "read" (pread) or "fsync"
 *   IO_FAULT_ERRNO  the errno, a number
 *   IO_FAULT_AFTER  read: bytes of the file that reads return before they fail (0): a read cut short by the error
 *   IO_FAULT_WHILE  a file: the fault holds only while it exists (a disk that fills up, and is freed, mid-run) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static long long bytes_read; /* of the faulty file, by this process */

static int faulty(const char* call, const char* path) {
  const char* part = getenv("IO_FAULT_PATH");
  const char* which = getenv("IO_FAULT_CALL");
  const char* while_exists = getenv("IO_FAULT_WHILE");
  return part != NULL && *part != '\0' && which != NULL && strcmp(which, call) == 0 && path != NULL &&
         strstr(path, part) != NULL && (while_exists == NULL || access(while_exists, F_OK) == 0);
}

static int fault_errno(void) {
  const char* number = getenv("IO_FAULT_ERRNO");
  return number != NULL ? atoi(number) : EIO;
}

static int fd_is_faulty(const char* call, int fd) {
  char link[64];
  char path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return faulty(call, path);
}

static mode_t mode_of(int flags, va_list args) { return (flags & (O_CREAT | O_TMPFILE)) ? va_arg(args, mode_t) : 0; }

typedef int (*openat_fn)(int, const char*, int, ...);
typedef ssize_t (*pread_fn)(int, void*, size_t, off_t);

static int open_at(int dir, const char* path, int flags, mode_t mode) {
  static openat_fn real;
  if (faulty("open", path)) {
    errno = fault_errno();
    return -1;
  }
  if (real == NULL) real = (openat_fn)dlsym(RTLD_NEXT, "openat");
  return real(dir, path, flags, mode);
}

int openat(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_of(flags, args);
  va_end(args);
  return open_at(dir, path, flags, mode);
}

int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_of(flags, args);
  va_end(args);
  return open_at(AT_FDCWD, path, flags, mode);
}

int openat64(int dir, const char* path, int flags, ...) __attribute__((alias("openat")));
int open64(const char* path, int flags, ...) __attribute__((alias("open")));
int __open_2(const char* path, int flags) { return open_at(AT_FDCWD, path, flags, 0); }
int __openat_2(int dir, const char* path, int flags) { return open_at(dir, path, flags, 0); }

ssize_t pread(int fd, void* buffer, size_t n, off_t offset) {
  static pread_fn real;
  if (real == NULL) real = (pread_fn)dlsym(RTLD_NEXT, "pread");
  if (!fd_is_faulty("read", fd)) return real(fd, buffer, n, offset);
  const char* after = getenv("IO_FAULT_AFTER");
  const long long left = (after != NULL ? atoll(after) : 0) - bytes_read;
  if (left <= 0) {
    errno = fault_errno();
    return -1;
  }
  const ssize_t got = real(fd, buffer, (size_t)left < n ? (size_t)left : n, offset);
  if (got > 0) bytes_read += got;
  return got;
}

ssize_t pread64(int fd, void* buffer, size_t n, off_t offset) __attribute__((alias("pread")));
ssize_t __pread_chk(int fd, void* buffer, size_t n, off_t offset, size_t size) {
  (void)size;
  return pread(fd, buffer, n, offset);
}

typedef int (*fsync_fn)(int);

int fsync(int fd) {
  static fsync_fn real;
  if (real == NULL) real = (fsync_fn)dlsym(RTLD_NEXT, "fsync");
  if (fd_is_faulty("fsync", fd)) {
    errno = fault_errno();
    return -1;
  }
  return real(fd);
}
