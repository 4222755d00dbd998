#!/bin/bash
# Wall-clock evidence for bench/scale.py (issue 32): run TREE/bench/scale.py, and once every
# session runs, py-spy one worker process: a dump of every thread, `record --idle` (where its
# threads wait, not only where they run) and `record --gil` (what holds the GIL), 12 s each.
#   bench/wallclock_probe.sh OUTDIR TREE scale.py-args...
#   .venv/bin/python bench/pyspy_breakdown.py OUTDIR/idle_worker.txt
# Needs py-spy in the venv (.venv/bin/pip install py-spy) and ptrace rights (root here).
# py-spy costs CPU itself: compare runs probed alike, never a probed run with an unprobed one.
set -u
out=$(realpath -m "$1"); tree=$2; shift 2
VENV=${VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}
mkdir -p $out
cd $tree
uptime > $out/uptime.txt
$VENV/bin/python bench/scale.py "$@" > $out/scale.out 2> $out/scale.err &
spid=$!
until grep -q "sessions running" $out/scale.err 2>/dev/null; do sleep 1; kill -0 $spid 2>/dev/null || exit 1; done
sleep 8
uptime >> $out/uptime.txt
# a worker process: a child of a `worktrain worker` pool parent running sessions
pool=$(pgrep -f "$tree/.venv/bin/worktrain worker -n|$VENV/bin/worktrain worker -n" | head -1)  # ours, not another checkout's
w=$(pgrep -P $pool | head -1)
fm=$(pgrep -f "fakeloop.py" | head -1)
echo "pool $pool worker $w fake $fm; threads: $(ls /proc/$w/task | wc -l) fake threads: $(ls /proc/$fm/task | wc -l)" > $out/pids.txt
PS=$VENV/bin/py-spy
$PS dump --pid $w > $out/dump1.txt 2>&1
# --nonblocking: never pause the worker to sample it (a blocking sampler on a 257-thread
# process at load 34 stalled it for minutes once)
$PS record --idle -r 25 -d 12 --format raw -o $out/idle_worker.txt --pid $w --nonblocking > /dev/null 2>&1 &
idle=$!
$PS record --gil -r 50 -d 12 --format raw -o $out/gil_worker.txt --pid $w --nonblocking > /dev/null 2>&1 || true
timeout 60 tail --pid=$idle -f /dev/null
kill $idle 2>/dev/null
$PS record --idle -r 25 -d 8 --format raw -o $out/idle_fake.txt --pid $fm --nonblocking > /dev/null 2>&1
$PS dump --pid $w > $out/dump2.txt 2>&1
uptime >> $out/uptime.txt
wait $spid
uptime >> $out/uptime.txt
