#!/usr/bin/env bash
# oci_bundle.sh CONF_DIR BUNDLE IMAGE SHARED USER: Slurm's OCI containers on the test cluster, for srun --container.
# Writes CONF_DIR/oci.conf (beside slurm.conf; slurmstepd reads it at every --container step) running crun as
# Slurm's containers.shtml shows it for rootless runs, plus --cgroup-manager=disabled (the test nodes have no cgroups
# of their own), and BUNDLE/config.json, a bundle whose root is IMAGE (read-only) with the node's network and host
# name (no network or UTS namespace), USER as itself inside, /run and /tmp of its own (Slurm binds its spool
# directory below /var/run) and SHARED bound at its own path. Makes /run/user/UID, crun's state directory. Root only;
# the caller removes oci.conf, /run/user/UID and BUNDLE when done.
set -euo pipefail
conf_dir=$1 bundle=$2 image=$3 shared=$4 user=$5
uid=$(id -u "$user")
gid=$(id -g "$user")
crun="crun --rootless=true --cgroup-manager=disabled --root=/run/user/%U/"
cat >"$conf_dir/oci.conf" <<CONF
EnvExclude="^(SLURM_CONF|SLURM_CONF_SERVER)="
RunTimeEnvExclude="^(SLURM_CONF|SLURM_CONF_SERVER)="
RunTimeQuery="$crun state %n.%u.%j.%s.%t"
RunTimeKill="$crun kill -a %n.%u.%j.%s.%t"
RunTimeDelete="$crun delete --force %n.%u.%j.%s.%t"
RunTimeRun="$crun run --bundle %b %n.%u.%j.%s.%t"
CONF
chmod 0644 "$conf_dir/oci.conf"
install -d -o "$uid" -g "$gid" -m 0700 "/run/user/$uid"
install -d -o "$uid" -g "$gid" "$bundle"
cat >"$bundle/config.json" <<JSON
{
  "ociVersion": "1.0.0",
  "process": {"terminal": false, "user": {"uid": $uid, "gid": $gid}, "args": ["true"], "cwd": "/",
              "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "noNewPrivileges": true},
  "root": {"path": "$image", "readonly": true},
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
    "uidMappings": [{"containerID": $uid, "hostID": $uid, "size": 1}],
    "gidMappings": [{"containerID": $gid, "hostID": $gid, "size": 1}]
  }
}
JSON
