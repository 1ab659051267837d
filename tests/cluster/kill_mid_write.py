#!/usr/bin/python3
"""kill_mid_write.py [--from-epoch N] DIR SECONDS PID...: SIGKILLs whichever of the PIDs starts writing a snapshot
into DIR (with --from-epoch, a snapshot of N or more epochs run: the earlier writes are let be).

A snapshot is written to a temporary file (".snapshot-*.tmp-*") and renamed. Watching for that file after the fact
(polling, or inotify) races a write that lasts a millisecond on a loaded machine. Instead fanotify's permission
events hold every open in DIR until this script answers: the open of a temporary snapshot by one of the PIDs is
answered only after the writer was sent SIGKILL, so it dies with the file created and nothing of the snapshot
written, whoever it is and however loaded the machine. Every other open is allowed at once. Which rank writes is
not known beforehand: after a recovery the rank with the newest state leads. Prints "FILE PID STEP TASK NODE" (the
unfinished file; the writer's pid, SLURM_STEP_ID, SLURM_PROCID, SLURMD_NODENAME); exits 1 when no write began
within SECONDS. Needs root (CAP_SYS_ADMIN) and a kernel with fanotify's permission events.
"""
import ctypes
import ctypes.util
import os
import re
import select
import signal
import struct
import sys
import time

FAN_CLOEXEC = 0x01
FAN_CLASS_CONTENT = 0x04
FAN_MARK_ADD = 0x01
FAN_OPEN_PERM = 0x00010000
FAN_EVENT_ON_CHILD = 0x08000000
FAN_ALLOW = 0x01
AT_FDCWD = -100
# struct fanotify_event_metadata: event_len, vers, reserved, metadata_len, mask, fd, pid
EVENT = struct.Struct("=IBBHQii")
RESPONSE = struct.Struct("=iI")  # struct fanotify_response: fd, response


def temporary_snapshot_epochs(name):
    """The epochs run of a temporary snapshot's name (".snapshot-e000003-s...tmp-..."); None for any other name."""
    match = re.match(r"\.snapshot-e(\d+)-.*\.tmp-", name)
    return int(match.group(1)) if match else None


def describe(pid):
    with open(f"/proc/{pid}/environ", "rb") as environ:
        env = dict(item.split(b"=", 1) for item in environ.read().split(b"\0") if b"=" in item)
    return " ".join(env.get(name, b"-").decode() for name in (b"SLURM_STEP_ID", b"SLURM_PROCID", b"SLURMD_NODENAME"))


def watch(directory):
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
    fd = libc.fanotify_init(FAN_CLOEXEC | FAN_CLASS_CONTENT, os.O_RDONLY | os.O_LARGEFILE)
    if fd < 0 or libc.fanotify_mark(fd, FAN_MARK_ADD, FAN_OPEN_PERM | FAN_EVENT_ON_CHILD, AT_FDCWD,
                                    directory.encode()) < 0:
        sys.exit(f"kill_mid_write: cannot watch the opens in {directory} with fanotify: "
                 f"{os.strerror(ctypes.get_errno())}")
    return fd


def main():
    args, from_epoch = sys.argv[1:], 0
    if args[:1] == ["--from-epoch"]:
        from_epoch, args = int(args[1]), args[2:]
    directory, seconds, pids = args[0], float(args[1]), {int(pid) for pid in args[2:]}
    deadline = time.monotonic() + seconds
    fd = watch(directory)
    caught = None
    while caught is None and time.monotonic() < deadline:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            break
        events, offset = os.read(fd, 65536), 0
        while offset < len(events):
            length, _, _, _, _, event_fd, pid = EVENT.unpack_from(events, offset)
            offset += length
            if event_fd < 0:
                continue  # the queue overflowed: nothing to answer
            path = os.readlink(f"/proc/self/fd/{event_fd}")
            epochs = temporary_snapshot_epochs(os.path.basename(path))
            if caught is None and pid in pids and epochs is not None and epochs >= from_epoch:
                who = describe(pid)
                os.kill(pid, signal.SIGKILL)  # delivered before its open returns
                caught = f"{os.path.basename(path)} {pid} {who}"
            os.write(fd, RESPONSE.pack(event_fd, FAN_ALLOW))
            os.close(event_fd)
    os.close(fd)  # opens still held are allowed
    if caught is None:
        sys.exit(f"kill_mid_write: no process of {sorted(pids)} began a snapshot write of {from_epoch} or more "
                 f"epochs into {directory} within {seconds:g} s")
    print(caught)


if __name__ == "__main__":
    main()
