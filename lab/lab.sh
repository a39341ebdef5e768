#!/usr/bin/env bash
# nri-trace lab: a PRIVATE containerd (1.7, 2.1, 2.2 or 2.3) with NRI
# enabled; with NRI_TRACE_LAB_RUNTIME=crio every command is lab/crio.sh's
# (CRI-O 1.36.3).
#
#   lab.sh install   apt: containerd 1.7 from trixie (pinned low), runc,
#                    busybox-static, CNI plugins, gcc, iproute2 (idempotent);
#                    with NRI_TRACE_LAB_RUNTIME=containerd-2.1 also sid's
#                    containerd 2.1, fetched with a private apt config and
#                    unpacked (dpkg -x) under $LAB/ctrd21 (never installed);
#                    with containerd-2.2 or containerd-2.3 that release built
#                    from its Go module into $LAB/ctrd22 or $LAB/ctrd23
#                    (lab/ctrd-module.sh)
#   lab.sh up        write config, build + import images, start containerd
#   lab.sh down      stop everything `up` started and clean up after it
#   lab.sh status    what runs (which runtime), sockets, images, leftovers
#
# One lab at a time: the containerds use the same sockets, state and runc
# root under $LAB (so every test finds them where it always did); each has
# its own containerd root (metadata, content, snapshots). The runtime is
# chosen at `up` (NRI_TRACE_LAB_RUNTIME, default containerd-2.3) and kept
# in $LAB/runtime until `down`, which stops whichever one runs.
#
# Everything lives under $NRI_TRACE_LAB_DIR (default /var/lib/nri-trace-lab);
# the node's own containerd (if any) on /run/containerd/containerd.sock is
# never used, stopped or reconfigured. See docs/lab.md for the reasons
# behind each choice.
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
REQUEST_TIMEOUT="${NRI_TRACE_LAB_REQUEST_TIMEOUT:-2s}"
REGISTRATION_TIMEOUT="5s"
# NRI's built-in default validator (containerd 2.2+, NRI v0.10+): off, as
# containerd ships it, unless this names what it rejects, a comma list of
# its reject_* settings (e.g. reject_oci_hook_adjustment; nri
# plugins/default-validator/default-validator.go). Read at `up` only.
DEFAULT_VALIDATOR="${NRI_TRACE_LAB_DEFAULT_VALIDATOR:-}"
# containerd's own Prometheus endpoint (/v1/metrics: its gRPC and, from 2.3,
# its NRI metrics, containerd internal/nri/metrics.go): off, as containerd
# ships it, unless this names the host:port it listens on (containerd 2.x).
# Read at `up` only.
RUNTIME_METRICS="${NRI_TRACE_LAB_RUNTIME_METRICS:-}"
LOG_LEVEL="${NRI_TRACE_LAB_LOG_LEVEL:-info}"
# containerd's OpenTelemetry tracing (containerd 2.x: its CRI server through
# otelgrpc, its NRI calls through otelttrpc, docs/tracing.md of the
# release): off, as containerd ships it, unless this names an OTLP/HTTP
# endpoint (e.g. http://127.0.0.1:4318, lab/otelcol.sh's collector).
# containerd reads only the OTEL_* variables of its environment: they are
# set for it alone, every span sampled. Read at `up` and kept for
# `restart` in $LAB/otlp-endpoint.
OTLP_ENDPOINT="${NRI_TRACE_LAB_OTLP_ENDPOINT:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LAB_TAG="lab"
# shellcheck source=lab/common.sh
. "$HERE/common.sh"

SOCK="$LAB/run/containerd.sock"
TTRPC_SOCK="$LAB/run/containerd.sock.ttrpc"
NRI_SOCK="$LAB/run/nri.sock"
CONFIG="$LAB/config.toml"
PIDFILE="$LAB/containerd.pid"
LOG="$LAB/containerd.log"
# containerd-1.7, containerd-2.1, containerd-2.2 or containerd-2.3
# (default: what a new node runs). `down`, `restart` and
# `status` act on the runtime recorded by `up` ($LAB/runtime) while it runs.
RUNTIME_FILE="$LAB/runtime"
WANT_RUNTIME="${NRI_TRACE_LAB_RUNTIME:-containerd-2.3}"
case "$WANT_RUNTIME" in
containerd-1.7 | containerd-2.1 | containerd-2.2 | containerd-2.3 | crio) ;;
*) die_early="NRI_TRACE_LAB_RUNTIME=$WANT_RUNTIME: want containerd-1.7, containerd-2.1, containerd-2.2, containerd-2.3 or crio" ;;
esac
# CRI-O is lab/crio.sh's (same lab dir, lock and NRI socket; its own CRI
# socket run/crio.sock): `install` goes by the runtime asked for, the
# other commands by the one that runs (recorded at `up`), else the one
# asked for. `shared` (images, CNI network) stays here.
if [[ ${1:-} != shared && -z ${die_early:-} ]]; then
	recorded="$(cat "$LAB/runtime" 2>/dev/null || true)"
	if [[ ${1:-} == install ]]; then recorded=""; fi
	if [[ $recorded == crio ]] || { [[ -z $recorded && $WANT_RUNTIME == crio ]]; }; then
		exec bash "$(dirname "${BASH_SOURCE[0]}")/crio.sh" "$@"
	fi
fi
RUNTIME="$WANT_RUNTIME"
if [[ $RUNTIME == crio ]]; then RUNTIME=containerd-1.7; fi # until `up` hands over
if [[ -f $LAB/containerd.pid ]]; then
	# Up (or died without `down`): the runtime `up` started. A lab.sh from
	# before containerd 2.1 wrote no runtime file and ran only 1.7.
	RUNTIME="$(cat "$RUNTIME_FILE" 2>/dev/null || echo containerd-1.7)"
