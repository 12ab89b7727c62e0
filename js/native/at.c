// openat(2) for the package's host-fs (and one call each for what a sync-out
// does to a file before and after its bytes): Node has no openat, and its
// stand-in, opening "/proc/self/fd/<dir>/<name>", makes the kernel walk four
// /proc entries per open (~4 us of a small file's ~10 us in the worker). The
// kernel resolves `name` against `dir` the same way both times, so this
// changes the cost, not what is reached.
//
// Written against Node-API's C header rather than napi-rs: six functions
// of glue, no crates in CI's build, and it loads in every Node since 12.22
// (the N-API version below).
//
//   openat(dir, name, flags, mode) -> fd, or -errno. `name` is a string or a
//     Buffer (raw name bytes); a name with a NUL byte is EINVAL. O_CLOEXEC is
//     always added, as libuv adds it to node:fs opens: no sandbox process the
//     host spawns inherits a host file.
//   close(fd) -> 0, -errno (the fd is released all the same), or 1: `fd` was
//     not opened here, close it with node:fs.
//   create(dir, name, mode) -> fd, or -errno: a new file (O_EXCL, never
//     through a final symlink) born at most 0600 and then given exactly
//     `mode & 0777` by fchmod before anything is written: the open and the
//     chmod of each file a sync-out writes, in one call (~1 us a file less
//     than two node:fs calls). A failed chmod closes the fd; the empty file
//     stays, for the caller to remove, as when node:fs's chmod fails.
//   seal(fd, mtimeSec) -> 0 or -errno: sets a file create() opened to
//     modification time `mtimeSec` (a BigInt, clamped at the epoch; the
//     access time is left as it is, which node:fs cannot do) and closes it,
//     whether that failed or not. An fd not opened here is EBADF, left open.
//   same(fd, dev, ino, size, mtimeSec, mtimeNsec) -> 1 when `fd` is a
//     regular file with exactly this device, inode, size (BigInts) and
//     mtime (BigInt seconds, int nanoseconds), 0 when not, -errno when its
//     fstat fails: a sync-in's check that the file it just read is the one
//     it planned, without the BigIntStats node:fs builds (~1 us a file).
//   held() -> how many fds opened here are still open.
//   trylock(fd) -> 0, or -errno (EWOULDBLOCK: another holds it): an
//     exclusive flock on any fd, never waiting (a sync-out's hold on its
//     target, src/target-lock.js; Node has no flock).
//
// The fds are ordinary ones for node:fs calls, but closed only with close():
// a worker thread's Node closes the fds node:fs opened when the worker is
// terminated (a sync past its deadline), and knows nothing of these. So each
// Node environment (main thread, worker) keeps a bitmap of the fds it opened
// here, and its cleanup (the worker's exit, terminated or not) closes the
// ones still open.

#define _GNU_SOURCE
#define NAPI_VERSION 8
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <node_api.h>

/** One environment's open fds, one bit each. */
typedef struct {
  uint64_t *bits;
  size_t words;
  size_t held;
} fd_set_t;

static bool is_held(const fd_set_t *set, int fd) {
  size_t word = (size_t)fd / 64;
  return word < set->words && (set->bits[word] >> (fd % 64) & 1);
}

/** Marks `fd` open; false (nothing changed) when the bitmap cannot grow. */
static bool hold(fd_set_t *set, int fd) {
  size_t word = (size_t)fd / 64;
  if (word >= set->words) {
    size_t words = set->words ? set->words : 16;
    while (words <= word) words *= 2;
    uint64_t *bits = realloc(set->bits, words * sizeof *bits);
    if (bits == NULL) return false;
    memset(bits + set->words, 0, (words - set->words) * sizeof *bits);
    set->bits = bits;
    set->words = words;
  }
  set->bits[word] |= UINT64_C(1) << (fd % 64);
  set->held++;
  return true;
}

static void release(fd_set_t *set, int fd) {
  set->bits[(size_t)fd / 64] &= ~(UINT64_C(1) << (fd % 64));
  set->held--;
}

