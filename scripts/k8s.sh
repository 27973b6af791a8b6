#!/bin/bash
# A real single-node Kubernetes for the kubernetes backend's tests and
# benchmarks: etcd, kube-apiserver, one kubelet and its own containerd,
# bridge CNI.  No scheduler or controller-manager: sandbash binds its pods
# to a node itself (spec.nodeName).
#
#   scripts/k8s.sh build   build kube-apiserver, kubelet and kubectl (cached)
#   scripts/k8s.sh up      build if needed, start everything, wait for the node,
#                          load the test images; prints the kubeconfig path
#   scripts/k8s.sh down    stop everything it started and remove what it made
#   scripts/k8s.sh status  exit 0 if the cluster answers
#
# Versions are pinned below.  Build output goes to $K8S_CACHE (outside the
# repository); state to $K8S_STATE.  Test cluster only: a static admin token
# (system:masters; RBAC authorizes everyone else, so the tests can check
# deploy/kubernetes/rbac.yaml), the kubelet's API on 127.0.0.1 without
# authentication.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.34.2}
STAGING_VERSION=${STAGING_VERSION:-v0.34.2}
K8S_CACHE=${K8S_CACHE:-/var/cache/sandbash-k8s}
K8S_STATE=${K8S_STATE:-/run/sandbash-k8s}
K8S_DATA=${K8S_DATA:-/var/lib/sandbash-k8s}
NODE=${K8S_NODE:-sandbash-node}
BIN=$K8S_CACHE/$KUBE_VERSION
CNI_CONF=/etc/cni/net.d/10-sandbash-k8s.conflist
BRIDGE=sbk8s0
SUBNET=10.88.64.0/24
APISERVER_PORT=${K8S_APISERVER_PORT:-16443}
KUBELET_PORT=${K8S_KUBELET_PORT:-10250}
ETCD_PORT=${K8S_ETCD_PORT:-12379}
CTRD_SOCK=$K8S_STATE/containerd/containerd.sock
KUBECONFIG_OUT=$K8S_STATE/kubeconfig
PAUSE_IMAGE=sandbash.local/pause:1
TEST_IMAGES=${K8S_TEST_IMAGES:-sandbash-test:latest sandbash-test-go:latest sandbash-test-git:2 sandbash-test-env:2}

STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client
csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils
pod-security-admission sample-apiserver sample-cli-plugin sample-controller"

log() { echo "k8s.sh: $*" >&2; }
die() { echo "k8s.sh: $*" >&2; exit 1; }

build() {
	if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kubelet" ] && [ -x "$BIN/kubectl" ]; then
		return 0
	fi
	command -v go >/dev/null || die "go is not on PATH: install Go to build the kube binaries"
	local mod=$K8S_CACHE/build-$KUBE_VERSION
	mkdir -p "$mod" "$BIN"
	log "building kube-apiserver, kubelet, kubectl $KUBE_VERSION into $BIN (a few minutes, once)"
	{
		echo "module sandbashk8sbuild"
		echo
		echo "go 1.25.0"
		echo
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		echo
		for m in $STAGING; do echo "replace k8s.io/$m => k8s.io/$m $STAGING_VERSION"; done
	} >"$mod/go.mod"
	cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
	(
		cd "$mod"
		export GOTOOLCHAIN=local CGO_ENABLED=0
		go mod tidy
		for c in kube-apiserver kubelet kubectl; do
			nice -n 10 go build -p "${K8S_BUILD_P:-2}" -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c"
			mv "$BIN/$c.tmp" "$BIN/$c"
		done
	)
}

