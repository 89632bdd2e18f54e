#!/usr/bin/env bash
# The GPU evidence in at most two device calls (each under 600 s), logs in $OUT:
#   bash tools/gpu_check.sh pytest     the whole test suite (about 8 minutes on an H100)
#   bash tools/gpu_check.sh sanitize   compute-sanitizer memcheck, racecheck, synccheck over tools/sanitize.py (about 3)
#   bash tools/gpu_check.sh            both, where the time limit allows
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
part=${1:-all}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt
if [ $part = all ] || [ $part = pytest ]; then
  python3 -m pytest -q -p no:cacheprovider 2>&1 | tee $OUT/pytest.log | tail -25
fi
if [ $part = all ] || [ $part = sanitize ]; then
  for tool in memcheck racecheck synccheck; do
    args=""; [ $tool != memcheck ] && args="--small"
    compute-sanitizer --tool $tool --error-exitcode 99 python3 tools/sanitize.py $args > $OUT/sanitize_$tool.log 2>&1
    echo "compute-sanitizer $tool: exit $? :: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitize:' $OUT/sanitize_$tool.log | tr '\n' ' ')"
  done
fi
