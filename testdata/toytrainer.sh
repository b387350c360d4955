#!/usr/bin/env bash
# A toy trainer for `coordinator run`: it "trains" by counting steps, saves
# its step after each one in a checkpoint per rank, and resumes from that
# checkpoint when it is restarted, as real training code does. Each step is
# reported to the node's hang watch (`coordinator beat`).
#
# A checkpoint ("STEP GENERATION") is written to a temporary file and
# committed with `coordinator commit`, which renames it only while this
# process's generation is current and its node holds its lease: a trainer
# whose node was frozen or cut off and fenced out can never write an older
# checkpoint over the next generation's.
#
#   TOY_STEPS     steps to train (default 20)
#   TOY_INTERVAL  seconds per step (default 0.5)
#   TOY_DIR       where checkpoints and the start log go
#                 (default ${TMPDIR:-/tmp}/toytrainer-$ELASTIC_JOB_ID)
#   TOY_FAIL_AT   if set, rank 0 exits with code 3 when it reaches this step
#   TOY_STOP_SECONDS  how long it takes to stop on SIGTERM, as a trainer
#                 that saves a checkpoint first does (default 0)
set -u
# torchrun's names, or the project's own where the job's framework gives
# no torchrun variables (--framework paddle or mindspore).
RANK=${RANK:-${ELASTIC_RANK:-0}}
WORLD_SIZE=${WORLD_SIZE:-${ELASTIC_WORLD_SIZE:-1}}
MASTER_ADDR=${MASTER_ADDR:-none} MASTER_PORT=${MASTER_PORT:-none}
steps=${TOY_STEPS:-20}
interval=${TOY_INTERVAL:-0.5}
dir=${TOY_DIR:-${TMPDIR:-/tmp}/toytrainer-${ELASTIC_JOB_ID:-job}}
mkdir -p "$dir"
ckpt="$dir/rank-$RANK.step"

step=0
if [ -f "$ckpt" ]; then
	read -r step _ <"$ckpt"
fi

# save commits the step; ELASTIC_COORDINATOR is set by the sidecar.
save() {
	echo "$step ${ELASTIC_GENERATION:-0}" >"$ckpt.tmp.$$"
	if [ -n "${ELASTIC_COORDINATOR:-}" ]; then
		"$ELASTIC_COORDINATOR" commit "$ckpt.tmp.$$" "$ckpt" || {
			rm -f "$ckpt.tmp.$$"
			echo "rank $RANK: checkpoint of step $step refused; this generation is over" >&2
			exit 1
		}
	else
		mv "$ckpt.tmp.$$" "$ckpt"
	fi
}
echo "gen=$ELASTIC_GENERATION rank=$RANK world=$WORLD_SIZE step=$step pid=$$" >>"$dir/starts.log"
echo "rank $RANK of $WORLD_SIZE (generation $ELASTIC_GENERATION, master $MASTER_ADDR:$MASTER_PORT): resuming at step $step"

trap 'sleep "${TOY_STOP_SECONDS:-0}"; echo "rank $RANK: stopped at step $step"; exit 143' TERM INT
while [ "$step" -lt "$steps" ]; do
	sleep "$interval" &
	wait $!
	step=$((step + 1))
	save
	# The step, for the hang watch's messages and `status`'s slowest rank.
	[ -z "${ELASTIC_COORDINATOR:-}" ] || "$ELASTIC_COORDINATOR" beat --step "$step"
	echo "step $step"
	if [ -n "${TOY_FAIL_AT:-}" ] && [ "$RANK" = 0 ] && [ "$step" -eq "$TOY_FAIL_AT" ]; then
		echo "rank $RANK: failing at step $step" >&2
		exit 3
	fi
done
# Training is over: the next run of the job starts from scratch.
rm -f "$ckpt"
echo "rank $RANK: done"