/** The environment's teardown: closes what it left open, frees the bitmap. */
static void cleanup(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  fd_set_t *set = data;
  for (size_t word = 0; word < set->words; word++) {
    for (int bit = 0; bit < 64; bit++) {
      if (set->bits[word] >> bit & 1) close((int)(word * 64 + (size_t)bit));
    }
  }
  free(set->bits);
  free(set);
}

static fd_set_t *fds(napi_env env) {
  void *data = NULL;
  return napi_get_instance_data(env, &data) == napi_ok ? data : NULL;
}

static napi_value int32(napi_env env, int32_t value) {
  napi_value out = NULL;
  napi_create_int32(env, value, &out);
  return out;
}

/** Copies `value` (string or Buffer) into `path` with a NUL; 0, or -errno for the caller to return. */
static int name_arg(napi_env env, napi_value value, char *path, size_t size, bool *bad) {
  bool is_buffer = false;
  size_t len = 0;
  if (napi_is_buffer(env, value, &is_buffer) != napi_ok) goto bad;
  if (is_buffer) {
    void *data = NULL;
    if (napi_get_buffer_info(env, value, &data, &len) != napi_ok) goto bad;
    if (len >= size) return -ENAMETOOLONG;
    if (len > 0) memcpy(path, data, len);
    path[len] = '\0';
  } else {
    // Fails for anything but a string. Copies at most size - 1 bytes: a
    // longer name comes back cut to exactly that, and is refused.
    if (napi_get_value_string_utf8(env, value, path, size, &len) != napi_ok) goto bad;
    if (len >= size - 1) return -ENAMETOOLONG;
  }
  if (strlen(path) != len) return -EINVAL;
  return 0;
bad:
  *bad = true;
  return 0;
}

/**
 * Reads the arguments (dir: int, name: string | Buffer, then `n` ints) into
 * `dir`, `path` and `ints`: 0, -errno for a name to refuse, or 1 when they
 * do not fit and `usage` was thrown as a TypeError.
 */
static int at_args(napi_env env, napi_callback_info info, size_t n, int32_t *dir, char *path, size_t size,
                   int32_t *ints, const char *usage) {
  size_t argc = 4;
  napi_value argv[4];
  bool bad = n > 2 || napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 2 + n ||
             napi_get_value_int32(env, argv[0], dir) != napi_ok;
  for (size_t i = 0; i < n && !bad; i++) bad = napi_get_value_int32(env, argv[2 + i], &ints[i]) != napi_ok;
  int err = bad ? 0 : name_arg(env, argv[1], path, size, &bad);
  if (bad) {
    napi_throw_type_error(env, NULL, usage);
    return 1;
  }
  return err;
}

/** `fd`, now held in the environment's set; or -ENOMEM, `fd` closed, when the set cannot grow. */
static napi_value held_fd(napi_env env, fd_set_t *set, int fd) {
  if (!hold(set, fd)) {
    close(fd);
    return int32(env, -ENOMEM);
  }
  return int32(env, fd);
}

static napi_value openat_js(napi_env env, napi_callback_info info) {
  int32_t dir = 0, ints[2] = {0, 0};
  char path[PATH_MAX];
  int err = at_args(env, info, 2, &dir, path, sizeof path, ints,
                    "openat(dir: int, name: string | Buffer, flags: int, mode: int)");
  if (err == 1) return NULL;
  if (err != 0) return int32(env, err);
  fd_set_t *set = fds(env);
  if (set == NULL) return int32(env, -ENOMEM);
  int fd = openat(dir, path, ints[0] | O_CLOEXEC, (mode_t)ints[1]);
  return fd < 0 ? int32(env, -errno) : held_fd(env, set, fd);
}

static napi_value create_js(napi_env env, napi_callback_info info) {
  int32_t dir = 0, mode = 0;
  char path[PATH_MAX];
  int err = at_args(env, info, 1, &dir, path, sizeof path, &mode, "create(dir: int, name: string | Buffer, mode: int)");
  if (err == 1) return NULL;
  if (err != 0) return int32(env, err);
  fd_set_t *set = fds(env);
  if (set == NULL) return int32(env, -ENOMEM);
  int fd = openat(dir, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)(mode & 0600));
  if (fd < 0) return int32(env, -errno);
  if (fchmod(fd, (mode_t)(mode & 0777)) != 0) {
    err = -errno;
    close(fd);
    return int32(env, err);
  }
  return held_fd(env, set, fd);
}

