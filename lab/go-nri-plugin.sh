#!/usr/bin/env bash
# nri-trace lab: go-nri-plugin, the lab's NRI plugin on the NRI project's
# own Go stub (github.com/containerd/nri/pkg/stub).
#
#   go-nri-plugin.sh build [VERSION...]   build for each NRI version (default:
#                                         all); no work when nothing changed
#   go-nri-plugin.sh path [VERSION]       print the binary's path, or fail
#   go-nri-plugin.sh list                 the versions, built or not
#   go-nri-plugin.sh run [VERSION] FLAG...
#                                         run it (foreground) as an external
#                                         plugin on the lab's NRI socket: it
#                                         dials the socket itself, e.g.
#                                         run -idx 10 -name go12 -truth /tmp/t.ndjson
#                                         run v0.8.0 -idx 20 -name go08 -truth /tmp/t.ndjson
#
# Versions (VERSION defaults to v0.12.2):
#   v0.12.2  lab/go-nri-plugin/go.mod: github.com/containerd/nri v0.12.2,
#            a ttrpc method per event, StateChange kept for old runtimes
#   v0.8.0   lab/go-nri-plugin/go.v0.8.0.mod (go build -modfile, tag
#            nri_v080): github.com/containerd/nri v0.8.0, StateChange only
#
# Modules come through the Go module proxy (GOPROXY, checked against the
# checksum database and the committed go.sum / go.v0.8.0.sum; -mod=readonly:
# the build never edits them). Binaries: $LAB/go-nri-plugin/bin/VERSION/go-nri-plugin
# (comm "go-nri-plugin" for both). See docs/lab.md, "go-nri-plugin".
#
# Environment:
#   NRI_TRACE_LAB_DIR   lab dir (default /var/lib/nri-trace-lab)
#   GOMAXPROCS          also the go command's build parallelism (1: frugal)
#   GOPROXY, GOSUMDB, GONOSUMDB ...  as the go command reads them
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
# shellcheck disable=SC2034 # read by common.sh
LAB_TAG="go-nri-plugin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lab/common.sh
. "$HERE/common.sh"

SRC="$HERE/go-nri-plugin"
WORK="$LAB/go-nri-plugin"
BIN_ROOT="$WORK/bin"
GODIR="$WORK/go" # GOPATH: module cache and build cache (kept)
NRI_SOCK="$LAB/run/nri.sock"
NRI_MODULE="github.com/containerd/nri"
GO_MIN="1.24.0" # go.mod's go line (NRI v0.12.2 asks for it)
VERSIONS=(v0.12.2 v0.8.0)
DEFAULT_VERSION="v0.12.2"
BUILD_FLAGS=(-trimpath)

modfile() { # version -> go.mod of that build
	case $1 in
	v0.12.2) echo go.mod ;;
	v0.8.0) echo go.v0.8.0.mod ;;
	*) die "unknown version '$1' (versions: ${VERSIONS[*]})" ;;
	esac
}
tags() { if [[ $1 == v0.8.0 ]]; then echo nri_v080; fi; }


go_env() {
	export GOTOOLCHAIN=local GOPATH="$GODIR" GOMODCACHE="$GODIR/pkg/mod" GOCACHE="$GODIR/cache"
	export GOFLAGS="-mod=readonly -modcacherw -buildvcs=false" CGO_ENABLED=0 GOWORK=off GOENV=off
}

# Everything a build depends on: Go, flags, the sources, the go.mod/go.sum
# of that version. Same fingerprint and binary => up to date.
fingerprint() { # version
	local mf
	mf="$(modfile "$1")"
	{
		echo "$GO_VERSION ${BUILD_FLAGS[*]} tags=$(tags "$1") modfile=$mf"
		(cd "$SRC" && sha256sum -- *.go "$mf" "${mf%.mod}.sum")
	} | sha256sum | cut -d' ' -f1
}