# A runc that gives each pod's app containers a network namespace of their
# own, with only loopback (the pod's sandbox keeps the CNI one): the
# RuntimeClass sandbash-nonet, for --network none.  A plain bridge CNI
# enforces no NetworkPolicy; this is what makes "none" mean none here.
# It also keeps the image's /etc/group out of the container's groups (what
# supplementalGroupsPolicy Strict does on containerd 2.0, which Debian 12's
# containerd 1.6 lacks): the pods' default runtime, plain runc, does not,
# and sandbash refuses such an image there (TestImageGroupsRefused).
write_nonet() {
	cat >"$K8S_DATA/runc-nonet" <<'SH'
#!/bin/sh
# runc for the RuntimeClass sandbash-nonet (scripts/k8s.sh): on create of a
# pod's app container, drop the path of its network namespace from the
# bundle's config.json, so runc makes it a new one with only loopback, and
# give it no supplementary group but its own.
bundle=
prev=
create=
for a in "$@"; do
	case $prev in --bundle|-b) bundle=$a ;; esac
	case $a in --bundle=*) bundle=${a#--bundle=} ;; create) create=1 ;; esac
	prev=$a
done
if [ -n "$create" ] && [ -n "$bundle" ] && [ -f "$bundle/config.json" ] &&
	[ "$(jq -r '.annotations["io.kubernetes.cri.container-type"] // ""' "$bundle/config.json")" = container ]; then
	jq '.linux.namespaces |= map(if .type == "network" then {type: "network"} else . end) | .process.user.additionalGids = [.process.user.gid]' \
		"$bundle/config.json" >"$bundle/config.json.nonet" || exit 1
	mv "$bundle/config.json.nonet" "$bundle/config.json" || exit 1
fi
exec runc "$@"
SH
	chmod 0755 "$K8S_DATA/runc-nonet"
}

# Forwarding for pods with the network on: dockerd sets the FORWARD
# policy to DROP and accepts only its own bridge's traffic, so pods on the
# CNI bridge reach nothing beyond the node without these.  Each rule carries
# the comment "sandbash-k8s" so down removes exactly them.
FWD_RULES=(
	"FORWARD -i $BRIDGE -m comment --comment sandbash-k8s -j ACCEPT"
	"FORWARD -o $BRIDGE -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment sandbash-k8s -j ACCEPT"
)
NAT_RULES=("POSTROUTING -s $SUBNET ! -o $BRIDGE -m comment --comment sandbash-k8s -j MASQUERADE")
forwarding() { # on|off
	local r
	for r in "${FWD_RULES[@]}"; do
		# shellcheck disable=SC2086
		while iptables -w -D $r 2>/dev/null; do :; done
		# shellcheck disable=SC2086
		[ "$1" = off ] || iptables -w -I $r
	done
	for r in "${NAT_RULES[@]}"; do
		# shellcheck disable=SC2086
		while iptables -w -t nat -D $r 2>/dev/null; do :; done
		# shellcheck disable=SC2086
		[ "$1" = off ] || iptables -w -t nat -A $r
	done
}

kubectl_() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT" "$@"; }

start() { # name, command...: start a daemon, log to $K8S_STATE/name.log, pid to name.pid
	local name=$1
	shift
	setsid "$@" >"$K8S_STATE/$name.log" 2>&1 </dev/null &
	echo $! >"$K8S_STATE/$name.pid"
}

wait_for() { # what, seconds, command...
	local what=$1 secs=$2
	shift 2
	for _ in $(seq $((secs * 4))); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.25
	done
	die "$what did not come up in ${secs}s; logs in $K8S_STATE"
}

