#!/usr/bin/python3
"""kill_mid_write.py DIR PID [SECONDS]: SIGKILLs process PID while one of its snapshot writes into DIR is unfinished.

A snapshot is written to a temporary file (".snapshot-*.tmp-*") and renamed: polling for that file misses a write
that lasts a millisecond on a loaded machine. Instead inotify reports each temporary file's creation; the writer is
then frozen (SIGSTOP, and every thread seen stopped), and if its temporary file is still there it is killed with
the write unfinished; else it is let go on (SIGCONT) until its next write. Prints the torn file's name; exits 1
when no write was caught within SECONDS (60).
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


def freeze(pid):
    os.kill(pid, signal.SIGSTOP)
    while not stopped(pid):
        time.sleep(0.0005)


def main():
    directory, pid = sys.argv[1], int(sys.argv[2])
    deadline = time.monotonic() + (float(sys.argv[3]) if len(sys.argv) > 3 else 60.0)
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, directory.encode(), IN_CREATE) < 0:
        sys.exit(f"kill_mid_write: cannot watch {directory}: {os.strerror(ctypes.get_errno())}")
    while time.monotonic() < deadline:
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
            freeze(pid)
            if os.path.exists(os.path.join(directory, name)):
                os.kill(pid, signal.SIGKILL)
                print(name)
                return
            os.kill(pid, signal.SIGCONT)
    sys.exit(f"kill_mid_write: no unfinished snapshot write into {directory} by process {pid} was caught")


if __name__ == "__main__":
    main()