fi
# containerd 2.1 from Debian sid, unpacked here (package tree in pkg/, the
# private apt config and its state in apt/).
CTRD21_DIR="$LAB/ctrd21"
CTRD21_BIN="$CTRD21_DIR/pkg/usr/bin"
# containerd 2.2 and 2.3, built from the Go module into $LAB/ctrd22/bin and
# $LAB/ctrd23/bin.
# shellcheck source=lab/ctrd-module.sh
. "$HERE/ctrd-module.sh"
SYSTEM_PATH="$PATH"
# The directory of a containerd 2.x's own binaries.
ctrd_bin_dir() { # runtime
	case "$1" in
	containerd-2.1) echo "$CTRD21_BIN" ;;
	containerd-2.2 | containerd-2.3) echo "$(ctrd_module_dir "$1")/bin" ;;
	esac
}
select_runtime() { # containerd-1.7 | containerd-2.1 | containerd-2.2 | containerd-2.3
	RUNTIME="$1"
	if [[ $RUNTIME == containerd-2.* ]]; then
		local bin v="${RUNTIME#containerd-}"
		bin="$(ctrd_bin_dir "$RUNTIME")"
		CONTAINERD="$bin/containerd"
		CTR="$bin/ctr"
		# Its own shim first on PATH: containerd starts containerd-shim-runc-v2
		# by name, and the system's is 1.7's.
		export PATH="$bin:$SYSTEM_PATH"
		# ctr 2.x prints the server's deprecation warnings (cgroup v1 here)
		# at every call; `up` logs them once instead.
		export CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1
		# Its own metadata, content and snapshots: a root is never opened by
		# another containerd version (root-ctrd21, root-ctrd22, root-ctrd23).
		ROOT_DIR="$LAB/root-ctrd${v/./}"
	else
		CONTAINERD="containerd"
		CTR="ctr"
		export PATH="$SYSTEM_PATH"
		ROOT_DIR="$LAB/root"
	fi
}
select_runtime "$RUNTIME"
STATE_DIR="$LAB/state"
RUNC_ROOT="$LAB/runc"
CNI_CONF_DIR="$LAB/cni/net.d"
CNI_BIN_DIR="/usr/lib/cni"
CNI_NET="nri-trace-lab"
BRIDGE="nritlab0"
SUBNET="10.88.77.0/24"
IMAGES_DIR="$LAB/images"
NS="k8s.io" # the CRI plugin of containerd 1.7 and 2.1 always uses this namespace
PAUSE_REF="localhost/nri-trace/pause:lab"
BUSYBOX_REF="localhost/nri-trace/busybox:lab"
CGROOT="/sys/fs/cgroup"
# Hierarchies where `up` found no k8s.io cgroup: `down` may rmdir those.
CG_MARK="$LAB/cgroup-parents-we-created"

TRIXIE_SOURCES="/etc/apt/sources.list.d/nri-trace-lab-trixie.sources"
TRIXIE_PIN="/etc/apt/preferences.d/nri-trace-lab-trixie"
PACKAGES=(runc busybox-static containernetworking-plugins gcc libc6-dev iproute2)

[[ -z ${die_early:-} ]] || die "$die_early"
ctr_() { "$CTR" --address "$SOCK" "$@"; }

# ---------------------------------------------------------------- install

cmd_install() {
	need_root
	local changed_sources=0
	if [[ ! -f $TRIXIE_SOURCES ]]; then
		# containerd 1.7 (NRI) is only in trixie; bookworm has 1.6. Use the
		# same Debian mirror this machine already uses for bookworm.
		local mirror
		# shellcheck disable=SC2016 # $(SITE) is apt's format, not shell
		mirror="$(apt-get indextargets --format '$(SITE)|$(RELEASE)' 2>/dev/null |
			awk -F'|' '$2 == "bookworm" { print $1; exit }')"
		[[ -n $mirror ]] || die "no bookworm apt source found to derive the trixie source from"
		cat >"$TRIXIE_SOURCES" <<-EOF
			# Added by nri-trace lab/lab.sh: containerd 1.7 (with NRI) from trixie.
			# Pinned to priority 100 in $TRIXIE_PIN
			# so that nothing else is ever taken from trixie.
			Types: deb
			URIs: $mirror
			Suites: trixie
			Components: main
			Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
		EOF
		log "added apt source $TRIXIE_SOURCES (trixie from $mirror)"
		changed_sources=1
	else
		log "apt source $TRIXIE_SOURCES already present"
	fi
	if [[ ! -f $TRIXIE_PIN ]] || ! grep -q 'Pin-Priority: 100' "$TRIXIE_PIN"; then
		# 100 < 500: trixie packages are candidates only when asked for
		# explicitly (containerd/trixie); no upgrade ever pulls them in.
		cat >"$TRIXIE_PIN" <<-'EOF'
			Package: *
			Pin: release n=trixie
			Pin-Priority: 100
		EOF
		log "pinned trixie at priority 100 in $TRIXIE_PIN"
		changed_sources=1
	else
		log "trixie pin $TRIXIE_PIN already present"
	fi

	local want=() p
	local cver
	cver="$(pkg_version containerd)"
	[[ $cver == 1.7.* ]] || want+=("containerd/trixie")
	for p in "${PACKAGES[@]}"; do
		[[ -n $(pkg_version "$p") ]] || want+=("$p")
	done
	if ((${#want[@]} == 0)); then
		log "all packages installed (containerd $cver, runc $(pkg_version runc)); nothing to do"
		check_bookworm_base
		install_runtime
		return 0
	fi

	# Update when the source is new or its lists were never fetched.
	if ((changed_sources)) || ! apt-cache madison containerd 2>/dev/null | grep -q ' trixie/'; then
		log "apt-get update"
		apt-get update -q >/dev/null
	fi

	local libc_before
	libc_before="$(pkg_version libc6)"
	# Dry run first: refuse before touching anything if apt wants any other
	# package from trixie (trixie's runc needs trixie's libc6 2.41, which
	# would drag in hundreds of packages).
	local plan bad
	plan="$(apt-get install -s -y --no-install-recommends "${want[@]}" 2>&1)" ||
		die "apt-get install -s failed:"$'\n'"$plan"
	bad="$(grep '^Inst ' <<<"$plan" | grep -E 'Debian:13|trixie' | grep -v '^Inst containerd ' || true)"
	if [[ -n $bad ]] || grep -q '^Inst libc6 ' <<<"$plan"; then
		die "apt would take more than containerd from trixie; refusing:"$'\n'"$bad"
	fi
	log "apt-get install ${want[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${want[@]}"
	local libc_after
	libc_after="$(pkg_version libc6)"
	[[ $libc_after == "$libc_before" ]] ||
		die "libc6 changed from $libc_before to $libc_after: the trixie pin failed, fix apt by hand"
	cver="$(pkg_version containerd)"
	[[ $cver == 1.7.* ]] || die "containerd is $cver after install, want 1.7.x from trixie"
	log "installed: containerd $cver, runc $(pkg_version runc), libc6 $libc_after (unchanged)"
	check_bookworm_base
	# The package may have started the distribution's own containerd (on
	# /run/containerd/containerd.sock). We leave it alone: the lab uses
	# other sockets and paths everywhere.
	if pgrep -x containerd >/dev/null; then
		log "note: a containerd is running (pids $(pgrep -d, -x containerd)); the lab neither uses nor stops it"
	fi
	install_runtime
}

# What `install` adds for the runtime asked for, beyond containerd 1.7.
install_runtime() {
	case "$WANT_RUNTIME" in
	containerd-2.1) install_ctrd21 ;;
	containerd-2.2 | containerd-2.3) install_ctrd_module "$WANT_RUNTIME" ;;
	esac
}

