#!/bin/sh
# Device check: does --devices auto find this machine's GPUs, and does each
# process get its own device under run, paddle and mindspore contracts?
# Built and carried as hack/device/cudawarm.sh says.
set -u
ls /dev/nvidia* 2>&1 | head; nvidia-smi -L 2>&1 | head -3
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
T='echo "node=$ELASTIC_NODE_RANK rank=$ELASTIC_RANK CVD=${CUDA_VISIBLE_DEVICES-unset} FSG=${FLAGS_selected_gpus-unset} DEV=${DEVICE_ID-unset} BK=${PADDLE_DISTRI_BACKEND-unset} LR=$ELASTIC_LOCAL_RANK"'
echo "== run --np 1 --nproc-per-node 2 --framework paddle (auto devices)"
timeout 60 bin/gpu/coordinator run --np 1 --nproc-per-node 2 --framework paddle -- /bin/sh -c "$T" 2>&1 | grep -v "^coordinator run: \(etcd\|resize\|waiting\)"
echo "== run --np 2 --framework mindspore"
timeout 60 bin/gpu/coordinator run --np 2 --framework mindspore -- /bin/sh -c "$T" 2>&1 | grep -v "^coordinator run: \(etcd\|resize\|waiting\)"
echo "== sidecar env detection, python3 with torch?"
for py in /usr/bin/python3 python3; do $py -c "import torch,os; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count())" 2>&1 | tail -1; done
echo "== CUDA in each process under run --np 2 (torch, if it has CUDA)"
timeout 120 bin/gpu/coordinator run --np 2 -- python3 -c "import os,torch; print('rank', os.environ['RANK'], 'CVD', os.environ.get('CUDA_VISIBLE_DEVICES'), 'devices', torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-')" 2>&1 | grep -v "^coordinator run: \(etcd\|resize\|waiting\)" | tail -6
