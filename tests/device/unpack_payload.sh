#!/usr/bin/env bash
# Unpack the engine payload built by tests/device/build_payload.py. Runs ON THE DEVICE, from the repo root:
#   tests/device/unpack_payload.sh /srv/stage /srv/stage/in/PREFIX.part*
# Gives DEST/site (for PYTHONPATH) and DEST/lib (for LD_LIBRARY_PATH). Parts are checked against the
# manifest's sha256 first, so a truncated or stale chunk fails here and not as an xz error later. The manifest is
# $DEVICE_PAYLOAD (default tests/device/payload.json, vLLM-Omni 0.26.0; tests/device/payload-0.30.0.json for 0.30.0).
# Its members say where each piece lies in the parts laid end to end: the xz of site/ and lib/, then the
# GPU-stack wheels carried whole (0.30.0: torch 2.13 and what it links), installed into site/ ahead of the image's.
set -euo pipefail
(( $# >= 2 )) || { echo "usage: $0 DEST PART..." >&2; exit 2; }
dest=$1; shift
mapfile -t parts < <(printf '%s\n' "$@" | sort -V)  # part10 after part9
manifest=${DEVICE_PAYLOAD:-tests/device/payload.json}
[[ -f $manifest ]] || { echo "no manifest $manifest" >&2; exit 2; }
python3 - "$manifest" "${parts[@]}" <<'PY'
import hashlib, json, os, sys
want = {p["name"]: p["sha256"] for p in json.load(open(sys.argv[1]))["parts"]}
got = {os.path.basename(p): p for p in sys.argv[2:]}
if set(got) != set(want):
    sys.exit(f"parts given {sorted(got)} != parts in {sys.argv[1]} {sorted(want)}")
for name, path in got.items():
    if hashlib.sha256(open(path, "rb").read()).hexdigest() != want[name]:
        sys.exit(f"{path}: sha256 differs from {sys.argv[1]}")
print(f"{len(got)} parts match {sys.argv[1]}")
PY
rm -rf "${dest:?}/site" "${dest:?}/lib" "${dest:?}/lib-fallback" "${dest:?}/whole"  # nothing from an older payload may linger
mkdir -p "$dest/whole"
# Cut the members out of the stream (a manifest without members is one xz: the 0.26.0 payloads of earlier runs).
cat "${parts[@]}" | python3 tests/device/payload_members.py "$manifest" "$dest/whole"
xz -dc -T0 "$dest/whole/engine.tar.xz" | tar -C "$dest" -xf -
rm "$dest/whole/engine.tar.xz"
for wheel in "$dest"/whole/*.whl; do
  [[ -e $wheel ]] || continue
  python3 tests/device/payload_members.py --install "$wheel" "$dest/site"
  rm "$wheel"
done
# lib-fallback/ holds libraries Ubuntu 24.04 normally has; link in only those this machine lacks.
have=$(ldconfig -p | awk 'NR > 1 {print $1}')
for f in "$dest"/lib-fallback/*; do
  n=${f##*/}
  grep -qxF "$n" <<<"$have" || { ln -sf "../lib-fallback/$n" "$dest/lib/$n"; echo "using carried $n"; }
done
LD_LIBRARY_PATH=$dest/lib ldd "$dest"/site/mooncake/engine.so | grep 'not found' | grep -v libcudart \
  && echo "WARNING: engine.so still misses the libraries above" >&2
echo "unpacked: $(du -sh "$dest/site" | cut -f1) in $dest/site; export PYTHONPATH=$dest/site LD_LIBRARY_PATH=$dest/lib"