# containerd 2.1 from Debian sid, never installed: a private apt
# configuration (APT_CONFIG: its own sources.list with sid only, its own
# state, cache and parts dirs, so neither the system's apt config nor its
# package lists are read or written) downloads the `containerd` package and
# `dpkg -x` unpacks it under $CTRD21_DIR/pkg. The package's binaries need
# libc6 >= 2.34 (bookworm has 2.36) and runc (bookworm's, from
# `cmd_install`). Idempotent: nothing is fetched once the unpacked
# containerd answers with 2.1.
install_ctrd21() {
	local have
	if [[ -x $CTRD21_BIN/containerd ]] && have="$("$CTRD21_BIN/containerd" --version 2>/dev/null)" &&
		[[ $have == *" 2.1."* ]]; then
		log "containerd 2.1 already unpacked in $CTRD21_DIR/pkg ($(awk '{print $3}' <<<"$have"))"
		return 0
	fi
	local apt="$CTRD21_DIR/apt"
	rm -rf "$apt" "$CTRD21_DIR/pkg.tmp"
	mkdir -p "$apt/etc/apt.conf.d" "$apt/etc/sources.list.d" "$apt/etc/preferences.d" \
		"$apt/state/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
	: >"$apt/status"
	: >"$apt/etc/apt.conf"
	cat >"$apt/etc/sources.list" <<-EOF
		# nri-trace lab: Debian sid, for containerd 2.1 only (private apt config).
		deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
	EOF
	cat >"$apt/apt.conf" <<-EOF
		Dir::Etc::main "$apt/etc/apt.conf";
		Dir::Etc::parts "$apt/etc/apt.conf.d";
		Dir::Etc::sourcelist "$apt/etc/sources.list";
		Dir::Etc::sourceparts "$apt/etc/sources.list.d";
		Dir::Etc::preferences "$apt/etc/preferences";
		Dir::Etc::preferencesparts "$apt/etc/preferences.d";
		Dir::State "$apt/state";
		Dir::State::status "$apt/status";
		Dir::Cache "$apt/cache";
		APT::Architecture "$(dpkg --print-architecture)";
		Acquire::Languages "none";
		Acquire::IndexTargets::deb::DEP-11::DefaultEnabled "false";
		Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled "false";
		Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled "false";
		APT::Sandbox::User "root";
		// This machine kind's clock runs ahead of the archive's Release
		// dates (its own apt config turns the same checks off).
		Acquire::Check-Valid-Until "false";
		Acquire::Check-Date "false";
	EOF
	log "fetching containerd 2.1 from Debian sid (private apt config $apt/apt.conf)"
	APT_CONFIG="$apt/apt.conf" apt-get update -q >/dev/null ||
		die "apt-get update of the private sid source failed (apt config $apt/apt.conf)"
	local ver
	ver="$(APT_CONFIG="$apt/apt.conf" apt-cache policy containerd | awk '/Candidate:/ {print $2}')"
	[[ $ver == 2.1.* ]] ||
		die "Debian sid's containerd is ${ver:-absent}, not 2.1.x: lab.sh wants 2.1 (pin a snapshot.debian.org mirror in install_ctrd21)"
	(cd "$apt/debs" && APT_CONFIG="$apt/apt.conf" apt-get download -q "containerd=$ver" >/dev/null) ||
		die "apt-get download containerd=$ver failed"
	local deb
	deb="$(ls "$apt/debs"/containerd_*.deb)"
	dpkg-deb -x "$deb" "$CTRD21_DIR/pkg.tmp"
	rm -rf "$CTRD21_DIR/pkg"
	mv "$CTRD21_DIR/pkg.tmp" "$CTRD21_DIR/pkg"
	have="$("$CTRD21_BIN/containerd" --version)" ||
		die "the unpacked $CTRD21_BIN/containerd does not run"
	[[ $have == *" 2.1."* ]] || die "unpacked containerd says $have, want 2.1"
	[[ -x $CTRD21_BIN/containerd-shim-runc-v2 ]] || die "$deb has no containerd-shim-runc-v2"
	log "containerd $ver unpacked in $CTRD21_DIR/pkg (not installed; dpkg does not know it)"
}

# Fail loudly if libc6 came from trixie (by hand or an earlier run); warn
# if runc is not bookworm's.
check_bookworm_base() {
	local v
	v="$(pkg_version libc6)"
	[[ $v == 2.36-* ]] || die "libc6 is $v, expected bookworm's 2.36: something pulled trixie's libc6"
	v="$(pkg_version runc)"
	[[ $v == 1.1.5* ]] || log "warning: runc is $v, expected bookworm's 1.1.5"
	log "dpkg: libc6 $(pkg_version libc6) (bookworm), runc $v"
}

# ---------------------------------------------------------------- images

build_images() {
	mkdir -p "$IMAGES_DIR"
	local pause="$IMAGES_DIR/pause"
	if [[ ! -x $pause || $HERE/pause.c -nt $pause ]]; then
		# Static: the image has no libc. -s keeps the layer small.
		gcc -static -O2 -s -Wall -o "$pause.tmp" "$HERE/pause.c"
		mv "$pause.tmp" "$pause"
		log "built $pause"
	fi
	if [[ ! -s $IMAGES_DIR/pause.tar || $pause -nt $IMAGES_DIR/pause.tar || $HERE/mkimage.py -nt $IMAGES_DIR/pause.tar ]]; then
		python "$HERE/mkimage.py" --ref "$PAUSE_REF" --out "$IMAGES_DIR/pause.tar" \
			--file "$pause:/pause:0755" --entrypoint /pause
	fi
	local bb=/bin/busybox
	[[ -x $bb ]] || die "$bb missing: run 'lab.sh install' (busybox-static)"
	# A dynamic busybox would need a libc in the image.
	if ldd "$bb" >/dev/null 2>&1; then die "$bb is dynamically linked; install busybox-static"; fi
	if [[ ! -s $IMAGES_DIR/busybox.tar || $bb -nt $IMAGES_DIR/busybox.tar || $HERE/mkimage.py -nt $IMAGES_DIR/busybox.tar ]]; then
		local args=() a
		# `trap` is a sh builtin; these cover what lab workloads use.
		for a in sh ash sleep cat echo ls mount umount kill true false ps env id hostname ip ping nc touch rm mkdir wc grep head tail date; do
			args+=(--symlink "/bin/$a:busybox")
		done
		python "$HERE/mkimage.py" --ref "$BUSYBOX_REF" --out "$IMAGES_DIR/busybox.tar" \
			--file "$bb:/bin/busybox:0755" "${args[@]}" --cmd sh
	fi
}

