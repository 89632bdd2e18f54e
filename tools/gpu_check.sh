#!/usr/bin/env bash
# One device call: the whole test suite, then compute-sanitizer over every variant on odd shapes. Logs in $OUT.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt
python3 -m pytest -q -p no:cacheprovider 2>&1 | tee $OUT/pytest.log | tail -25
for tool in memcheck racecheck synccheck; do
  args=""; [ $tool != memcheck ] && args="--small"
  compute-sanitizer --tool $tool --error-exitcode 99 python3 tools/sanitize.py $args > $OUT/sanitize_$tool.log 2>&1
  echo "compute-sanitizer $tool: exit $? :: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitize:' $OUT/sanitize_$tool.log | tr '\n' ' ')"
done
