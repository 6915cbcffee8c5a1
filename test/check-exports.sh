#!/bin/sh
# usage: check-exports.sh LIBMEMRA.SO LIBMEMRA.SYM INCLUDE_DIR
#
# The exported API has three descriptions that must agree exactly: what the
# shared library really exports (nm -D, code and data), the version script
# lib/libmemra.sym, and the MEMRA_API declarations in the public headers.
set -eu
so=$1 sym=$2 inc=$3
for f in "$so" "$sym" "$inc"; do
    [ -e "$f" ] || { echo "$f: not found"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "memra_free@@MEMRA_0.1" -> "memra_free"; the version node itself is an A symbol
nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRV]$/ { sub(/@.*/, "", $3); print $3 }' |
    sort -u > "$tmp/so"

# names ending in ';' inside "global:" sections, comments stripped
sed -e 's|/\*.*\*/||g' -e 's|#.*||' "$sym" | awk '
    /global:/ { g = 1; next }
    /local:/  { g = 0; next }
    g && /^[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*;/ { gsub(/[ \t;]/, ""); print }' |
    sort > "$tmp/sym_all"
sort -u "$tmp/sym_all" > "$tmp/sym"

# MEMRA_API declarations: the identifier just before "(" (functions) or ";"
# (objects); a declaration may span lines, so join each one up to its ';'.
for h in "$inc"/*.h; do
    awk '
        /^[ \t]*#/ { next }
        /^[ \t]*(MEMRA_DEPRECATED\([^)]*\)[ \t]*)?MEMRA_API[ \t]/ { d = ""; on = 1 }
        on { d = d " " $0; if ($0 ~ /;/) { print d; on = 0 } }' "$h"
done | sed -n \
    -e 's/^[^(]*[^A-Za-z0-9_(]\([A-Za-z_][A-Za-z0-9_]*\)[ \t]*(.*/\1/p' \
    -e 't' \
    -e 's/.*[^A-Za-z0-9_]\([A-Za-z_][A-Za-z0-9_]*\)[ \t]*\(\[[^]]*\]\)*[ \t]*;.*/\1/p' |
    sort > "$tmp/hdr_all"
sort -u "$tmp/hdr_all" > "$tmp/hdr"

status=0
report() { # label file-a file-b: lines in a but not b
    extra=$(comm -23 "$2" "$3")
    if [ -n "$extra" ]; then
        echo "$1:"
        echo "$extra" | sed 's/^/    /'
        status=1
    fi
}
report "exported by $so but not in $sym" "$tmp/so" "$tmp/sym"
report "in $sym but not exported by $so" "$tmp/sym" "$tmp/so"
report "declared MEMRA_API in $inc but not in $sym" "$tmp/hdr" "$tmp/sym"
report "in $sym but not declared MEMRA_API in $inc" "$tmp/sym" "$tmp/hdr"
dups=$(uniq -d "$tmp/sym_all")
if [ -n "$dups" ]; then
    echo "listed twice in $sym: $dups"
    status=1
fi
dups=$(uniq -d "$tmp/hdr_all")
if [ -n "$dups" ]; then
    echo "declared MEMRA_API twice: $dups"
    status=1
fi
if [ "$status" = 0 ]; then
    echo "ok: $(wc -l < "$tmp/so") exported symbols agree with $(basename "$sym") and the MEMRA_API declarations"
fi
exit $status
