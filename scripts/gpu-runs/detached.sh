#!/bin/bash
# A qualification longer than one device command (10 minutes), such as Wan2.2-TI2V-5B's full case
# on one GPU: one command starts it detached and returns; later commands on the same machine (the
# machine stays held while the next command follows within about 30 s) report its progress and,
# once it ended, leave the archive qualify.sh makes in $OUT.
#   bash scripts/gpu-runs/detached.sh start ROW BUILDER   # as qualify.sh's arguments; returns at once
#   bash scripts/gpu-runs/detached.sh status              # stage, Tasks, elapsed; the archive once ended
#   WAIT=540 bash scripts/gpu-runs/detached.sh status     # the same, once it ended or after WAIT s
# (the archive, and the parity-faults files faults-and-qualify.sh leaves beside it)
# The environment of `start` goes to qualify.sh (MEDIAQUAL_ENGINE, LIMIT, ...). DETACHED_DIR
# (default /tmp/detached) holds the run's state, log, report and output folder; QUALIFY (default
# scripts/gpu-runs/qualify.sh) is what runs. Exit status 2 says the request cannot be met: a run
# already going, or no run on this machine (a fresh machine has none).
set -u
dir=${DETACHED_DIR:-/tmp/detached}
machine() { cat /proc/sys/kernel/random/boot_id 2>/dev/null || hostname; }
running() { [ -f "$dir/pid" ] && [ ! -f "$dir/rc" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; }

case ${1:-} in
start)
	row=${2:?start needs ROW and BUILDER, as qualify.sh}
	builder=${3:?start needs ROW and BUILDER, as qualify.sh}
	if running; then
		echo "not started: a detached run is going already: $(cat "$dir/what"), pid $(cat "$dir/pid"), for $(($(date +%s) - $(cat "$dir/started"))) s; follow it with: $0 status"
		exit 2
	fi
	rm -rf "$dir" && mkdir -p "$dir/out" || exit 1
	echo "$row $builder" >"$dir/what"
	machine >"$dir/machine"
	date +%s >"$dir/started"
	# Its own session: the run outlives this command (the device ends a command's other processes).
	OUT=$dir/out MEDIAQUAL_REPORT_DIR=$dir/report setsid bash -c 'bash "$0" "$1" "$2" >"$3/log" 2>&1; echo $? >"$3/rc"' \
		"${QUALIFY:-scripts/gpu-runs/qualify.sh}" "$row" "$builder" "$dir" </dev/null >/dev/null 2>&1 &
	echo $! >"$dir/pid"
	echo "started detached: $row ($builder), pid $(cat "$dir/pid"); follow it with: $0 status"
	;;
status)
	if [ ! -f "$dir/what" ]; then
		echo "no detached run on this machine ($dir is empty): none was started here, or this is another machine than the one that started it"
		exit 2
	fi
	if [ "$(cat "$dir/machine")" != "$(machine)" ]; then
		echo "the detached run in $dir was started on another boot of this machine; it is not running"
		exit 2
	fi
	# WAIT: one command follows the run for up to that long (fewer calls keep the machine held).
	waited=0
	while running && [ "$waited" -lt "${WAIT:-0}" ]; do
		sleep 10
		waited=$((waited + 10))
	done
	elapsed=$(($(date +%s) - $(cat "$dir/started")))
	# qualify.sh moves the test2json output into the report once the suite ended.
	stage=$(cat "$dir"/out/test2json-*.out "$dir"/report/test2json-*.out 2>/dev/null | grep -ao '=== RUN   Test[^ ]*/[a-z-]*' | tail -1 | sed 's|.*/||')
	# The suite writes its report into a staging folder beside report/ and moves it there at the end.
	native=$(find "$dir/report" "$dir"/.report.run-* -path '*/native/*' -name 'frames.rgb' 2>/dev/null | wc -l)
	served=$(cat "$dir"/report/cases/*/ledger.jsonl "$dir"/.report.run-*/cases/*/ledger.jsonl 2>/dev/null | grep -c '"event":"job"')
	echo "$(cat "$dir/what"): stage ${stage:-(none yet)}, native Tasks $native, served jobs $served, elapsed $elapsed s"
	if running; then
		echo "running (pid $(cat "$dir/pid"))"
		exit 0
	fi
	if [ ! -f "$dir/rc" ]; then
		echo "ended without an exit status (killed?): the log's tail:"
		tail -20 "$dir/log"
		exit 1
	fi
	echo "ended: qualify.sh exited $(cat "$dir/rc"); its summary:"
	tail -8 "$dir/log"
	if ls "$dir"/out/run-*.tgz >/dev/null 2>&1; then
		cp "$dir"/out/run-*.tgz "${OUT:?status needs OUT, the output folder of the device tool}/" && ls "$OUT"/run-*.tgz || exit 1
		for f in "$dir"/out/parity-faults-*; do  # faults-and-qualify.sh's
			if [ -f "$f" ]; then cp "$f" "$OUT/" && ls "$OUT/${f##*/}"; fi
		done
	else
		echo "no archive in $dir/out"
		exit 1
	fi
	;;
*)
	sed -n '2,/^set -u/p' "$0" | sed '$d'
	exit 2
	;;
esac
