#!/usr/bin/env bash
# The training corpus: the King James Version of the Bible (public domain) from Debian's
# bible-kjv-text 4.38 (bookworm), dumped to plain text with the same source package's `bible`
# reader. Writes $1/kjv.txt (default: /tmp/wgemma-train). Needs apt-get (any Debian/Ubuntu
# with the bookworm archive); the .deb hashes are checked, so the text is the same everywhere.
set -euo pipefail
out=${1:-/tmp/wgemma-train}
mkdir -p "$out/deb"
cd "$out/deb"
apt-get download bible-kjv-text=4.38 bible-kjv=4.38
sha256sum -c - <<'SUMS'
d61b6aad4c51ba9e2800b825325fa6a09e99a0d02a9bb6dc4724fcc4995a1b7a  bible-kjv-text_4.38_all.deb
75a49c032a6efa9faa2beb4a9acb70974380122906329d0e100de36cc88ff02d  bible-kjv_4.38_amd64.deb
SUMS
for f in *.deb; do dpkg -x "$f" x; done
# -l 10000: one verse a line (no wrapping). Genesis 1:1 .. Revelation 22:21 is the whole book.
./x/usr/bin/bible -l 10000 -p x/usr/lib gen1:1-rev22:21 >"$out/kjv.txt"
sha256sum "$out/kjv.txt"
