#!/bin/bash
# zcompare.sh RAW.pftrace [METHOD:LEVEL ...] -- deflate implementations on one uncompressed Perfetto
# stream (OCULAR_PERFETTO_DEFLATE=0 python -m ocular convert REC -o RAW.pftrace): a markdown table of
# bytes out and instructions per input byte (callgrind, the reading and batching subtracted).
# Needs valgrind, zlib1g-dev and libdeflate-dev.
set -e
raw=$1; shift
here=$(cd "$(dirname "$0")" && pwd); root=$(dirname "$here")
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
py=${PYTHON:-python3}
inc=$($py -c "import sysconfig;print(sysconfig.get_paths()['include'])")
extra=""; defs=""
if [ -f "$root/src/ocular/_ext/deflate.c" ]; then extra="$root/src/ocular/_ext/deflate.c"; defs="-DWITH_OCULAR"; fi
gcc -std=c11 -O2 -D_GNU_SOURCE $defs -DWITH_LIBDEFLATE -I"$inc" "$here/zcompare.c" $extra -o "$d/zc" -lz -ldeflate
methods=${*:-ocular:0 zlib:1 zlib:6 libdeflate:1 libdeflate:6}
ir() { valgrind --tool=callgrind --callgrind-out-file="$d/cg" "$d/zc" "$raw" "$1" "$2" >/dev/null 2>&1; awk '/^totals:/{print $2}' "$d/cg"; }
base=$(ir none 0)
n=$(stat -c %s "$raw")
echo "| compressor | level | bytes out | ratio | instructions per input byte |"
echo "|---|---:|---:|---:|---:|"
for m in $methods; do
  name=${m%%:*}; level=${m##*:}
  out=$("$d/zc" "$raw" "$name" "$level" | awk '{print $2}')
  i=$(ir "$name" "$level")
  awk -v nm="$name" -v lv="$level" -v o="$out" -v n="$n" -v i="$i" -v b="$base" \
    'BEGIN{printf "| %s | %s | %d | %.1f | %.1f |\n", nm, lv, o, n/o, (i-b)/n}'
done
