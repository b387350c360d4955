#!/bin/sh
# Device check: warm interpreters (--preload torch) and checkpoints in
# memory with CUDA tensors, through a killed rank. The binary travels
# compressed (the run tool carries 64 MiB): go build -trimpath -ldflags
# "-s -w" -o bin/gpu/coordinator ./cmd/coordinator, copy
# bin/coordinator-sidecar next to it, gzip the first, carry bin/gpu.
set -u
cat > /tmp/cudatrain.py <<'PY'
import os, time, torch, elastic
rank = int(os.environ["RANK"]); dev = torch.device("cuda", 0)
torch.distributed.init_process_group("gloo")
model = torch.nn.Linear(256, 256).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
st = elastic.load("/tmp/cuda-ckpt.bin"); start = 0
if st is not None:
    model.load_state_dict(st["model"]); start = st["step"] + 1
print(f"rank {rank} gen {os.environ['ELASTIC_GENERATION']} resumes at {start}, param device {next(model.parameters()).device}", flush=True)
for step in range(start, start + 10**6):
    loss = model(torch.randn(64, 256, device=dev)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    if rank == 0:
        elastic.save({"model": model.state_dict(), "step": step}, "/tmp/cuda-ckpt.bin")
    if step % 200 == 0:
        print(f"rank {rank} step {step}", flush=True)
    if int(os.environ["ELASTIC_GENERATION"]) >= 2 and step > start + 300:
        break
    time.sleep(0.002)
PY
bin/gpu/coordinator run --np 2 --preload torch -- python3 /tmp/cudatrain.py > /tmp/cw.log 2>&1 &
sleep 25
# The trainers are the processes whose command line starts with python3,
# not the sidecars, whose command lines name the script too.
pid=$(pgrep -f "^python3 /tmp/cudatrain.py" | tail -1)
echo "killing trainer $pid"; kill -9 "$pid"
sleep 20
grep -E "resumes|generation|failed|Error|error" /tmp/cw.log | head -20
pkill -f "coordinator run" ; sleep 2; tail -3 /tmp/cw.log
