#!/usr/bin/env bash
# Apply each "key = value" of a sysctl file whose live value differs. Prints APPLIED/UNAPPLIED lines.
# vm.max_map_count counts as satisfied when the live value is already at least as large.
set -u
file=$1
while IFS= read -r line; do
  case "$line" in ''|\#*) continue ;; esac
  key=$(echo "${line%%=*}" | xargs)
  want=$(echo "${line#*=}" | xargs)
  have=$(sysctl -n "$key" 2>/dev/null | xargs)
  if [ "$have" = "$want" ]; then continue; fi
  if [ "$key" = vm.max_map_count ] && [ -n "$have" ] && [ "$have" -ge "$want" ]; then continue; fi
  if err=$(sysctl -q -w "$key=$want" 2>&1); then
    echo "APPLIED $key = $want (was $have)"
  else
    echo "UNAPPLIED $key = $want (is $have): $err"
  fi
done < "$file"
exit 0
