package localcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// nodeLockPath is held for a node's whole life: a node changes
	// machine-wide state (iptables tables, sysctls, fixed paths) that a
	// second node would share.
	nodeLockPath = "/run/watchprobe-node.lock"
	// nodeRecordPath holds the hostRecord of the running node, or of a node
	// whose process died before its teardown.
	nodeRecordPath = "/run/watchprobe-node.json"
	cgroupFS       = "/sys/fs/cgroup"
)

// nodeSysctls are the sysctls a node may change.
var nodeSysctls = []string{
	// kubelet's kernel tunables (its protectKernelDefaults is off, so it
	// sets them rather than refuse to start)
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	// the bridge plugin, for its gateway
	"net/ipv4/ip_forward",
}

// nodeFixedPaths are the places outside the node's directory that kubelet,
// containerd and the CNI plugins write to whatever they are told:
// kubelet's device-plugin directory and container log links, the CNI
// result cache, kubelet's flex volume directory, and containerd's shim
// sockets.
var nodeFixedPaths = []string{
	"/var/lib/kubelet",
	"/var/log/containers",
	"/var/lib/cni",
	"/usr/libexec/kubernetes",
	"/run/containerd",
}

// nftTablesOfNode are the nftables tables kubelet and kube-proxy make
// (through iptables-nft, or kube-proxy's own nftables cleanup).
var nftTablesOfNode = []string{"filter", "nat", "mangle", "kube-proxy"}

// hostRecord is what a node changes outside its directory, written down
// before the change, so that the node's own teardown and the sweep of a
// dead node's leftovers undo the same list.
type hostRecord struct {
	Dir string
	// RemoveDir: StartNode made Dir, and the teardown removes it.
	RemoveDir bool
	// Socket is containerd's: its shims carry it on their command line.
	Socket     string
	CgroupRoot string
	Bridge     string
	// Sysctls holds the values before the node, by /proc/sys path.
	Sysctls map[string]string
	// CreatedPaths are the nodeFixedPaths that did not exist before.
	CreatedPaths []string
	// NftTables are the tables ("family name") of nftTablesOfNode that
	// did not exist before.
	NftTables []string
}

// lockNode takes the machine-wide node lock, waiting while another node runs.
func lockNode(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(nodeLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the node lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", nodeLockPath, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another node on this machine to stop (%s): %w", nodeLockPath, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// sweepNode undoes what a node left behind, if its record is there. The
// caller holds the node lock, so that node is not running.
func sweepNode() error {
	data, err := os.ReadFile(nodeRecordPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var r hostRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s is not a node record (%v): remove it once no node runs", nodeRecordPath, err)
	}
	if err := r.tearDown(nil); err != nil {
		return fmt.Errorf("removing what a node whose process is gone left behind (%s): %w", nodeRecordPath, err)
	}
	return nil
}

// newHostRecord reads the state the node is about to change and saves it.
func newHostRecord(dir string, removeDir bool) (*hostRecord, error) {
	r := &hostRecord{
		Dir:        dir,
		RemoveDir:  removeDir,
		Socket:     filepath.Join(dir, "containerd", "containerd.sock"),
		CgroupRoot: "watchprobe-node-" + ownerTag,
		Bridge:     NodeBridge,
		Sysctls:    map[string]string{},
	}
	for _, s := range nodeSysctls {
		v, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			return nil, err
		}
		r.Sysctls[s] = strings.TrimSpace(string(v))
	}
	for _, p := range nodeFixedPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			r.CreatedPaths = append(r.CreatedPaths, p)
		}
	}
	tables, err := nftTables()
	if err != nil {
		return nil, err
	}
	for _, family := range []string{"ip", "ip6"} {
		for _, name := range nftTablesOfNode {
			if t := family + " " + name; !slices.Contains(tables, t) {
				r.NftTables = append(r.NftTables, t)
			}
		}
	}
	if linkExists(r.Bridge) {
		return nil, fmt.Errorf("the node's bridge %s exists, but no node record does: delete it (ip link del %s) if no node runs", r.Bridge, r.Bridge)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(nodeRecordPath, data, 0o600); err != nil {
		return nil, err
	}
	return r, nil
}

// setUp makes the bridge, with routes to the Services' networks through
// it, the cgroup root, and the node's directories. A ClusterIP is reached
// from this machine by kube-proxy's rules rewriting the destination to a
// pod's; the route makes the packet leave from the node's address (which
// pods can answer) and, before the rules exist, go nowhere but the bridge,
// rather than out through the default route.
func (r *hostRecord) setUp(bridgeIP netip.Addr, podCIDR netip.Prefix, serviceCIDRs []netip.Prefix) error {
	for _, d := range []string{"containerd", "cni", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(r.Dir, d), 0o700); err != nil {
			return err
		}
	}
	for _, args := range [][]string{
		{"link", "add", r.Bridge, "type", "bridge"},
		// No IPv6 link-local address: nothing but the pods' /24 is sent.
		{"link", "set", r.Bridge, "addrgenmode", "none"},
		{"addr", "add", netip.PrefixFrom(bridgeIP, podCIDR.Bits()).String(), "dev", r.Bridge},
		{"link", "set", r.Bridge, "up"},
	} {
		if _, err := ip(args...); err != nil {
			return fmt.Errorf("making the node's bridge: %w", err)
		}
	}
	for _, p := range serviceCIDRs {
		if _, err := ip("route", "add", p.String(), "dev", r.Bridge, "src", bridgeIP.String()); err != nil {
			return fmt.Errorf("routing the Services' network through the node's bridge: %w", err)
		}
	}
	// kubelet's cgroupfs driver wants the root in every hierarchy, and a
	// new cpuset cgroup starts with no CPUs or memory nodes.
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		dir := filepath.Join(h, r.CgroupRoot)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("making the node's cgroup: %w", err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("giving the node's cpuset cgroup %s: %w", f, err)
				}
			}
		}
	}
	return nil
}

