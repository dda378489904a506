#!/bin/sh
#SBATCH --mem=256M
#SBATCH -c1
df -h /dev/shm
echo "writing 400 MB to /dev/shm/fill-$SLURM_JOB_ID"
python3 -c "
import os, sys
with open('/dev/shm/fill-' + os.environ['SLURM_JOB_ID'], 'wb') as f:
    for i in range(400):
        f.write(b'\1' * 2**20)
print('written')
"
rm -f "/dev/shm/fill-$SLURM_JOB_ID"
