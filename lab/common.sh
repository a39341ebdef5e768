# shellcheck shell=bash
# What lab.sh (the containerds) and crio.sh (CRI-O) both need, sourced by
# each after it set LAB_TAG (the prefix of its messages), CNI_NET,
# NRI_SOCK and, for mark_cgroup_parents, CGROOT and CG_MARK.

log() { printf '%s: %s\n' "$LAB_TAG" "$*"; }
die() {
	printf '%s: ERROR: %s\n' "$LAB_TAG" "$*" >&2
	exit 1
}
need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root"; }
# Debian's python3 (stdlib only); pyenv shims may point elsewhere.
python() { if [[ -x /usr/bin/python3 ]]; then /usr/bin/python3 "$@"; else python3 "$@"; fi; }
pkg_version() { { dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null || true; } | awk '$3=="installed"{print $4}'; }

wait_gone() { # pid timeout_s
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

# Wait until a process listens on the NRI socket $NRI_SOCK (at most $1
# seconds). The socket file alone proves nothing after a restart: the old
# runtime's file stays until the new one re-binds it, and NRI's
# adaptation Start launches the pre-launched plugins before it listens
# (containerd/nri pkg/adaptation/adaptation.go, Start), so an external plugin
# started in between is refused (ECONNREFUSED). Read from /proc/net/unix
# (flags 00010000: __SO_ACCEPTCON, listening), not by connecting: a
# connection to the NRI socket is a plugin to the runtime, which would wait
# for it to register.
wait_nri_listening() { # timeout_s
	local i
	for ((i = 0; i < $1 * 10; i++)); do
		[[ -n $(awk -v p="$NRI_SOCK" '$4 == "00010000" && $8 == p' /proc/net/unix) ]] && return 0
		sleep 0.1
	done
	return 1
}

# Pod ids of the CNI results the lab's network left in /var/lib/cni (a
# DEL that never ran).
our_cni_result_ids() {
	local f
	for f in /var/lib/cni/results/"$CNI_NET"-* /var/lib/cni/cache/results/"$CNI_NET"-*; do
		[[ -e $f ]] || continue
		f="${f##*/"$CNI_NET"-}"
		echo "${f%%-*}"
	done
	return 0
}

# Note (once per `up`) the cgroup parents NAME (the runtime's: k8s.io,
# crio) absent in each hierarchy: `down` may rmdir those, and only those.
mark_cgroup_parents() { # name
	[[ -f $CG_MARK ]] && return 0
	local d
	: >"$CG_MARK"
	for d in "$CGROOT" "$CGROOT"/*/; do
		d="${d%/}"
		[[ -f $d/cgroup.procs ]] || continue
		[[ -d $d/$1 ]] || echo "$d/$1" >>"$CG_MARK"
	done
}

# The Go toolchain for a build from the Go module proxy: `go` on PATH, else
# /usr/local/go (root's PATH may lack it), at least MIN (the go line of the
# module's go.mod), never another toolchain fetched behind our back
# (GOTOOLCHAIN=local). WHAT names what needs it in the errors (default:
# $GO_MIN and $GO_WHAT). Sets GO and GO_VERSION.
find_go() { # [MIN WHAT]
	local min="${1:-$GO_MIN}" what="${2:-$GO_WHAT}" go v
	go="$(command -v go || true)"
	[[ -n $go ]] || go=/usr/local/go/bin/go
	[[ -x $go ]] || die "no Go toolchain (go on PATH or /usr/local/go/bin/go): $what needs Go >= $min"
	v="$(GOTOOLCHAIN=local "$go" env GOVERSION 2>/dev/null)" || die "$go env GOVERSION failed"
	[[ $v =~ ^go[0-9]+\.[0-9]+ ]] || die "$go says it is '$v': not a Go release; $what needs Go >= $min"
	# go1.26.8 -> 1.26.8 (go1.27rc1 -> 1.27rc1); the smaller of the two by sort -V must be MIN.
	if [[ $(printf '%s\n' "$min" "${v#go}" | sort -V | head -n1) != "$min" ]]; then
		die "$go is $v: $what needs Go >= $min"
	fi
	# shellcheck disable=SC2034 # read by the script that sourced this
	GO="$go"
	# shellcheck disable=SC2034
	GO_VERSION="$v"
}
