#!/usr/bin/env bash
# nri-trace lab: a PRIVATE CRI-O 1.36 with NRI, beside the lab's containerds
# (lab/lab.sh runs this file for NRI_TRACE_LAB_RUNTIME=crio).
#
#   crio.sh install   Debian build/run deps (libseccomp-dev, libsqlite3-dev,
#                     conmon, runc, jq, CNI plugins, gcc, make, libc6-dev, capsh),
#                     then builds crio, copyimg (Go) and pinns (C) from the Go
#                     module github.com/cri-o/cri-o through the Go module proxy
#                     into $LAB/crio/bin (skipped when built by this recipe)
#   crio.sh up        config, images (copyimg from OCI layouts), start crio
#   crio.sh down      stop crio, its conmons and containers, clean up
#   crio.sh restart   crio alone (pods, conmons and containers stay)
#   crio.sh status    what runs, sockets, leftovers
#   crio.sh import TAR REF  an OCI archive into CRI-O's storage as REF
#
# The sockets are the lab's usual ones ($LAB/run/crio.sock for CRI,
# $LAB/run/nri.sock for NRI), every other path is under $LAB/crio. Facts
# of building and running CRI-O here: docs/lab.md, "CRI-O".
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LAB_TAG="lab(crio)"
# shellcheck source=lab/common.sh
. "$HERE/common.sh"
REQUEST_TIMEOUT="${NRI_TRACE_LAB_REQUEST_TIMEOUT:-2s}"
REGISTRATION_TIMEOUT="5s"
LOG_LEVEL="${NRI_TRACE_LAB_LOG_LEVEL:-info}"
# NRI's built-in default validator (CRI-O 1.34+, [crio.nri.default_validator]
# of internal/config/nri/nri.go): off, as CRI-O ships it, unless this names
# what it rejects, as for containerd (lab.sh): a comma list of its reject_*
# settings (reject_oci_hook_adjustment -> nri_validator_reject_oci_hook_adjustment).
DEFAULT_VALIDATOR="${NRI_TRACE_LAB_DEFAULT_VALIDATOR:-}"

# What is built: CRI-O's Go module at a release tag, through the Go module
# proxy (GOPROXY as the environment has it), as it is: no source edits, so
# `crio --version` and the version CRI-O gives NRI plugins are the tag's.
# The newest release the proxy serves here (2026-11-28): v1.36.3 (v1.36.0,
# v1.36.4.. and every v1.33.x answer 403 "This module version is not
# available"). Its go.mod wants Go >= 1.26.3.
CRIO_MODULE="github.com/cri-o/cri-o"
CRIO_MODULE_VERSION="v1.36.3"
CRIO_VERSION="1.36.3" # what `crio --version` must say
GO_MIN="1.26.3"       # the go line of its go.mod
# shellcheck disable=SC2034 # read by common.sh find_go
GO_WHAT="CRI-O $CRIO_VERSION"
# The Makefile's tags without btrfs, ostree and gpgme; libsqlite3 links
# Debian's libsqlite3 instead of compiling go-sqlite3's bundled copy.
GO_TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs seccomp libsqlite3"
GO_LDFLAGS="-s -w" # the Makefile's SHRINKFLAGS
DEB_PACKAGES=(libseccomp-dev libsqlite3-dev conmon runc jq containernetworking-plugins gcc make libc6-dev libcap2-bin)

