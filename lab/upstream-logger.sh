#!/usr/bin/env bash
# nri-trace lab: the UPSTREAM NRI logger plugin as a second witness.
#
#   upstream-logger.sh install   Debian packages (Go 1.24 and the NRI library
#                                from trixie, the rest from bookworm) and the
#                                NRI source package (for plugins/logger)
#   upstream-logger.sh build     build plugins/logger offline; prints the path
#   upstream-logger.sh path      print the binary's path, or fail
#   upstream-logger.sh run FLAG...
#                                run it as an EXTERNAL plugin of the lab's
#                                containerd (foreground), e.g.
#                                run -idx 99 -name logger -log-file /tmp/l.log
#
# The logger (github.com/containerd/nri plugins/logger, Debian source package
# golang-github-containerd-nri) subscribes to every NRI event and logs each
# pod/container it is sent as YAML. It is not part of nri-trace: what it logs
# is an independent record of what the runtime delivered over NRI.
#
# Only `install` uses the network (apt). `build` is offline: GOPATH mode
# (GO111MODULE=off) over Debian's /usr/share/gocode, GOPROXY=off,
# GOTOOLCHAIN=local. See docs/lab-upstream-logger.md.
#
# Environment:
#   NRI_TRACE_LAB_DIR          lab dir (default /var/lib/nri-trace-lab)
#   NRI_TRACE_LAB_LOGGER_BIN   dir for the binary (default $LAB/bin)
#   NRI_TRACE_LAB_LOGGER_WORK  sources + Go build cache (default $LAB/upstream-logger)
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
BIN_DIR="${NRI_TRACE_LAB_LOGGER_BIN:-$LAB/bin}"
BIN_DIR="${BIN_DIR%/}"
BIN="$BIN_DIR/nri-logger"
WORK="${NRI_TRACE_LAB_LOGGER_WORK:-$LAB/upstream-logger}"
WORK="${WORK%/}"
STAMP="$BIN.stamp" # fingerprint of the inputs of the last build
NRI_SOCK="$LAB/run/nri.sock"

GO_PKG="golang-1.24-go" # bookworm's golang-go is 1.19; Debian's NRI stack wants newer
GO="/usr/lib/go-1.24/bin/go"
GOCODE="/usr/share/gocode" # where Debian's golang-*-dev packages put sources
NRI_DEV="golang-github-containerd-nri-dev"
NRI_SRC="golang-github-containerd-nri" # its source package: has plugins/
NRI_IMPORT="github.com/containerd/nri"
# $GO_PKG and $NRI_DEV are asked for from trixie explicitly; everything else
# apt picks comes from bookworm unless a version constraint forces trixie
# (checked in cmd_install). patch: for Debian's patches to the source.
BOOKWORM_WANT=(patch)

TRIXIE_SOURCES="/etc/apt/sources.list.d/nri-trace-lab-trixie.sources"
TRIXIE_PIN="/etc/apt/preferences.d/nri-trace-lab-trixie"
TRIXIE_SRC_SOURCES="/etc/apt/sources.list.d/nri-trace-lab-trixie-src.sources"
# Refuse an install that wants more than this many packages from trixie.
MAX_TRIXIE=8

log() { printf 'upstream-logger: %s\n' "$*"; }
die() {
	printf 'upstream-logger: ERROR: %s\n' "$*" >&2
	exit 1
}
need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root"; }
pkg_version() { { dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null || true; } | awk '$3=="installed"{print $4}'; }

# Where the extracted source package of version $1 lives.
src_dir() { printf '%s/src/%s_%s' "$WORK" "$NRI_SRC" "$1"; }
# The upstream version in a Debian version: drop epoch and revision.
upstream_version() {
	local v="${1#*:}"
	printf '%s' "${v%-*}"
}

# ---------------------------------------------------------------- install

