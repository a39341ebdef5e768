#!/usr/bin/env bash
# nri-trace lab: a Kubernetes node's own programs, built from their Go
# modules through the Go module proxy: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kubectl (issue 32's
# one-node cluster).
#
#   k8s.sh install   build them into $LAB/k8s/bin (nothing to do when they
#                    are there, built by this recipe); prints the directory
#   k8s.sh path      print the directory, or fail
#   k8s.sh versions  what each binary says it is
#
# Neither project's module builds by `go install PKG@VERSION`: both go.mod
# files carry replace directives, which `go install` refuses
# (REAL-PEERS.md). Each is built from a wrapper module written here at
# build time, as projects that import them do:
# - Kubernetes: k8s.io/kubernetes requires each of its staging modules
#   (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and replaces it with
#   ./staging/src/k8s.io/NAME, which a dependency's replace cannot reach.
#   The wrapper requires k8s.io/kubernetes vX.Y.Z and replaces each staging
#   module with its published k8s.io/NAME v0.Y.Z (the list is read from
#   the release's own go.mod, so a release that adds one is followed).
# - etcd: go.etcd.io/etcd/server/v3's replaces point at its sibling
#   directories, but its requires name published versions, so a wrapper
#   that only requires it builds its main package.
# go.sum is made by the go command (-mod=mod) and checked against the
# checksum database. No source is changed or kept: the module cache only.
#
# Environment:
#   NRI_TRACE_LAB_DIR   lab dir (default /var/lib/nri-trace-lab)
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034 # read by common.sh
LAB_TAG="k8s.sh"
# shellcheck source=lab/common.sh
. "$HERE/common.sh"

# The newest Kubernetes release the proxy served on 2026-11-30 (v1.37.2;
# v1.38.0 was at beta.0). Its go.mod says `go 1.26.0`: the machine's Go
# 1.26.8 builds it, no other toolchain is fetched (GOTOOLCHAIN=local).
K8S_MODULE="k8s.io/kubernetes"
K8S_VERSION="v1.37.2"
# etcd: the newest v3.6 (v3.6.16; the issue asks for v3.6, which
# Kubernetes 1.37 supports; its own go.mod names the 3.7 client).
ETCD_MODULE="go.etcd.io/etcd/server/v3"
ETCD_VERSION="v3.6.16"
GO_MIN="1.26.0" # the newer of the two go lines (etcd v3.6.16: 1.24.0)
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

DIR="$LAB/k8s"
BIN_DIR="$DIR/bin"
BUILT_FROM="$BIN_DIR/built-from" # the recipe the binaries were built by
GODIR="$DIR/go"                   # GOMODCACHE (kept) and GOCACHE (removed after a build)
BUILD_LOG="$DIR/build.log"

# Messages go to stderr: stdout is the directory's path.
log() { printf '%s: %s\n' "$LAB_TAG" "$*" >&2; }

# Modules, toolchain, flags and a hash of the build functions: any change
# builds again.
recipe() {
	local h
	h="$(declare -f build_steps build_k8s build_etcd k8s_ldflags wrapper_k8s go_env | sha256sum | cut -c1-16)"
	echo "$K8S_MODULE@$K8S_VERSION, $ETCD_MODULE@$ETCD_VERSION; $GO_VERSION; CGO_ENABLED=0; recipe $h"
}

# One step of the build, its output appended to the build log; on failure
# the command, the log and how to retry.
step() {
	printf '\n+ %s\n' "$*" >>"$BUILD_LOG"
	local what="$*"
	"$@" >>"$BUILD_LOG" 2>&1 || build_failed "${what/#go_env /go }"
}
build_failed() { # the command that failed
	tail -n 30 "$BUILD_LOG" >&2
	die "building Kubernetes $K8S_VERSION / etcd $ETCD_VERSION failed at: $1"$'\n'"  log: $BUILD_LOG"$'\n'"  retry: sudo lab/k8s.sh install (a download that failed half-way resumes from the module cache)"
}