CDIR="$LAB/crio"
BIN="$CDIR/bin"
BUILT_FROM="$BIN/built-from"   # the recipe the binaries were built by
GODIR="$CDIR/go"               # GOPATH: the module cache (kept), the build cache (removed)
SOCK="$LAB/run/crio.sock"
NRI_SOCK="$LAB/run/nri.sock"
CONFIG="$CDIR/crio.conf"
PIDFILE="$CDIR/crio.pid"
LOG="$CDIR/crio.log"
RUNTIME_FILE="$LAB/runtime"
ROOT_DIR="$CDIR/root"    # containers/storage graph root (images, layers): kept
RUNROOT="$CDIR/runroot"  # containers/storage run root
STATE_DIR="$CDIR/state"  # CRI-O's own state (version file, exits, clean.shutdown)
RUNC_ROOT="$CDIR/runc"   # runc --root of our containers
CONMON_DIR="$CDIR/conmon" # container_exits_dir, container_attach_socket_dir
NETNS_DIR="$CDIR/netns"  # pinns' namespaces_dir
CNI_BIN_DIR="/usr/lib/cni"
# lab.sh's network (written by `lab.sh shared`): one lab at a time.
CNI_CONF_DIR="$LAB/cni/net.d"
CNI_NET="nri-trace-lab"
BRIDGE="nritlab0"
PAUSE_REF="localhost/nri-trace/pause:lab"
BUSYBOX_REF="localhost/nri-trace/busybox:lab"
CGROOT="/sys/fs/cgroup"
# CRI-O with cgroupfs puts a container without a cgroup parent under
# /crio/crio-<id> and its conmon beside it, crio-conmon-<id>
# (internal/config/cgmgr/cgroupfs_linux.go); `down` may rmdir the /crio
# parents it found absent at `up`.
CG_MARK="$CDIR/cgroup-parents-we-created"

# ---------------------------------------------------------------- install

