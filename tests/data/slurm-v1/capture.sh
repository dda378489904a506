#!/bin/bash
# Run as `source capture.sh; capture DIR` in the batch script, and in each srun task, of a Slurm job.
capture() {
  d=$1; mkdir -p $d/proc/self $d/proc $d/sys/devices/system/cpu
  grep -E " - (cgroup|cgroup2|tmpfs) " /proc/self/mountinfo | grep -E "/dev/shm|/sys/fs/cgroup" > $d/proc/self/mountinfo
  cat /proc/self/cgroup > $d/proc/self/cgroup
  grep -E "^(Name|Pid|Cpus_allowed_list|Mems_allowed_list):" /proc/self/status > $d/proc/self/status
  cat /proc/self/limits > $d/proc/self/limits
  grep MemTotal /proc/meminfo > $d/proc/meminfo
  cat /sys/devices/system/cpu/online > $d/sys/devices/system/cpu/online
  for c in memory cpu; do
    rel=$(grep -E ":$c[,:]|,$c:" /proc/self/cgroup | head -1 | cut -d: -f3)
    p=$rel
    while :; do
      mkdir -p $d/sys/fs/cgroup/$c$p
      for f in memory.limit_in_bytes memory.usage_in_bytes cpu.cfs_quota_us cpu.cfs_period_us; do
        [ -r /sys/fs/cgroup/$c$p/$f ] && cat /sys/fs/cgroup/$c$p/$f > $d/sys/fs/cgroup/$c$p/$f
      done
      [ -r /sys/fs/cgroup/$c$p/memory.stat ] && grep -E "^(total_)?inactive_file " /sys/fs/cgroup/$c$p/memory.stat > $d/sys/fs/cgroup/$c$p/memory.stat
      [ "$p" = "/" ] || [ -z "$p" ] && break
      p=$(dirname $p)
    done
  done
  env | grep -E "^SLURM_(JOB_ID|STEP_ID|NODEID|NTASKS|TASKS_PER_NODE|STEP_TASKS_PER_NODE|NTASKS_PER_NODE|CPUS_ON_NODE|CPUS_PER_TASK|MEM_PER_NODE|MEM_PER_CPU|JOB_UID|LOCALID|PROCID)=" | sort > $d/environ
}
