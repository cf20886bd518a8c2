package config

import (
	"testing"
	"time"
)

func TestLoadConfigRejectsBadFiles(t *testing.T) {
	for _, tc := range []struct {
		file string
		want string
	}{
		{"unknown-field.yml", "testdata/unknown-field.yml: probe at line 2: intervall: is not a setting (line 3; known: name, kind, namespace, interval, updates, deadline, paths, watch_timeout, stall_after, retention, lost_after, etcd, apiservers, resume, controllers, freshness, watch_list)"},
		{"unknown-top-level.yml", "testdata/unknown-top-level.yml: yaml: unmarshal errors:\n  line 1: field probe is not a top-level setting (known: probes)"},
		{"bad-kind.yml", `testdata/bad-kind.yml: probe "fast" (line 2): kind: "Secret" is not supported; use ConfigMap or Lease`},
		{"bad-interval.yml", `testdata/bad-interval.yml: probe "slow" (line 2): interval: 0s is too short; use at least 100ms`},
		{"bad-duration.yml", `testdata/bad-duration.yml: probe at line 2: deadline: "soon" is not a duration; write a number and a unit, e.g. 10s or 1m`},
		{"lost-after-within-deadline.yml", `testdata/lost-after-within-deadline.yml: probe "fast" (line 2): lost_after: 5s must be longer than the deadline (5s): an event later than the deadline is late, and lost only if it never comes; leave it out for the default, 2 x the deadline, at least 1m`},
		{"lost-after-beyond-retention.yml", `testdata/lost-after-beyond-retention.yml: probe "fast" (line 2): lost_after: 3m is longer than the retention (2m), after which the write is forgotten; raise retention or shorten lost_after`},
		{"bad-path.yml", `testdata/bad-path.yml: probe "fast" (line 2): paths: "reflector" is not a path; use one or more of informer, watch, etcd`},
		{"etcd-no-endpoints.yml", `testdata/etcd-no-endpoints.yml: probe "fast" (line 2): etcd.endpoints: is empty, but paths lists etcd; give the etcd client URLs the apiserver uses, e.g. https://10.0.0.1:2379`},
		{"etcd-unknown-field.yml", "testdata/etcd-unknown-field.yml: probe at line 2: etcd.certfile: is not a setting (line 6; known: endpoints, cert_file, key_file, ca_file, dial_timeout, prefix)"},
		{"etcd-half-cert.yml", `testdata/etcd-half-cert.yml: probe "fast" (line 2): etcd.cert_file: and etcd.key_file go together; set both or neither`},
		{"etcd-missing-cert.yml", `testdata/etcd-missing-cert.yml: probe "fast": etcd.cert_file: open testdata/no-such-cert.pem: no such file or directory`},
		{"apiservers-bad-endpoint.yml", `testdata/apiservers-bad-endpoint.yml: probe "fast" (line 2): apiservers.endpoints[1]: "10.0.0.2" is not host:port; write the apiserver's address and secure port, e.g. 10.0.0.1:6443`},
		{"apiservers-bad-word.yml", `testdata/apiservers-bad-word.yml: probe at line 2: apiservers: "discovery" is not a setting; write ` + "`apiservers: discover`" + `, a list of host:port, or a mapping with discover, endpoints, server_name, retire_after, series_grace`},
		{"apiservers-series-grace.yml", `testdata/apiservers-series-grace.yml: probe "fast" (line 2): apiservers.series_grace: must be positive, got 0s; use a few scrape intervals, e.g. 2m`},
		{"apiservers-both.yml", `testdata/apiservers-both.yml: probe "fast" (line 2): apiservers: discover and endpoints exclude each other; keep one`},
		{"bad-name.yml", `testdata/bad-name.yml: probe "Fast_Probe" (line 2): name: "Fast_Probe" is invalid; use lowercase letters, digits and '-', starting and ending with a letter or digit`},
		{"missing-name.yml", "testdata/missing-name.yml: probe at line 2: name: is required"},
		{"duplicate-name.yml", `testdata/duplicate-name.yml: probes[1]: name "fast" is already used by probes[0]; probe names must be unique`},
		{"empty.yml", `testdata/empty.yml: the file is empty; list at least one probe under "probes"`},
		{"no-probes.yml", "testdata/no-probes.yml: probes: list at least one probe"},
		{"freshness-empty.yml", `testdata/freshness-empty.yml: probe "fast" (line 2): freshness.resources: is empty; list resources, e.g. [pods, configmaps], name API groups in crds, e.g. [example.com], or remove freshness to turn the checks off`},
		{"freshness-bad-resource.yml", `testdata/freshness-bad-resource.yml: probe "fast" (line 2): freshness.resources[1]: "Pods" is not a resource name (lowercase plural, as in kubectl api-resources); write resource or resource.group, e.g. pods or endpointslices.discovery.k8s.io; freshness.resources[2]: "pods" is listed twice (also freshness.resources[0])`},
		{"freshness-timeout.yml", `testdata/freshness-timeout.yml: probe "fast" (line 2): freshness.timeout: 5s must be shorter than every (5s), so that rounds do not overlap`},
		{"freshness-unknown-field.yml", "testdata/freshness-unknown-field.yml: probe at line 2: freshness.resource: is not a setting (line 4; known: resources, cluster_resources, crds, max_crds, every, timeout, bound, queued_after, stuck_window, reads)"},
		{"watchlist-empty.yml", `testdata/watchlist-empty.yml: probe "fast" (line 2): watch_list.resources: is empty; list resources, e.g. [pods, configmaps], or remove watch_list to turn the checks off`},
		{"watchlist-bound.yml", `testdata/watchlist-bound.yml: probe "fast" (line 2): watch_list.bound: 5s must be shorter than every (5s), so that a check ends before the next round`},
		{"watchlist-unknown-field.yml", "testdata/watchlist-unknown-field.yml: probe at line 2: watch_list.timeout: is not a setting (line 4; known: resources, cluster_resources, every, bound, queued_after, stuck_window)"},
		{"freshness-bad-every.yml", `testdata/freshness-bad-every.yml: probe at line 2: freshness.every: "often" is not a duration; write a number and a unit, e.g. 10s or 1m`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := LoadFile("testdata/" + tc.file)
			if err == nil {
				t.Fatal("loaded without error")
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", err, tc.want)
			}
		})
	}
}

func TestLoadConfigFillsDefaults(t *testing.T) {
	probes, err := LoadFile("testdata/good.yml")
	if err != nil {
		t.Fatal(err)
	}
	if len(probes) != 2 {
		t.Fatalf("got %d probes, want 2", len(probes))
	}
	fast, leases := probes[0], probes[1]
	if time.Duration(fast.Interval) != time.Second || time.Duration(fast.Deadline) != 2*time.Second || fast.Updates != 3 {
		t.Errorf("fast: explicit values lost: %+v", fast)
	}
	if fast.Kind != KindConfigMap || fast.Namespace != "watchprobe" || len(fast.Paths) != 2 {
		t.Errorf("fast: defaults not filled: %+v", fast)
	}
	if leases.Kind != KindLease || leases.Namespace != "watchprobe-leases" || len(leases.Paths) != 1 || leases.Paths[0] != "watch" {
		t.Errorf("leases: %+v", leases)
	}
	if time.Duration(leases.Interval) != 10*time.Second {
		t.Errorf("leases: default interval not filled: %s", leases.Interval)
	}
}
