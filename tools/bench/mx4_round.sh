#!/usr/bin/env bash
# One device call of MXFP4 kernel work, for when GPU time comes in few calls (run's 600 s limit):
# the GPU tests of the decode kernel's splits and accumulator sets, the family's configurations
# (mx4_decode_sweep.py --kernels FAMILY; chains unless FAMILY says) swept beside the tuning's candidates
# at 16 tokens (the four single-weight shapes) and at 32 and 64 (gpt-oss's and Llama 4096x4096), the
# fastest picked (mx4_pick.py --family), and mx4_linear.py run with the picks among the tuning's
# candidates, gemlite's 4-bit paths beside them where its wheel was carried to .whl/.
# Everything lands in $OUT (the device tool's folder) for the repository's tools/bench/results/.
#
#     run (carry .whl): XLABRIDGE_COMMIT=<commit> bash tools/bench/mx4_round.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 XLABRIDGE_COMMIT=${XLABRIDGE_COMMIT:-unknown}
OUT=${OUT:?"OUT: the device tool's output folder"}
FAMILY=${FAMILY:-chains}
python3 -m pip install --no-deps --no-build-isolation -q -e . >/dev/null 2>&1
GEMLITE=0
if ls .whl/gemlite-*.whl >/dev/null 2>&1 && python3 -m pip install --no-deps -q .whl/gemlite-*.whl >/dev/null 2>&1; then
    GEMLITE=25
fi
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$GPU"
CARD=$(echo "$GPU" | grep -o -i 'h[0-9]00' | head -1 | tr 'A-Z' 'a-z')  # the results' names say the card
CARD=${CARD:-gpu}
timeout 80 python3 -m pytest -q -p no:cacheprovider tests/mx/test_mxfp4_cuda.py -k k_split 2>&1 | tail -3
SINGLE="llama up 14336x4096,llama down 4096x14336,gpt-oss-20b expert gate_up,gpt-oss-20b expert down"
timeout 135 python3 tools/bench/mx4_decode_sweep.py --shapes "$SINGLE" --tokens 16 --kernels "$FAMILY",candidates \
    --packing decode --out "$OUT/mx4_${FAMILY}_16_$CARD.json" --seconds 105 2>&1 | grep -v '^{' | tail -2
timeout 115 python3 tools/bench/mx4_decode_sweep.py --tokens 32,64 --kernels "$FAMILY",candidates --packing decode \
    --shapes "gpt-oss-20b expert gate_up,gpt-oss-20b expert down,llama 4096x4096" \
    --out "$OUT/mx4_${FAMILY}_32_64_$CARD.json" --seconds 85 2>&1 | grep -v '^{' | tail -2
python3 tools/bench/mx4_pick.py "$OUT/mx4_${FAMILY}_16_$CARD.json" "$OUT/mx4_${FAMILY}_32_64_$CARD.json" --family "$FAMILY" --out "$OUT/picked.json"
PICKED=()  # the benchmark runs without picks where the sweeps left none
if [ -s "$OUT/picked.json" ]; then PICKED=(--candidates "$OUT/picked.json"); fi
timeout 230 python3 tools/bench/mx4_linear.py --precompile 10 --packing decode "${PICKED[@]}" \
    --gemlite "$GEMLITE" --out "$OUT/mx4_linear_$CARD.json" 2>&1 | tail -40