build_one() { # version
	local v="$1" mf dir bin fp t0 t1 info
	mf="$(modfile "$v")"
	dir="$BIN_ROOT/$v"
	bin="$dir/go-nri-plugin"
	fp="$(fingerprint "$v")"
	if [[ -x $bin && -f $dir/stamp ]] && [[ $(sed -n 1p "$dir/stamp") == "$fp" ]] &&
		[[ $(sed -n 2p "$dir/stamp") == "$(sha256sum <"$bin" | cut -d' ' -f1)" ]]; then
		log "$v up to date: $bin"
		return 0
	fi
	mkdir -p "$dir"
	local log_file="$WORK/build-$v.log"
	log "building $v ($NRI_MODULE $v, $mf) with $GO_VERSION (log $log_file)"
	t0="$(date +%s.%N)"
	# shellcheck disable=SC2046 # tags: none or one word
	if ! (cd "$SRC" && "$GO" build -modfile "$mf" $(tags "$v" | sed 's/^/-tags /') "${BUILD_FLAGS[@]}" -o "$bin.tmp" .) >"$log_file" 2>&1; then
		tail -n 20 "$log_file" >&2
		die "go build of $v failed (log $log_file); retry: sudo lab/go-nri-plugin.sh build $v"
	fi
	t1="$(date +%s.%N)"
	# The binary must carry the version's NRI library.
	info="$("$GO" version -m "$bin.tmp")"
	echo "$info" >>"$log_file"
	awk -v m="$NRI_MODULE" -v want="$v" '$1 == "dep" && $2 == m && $3 == want { f = 1 } END { exit !f }' <<<"$info" ||
		die "$bin.tmp was not built with $NRI_MODULE $v (go version -m $bin.tmp)"
	mv -f "$bin.tmp" "$bin"
	printf '%s\n%s\n' "$fp" "$(sha256sum <"$bin" | cut -d' ' -f1)" >"$dir/stamp"
	log "built $bin ($(stat -c %s "$bin") bytes) in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
}

cmd_build() {
	find_go "$GO_MIN" go-nri-plugin
	go_env
	local vs=("$@") v
	((${#vs[@]})) || vs=("${VERSIONS[@]}")
	for v in "${vs[@]}"; do modfile "$v" >/dev/null; done
	mkdir -p "$WORK"
	for v in "${vs[@]}"; do build_one "$v"; done
}

resolve() { # [version] -> binary path (may not exist)
	local v="${1:-$DEFAULT_VERSION}"
	modfile "$v" >/dev/null
	printf '%s\n' "$BIN_ROOT/$v/go-nri-plugin"
}

cmd_path() {
	[[ $# -le 1 ]] || die "usage: $0 path [VERSION]"
	local p
	p="$(resolve "${1:-}")"
	[[ -x $p ]] || die "$p not built: run 'sudo lab/go-nri-plugin.sh build ${1:-$DEFAULT_VERSION}'"
	printf '%s\n' "$p"
}

cmd_list() {
	local v
	for v in "${VERSIONS[@]}"; do
		if [[ -x $BIN_ROOT/$v/go-nri-plugin ]]; then echo "$v $BIN_ROOT/$v/go-nri-plugin"; else echo "$v (not built)"; fi
	done
}

cmd_run() {
	local v="$DEFAULT_VERSION" bin
	if [[ ${1:-} == v[0-9]* ]]; then
		v="$1"
		shift
	fi
	bin="$(cmd_path "$v")"
	[[ -S $NRI_SOCK ]] || die "NRI socket $NRI_SOCK missing: is the lab up (lab/lab.sh up)?"
	exec "$bin" -socket "$NRI_SOCK" "$@"
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

case "${1:-}" in
build)
	shift
	cmd_build "$@"
	;;
path)
	shift
	cmd_path "$@"
	;;
list) cmd_list ;;
run)
	shift
	cmd_run "$@"
	;;
-h | --help | help) usage 0 ;;
*) usage 2 >&2 ;;
esac