up() {
	[ "$(id -u)" = 0 ] || die "run as root: the kubelet and containerd need it"
	for c in etcd containerd runc jq openssl iptables; do
		command -v $c >/dev/null || die "$c is missing: scripts/deps.sh k8s installs it"
	done
	[ -x /usr/lib/cni/bridge ] || die "the CNI plugins are missing (/usr/lib/cni): scripts/deps.sh k8s installs them"
	build
	if status 2>/dev/null; then
		log "already up ($KUBECONFIG_OUT)"
		echo "$KUBECONFIG_OUT"
		return 0
	fi
	down >/dev/null 2>&1 || true
	local t0=$SECONDS
	mkdir -p "$K8S_STATE" "$K8S_DATA"/{etcd,containerd,kubelet,pki} "$K8S_STATE/cni"
	local ip
	ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
	[ -n "$ip" ] || ip=$(hostname -I | awk '{print $1}')
	[ -n "$ip" ] || die "cannot find this host's address for the apiserver to advertise"

	# Keys and the static token (test cluster only).
	openssl genrsa -out "$K8S_DATA/pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$K8S_DATA/pki/sa.key" -pubout -out "$K8S_DATA/pki/sa.pub" 2>/dev/null
	local token
	token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
	echo "$token,admin,admin,system:masters" >"$K8S_DATA/pki/tokens.csv"
	chmod 0600 "$K8S_DATA/pki/tokens.csv" "$K8S_DATA/pki/sa.key"

	start etcd etcd --name sandbash --data-dir "$K8S_DATA/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
		--initial-cluster "sandbash=http://127.0.0.1:$((ETCD_PORT + 1))"

	write_nonet
	sysctl -qw net.ipv4.ip_forward=1
	forwarding on
	cat >"$K8S_STATE/cni/10-sandbash-k8s.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "sandbash-k8s", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "subnet": "$SUBNET", "dataDir": "$K8S_DATA/cni-ipam",
     "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
JSON
	cat >"$K8S_STATE/containerd.toml" <<TOML
version = 2
root = "$K8S_DATA/containerd"
state = "$K8S_STATE/containerd-state"
[grpc]
  address = "$CTRD_SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  enable_unprivileged_ports = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$K8S_STATE/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.sandbash-nonet]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.sandbash-nonet.options]
        BinaryName = "$K8S_DATA/runc-nonet"
TOML
	start containerd containerd --config "$K8S_STATE/containerd.toml"
	wait_for containerd 30 ctr --address "$CTRD_SOCK" version

	# Images: the pause image (busybox that sleeps) and the test images,
	# from the local Docker, which scripts/images.sh filled.
	local tmp
	tmp=$(mktemp -d)
	printf 'FROM sandbash-test:latest\nCMD ["sleep", "2147483647"]\n' >"$tmp/Dockerfile"
	docker build -q -t "$PAUSE_IMAGE" "$tmp" >/dev/null
	rm -rf "$tmp"
	# shellcheck disable=SC2086
	docker save "$PAUSE_IMAGE" $TEST_IMAGES | ctr --address "$CTRD_SOCK" -n k8s.io images import --all-platforms - >/dev/null
	docker rmi "$PAUSE_IMAGE" >/dev/null

	wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
	start apiserver "$BIN/kube-apiserver" \
		--etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" --advertise-address "$ip" \
		--cert-dir "$K8S_DATA/pki" \
		--service-account-issuer https://kubernetes.default.svc \
		--service-account-key-file "$K8S_DATA/pki/sa.pub" \
		--service-account-signing-key-file "$K8S_DATA/pki/sa.key" \
		--token-auth-file "$K8S_DATA/pki/tokens.csv" \
		--authorization-mode RBAC \
		--service-cluster-ip-range 10.96.0.0/24 \
		--disable-admission-plugins ServiceAccount \
		--kubelet-preferred-address-types Hostname \
		--enable-priority-and-fairness=false
	cat >"$KUBECONFIG_OUT" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: sandbash
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $K8S_DATA/pki/apiserver.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: sandbash
  context: {cluster: sandbash, user: admin, namespace: default}
current-context: sandbash
YAML
	chmod 0600 "$KUBECONFIG_OUT"
	# The apiserver reaches the kubelet (attach, exec) by the node's name,
	# on loopback, where the kubelet listens.
	grep -q "# sandbash-k8s$" /etc/hosts || echo "127.0.0.1 $NODE # sandbash-k8s" >>/etc/hosts
	wait_for kube-apiserver 90 kubectl_ get --raw /readyz

	cat >"$K8S_STATE/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
healthzPort: 0
readOnlyPort: 0
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: true
enforceNodeAllocatable: []
evictionHard: {}
localStorageCapacityIsolation: false
podPidsLimit: ${K8S_POD_PIDS:-4096}
containerRuntimeEndpoint: unix://$CTRD_SOCK
imageServiceEndpoint: unix://$CTRD_SOCK
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
registerNode: true
serializeImagePulls: false
maxPods: 200
YAML
	start kubelet "$BIN/kubelet" --config "$K8S_STATE/kubelet.yaml" --kubeconfig "$KUBECONFIG_OUT" \
		--hostname-override "$NODE" --node-ip "$ip" --root-dir "$K8S_DATA/kubelet" \
		--cert-dir "$K8S_DATA/kubelet/pki" --node-labels sandbash.dev/test-node=true
	wait_for "node $NODE Ready" 120 sh -c "'$BIN/kubectl' --kubeconfig '$KUBECONFIG_OUT' get node '$NODE' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
	kubectl_ apply -f - >/dev/null <<YAML
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: sandbash-nonet}
handler: sandbash-nonet
YAML
	log "up in $((SECONDS - t0))s: node $NODE, kubeconfig $KUBECONFIG_OUT"
	echo "$KUBECONFIG_OUT"
}

