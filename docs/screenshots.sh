#!/usr/bin/env bash
# Reproduces the Allure report screenshots in docs/img/ (README, "Reports"). Not part of CI.
#
# Needs: ./dev (the project's environment), an Allure command line (on PATH, or the tarball in
# $ALLURE_TGZ / ../shared/tools, as for ./dev allure) and a headless Chromium: `apt-get install -y
# chromium` on Debian/Ubuntu, or set CHROMIUM=/path/to/chrome.
#   docs/screenshots.sh                  # run the tests below, render, screenshot
#   REPORT=allure-report docs/screenshots.sh   # only screenshot a report already rendered there
#
# The report comes from the fast suites plus the deliberately failing examples (examples/failing/: an
# oracle failure with a state diff, and an infrastructure error), so it shows both categories. It is
# built in a temporary folder: allure-results/ and allure-report/ of the work tree are not touched.
# Screenshots: the overview, the behaviors tab (epics and features), and the failed chaos test with
# its failing oracle, state diff, timeline plot and replay command expanded.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}"
[ -n "$CHROMIUM" ] || { echo "error: no Chromium: apt-get install -y chromium (or set CHROMIUM)" >&2; exit 2; }
PORT="${PORT:-8765}"
OUT="$ROOT/docs/img"
WORK="$(mktemp -d)"
SERVER=""
cleanup() { [ -z "$SERVER" ] || kill "$SERVER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

find_allure() {
  local tgz
  if command -v allure >/dev/null 2>&1; then command -v allure; return; fi
  tgz="${ALLURE_TGZ:-$(ls "$ROOT"/../shared/tools/allure-commandline-*.tgz 2>/dev/null | tail -1)}"
  [ -n "$tgz" ] || { echo "error: no Allure command line (put allure on PATH or set ALLURE_TGZ)" >&2; exit 2; }
  tar -xzf "$tgz" -C "$WORK" && ls "$WORK"/*/bin/allure | head -1
}

if [ -z "${REPORT:-}" ]; then
  # the failing examples make pytest exit 1: expected here
  ./dev python -m pytest suites/reference suites/runtime suites/chaos examples/failing \
    examples/test_user_chaos.py -m "not spark and not docker" -q -p no:cacheprovider \
    --alluredir="$WORK/results" --basetemp="$WORK/tmp" || true
  ./dev "$(find_allure)" generate "$WORK/results" -o "$WORK/report" --clean >/dev/null
else
  cp -r "$REPORT" "$WORK/report"
fi
REPORT_DIR="$WORK/report"
[ -f "$REPORT_DIR/index.html" ] || { echo "error: no rendered report" >&2; exit 1; }

# Headless screenshots cannot click: a script added to this copy of the report expands the
# attachments named in ?expand=a,b,... once the page has rendered them.
cat > "$REPORT_DIR/expand.js" <<'JS'
(function () {
  var q = new URLSearchParams(location.search);
  var want = (q.get("expand") || "").split(",").filter(Boolean);
  var open = q.get("open") === "1", opened = false;
  var tries = 0, done = {};
  var timer = setInterval(function () {
    if (open && !opened) {  // the tree groups rendered first (epics), once
      var groups = Array.prototype.filter.call(document.querySelectorAll(".node__title"), function (t) {
        var n = t.parentElement;
        return n && !n.classList.contains("node__leaf") && !n.classList.contains("node__expanded");
      });
      if (groups.length) { opened = true; groups.forEach(function (t) { t.click(); }); }
    }
    document.querySelectorAll(".attachment-row").forEach(function (row) {
      var el = row.querySelector(".attachment-row__name");
      var name = el ? el.textContent.trim() : "";
      if (want.indexOf(name) >= 0 && !done[name] && !row.classList.contains("attachment-row_selected")) {
        done[name] = 1;
        row.click();
      }
    });
    if (++tries > 80) clearInterval(timer);
  }, 250);
})();
JS
sed -i 's#</body>#<script src="expand.js"></script></body>#' "$REPORT_DIR/index.html"

python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$REPORT_DIR" >/dev/null 2>&1 &
SERVER=$!
sleep 1

# the uid of the failed chaos test in Allure's suites tree (data/suites.json)
FAILED_UID="$(python3 - "$REPORT_DIR/data/suites.json" <<'PY'
import json, sys
def walk(node):
    for c in node.get("children", []):
        if "children" in c:
            yield from walk(c)
        elif c.get("name") == "test_keyed_count_survives_task_crashes":
            yield c["uid"]
print(next(walk(json.load(open(sys.argv[1]))), ""))
PY
)"
[ -n "$FAILED_UID" ] || { echo "error: the failed example is not in the report" >&2; exit 1; }

shot() {  # shot FILE URL_PATH WIDTH,HEIGHT
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
    --virtual-time-budget=20000 --window-size="$3" --screenshot="$OUT/$1" \
    "http://127.0.0.1:$PORT/$2" >/dev/null 2>&1
  echo "wrote docs/img/$1"
}
mkdir -p "$OUT"
shot allure-overview.png "index.html#" 1600,1000
shot allure-behaviors.png "index.html?open=1#behaviors" 1600,1450
EXPAND="failing%20oracle%3A%20restored_state,state%20diff,timeline,replay%20command"
shot allure-failed-chaos-test.png "index.html?expand=$EXPAND#testresult/$FAILED_UID" 1400,3400
