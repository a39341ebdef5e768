#!/usr/bin/env bash
# nri-trace lab: crictl, the CRI CLI an SRE reaches for on a node, built from
# its Go module (sigs.k8s.io/cri-tools/cmd/crictl) through the Go module proxy.
#
#   crictl.sh install   build crictl into $LAB/crictl/bin (nothing to do when
#                       it is there, built by this recipe); prints its path
#   crictl.sh path      print the binary's path, or fail
#   crictl.sh run ARG...
#                       run it against the lab's runtime, e.g. `run pods`
#                       (--runtime-endpoint and --image-endpoint from the
#                       runtime that runs: containerd.sock or crio.sock)
#
# crictl is not packaged in Debian. The module has no replace or exclude
# directive in its go.mod, so `go install MODULE/cmd/crictl@VERSION` builds
# it as released (REAL-PEERS.md's rule: `go install pkg@version` refuses
# only modules that have them). See docs/lab.md, "crictl".
#
# Environment:
#   NRI_TRACE_LAB_DIR   lab dir (default /var/lib/nri-trace-lab)
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034 # read by common.sh
LAB_TAG="crictl.sh"
# shellcheck source=lab/common.sh
. "$HERE/common.sh"

# The newest release the proxy serves here (2026-11-28: v1.34.0 and v1.37.0
# are listed; v1.35.0 answers 403 "This module version is not available").
# v1.37.0's go.mod says `go 1.26.6`, under the machine's Go 1.26.8, so no
# other toolchain is needed (GOTOOLCHAIN=local refuses to fetch one).
MODULE="sigs.k8s.io/cri-tools"
MODULE_VERSION="v1.37.0"
VERSION="1.37.0" # what `crictl --version` must say
GO_MIN="1.26.6"  # the go line of its go.mod
# cri-tools' Makefile: CGO_ENABLED=0, -trimpath, and the version linked into
# pkg/version (its `git describe` without the v, which a module zip cannot
# run: the tag is given here). -s -w: no symbol table, as the releases.
GO_LDFLAGS="-s -w -X $MODULE/pkg/version.Version=$VERSION"

DIR="$LAB/crictl"
BIN_DIR="$DIR/bin"
BIN="$BIN_DIR/crictl"
BUILT_FROM="$BIN_DIR/built-from" # the recipe the binary was built by
GODIR="$DIR/go"                   # GOMODCACHE (kept) and GOCACHE (removed after a build)
BUILD_LOG="$DIR/build.log"

# Messages go to stderr: stdout is the binary's path.
log() { printf '%s: %s\n' "$LAB_TAG" "$*" >&2; }

# Module, toolchain, flags and a hash of the build functions: any change
# builds again.
recipe() {
	local h
	h="$(declare -f build build_steps go_env | sha256sum | cut -c1-16)"
	echo "$MODULE/cmd/crictl@$MODULE_VERSION; $GO_VERSION; CGO_ENABLED=0; ldflags $GO_LDFLAGS; recipe $h"
}

# One step of the build, its output appended to the build log; on failure
# the command, the log and how to retry.
step() {
	printf '\n+ %s\n' "$*" >>"$BUILD_LOG"
	local what="$*"
	"$@" >>"$BUILD_LOG" 2>&1 || build_failed "${what/#go_env /go }"
}
build_failed() { # the command that failed
	tail -n 20 "$BUILD_LOG" >&2
	die "building crictl $VERSION ($MODULE@$MODULE_VERSION) failed at: $1"$'\n'"  log: $BUILD_LOG"$'\n'"  retry: sudo lab/crictl.sh install (a download that failed half-way resumes from the module cache)"
}

# `go ARG...` with the environment cleared (a user's GOFLAGS or go env file
# must not change the build) but for the proxy settings, which are the
# machine's to choose; binaries to $GOBIN. The environment is in the log.
go_env() {
	local e=(PATH="$(dirname "$GO"):/usr/bin:/bin" HOME="$DIR"
		GOENV=off GOWORK=off GOTOOLCHAIN=local
		GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}" GOSUMDB="${GOSUMDB:-sum.golang.org}"
		GONOSUMDB="${GONOSUMDB:-}" GOPRIVATE="${GOPRIVATE:-}"
		GOMODCACHE="$GODIR/mod" GOCACHE="$GODIR/cache" GOPATH="$GODIR/gopath"
		GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0 GOBIN="$GOBIN")
	printf '  env: %s\n' "${e[*]}"
	env -i "${e[@]}" "$GO" "$@"
}