install_packages() {
	local want=() p
	for p in "${DEB_PACKAGES[@]}"; do
		[[ -n $(pkg_version "$p") ]] || want+=("$p")
	done
	((${#want[@]} == 0)) && return 0
	local libc_before plan
	libc_before="$(pkg_version libc6)"
	plan="$(apt-get install -s -y --no-install-recommends "${want[@]}" 2>&1)" || {
		apt-get update -q >/dev/null
		plan="$(apt-get install -s -y --no-install-recommends "${want[@]}" 2>&1)" ||
			die "apt-get install -s failed:"$'\n'"$plan"
	}
	# Refuse before touching anything if apt would upgrade libc6.
	! grep -q '^Inst libc6 ' <<<"$plan" ||
		die "installing ${want[*]} would upgrade libc6; refusing"
	log "apt-get install ${want[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${want[@]}" >/dev/null
	[[ $(pkg_version libc6) == "$libc_before" ]] || die "libc6 changed: fix apt by hand"
}


# What the binaries in $BIN are built by: the module and version, the Go
# toolchain, the tags and flags, and a hash of the functions that build
# them (any change of recipe builds again).
recipe() {
	local h
	h="$(declare -f build_crio build_steps | sha256sum | cut -c1-16)"
	echo "$CRIO_MODULE@$CRIO_MODULE_VERSION; $GO_VERSION; tags $GO_TAGS; ldflags $GO_LDFLAGS; recipe $h"
}

# One step of the build, its output appended to the build log; on failure
# the runtime, the command, the log and how to retry.
step() {
	printf '\n+ %s\n' "$*" >>"$BUILD_LOG"
	"$@" >>"$BUILD_LOG" 2>&1 || build_failed "$*"
}
build_failed() { # what failed
	tail -n 30 "$BUILD_LOG" >&2
	die "building CRI-O $CRIO_VERSION ($CRIO_MODULE@$CRIO_MODULE_VERSION) failed at: $1"$'\n'"  log: $BUILD_LOG"$'\n'"  retry: cargo xtask lab --runtime crio install (or: sudo NRI_TRACE_LAB_RUNTIME=crio lab/lab.sh install)"
}

# The build itself, in $1 (a fresh temp dir): the module from the proxy,
# copied out of the module cache unchanged (make writes pinns' objects into
# its tree, which must not happen in the cache), built as the main module
# with its own go.mod and go.sum (no replace directives; -mod=readonly:
# exactly its dependencies, verified against its go.sum), pinns with its
# own Makefile. Binaries in $1/bin.
build_steps() { # temp dir
	local tmp="$1" json dir
	export GOTOOLCHAIN=local GOPATH="$GODIR" GOMODCACHE="$GODIR/pkg/mod" GOCACHE="$GODIR/cache"
	export GOFLAGS="-mod=readonly -modcacherw -buildvcs=false" CGO_ENABLED=1
	cd "$tmp"
	printf '\n+ %s mod download -json %s\n' "$GO" "$CRIO_MODULE@$CRIO_MODULE_VERSION" >>"$BUILD_LOG"
	json="$("$GO" mod download -json "$CRIO_MODULE@$CRIO_MODULE_VERSION" 2>>"$BUILD_LOG")" || {
		echo "$json" >>"$BUILD_LOG"
		build_failed "$GO mod download $CRIO_MODULE@$CRIO_MODULE_VERSION: $(jq -r '.Error // empty' <<<"$json" 2>/dev/null)"
	}
	echo "$json" >>"$BUILD_LOG"
	dir="$(jq -r '.Dir // empty' <<<"$json")"
	[[ -n $dir && -f $dir/go.mod ]] || build_failed "$GO mod download $CRIO_MODULE@$CRIO_MODULE_VERSION: no module dir in its answer"
	step cp -r "$dir" "$tmp/src"
	step chmod -R u+w "$tmp/src"
	mkdir -p "$tmp/bin"
	cd "$tmp/src"
	step "$GO" build -trimpath -tags "$GO_TAGS" -ldflags "$GO_LDFLAGS" -o "$tmp/bin/" ./cmd/crio ./test/copyimg
	step make -C pinns
	step cp bin/pinns "$tmp/bin/pinns"
	step "$tmp/bin/crio" --version
	"$tmp/bin/crio" --version | grep -qx "crio version $CRIO_VERSION" ||
		build_failed "$tmp/bin/crio --version: not 'crio version $CRIO_VERSION'"
}

# Build crio, copyimg and pinns, unless $BIN holds them built by this very
# recipe ($BUILT_FROM). Built in a temp dir, then put in place whole: a
# failed build leaves the working binaries as they were. Kept: the Go
# module cache ($GODIR/pkg/mod: a rebuild downloads nothing). Removed: the
# copy of the module and the Go build cache (not needed to run).
build_crio() {
	find_go
	local want
	want="$(recipe)"
	if [[ -f $BUILT_FROM && $(cat "$BUILT_FROM") == "$want" && -x $BIN/crio && -x $BIN/pinns && -x $BIN/copyimg ]]; then
		log "crio $CRIO_VERSION already built ($BIN: $want)"
		return 0
	fi
	local t0=$SECONDS tmp="$CDIR/build.tmp"
	BUILD_LOG="$CDIR/build.log"
	mkdir -p "$CDIR"
	rm -rf "$tmp" "$BIN.old"
	mkdir -p "$tmp"
	: >"$BUILD_LOG"
	log "building crio $CRIO_VERSION from $CRIO_MODULE@$CRIO_MODULE_VERSION ($GO_VERSION; cold: about 5 min; log $BUILD_LOG)"
	(build_steps "$tmp")
	echo "$want" >"$tmp/bin/built-from"
	# Into place: the old binaries aside, the new ones in, the old ones gone.
	if [[ -e $BIN ]]; then mv "$BIN" "$BIN.old"; fi
	mv "$tmp/bin" "$BIN"
	rm -rf "$BIN.old" "$tmp" "$GODIR/cache"
	log "built crio, copyimg, pinns in $((SECONDS - t0)) s ($BIN)"
}

cmd_install() {
	need_root
	# What every lab runtime needs (runc, CNI plugins, busybox, gcc for the
	# images).
	NRI_TRACE_LAB_RUNTIME=containerd-1.7 bash "$HERE/lab.sh" install
	install_packages
	build_crio
}

# ---------------------------------------------------------------- up

storage_driver() { if [[ $(cat "$LAB/snapshotter" 2>/dev/null) == native ]]; then echo vfs; else echo overlay; fi; }

write_config() { # [output file]
	local validator="" key
	if [[ -n $DEFAULT_VALIDATOR ]]; then
		validator=$'\n\n# NRI\'s built-in default validator (NRI_TRACE_LAB_DEFAULT_VALIDATOR).\n[crio.nri.default_validator]\nnri_enable_default_validator = true'
		for key in ${DEFAULT_VALIDATOR//,/ }; do
			[[ $key =~ ^reject_[a-z_]+$ ]] || die "NRI_TRACE_LAB_DEFAULT_VALIDATOR: $key is not a reject_* setting of the default validator"
			validator+=$'\n'"nri_validator_$key = true"
		done
	fi
	cat >"${1:-$CONFIG}" <<EOF
# Generated by nri-trace lab/crio.sh: a private CRI-O $CRIO_VERSION with NRI.
[crio]
root = "$ROOT_DIR"
runroot = "$RUNROOT"
storage_driver = "$(storage_driver)"
log_dir = "$CDIR/logs"
# No version files: nothing is wiped at start-up; \`down\` removes the whole
# container store itself (the images are imported again at \`up\`).
version_file = ""
version_file_persist = ""
clean_shutdown_file = ""
internal_wipe = false
internal_repair = false

[crio.api]
listen = "$SOCK"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
# No systemd on these VMs.
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
log_level = "$LOG_LEVEL"
selinux = false
# pinns through a wrapper: the scenario cri-retry-slow-sandbox slows it
# (crio calls it outside the CRI request's context, as i/o load would).
pinns_path = "$CDIR/wrap/pinns"
namespaces_dir = "$NETNS_DIR"
container_exits_dir = "$CONMON_DIR/exits"
container_attach_socket_dir = "$CONMON_DIR/attach"
hooks_dir = ["$CDIR/hooks.d"]
default_mounts_file = ""
cdi_spec_dirs = ["$CDIR/cdi"]

[crio.runtime.runtimes.runc]
# runc through a wrapper: root here lacks CAP_SYS_RESOURCE, and CRI-O gives
# the pause container oom_score_adj -998 (docs/lab.md, "CRI-O").
runtime_path = "$CDIR/wrap/runc"
runtime_type = "oci"
runtime_root = "$RUNC_ROOT"
monitor_path = "/usr/bin/conmon"
monitor_cgroup = "pod"

[crio.image]
pause_image = "$PAUSE_REF"
# Set, it makes CreateContainer want ImageSpec.UserSpecifiedImage (which
# the lab's drivers do not send); no image is ever pulled here.
signature_policy = ""
signature_policy_dir = "$CDIR/policy.d"

[crio.network]
network_dir = "$CNI_CONF_DIR"
plugin_dirs = ["$CNI_BIN_DIR"]

[crio.nri]
enable_nri = true
nri_listen = "$NRI_SOCK"
nri_plugin_dir = "$LAB/nri/plugins"
nri_plugin_config_dir = "$LAB/nri/conf.d"
nri_plugin_registration_timeout = "$REGISTRATION_TIMEOUT"
nri_plugin_request_timeout = "$REQUEST_TIMEOUT"$validator

[crio.metrics]
enable_metrics = false
EOF
}

# The capabilities the kernel knows that this machine's bounding set lacks,
# as a JSON array of CAP_ names (CAP_SYS_RESOURCE on this VM kind).
missing_caps() {
	local bnd last miss names
	bnd=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
	last=$(cat /proc/sys/kernel/cap_last_cap)
	miss=$((((1 << (last + 1)) - 1) & ~bnd))
	if ((miss == 0)); then
		echo '[]'
		return
	fi
	names=$(capsh --decode="$(printf '%x' "$miss")" | sed 's/^[^=]*=//')
	jq -cn --arg n "$names" '$n | ascii_upcase | split(",")'
}

write_side_files() {
	mkdir -p "$CDIR/wrap" "$CDIR/policy.d" "$CDIR/hooks.d" "$CDIR/cdi" "$CDIR/crio.conf.d"
	cat >"$CDIR/policy.json" <<-'EOF'
		{ "default": [{ "type": "insecureAcceptAnything" }] }
	EOF
	cat >"$CDIR/registries.conf" <<-'EOF'
		unqualified-search-registries = []
	EOF
	cat >"$CDIR/storage.conf" <<-EOF
		[storage]
		driver = "$(storage_driver)"
		graphroot = "$ROOT_DIR"
		runroot = "$RUNROOT"
	EOF
	# Named runc, so the kernel's comm of the wrapper is what nri-trace
	# knows the OCI runtime by.
	{
		echo '#!/bin/bash'
		echo "MISSING_CAPS='$(missing_caps)'"
		cat <<-'EOF'
			# nri-trace lab (crio.sh): runc, with a negative oomScoreAdj in the
			# bundle's config.json (or an exec's --process file) raised to 0: root
			# here may not lower oom_score_adj (no CAP_SYS_RESOURCE). And without
			# the capabilities this machine's bounding set lacks (MISSING_CAPS,
			# CAP_SYS_RESOURCE here): CRI-O gives a privileged container every
			# capability the kernel knows (runtime-tools' SetupPrivileged), which
			# runc cannot set ("unable to apply caps"); containerd gives its own.
			JQ_FIX='def fix: (if (.oomScoreAdj // 0) < 0 then .oomScoreAdj = 0 else . end)
				| (if .capabilities then .capabilities |= map_values(if type == "array"
					then map(select(IN($miss[]) | not)) else . end) else . end);
				if .process then .process |= fix else fix end'
			fix() {
				[[ -f $1 ]] || return 0
				jq --argjson miss "$MISSING_CAPS" "$JQ_FIX" "$1" >"$1.nri-trace-lab" 2>/dev/null || {
					rm -f "$1.nri-trace-lab"
					return 0
				}
				if cmp -s <(jq -S . "$1") <(jq -S . "$1.nri-trace-lab"); then
					rm -f "$1.nri-trace-lab"
				else
					mv "$1.nri-trace-lab" "$1"
				fi
			}
			prev=""
			for a in "$@"; do
				case "$prev" in --bundle | -b) fix "$a/config.json" ;; --process | -p) fix "$a" ;; esac
				case "$a" in --bundle=*) fix "${a#--bundle=}/config.json" ;; --process=*) fix "${a#--process=}" ;; esac
				prev="$a"
			done
			exec /usr/sbin/runc "$@"
		EOF
	} >"$CDIR/wrap/runc.tmp"
	chmod 0755 "$CDIR/wrap/runc.tmp"
	mv "$CDIR/wrap/runc.tmp" "$CDIR/wrap/runc"
	# pinns, slowed by the seconds in $CDIR/slow-pinns while that file
	# exists (scenario cri-retry-slow-sandbox; `down` removes it).
	cat >"$CDIR/wrap/pinns.tmp" <<-EOF
		#!/bin/bash
		# nri-trace lab (crio.sh): pinns, slowed while $CDIR/slow-pinns holds seconds.
		if [[ -s $CDIR/slow-pinns ]]; then sleep "\$(cat "$CDIR/slow-pinns")"; fi
		exec "$BIN/pinns" "\$@"
	EOF
	chmod 0755 "$CDIR/wrap/pinns.tmp"
	mv "$CDIR/wrap/pinns.tmp" "$CDIR/wrap/pinns"
}