import_images() {
	local t
	for t in pause busybox; do
		# ctr 1.7 names the image after the ref.name annotation of the
		# index; importing the same tar again is a no-op.
		ctr_ -n "$NS" images import --snapshotter "$(cat "$LAB/snapshotter")" \
			"$IMAGES_DIR/$t.tar" >/dev/null
	done
	local have
	have="$(ctr_ -n "$NS" images ls -q)"
	for t in "$PAUSE_REF" "$BUSYBOX_REF"; do
		grep -qxF "$t" <<<"$have" || die "image $t not present after import; ctr shows:"$'\n'"$have"
	done
	log "images in $NS: $PAUSE_REF $BUSYBOX_REF"
}

# ---------------------------------------------------------------- config

# overlayfs needs a filesystem that supports it under $LAB; else native.
pick_snapshotter() {
	local d="$LAB/.overlay-probe"
	rm -rf "$d"
	mkdir -p "$d"/{l,u,w,m}
	if mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null; then
		umount "$d/m"
		rm -rf "$d"
		echo overlayfs
	else
		rm -rf "$d"
		echo native
	fi
}

write_cni_conf() {
	mkdir -p "$CNI_CONF_DIR" "$LAB/cni/ipam"
	# No ipMasq and no isGateway: the plugins then touch neither iptables
	# nor the global ip_forward sysctl; pods still get their own netns, lo
	# and an eth0 on a private bridge. host-local keeps its leases in the
	# lab dir instead of /var/lib/cni/networks.
	cat >"$CNI_CONF_DIR/10-nri-trace-lab.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$LAB/cni/ipam",
        "ranges": [[{ "subnet": "$SUBNET" }]]
      }
    },
    { "type": "loopback" }
  ]
}
EOF
}

go_arch() {
	case "$(uname -m)" in
	x86_64) echo amd64 ;;
	aarch64) echo arm64 ;;
	*) uname -m ;;
	esac
}

write_config() { # snapshotter [output file]
	local snap="$1"
	[[ -z $RUNTIME_METRICS ]] || die "NRI_TRACE_LAB_RUNTIME_METRICS: wired for containerd 2.x only (2.3 has the NRI metrics)"
	cat >"${2:-$CONFIG}" <<EOF
# Generated by nri-trace lab/lab.sh: a private containerd 1.7 with NRI.
version = 2
root = "$ROOT_DIR"
state = "$STATE_DIR"
# Temporary files (TMPDIR of containerd) stay in the lab dir too.
temp = "$LAB/tmp"
# Containerd must not raise or lower its own oom_score_adj here.
oom_score = 0
# Fail at start-up instead of running without CRI or NRI.
required_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.nri.v1.nri"]
# Snapshotters that cannot work here only add log noise.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$TTRPC_SOCK"

[debug]
  level = "$LOG_LEVEL"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$LAB/opt"

  # Image unpacking through the transfer service uses our snapshotter.
  [[plugins."io.containerd.transfer.v1.local".unpack_config]]
    platform = "linux/$(go_arch)"
    snapshotter = "$snap"

  [plugins."io.containerd.nri.v1.nri"]
    disable = false
    disable_connections = false
    socket_path = "$NRI_SOCK"
    plugin_path = "$LAB/nri/plugins"
    plugin_config_path = "$LAB/nri/conf.d"
    plugin_registration_timeout = "$REGISTRATION_TIMEOUT"
    plugin_request_timeout = "$REQUEST_TIMEOUT"

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_REF"
    # This VM refuses to lower oom_score_adj; without this runc fails with
    # "can't get final child's PID from pipe: EOF".
    restrict_oom_score_adj = true
    # Pod netns files go to <state>/io.containerd.grpc.v1.cri/netns, not
    # /var/run/netns, so they are ours alone and easy to clean.
    netns_mounts_under_state_dir = true
    # Random local port for exec/attach streaming: never clashes.
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    disable_tcp_service = true
    enable_selinux = false

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "$snap"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          # runc state of our containers: $RUNC_ROOT/$NS/<id>
          Root = "$RUNC_ROOT"
          # No systemd on these VMs: cgroupfs paths (/$NS/<id>).
          SystemdCgroup = false

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1
EOF
}

