# shellcheck shell=bash
# containerd 2.2 and 2.3 for the lab, built from the Go module
# github.com/containerd/containerd/v2 through the Go module proxy (sourced
# by lab.sh after common.sh; `install_ctrd_module RUNTIME` is its install
# step for NRI_TRACE_LAB_RUNTIME=containerd-2.2|containerd-2.3). No source
# is changed or kept: `go install PKG@VERSION` builds the release's own
# go.mod and go.sum (both releases have no replace or exclude directive,
# which `go install` would refuse), checked against the checksum database.
# Facts: docs/lab.md, "containerd 2.2 and 2.3".

CTRD_MODULE="github.com/containerd/containerd/v2"
# The newest release of each line the proxy served on 2026-11-25: v2.2.9
# (v2.2.1-v2.2.3, v2.2.8, v2.2.9 served) and v2.3.7 (v2.3.4-v2.3.7).
CTRD22_MODULE_VERSION="v2.2.9"
CTRD23_MODULE_VERSION="v2.3.7"
# The go line of each release's go.mod: the oldest Go that builds it
# (GOTOOLCHAIN=local: no other toolchain is ever fetched).
CTRD22_GO_MIN="1.25.0"
CTRD23_GO_MIN="1.26.8"
# As containerd's Makefile (GO_BUILDTAGS, SHIM_GO_BUILDTAGS) with no_btrfs:
# the btrfs snapshotter needs cgo and libbtrfs headers. The shim is built
# as the Makefile builds it: CGO_ENABLED=0 (static) and no_grpc.
CTRD_TAGS="urfave_cli_no_docs no_btrfs"
CTRD_SHIM_TAGS="urfave_cli_no_docs no_btrfs no_grpc"

# Where a module-built containerd lives: $LAB/ctrd22 or $LAB/ctrd23, with
# bin/ (containerd, containerd-shim-runc-v2, ctr, built-from: the recipe
# they were built by), go/ (GOPATH: the module cache, kept so a rebuild
# downloads nothing), build.log, and build.tmp/ while a build runs.
ctrd_module_dir() { # runtime
	case "$1" in
	containerd-2.2) echo "$LAB/ctrd22" ;;
	containerd-2.3) echo "$LAB/ctrd23" ;;
	*) die "ctrd_module_dir: $1 is not built from the Go module" ;;
	esac
}

# The release, the Go it needs and the version `containerd --version`
# reports for RUNTIME: CTRD_VERSION (v2.3.7), CTRD_GO_MIN, CTRD_DIR,
# CTRD_BIN.
ctrd_module_select() { # runtime
	case "$1" in
	containerd-2.2) CTRD_VERSION="$CTRD22_MODULE_VERSION" CTRD_GO_MIN="$CTRD22_GO_MIN" ;;
	containerd-2.3) CTRD_VERSION="$CTRD23_MODULE_VERSION" CTRD_GO_MIN="$CTRD23_GO_MIN" ;;
	*) die "ctrd_module_select: $1 is not built from the Go module" ;;
	esac
	CTRD_DIR="$(ctrd_module_dir "$1")"
	CTRD_BIN="$CTRD_DIR/bin"
}


# What the binaries are built by: module and version, Go, tags, and a hash
# of the functions that build them (a change of recipe builds again).
ctrd_recipe() {
	local h
	h="$(declare -f ctrd_build_steps ctrd_ldflags | sha256sum | cut -c1-16)"
	echo "$CTRD_MODULE@$CTRD_VERSION; $GO_VERSION; tags $CTRD_TAGS; shim tags $CTRD_SHIM_TAGS, CGO_ENABLED=0; recipe $h"
}

# The Makefile's GO_LDFLAGS (version, revision, package; -s -w as a build
# without GODEBUG): `containerd --version` and the version containerd gives
# NRI plugins in Configure are then the release's, as in a release build.
ctrd_ldflags() { # revision
	local v="$CTRD_MODULE/version"
	echo "-X $v.Version=$CTRD_VERSION -X $v.Revision=$1 -X $v.Package=$CTRD_MODULE -s -w"
}

# One build command, its output appended to the build log; on failure the
# runtime, the command, the log and how to retry.
ctrd_step() { # runtime command...
	local rt="$1"
	shift
	printf '\n+ %s\n' "$*" >>"$CTRD_BUILD_LOG"
	"$@" >>"$CTRD_BUILD_LOG" 2>&1 || ctrd_build_failed "$rt" "$*"
}
ctrd_build_failed() { # runtime what-failed
	tail -n 30 "$CTRD_BUILD_LOG" >&2
	die "building $1 ($CTRD_MODULE@$CTRD_VERSION) failed at: $2"$'\n'"  log: $CTRD_BUILD_LOG"$'\n'"  retry: cargo xtask lab --runtime $1 install (or: sudo NRI_TRACE_LAB_RUNTIME=$1 lab/lab.sh install)"$'\n'"  the binaries in $CTRD_BIN (if any) are as they were"
}

