#!/usr/bin/env bash
# nri-trace lab: the NRI project's OWN sample plugins, as third-party peers.
#
#   nri-plugins.sh install        what `build` needs (Debian's NRI 0.8.0 source
#                                 package), then `build`
#   nri-plugins.sh build [SET]    build set v0.8.0 (or SET): idempotent, no
#                                 work when built by the same recipe
#   nri-plugins.sh path NAME[@SET]  print a binary's path, or fail
#   nri-plugins.sh list           the sets, their plugins, built or not
#   nri-plugins.sh versions       the NRI versions the Go module proxy serves
#   nri-plugins.sh run NAME[@SET] [FLAG...]
#                                 run it as an EXTERNAL plugin on the lab's
#                                 NRI socket (foreground); the plugin process
#                                 dials the socket itself, e.g.
#                                 run logger -idx 70 -name old-logger
#                                 (see cmd_run)
#
# Sets (SET defaults to v0.8.0):
#   v0.8.0   logger template: plugins/NAME of Debian's source package
#            golang-github-containerd-nri 0.8.0-1 (sid; the .orig tarball
#            verified against apt's signed index), with
#            github.com/containerd/nri v0.8.0 from the proxy: a stub that
#            predates NRI 0.12's per-event RPCs (StateChange only)
#   v0.12.2  logger differ device-injector ulimit-adjuster template
#            hook-injector network-device-injector: each plugin's own module
#            (github.com/containerd/nri/plugins/NAME, no tags of its own:
#            the pseudo-version of the v0.12.2 release commit). NOT BUILDABLE
#            HERE: the Go module proxy answers 403 Forbidden for these
#            modules, and `build v0.12.2` stops at once saying so. The lab's
#            peer on the v0.12 stub is lab/go-nri-plugin.sh.
#
# Each plugin is built by a small wrapper module generated under
# $LAB/nri-plugins/build.tmp that requires the plugin module and the NRI
# module at the set's version (the plugin's own `replace ../..` is ignored
# in a dependency). Binaries: $LAB/nri-plugins/bin/SET/NAME.
# See docs/lab.md, "The NRI project's plugins".
#
# Environment:
#   NRI_TRACE_LAB_DIR   lab dir (default /var/lib/nri-trace-lab)
#   GOPROXY, GOSUMDB, GONOSUMDB ...  as the go command reads them
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
# shellcheck disable=SC2034 # read by common.sh
LAB_TAG="nri-plugins"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lab/common.sh
. "$HERE/common.sh"

PDIR="$LAB/nri-plugins"
BIN_ROOT="$PDIR/bin"
GODIR="$PDIR/go" # GOPATH: module cache (kept), build cache (removed after a build)
NRI_SOCK="$LAB/run/nri.sock"
NRI_MODULE="github.com/containerd/nri"
GO_MIN="1.24.2" # the highest go line of the plugins' go.mod files (hook-injector)

# Set v0.12.2: the plugin modules have no tags; the release tag v0.12.2 is
# commit 4db964d9dc19 (committed 2026-08-19T15:27:33Z, the time the proxy
# gives for the tag), so each plugin module is at this pseudo-version.
NEW_SET="v0.12.2"
NEW_NRI="v0.12.2"
NEW_COMMIT="4db964d9dc19"
NEW_TIME="20260819152733"
NEW_PSEUDO="v0.0.0-$NEW_TIME-$NEW_COMMIT"
NEW_PLUGINS=(logger differ device-injector ulimit-adjuster template hook-injector network-device-injector)

# Set v0.8.0: Debian's source package (sid) of NRI 0.8.0 has plugins/ (its
# binary package does not); its .dsc and .debian.tar.xz answer 404 on this
# machine's mirror, the .orig tarball (upstream's v0.8.0 tree) downloads.
OLD_SET="v0.8.0"
OLD_NRI="v0.8.0"
OLD_PLUGINS=(logger template)
DEB_SRC="golang-github-containerd-nri"
DEB_SRC_VERSION="0.8.0-1"
DEB_ORIG="${DEB_SRC}_0.8.0.orig.tar.gz"
DEB_ORIG_SHA256="a833f78b1fe9c5b97a3908d1179bb330e77831c62a0dc8b907ece52475f6c886"
APT_DIR="$PDIR/apt" # a private apt configuration: deb-src sid only
OLD_SRC="$PDIR/src/${DEB_SRC}_$DEB_SRC_VERSION"

