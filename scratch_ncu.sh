export PYTHONPATH=.; mkdir -p $OUT
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats"
for spec in "transpose float32 8191 8193" "transpose float32 8192 8192" "transpose int8 8191 8193" "transpose int8 16384 16384" "matvec float32 4096 4096"; do
  ncu --clock-control none $S -k regex:"transpose_vec16|matvec" -c 2 python3 tools/profile_one.py $spec > "$OUT/ncu_$(echo $spec | tr ' ' _).txt" 2>&1
  grep -E "transpose_vec16|matvec_|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Stall|Issued Warp|Hit Rate|Mem Busy|Max Bandwidth|Registers Per|Grid Size|Block Size" "$OUT/ncu_$(echo $spec | tr ' ' _).txt" | head -60
  echo ======
done
python3 tools/call_overhead.py > $OUT/overhead.log 2>&1; cat $OUT/overhead.log
python3 tools/call_overhead.py --n 1048576 > $OUT/overhead_2p20.log 2>&1; grep "cudakit.dot\|launchKernel" $OUT/overhead_2p20.log
