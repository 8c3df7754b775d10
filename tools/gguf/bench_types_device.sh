#!/usr/bin/env bash
# wgemma against llama.cpp Vulkan on E2B-shaped GGUF files of several ggml types, on the GPU
# machine, in one call from the project root with the side-by-side bundle staged in .peer
# (../shared/peer/stage.sh: the release wgemma, llama-bench Vulkan, the Q4_0 writer):
#     bash tools/gguf/bench_types_device.sh            # carry [".peer"], timeout_s 600
# Writes the Q4_0 E2B file (random weights), rewrites it per type with tools/gguf/retype.py
# (random blocks of Q8_0 / llama-quantize's Q4_K_M mix, ...), then on each file runs
# `wgemma bench -m FILE` and llama-bench Vulkan (-p 512 -n 128 -d 512 -fa 1). $OUT gets
# wgemma.TYPE.json, llama.TYPE.json, their stderr, and log.txt. Knobs: TYPES (default
# "Q8_0 Q4_K_M"), WGEMMA_ARGS, LLAMA_BENCH_ARGS.
set -u
ROOT=$(pwd)
P="$ROOT/.peer"
OUT=${OUT:-/tmp/types-out}
W=${PEER_WORK:-/tmp/peer-types}
TYPES=${TYPES:-"Q8_0 Q4_K_M"}
WGEMMA_ARGS=${WGEMMA_ARGS:-"--prompt-len 512 --gen 128 --draft-tokens 0 --json"}
LLAMA_BENCH_ARGS=${LLAMA_BENCH_ARGS:-"-p 512 -n 128 -d 512 -fa 1 -ngl 99 -r 3"}
mkdir -p "$OUT" "$W/src" "$W/vk"
LOG="$OUT/log.txt"
say() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }
for f in "$P"/.gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -d "$W/src/llama.cpp" ] || tar -xzf "$P/.devcarry/llamacpp.tar.gz" -C "$W/src"
for f in "$W"/src/vkdebs/*.deb; do dpkg -x "$f" "$W/vk"; done
VKLIB="$W/vk/usr/lib/x86_64-linux-gnu"
vkenv=()
LD_LIBRARY_PATH="$VKLIB" "$W/vk/usr/bin/glslc" --version >/dev/null 2>&1 && vkenv=(LD_LIBRARY_PATH="$VKLIB")
LB="$W/llama-bench"
[ -x "$LB" ] || { xz -dc "$P/.devcarry/llama-bench-vulkan.xz" >"$LB" && chmod +x "$LB"; }
GP="$W/src/llama.cpp/gguf-py"
if [ ! -f "$W/e2b.Q4_0.gguf" ]; then
  say "writing the Q4_0 E2B file"
  python3 "$P/barlib/make_gguf_e2b.py" "$W/e2b.Q4_0.gguf" --gguf-py "$GP" >>"$LOG" 2>&1
fi
for t in $TYPES; do
  f="$W/e2b.$t.gguf"
  if [ ! -f "$f" ]; then
    say "retyping to $t"
    python3 tools/gguf/retype.py "$W/e2b.Q4_0.gguf" "$f.part" --recipe "$t" --gguf-py "$GP" >>"$LOG" 2>&1 && mv "$f.part" "$f"
  fi
  say "wgemma bench -m e2b.$t.gguf $WGEMMA_ARGS"
  timeout 200 "$P/.devcarry/wgemma" bench -m "$f" $WGEMMA_ARGS >"$OUT/wgemma.$t.json" 2>"$OUT/wgemma.$t.err"
  say "rc=$?; $(tail -n 3 "$OUT/wgemma.$t.err" | tr '\n' ' ')"
  say "llama-bench vulkan -m e2b.$t.gguf $LLAMA_BENCH_ARGS"
  env "${vkenv[@]}" timeout 150 "$LB" -m "$f" $LLAMA_BENCH_ARGS -o json >"$OUT/llama.$t.json" 2>"$OUT/llama.$t.err"
  say "rc=$?"
done
