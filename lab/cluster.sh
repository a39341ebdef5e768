#!/usr/bin/env bash
# nri-trace lab: a one-node Kubernetes cluster on the lab's runtime (issue
# 32): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a
# kubelet whose CRI runtime is the lab's containerd or CRI-O, all built by
# lab/k8s.sh from their Go modules.
#
#   cluster.sh up      the runtime up (lab.sh / crio.sh), then the cluster;
#                      idempotent; prints `export KUBECONFIG=...`
#   cluster.sh down    the cluster's pods deleted, every process stopped,
#                      then the runtime down; nothing left (processes,
#                      mounts, cgroups, netns, iptables chains, state)
#   cluster.sh status  what runs, the node, the pods
#   cluster.sh kubectl ARG...   kubectl with the lab's admin kubeconfig
#
# Where it listens: etcd (2379, 2380), kube-apiserver (6443), the
# controller manager (10257) and the scheduler (10259) on 127.0.0.1 only;
# kubelet's health port (10248) too. kubelet's API port (10250) and the
# node's address are on NODE_IP, a /32 on a portless bridge of our own:
# kubelet refuses a loopback node IP (k8s.io/kubernetes
# pkg/kubelet/kubelet_node_status.go, validateNodeIP), and the API server
# reaches kubelet (exec, logs) at the node's InternalIP. The API server
# advertises NODE_IP as well: the `kubernetes` Service's endpoints may not
# be loopback (pkg/apis/core/validation ValidateEndpointIP); nothing
# listens there for it (no kube-proxy, no Service traffic in the lab).
# Pods get their addresses from the runtime's CNI network, the lab's
# bridge (lab.sh), as on a node whose runtime owns the pod network.
#
# Who is who: clients authenticate with a static token file
# (--token-auth-file), one random token per client made at `up`: one file,
# no certificate signing request to approve, and every client on this
# machine. The API server's serving certificate and kubelet's are signed by
# the lab's own CA (openssl), so every TLS connection is verified; the API
# server presents a client certificate of that CA to kubelet, which takes
# x509 client certificates only (no anonymous, AlwaysAllow once
# authenticated).
#
# Environment:
#   NRI_TRACE_LAB_DIR      lab dir (default /var/lib/nri-trace-lab)
#   NRI_TRACE_LAB_RUNTIME  the node's runtime: containerd-2.3 (default),
#                          containerd-2.2, crio
#   NRI_TRACE_LAB_KUBELET_OTLP_ENDPOINT
#                          kubelet's tracing on, every span sampled, sent
#                          over OTLP/gRPC to this host:port (e.g.
#                          127.0.0.1:4317, lab/otelcol.sh's collector);
#                          kubelet then sends a traceparent with each CRI
#                          call. NRI_TRACE_LAB_OTLP_ENDPOINT (lab.sh) turns
#                          the runtime's tracing on as well.
set -euo pipefail

LAB="${NRI_TRACE_LAB_DIR:-/var/lib/nri-trace-lab}"
LAB="${LAB%/}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034 # read by common.sh
LAB_TAG="cluster"
# shellcheck source=lab/common.sh
. "$HERE/common.sh"

RUNTIME="${NRI_TRACE_LAB_RUNTIME:-containerd-2.3}"
case "$RUNTIME" in
containerd-2.2 | containerd-2.3) CRI_SOCK="$LAB/run/containerd.sock" ;;
crio) CRI_SOCK="$LAB/run/crio.sock" ;;
*) die "NRI_TRACE_LAB_RUNTIME=$RUNTIME: the cluster runs on containerd-2.3, containerd-2.2 or crio (kubelet 1.37 needs a CRI v1 runtime that reports its cgroup driver)" ;;
esac

KUBELET_OTLP="${NRI_TRACE_LAB_KUBELET_OTLP_ENDPOINT:-}"