# containerd 2.1: config version 3. The CRI plugin is split into
# io.containerd.cri.v1.runtime (runc, CNI, netns, oom) and
# io.containerd.cri.v1.images (snapshotter, sandbox image as
# pinned_images.sandbox); the streaming server stays on
# io.containerd.grpc.v1.cri. Keys as `containerd config default` of 2.1.9
# prints them (and containerd's docs/cri/config.md).
# containerd 2.2 reads the same file. containerd 2.3 gets version 4, what
# its `config default` prints: the server settings ([grpc], [ttrpc]) are
# the plugins io.containerd.server.v1.grpc and io.containerd.server.v1.ttrpc
# (2.3 would migrate a version 3 file the same way, with a warning at every
# start); everything else is as for 2.1.
write_config_v3() { # snapshotter [output file]
	local snap="$1" version=3 servers plugin_servers="" cdi validator=""
	if [[ -n $DEFAULT_VALIDATOR ]]; then
		case $RUNTIME in
		containerd-2.2 | containerd-2.3) ;;
		*) die "NRI_TRACE_LAB_DEFAULT_VALIDATOR=$DEFAULT_VALIDATOR: $RUNTIME has no built-in NRI validator (containerd 2.2 and 2.3 do, and CRI-O)" ;;
		esac
		validator=$'\n\n    # NRI\'s built-in default validator (NRI_TRACE_LAB_DEFAULT_VALIDATOR).\n    [plugins.\'io.containerd.nri.v1.nri\'.default_validator]\n      enable = true'
		local key
		for key in ${DEFAULT_VALIDATOR//,/ }; do
			[[ $key =~ ^reject_[a-z_]+$ ]] || die "NRI_TRACE_LAB_DEFAULT_VALIDATOR: $key is not a reject_* setting of the default validator"
			validator+=$'\n'"      $key = true"
		done
	fi
	if [[ -n $RUNTIME_METRICS && ! $RUNTIME_METRICS =~ ^[^[:space:]]+:[0-9]+$ ]]; then
		die "NRI_TRACE_LAB_RUNTIME_METRICS=$RUNTIME_METRICS: want host:port (e.g. 127.0.0.1:1338)"
	fi
	cdi=$'# No /etc/cdi here; CDI only adds log noise.\n    enable_cdi = false'
	servers="$(
		cat <<-EOF
			[grpc]
			  address = "$SOCK"

			[ttrpc]
			  address = "$TTRPC_SOCK"
		EOF
	)"
	if [[ $RUNTIME == containerd-2.3 ]]; then
		version=4
		plugin_servers="$(
			cat <<-EOF


				  # Version 4: the servers are plugins (a version 3 file's [grpc] and
				  # [ttrpc]); the ttrpc address is no longer derived from gRPC's.
				  [plugins.'io.containerd.server.v1.grpc']
				    address = "$SOCK"

				  [plugins.'io.containerd.server.v1.ttrpc']
				    address = "$TTRPC_SOCK"
			EOF
		)"
		servers="# The gRPC and ttrpc servers: plugins.'io.containerd.server.v1.*' below."
		if [[ -n $RUNTIME_METRICS ]]; then
			plugin_servers+=$'\n\n  # containerd\'s metrics (NRI_TRACE_LAB_RUNTIME_METRICS).\n  [plugins.\'io.containerd.server.v1.metrics\']\n    address = "'"$RUNTIME_METRICS"'"'
		fi
		# enable_cdi = false is deprecated in 2.3 (a warning in the log and on
		# every ctr call); CDI stays on, reading only the lab's empty dir.
		cdi=$'# enable_cdi = false is deprecated in 2.3: CDI on, the lab\'s own empty dir.\n    '"cdi_spec_dirs = [\"$LAB/cdi\"]"
	fi
	if [[ -n $RUNTIME_METRICS && $version == 3 ]]; then
		servers+=$'\n\n# containerd\'s metrics (NRI_TRACE_LAB_RUNTIME_METRICS).\n[metrics]\n  address = "'"$RUNTIME_METRICS"'"'
	fi
	cat >"${2:-$CONFIG}" <<EOF
# Generated by nri-trace lab/lab.sh: a private containerd ${RUNTIME#containerd-} with NRI.
version = $version
root = "$ROOT_DIR"
state = "$STATE_DIR"
temp = "$LAB/tmp"
oom_score = 0
required_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", "io.containerd.nri.v1.nri"]
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs"]

$servers

[debug]
  level = "$LOG_LEVEL"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$LAB/opt"

  [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
    platform = "linux/$(go_arch)"
    snapshotter = "$snap"

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    disable_connections = false
    socket_path = "$NRI_SOCK"
    plugin_path = "$LAB/nri/plugins"
    plugin_config_path = "$LAB/nri/conf.d"
    plugin_registration_timeout = "$REGISTRATION_TIMEOUT"
    plugin_request_timeout = "$REQUEST_TIMEOUT"$validator

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "$snap"

    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$PAUSE_REF"

  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    # This VM refuses to lower oom_score_adj (as for 1.7).
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    $cdi

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          Root = "$RUNC_ROOT"
          SystemdCgroup = false

    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$CNI_BIN_DIR"]
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    disable_tcp_service = true$plugin_servers
EOF
}

# The config of the runtime `up` starts.
write_runtime_config() { # snapshotter [output file]
	if [[ $RUNTIME == containerd-2.* ]]; then write_config_v3 "$@"; else write_config "$@"; fi
}

# ---------------------------------------------------------------- up

# pid of our containerd, if it runs (checked against its command line so a
# recycled pid is never mistaken for ours).
our_pid() {
	[[ -f $PIDFILE ]] || return 1
	local pid
	pid="$(cat "$PIDFILE" 2>/dev/null)" || return 1
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
	tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF "$CONFIG" || return 1
	echo "$pid"
}

start_containerd() {
	[[ -S $SOCK ]] && rm -f "$SOCK" "$TTRPC_SOCK" # stale from a crash
	log "starting containerd ($("$CONTAINERD" --version | awk '{print $3}'), snapshotter $(cat "$LAB/snapshotter"))"
	# setsid: its own session, so it outlives this shell and no job
	# control signal from the caller's terminal reaches it.
	# Only stdin/out/err: any other descriptor of the caller would live as
	# long as containerd (flock(1) hands its lock fd to its command, so
	# `flock /run/nri-trace-lab.lock lab.sh up` would otherwise leave the
	# lab lock held by containerd until it stops).
	(
		for fd in /proc/"$BASHPID"/fd/*; do
			fd="${fd##*/}"
			if ((fd > 2)); then eval "exec $fd>&-"; fi
		done
		local otlp
		otlp="$(cat "$LAB/otlp-endpoint" 2>/dev/null || true)"
		if [[ -n $otlp ]]; then
			export OTEL_EXPORTER_OTLP_ENDPOINT="$otlp" OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf
			export OTEL_SERVICE_NAME=containerd OTEL_TRACES_SAMPLER=always_on
		fi
		exec setsid "$CONTAINERD" --config "$CONFIG" >>"$LOG" 2>&1 </dev/null
	) &
	local pid=$!
	echo "$pid" >"$PIDFILE"
	local deadline=$((SECONDS + 20))
	until [[ -S $SOCK ]] && ctr_ version >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$LOG" >&2
			rm -f "$PIDFILE"
			die "containerd exited during start-up (log: $LOG)"
		fi
		if ((SECONDS >= deadline)); then
			tail -n 30 "$LOG" >&2
			die "containerd did not answer on $SOCK within 20 s (log: $LOG)"
		fi
		sleep 0.1
	done
	log "containerd up: pid $pid, $SOCK"
}

# SIGTERM, then SIGKILL after 10 s.
stop_containerd() {
	local pid
	if pid="$(our_pid)"; then
		log "stopping containerd (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		if ! wait_gone "$pid" 10; then
			log "containerd ignored SIGTERM; SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			wait_gone "$pid" 5 || true
		fi
	fi
	rm -f "$PIDFILE"
}

