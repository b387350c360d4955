#!/usr/bin/env bash
# The chaos suite's training process. It resumes from the job's checkpoint,
# counts steps, and logs to CHAOS_LOG, one line per event:
#   KIND GEN ROLE RANK PID TIME_US STEP WORLD_SIZE NODE
# KIND is start (STEP is the step resumed from), alive (every CHAOS_BEAT
# seconds, one step each), commit (rank 0 committed STEP to the checkpoint
# through the sidecar's guard, every CHAOS_CKPT_EVERY steps) or term
# (SIGTERM received). While the file CHAOS_SLOW_DIR/NODE exists, a SIGTERM
# is answered only after the seconds it holds, as a trainer saving a large
# checkpoint is.
set -u
beat=${CHAOS_BEAT:-0.05}
every=${CHAOS_CKPT_EVERY:-20}
node=${CHAOS_NODE:-?}
gen=$ELASTIC_GENERATION
role=${ELASTIC_ROLE:-worker}
now() { echo "${EPOCHREALTIME/./}"; }
step=0
if [ -f "$CHAOS_CKPT" ]; then
	read -r _ step <"$CHAOS_CKPT" || step=0
fi
log() { echo "$1 $gen $role $RANK $BASHPID $(now) $step $WORLD_SIZE $node" >>"$CHAOS_LOG"; }
log start

term_at=""
delay_us=0
on_term() {
	term_at=$(now)
	if [ -f "$CHAOS_SLOW_DIR/$node" ]; then
		delay_us=$(awk -v d="$(cat "$CHAOS_SLOW_DIR/$node")" 'BEGIN { printf "%d", d * 1000000 }')
	fi
	log term
}
trap on_term TERM
while :; do
	if [ -n "$term_at" ] && [ $(($(now) - term_at)) -ge "$delay_us" ]; then
		exit 143
	fi
	step=$((step + 1))
	log alive
	if [ "$RANK" = 0 ] && [ $((step % every)) = 0 ]; then
		echo "$gen $step" >"$CHAOS_CKPT.$BASHPID"
		commit=(mv) # without a sidecar's guard: a plain rename
		if [ -n "${ELASTIC_COORDINATOR:-}" ]; then
			commit=("$ELASTIC_COORDINATOR" commit)
		fi
		if "${commit[@]}" "$CHAOS_CKPT.$BASHPID" "$CHAOS_CKPT" 2>/dev/null; then
			log commit
		else
			rm -f "$CHAOS_CKPT.$BASHPID"
		fi
	fi
	sleep "$beat" &
	wait $! 2>/dev/null
done
