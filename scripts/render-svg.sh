#!/bin/sh
# render-svg.sh renders an SVG timeline of ppgen (sim -svg) to a PNG with
# headless Chromium, at the SVG's own size, so a person can check that it
# reads well without a browser window. cmd/ppgen's TestSVGRenders runs it
# when Chromium is installed (apt-get install -y chromium).
#
# usage: scripts/render-svg.sh [IN.svg [OUT.png]]
#        (default: docs/zbv_p4_m8.svg -> $TMPDIR/zbv_p4_m8.png)
set -eu

in=${1:-docs/zbv_p4_m8.svg}
out=${2:-${TMPDIR:-/tmp}/$(basename "$in" .svg).png}

browser=""
for b in chromium chromium-browser google-chrome google-chrome-stable; do
	if command -v "$b" >/dev/null 2>&1; then
		browser=$(command -v "$b")
		break
	fi
done
if [ -z "$browser" ]; then
	echo "render-svg: no Chromium found (apt-get install -y chromium)" >&2
	exit 2
fi
if [ ! -f "$in" ]; then
	echo "render-svg: $in: no such file" >&2
	exit 2
fi

# The root element's width and height (ppgen writes them in pixels).
root=$(grep -m1 -o '<svg [^>]*>' "$in")
w=$(printf '%s' "$root" | sed -n 's/.* width="\([0-9]*\)".*/\1/p')
h=$(printf '%s' "$root" | sed -n 's/.* height="\([0-9]*\)".*/\1/p')
if [ -z "$w" ] || [ -z "$h" ]; then
	echo "render-svg: $in: no pixel width and height on the <svg> element" >&2
	exit 2
fi

abs=$(cd "$(dirname "$in")" && pwd)/$(basename "$in")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# --no-sandbox: Chromium refuses to run as root otherwise (containers, CI).
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
	--user-data-dir="$tmp" --force-device-scale-factor=1 \
	--window-size="$w,$h" --screenshot="$tmp/shot.png" "file://$abs" >/dev/null 2>&1
if [ ! -s "$tmp/shot.png" ]; then
	echo "render-svg: $browser wrote no screenshot" >&2
	exit 1
fi
mv "$tmp/shot.png" "$out"
echo "render-svg: wrote $out (${w}x${h})"
