#!/usr/bin/env bash
# A trainer for fault tests. It logs to FT_LOG when it starts and, every
# FT_BEAT seconds, that it is alive, with its generation, rank, pid and the
# time in microseconds:
#   start GEN RANK PID TIME
#   alive GEN RANK PID TIME
#   term GEN RANK PID TIME    (SIGTERM received)
#   commit GEN RANK PID TIME  (a checkpoint committed)
#
#   FT_LOG         the log (required)
#   FT_BEAT        seconds between heartbeats (default 0.02)
#   FT_NESTED      1: the loop runs in a child process, as when `bash
#                  train.sh` runs python without exec; this script exits at
#                  once on SIGTERM and leaves its child to stop on its own
#   FT_SETSID      1: with FT_NESTED, the child runs in a session of its own
#   FT_CLEARENV    1: with FT_NESTED, the child starts with a cleared
#                  environment (env -i), as a daemon or a sandbox does
#   FT_TERM_DELAY  seconds the loop keeps going after SIGTERM (default 0),
#                  as a trainer saving a checkpoint does
#   FT_CKPT        if set, a checkpoint "GEN STEP" is committed there through
#                  the sidecar's guard at every heartbeat
# SIGUSR1 makes the loop exit 1, as a collective that lost a peer does.
set -u
beat=${FT_BEAT:-0.02}
now() { echo "${EPOCHREALTIME/./}"; }

if [ "${FT_NESTED:-}" = 1 ] && [ -z "${FT_CHILD:-}" ]; then
	if [ "${FT_CLEARENV:-}" = 1 ]; then
		env -i PATH="$PATH" FT_CHILD=1 FT_LOG="$FT_LOG" FT_BEAT="${FT_BEAT:-0.02}" \
			ELASTIC_GENERATION="$ELASTIC_GENERATION" RANK="$RANK" bash "$0" &
	elif [ "${FT_SETSID:-}" = 1 ]; then
		FT_CHILD=1 setsid bash "$0" &
	else
		FT_CHILD=1 bash "$0" &
	fi
	trap 'exit 143' TERM
	wait
	exit $?
fi

echo "start $ELASTIC_GENERATION $RANK $BASHPID $(now)" >>"$FT_LOG"
term_at=""
# The trap only sets a flag: bash can fail to parse a trap's command
# substitution when the signal lands inside one of the loop's ("unexpected
# EOF while looking for matching ')'"). The wait below returns at once on
# the signal, so the loop notes it without delay.
got_term=""
trap 'got_term=1' TERM
trap 'exit 1' USR1
step=0
while :; do
	if [ -n "$got_term" ] && [ -z "$term_at" ]; then
		term_at=$(now)
		echo "term $ELASTIC_GENERATION $RANK $BASHPID $term_at" >>"$FT_LOG"
	fi
	echo "alive $ELASTIC_GENERATION $RANK $BASHPID $(now)" >>"$FT_LOG"
	if [ -n "$term_at" ]; then
		delay_us=$(awk -v d="${FT_TERM_DELAY:-0}" 'BEGIN { printf "%d", d * 1000000 }')
		if [ $(($(now) - term_at)) -ge "$delay_us" ]; then
			exit 143
		fi
	fi
	step=$((step + 1))
	if [ -n "${FT_CKPT:-}" ]; then
		echo "$ELASTIC_GENERATION $step" >"$FT_CKPT.$BASHPID"
		commit=(mv) # outside a sidecar's guard: a plain rename
		if [ -n "${ELASTIC_COORDINATOR:-}" ]; then
			commit=("$ELASTIC_COORDINATOR" commit)
		fi
		if "${commit[@]}" "$FT_CKPT.$BASHPID" "$FT_CKPT" 2>/dev/null; then
			echo "commit $ELASTIC_GENERATION $RANK $BASHPID $(now)" >>"$FT_LOG"
		else
			rm -f "$FT_CKPT.$BASHPID"
		fi
	fi
	sleep "$beat" &
	wait $! 2>/dev/null
done
