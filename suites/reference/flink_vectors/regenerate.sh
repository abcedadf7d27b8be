#!/usr/bin/env bash
# Regenerates the vectors from Flink's own Java code: flink_keygroup_vectors.jsonl.gz
# (GenerateKeyGroupVectors) and flink_state_vectors.jsonl.gz (GenerateStateVectors: TTL state,
# namespace merges, operator-state redistribution), into ../data or the directory given. Flink's jars
# come from PyPI's apache-flink-libraries wheel (Maven Central is not needed); the generators are
# compiled against flink-dist and run. Needs javac/java 17+ and pip. Nothing downloaded is kept.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="${FLINK_VERSION:-2.3.0}"
OUT="${1:-$HERE/../data}"
mkdir -p "$OUT"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
python3 -m pip download -q --no-deps "apache-flink-libraries==$VERSION" -d "$WORK"
(cd "$WORK" && unzip -q -o ./*.whl "pyflink/lib/flink-dist-*.jar" && rm -f ./*.whl)
CP="$(ls "$WORK"/pyflink/lib/flink-dist-*.jar)"
javac -nowarn -d "$WORK/classes" -cp "$CP" "$HERE/GenerateKeyGroupVectors.java" "$HERE/GenerateStateVectors.java" 2>&1 | { grep -v '^Note:' || true; }
java -cp "$WORK/classes:$CP" GenerateKeyGroupVectors | gzip -9n > "$OUT/flink_keygroup_vectors.jsonl.gz"
java -cp "$WORK/classes:$CP" GenerateStateVectors 2>/dev/null | gzip -9n > "$OUT/flink_state_vectors.jsonl.gz"
echo "wrote $(zcat "$OUT/flink_keygroup_vectors.jsonl.gz" | wc -l) key-group and $(zcat "$OUT/flink_state_vectors.jsonl.gz" | wc -l) state vectors from Flink $VERSION into $OUT"