// tearDown undoes the record's changes in the order that leaves nothing:
// the processes still in the node's cgroups or talking to its containerd,
// then the mounts under its directory (kubelet's root, pod volumes, pod
// network namespaces, container root filesystems), the cgroups, the
// iptables tables, the bridge, the sysctls and the fixed paths. The
// apiserver listens on the bridge: beforeBridge stops it. Every step runs,
// whatever failed before it; the record is removed once all succeeded.
func (r *hostRecord) tearDown(beforeBridge func() error) error {
	var errs []error
	errs = append(errs, killShims(r.Socket), r.killCgroupProcesses(), unmountUnder(r.Dir), r.removeCgroups(), r.deleteNftTables())
	if beforeBridge != nil {
		errs = append(errs, beforeBridge())
	}
	if linkExists(r.Bridge) {
		if _, err := ip("link", "del", r.Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	for s, v := range r.Sysctls {
		if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s to %s: %w", s, v, err))
		}
	}
	for _, p := range r.CreatedPaths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		// Removing the directory with something still mounted under it
		// would delete what the mount shows, wherever it comes from.
		return err
	}
	if r.RemoveDir {
		if err := os.RemoveAll(r.Dir); err != nil {
			return err
		}
	}
	if err := os.Remove(nodeRecordPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// cgroupHierarchies are the mounted cgroup hierarchies: each v1 controller
// and, on a hybrid machine, the unified one, where runc makes a container's
// cgroup too.
func cgroupHierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		// cpu,cpuacct style links name the same hierarchy twice.
		if e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
			out = append(out, filepath.Join(cgroupFS, e.Name()))
		}
	}
	return out, nil
}

// cgroupTree lists the cgroup directories under the node's root in every
// hierarchy, deepest first.
func (r *hostRecord) cgroupTree() []string {
	hierarchies, _ := cgroupHierarchies()
	var dirs []string
	for _, h := range hierarchies {
		_ = filepath.WalkDir(filepath.Join(h, r.CgroupRoot), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// killCgroupProcesses kills every process in the node's cgroups: the
// containers of pods kubelet did not stop.
func (r *hostRecord) killCgroupProcesses() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []int
		for _, d := range r.cgroupTree() {
			data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					left = append(left, pid)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in the node's cgroups after SIGKILL", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroups removes the node's cgroups, deepest first; a cgroup whose
// last process just died can stay busy for a moment.
func (r *hostRecord) removeCgroups() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		for _, d := range r.cgroupTree() {
			if e := syscall.Rmdir(d); e != nil && !errors.Is(e, syscall.ENOENT) {
				err = fmt.Errorf("removing cgroup %s: %w", d, e)
			}
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shimsOf lists the pids of containerd shims serving the containerd at socket.
func shimsOf(socket string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if strings.Contains(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, socket) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killShims kills the shims of a containerd that is gone: each holds its
// containers' stdio and keeps running after containerd.
func killShims(socket string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := shimsOf(socket)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd shims %v survive SIGKILL", pids)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mountsUnder lists the mount points at or under dir, latest mount first,
// so that stacked mounts come off in the order they went on.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// Field 5 is the mount point, with spaces and the like octal-escaped.
		p, err := strconv.Unquote(`"` + strings.ReplaceAll(fields[4], `"`, `\"`) + `"`)
		if err != nil {
			p = fields[4]
		}
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	slices.Reverse(out)
	return out, sc.Err()
}

// unmountUnder unmounts everything at or under dir.
func unmountUnder(dir string) error {
	if dir == "" {
		return nil
	}
	for range 10 {
		mounts, err := mountsUnder(dir)
		if err != nil || len(mounts) == 0 {
			return err
		}
		for _, m := range mounts {
			if err := syscall.Unmount(m, 0); err != nil {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
		}
	}
	mounts, err := mountsUnder(dir)
	if err == nil && len(mounts) > 0 {
		err = fmt.Errorf("still mounted after unmounting ten times: %v", mounts)
	}
	return err
}

// nftTables lists the machine's nftables tables as "family name".
func nftTables() ([]string, error) {
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w: %s", err, out)
	}
	var tables []string
	for _, line := range strings.Split(string(out), "\n") {
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "table "); ok {
			tables = append(tables, t)
		}
	}
	return tables, nil
}

// deleteNftTables deletes the record's tables that exist now.
func (r *hostRecord) deleteNftTables() error {
	tables, err := nftTables()
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range r.NftTables {
		if !slices.Contains(tables, t) {
			continue
		}
		if out, err := exec.Command("nft", append([]string{"delete", "table"}, strings.Fields(t)...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("nft delete table %s: %w: %s", t, err, out))
		}
	}
	return errors.Join(errs...)
}
