#!/usr/bin/env bash
# The chaos suite's training process. It resumes from the job's checkpoint,
# counts steps, and logs to CHAOS_LOG, one line per event:
#   KIND GEN ROLE RANK PID TIME_US STEP WORLD_SIZE NODE
# KIND is start (STEP is the step resumed from), alive (every CHAOS_BEAT
# seconds, one step each), commit (rank 0 committed STEP to the checkpoint
# through the sidecar's guard, every CHAOS_CKPT_EVERY steps), term
# (SIGTERM received) or hang (asleep: see below). While the file
# CHAOS_SLOW_DIR/NODE exists, a SIGTERM is answered only after the seconds
# it holds, as a trainer saving a large checkpoint is.
#
# Every CHAOS_BEAT_EVERY steps, and at its first, it reports its progress
# to the sidecar's hang watch (`$ELASTIC_COORDINATOR beat --step N`). While
# the file CHAOS_STRAGGLE_DIR/NODE exists, a step takes the seconds it holds
# instead of CHAOS_BEAT (a straggler). When the file CHAOS_DEADLOCK_DIR/NODE
# names its pid, it sleeps forever before its next step, alive (a
# deadlock), logging hang once a second until a signal ends it; only after
# its first step, which the hang timeout watches (before it, the start-up
# budget would).
set -u
beat=${CHAOS_BEAT:-0.05}
every=${CHAOS_CKPT_EVERY:-20}
beat_every=${CHAOS_BEAT_EVERY:-2}
deadlock=${CHAOS_DEADLOCK_DIR:-/nonexistent}/${CHAOS_NODE:-?}
straggle=${CHAOS_STRAGGLE_DIR:-/nonexistent}/${CHAOS_NODE:-?}
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
taken=0 # steps this process took
while :; do
	if [ -n "$term_at" ] && [ $(($(now) - term_at)) -ge "$delay_us" ]; then
		exit 143
	fi
	if [ "$taken" -gt 0 ] && [ -f "$deadlock" ]; then
		who=""
		read -r who <"$deadlock" # the value even without a newline
		if [ "$who" = "$BASHPID" ]; then
			# Once a second a sign of life that is not progress: one
			# that outlived its generation would be seen.
			while [ -z "$term_at" ]; do
				log hang
				sleep 1 &
				wait $! 2>/dev/null
			done
			exit 143
		fi
	fi
	step=$((step + 1))
	taken=$((taken + 1))
	log alive
	if [ -n "${ELASTIC_COORDINATOR:-}" ] && { [ "$taken" = 1 ] || [ $((step % beat_every)) = 0 ]; }; then
		"$ELASTIC_COORDINATOR" beat --step "$step"
	fi
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
	pause=$beat
	if [ -f "$straggle" ]; then
		read -r pause <"$straggle"
		[ -n "$pause" ] || pause=$beat
	fi
	sleep "$pause" &
	wait $! 2>/dev/null
done