NODE="nri-trace-lab" # the node's name (kubectl get nodes)
NODE_IP="10.88.76.1" # beside the lab's pod subnet (lab.sh SUBNET 10.88.77.0/24)
NODE_IF="nritrace-node"
SERVICE_CIDR="10.96.0.0/24"
SERVICE_IP="10.96.0.1" # the `kubernetes` Service: the range's first address

DIR="$LAB/cluster"
PKI="$DIR/pki"
STATE="$DIR/state" # etcd's data, kubelet's root dir, pod logs: removed at down
RUN="$DIR/run"     # pid files
LOGS="$DIR/logs"
ETCD_DATA="$STATE/etcd"
KUBELET_ROOT="$STATE/kubelet"
POD_LOGS="$STATE/pod-logs"
ADMIN_KUBECONFIG="$DIR/admin.kubeconfig"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)
API="https://127.0.0.1:6443"

K8S_BIN="$LAB/k8s/bin" # lab/k8s.sh's BIN_DIR
bins() { BIN="$(bash "$HERE/k8s.sh" path)" || die "Kubernetes not built: sudo lab/k8s.sh install"; }

pidfile() { echo "$RUN/$1.pid"; }
# The pid of our COMPONENT, when it runs.
our_component_pid() { # component
	local p
	p="$(cat "$(pidfile "$1")" 2>/dev/null)" || return 1
	[[ $p =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null || return 1
	[[ $(readlink "/proc/$p/exe" 2>/dev/null) == "$K8S_BIN/$1" ]] || return 1
	echo "$p"
}

# Another kubelet, API server or etcd on this machine (not ours): a second
# cluster would fight over its ports, cgroups and the runtime.
refuse_others() {
	local c p ours
	for c in kubelet kube-apiserver etcd; do
		ours="$(our_component_pid "$c" || true)"
		for p in $(pgrep -x "$c" || true); do
			[[ $p == "$ours" ]] && continue
			# A zombie runs nothing: ours, stopped, and not reaped yet
			# (this machine's init, not systemd, is slow to reap).
			[[ $(sed -E 's/.*\) (.).*/\1/' "/proc/$p/stat" 2>/dev/null) == Z ]] && continue
			die "another $c runs on this machine (pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-120)): the lab's cluster would share its ports and the runtime with it; stop it first"
		done
	done
}

# --------------------------------------------------------------- the PKI

# A key and a certificate signed by the lab's CA.
sign() { # name subject [subjectAltName]
	local name="$1" subj="$2" san="${3:-}" ext
	openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	ext="$PKI/$name.ext"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [[ -n $san ]]; then
			echo "extendedKeyUsage=serverAuth"
			echo "subjectAltName=$san"
		else
			echo "extendedKeyUsage=clientAuth"
		fi
	} >"$ext"
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 30 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$ext"
}

# The CA, the serving and client certificates, the service account key
# pair and the tokens: made once and kept across `up`s and `down`s
# (configuration, not state: the cluster's identity).
make_pki() {
	[[ -f $PKI/done ]] && return 0
	rm -rf "$PKI"
	mkdir -p "$PKI"
	chmod 0700 "$PKI"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" \
		-subj "/CN=nri-trace-lab-ca" -days 30 -sha256 2>/dev/null
	sign apiserver "/CN=kube-apiserver" \
		"IP:127.0.0.1,IP:$SERVICE_IP,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	sign kubelet "/CN=$NODE" "IP:$NODE_IP,DNS:$NODE"
	sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
	openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	# token,user,uid,"group1,group2": the users the API server's RBAC
	# bootstrap policy already grants (system:kube-controller-manager,
	# system:kube-scheduler; the Node authorizer's system:node:NAME).
	local t
	t() { openssl rand -hex 24; }
	{
		echo "$(t),admin,admin,system:masters"
		echo "$(t),system:node:$NODE,node,system:nodes"
		echo "$(t),system:kube-controller-manager,kcm,"
		echo "$(t),system:kube-scheduler,sched,"
	} >"$PKI/tokens.csv"
	chmod 0600 "$PKI"/*.key "$PKI/tokens.csv"
	touch "$PKI/done"
}

token_of() { awk -F, -v u="$1" '$2 == u {print $1}' "$PKI/tokens.csv"; }

kubeconfig() { # file user
	local file="$1" user="$2"
	cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nri-trace-lab
  cluster:
    server: $API
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
    token: $(token_of "$user")
contexts:
- name: nri-trace-lab
  context: {cluster: nri-trace-lab, user: $user}
current-context: nri-trace-lab
EOF
	chmod 0600 "$file"
}

# ------------------------------------------------------------- processes

# Start COMPONENT from $BIN with ARGS, in its own session, its output in
# $LOGS; only stdin/out/err (lab.sh's start_containerd says why).
start() { # component args...
	local c="$1" pid
	shift
	if pid="$(our_component_pid "$c")"; then
		log "$c already running (pid $pid)"
		return 0
	fi
	(
		for fd in /proc/"$BASHPID"/fd/*; do
			fd="${fd##*/}"
			if ((fd > 2)); then eval "exec $fd>&-"; fi
		done
		exec setsid "$BIN/$c" "$@" >>"$LOGS/$c.log" 2>&1 </dev/null
	) &
	echo $! >"$(pidfile "$c")"
	log "started $c (pid $!, log $LOGS/$c.log)"
}