static napi_value seal_js(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t fd = -1;
  int64_t sec = 0;
  bool lossless = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 2 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      napi_get_value_bigint_int64(env, argv[1], &sec, &lossless) != napi_ok) {
    napi_throw_type_error(env, NULL, "seal(fd: int, mtimeSec: bigint)");
    return NULL;
  }
  fd_set_t *set = fds(env);
  if (set == NULL || fd < 0 || !is_held(set, fd)) return int32(env, -EBADF);
  // Clamped at the epoch, as the Rust shim does (time_t is 64 bits on the
  // 64-bit Linux targets the package builds for).
  struct timespec times[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT},
                              {.tv_sec = (time_t)(sec < 0 ? 0 : sec), .tv_nsec = 0}};
  int err = !lossless ? -EOVERFLOW : futimens(fd, times) == 0 ? 0 : -errno;
  release(set, fd);
  if (close(fd) != 0 && err == 0) err = -errno;
  return int32(env, err);
}

/** Reads `value` as a BigInt that fits a uint64_t; false when it is not one. */
static bool u64_arg(napi_env env, napi_value value, uint64_t *out) {
  bool lossless = false;
  return napi_get_value_bigint_uint64(env, value, out, &lossless) == napi_ok && lossless;
}

static napi_value same_js(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value argv[6];
  int32_t fd = -1;
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t sec = 0;
  uint32_t nsec = 0;
  bool lossless = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 6 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok || !u64_arg(env, argv[1], &dev) ||
      !u64_arg(env, argv[2], &ino) || !u64_arg(env, argv[3], &size) ||
      napi_get_value_bigint_int64(env, argv[4], &sec, &lossless) != napi_ok || !lossless ||
      napi_get_value_uint32(env, argv[5], &nsec) != napi_ok) {
    napi_throw_type_error(env, NULL, "same(fd: int, dev, ino, size, mtimeSec: bigint, mtimeNsec: int)");
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return int32(env, -errno);
  return int32(env, (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino && S_ISREG(st.st_mode) &&
                        (uint64_t)st.st_size == size && (int64_t)st.st_mtim.tv_sec == sec &&
                        (uint32_t)st.st_mtim.tv_nsec == nsec);
}

static napi_value close_js(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok) {
    napi_throw_type_error(env, NULL, "close(fd: int)");
    return NULL;
  }
  fd_set_t *set = fds(env);
  if (set == NULL || fd < 0 || !is_held(set, fd)) return int32(env, 1);
  release(set, fd);
  // Linux releases the fd even when close fails (EINTR, EIO): never retried.
  return int32(env, close(fd) == 0 ? 0 : -errno);
}

static napi_value trylock_js(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) {
    napi_throw_type_error(env, NULL, "trylock(fd: int)");
    return NULL;
  }
  return int32(env, flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : -errno);
}

static napi_value held_js(napi_env env, napi_callback_info info) {
  (void)info;
  fd_set_t *set = fds(env);
  return int32(env, set == NULL ? 0 : (int32_t)set->held);
}

static bool export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn = NULL;
  return napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn) == napi_ok &&
         napi_set_named_property(env, exports, name, fn) == napi_ok;
}

NAPI_MODULE_INIT() {
  fd_set_t *set = calloc(1, sizeof *set);
  if (set == NULL || napi_set_instance_data(env, set, cleanup, NULL) != napi_ok) {
    free(set);
    napi_throw_error(env, NULL, "sandbox-sync at.node: out of memory");
    return NULL;
  }
  if (!export_fn(env, exports, "openat", openat_js) || !export_fn(env, exports, "close", close_js) ||
      !export_fn(env, exports, "held", held_js) ||
      !export_fn(env, exports, "create", create_js) || !export_fn(env, exports, "seal", seal_js) ||
      !export_fn(env, exports, "same", same_js) || !export_fn(env, exports, "trylock", trylock_js)) {
    return NULL;
  }
  return exports;
}