# The build, into $1/bin.
build_steps() { # temp dir
	local tmp="$1"
	mkdir -p "$tmp/bin" "$GODIR/mod" "$GODIR/cache"
	GOBIN="$tmp/bin"
	step go_env install -trimpath -ldflags "$GO_LDFLAGS" "$MODULE/cmd/crictl@$MODULE_VERSION"
	step "$tmp/bin/crictl" --version
	"$tmp/bin/crictl" --version | grep -qx "crictl version $VERSION" ||
		build_failed "$tmp/bin/crictl --version: not 'crictl version $VERSION'"
}

# Build unless $BIN is there built by this recipe. In a temp dir, then moved
# in whole: a failed build leaves a working crictl as it was.
build() {
	# The Go toolchain (common.sh): `go` on PATH, else /usr/local/go, at
	# least the go line of the module's go.mod, never another fetched.
	find_go "$GO_MIN" "crictl $VERSION"
	local want
	want="$(recipe)"
	if [[ -f $BUILT_FROM && $(cat "$BUILT_FROM") == "$want" && -x $BIN ]]; then
		log "crictl $VERSION already built ($want)"
		printf '%s\n' "$BIN"
		return 0
	fi
	[[ $(id -u) -eq 0 ]] || die "must run as root (it writes under $DIR)"
	mkdir -p "$DIR"
	# One build at a time: two tests asking at once on a cold machine (the
	# lab's two crictl tests, before either holds the lab lock) shared
	# build.tmp, and the second's `rm -rf` took the first's binary from
	# under its version check (CI on a cold machine, 2026-11-29). The
	# second waits here, then finds crictl built.
	local lock
	exec {lock}>"$DIR/build.lock"
	flock "$lock"
	if [[ -f $BUILT_FROM && $(cat "$BUILT_FROM") == "$want" && -x $BIN ]]; then
		exec {lock}>&-
		log "crictl $VERSION already built ($want)"
		printf '%s\n' "$BIN"
		return 0
	fi
	local t0=$SECONDS tmp="$DIR/build.tmp"
	rm -rf "$tmp" "$BIN_DIR.old"
	mkdir -p "$tmp"
	: >"$BUILD_LOG"
	log "building crictl $VERSION from $MODULE@$MODULE_VERSION ($GO_VERSION; cold: about 3 min; log $BUILD_LOG)"
	(build_steps "$tmp")
	echo "$want" >"$tmp/bin/built-from"
	if [[ -e $BIN_DIR ]]; then mv "$BIN_DIR" "$BIN_DIR.old"; fi
	mv "$tmp/bin" "$BIN_DIR"
	# Kept: the module cache (a rebuild downloads nothing). Removed: the
	# build cache, not needed to run.
	rm -rf "$BIN_DIR.old" "$tmp" "$GODIR/cache" "$GODIR/gopath"
	log "built $BIN in $((SECONDS - t0)) s"
	exec {lock}>&-
	printf '%s\n' "$BIN"
}

cmd_path() {
	[[ -x $BIN ]] || die "$BIN not built: run 'sudo lab/crictl.sh install'"
	printf '%s\n' "$BIN"
}

# The lab's CRI socket: CRI-O's when $LAB/runtime says crio, else
# containerd's (lab.sh writes the runtime it started there).
cmd_run() {
	[[ -x $BIN ]] || die "$BIN not built: run 'sudo lab/crictl.sh install'"
	local sock="$LAB/run/containerd.sock"
	[[ $(cat "$LAB/runtime" 2>/dev/null) != crio ]] || sock="$LAB/run/crio.sock"
	exec "$BIN" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" "$@"
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

case "${1:-}" in
install) build ;;
path) cmd_path ;;
run)
	shift
	cmd_run "$@"
	;;
-h | --help | help) usage 0 ;;
*) usage 2 >&2 ;;
esac