# Wait until CHECK succeeds, at most SECONDS; the component's log on failure.
wait_for() { # component seconds check...
	local c="$1" s="$2" i
	shift 2
	for ((i = 0; i < s * 10; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		if ! our_component_pid "$c" >/dev/null; then
			tail -n 30 "$LOGS/$c.log" >&2
			die "$c exited during start-up (log: $LOGS/$c.log)"
		fi
		sleep 0.1
	done
	tail -n 30 "$LOGS/$c.log" >&2
	die "$c not ready within $s s (log: $LOGS/$c.log)"
}

kctl() { "$BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# SIGTERM, then SIGKILL after 10 s.
stop() { # component
	local pid
	pid="$(our_component_pid "$1")" || {
		rm -f "$(pidfile "$1")"
		return 0
	}
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" 10; then
		log "$1 (pid $pid) ignored SIGTERM for 10 s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 5 || true
	fi
	rm -f "$(pidfile "$1")"
	log "stopped $1 (pid $pid)"
}

# -------------------------------------------------------------------- up

# The node's address on an interface of its own: a bridge with no port
# (this kernel has no dummy driver; the bridge driver is there, the lab's
# CNI network uses it), so the address is on no wire.
node_interface() {
	ip link show "$NODE_IF" >/dev/null 2>&1 || ip link add "$NODE_IF" type bridge
	ip link set "$NODE_IF" up
	ip -4 addr show dev "$NODE_IF" | grep -q "inet $NODE_IP/32" || ip addr add "$NODE_IP/32" dev "$NODE_IF"
}

# The kernel tunables kubelet sets when it starts (protectKernelDefaults
# false: pkg/kubelet/cm/container_manager_linux.go setupKernelTunables):
# saved before our kubelet first runs, put back by `down`.
TUNABLES=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
TUNABLES_SAVED="$DIR/sysctl-before-kubelet"
save_tunables() {
	[[ -f $TUNABLES_SAVED ]] && return 0
	local k
	for k in "${TUNABLES[@]}"; do echo "$k=$(sysctl -n "$k")"; done >"$TUNABLES_SAVED.tmp"
	mv "$TUNABLES_SAVED.tmp" "$TUNABLES_SAVED"
}
restore_tunables() {
	[[ -f $TUNABLES_SAVED ]] || return 0
	local kv
	while read -r kv; do
		sysctl -q -w "$kv" || log "LEFT: sysctl $kv not restored"
	done <"$TUNABLES_SAVED"
	rm -f "$TUNABLES_SAVED"
	log "restored the kernel tunables kubelet sets (${TUNABLES[*]})"
}

# CRI-O passes kubelet's hugepage limits to runc, which fails without the
# hugetlb hierarchy ("cannot set hugetlb limit": every container failed
# on CRI-O 1.36.3); containerd tolerates a missing one (its CRI config's
# tolerate_missing_hugetlb_controller, on by default). systemd mounts
# every v1 controller on a node; this machine's init is not systemd and
# left hugetlb unmounted (/proc/cgroups: enabled, hierarchy 0). Mounted
# for the cluster's time on CRI-O, unmounted by `down`.
HUGETLB=/sys/fs/cgroup/hugetlb
HUGETLB_MOUNTED="$DIR/hugetlb-mounted"
mount_hugetlb() {
	[[ $RUNTIME == crio ]] || return 0
	mountpoint -q "$HUGETLB" && return 0
	# cgroup v1 (a tmpfs of hierarchies) with the controller in the kernel.
	[[ $(stat -f -c %T /sys/fs/cgroup) == tmpfs ]] || return 0
	awk '$1 == "hugetlb" && $2 == 0 && $4 == 1 {found = 1} END {exit !found}' /proc/cgroups || return 0
	mkdir -p "$HUGETLB"
	mount -t cgroup -o hugetlb cgroup "$HUGETLB"
	touch "$HUGETLB_MOUNTED"
	log "mounted the hugetlb cgroup hierarchy at $HUGETLB (CRI-O's runc sets hugepage limits)"
}
unmount_hugetlb() {
	[[ -f $HUGETLB_MOUNTED ]] || return 0
	umount "$HUGETLB" && rmdir "$HUGETLB" && rm -f "$HUGETLB_MOUNTED" &&
		log "unmounted the hugetlb cgroup hierarchy" || log "LEFT: $HUGETLB"
}

kubelet_config() {
	cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$CRI_SOCK
# The machine may have swap, and runs cgroup v1: kubelet 1.35+ refuses
# cgroup v1 unless told (failCgroupV1).
failSwapOn: false
failCgroupV1: false
podLogsDir: $POD_LOGS
# The lab's images are imported, not pulled: never garbage-collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# The lab shares its disk with the builds: kubelet's default of evicting
# every pod below 10 % free (pkg/kubelet/eviction/defaults_linux.go) fired
# with 24 GiB free of 252 (2026-11-30). A few GiB keep the node's own
# pressure signal without evicting the lab's pods for the builds' sake.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2Gi
  nodefs.inodesFree: 5%
  imagefs.available: 2Gi
EOF
	# KubeletTracing is GA (1.34): the `tracing` section alone turns it on
	# (k8s.io/component-base/tracing/api/v1 TracingConfiguration).
	if [[ -n $KUBELET_OTLP ]]; then
		printf 'tracing:\n  endpoint: %s\n  samplingRatePerMillion: 1000000\n' "$KUBELET_OTLP" >>"$DIR/kubelet.yaml"
	fi
}

cmd_up() {
	need_root
	local t0=$SECONDS
	refuse_others
	bins
	mkdir -p "$DIR" "$RUN" "$LOGS" "$STATE"
	mount_hugetlb
	NRI_TRACE_LAB_RUNTIME="$RUNTIME" bash "$HERE/lab.sh" up
	[[ -S $CRI_SOCK ]] || die "the runtime's CRI socket $CRI_SOCK is missing after lab.sh up"
	make_pki
	node_interface
	kubeconfig "$ADMIN_KUBECONFIG" admin
	kubeconfig "$DIR/kubelet.kubeconfig" "system:node:$NODE"
	kubeconfig "$DIR/controller-manager.kubeconfig" system:kube-controller-manager
	kubeconfig "$DIR/scheduler.kubeconfig" system:kube-scheduler
	kubelet_config

	start etcd --name "$NODE" --data-dir "$ETCD_DATA" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster "$NODE=http://127.0.0.1:2380" --listen-metrics-urls ""
	wait_for etcd 30 curl -sf http://127.0.0.1:2379/health

	start kube-apiserver --bind-address 127.0.0.1 --secure-port 6443 --advertise-address "$NODE_IP" \
		--etcd-servers http://127.0.0.1:2379 \
		--tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
		--token-auth-file "$PKI/tokens.csv" --authorization-mode Node,RBAC \
		--allow-privileged=true \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
		--service-cluster-ip-range "$SERVICE_CIDR" \
		--kubelet-preferred-address-types InternalIP \
		--kubelet-certificate-authority "$PKI/ca.crt" \
		--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key "$PKI/apiserver-kubelet-client.key"
	wait_for kube-apiserver 90 kctl get --raw /readyz

	start kube-controller-manager --bind-address 127.0.0.1 --secure-port 10257 \
		--kubeconfig "$DIR/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$DIR/controller-manager.kubeconfig" \
		--authorization-kubeconfig "$DIR/controller-manager.kubeconfig" \
		--service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
		--use-service-account-credentials --leader-elect=false
	start kube-scheduler --bind-address 127.0.0.1 --secure-port 10259 \
		--kubeconfig "$DIR/scheduler.kubeconfig" \
		--authentication-kubeconfig "$DIR/scheduler.kubeconfig" \
		--authorization-kubeconfig "$DIR/scheduler.kubeconfig" --leader-elect=false
	wait_for kube-controller-manager 60 curl -skf https://127.0.0.1:10257/healthz
	wait_for kube-scheduler 60 curl -skf https://127.0.0.1:10259/healthz
	# A pod is refused until its namespace's default service account exists
	# (the ServiceAccount admission plugin); the controller manager makes it.
	wait_for kube-controller-manager 60 kctl -n default get serviceaccount default

	save_tunables
	start kubelet --config "$DIR/kubelet.yaml" --kubeconfig "$DIR/kubelet.kubeconfig" \
		--root-dir "$KUBELET_ROOT" --node-ip "$NODE_IP" --hostname-override "$NODE"
	wait_for kubelet 60 curl -sf http://127.0.0.1:10248/healthz
	wait_for kubelet 120 kctl wait --for=condition=Ready "node/$NODE" --timeout=1s
	log "node $NODE Ready on $RUNTIME ($CRI_SOCK); up in $((SECONDS - t0)) s"
	echo "export KUBECONFIG=$ADMIN_KUBECONFIG"
}

# ------------------------------------------------------------------ down

cmd_down() {
	need_root
	local t0=$SECONDS
	# kubectl as built, whatever its recipe now: down must work after a
	# change of lab/k8s.sh too.
	if [[ -x $K8S_BIN/kubectl ]]; then BIN="$K8S_BIN"; fi
	# While kubelet runs, it unmounts the pods' volumes and removes their
	# cgroups as their pods go: every pod deleted first (at once: down is
	# not the place to wait out grace periods; what kubelet cannot undo,
	# the runtime's down and the sweep below do).
	if our_component_pid kube-apiserver >/dev/null && our_component_pid kubelet >/dev/null; then
		kctl delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
		local i
		for ((i = 0; i < 300; i++)); do
			[[ -z $(kctl get pods -A -o name 2>/dev/null) ]] && break
			sleep 0.1
		done
	fi
	local c
	for c in kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
	NRI_TRACE_LAB_RUNTIME="$RUNTIME" bash "$HERE/lab.sh" down
	sweep
	unmount_hugetlb
	log "down in $((SECONDS - t0)) s"
	local left
	left="$(leftovers)"
	[[ -z $left ]] || die "left after down:"$'\n'"$left"
	log "nothing of the cluster's left (no process, mount, kubepods cgroup, kubelet chain, node interface, state)"
}

# What `down` must not leave, one line each.
leftovers() {
	local c d ipt t
	for c in "${COMPONENTS[@]}"; do
		pgrep -f "^$K8S_BIN/$c( |$)" >/dev/null && echo "process: $c"
	done
	awk -v r="$STATE/" 'index($2, r) == 1 {print "mount: " $2}' /proc/self/mounts
	for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do [[ -d $d ]] && echo "cgroup: $d"; done
	for ipt in iptables ip6tables; do
		command -v "$ipt-save" >/dev/null || continue
		# Taken whole: grep -q would close the pipe early (pipefail).
		[[ $("$ipt-save" 2>/dev/null) == *$'\n':KUBE-* ]] && echo "$ipt: KUBE- chains"
	done
	ip link show "$NODE_IF" >/dev/null 2>&1 && echo "interface: $NODE_IF"
	[[ -e $STATE ]] && echo "state: $STATE"
	[[ -f $TUNABLES_SAVED ]] && echo "kernel tunables not restored: $TUNABLES_SAVED"
	[[ -f $HUGETLB_MOUNTED ]] && echo "cgroup hierarchy still mounted: $HUGETLB"
	true
}

# What kubelet leaves when it stops before its pods are gone: mounts under
# its root dir, the pod cgroups (kubepods, cgroupfs driver); and what it
# leaves in any case: its iptables chains, the kernel tunables it set.
# Then the node's interface and the state.
sweep() {
	local m d t
	while read -r m; do
		umount -l "$m" 2>/dev/null && log "unmounted $m"
	done < <(awk -v r="$STATE/" 'index($2, r) == 1 {print $2}' /proc/self/mounts | sort -r)
	for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
		[[ -d $d ]] || continue
		find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
		[[ -d $d ]] && log "LEFT: cgroup $d" || log "removed cgroup $d"
	done
	local ipt
	for ipt in iptables ip6tables; do
		command -v "$ipt" >/dev/null || continue
		kubelet_chains "$ipt"
	done
	restore_tunables
	ip link del "$NODE_IF" 2>/dev/null && log "removed interface $NODE_IF" || true
	rm -rf "$STATE" "$RUN"
}

# kubelet's chains (pkg/kubelet/kubelet_network_linux.go): KUBE-IPTABLES-HINT
# (mangle), KUBE-FIREWALL (filter, jumped to from INPUT and OUTPUT) and
# the monitor's KUBE-KUBELET-CANARY (mangle, nat, filter). `up` refuses to
# run beside another kubelet, so these are ours.
kubelet_chains() { # iptables | ip6tables
	local ipt="$1" t
	while "$ipt" -t filter -D INPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
	while "$ipt" -t filter -D OUTPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
	for t in filter/KUBE-FIREWALL mangle/KUBE-IPTABLES-HINT mangle/KUBE-KUBELET-CANARY \
		nat/KUBE-KUBELET-CANARY filter/KUBE-KUBELET-CANARY; do
		if "$ipt" -t "${t%%/*}" -F "${t#*/}" 2>/dev/null; then
			"$ipt" -t "${t%%/*}" -X "${t#*/}" 2>/dev/null && log "removed $ipt chain $t" || log "LEFT: $ipt chain $t"
		fi
	done
}

cmd_status() {
	local c p
	for c in "${COMPONENTS[@]}"; do
		if p="$(our_component_pid "$c")"; then echo "$c: pid $p"; else echo "$c: not running"; fi
	done
	if our_component_pid kube-apiserver >/dev/null; then
		bins
		kctl get nodes -o wide || true
		kctl get pods -A -o wide || true
	fi
}

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit "${1:-0}"
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
kubectl)
	shift
	bins
	kctl "$@"
	;;
-h | --help | help) usage 0 ;;
*) usage 2 >&2 ;;
esac