BUILD_FLAGS=(-trimpath)

# ---------------------------------------------------------------- helpers

set_plugins() { # set -> names
	case $1 in
	"$NEW_SET") echo "${NEW_PLUGINS[*]}" ;;
	"$OLD_SET") echo "${OLD_PLUGINS[*]}" ;;
	*) die "unknown set '$1' (sets: $NEW_SET $OLD_SET)" ;;
	esac
}
set_nri() { if [[ $1 == "$NEW_SET" ]]; then echo "$NEW_NRI"; else echo "$OLD_NRI"; fi; }


go_env() {
	export GOTOOLCHAIN=local GOPATH="$GODIR" GOMODCACHE="$GODIR/pkg/mod" GOCACHE="$GODIR/cache"
	export GOFLAGS="-mod=mod -modcacherw -buildvcs=false" CGO_ENABLED=0 GOWORK=off
}

# The recipe a set's binaries are built by; any change builds again.
recipe() { # set
	local h src
	h="$(declare -f build_set build_plugin write_wrapper | sha256sum | cut -c1-16)"
	if [[ $1 == "$NEW_SET" ]]; then
		src="$NRI_MODULE/plugins/*@$NEW_PSEUDO (proxy)"
	else
		src="Debian $DEB_SRC $DEB_SRC_VERSION ($DEB_ORIG sha256 $DEB_ORIG_SHA256)"
	fi
	echo "set $1: $(set_plugins "$1"); plugins $src; $NRI_MODULE $(set_nri "$1"); $GO_VERSION; flags ${BUILD_FLAGS[*]}; recipe $h"
}

step() {
	printf '\n+ %s\n' "$*" >>"$BUILD_LOG"
	"$@" >>"$BUILD_LOG" 2>&1 || build_failed "$*"
}
build_failed() { # what failed [hint]
	tail -n 15 "$BUILD_LOG" >&2
	die "building the NRI plugins of set $SET failed at: $1${2:+$'\n'  $2}"$'\n'"  log: $BUILD_LOG"$'\n'"  retry: sudo lab/nri-plugins.sh build $SET"
}

# ---------------------------------------------------------------- install

# A private apt configuration that knows sid's SOURCE packages only: neither
# the system's apt configuration nor its lists are read or changed.
write_apt_config() {
	mkdir -p "$APT_DIR"/etc/{apt.conf.d,preferences.d,sources.list.d} "$APT_DIR"/state/lists/partial \
		"$APT_DIR"/cache/archives/partial
	[[ -f $APT_DIR/status ]] || : >"$APT_DIR/status"
	cat >"$APT_DIR/etc/sources.list" <<-EOF
		# nri-trace lab/nri-plugins.sh: Debian sid SOURCES, for NRI's plugins/ (private apt config).
		deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
	EOF
	cat >"$APT_DIR/apt.conf" <<-EOF
		Dir::Etc::main "$APT_DIR/etc/apt.conf";
		Dir::Etc::parts "$APT_DIR/etc/apt.conf.d";
		Dir::Etc::sourcelist "$APT_DIR/etc/sources.list";
		Dir::Etc::sourceparts "$APT_DIR/etc/sources.list.d";
		Dir::Etc::preferences "$APT_DIR/etc/preferences";
		Dir::Etc::preferencesparts "$APT_DIR/etc/preferences.d";
		Dir::State "$APT_DIR/state";
		Dir::State::status "$APT_DIR/status";
		Dir::Cache "$APT_DIR/cache";
		APT::Architecture "amd64";
		Acquire::Languages "none";
		APT::Sandbox::User "root";
		// This machine kind's clock runs ahead of the archive's Release dates.
		Acquire::Check-Valid-Until "false";
		Acquire::Check-Date "false";
	EOF
}