status() {
	[ -f "$KUBECONFIG_OUT" ] && [ -x "$BIN/kubectl" ] &&
		kubectl_ get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}

stop() { # name: stop a daemon started by start, by its process id
	local f=$K8S_STATE/$1.pid pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$f"
}

down() {
	[ "$(id -u)" = 0 ] || die "run as root"
	if [ -f "$KUBECONFIG_OUT" ] && [ -x "$BIN/kubectl" ] && [ -f "$K8S_STATE/apiserver.pid" ]; then
		kubectl_ delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
	fi
	stop kubelet
	# The pods' containers and sandboxes: through containerd's own CLI, by
	# its socket (never dockerd's containerd).
	local netns=()
	if [ -S "$CTRD_SOCK" ]; then
		local c
		# The network namespaces of this containerd's pod sandboxes, from
		# their OCI specs: only those are unmounted below (/run/netns holds
		# other engines' too).
		for c in $(ctr --address "$CTRD_SOCK" -n k8s.io containers ls -q 2>/dev/null); do
			while IFS= read -r m; do
				case $m in /run/netns/cni-* | /var/run/netns/cni-*) netns+=("$m") ;; esac
			done < <(ctr --address "$CTRD_SOCK" -n k8s.io containers info "$c" 2>/dev/null |
				jq -r '.Spec.linux.namespaces[]? | select(.type == "network") | .path // empty' 2>/dev/null)
		done
		for c in $(ctr --address "$CTRD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr --address "$CTRD_SOCK" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
		done
		sleep 0.5
		for c in $(ctr --address "$CTRD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr --address "$CTRD_SOCK" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true
		done
		for c in $(ctr --address "$CTRD_SOCK" -n k8s.io containers ls -q 2>/dev/null); do
			ctr --address "$CTRD_SOCK" -n k8s.io containers delete "$c" >/dev/null 2>&1 || true
		done
	fi
	stop apiserver
	stop containerd
	stop etcd
	# The shims outlive containerd: end those of this containerd instance
	# (their command line names its state directory's socket address).
	local p
	for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTRD_SOCK" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
	# Unmount whatever is left under the kubelet's and containerd's dirs.
	local m
	for m in $(awk -v a="$K8S_DATA/" -v b="$K8S_STATE/" 'index($5, a) == 1 || index($5, b) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	# The network namespaces containerd made for the pods (found above),
	# and the bridge.
	for m in "${netns[@]}"; do
		m=${m#/var}
		umount "$m" 2>/dev/null || true
		rm -f "$m"
	done
	ip link del "$BRIDGE" 2>/dev/null || true
	forwarding off
	if grep -q "# sandbash-k8s$" /etc/hosts; then
		grep -v "# sandbash-k8s$" /etc/hosts >/etc/hosts.sandbash-k8s && cat /etc/hosts.sandbash-k8s >/etc/hosts && rm -f /etc/hosts.sandbash-k8s
	fi
	rm -rf "$K8S_STATE" "$K8S_DATA"
	log "down"
}

main() {
	case "${1:-}" in
	build) build ;;
	up) up ;;
	down) down ;;
	status) status ;;
	*) echo "usage: $0 build|up|down|status" >&2; exit 2 ;;
	esac
}

# One line, parsed whole before main runs: bash reads a script as it goes,
# and an edit of this file during a long build made it run part of down.
main "$@"; exit
