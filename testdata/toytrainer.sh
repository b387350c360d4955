#!/usr/bin/env bash
# A toy trainer for `coordinator run`: it "trains" by counting steps, saves
# its step after each one in a checkpoint per rank, and resumes from that
# checkpoint when it is restarted, as real training code does.
#
#   TOY_STEPS     steps to train (default 20)
#   TOY_INTERVAL  seconds per step (default 0.5)
#   TOY_DIR       where checkpoints and the start log go
#                 (default ${TMPDIR:-/tmp}/toytrainer-$ELASTIC_JOB_ID)
#   TOY_FAIL_AT   if set, rank 0 exits with code 3 when it reaches this step
set -u
steps=${TOY_STEPS:-20}
interval=${TOY_INTERVAL:-0.5}
dir=${TOY_DIR:-${TMPDIR:-/tmp}/toytrainer-${ELASTIC_JOB_ID:-job}}
mkdir -p "$dir"
ckpt="$dir/rank-$RANK.step"

step=0
if [ -f "$ckpt" ]; then
	step=$(cat "$ckpt")
fi
echo "gen=$ELASTIC_GENERATION rank=$RANK world=$WORLD_SIZE step=$step pid=$$" >>"$dir/starts.log"
echo "rank $RANK of $WORLD_SIZE (generation $ELASTIC_GENERATION, master $MASTER_ADDR:$MASTER_PORT): resuming at step $step"

trap 'echo "rank $RANK: stopped at step $step"; exit 143' TERM INT
while [ "$step" -lt "$steps" ]; do
	sleep "$interval" &
	wait $!
	step=$((step + 1))
	echo "$step" >"$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"
	echo "step $step"
	if [ -n "${TOY_FAIL_AT:-}" ] && [ "$RANK" = 0 ] && [ "$step" -eq "$TOY_FAIL_AT" ]; then
		echo "rank $RANK: failing at step $step" >&2
		exit 3
	fi
done
# Training is over: the next run of the job starts from scratch.
rm -f "$ckpt"
echo "rank $RANK: done"