# The .orig tarball of Debian's NRI 0.8.0 source package, checked against
# apt's signed Sources index and the SHA-256 pinned here, unpacked into
# $OLD_SRC.
fetch_old_source() {
	if [[ -f $OLD_SRC/plugins/logger/nri-logger.go && -f $OLD_SRC/plugins/template/plugin.go ]]; then
		log "source $DEB_SRC $DEB_SRC_VERSION already unpacked in $OLD_SRC"
		return 0
	fi
	command -v apt-get >/dev/null || die "apt-get missing: the v0.8.0 set comes from Debian's source package $DEB_SRC"
	write_apt_config
	export APT_CONFIG="$APT_DIR/apt.conf"
	log "apt-get update (private config $APT_CONFIG: deb-src sid only)"
	apt-get update -q >"$PDIR/apt-update.log" 2>&1 ||
		die "apt-get update failed (APT_CONFIG=$APT_CONFIG apt-get update; log $PDIR/apt-update.log); retry: sudo lab/nri-plugins.sh install"
	local sum ver
	ver="$(apt-cache showsrc --only-source "$DEB_SRC" | awk '/^Version:/ {print $2}' | sort -V | tail -n1)"
	sum="$(apt-cache showsrc --only-source "$DEB_SRC" | awk -v want="$DEB_SRC_VERSION" -v f="$DEB_ORIG" '
		/^Version:/ { v = $2 }
		/^[A-Za-z0-9-]+:/ { in_sums = ($1 == "Checksums-Sha256:"); next }
		in_sums && v == want && $3 == f { print $1 }')"
	[[ -n $sum ]] ||
		die "sid has $DEB_SRC ${ver:-(none)}, not $DEB_SRC_VERSION: point $APT_DIR/etc/sources.list at a snapshot.debian.org date that has $DEB_SRC_VERSION, or change DEB_SRC_VERSION in $0"
	[[ $sum == "$DEB_ORIG_SHA256" ]] ||
		die "apt's index gives $DEB_ORIG sha256 $sum, this script pins $DEB_ORIG_SHA256"
	local dl="$PDIR/src/download"
	mkdir -p "$dl"
	# The whole source package fails when one file does: on this machine's
	# mirror the .dsc and .debian.tar.xz answer 404. Only the .orig is used.
	log "apt-get source --download-only $DEB_SRC=$DEB_SRC_VERSION (into $dl)"
	(cd "$dl" && apt-get source -q --download-only "$DEB_SRC=$DEB_SRC_VERSION") >"$dl/apt-source.log" 2>&1 || true
	[[ -f $dl/$DEB_ORIG ]] ||
		die "could not download $DEB_ORIG (APT_CONFIG=$APT_CONFIG apt-get source --download-only $DEB_SRC=$DEB_SRC_VERSION; log $dl/apt-source.log)"
	[[ $(sha256sum <"$dl/$DEB_ORIG" | cut -d' ' -f1) == "$DEB_ORIG_SHA256" ]] ||
		die "$dl/$DEB_ORIG does not match sha256 $DEB_ORIG_SHA256"
	log "verified $DEB_ORIG (sha256 $DEB_ORIG_SHA256)"
	local tmp="$OLD_SRC.tmp"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	tar -xf "$dl/$DEB_ORIG" -C "$tmp" --strip-components=1
	[[ -f $tmp/plugins/logger/nri-logger.go ]] || die "$DEB_ORIG has no plugins/logger/nri-logger.go"
	rm -rf "$OLD_SRC"
	mv "$tmp" "$OLD_SRC"
	rm -rf "$APT_DIR/state/lists" # 67 MB of sid's Sources: not needed any more
	log "unpacked $DEB_SRC $DEB_SRC_VERSION into $OLD_SRC"
}

cmd_install() {
	need_root
	mkdir -p "$PDIR"
	fetch_old_source
	cmd_build
}

# ---------------------------------------------------------------- build

# write_wrapper DIR NAME NRI_VERSION PLUGIN_VERSION GO_LINE [LOCAL_DIR]:
# the wrapper module: requires the plugin module and the NRI module (a
# local plugin directory is replaced in: the Debian set).
write_wrapper() {
	local dir="$1" name="$2" nri="$3" ver="$4" goline="$5" local_dir="${6:-}"
	mkdir -p "$dir"
	{
		echo "// Generated by nri-trace lab/nri-plugins.sh: builds $NRI_MODULE/plugins/$name"
		echo "// at $ver with $NRI_MODULE $nri."
		echo "module nri-trace-lab/nri-plugins/$name"
		echo
		echo "go $goline"
		echo
		echo "require ("
		echo "	$NRI_MODULE $nri"
		echo "	$NRI_MODULE/plugins/$name $ver"
		echo ")"
		if [[ -n $local_dir ]]; then
			echo
			echo "replace $NRI_MODULE/plugins/$name => $local_dir"
		fi
	} >"$dir/go.mod"
}