cmd_install() {
	need_root
	[[ -f $TRIXIE_SOURCES && -f $TRIXIE_PIN ]] ||
		die "the lab's trixie apt source/pin is missing ($TRIXIE_SOURCES, $TRIXIE_PIN): run lab/lab.sh install first"

	# 1. deb-src for trixie: Debian ships the sample plugins only in the
	#    SOURCE package (the -dev package excludes plugins/ and examples/).
	#    apt never installs from deb-src, so the priority-100 pin is unaffected.
	local updated=0
	if [[ ! -f $TRIXIE_SRC_SOURCES ]]; then
		local mirror
		mirror="$(awk '/^URIs:/ { print $2; exit }' "$TRIXIE_SOURCES")"
		[[ -n $mirror ]] || die "no URIs: line in $TRIXIE_SOURCES"
		cat >"$TRIXIE_SRC_SOURCES" <<-EOF
			# Added by nri-trace lab/upstream-logger.sh: trixie SOURCE packages, for
			# the NRI sample plugins (plugins/logger), which Debian ships only in the
			# source package golang-github-containerd-nri. apt installs nothing from
			# deb-src; the binary pin ($TRIXIE_PIN, priority 100) stays as it is.
			Types: deb-src
			URIs: $mirror
			Suites: trixie
			Components: main
			Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
		EOF
		log "added apt source $TRIXIE_SRC_SOURCES (deb-src trixie from $mirror)"
		log "apt-get update"
		apt-get update -q >/dev/null
		updated=1
	else
		log "apt source $TRIXIE_SRC_SOURCES already present"
	fi
	# (No `cmd | grep -q` here: with pipefail, grep's early exit fails the pipe.)
	if ((!updated)) && { [[ -z $(apt-cache madison "$NRI_DEV" 2>/dev/null) ]] ||
		[[ -z $(apt-cache showsrc --only-source "$NRI_SRC" 2>/dev/null) ]]; }; then
		log "apt-get update (no $NRI_DEV / $NRI_SRC in the package lists yet)"
		apt-get update -q >/dev/null
	fi

	# 2. Packages. Dry run first and refuse if apt wants to remove anything,
	#    touch libc6, or take anything but a few Go source packages from trixie.
	local want=() p
	[[ -x $GO ]] || want+=("$GO_PKG/trixie")
	[[ -n $(pkg_version "$NRI_DEV") ]] || want+=("$NRI_DEV/trixie")
	for p in "${BOOKWORM_WANT[@]}"; do
		[[ -n $(pkg_version "$p") ]] || want+=("$p")
	done
	local libc_before
	libc_before="$(pkg_version libc6)"
	if ((${#want[@]} == 0)); then
		log "packages already installed: $GO_PKG $(pkg_version "$GO_PKG"), $NRI_DEV $(pkg_version "$NRI_DEV"), libc6 $libc_before"
	else
		local plan non_bookworm bad n
		plan="$(apt-get install -s -y --no-install-recommends "${want[@]}" 2>&1)" ||
			die "apt-get install -s ${want[*]} failed:"$'\n'"$plan"
		! grep -q '^Remv ' <<<"$plan" ||
			die "refusing: apt would remove packages:"$'\n'"$(grep '^Remv ' <<<"$plan")"
		! grep -qE '^Inst libc6[ :]' <<<"$plan" ||
			die "refusing: apt would change libc6 ($libc_before):"$'\n'"$(grep -E '^Inst libc6[ :]' <<<"$plan")"
		# A package that bookworm also has at that version shows "Debian:12".
		non_bookworm="$(grep '^Inst ' <<<"$plan" | grep -v 'Debian:12' || true)"
		bad="$(grep -vE '^Inst golang-' <<<"$non_bookworm" | grep . || true)"
		[[ -z $bad ]] ||
			die "refusing: apt would take non-Go packages from trixie:"$'\n'"$bad"
		n="$(grep -c . <<<"$non_bookworm" || true)"
		((n <= MAX_TRIXIE)) ||
			die "refusing: apt would take $n packages from trixie (max $MAX_TRIXIE):"$'\n'"$non_bookworm"
		log "plan: $(grep -c '^Inst ' <<<"$plan") packages, $n of them from trixie:"
		printf '  %s\n' "${non_bookworm//$'\n'/$'\n'  }"
		log "apt-get install ${want[*]}"
		mkdir -p "$WORK"
		DEBIAN_FRONTEND=noninteractive apt-get install -q -y -o DPkg::Lock::Timeout=300 --no-install-recommends "${want[@]}" >"$WORK/apt-install.log" 2>&1 ||
			die "apt-get install failed; see $WORK/apt-install.log"
		[[ $(pkg_version libc6) == "$libc_before" ]] ||
			die "libc6 changed from $libc_before to $(pkg_version libc6): this must not happen; see $WORK/apt-install.log"
		log "installed; libc6 still $libc_before"
	fi
	[[ -x $GO ]] || die "$GO missing after installing $GO_PKG"
	log "Go: $("$GO" version)"
	[[ -d $GOCODE/src/$NRI_IMPORT/pkg/stub ]] ||
		die "$GOCODE/src/$NRI_IMPORT/pkg/stub missing: is $NRI_DEV installed?"

	# 3. The source package of exactly the installed -dev version: plugins/
	#    and the library then come from the same release.
	fetch_source "$(pkg_version "$NRI_DEV")"
}

# fetch_source VERSION: download, verify and unpack the source package.
fetch_source() {
	local ver="$1" dir
	dir="$(src_dir "$ver")"
	if [[ -f $dir/plugins/logger/nri-logger.go ]]; then
		log "source $NRI_SRC $ver already unpacked in $dir"
		return 0
	fi
	# SHA-256 of each file, from apt's signed Sources index.
	local sums
	sums="$(apt-cache showsrc --only-source "$NRI_SRC" | awk -v want="$ver" '
		/^Version:/ { v = $2 }
		/^[A-Za-z0-9-]+:/ { in_sums = ($1 == "Checksums-Sha256:"); next }
		in_sums && v == want && NF == 3 { print $1, $3 }')"
	[[ -n $sums ]] ||
		die "source package $NRI_SRC $ver not in apt's lists (is $TRIXIE_SRC_SOURCES there, and apt-get update done?)"

	local dl="$WORK/src/download"
	mkdir -p "$dl"
	# apt-get source fails as a whole if one file fails; here the .dsc can
	# 404 on some mirrors while the tarballs download. We only need the
	# tarballs and check each against the signed index, so carry on.
	log "apt-get source --download-only $NRI_SRC=$ver (into $dl)"
	if ! (cd "$dl" && apt-get source -q --download-only "$NRI_SRC=$ver") >"$dl/apt-source.log" 2>&1; then
		log "apt-get source reported errors (continuing if the tarballs verify):"
		grep -E '^(E|W):' "$dl/apt-source.log" | grep -v 'unsandboxed' | sed 's/^/  /' || true
	fi
	local orig="" deb="" sum file
	while read -r sum file; do
		case $file in
		*.dsc) continue ;;
		*.orig.tar.*) orig="$dl/$file" ;;
		*.debian.tar.*) deb="$dl/$file" ;;
		esac
		[[ -f $dl/$file ]] || die "could not download $file of $NRI_SRC $ver; see $dl/apt-source.log"
		[[ $(sha256sum <"$dl/$file" | cut -d' ' -f1) == "$sum" ]] ||
			die "$file does not match the SHA-256 in apt's Sources index"
		log "verified $file (sha256 $sum)"
	done <<<"$sums"
	[[ -n $orig ]] || die "no .orig tarball listed for $NRI_SRC $ver (native package?)"

	# Unpack into a temp dir, apply Debian's patches, then move into place.
	local tmp="$dir.tmp"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	tar -xf "$orig" -C "$tmp" --strip-components=1
	if [[ -n $deb ]]; then
		tar -xf "$deb" -C "$tmp"
		if [[ -s $tmp/debian/patches/series ]]; then
			local patch
			while read -r patch _; do
				[[ -n $patch && $patch != \#* ]] || continue
				patch -s -p1 -d "$tmp" <"$tmp/debian/patches/$patch" ||
					die "Debian patch $patch does not apply"
				log "applied Debian patch $patch"
			done <"$tmp/debian/patches/series"
		fi
	fi
	[[ -f $tmp/plugins/logger/nri-logger.go ]] ||
		die "$NRI_SRC $ver has no plugins/logger/nri-logger.go"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	log "unpacked $NRI_SRC $ver into $dir"
}

# ---------------------------------------------------------------- build

# The Go environment of every build step: GOPATH mode over Debian's
# /usr/share/gocode, no network, no toolchain switching, no user config.
go_() {
	env -i PATH="$(dirname "$GO"):/usr/bin:/bin" HOME="$WORK" \
		GO111MODULE=off GOPATH="$GOCODE" GOFLAGS= GOENV=off GOWORK=off \
		GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local \
		GOCACHE="$WORK/gocache" GOTMPDIR= CGO_ENABLED=0 \
		"$GO" "$@"
}
BUILD_FLAGS=(-trimpath)

cmd_build() {
	[[ -x $GO ]] || die "Go toolchain $GO missing: run '$0 install' ($GO_PKG from trixie)"
	[[ -d $GOCODE/src/$NRI_IMPORT/pkg/stub ]] ||
		die "NRI library sources $GOCODE/src/$NRI_IMPORT missing: run '$0 install' ($NRI_DEV)"
	local ver dir
	ver="$(pkg_version "$NRI_DEV")"
	dir="$(src_dir "$ver")"
	[[ -f $dir/plugins/logger/nri-logger.go ]] ||
		die "logger source for $NRI_SRC $ver not unpacked in $dir: run '$0 install'"
	local pkgdir="$dir/plugins/logger"
	mkdir -p "$WORK/gocache" "$BIN_DIR"

	# Every package the build compiles, with its files. A package that no
	# installed golang-*-dev provides shows up here as "cannot find package".
	local deps err
	if ! deps="$(cd "$pkgdir" && go_ list -deps \
		-f '{{.ImportPath}}|{{.Dir}}|{{join .GoFiles " "}} {{join .SFiles " "}} {{join .HFiles " "}}' . 2>"$WORK/go-list.err")"; then
		err="$(cat "$WORK/go-list.err")"
		local missing
		missing="$(grep -oE 'cannot find package "[^"]+"' <<<"$err" | cut -d'"' -f2 | sort -u || true)"
		if [[ -n $missing ]]; then
			die "Go packages not provided by any installed Debian package (looked in $GOCODE/src and GOROOT):"$'\n'"  ${missing//$'\n'/$'\n'  }"$'\n'"find the Debian package with: apt-file search /usr/share/gocode/src/<import path>"
		fi
		die "go list failed:"$'\n'"$err"
	fi

	# Fingerprint: Go version, flags, and the content of every compiled file
	# (standard library included). Same fingerprint and binary => up to date.
	local fp
	fp="$(
		{
			go_ version
			printf 'flags %s\n' "${BUILD_FLAGS[*]}"
			local d files f
			while IFS='|' read -r _ d files; do
				for f in $files; do printf '%s/%s\n' "$d" "$f"; done
			done <<<"$deps" | xargs -r -d '\n' sha256sum --
		} | sha256sum | cut -d' ' -f1
	)"
	if [[ -x $BIN && -f $STAMP ]] &&
		[[ $(sed -n 1p "$STAMP") == "$fp" ]] &&
		[[ $(sed -n 2p "$STAMP") == "$(sha256sum <"$BIN" | cut -d' ' -f1)" ]]; then
		log "up to date ($(grep -c . <<<"$deps") packages, inputs unchanged): $BIN"
		printf '%s\n' "$BIN"
		return 0
	fi

	# Which Debian packages provide the non-standard packages.
	local nonstd owners
	nonstd="$(cd "$pkgdir" && go_ list -deps -f '{{if not .Standard}}{{.Dir}}{{end}}' . | { grep "^$GOCODE/" || true; } | sort -u)"
	# shellcheck disable=SC2086 # one argument per directory
	owners="$({ dpkg -S $nonstd 2>/dev/null || true; } | cut -d: -f1 | sed 's/, /\n/g' | sort -u |
		while read -r p; do printf "%s=%s " "$p" "$(pkg_version "$p")"; done)"
	owners="${owners% }"
	log "building $NRI_IMPORT/plugins/logger from $NRI_SRC $ver with $(go_ version | cut -d' ' -f3) (offline, GOPATH mode)"
	log "Debian Go packages used: $owners"

	local t0 t1
	t0="$(date +%s.%N)"
	(cd "$pkgdir" && go_ build "${BUILD_FLAGS[@]}" -o "$BIN.tmp" .) ||
		die "go build failed (see above)"
	t1="$(date +%s.%N)"
	mv -f "$BIN.tmp" "$BIN"
	printf '%s\n%s\n' "$fp" "$(sha256sum <"$BIN" | cut -d' ' -f1)" >"$STAMP"
	log "built $BIN ($(stat -c %s "$BIN") bytes) in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
	printf '%s\n' "$BIN"
}

cmd_path() {
	[[ -x $BIN ]] || die "$BIN not built: run '$0 install' and '$0 build'"
	printf '%s\n' "$BIN"
}

# ---------------------------------------------------------------- run

# The NRI 0.6 stub always dials /var/run/nri/nri.sock and has no flag or
# variable for another path. What it does support is NRI_PLUGIN_SOCKET=<fd>:
# an already connected socket (how the runtime hands one to the plugins it
# launches). So connect to the lab's socket here and exec the logger with it.
cmd_run() {
	[[ -x $BIN ]] || die "$BIN not built: run '$0 build'"
	[[ -S $NRI_SOCK ]] || die "NRI socket $NRI_SOCK missing: is the lab up (lab/lab.sh up)?"
	local a have_idx=0
	for a in "$@"; do
		[[ $a == -idx || $a == --idx || $a == -idx=* || $a == --idx=* ]] && have_idx=1
	done
	((have_idx)) || die "pass -idx NN (and -name NAME): the stub cannot derive them from the binary's name 'nri-logger'"
	log "connecting $BIN to $NRI_SOCK (NRI_PLUGIN_SOCKET) with: $*"
	# shellcheck disable=SC2016 # python, not shell
	exec /usr/bin/python3 -c '
import os, socket, sys
path, binary, args = sys.argv[1], sys.argv[2], sys.argv[3:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
fd = s.detach()
os.set_inheritable(fd, True)
os.environ["NRI_PLUGIN_SOCKET"] = str(fd)
os.execv(binary, [binary] + args)
' "$NRI_SOCK" "$BIN" "$@"
}

# ---------------------------------------------------------------- main

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

case "${1:-}" in
install) cmd_install ;;
build) cmd_build ;;
path) cmd_path ;;
run)
	shift
	cmd_run "$@"
	;;
-h | --help | help) usage 0 ;;
*) usage 2 >&2 ;;
esac
