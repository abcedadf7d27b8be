#!/usr/bin/env bash
# Regenerates ../data/flink_keygroup_vectors.jsonl.gz from Flink's own Java code: Flink's jars come
# from PyPI's apache-flink-libraries wheel (Maven Central is not needed), the generator is compiled
# against flink-dist and run. Needs javac/java 17+ and pip. Nothing downloaded is kept in the repo.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="${FLINK_VERSION:-2.3.0}"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
python3 -m pip download -q --no-deps "apache-flink-libraries==$VERSION" -d "$WORK"
(cd "$WORK" && unzip -q -o ./*.whl "pyflink/lib/flink-dist-*.jar")
CP="$(ls "$WORK"/pyflink/lib/flink-dist-*.jar)"
javac -d "$WORK/classes" -cp "$CP" "$HERE/GenerateKeyGroupVectors.java"
java -cp "$WORK/classes:$CP" GenerateKeyGroupVectors | gzip -9n > "$HERE/../data/flink_keygroup_vectors.jsonl.gz"
echo "wrote $(zcat "$HERE/../data/flink_keygroup_vectors.jsonl.gz" | wc -l) vectors from Flink $VERSION"