# build_plugin SET NAME TMP: one plugin into TMP/bin/NAME.
build_plugin() {
	local set="$1" name="$2" tmp="$3" mod="$NRI_MODULE/plugins/$2" nri ver json gomod goline local_dir=""
	nri="$(set_nri "$set")"
	if [[ $set == "$NEW_SET" ]]; then
		ver="$NEW_PSEUDO"
		printf '\n+ %s mod download -json %s\n' "$GO" "$mod@$ver" >>"$BUILD_LOG"
		json="$(cd "$tmp" && "$GO" mod download -json "$mod@$ver" 2>>"$BUILD_LOG")" || {
			echo "$json" >>"$BUILD_LOG"
			build_failed "$GO mod download -json $mod@$ver: $(jq -r '.Error // empty' <<<"$json" 2>/dev/null | head -n 3)" \
				"(each plugin is a module of its own, served only as this pseudo-version of the v0.12.2 commit; GOPROXY=$("$GO" env GOPROXY 2>/dev/null))"
		}
		echo "$json" >>"$BUILD_LOG"
		gomod="$(jq -r '.GoMod // empty' <<<"$json")"
	else
		ver="v0.0.0-00010101000000-000000000000"
		local_dir="$tmp/src/$name"
		step cp -r "$OLD_SRC/plugins/$name" "$local_dir"
		step chmod -R u+w "$local_dir"
		gomod="$local_dir/go.mod"
	fi
	[[ -f $gomod ]] || build_failed "no go.mod for $mod@$ver"
	goline="$(awk '$1 == "go" { print $2; exit }' "$gomod")"
	[[ -n $goline ]] || goline="1.21"
	write_wrapper "$tmp/wrap/$name" "$name" "$nri" "$ver" "$goline" "$local_dir"
	step cat "$tmp/wrap/$name/go.mod"
	(cd "$tmp/wrap/$name" && step "$GO" build "${BUILD_FLAGS[@]}" -o "$tmp/bin/$name" "$mod")
	# The build must have taken the set's NRI (the plugin's go.mod asks for
	# an older one, the wrapper's requirement wins) and the plugin version.
	local info
	info="$("$GO" version -m "$tmp/bin/$name")"
	echo "$info" >>"$BUILD_LOG"
	awk -v m="$NRI_MODULE" -v v="$nri" '$1 == "dep" && $2 == m && $3 == v { f = 1 } END { exit !f }' <<<"$info" ||
		build_failed "$tmp/bin/$name was not built with $NRI_MODULE $nri (go version -m $tmp/bin/$name)"
	log "  $name: $(stat -c %s "$tmp/bin/$name") bytes, $NRI_MODULE $nri"
}

# build_set SET: every plugin of SET into $BIN_ROOT/SET, unless built there
# by this recipe. Built in a temp dir, then moved in whole.
build_set() {
	SET="$1"
	local want dir="$BIN_ROOT/$1" name ok=1
	want="$(recipe "$1")"
	for name in $(set_plugins "$1"); do [[ -x $dir/$name ]] || ok=0; done
	if ((ok)) && [[ -f $dir/built-from && $(head -n1 "$dir/built-from") == "$want" ]]; then
		log "set $1 already built ($dir)"
		return 0
	fi
	if [[ $1 == "$OLD_SET" && ! -f $OLD_SRC/plugins/logger/nri-logger.go ]]; then
		die "set $1 needs Debian's $DEB_SRC $DEB_SRC_VERSION unpacked in $OLD_SRC: run 'sudo lab/nri-plugins.sh install'"
	fi
	local t0=$SECONDS tmp="$PDIR/build.tmp/$1"
	BUILD_LOG="$PDIR/build-$1.log"
	rm -rf "$tmp" "$dir.old"
	mkdir -p "$tmp/bin" "$tmp/src" "$tmp/wrap"
	: >"$BUILD_LOG"
	log "building set $1 ($(set_plugins "$1")) with $NRI_MODULE $(set_nri "$1"), $GO_VERSION (log $BUILD_LOG)"
	for name in $(set_plugins "$1"); do build_plugin "$1" "$name" "$tmp"; done
	# The recipe, then (not compared) where the modules came from.
	printf '%s\nGOPROXY=%s GONOSUMDB=%s\n' "$want" "$("$GO" env GOPROXY)" "$("$GO" env GONOSUMDB)" >"$tmp/bin/built-from"
	mkdir -p "$BIN_ROOT"
	if [[ -e $dir ]]; then mv "$dir" "$dir.old"; fi
	mv "$tmp/bin" "$dir"
	rm -rf "$dir.old" "$tmp"
	log "built set $1 in $((SECONDS - t0)) s ($dir)"
}

