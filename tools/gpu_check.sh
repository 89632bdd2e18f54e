#!/usr/bin/env bash
# The GPU evidence, logs in $OUT (at most 8 files come back). The whole of it passed 600 s on an H100 in session 19
# (the bench's paired rows, Dask's tests): run `bench` and then `check` as two device calls.
#   bash tools/gpu_check.sh            the bench on a quiet GPU, then the test suite and compute-sanitizer side by side
#   bash tools/gpu_check.sh pytest     the whole test suite in one process (about 8 minutes)
#   bash tools/gpu_check.sh sanitize [TOOL...]   memcheck, racecheck, synccheck (or the TOOLs named) over
#                                      tools/sanitize.py, each of its parts in a process of its own, all side by
#                                      side (one after another, racecheck alone passed 430 s warm in session 34);
#                                      memcheck runs the full set, the others --small; memcheck-small is memcheck on
#                                      the small set (1 x 1 x 1 products and other tiny shapes); SANITIZE_PARTS names
#                                      the parts to run (default: every one of sanitize.PARTS)
#   bash tools/gpu_check.sh bench      python bench.py --json and python -m cudakit info (more than 4.5 minutes in
#                                      session 28, resize last: give it a call of its own)
#   bash tools/gpu_check.sh shards     the test suite in parallel shards, as the side-by-side run does (most of a call),
#                                      then the tests past 2^31 elements (marked large) one at a time
#   bash tools/gpu_check.sh large      only those
#   bash tools/gpu_check.sh check      the side-by-side run without the bench (the suite in shards, compute-sanitizer)
#   bash tools/gpu_check.sh probe      the tensor-core probes (correctness, then TFLOP/s against cuBLAS) and the
#                                      cold start of a new process, twice (compile, then the disk caches)
# The side-by-side run shards the suite, a process per test file and per architecture of the compile check (the
# time is mostly NVRTC on the host, not the GPU); every shard's summary line is in pytest.log, with a total at the end.
#   bash tools/gpu_check.sh dask       tests/test_dask.py, then python bench.py --dask --protocol ucx (a LocalCUDACluster
#                                      of 1 worker and of every GPU); PROTOCOL=tcp for TCP
# Every part but probe and dask first compiles every kernel module in parallel (tools/precompile.py): the tests, the
# sanitizer and the bench then load them from the disk caches instead of each compiling its own, one at a time.
# Dask is not installed on the GPU machine: carry .whl (tools/dask_wheels.sh) and it is installed first.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl $(ls .whl/ucx/*.whl 2>/dev/null) && export PYTHONPATH=.:/tmp/site
fi
part=${1:-all}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/device.txt

precompile() {  # every family's modules, by a pool of processes, into the disk caches the runs below load from
  timeout 300 python3 tools/precompile.py > /tmp/precompile.log 2>&1
  echo "precompile: exit $? :: $(tail -1 /tmp/precompile.log)"
}

bench() {
  COLUMNS=240 python3 bench.py --json $OUT/bench.json > $OUT/bench.txt 2>&1
  echo "bench: exit $? :: $(tail -3 $OUT/bench.txt | tr '\n' ' ')"
  COLUMNS=240 python3 -m cudakit info > $OUT/info.txt 2>&1
}

sanitize() {  # every (tool, part) pair in a process of its own, side by side; a summary line each, then their tails
  : > $OUT/sanitize.log
  rm -f /tmp/sanitize_*_*.log  # (a warm machine keeps an earlier run's)
  local tool part args pids=() parts
  parts=${SANITIZE_PARTS:-$(python3 -c "import sys; sys.path.insert(0, 'tools'); import sanitize; print(*sanitize.PARTS)")}
  [ -z "$parts" ] && { echo "sanitize: no parts (tools/sanitize.py did not import)" | tee -a $OUT/sanitize.log; return 1; }
  for tool in ${@:-memcheck racecheck synccheck}; do
    args=""; [ $tool != memcheck ] && args="--small"  # (memcheck-small: memcheck on the small set)
    for part in $parts; do
      (compute-sanitizer --tool ${tool%-small} --error-exitcode 99 python3 tools/sanitize.py $args --part=$part \
         > /tmp/sanitize_${tool}_$part.log 2>&1; echo "exit $?" >> /tmp/sanitize_${tool}_$part.log) &
      pids+=($!)
    done
  done
  wait "${pids[@]}"
  for f in /tmp/sanitize_*_*.log; do
    echo "$(basename $f .log): $(tail -1 $f) :: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitize:' $f | tr '\n' ' ')" | tee -a $OUT/sanitize.log
  done
  for f in /tmp/sanitize_*_*.log; do echo "==== $(basename $f .log)" >> $OUT/sanitize.log; tail -30 $f >> $OUT/sanitize.log; done
}

