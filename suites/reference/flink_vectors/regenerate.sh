#!/usr/bin/env bash
# Regenerates the committed vectors from Flink's own Java code: ../data/flink_keygroup_vectors.jsonl.gz
# (GenerateKeyGroupVectors) and ../data/flink_state_vectors.jsonl.gz (GenerateStateVectors: TTL state,
# namespace merges, operator-state redistribution). Flink's jars come from PyPI's
# apache-flink-libraries wheel (Maven Central is not needed); the generators are compiled against
# flink-dist and run. Needs javac/java 17+ and pip. Nothing downloaded is kept in the repo.
#   regenerate.sh                 both files, in ../data
#   regenerate.sh --state OUT     only the state vectors, into OUT (the suite's live comparison)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="${FLINK_VERSION:-2.3.0}"
STATE_OUT="$HERE/../data/flink_state_vectors.jsonl.gz"
ONLY_STATE=0
if [ "${1:-}" = "--state" ]; then ONLY_STATE=1; STATE_OUT="$2"; fi
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
python3 -m pip download -q --no-deps "apache-flink-libraries==$VERSION" -d "$WORK"
(cd "$WORK" && unzip -q -o ./*.whl "pyflink/lib/flink-dist-*.jar" && rm -f ./*.whl)
CP="$(ls "$WORK"/pyflink/lib/flink-dist-*.jar)"
javac -nowarn -d "$WORK/classes" -cp "$CP" "$HERE/GenerateKeyGroupVectors.java" "$HERE/GenerateStateVectors.java" 2>&1 | { grep -v '^Note:' || true; }
java -cp "$WORK/classes:$CP" GenerateStateVectors 2>/dev/null | gzip -9n > "$STATE_OUT"
echo "wrote $(zcat "$STATE_OUT" | wc -l) state vectors from Flink $VERSION"
if [ "$ONLY_STATE" = 0 ]; then
  java -cp "$WORK/classes:$CP" GenerateKeyGroupVectors | gzip -9n > "$HERE/../data/flink_keygroup_vectors.jsonl.gz"
  echo "wrote $(zcat "$HERE/../data/flink_keygroup_vectors.jsonl.gz" | wc -l) key-group vectors from Flink $VERSION"
fi
