package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Each apiserver of an HACluster lives in a network namespace of its own,
// joined to the root namespace by a veth pair with a /30 on it: the root end
// carries the apiserver's link to etcd, the namespace end is the address the
// apiserver serves on and advertises. Endpoints validation refuses loopback
// addresses, so a real address is needed, and one that only this machine
// routes keeps every packet here.
//
// Namespaces are named wp-<pid>-<start>-<slot>: the owner's pid and start
// time (so a reused pid is not mistaken for the owner) and the /30's index
// in linkNet. Slots are taken under an flock shared by every process on the
// machine, so parallel test binaries never pick the same one, and a
// namespace whose owner is gone (a test binary that crashed or was killed)
// is removed by the next allocation.

// linkNet holds every /30. It is checked against the machine's own
// addresses and routes before a slot is used, so a clash skips the slot
// instead of shadowing a real network.
var linkNet = netip.MustParsePrefix("10.199.0.0/16")

const (
	netnsPrefix   = "wp-"
	netnsDir      = "/run/netns"
	netnsLockPath = "/run/watchprobe-netns.lock"
	linkSlots     = 1 << (32 - 16 - 2) // /30s in linkNet
)

// netLink is one namespace and the veth pair into it.
type netLink struct {
	ns       string
	slot     int
	hostIf   string // root end of the veth
	nsIf     string // namespace end
	hostAddr netip.Addr
	nsAddr   netip.Addr
}

func slotPrefix(slot int) netip.Prefix {
	b := linkNet.Addr().As4()
	off := slot * 4
	b[2], b[3] = byte(off>>8), byte(off)
	return netip.PrefixFrom(netip.AddrFrom4(b), 30)
}

func newNetLink(owner string, slot int) *netLink {
	base := slotPrefix(slot).Addr()
	return &netLink{
		ns:       fmt.Sprintf("%s%s-%d", netnsPrefix, owner, slot),
		slot:     slot,
		hostIf:   hostIfName(slot),
		nsIf:     fmt.Sprintf("wpn%d", slot),
		hostAddr: base.Next(),
		nsAddr:   base.Next().Next(),
	}
}

// hostIfName is the root end of a slot's veth: the slot's, whoever owns it
// (interface names are at most 15 bytes, too short for the owner).
func hostIfName(slot int) string { return fmt.Sprintf("wpr%d", slot) }

// linkExists reports whether the root namespace has an interface of that name.
func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// ownerTag is this process's pid and start time, as namespace names carry
// it. Without the start time this process's namespaces would look like a
// dead owner's to every other process, whose next allocation would sweep
// them in use: allocation fails instead (ownerTagErr).
var ownerTag, ownerTagErr = func() (string, error) {
	start, err := processStartTime(os.Getpid())
	if err != nil {
		return "", fmt.Errorf("reading this process's start time, which names its network namespaces: %w", err)
	}
	return fmt.Sprintf("%d-%d", os.Getpid(), start), nil
}()

// processStartTime is field 22 of /proc/<pid>/stat, in clock ticks since boot.
func processStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses; fields
	// after its closing parenthesis start with field 3.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// parseNetnsName returns the owner pid, start time and slot of a namespace