# pid of our crio, if it runs (its command line names our config).
our_pid() {
	[[ -f $PIDFILE ]] || return 1
	local pid
	pid="$(cat "$PIDFILE" 2>/dev/null)" || return 1
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
	tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF "$CONFIG" || return 1
	echo "$pid"
}

# A containerd of the lab that runs (lab.sh's pid file and config).
containerd_running() {
	local pid
	pid="$(cat "$LAB/containerd.pid" 2>/dev/null)" || return 1
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
	tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF "$LAB/config.toml" || return 1
	echo "$pid"
}

# crio listens on its CRI socket only once its server is ready, so a
# connect is enough to know it answers (no CRI client in bash).
answers() { [[ -S $SOCK ]] && python -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' "$SOCK" 2>/dev/null; }

start_crio() {
	rm -f "$SOCK" # stale from a crash
	log "starting crio ($("$BIN/crio" --version | awk 'NR == 1 {print $3}'), storage $(storage_driver))"
	# As lab.sh's start_containerd: its own session, only stdin/out/err
	# (the lab lock's fd must not live as long as crio).
	(
		for fd in /proc/"$BASHPID"/fd/*; do
			fd="${fd##*/}"
			if ((fd > 2)); then eval "exec $fd>&-"; fi
		done
		export CONTAINERS_STORAGE_CONF="$CDIR/storage.conf" CONTAINERS_REGISTRIES_CONF="$CDIR/registries.conf"
		export TMPDIR="$CDIR/tmp"
		exec setsid "$BIN/crio" --config "$CONFIG" --config-dir "$CDIR/crio.conf.d" >>"$LOG" 2>&1 </dev/null
	) &
	local pid=$!
	echo "$pid" >"$PIDFILE"
	local deadline=$((SECONDS + 30))
	until answers; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$LOG" >&2
			rm -f "$PIDFILE"
			die "crio exited during start-up (log: $LOG)"
		fi
		if ((SECONDS >= deadline)); then
			tail -n 30 "$LOG" >&2
			die "crio did not listen on $SOCK within 30 s (log: $LOG)"
		fi
		sleep 0.1
	done
	log "crio up: pid $pid, $SOCK"
}

