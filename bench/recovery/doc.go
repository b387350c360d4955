// Command recovery measures what a fault costs a real training job: a
// PyTorch DDP trainer (trainer.py: gloo on the CPU, a 334k-parameter MLP
// with Adam, 20 ms steps) on `coordinator run` with 2 and 4 ranks, and under
// torchrun in the same run. The faults are a killed rank, a killed node (its
// sidecar, guard and trainers at once; torchrun's agent and its worker), a
// killed guard (alone; its trainer dies with it: `coordinator run` only),
// and `coordinator scale` up and down by one. Every figure comes from the
// trainers' own step logs, so it ends where a user's wait ends: every rank
// of the next generation has taken a training step.
//
// Modes choose how the job is run: cold (no preload, a checkpoint on disk
// every 50 steps), warm (--preload torch, a checkpoint in memory every
// step), preload and memory, each of the two alone, and spare (warm with
// --spares 1: a node that waits, warm, with no rank, to take a lost node's
// place). A mode whose features this build lacks (no --preload or --spares
// on run, no elastic module on the trainer's path) is reported as not
// available, so the harness runs on any build and measures the rest.
//
//	go run ./bench/recovery -coordinator bin/coordinator -np 2,4 -runs 5 -out bench/results/recovery.txt
//
// With -torchft, torchft (PyTorch's fault-tolerance library) runs the same
// model, data and step padding (torchft_trainer.py: torchft's DDP, a
// lighthouse and one process a replica group) beside the modes, a killed
// replica started again at once; its rows are those of the alone mode: the
// survivors training on in a smaller quorum, then grown back.
//
//	go run ./bench/recovery -python bin/venv/bin/python -np 2 -modes alone,inplace -torchft -torchrun=false -scenarios kill-rank -state-scenarios '' -alone-scenarios ''
//
// The hang suite (-suite hang, `make bench-hang`) measures hang detection
// on the same job, a plain script with --preload torch: rank 1's trainer
// stopped (SIGSTOP) or deadlocked (asleep in wait_forever_in_data_loader,
// alive), each fault in a job of its own, until every rank trains again
// or a limit passes, and whether every rank's stack reached its log; then
// fault-free runs whose ranks all pause every 150 steps, counting the hang
// restarts they cost.
//
//	go run ./bench/recovery -suite hang -coordinator bin/coordinator -np 2 -runs 5 -out bench/results/hang.txt
package main
