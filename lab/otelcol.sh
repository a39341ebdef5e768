#!/usr/bin/env bash
# nri-trace lab: an OpenTelemetry Collector, built with the collector's own
# builder (go.opentelemetry.io/collector/cmd/builder) from the Go module
# proxy, for issue 33's tests: kubelet, containerd and nri-trace send it
# their spans over OTLP, and it writes them to a file the tests read back.
#
#   otelcol.sh install   build it into $LAB/otelcol/bin (nothing to do when
#                        it is there, built by this recipe); prints its path
#   otelcol.sh path      print the binary's path, or fail
#   otelcol.sh config OUT_FILE
#                        print a configuration: the OTLP receiver on
#                        loopback (gRPC 127.0.0.1:4317, HTTP 127.0.0.1:4318),
#                        every span written to OUT_FILE as OTLP JSON lines,
#                        the collector's own telemetry off (no listener)
#
# The collector's own distributions (cmd/otelcorecol) carry replace
# directives; the builder is the supported way to make a distribution
# from released components (REAL-PEERS.md). Its manifest names the OTLP
# receiver and the debug exporter (core) and the file exporter
# (contrib), all at one release. No source is kept: the module cache only.
#
# Environment:
#   NRI_TRACE_LAB_DIR   lab dir (default /var/lib/nri-trace-lab)
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034 # read by common.sh
LAB_TAG="otelcol.sh"
# shellcheck source=lab/common.sh
. "$HERE/common.sh"

# One release for the builder and every component: a component built
# against another release's API does not compile. v0.161.0 is the newest
# whose contrib file exporter `go mod tidy` accepts under Go 1.26
# (the library's go-partial.tsv, 2026-11-25; v0.162.0 and later were not
# accepted or untried).
RELEASE="v0.161.0"
BUILDER="go.opentelemetry.io/collector/cmd/builder"
COMPONENTS=(
	"receivers go.opentelemetry.io/collector/receiver/otlpreceiver"
	"exporters go.opentelemetry.io/collector/exporter/debugexporter"
	"exporters github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
)
GO_MIN="1.25.0"
NAME="otelcol-nri-trace-lab"

DIR="$LAB/otelcol"
BIN_DIR="$DIR/bin"
BIN="$BIN_DIR/$NAME"
BUILT_FROM="$BIN_DIR/built-from"
GODIR="$DIR/go" # GOMODCACHE (kept) and GOCACHE (removed after a build)
BUILD_LOG="$DIR/build.log"

# Messages go to stderr: stdout is the binary's path.
log() { printf '%s: %s\n' "$LAB_TAG" "$*" >&2; }

recipe() {
	local h
	h="$(declare -f build_steps manifest go_env | sha256sum | cut -c1-16)"
	echo "$BUILDER@$RELEASE; ${COMPONENTS[*]}; $GO_VERSION; CGO_ENABLED=0; recipe $h"
}

step() {
	printf '\n+ %s\n' "$*" >>"$BUILD_LOG"
	local what="$*"
	"$@" >>"$BUILD_LOG" 2>&1 || build_failed "${what/#go_env /}"
}
build_failed() { # the command that failed
	tail -n 30 "$BUILD_LOG" >&2
	die "building the OpenTelemetry Collector ($BUILDER@$RELEASE) failed at: $1"$'\n'"  log: $BUILD_LOG"$'\n'"  retry: sudo lab/otelcol.sh install (a download that failed half-way resumes from the module cache)"
}

# `PROGRAM ARG...` with the environment cleared but for the proxy
# settings (the machine's to choose), the lab's own module and build
# caches and the Go toolchain first on PATH: the builder runs `go mod
# tidy` and `go build` itself, with the environment it is given.
go_env() {
	local e=(PATH="$(dirname "$GO"):/usr/bin:/bin" HOME="$DIR"
		GOENV=off GOWORK=off GOTOOLCHAIN=local
		GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}" GOSUMDB="${GOSUMDB:-sum.golang.org}"
		GONOSUMDB="${GONOSUMDB:-}" GOPRIVATE="${GOPRIVATE:-}"
		GOMODCACHE="$GODIR/mod" GOCACHE="$GODIR/cache" GOPATH="$GODIR/gopath"
		GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0 GOBIN="$GODIR/tools")
	printf '  env: %s\n' "${e[*]}"
	env -i "${e[@]}" "$@"
}