# An OCI archive (TAR) into CRI-O's storage as REF, by CRI-O's own copier:
# no registry. CRI-O may run meanwhile (containers/storage locks).
copy_image() {
	CONTAINERS_STORAGE_CONF="$CDIR/storage.conf" "$BIN/copyimg" --root "$ROOT_DIR" --runroot "$RUNROOT" \
		--storage-driver "$(storage_driver)" --signature-policy "$CDIR/policy.json" \
		--import-from "oci-archive:$1" --image-name "$2" >>"$LOG" 2>&1 ||
		die "copyimg of $1 failed (log: $LOG)"
}

# The lab's images, from their OCI layout tars (lab.sh's build_images).
import_images() {
	copy_image "$LAB/images/pause.tar" "$PAUSE_REF"
	copy_image "$LAB/images/busybox.tar" "$BUSYBOX_REF"
	log "images: $PAUSE_REF $BUSYBOX_REF"
}

# crio.sh import TAR REF: an image of the user's (the nri-trace image of
# `cargo xtask image`, for the cluster's DaemonSet) into CRI-O's storage,
# as `ctr images import` puts it into containerd's.
cmd_import() {
	need_root
	[[ $# -eq 2 && -f $1 ]] || die "usage: crio.sh import OCI_ARCHIVE_TAR IMAGE_REF"
	[[ -x $BIN/copyimg && -f $CDIR/storage.conf ]] || die "CRI-O is not set up (run crio.sh up first)"
	copy_image "$1" "$2"
	log "imported $1 as $2"
}

cmd_up() {
	need_root
	local t0=$SECONDS pid want="${NRI_TRACE_LAB_RUNTIME:-containerd-2.3}"
	if [[ $want != crio ]]; then
		# lab.sh sent `up` here because $LAB/runtime says crio.
		if pid="$(our_pid)"; then
			die "the lab runs crio (pid $pid), not $want: 'lab.sh down' first, then 'up' again"
		fi
		log "crio stopped uncleanly: down, then up $want"
		cmd_down
		exec bash "$HERE/lab.sh" up
	fi
	[[ -x $BIN/crio && -x $BIN/copyimg && -x $BIN/pinns ]] ||
		die "CRI-O not built: run 'NRI_TRACE_LAB_RUNTIME=crio lab/lab.sh install' (cargo xtask lab --runtime crio install)"
	if pid="$(containerd_running)"; then
		die "the lab runs $(cat "$RUNTIME_FILE" 2>/dev/null || echo containerd) (pid $pid), not crio: 'lab.sh down' first, then 'up' again"
	fi
	if pid="$(our_pid)"; then
		log "crio already running (pid $pid)"
		if ! cmp -s "$CONFIG" <(write_config /dev/stdout); then
			log "warning: running config differs from the current settings; 'down' and 'up' to apply"
		fi
		return 0
	fi
	if [[ -d $RUNROOT || -d $RUNC_ROOT ]]; then
		log "crio stopped uncleanly: down first"
		cmd_down
	fi
	mkdir -p "$LAB/run" "$ROOT_DIR" "$RUNROOT" "$STATE_DIR" "$RUNC_ROOT" "$CONMON_DIR/exits" "$CONMON_DIR/attach" \
		"$NETNS_DIR" "$CDIR/logs" "$CDIR/tmp" "$LAB/nri/plugins" "$LAB/nri/conf.d"
	chmod 0711 "$LAB"
	echo crio >"$RUNTIME_FILE"
	# The lab's shared parts: the images (pause, busybox as OCI layout
	# tars), the overlay probe and the CNI network (the containerds'
	# bridge and subnet: one lab at a time).
	bash "$HERE/lab.sh" shared
	write_config
	write_side_files
	mark_cgroup_parents crio
	import_images
	start_crio
	wait_nri_listening 10 || die "nothing listens on the NRI socket $NRI_SOCK within 10 s: is NRI enabled? (log: $LOG)"
	log "NRI socket $NRI_SOCK"
	log "up in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- down

stop_crio() {
	local pid
	if pid="$(our_pid)"; then
		log "stopping crio (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		if ! wait_gone "$pid" 10; then
			log "crio ignored SIGTERM; SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			wait_gone "$pid" 5 || true
		fi
	fi
	rm -f "$PIDFILE"
}

# conmon processes of our crio: their command line names our dirs.
our_conmons() {
	local p
	for p in /proc/[0-9]*; do
		[[ $(cat "$p/comm" 2>/dev/null) == conmon ]] || continue
		tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qF "$CDIR/" && echo "${p#/proc/}"
	done
	return 0
}

# Container ids our crio made (runc state, storage, remembered).
our_ids() {
	{
		ls "$RUNC_ROOT" 2>/dev/null || true
		ls "$ROOT_DIR/overlay-containers" "$ROOT_DIR/vfs-containers" 2>/dev/null || true
		cat "$CDIR/ids" 2>/dev/null || true
	} | { grep -E '^[0-9a-f]{64}$' || true; } | sort -u
}

our_mounts() {
	awk -v d="$CDIR" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | tac
}

# cgroups crio-<id> and crio-conmon-<id> of our ids, deepest first.
our_cgroups() {
	local ids
	ids="$(our_ids)"
	[[ -n $ids ]] || return 0
	{ find "$CGROOT" -mindepth 2 -maxdepth 8 -type d -name 'crio-*' 2>/dev/null || true; } |
		awk 'NR == FNR { ids[$0]; next }
		     { n = $0; sub(/.*\/crio-(conmon-)?/, "", n) }
		     (n in ids) { print length($0) " " $0 }' <(echo "$ids") - | sort -rn | cut -d' ' -f2-
}

cmd_down() {
	need_root
	local t0=$SECONDS p id
	[[ -d $CDIR ]] || {
		log "no $CDIR; nothing to do"
		return 0
	}
	our_ids >"$CDIR/ids.tmp" && mv "$CDIR/ids.tmp" "$CDIR/ids"
	rm -f "$CDIR/slow-pinns"

	# 1. crio itself (on SIGTERM it leaves its containers running, as a
	#    node's runtime restart does).
	stop_crio

	# 2. Every container of ours: runc kills what is left in its cgroup and
	#    deletes cgroup and state; then the conmons, which only wait now.
	local d jobs=()
	for d in "$RUNC_ROOT"/*/; do
		[[ -d $d ]] || continue
		id="$(basename "$d")"
		/usr/sbin/runc --root "$RUNC_ROOT" delete --force "$id" >/dev/null 2>&1 &
		jobs+=($!)
	done
	for p in "${jobs[@]}"; do wait "$p" || true; done
	local cm
	cm="$(our_conmons)"
	if [[ -n $cm ]]; then
		# shellcheck disable=SC2086 # one pid per word
		kill -TERM $cm 2>/dev/null || true
		for p in $cm; do
			wait_gone "$p" 2 && continue
			kill -KILL "$p" 2>/dev/null || true
			wait_gone "$p" 5 || log "warning: conmon $p still there after SIGKILL"
		done
	fi

	# 3. Mounts under $CDIR (container rootfs overlays, pod shm, pinned
	#    namespaces), deepest first.
	local m n=0
	while read -r m; do
		[[ -n $m ]] || continue
		umount "$m" 2>/dev/null || umount -l "$m" || log "warning: cannot unmount $m"
		n=$((n + 1))
	done < <(our_mounts)
	((n == 0)) || log "unmounted $n mount(s) under $CDIR"

	# 4. The container store and every runtime dir: the next `up` imports
	#    the images again (copyimg, well under a second).
	if [[ -n $(our_mounts) ]]; then
		log "warning: mounts remain under $CDIR; keeping its state"
	else
		rm -rf "$ROOT_DIR" "$RUNROOT" "$STATE_DIR" "$RUNC_ROOT" "$CONMON_DIR" "$NETNS_DIR" "$CDIR/logs" "$CDIR/tmp" "$LAB/kubelet"
		rm -f "$SOCK"
	fi
	for id in $(cat "$CDIR/ids" 2>/dev/null) $(our_cni_result_ids); do
		rm -f /var/lib/cni/results/*-"$id"-* /var/lib/cni/cache/results/*-"$id"-*
	done
	rm -rf "$LAB/cni/ipam/$CNI_NET"

	# 5. cgroups of our containers and conmons, then the /crio parents that
	#    `up` saw absent.
	local cg
	while read -r cg; do
		[[ -n $cg && -d $cg ]] || continue
		if [[ -s $cg/cgroup.procs ]]; then
			xargs -r kill -KILL <"$cg/cgroup.procs" 2>/dev/null || true
			sleep 0.2
		fi
		rmdir "$cg" 2>/dev/null || log "warning: cannot remove cgroup $cg"
	done < <(our_cgroups)
	if [[ -f $CG_MARK ]]; then
		while read -r cg; do
			if [[ -d $cg ]]; then rmdir "$cg" 2>/dev/null || true; fi
		done <"$CG_MARK"
		rm -f "$CG_MARK"
	fi

	# 6. The pod bridge.
	if ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link del "$BRIDGE" && log "removed bridge $BRIDGE"
	fi
	log "down in $((SECONDS - t0)) s"
	report_leftovers || die "down left something behind (see LEFT lines)"
	rm -f "$CDIR/ids"
	if [[ $(cat "$RUNTIME_FILE" 2>/dev/null) == crio ]]; then rm -f "$RUNTIME_FILE"; fi
}

report_leftovers() {
	local left=0 x
	if x="$(our_pid)"; then
		log "LEFT: crio pid $x"
		left=1
	fi
	x="$(our_conmons)"
	[[ -z $x ]] || {
		log "LEFT: conmons: $x"
		left=1
	}
	x="$(our_mounts)"
	[[ -z $x ]] || {
		log "LEFT: mounts:"$'\n'"$x"
		left=1
	}
	x="$(our_cgroups)"
	[[ -z $x ]] || {
		log "LEFT: cgroups:"$'\n'"$x"
		left=1
	}
	if ip link show "$BRIDGE" >/dev/null 2>&1; then
		log "LEFT: bridge $BRIDGE"
		left=1
	fi
	x="$(our_cni_result_ids)"
	[[ -z $x ]] || {
		log "LEFT: CNI results in /var/lib/cni for pods: $x"
		left=1
	}
	((left)) && return 1
	log "nothing of ours left (no crio, conmon, mount, cgroup, bridge)"
}

cmd_status() {
	local pid
	echo "lab dir:     $LAB"
	if pid="$(our_pid)"; then
		echo "runtime:     crio"
		echo "crio:        running, pid $pid ($("$BIN/crio" --version | awk 'NR == 1 {print $3}'))"
	else
		echo "crio:        not running"
	fi
	echo "built:       $(if [[ -x $BIN/crio ]]; then echo "$BIN ($(cat "$BUILT_FROM" 2>/dev/null || echo "no $BUILT_FROM"))"; else echo no; fi)"
	printf 'CRI socket:  %s %s\n' "$SOCK" "$([[ -S $SOCK ]] && echo present || echo absent)"
	printf 'NRI socket:  %s %s\n' "$NRI_SOCK" "$([[ -S $NRI_SOCK ]] && echo present || echo absent)"
	echo "config:      $CONFIG"
	echo "log:         $LOG"
	echo "conmons:     $(our_conmons | tr '\n' ' ')"
	echo "mounts under $CDIR:"
	our_mounts | sed 's/^/  /'
	echo "cgroups of our containers:"
	our_cgroups | sed 's/^/  /'
}

# crio alone (pods, conmons and containers stay): what a node's runtime
# restart does.
cmd_restart() {
	need_root
	our_pid >/dev/null || die "crio is not running: 'up' first"
	stop_crio
	start_crio
	wait_nri_listening 10 || die "nothing listens on the NRI socket $NRI_SOCK within 10 s of the restart (log: $LOG)"
}

case "${1:-}" in
install) cmd_install ;;
up) cmd_up ;;
down) cmd_down ;;
restart) cmd_restart ;;
status) cmd_status ;;
import) cmd_import "${@:2}" ;;
*)
	echo "usage: $0 install|up|down|restart|status|import TAR REF" >&2
	exit 2
	;;
esac