// this package made; ok is false for any other name.
func parseNetnsName(name string) (pid int, start uint64, slot int, ok bool) {
	rest, found := strings.CutPrefix(name, netnsPrefix)
	if !found {
		return 0, 0, 0, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 3 {
		return 0, 0, 0, false
	}
	pid, err1 := strconv.Atoi(parts[0])
	start, err2 := strconv.ParseUint(parts[1], 10, 64)
	slot, err3 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || slot < 0 || slot >= linkSlots {
		return 0, 0, 0, false
	}
	return pid, start, slot, true
}

func ownerAlive(pid int, start uint64) bool {
	got, err := processStartTime(pid)
	return err == nil && got == start
}

// checkNetnsSupport says why network namespaces cannot be made here, if so.
func checkNetnsSupport() error {
	if os.Geteuid() != 0 {
		return errors.New("an HA cluster needs root: each apiserver gets a network namespace (ip netns) of its own; run the tests as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("an HA cluster needs the ip command (Debian package iproute2): %w", err)
	}
	return nil
}

// ip runs the ip command and returns its output, or an error that quotes it.
func ip(args ...string) (string, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// withNetnsLock runs f holding the machine-wide allocation lock.
func withNetnsLock(f func() error) error {
	lock, err := os.OpenFile(netnsLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("opening the namespace allocation lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", netnsLockPath, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // Close unlocks anyway
	return f()
}

// ourNamespaces lists the namespaces in /run/netns that this package named.
func ourNamespaces() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if _, _, _, ok := parseNetnsName(e.Name()); ok {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// allocateLink takes a free slot and makes its namespace and veth pair.
// On failure nothing of the slot is left behind.
func allocateLink() (*netLink, error) {
	if ownerTagErr != nil {
		return nil, ownerTagErr
	}
	var link *netLink
	err := withNetnsLock(func() error {
		if err := sweepLeftovers(); err != nil {
			return err
		}
		used, err := usedPrefixes()
		if err != nil {
			return err
		}
		taken := map[int]bool{}
		names, err := ourNamespaces()
		if err != nil {
			return err
		}
		for _, name := range names {
			_, _, slot, _ := parseNetnsName(name)
			taken[slot] = true
		}
	slots:
		for slot := range linkSlots {
			if taken[slot] {
				continue
			}
			// A veth outlives its namespace's name while a process is
			// still inside; its name is the slot's.
			if linkExists(hostIfName(slot)) {
				continue
			}
			p := slotPrefix(slot)
			for _, u := range used {
				if u.Overlaps(p) {
					continue slots
				}
			}
			link = newNetLink(ownerTag, slot)
			if err := link.create(); err != nil {
				return errors.Join(err, link.deleteLocked())
			}
			return nil
		}
		return fmt.Errorf("no free /30 left in %s for another apiserver namespace", linkNet)
	})
	if err != nil {
		return nil, err
	}
	return link, nil
}

func (l *netLink) create() error {
	host, ns := l.hostAddr.String()+"/30", l.nsAddr.String()+"/30"
	for _, args := range [][]string{
		{"netns", "add", l.ns},
		{"link", "add", l.hostIf, "type", "veth", "peer", "name", l.nsIf, "netns", l.ns},
		// No IPv6 link-local addresses: nothing but the /30 is ever sent.
		{"link", "set", l.hostIf, "addrgenmode", "none"},
		{"-n", l.ns, "link", "set", l.nsIf, "addrgenmode", "none"},
		{"addr", "add", host, "dev", l.hostIf},
		{"-n", l.ns, "addr", "add", ns, "dev", l.nsIf},
		{"link", "set", l.hostIf, "up"},
		{"-n", l.ns, "link", "set", l.nsIf, "up"},
		{"-n", l.ns, "link", "set", "lo", "up"},
	} {
		if _, err := ip(args...); err != nil {
			return fmt.Errorf("making network namespace %s: %w", l.ns, err)
		}
	}
	return nil
}

// delete removes the veth pair and the namespace, under the machine-wide
// lock; what is already gone is not an error. Processes still inside keep
// the namespace alive until they end, so callers stop them first.
func (l *netLink) delete() error {
	return withNetnsLock(l.deleteLocked)
}

// deleteLocked is delete for a caller that holds the lock. The veth's name
// is the slot's, not the owner's: once this link's namespace is gone the
// slot is free, and another process may have made its own veth of that
// name since. So the veth is removed only while this link's namespace,
// which holds the slot, still exists; a second delete, or the delete of a
// link whose slot was swept and handed out again, leaves it alone.
func (l *netLink) deleteLocked() error {
	if _, err := os.Stat(netnsDir + "/" + l.ns); err != nil {
		return nil
	}
	var errs []error
	if linkExists(l.hostIf) {
		if _, err := ip("link", "del", l.hostIf); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := ip("netns", "del", l.ns); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// sweepLeftovers removes the namespaces of owners that are gone, with any
// process still inside them. Children die with the test binary (Pdeathsig),
// but the namespace mounts and veths would stay forever.
func sweepLeftovers() error {
	names, err := ourNamespaces()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		pid, start, slot, _ := parseNetnsName(name)
		if ownerAlive(pid, start) {
			continue
		}
		if out, err := ip("netns", "pids", name); err == nil {
			for _, f := range strings.Fields(out) {
				if p, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
		}
		link := newNetLink(fmt.Sprintf("%d-%d", pid, start), slot)
		if err := link.deleteLocked(); err != nil {
			errs = append(errs, fmt.Errorf("removing leftover namespace %s of a test process that is gone: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// usedPrefixes are the IPv4 networks this machine already has addresses or
// routes in (the default route aside), in any routing table.
func usedPrefixes() ([]netip.Prefix, error) {
	var used []netip.Prefix
	addrs, err := ip("-4", "-o", "addr", "show")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(addrs, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[2] == "inet" {
			if p, err := netip.ParsePrefix(f[3]); err == nil {
				used = append(used, p.Masked())
			}
		}
	}
	routes, err := ip("-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(routes, "\n") {
		for _, word := range strings.Fields(line) {
			if word == "default" {
				break
			}
			if p, err := netip.ParsePrefix(word); err == nil {
				used = append(used, p.Masked())
				break
			}
			if a, err := netip.ParseAddr(word); err == nil {
				used = append(used, netip.PrefixFrom(a, 32))
				break
			}
		}
	}
	return used, nil
}

// waitStopped waits until pid is in the stopped state, so that Freeze
// returns once the process can no longer answer.
func waitStopped(pid int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) && data[i+2] == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped after %s", pid, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
