#!/usr/bin/env bash
# Debian's Prometheus for the lab: the server and promtool of the
# `prometheus` package, unpacked privately and never installed (installing
# it would start a node-wide service on :9090 and pull a web UI's worth of
# JavaScript packages). Used by tests/tests/prometheus_lab.rs to scrape
# nri-trace for real and to check its metrics and deploy/'s rules.
#
#   prometheus.sh install   fetch + unpack (idempotent); prints the bin dir
#   prometheus.sh bin       the bin dir (prometheus, promtool), if installed
#
# Everything lives under $NRI_TRACE_LAB_DIR/prometheus (default
# /var/lib/nri-trace-lab/prometheus).
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
DIR="${LAB%/}/prometheus"
BIN="$DIR/pkg/usr/bin"

die() {
	printf 'prometheus.sh: %s\n' "$*" >&2
	exit 1
}

installed() { "$BIN/prometheus" --version >/dev/null 2>&1 && "$BIN/promtool" --version >/dev/null 2>&1; }

cmd_install() {
	if installed; then
		echo "$BIN"
		return
	fi
	[[ $(id -u) -eq 0 ]] || die "must run as root (it writes under $DIR)"
	mkdir -p "$DIR"
	local dl="$DIR/download"
	rm -rf "$dl" "$DIR/pkg.tmp"
	mkdir -p "$dl"
	# `apt-get download` reads the system's sources and writes only the
	# .deb here; the lists are refreshed once if the package is not found.
	# _apt cannot write here: the download runs as root (apt says so).
	if ! (cd "$dl" && apt-get download -q prometheus >/dev/null 2>&1); then
		apt-get update -q >/dev/null 2>&1 || die "apt-get update failed"
		(cd "$dl" && apt-get download -q prometheus >/dev/null 2>&1) ||
			die "apt-get download prometheus failed: is a Debian source configured?"
	fi
	local deb
	deb="$(ls "$dl"/prometheus_*.deb)" || die "no prometheus .deb downloaded"
	dpkg-deb -x "$deb" "$DIR/pkg.tmp"
	rm -rf "$DIR/pkg"
	mv "$DIR/pkg.tmp" "$DIR/pkg"
	rm -rf "$dl"
	installed || die "the unpacked prometheus does not run: $BIN"
	echo "$BIN"
}

case "${1:-}" in
install) cmd_install ;;
bin)
	installed || die "not installed: run $0 install"
	echo "$BIN"
	;;
*) die "usage: $0 install|bin" ;;
esac