# The build, in $2 (a fresh temp dir): GOBIN there, the build cache there
# (removed with it), the module cache in $CTRD_DIR/go (kept). The release
# commit (from the proxy's origin record, for version.Revision) comes from
# `go mod download -json`, which also says plainly when the proxy does not
# serve the version.
ctrd_build_steps() { # runtime tmp
	local rt="$1" tmp="$2" json rev
	export GOTOOLCHAIN=local GOWORK=off GOPATH="$CTRD_DIR/go" GOMODCACHE="$CTRD_DIR/go/pkg/mod"
	export GOCACHE="$tmp/cache" GOBIN="$tmp/bin" GOFLAGS="-modcacherw -buildvcs=false"
	# shellcheck disable=SC2164 # lab.sh's set -e ends the build at a failed cd
	cd "$tmp"
	printf '\n+ %s mod download -json %s\n' "$GO" "$CTRD_MODULE@$CTRD_VERSION" >>"$CTRD_BUILD_LOG"
	json="$("$GO" mod download -json "$CTRD_MODULE@$CTRD_VERSION" 2>>"$CTRD_BUILD_LOG")" || {
		echo "$json" >>"$CTRD_BUILD_LOG"
		ctrd_build_failed "$rt" "$GO mod download $CTRD_MODULE@$CTRD_VERSION: $(python -c 'import json,sys; print(json.load(sys.stdin).get("Error", ""))' <<<"$json" 2>/dev/null)"
	}
	echo "$json" >>"$CTRD_BUILD_LOG"
	rev="$(python -c 'import json,sys; print((json.load(sys.stdin).get("Origin") or {}).get("Hash", ""))' <<<"$json")" || rev=""
	[[ $rev =~ ^[0-9a-f]{40}$ ]] || rev=""
	# containerd and ctr: cgo as the Makefile leaves it (Go's default).
	ctrd_step "$rt" "$GO" install -trimpath -tags "$CTRD_TAGS" -ldflags "$(ctrd_ldflags "$rev")" \
		"$CTRD_MODULE/cmd/containerd@$CTRD_VERSION" "$CTRD_MODULE/cmd/ctr@$CTRD_VERSION"
	# The shim: static, without cgo and gRPC (ttrpc only).
	ctrd_step "$rt" env CGO_ENABLED=0 "$GO" install -trimpath -tags "$CTRD_SHIM_TAGS" -ldflags "$(ctrd_ldflags "$rev")" \
		"$CTRD_MODULE/cmd/containerd-shim-runc-v2@$CTRD_VERSION"
	local b
	for b in containerd ctr containerd-shim-runc-v2; do
		[[ -x $tmp/bin/$b ]] || ctrd_build_failed "$rt" "go install left no $b in $tmp/bin"
	done
	ctrd_step "$rt" "$tmp/bin/containerd" --version
	[[ $("$tmp/bin/containerd" --version) == "containerd $CTRD_MODULE $CTRD_VERSION"* ]] ||
		ctrd_build_failed "$rt" "$tmp/bin/containerd --version: not 'containerd $CTRD_MODULE $CTRD_VERSION ...'"
	ctrd_step "$rt" "$tmp/bin/containerd-shim-runc-v2" -v
}

# Build containerd, containerd-shim-runc-v2 and ctr for RUNTIME into
# $CTRD_BIN, unless they are there built by this very recipe (then this is
# a no-op). Built in a temp dir and moved in whole: a failed build leaves
# the binaries as they were. Never while the lab runs this runtime (its
# containerd would start the new shim by name).
install_ctrd_module() { # containerd-2.2 | containerd-2.3
	local rt="$1" want pid
	ctrd_module_select "$rt"
	find_go "$CTRD_GO_MIN" "$rt ($CTRD_MODULE@$CTRD_VERSION)"
	want="$(ctrd_recipe)"
	if [[ -f $CTRD_BIN/built-from && $(cat "$CTRD_BIN/built-from") == "$want" &&
		-x $CTRD_BIN/containerd && -x $CTRD_BIN/containerd-shim-runc-v2 && -x $CTRD_BIN/ctr ]]; then
		log "$rt already built ($CTRD_BIN: $want)"
		return 0
	fi
	if pid="$(our_pid)" && [[ $(cat "$RUNTIME_FILE" 2>/dev/null) == "$rt" ]]; then
		die "the lab runs $rt (pid $pid) from $CTRD_BIN: 'lab.sh down' first, then install again (its binaries are not replaced under a running containerd)"
	fi
	local t0=$SECONDS tmp="$CTRD_DIR/build.tmp"
	CTRD_BUILD_LOG="$CTRD_DIR/build.log"
	mkdir -p "$CTRD_DIR"
	rm -rf "$tmp" "$CTRD_BIN.old"
	mkdir -p "$tmp/bin"
	: >"$CTRD_BUILD_LOG"
	log "building $rt from $CTRD_MODULE@$CTRD_VERSION ($GO_VERSION; cold: a few minutes; log $CTRD_BUILD_LOG)"
	(ctrd_build_steps "$rt" "$tmp")
	echo "$want" >"$tmp/bin/built-from"
	if [[ -e $CTRD_BIN ]]; then mv "$CTRD_BIN" "$CTRD_BIN.old"; fi
	mv "$tmp/bin" "$CTRD_BIN"
	rm -rf "$CTRD_BIN.old" "$tmp"
	log "built containerd, containerd-shim-runc-v2, ctr ($CTRD_VERSION) in $((SECONDS - t0)) s ($CTRD_BIN)"
}