# The plugin modules of set v0.12.2 are not served by proxy.golang.org: it
# answers 403 Forbidden ("This module version is not available") for the
# pseudo-version of the release commit (checked 2026-11-28 for logger and
# template; also for logger at the v0.8.0 and v0.12.0 commits). One
# download of the first module tells; any failure ends the build here with
# the module, the proxy's answer and what it means.
probe_new_set() {
	local mod="$NRI_MODULE/plugins/${NEW_PLUGINS[0]}@$NEW_PSEUDO" out err proxy
	proxy="$("$GO" env GOPROXY)"
	out="$(cd "$PDIR" && "$GO" mod download -json "$mod" 2>&1)" && return 0
	err="$(jq -r '.Error // empty' <<<"$out" 2>/dev/null || true)"
	[[ -n $err ]] || err="$out"
	if [[ $err == *"403 Forbidden"* ]]; then
		die "set $NEW_SET cannot be built here: the Go module proxy refuses the NRI project's plugin modules."$'\n'"  $mod:"$'\n'"  403 Forbidden from ${proxy%%,*}: \"$(sed -n 's/.*server response: //p' <<<"$err" | head -n1)\""$'\n'"  (GOPROXY=$proxy; a 403 is final, the go command does not go on to 'direct'.) Set $OLD_SET builds: sudo lab/nri-plugins.sh build $OLD_SET; the lab's plugin on the v0.12 stub: lab/go-nri-plugin.sh"
	fi
	die "set $NEW_SET: $GO mod download $mod failed (GOPROXY=$proxy):"$'\n'"  ${err//$'\n'/$'\n'  }"
}

