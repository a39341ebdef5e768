#!/usr/bin/env bash
# nri-trace lab: go-cri-resize, one CRI UpdatePodSandboxResources call on
# k8s.io/cri-api's generated client over grpc-go (lab/go-cri-resize/main.go).
#
#   go-cri-resize.sh build   build it (no work when nothing changed); prints
#                            the path
#   go-cri-resize.sh path    print the binary's path, or fail
#
# Why its own program: the method came with cri-api v0.33 (Kubernetes
# 1.33's pod-level resize); Debian's cri-api (go-cri-client's) is 0.32 and
# the k8s-cri crate (the Rust driver's) predates it. Modules come through
# the Go module proxy, checked against the checksum database and the
# committed go.sum (-mod=readonly: the build never edits them). Binary:
# $LAB/go-cri-resize/bin/go-cri-resize. See docs/lab.md, "pod-resize".
#
# Environment:
#   NRI_TRACE_LAB_DIR   lab dir (default /var/lib/nri-trace-lab)
#   GOPROXY, GOSUMDB ...  as the go command reads them
set -euo pipefail
LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
# shellcheck disable=SC2034 # read by common.sh
LAB_TAG="go-cri-resize"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lab/common.sh
. "$HERE/common.sh"
SRC="$HERE/go-cri-resize"
WORK="$LAB/go-cri-resize"
BIN="$WORK/bin/go-cri-resize"
GODIR="$WORK/go" # GOPATH: module cache and build cache (kept)
GO_MIN="1.26.0"  # go.mod's go line (grpc v1.79 asks for it)

cmd_build() {
	find_go "$GO_MIN" go-cri-resize
	export GOTOOLCHAIN=local GOPATH="$GODIR" GOMODCACHE="$GODIR/pkg/mod" GOCACHE="$GODIR/cache"
	export GOFLAGS="-mod=readonly -modcacherw -buildvcs=false" CGO_ENABLED=0 GOWORK=off GOENV=off
	local fp log_file
	fp="$({
		echo "$GO_VERSION -trimpath"
		(cd "$SRC" && sha256sum -- *.go go.mod go.sum)
	} | sha256sum | cut -d' ' -f1)"
	if [[ -x $BIN && -f $WORK/stamp ]] && [[ $(sed -n 1p "$WORK/stamp") == "$fp" ]] &&
		[[ $(sed -n 2p "$WORK/stamp") == "$(sha256sum <"$BIN" | cut -d' ' -f1)" ]]; then
		log "up to date: $BIN" >&2
		printf '%s\n' "$BIN"
		return 0
	fi
	mkdir -p "$WORK/bin"
	log_file="$WORK/build.log"
	log "building with $GO_VERSION (log $log_file)" >&2
	if ! (cd "$SRC" && "$GO" build -trimpath -o "$BIN.tmp" .) >"$log_file" 2>&1; then
		tail -n 20 "$log_file" >&2
		die "go build failed (log $log_file); retry: sudo lab/go-cri-resize.sh build"
	fi
	mv -f "$BIN.tmp" "$BIN"
	printf '%s\n%s\n' "$fp" "$(sha256sum <"$BIN" | cut -d' ' -f1)" >"$WORK/stamp"
	log "built $BIN ($(stat -c %s "$BIN") bytes)" >&2
	printf '%s\n' "$BIN"
}

cmd_path() {
	[[ -x $BIN ]] || die "$BIN not built: run 'sudo lab/go-cri-resize.sh build'"
	printf '%s\n' "$BIN"
}

case "${1:-}" in
build) cmd_build ;;
path) cmd_path ;;
-h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