# `go ARG...` with the environment cleared (a user's GOFLAGS or go env file
# must not change the build) but for the proxy settings, which are the
# machine's to choose. CGO_ENABLED=0: static binaries, as Kubernetes'
# and etcd's releases are.
go_env() {
	local e=(PATH="$(dirname "$GO"):/usr/bin:/bin" HOME="$DIR"
		GOENV=off GOWORK=off GOTOOLCHAIN=local
		GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}" GOSUMDB="${GOSUMDB:-sum.golang.org}"
		GONOSUMDB="${GONOSUMDB:-}" GOPRIVATE="${GOPRIVATE:-}"
		GOMODCACHE="$GODIR/mod" GOCACHE="$GODIR/cache" GOPATH="$GODIR/gopath"
		GOFLAGS="-modcacherw -buildvcs=false -mod=mod" CGO_ENABLED=0)
	printf '  env: %s\n' "${e[*]}"
	env -i "${e[@]}" "$GO" "$@"
}

# The version Kubernetes' hack/lib/version.sh links into
# k8s.io/component-base/version (and client-go's copy, which kubectl
# prints as its client version): what `kubectl version` and the API
# server's /version report. The commit is not known from a module zip.
k8s_ldflags() {
	local v="${K8S_VERSION#v}" p f=""
	local major="${v%%.*}" minor="${v#*.}"
	minor="${minor%%.*}"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		f+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		f+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	echo "-s -w$f"
}

# The Kubernetes wrapper's go.mod in $1: the release required, each staging
# module it replaces with ./staging/... replaced with its own release.
wrapper_k8s() { # dir
	local dir="$1" minor staging m
	minor="v0.${K8S_VERSION#v1.}"
	step go_env mod download "$K8S_MODULE@$K8S_VERSION"
	staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// {print $1}' \
		"$GODIR/mod/cache/download/$K8S_MODULE/@v/$K8S_VERSION.mod")"
	[[ -n $staging ]] || build_failed "no staging replaces in $K8S_MODULE@$K8S_VERSION's go.mod"
	{
		echo "module nri-trace-lab/k8s"
		echo
		echo "go 1.26.0"
		echo
		echo "require $K8S_MODULE $K8S_VERSION"
		echo
		echo "replace ("
		for m in $staging; do echo "	$m => $m $minor"; done
		echo ")"
	} >"$dir/go.mod"
	printf '\n+ wrapper go.mod\n' >>"$BUILD_LOG"
	cat "$dir/go.mod" >>"$BUILD_LOG"
}

build_k8s() { # temp dir
	local tmp="$1" c pkgs=()
	mkdir -p "$tmp/k8s"
	wrapper_k8s "$tmp/k8s"
	for c in "${K8S_CMDS[@]}"; do pkgs+=("$K8S_MODULE/cmd/$c"); done
	(cd "$tmp/k8s" && step go_env build -trimpath -ldflags "$(k8s_ldflags)" -o "$tmp/bin/" "${pkgs[@]}")
	# No staging module left at v0.0.0: each came from its release.
	(cd "$tmp/k8s" && go_env list -m all 2>>"$BUILD_LOG") >"$tmp/k8s/modules"
	if grep -q ' v0\.0\.0$' "$tmp/k8s/modules"; then
		build_failed "modules left at v0.0.0: $(grep ' v0\.0\.0$' "$tmp/k8s/modules" | tr '\n' ' ')"
	fi
}

build_etcd() { # temp dir
	local tmp="$1"
	mkdir -p "$tmp/etcd"
	printf 'module nri-trace-lab/etcd\n\ngo 1.24.0\n\nrequire %s %s\n' "$ETCD_MODULE" "$ETCD_VERSION" >"$tmp/etcd/go.mod"
	(cd "$tmp/etcd" && step go_env build -trimpath -ldflags "-s -w" -o "$tmp/bin/etcd" "$ETCD_MODULE")
}