# The builder's manifest (its documented `dist` and component lists).
manifest() { # output dir
	printf 'dist:\n  name: %s\n  description: nri-trace lab collector\n  output_path: %s\n  version: %s\n' \
		"$NAME" "$1" "${RELEASE#v}"
	local kind="" c k m
	for c in "${COMPONENTS[@]}"; do
		k="${c%% *}" m="${c#* }"
		[[ $k == "$kind" ]] || printf '%s:\n' "$k"
		kind="$k"
		printf '  - gomod: %s %s\n' "$m" "$RELEASE"
	done
}

build_steps() { # temp dir
	local tmp="$1"
	mkdir -p "$tmp/bin" "$tmp/src" "$GODIR/mod" "$GODIR/cache"
	step go_env "$GO" install "$BUILDER@$RELEASE"
	manifest "$tmp/src" >"$tmp/manifest.yaml"
	printf '\n+ manifest\n' >>"$BUILD_LOG"
	cat "$tmp/manifest.yaml" >>"$BUILD_LOG"
	step go_env "$GODIR/tools/builder" --config "$tmp/manifest.yaml"
	mv "$tmp/src/$NAME" "$tmp/bin/$NAME"
	local out
	step "$tmp/bin/$NAME" --version
	out="$("$tmp/bin/$NAME" --version)"
	[[ $out == *"${RELEASE#v}"* ]] || build_failed "$tmp/bin/$NAME --version: not ${RELEASE#v} ($out)"
	out="$("$tmp/bin/$NAME" components)"
	local c
	for c in otlp file debug; do
		[[ $out == *"name: $c"* ]] || build_failed "$tmp/bin/$NAME components: no $c"
	done
}

built() { [[ -f $BUILT_FROM && $(cat "$BUILT_FROM") == "$1" && -x $BIN ]]; }

build() {
	find_go "$GO_MIN" "the OpenTelemetry Collector $RELEASE"
	local want
	want="$(recipe)"
	if built "$want"; then
		log "the collector $RELEASE is already built ($want)"
		printf '%s\n' "$BIN"
		return 0
	fi
	[[ $(id -u) -eq 0 ]] || die "must run as root (it writes under $DIR)"
	mkdir -p "$DIR"
	# One build at a time (crictl.sh says why).
	local lock
	exec {lock}>"$DIR/build.lock"
	flock "$lock"
	if built "$want"; then
		exec {lock}>&-
		printf '%s\n' "$BIN"
		return 0
	fi
	local t0=$SECONDS tmp="$DIR/build.tmp"
	rm -rf "$tmp" "$BIN_DIR.old"
	mkdir -p "$tmp"
	: >"$BUILD_LOG"
	log "building the OpenTelemetry Collector $RELEASE with its builder ($GO_VERSION; log $BUILD_LOG)"
	(build_steps "$tmp")
	echo "$want" >"$tmp/bin/built-from"
	if [[ -e $BIN_DIR ]]; then mv "$BIN_DIR" "$BIN_DIR.old"; fi
	mv "$tmp/bin" "$BIN_DIR"
	rm -rf "$BIN_DIR.old" "$tmp" "$GODIR/cache" "$GODIR/gopath"
	log "built $BIN in $((SECONDS - t0)) s"
	exec {lock}>&-
	printf '%s\n' "$BIN"
}

cmd_path() {
	[[ -x $BIN ]] || die "$BIN not built: run 'sudo lab/otelcol.sh install'"
	printf '%s\n' "$BIN"
}

# Loopback only (the lab's rule: nothing listens beyond the machine). The
# file exporter writes one OTLP JSON object per line (its default format);
# flush_interval short so a test reads what arrived a moment ago.
cmd_config() { # out file
	[[ -n ${1:-} ]] || die "usage: $0 config OUT_FILE"
	cat <<EOF
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:4317
      http:
        endpoint: 127.0.0.1:4318
exporters:
  file:
    path: $1
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
EOF
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

case "${1:-}" in
install) build ;;
path) cmd_path ;;
config)
	shift
	cmd_config "$@"
	;;
-h | --help | help) usage 0 ;;
*) usage 2 >&2 ;;
esac