pytest_shards() {
  local pids=() f arch
  for f in tests/test_*.py; do
    [ $f = tests/test_compile.py ] && continue
    python3 -m pytest -q -p no:cacheprovider -rs -m "not large" "$f" > /tmp/pytest_$(basename $f .py).log 2>&1 &
    pids+=($!)
  done
  # the NVRTC compile check is most of the suite's time: per architecture, a process for matmul.cu (the most
  # instantiations) and one for the other families (NO_COMPILE_CHECK=1: left to CI, which runs it without a GPU)
  local archs=$(python3 -c "from cudakit import _compile; print(*_compile.nvrtc_archs())")
  [ "${NO_COMPILE_CHECK:-0}" = 1 ] && archs="" && echo "the NVRTC compile check is left to CI (NO_COMPILE_CHECK=1)"
  for arch in $archs; do
    python3 -m pytest -q -p no:cacheprovider -rs tests/test_compile.py -k "matmul-$arch" \
      > /tmp/pytest_test_compile_matmul_$arch.log 2>&1 &
    pids+=($!)
    python3 -m pytest -q -p no:cacheprovider -rs tests/test_compile.py -k "$arch and not matmul-$arch" \
      > /tmp/pytest_test_compile_rest_$arch.log 2>&1 &
    pids+=($!)
  done
  python3 -m pytest -q -p no:cacheprovider -rs tests/test_compile.py -k "not test_family_compiles" \
    > /tmp/pytest_test_compile_other.log 2>&1 &
  pids+=($!)
  wait "${pids[@]}"
  # the tests past 2^31 elements take tens of GB each: one process, one test at a time, on a GPU the shards left
  python3 -m pytest -q -p no:cacheprovider -rs -m large tests/ > /tmp/pytest_test_zlarge.log 2>&1
  : > $OUT/pytest.log
  for f in /tmp/pytest_test_*.log; do echo "==== $(basename $f .log)" >> $OUT/pytest.log; cat $f >> $OUT/pytest.log; done
  grep -hE "^[0-9]+ (passed|failed)|^(FAILED|ERROR) |[0-9]+ (failed|error)" /tmp/pytest_test_*.log | tee -a $OUT/pytest.log
  python3 - <<'EOF' | tee -a $OUT/pytest.log
import glob, re
total = {}
for path in glob.glob("/tmp/pytest_test_*.log"):
    lines = [l for l in open(path) if re.search(r"\d+ (passed|failed|skipped|error)", l)]
    for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?)", lines[-1] if lines else ""):
        total[what] = total.get(what, 0) + int(n)
print("all shards:", ", ".join(f"{n} {w}" for w, n in sorted(total.items())))
EOF
}

dask_bench() {
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_dask.py > $OUT/pytest_dask.log 2>&1
  echo "test_dask: exit $? :: $(tail -1 $OUT/pytest_dask.log)"
  COLUMNS=240 timeout 420 python3 bench.py --dask --protocol ${PROTOCOL:-ucx} --json $OUT/dask.json > $OUT/dask.txt 2>&1
  echo "bench --dask: exit $? :: $(tail -4 $OUT/dask.txt | tr '\n' ' ')"
}

probe() {
  for run in 1 2; do python3 tools/cold_start.py float16 2>&1 | tail -2 | tee -a $OUT/probe.log; done
  timeout 200 python3 tools/tc_probe.py > $OUT/tc_probe.log 2>&1; echo "tc_probe: exit $?" | tee -a $OUT/probe.log
  timeout 250 python3 tools/wgmma_probe.py > $OUT/wgmma_probe.log 2>&1; echo "wgmma_probe: exit $?" | tee -a $OUT/probe.log
}

[ $part != probe ] && [ $part != dask ] && precompile  # (probe times the cold start itself)
case $part in
  probe) probe ;;
  pytest) python3 -m pytest -q -p no:cacheprovider 2>&1 | tee $OUT/pytest.log | tail -25 ;;
  sanitize) shift; sanitize "$@" ;;
  bench) bench ;;
  shards) pytest_shards ;;
  dask) dask_bench ;;
  large) python3 -m pytest -q -p no:cacheprovider -rs -m large tests/ 2>&1 | tee $OUT/pytest_large.log | tail -25 ;;
  check)
    sanitize & pytest_shards
    wait
    ;;
  all)
    bench
    sanitize & pytest_shards
    wait
    ;;
esac