cmd_build() {
	find_go "$GO_MIN" "the NRI project's plugins"
	command -v jq >/dev/null || die "jq missing (apt-get install jq)"
	go_env
	local sets=("$@") s failed=()
	((${#sets[@]})) || sets=("$OLD_SET") # the only set buildable here
	mkdir -p "$PDIR"
	for s in "${sets[@]}"; do set_plugins "$s" >/dev/null; done
	# Fail fast: before anything is built, whether the proxy serves set
	# v0.12.2's plugin modules at all.
	for s in "${sets[@]}"; do [[ $s != "$NEW_SET" ]] || probe_new_set; done
	for s in "${sets[@]}"; do
		(build_set "$s") || failed+=("$s")
	done
	# The build cache is not needed to run them (a rebuild, only when the
	# recipe changes, compiles again); the module cache stays.
	rm -rf "$GODIR/cache" "$PDIR/build.tmp"
	((${#failed[@]} == 0)) || die "set(s) not built: ${failed[*]} (see above)"
}

# ---------------------------------------------------------------- path, list, run

resolve() { # NAME[@SET] -> path (may not exist)
	local name="${1%@*}" set="$OLD_SET" names
	[[ $1 == *@* ]] && set="${1#*@}"
	names="$(set_plugins "$set")" || exit 1
	[[ " $names " == *" $name "* ]] || die "no plugin '$name' in set $set ($names)"
	printf '%s/%s/%s\n' "$BIN_ROOT" "$set" "$name"
}

cmd_path() {
	[[ $# -eq 1 ]] || die "usage: $0 path NAME[@SET]"
	local p
	p="$(resolve "$1")"
	if [[ ! -x $p ]]; then
		[[ $p != "$BIN_ROOT/$NEW_SET/"* ]] || die "$p not built: set $NEW_SET cannot be built here (the Go module proxy refuses its plugin modules; 'lab/nri-plugins.sh build $NEW_SET' says so)"
		die "$p not built: run 'sudo lab/nri-plugins.sh install'"
	fi
	printf '%s\n' "$p"
}

cmd_list() {
	local s n
	for s in "$OLD_SET" "$NEW_SET"; do
		for n in $(set_plugins "$s"); do
			if [[ -x $BIN_ROOT/$s/$n ]]; then echo "$n@$s $BIN_ROOT/$s/$n"; else echo "$n@$s (not built)"; fi
		done
	done
}

cmd_versions() {
	find_go "$GO_MIN" "the NRI project's plugins"
	GOTOOLCHAIN=local GOFLAGS="" GOMODCACHE="$GODIR/pkg/mod" "$GO" list -m -versions "$NRI_MODULE"
}

# The plugin process must dial the lab's socket itself: nri-trace names a
# plugin by the process at the other end of the runtime's accepted
# connection (its comm and argv, docs/nri.md), looked up when the runtime
# accepts it. A socket connected by a helper that then execs the plugin
# (NRI_PLUGIN_SOCKET=<fd>) showed up as that helper (`python3`).
#
# - Given -socket / -socket-path (the v0.12.2 plugins have one of them;
#   differ must have it, it opens one connection per index), the plugin
#   dials that path: exec it as it is.
# - Otherwise (the v0.8.0 logger and template have no socket flag) the
#   stub dials its default, /var/run/nri/nri.sock. The plugin runs in a
#   private mount namespace (unshare -m) where that path is the lab's
#   socket, bind-mounted over an empty file on a tmpfs: on /run/nri when
#   the host has that directory, else on /run itself (the plugin then sees
#   an empty /run but for nri/nri.sock). Nothing changes outside that
#   namespace; unshare and sh exec, so the plugin keeps the pid and is
#   the process that connects.
cmd_run() {
	[[ $# -ge 1 ]] || die "usage: $0 run NAME[@SET] [FLAG...]"
	local bin a have_idx=0 run_dir
	bin="$(cmd_path "$1")"
	shift
	[[ -S $NRI_SOCK ]] || die "NRI socket $NRI_SOCK missing: is the lab up (lab/lab.sh up)?"
	for a in "$@"; do
		case $a in
		-idx | --idx | -idx=* | --idx=* | -indices | --indices | -indices=* | --indices=*) have_idx=1 ;;
		-socket | --socket | -socket=* | --socket=* | -socket-path | --socket-path | -socket-path=* | --socket-path=*)
			log "running $bin $*"
			exec env -u NRI_PLUGIN_SOCKET "$bin" "$@"
			;;
		esac
	done
	((have_idx)) || [[ -n ${NRI_PLUGIN_IDX:-} ]] ||
		die "give an index: -idx NN (plugins that have it) or NRI_PLUGIN_IDX=NN"
	need_root
	command -v unshare >/dev/null || die "unshare (util-linux) missing"
	run_dir="$(readlink -f /var/run)" # /run on Debian
	log "running $bin $* (dials /var/run/nri/nri.sock = $NRI_SOCK, in a private mount namespace)"
	# shellcheck disable=SC2016 # expanded by the inner sh
	exec env -u NRI_PLUGIN_SOCKET unshare --mount --propagation private -- /bin/sh -euc '
		sock="$1" run="$2"
		shift 2
		if [ -d "$run/nri" ]; then
			mount -t tmpfs -o mode=0755,size=64k nri-trace-lab "$run/nri"
		else
			mount -t tmpfs -o mode=0755,size=64k nri-trace-lab "$run"
			mkdir "$run/nri"
		fi
		: >"$run/nri/nri.sock"
		mount --bind "$sock" "$run/nri/nri.sock"
		exec "$@"
	' nri-plugins-run "$NRI_SOCK" "$run_dir" "$bin" "$@"
}

# ---------------------------------------------------------------- main

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

case "${1:-}" in
install) cmd_install ;;
build)
	shift
	cmd_build "$@"
	;;
path)
	shift
	cmd_path "$@"
	;;
list) cmd_list ;;
versions) cmd_versions ;;
run)
	shift
	cmd_run "$@"
	;;
-h | --help | help) usage 0 ;;
*) usage 2 >&2 ;;
esac
