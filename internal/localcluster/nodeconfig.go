package localcluster

import (
	"fmt"
	"strconv"
	"strings"
)

// containerdConfig keeps containerd's state under the node's directory and
// runs its pods with runc and the CNI plugins of Debian's packages.
//   - restrict_oom_score_adj: runc cannot write a negative oom_score_adj
//     without CAP_SYS_RESOURCE, which these machines do not grant even to
//     root; unrestricted, every sandbox fails with "can't get final child's
//     PID from pipe: EOF".
//   - netns_mounts_under_state_dir: pod network namespaces are mounted
//     under the node's directory, not in /var/run/netns.
//   - Root: runc's state, which would otherwise go to /run/containerd/runc.
//   - The opt plugin is off: it would make /opt/containerd.
func (n *Node) containerdConfig() []byte {
	return fmt.Appendf(nil, `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt"]

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[5]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
    max_conf_num = 1
`, n.path("containerd/root"), n.path("containerd/state"), n.socket(), pauseImage,
		n.path("containerd/runc"), n.path("cni"))
}

// cniConfig puts each pod on the node's bridge with an address from the
// node's /24, and routes the Services' networks through the node, where
// kube-proxy's rules lead them on. A pod has no other route, so nothing it
// sends can leave this machine (the node forwards, for the bridge); nor
// is it masqueraded.
func (n *Node) cniConfig() []byte {
	var routes []string
	for _, p := range n.serviceCIDRs {
		routes = append(routes, fmt.Sprintf(`{"dst": %q}`, p))
	}
	return fmt.Appendf(nil, `{
  "cniVersion": "0.4.0",
  "name": "watchprobe",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q, "gateway": %q}]],
      "routes": [%s],
      "dataDir": %q
    }
  }]
}
`, NodeBridge, n.podCIDR.String(), n.bridgeIP.String(), strings.Join(routes, ", "), n.path("cni-ipam"))
}

// kubeletConfig is kubelet's configuration for these machines:
//   - failCgroupV1 false: they mount cgroup v1, which kubelet 1.37 refuses
//     by default; cgroupDriver cgroupfs, since containerd 1.6 cannot tell
//     kubelet its driver (no RuntimeConfig call) and nothing here is
//     systemd; cgroupRoot the node's own, which the host record removes.
//   - resolvConf empty: pods get no nameserver, so nothing in them resolves
//     a name through this machine's resolver, which is off the machine.
//   - image garbage collection and disk eviction off: the imported images
//     cannot be pulled again, and the shared disk's fill is not the node's.
//   - syncFrequency 5s: a changed ConfigMap reaches its pods' volumes
//     within seconds rather than a minute.
func (n *Node) kubeletConfig(port int) []byte {
	return fmt.Appendf(nil, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /%[3]s
containerRuntimeEndpoint: unix://%[4]s
podLogsDir: %[5]s
volumePluginDir: %[6]s
resolvConf: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
syncFrequency: 5s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[7]s
authorization:
  mode: Webhook
`, n.bridgeIP, port, n.host.CgroupRoot, n.socket(), n.path("pod-logs"), n.path("volume-plugins"), n.path("ca.crt"))
}

// kubeProxyConfig runs kube-proxy in iptables mode for the node's pods.
//   - conntrack maxPerCore and timeouts 0: kube-proxy leaves the
//     machine's conntrack sysctls as they are.
//   - oomScoreAdj 0: it cannot lower its own score on these machines (see
//     containerdConfig).
//   - localhostNodePorts false: it would set route_localnet and accept
//     NodePorts on loopback; nodePortAddresses keeps NodePorts on the
//     bridge.
func (n *Node) kubeProxyConfig(healthz string, metricsPort int) []byte {
	return fmt.Appendf(nil, `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
mode: iptables
hostnameOverride: %[2]s
clusterCIDR: %[3]s
healthzBindAddress: %[4]s
metricsBindAddress: 127.0.0.1:%[5]s
nodePortAddresses: [%[3]s]
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
  minSyncPeriod: 0s
`, n.path("admin.kubeconfig"), NodeName, n.podCIDR, healthz, strconv.Itoa(metricsPort))
}
