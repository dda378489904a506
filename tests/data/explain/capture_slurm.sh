#!/bin/sh
# Capture what a real Slurm prints when a job's /dev/shm outgrows its --mem (issue 32 item 4), for
# `shmguard explain`: a one-node Slurm (Debian's slurmctld, slurmd and munge, cgroup v1, as
# docs/design/slurm.md describes) started here on private ports and paths, one sbatch --mem=256M job that
# writes 400 MB into /dev/shm (slurm-shm-oom/job.sh), then the job's output and `scontrol show job`. Everything it starts is
# stopped on exit, pass or fail.
#
#     sh tests/data/explain/capture_slurm.sh        # as root; writes tests/data/explain/slurm-shm-oom/
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$HERE/slurm-shm-oom
S=$(mktemp -d /var/tmp/shmguard-explain-slurm.XXXXXX)
mkdir -p "$S/etc" "$S/state" "$S/spool" "$S/run" "$S/log" "$S/jobs"
NODE=$(slurmd -C | head -1)
stop() {
    for file in "$S/run/slurmd.pid" "$S/run/slurmctld.pid" "$S/run/munged.pid"; do
        [ -f "$file" ] || continue
        pid=$(cat "$file")
        kill -TERM "$pid" 2>/dev/null || continue
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 30 ]; do i=$((i + 1)); sleep 0.5; done
    done
    rm -rf "$S"
}
trap stop EXIT INT TERM
cat > "$S/etc/slurm.conf" <<CONF
ClusterName=shmguardexplain
SlurmctldHost=$(hostname -s)
SlurmctldPort=16917
SlurmdPort=16918
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$S/run/munge.sock
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
KillWait=5
MailProg=/bin/true
${NODE%% RealMemory=*} RealMemory=4096 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
sed -i "s/^NodeName=[^ ]*/NodeName=$(hostname -s)/" "$S/etc/slurm.conf"
printf 'CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\nConstrainSwapSpace=no\nConstrainCores=yes\n' > "$S/etc/cgroup.conf"
runuser -u munge -- /usr/sbin/munged --socket="$S/run/munge.sock" --pid-file="$S/run/munged.pid" \
    --log-file="$S/log/munged.log" --seed-file="$S/run/munged.seed" 2>/dev/null || \
    /usr/sbin/munged --force --socket="$S/run/munge.sock" --pid-file="$S/run/munged.pid" \
    --log-file="$S/log/munged.log" --seed-file="$S/run/munged.seed"
export SLURM_CONF="$S/etc/slurm.conf"
slurmctld -c -i -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
i=0
until sinfo -h -N -o %t 2>/dev/null | grep -q idle; do i=$((i + 1)); [ $i -lt 120 ] || exit 1; sleep 0.5; done
cp "$OUT/job.sh" "$S/jobs/fill-shm.sh"  # the job: 400 MB into /dev/shm under --mem=256M
cd "$S/jobs"
JOB=$(sbatch --parsable -o "$S/jobs/slurm-%j.out" fill-shm.sh)
i=0
while [ -z "$(scontrol show job "$JOB" 2>/dev/null | grep -E 'JobState=(OUT_OF_MEMORY|COMPLETED|FAILED|CANCELLED)')" ]; do
    i=$((i + 1)); [ $i -lt 240 ] || { scancel "$JOB"; exit 1; }; sleep 0.5
done
rm -f /dev/shm/fill-"$JOB"
cp "$S/jobs/slurm-$JOB.out" "$OUT/slurm.out"
scontrol show job "$JOB" | grep -E 'JobState|ExitCode|MinMemory|TRES' > "$OUT/scontrol.txt"
echo "captured job $JOB into $OUT"
