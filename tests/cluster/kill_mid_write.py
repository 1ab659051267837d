#!/usr/bin/python3
"""kill_mid_write.py DIR SECONDS PID...: SIGKILLs whichever of the PIDs writes a snapshot into DIR, mid-write.

A snapshot is written to a temporary file (".snapshot-*.tmp-*") and renamed: polling for that file misses a write
that lasts a millisecond on a loaded machine. Instead inotify reports each temporary file's creation; the PIDs are
then frozen (SIGSTOP, and every thread seen stopped). If the temporary file is still there and one of them holds it
open, that writer is killed with the write unfinished and the others go on (SIGCONT); else all go on until the next
write. Which rank writes is not known beforehand: after a recovery the rank with the newest state leads. Prints
"FILE PID STEP TASK NODE" (the torn file; the writer's pid, SLURM_STEP_ID, SLURM_PROCID, SLURMD_NODENAME); exits 1
when no write was caught within SECONDS.
"""
import ctypes
import ctypes.util
import os
import select
import signal
import struct
import sys
import time

IN_CREATE = 0x100
EVENT_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name


def is_temporary_snapshot(name):
    return name.startswith(".snapshot-") and ".tmp-" in name


def stopped(pid):
    """Whether every thread of PID is in the stopped state (a signal's stop is not immediate)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue  # the thread ended
        if state not in ("T", "t"):
            return False
    return True


def signal_all(pids, number):
    for pid in list(pids):
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            pids.discard(pid)


def freeze(pids):
    signal_all(pids, signal.SIGSTOP)
    for pid in list(pids):
        try:
            while not stopped(pid):
                time.sleep(0.0005)
        except FileNotFoundError:
            pids.discard(pid)


def holds_open(pid, path):
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                    return True
            except OSError:
                continue
    except OSError:
        pass
    return False


def describe(pid):
    with open(f"/proc/{pid}/environ", "rb") as environ:
        env = dict(item.split(b"=", 1) for item in environ.read().split(b"\0") if b"=" in item)
    return " ".join(env.get(name, b"-").decode() for name in (b"SLURM_STEP_ID", b"SLURM_PROCID", b"SLURMD_NODENAME"))


def main():
    directory, seconds, pids = sys.argv[1], float(sys.argv[2]), {int(pid) for pid in sys.argv[3:]}
    deadline = time.monotonic() + seconds
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, directory.encode(), IN_CREATE) < 0:
        sys.exit(f"kill_mid_write: cannot watch {directory}: {os.strerror(ctypes.get_errno())}")
    while time.monotonic() < deadline and pids:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            break
        events, offset = os.read(fd, 65536), 0
        while offset < len(events):
            _, _, _, length = EVENT_HEADER.unpack_from(events, offset)
            start = offset + EVENT_HEADER.size
            name = events[start:start + length].rstrip(b"\0").decode()
            offset = start + length
            if not is_temporary_snapshot(name):
                continue
            path = os.path.realpath(os.path.join(directory, name))
            freeze(pids)
            writer = next((pid for pid in pids if holds_open(pid, path)), None) if os.path.exists(path) else None
            if writer is not None:
                who = describe(writer)
                os.kill(writer, signal.SIGKILL)
                pids.discard(writer)
                signal_all(pids, signal.SIGCONT)
                print(name, writer, who)
                return
            signal_all(pids, signal.SIGCONT)
    sys.exit(f"kill_mid_write: no unfinished snapshot write into {directory} by processes {sorted(pids)} was caught")


if __name__ == "__main__":
    main()
