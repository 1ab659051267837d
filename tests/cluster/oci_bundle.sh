#!/usr/bin/env bash
# oci_bundle.sh CONF_DIR BUNDLE SHARED USER: Slurm's OCI containers on the test cluster, for srun --container.
# Writes CONF_DIR/oci.conf (beside slurm.conf; slurmstepd reads it at every --container step) running runc as
# Slurm's containers.shtml shows it for rootless runs, and BUNDLE/config.json for the root file system
# BUNDLE/rootfs (cluster.sh's image, read-only): the node's network and host name (no network or UTS namespace),
# USER as the container's root (runc asks for a mapping of uid 0), /run and /tmp of its own (Slurm binds its spool
# directory below /var/run) and SHARED bound at its own path. Makes /run/user/UID, runc's state directory. Root
# only; the caller removes oci.conf, /run/user/UID and BUNDLE/config.json when done.
# runc, not crun: crun (1.21) refuses these nodes' hybrid cgroup layout (v1 controllers beside a v2 hierarchy with
# controllers: "cgroups in hybrid mode not supported"), also with --cgroup-manager=disabled; rootless runc leaves
# cgroups alone.
set -euo pipefail
conf_dir=$1 bundle=$2 shared=$3 user=$4
uid=$(id -u "$user")
gid=$(id -g "$user")
# The state directory by number: Slurm 22.05's patterns have no %U (its slurmstepd dies on it).
runc="runc --rootless=true --root=/run/user/$uid/"
# Only the keys and patterns Slurm 22.05 knows (EnvExclude and RunTimeEnvExclude came in 23.02: 22.05's slurmstepd
# refuses the whole file, and every task's launch fails).
cat >"$conf_dir/oci.conf" <<CONF
RunTimeQuery="$runc state %n.%u.%j.%s.%t"
RunTimeKill="$runc kill -a %n.%u.%j.%s.%t"
RunTimeDelete="$runc delete --force %n.%u.%j.%s.%t"
RunTimeRun="$runc run %n.%u.%j.%s.%t -b %b"
CONF
chmod 0644 "$conf_dir/oci.conf"
install -d -o "$uid" -g "$gid" -m 0700 "/run/user/$uid"
[ -d "$bundle/rootfs" ] || { echo "oci_bundle.sh: no root file system $bundle/rootfs" >&2; exit 1; }
cat >"$bundle/config.json" <<JSON
{
  "ociVersion": "1.0.0",
  "process": {"terminal": false, "user": {"uid": 0, "gid": 0}, "args": ["true"], "cwd": "/",
              "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "noNewPrivileges": true},
  "root": {"path": "rootfs", "readonly": true},
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "bind", "source": "/dev", "options": ["rbind", "nosuid"]},
    {"destination": "/sys", "type": "bind", "source": "/sys", "options": ["rbind", "nosuid"]},
    {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=755"]},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
    {"destination": "$shared", "type": "bind", "source": "$shared", "options": ["rbind"]},
    {"destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts", "options": ["bind"]}
  ],
  "linux": {
    "namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "user"}],
    "uidMappings": [{"containerID": 0, "hostID": $uid, "size": 1}],
    "gidMappings": [{"containerID": 0, "hostID": $gid, "size": 1}]
  }
}
JSON
