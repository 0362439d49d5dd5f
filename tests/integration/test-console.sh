#!/usr/bin/env bash
# The web console (GET /): its headers and auth with curl (401 with a Basic
# challenge without a key, the key as Bearer or as a Basic password), then
# the page in headless Chromium (js/console.test.mjs, puppeteer-core):
# a session and a streamed reply made through the UI, the heatmap redrawn
# with its legend and a log scale that keeps small masses visible, the
# keyboard path, "revise last N" back to 0 after a send, the system
# message marked as not sent with a session, and at a 1,366x768 viewport
# the output box in view without scrolling and no sideways scroll (a long
# streams row included); no console error, page error or failed request.
# Chromium is Debian's /usr/bin/chromium (installed here when missing and
# running as root); skips (77) without node, npm or a Chromium.
# The screenshot (1,366 px wide, the whole page) goes to $OUT_DIR (else the
# temp folder) and, when set, to $CONSOLE_SCREENSHOT: the README's is made
# with CONSOLE_SCREENSHOT=$PWD/tests/bench/results/console.png.
set -u
here=$(cd "$(dirname "$0")" && pwd)
for tool in node npm; do
	command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is missing"; exit 77; }
done
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "# installing chromium (deploy/install-deps.sh lists it)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null 2>&1 &&
			apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }
fi
[ -x "$chromium" ] || { echo "SKIP: no Chromium at $chromium (apt-get install chromium)"; exit 77; }
. "$here/server-lib.sh"

js="$here/js"
if [ ! -d "$js/node_modules/puppeteer-core" ]; then
	(cd "$js" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error) ||
		{ echo "npm ci failed"; exit 1; }
fi

port=$(free_port)
write_config "$tmp/console.yaml" "$port"
start_daemon console "$tmp/console.yaml"
check "daemon starts" [ $? -eq 0 ]

code=$(http GET /)
check "GET / without a key: 401" [ "$code" = 401 ]
check "... with a Basic challenge, so that a browser prompts" \
	grep -qi '^WWW-Authenticate: Basic realm="sinkd", charset="UTF-8"' "$tmp/hdr"
code=$(http GET / -u "sinkd:wrong-key")
check "GET / with a wrong Basic password: 401" [ "$code" = 401 ]
code=$(http GET / -u "sinkd:$api_key")
check "GET / with the key as Basic password: 200" [ "$code" = 200 ]
check "... text/html" [ "$(header Content-Type)" = "text/html; charset=utf-8" ]
check "... Cache-Control: no-cache" [ "$(header Cache-Control)" = no-cache ]
check "... X-Content-Type-Options: nosniff" [ "$(header X-Content-Type-Options)" = nosniff ]
csp=$(header Content-Security-Policy)
check "... a CSP of default-src 'self', no inline script" \
	bash -c "grep -q \"default-src 'self'\" <<<\"\$1\" && ! grep -q unsafe <<<\"\$1\"" _ "$csp"
check "... the page loads its script from this origin" grep -q 'src="/console.js"' "$tmp/body"
code=$(http GET / "${auth[@]}")
check "GET / with the key as Bearer: 200 (the API's rules)" [ "$code" = 200 ]
code=$(http GET /console.js -u "x:$api_key")
check "GET /console.js: 200 text/javascript" \
	[ "$code:$(header Content-Type)" = "200:text/javascript; charset=utf-8" ]
code=$(http GET /console.css -u "x:$api_key")
check "GET /console.css: 200 text/css" [ "$code:$(header Content-Type)" = "200:text/css; charset=utf-8" ]
code=$(curl -sk -I -o /dev/null -w '%{http_code}' -u "x:$api_key" "$base/")
check "HEAD /: 200" [ "$code" = 200 ]
code=$(http GET /v1/models -u "x:$api_key")
check "the API takes the Basic password as the key too" [ "$code" = 200 ]

shots=${OUT_DIR:-$tmp}
SINKD_BASE_URL="$base" SINKD_API_KEY="$api_key" CHROMIUM="$chromium" SHOT_DIR="$shots" \
	CONSOLE_SCREENSHOT="${CONSOLE_SCREENSHOT:-}" timeout 90 node "$js/console.test.mjs"
check "the console in headless Chromium" [ $? -eq 0 ]
stop_daemon "$pid"
check "daemon stops cleanly" [ $? -eq 0 ]
finish