# Through our running containerd: kill and delete every task, then delete
# every container of the CRI namespace (snapshots go with them).
delete_all_containers() {
	local tasks id i n=0
	tasks="$(list_tasks)"
	# SIGKILL every task; the CRI plugin notices each exit and deletes the
	# task itself (a concurrent `ctr tasks delete` would race it and fail).
	for id in $tasks; do
		timeout 10 "$CTR" --address "$SOCK" -n "$NS" tasks kill --all --signal SIGKILL "$id" >/dev/null 2>&1 || true
	done
	for ((i = 0; i < 100; i++)); do
		[[ -z $(list_tasks) ]] && break
		sleep 0.1
	done
	for id in $(list_tasks); do # whatever CRI did not delete
		timeout 15 "$CTR" --address "$SOCK" -n "$NS" tasks delete --force "$id" >/dev/null 2>&1 || true
	done
	[[ -z $(list_tasks) ]] || log "warning: tasks still there: $(list_tasks | tr '\n' ' ')"
	for id in $(timeout 10 "$CTR" --address "$SOCK" -n "$NS" containers ls -q 2>/dev/null || true); do
		if timeout 15 "$CTR" --address "$SOCK" -n "$NS" containers delete "$id" >/dev/null 2>&1; then
			n=$((n + 1))
		else
			log "warning: could not delete container $id"
		fi
	done
	((n == 0)) || log "deleted $n container(s) ($(wc -w <<<"$tasks") running) via containerd"
	# containerd 2.x keeps pod sandboxes in a store of their own (the
	# Sandbox API): with only their containers deleted, the CRI plugin
	# recovers them at the next start, NotReady, and Synchronize lists them
	# to every plugin (a sandbox left by a killed test run was listed in
	# nri_lab's split Synchronize on 2.1, 2026-11-28). 1.7's ctr has no
	# `sandboxes`: nothing to do there.
	local sb m=0
	for sb in $(timeout 10 "$CTR" --address "$SOCK" -n "$NS" sandboxes ls 2>/dev/null | awk 'NR > 1 { print $1 }'); do
		if timeout 15 "$CTR" --address "$SOCK" -n "$NS" sandboxes rm --force "$sb" >/dev/null 2>&1; then
			m=$((m + 1))
		else
			log "warning: could not delete sandbox $sb"
		fi
	done
	((m == 0)) || log "deleted $m sandbox record(s) via containerd"
}

# Directories, snapshotter choice, CNI and containerd config.
prepare() {
	mkdir -p "$LAB" "$LAB/run" "$ROOT_DIR" "$STATE_DIR" "$RUNC_ROOT" "$LAB/opt" "$LAB/tmp" \
		"$LAB/nri/plugins" "$LAB/nri/conf.d" "$LAB/cdi"
	chmod 0711 "$LAB"
	echo "$RUNTIME" >"$RUNTIME_FILE"
	pick_snapshotter >"$LAB/snapshotter"
	write_cni_conf
	write_runtime_config "$(cat "$LAB/snapshotter")"
	mark_cgroup_parents "$NS"
}