# The build, into $1/bin; each binary then says its version.
build_steps() { # temp dir
	local tmp="$1" c
	mkdir -p "$tmp/bin" "$GODIR/mod" "$GODIR/cache"
	build_etcd "$tmp"
	build_k8s "$tmp"
	# Each output taken whole before it is matched: `grep -q` in a pipe
	# would close it early, and pipefail would take the writer's SIGPIPE
	# for a failure.
	local out
	step "$tmp/bin/etcd" --version
	out="$("$tmp/bin/etcd" --version)"
	[[ $out == *$'\n'"etcd Version: ${ETCD_VERSION#v}"$'\n'* || $out == "etcd Version: ${ETCD_VERSION#v}"$'\n'* ]] ||
		build_failed "$tmp/bin/etcd --version: not etcd ${ETCD_VERSION#v}"
	for c in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
		step "$tmp/bin/$c" --version
		[[ $("$tmp/bin/$c" --version) == "Kubernetes $K8S_VERSION" ]] ||
			build_failed "$tmp/bin/$c --version: not 'Kubernetes $K8S_VERSION'"
	done
	step "$tmp/bin/kubectl" version --client
	out="$("$tmp/bin/kubectl" version --client)"
	[[ $out == "Client Version: $K8S_VERSION"$'\n'* ]] ||
		build_failed "$tmp/bin/kubectl version --client: not $K8S_VERSION"
}

built() {
	local c
	[[ -f $BUILT_FROM && $(cat "$BUILT_FROM") == "$1" && -x $BIN_DIR/etcd ]] || return 1
	for c in "${K8S_CMDS[@]}"; do [[ -x $BIN_DIR/$c ]] || return 1; done
}

# Build unless $BIN_DIR is there built by this recipe. In a temp dir, then
# moved in whole: a failed build leaves the binaries as they were.
build() {
	find_go "$GO_MIN" "Kubernetes $K8S_VERSION"
	local want
	want="$(recipe)"
	if built "$want"; then
		log "Kubernetes $K8S_VERSION and etcd $ETCD_VERSION already built ($want)"
		printf '%s\n' "$BIN_DIR"
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
		log "Kubernetes $K8S_VERSION and etcd $ETCD_VERSION already built ($want)"
		printf '%s\n' "$BIN_DIR"
		return 0
	fi
	local t0=$SECONDS tmp="$DIR/build.tmp"
	rm -rf "$tmp" "$BIN_DIR.old"
	mkdir -p "$tmp"
	: >"$BUILD_LOG"
	log "building Kubernetes $K8S_VERSION (${K8S_CMDS[*]}) and etcd $ETCD_VERSION ($GO_VERSION; log $BUILD_LOG)"
	(build_steps "$tmp")
	echo "$want" >"$tmp/bin/built-from"
	if [[ -e $BIN_DIR ]]; then mv "$BIN_DIR" "$BIN_DIR.old"; fi
	mv "$tmp/bin" "$BIN_DIR"
	# Kept: the module cache (a rebuild downloads nothing). Removed: the
	# build cache, not needed to run.
	rm -rf "$BIN_DIR.old" "$tmp" "$GODIR/cache" "$GODIR/gopath"
	log "built ${K8S_CMDS[*]} and etcd in $((SECONDS - t0)) s ($BIN_DIR)"
	exec {lock}>&-
	printf '%s\n' "$BIN_DIR"
}

cmd_path() {
	find_go "$GO_MIN" "Kubernetes $K8S_VERSION"
	built "$(recipe)" || die "$BIN_DIR not built by this recipe: run 'sudo lab/k8s.sh install'"
	printf '%s\n' "$BIN_DIR"
}

cmd_versions() {
	local d c
	d="$(cmd_path)"
	"$d/etcd" --version | sed -n 1p
	for c in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
		printf '%s: %s\n' "$c" "$("$d/$c" --version)"
	done
	"$d/kubectl" version --client | sed -n 1p
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

case "${1:-}" in
install) build ;;
path) cmd_path ;;
versions) cmd_versions ;;
-h | --help | help) usage 0 ;;
*) usage 2 >&2 ;;
esac
