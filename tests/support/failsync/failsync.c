/* fsync and fdatasync that fail with EIO while the file FAILSYNC_FLAG names exists: loaded
   with LD_PRELOAD into a worker process by tests/test_sqlite_commit_in_doubt.py, so that a
   real SQLite COMMIT meets a disk whose sync fails, as a failing device makes it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
  const char *flag = getenv("FAILSYNC_FLAG");
  return flag != NULL && access(flag, F_OK) == 0;
}

int fsync(int fd) {
  static int (*real)(int);
  if (failing()) {
    errno = EIO;
    return -1;
  }
  if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  return real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (failing()) {
    errno = EIO;
    return -1;
  }
  if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  return real(fd);
}