cmd_up() {
	need_root
	local t0=$SECONDS pid
	if [[ $RUNTIME != "$WANT_RUNTIME" ]] && ! our_pid >/dev/null; then
		# $RUNTIME died without a `down`: clean up after it first.
		log "$RUNTIME stopped uncleanly: down, then up $WANT_RUNTIME"
		cmd_down
		if [[ $WANT_RUNTIME == crio ]]; then exec bash "$HERE/crio.sh" up; fi
		select_runtime "$WANT_RUNTIME"
	fi
	if [[ $RUNTIME == containerd-2.1 ]]; then
		[[ -x $CONTAINERD ]] ||
			die "containerd 2.1 not unpacked: run 'NRI_TRACE_LAB_RUNTIME=containerd-2.1 lab.sh install'"
		[[ $("$CONTAINERD" --version) == *" 2.1."* ]] ||
			die "need containerd 2.1 ($("$CONTAINERD" --version)); run 'NRI_TRACE_LAB_RUNTIME=containerd-2.1 lab.sh install'"
	elif [[ $RUNTIME == containerd-2.[23] ]]; then
		ctrd_module_select "$RUNTIME"
		[[ -x $CONTAINERD && -x $CTRD_BIN/containerd-shim-runc-v2 && -x $CTR ]] ||
			die "$RUNTIME not built: run 'NRI_TRACE_LAB_RUNTIME=$RUNTIME lab.sh install' (cargo xtask lab --runtime $RUNTIME install)"
		# The release lab/ctrd-module.sh pins (a newer pin builds again).
		[[ $("$CONTAINERD" --version) == "containerd $CTRD_MODULE $CTRD_VERSION "* ]] ||
			die "need containerd $CTRD_VERSION in $CTRD_BIN ($("$CONTAINERD" --version)); run 'NRI_TRACE_LAB_RUNTIME=$RUNTIME lab.sh install'"
	else
		command -v containerd >/dev/null || die "containerd not installed: run 'lab.sh install'"
		# The config (NRI section, version 2) is written for 1.7.
		[[ $(containerd --version) == *" 1.7."* ]] ||
			die "need containerd 1.7 ($(containerd --version)); run 'lab.sh install'"
	fi
	if pid="$(our_pid)"; then
		# One lab at a time: the other runtime must go down first.
		[[ $RUNTIME == "$WANT_RUNTIME" ]] ||
			die "the lab runs $RUNTIME (pid $pid), not $WANT_RUNTIME: 'lab.sh down' first, then 'up' again"
		log "$RUNTIME already running (pid $pid)"
		# Settings (e.g. NRI_TRACE_LAB_REQUEST_TIMEOUT) apply at start only.
		if ! cmp -s "$CONFIG" <(write_runtime_config "$(cat "$LAB/snapshotter")" /dev/stdout); then
			log "warning: running config differs from the current settings; 'down' and 'up' to apply"
		fi
		if [[ $(cat "$LAB/otlp-endpoint" 2>/dev/null || true) != "$OTLP_ENDPOINT" ]]; then
			log "warning: containerd's tracing differs from NRI_TRACE_LAB_OTLP_ENDPOINT='$OTLP_ENDPOINT'; 'down' and 'up' to apply"
		fi
	else
		prepare
		if [[ -n $OTLP_ENDPOINT ]]; then
			[[ $RUNTIME == containerd-2.* ]] || die "NRI_TRACE_LAB_OTLP_ENDPOINT: containerd 1.7's tracing is configured in its config file, not by the lab (use containerd 2.x)"
			echo "$OTLP_ENDPOINT" >"$LAB/otlp-endpoint"
			log "containerd traces to $OTLP_ENDPOINT (OTLP/HTTP, every span)"
		else
			rm -f "$LAB/otlp-endpoint"
		fi
		start_containerd
		# Containers at start-up can only be leftovers of an unclean stop
		# (`down` deletes them all while containerd answers). The CRI
		# plugin has loaded them as NOTREADY pods, with netns, IP leases
		# and cgroups still around: a full `down` and a fresh start.
		if [[ -n $(timeout 10 "$CTR" --address "$SOCK" -n "$NS" containers ls -q 2>/dev/null) ]]; then
			log "found containers left by an unclean stop: down, then start again"
			cmd_down
			prepare
			start_containerd
		fi
	fi
	build_images
	import_images
	wait_nri_listening 10 || die "nothing listens on the NRI socket $NRI_SOCK within 10 s: is NRI enabled? (log: $LOG)"
	log "NRI socket $NRI_SOCK"
	if [[ $RUNTIME == containerd-2.* ]]; then
		local d
		d="$(ctr_ deprecations list 2>/dev/null | awk 'NR > 1 {$2 = ""; print}' || true)"
		[[ -z $d ]] || log "containerd's deprecation warnings:"$'\n'"$d"
	fi
	log "up in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- down

# pids of containerd-shim-runc-v2 processes started by OUR containerd: the
# shim gets `-address <our grpc socket>` on its command line.
our_shims() {
	local p
	for p in /proc/[0-9]*; do
		[[ $(cat "$p/comm" 2>/dev/null) == containerd-shim* ]] || continue
		tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -A1 -xF -- '-address' | grep -qxF "$SOCK" &&
			echo "${p#/proc/}"
	done
	return 0
}

# Container ids our instance knows about, from its own directories (works
# when containerd is no longer running).
our_ids() {
	{
		ls "$RUNC_ROOT/$NS" 2>/dev/null || true
		ls "$STATE_DIR/io.containerd.runtime.v2.task/$NS" 2>/dev/null || true
		ls "$ROOT_DIR/io.containerd.grpc.v1.cri/sandboxes" 2>/dev/null || true
		ls "$ROOT_DIR/io.containerd.grpc.v1.cri/containers" 2>/dev/null || true
		cat "$LAB/ids" 2>/dev/null || true
	} | { grep -E '^[0-9a-f]{64}$' || true; } | sort -u
}

# Mount points at or under $LAB, deepest (most recent) first.
our_mounts() {
	awk -v lab="$LAB" '$5 == lab || index($5, lab "/") == 1 {print $5}' /proc/self/mountinfo | tac
}

# cgroup directories named after one of our container ids, deepest first.
our_cgroups() {
	local ids
	ids="$(our_ids)"
	[[ -n $ids ]] || return 0
	{ find "$CGROOT" -mindepth 2 -maxdepth 8 -type d 2>/dev/null || true; } |
		awk 'NR == FNR { ids["/" $0]; next }
		     match($0, /\/[0-9a-f]+$/) && (substr($0, RSTART) in ids) { print length($0) " " $0 }' \
			<(echo "$ids") - | sort -rn | cut -d' ' -f2-
}

list_tasks() { timeout 10 "$CTR" --address "$SOCK" -n "$NS" tasks ls -q 2>/dev/null || true; }

cmd_down() {
	need_root
	local t0=$SECONDS p id
	# Remember every id before anything is deleted: cgroups are found by id.
	[[ -d $LAB ]] || {
		log "no lab dir $LAB; nothing to do"
		return 0
	}
	our_ids >"$LAB/ids.tmp" && mv "$LAB/ids.tmp" "$LAB/ids"

	# 1. Pods and containers, through our containerd while it answers, so
	#    shims exit the normal way (they remove their sockets and bundles).
	if our_pid >/dev/null && timeout 5 "$CTR" --address "$SOCK" version >/dev/null 2>&1; then
		delete_all_containers
	fi
	our_ids >>"$LAB/ids"

	# 2. Containers left running (containerd did not answer, or failed to
	#    delete them): runc kills what is left in each container's cgroup
	#    and deletes cgroup + state. While the shim still lives, it reaps
	#    the killed init at once; an orphaned init stays a zombie until PID
	#    1 reaps it, which this VM's PID 1 does only after a few seconds.
	local d inits=() jobs=()
	for d in "$RUNC_ROOT/$NS"/*/; do
		[[ -d $d ]] || continue
		id="$(basename "$d")"
		p="$(runc --root "$RUNC_ROOT/$NS" state "$id" 2>/dev/null | sed -n 's/^  "pid": \([0-9]*\),$/\1/p')"
		[[ -z $p || $p == 0 ]] || inits+=("$p")
		runc --root "$RUNC_ROOT/$NS" delete --force "$id" >/dev/null 2>&1 &
		jobs+=($!)
	done
	# Only these: a bare `wait` would also wait for a containerd that `up`
	# started from this same shell.
	for p in "${jobs[@]}"; do wait "$p" || true; done
	# Wait, so that nothing of ours shows in the process table afterwards.
	for p in "${inits[@]}"; do
		wait_gone "$p" 10 || log "warning: pid $p not reaped by PID 1 yet ($(ps -o stat= -p "$p"))"
	done

	# 3. Shims of our instance that are still there (their containers are
	#    gone now, so they have nothing left to clean up).
	local shims
	shims="$(our_shims)"
	if [[ -n $shims ]]; then
		log "killing shims: $(tr '\n' ' ' <<<"$shims")"
		# shellcheck disable=SC2086 # one pid per word
		kill -TERM $shims 2>/dev/null || true
		for p in $shims; do
			wait_gone "$p" 2 && continue
			kill -KILL "$p" 2>/dev/null || true
			wait_gone "$p" 5 || log "warning: shim $p still there after SIGKILL"
		done
	fi

	# 4. containerd: SIGTERM, then SIGKILL after 10 s.
	stop_containerd

	# 5. Shim sockets in /run/containerd/s named by our bundles (a killed
	#    shim leaves its socket behind).
	local a
	for a in "$STATE_DIR/io.containerd.runtime.v2.task/$NS"/*/address; do
		[[ -f $a ]] || continue
		p="$(sed 's|^unix://||' "$a")"
		[[ $p == /run/containerd/s/* ]] && rm -f "$p"
	done

	# 6. Mounts under $LAB (rootfs overlays, /dev/shm of pods, netns bind
	#    mounts), deepest first; lazy unmount only as the last resort.
	local m n=0
	while read -r m; do
		[[ -n $m ]] || continue
		umount "$m" 2>/dev/null || umount -l "$m" || log "warning: cannot unmount $m"
		n=$((n + 1))
	done < <(our_mounts)
	((n == 0)) || log "unmounted $n mount(s) under $LAB"

	# 7. Pod netns files (ours only: they live in our state dir) and
	#    everything else that is runtime state; images/metadata stay.
	local netns_dir="$STATE_DIR/io.containerd.grpc.v1.cri/netns"
	local nsf=("$netns_dir"/*)
	if [[ -e ${nsf[0]} ]]; then log "removing netns files: ${nsf[*]##*/}"; fi
	if [[ -n $(our_mounts) ]]; then
		# Never rm -rf across a mount point.
		log "warning: mounts remain under $LAB; keeping $STATE_DIR and $RUNC_ROOT"
	else
		# kubelet/: the driver's pod volume dirs (cri-driver --volume).
		rm -rf "$STATE_DIR" "$RUNC_ROOT" "$LAB/run" "$LAB/kubelet"
	fi
	# libcni caches a result per network and container id (our network
	# and go-cni's "cni-loopback") in /var/lib/cni; without a CNI DEL they
	# stay. Remove those of our network and of our ids only.
	for id in $(cat "$LAB/ids" 2>/dev/null) $(our_cni_result_ids); do
		rm -f /var/lib/cni/results/*-"$id"-* /var/lib/cni/cache/results/*-"$id"-*
	done
	# IP leases of pods that are gone.
	rm -rf "$LAB/cni/ipam/$CNI_NET"

	# 8. cgroups of our containers: kill anything still inside, then rmdir
	#    (deepest first). Then the k8s.io parents that `up` saw absent.
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
			if [[ -d $cg ]]; then rmdir "$cg" 2>/dev/null || true; fi # non-empty: not only ours
		done <"$CG_MARK"
		rm -f "$CG_MARK"
	fi

	# 9. The pod bridge.
	if ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link del "$BRIDGE" && log "removed bridge $BRIDGE"
	fi
	log "down in $((SECONDS - t0)) s"
	# Keep the id list while something is left, for the next `down`.
	report_leftovers || die "down left something behind (see LEFT lines)"
	rm -f "$LAB/ids" "$RUNTIME_FILE"
}

# ---------------------------------------------------------------- status

report_leftovers() {
	local left=0 x
	x="$(our_shims)"
	[[ -z $x ]] || {
		log "LEFT: shims: $x"
		left=1
	}
	if x="$(our_pid)"; then
		log "LEFT: containerd pid $x"
		left=1
	fi
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
	x="$(ls "$STATE_DIR/io.containerd.grpc.v1.cri/netns" 2>/dev/null || true)"
	[[ -z $x ]] || {
		log "LEFT: netns: $x"
		left=1
	}
	((left)) && return 1
	log "nothing of ours left (no containerd, shim, mount, cgroup, netns, bridge)"
}

cmd_status() {
	local pid
	echo "lab dir:     $LAB"
	if pid="$(our_pid)"; then
		echo "runtime:     $RUNTIME"
		echo "containerd:  running, pid $pid ($("/proc/$pid/exe" --version | awk '{print $3}'))"
	else
		echo "containerd:  not running (NRI_TRACE_LAB_RUNTIME: $WANT_RUNTIME)"
	fi
	local r="$RUNTIME"
	[[ -n ${pid:-} ]] || r="$WANT_RUNTIME"
	if [[ $r == containerd-2.[23] ]]; then
		ctrd_module_select "$r"
		echo "built:       $(if [[ -x $CTRD_BIN/containerd ]]; then echo "$CTRD_BIN ($(cat "$CTRD_BIN/built-from" 2>/dev/null || echo "no built-from"))"; else echo "no ($r: lab.sh install)"; fi)"
	fi
	printf 'grpc socket: %s %s\n' "$SOCK" "$([[ -S $SOCK ]] && echo present || echo absent)"
	printf 'ttrpc:       %s %s\n' "$TTRPC_SOCK" "$([[ -S $TTRPC_SOCK ]] && echo present || echo absent)"
	printf 'NRI socket:  %s %s\n' "$NRI_SOCK" "$([[ -S $NRI_SOCK ]] && echo present || echo absent)"
	echo "config:      $CONFIG"
	echo "log:         $LOG"
	if [[ -n ${pid:-} ]] && timeout 5 "$CTR" --address "$SOCK" version >/dev/null 2>&1; then
		echo "plugins:"
		ctr_ plugins ls | awk 'NR==1 || /cri|nri|overlayfs|native/' | sed 's/^/  /'
		echo "images ($NS):"
		ctr_ -n "$NS" images ls | awk 'NR>1 {print "  " $1, $3}'
		echo "tasks ($NS):"
		ctr_ -n "$NS" tasks ls | sed 's/^/  /'
	fi
	echo "shims:       $(our_shims | tr '\n' ' ')"
	echo "mounts under $LAB:"
	our_mounts | sed 's/^/  /'
	echo "cgroups of our containers:"
	our_cgroups | sed 's/^/  /'
	echo "bridge $BRIDGE: $(ip link show "$BRIDGE" >/dev/null 2>&1 && echo present || echo absent)"
}

# Restart containerd only: its pods, shims and containers stay (what a
# node's runtime upgrade or crash does); plugins it launched are launched
# again, external ones must reconnect.
cmd_restart() {
	need_root
	our_pid >/dev/null || die "containerd is not running: 'up' first"
	stop_containerd
	start_containerd
	wait_nri_listening 10 || die "nothing listens on the NRI socket $NRI_SOCK within 10 s of the restart (log: $LOG)"
}

# The parts every runtime of the lab shares (crio.sh calls it at `up`):
# the images as OCI layout tars, the overlay probe, the CNI network.
cmd_shared() {
	need_root
	mkdir -p "$LAB"
	pick_snapshotter >"$LAB/snapshotter"
	write_cni_conf
	build_images
}

case "${1:-}" in
install) cmd_install ;;
shared) cmd_shared ;;
up) cmd_up ;;
down) cmd_down ;;
restart) cmd_restart ;;
status) cmd_status ;;
*)
	echo "usage: $0 install|up|down|restart|status" >&2
	exit 2
	;;
esac
