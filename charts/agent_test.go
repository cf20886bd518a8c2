package charts

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// agentObjects are the rendered objects of the node agents: those labelled
// app.kubernetes.io/component=agent.
func agentObjects(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/component"] == "agent" {
			out = append(out, o)
		}
	}
	return out
}

func named(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range find(objs, kind) {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// The agents are opt in: the defaults render none of their objects, nor
// their namespace.
func TestRenderAgentOffByDefault(t *testing.T) {
	objs := render(t, "monitoring")
	if a := agentObjects(objs); len(a) != 0 {
		t.Errorf("%d agent objects by default, first %s %s", len(a), a[0].GetKind(), a[0].GetName())
	}
	for _, ns := range find(objs, "Namespace") {
		if ns.GetName() == "watchprobe-agents" {
			t.Error("the agents' namespace rendered with the agents off")
		}
	}
}

// Enabled, the agents run watchprobe-agent from the exporter's very image
// reference, with their node's name from the downward API and the flags
// their values give, as the exporter's hardened user, on every node.
func TestRenderAgentDaemonSet(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	objs := renderValues(t, `
agent:
  enabled: true
  writeBudget: 2000000
  minInterval: 15s
  deadline: 3s
  stallAfter: 45s
  lostAfter: 3m
  zone: eu-west-1a
  log: {level: debug, format: json}
  extraArgs: [--agent.starved-threshold=100ms]
image: {digest: "`+digest+`"}
imagePullSecrets: [regcred]
`)
	ds := one(t, objs, "DaemonSet")
	deploy := one(t, objs, "Deployment")
	pod := at(t, ds, "spec.template.spec").(map[string]any)
	c := at(t, ds, "spec.template.spec.containers.0").(map[string]any)
	exporter := at(t, deploy, "spec.template.spec.containers.0").(map[string]any)

	if c["image"] != exporter["image"] || !strings.HasSuffix(c["image"].(string), "@"+digest) {
		t.Errorf("agent image %v, want the exporter's %v, pinned by image.digest", c["image"], exporter["image"])
	}
	if !equalJSON(c["command"], []any{"/bin/watchprobe-agent"}) {
		t.Errorf("command %v, want [/bin/watchprobe-agent]", c["command"])
	}
	wantArgs := []any{"--namespace=watchprobe-agents", "--write-budget=2000000", "--min-interval=15s", "--deadline=3s",
		"--stall-after=45s", "--lost-after=3m", "--zone=eu-west-1a", "--web.listen-address=:9918",
		"--log.level=debug", "--log.format=json", "--agent.starved-threshold=100ms"}
	if !equalJSON(c["args"], wantArgs) {
		t.Errorf("args\n%v, want\n%v", c["args"], wantArgs)
	}
	env := c["env"].([]any)
	if !equalJSON(env[0], map[string]any{"name": "NODE_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "spec.nodeName"}}}) {
		t.Errorf("first env %v, want NODE_NAME from spec.nodeName", env[0])
	}
	if !equalJSON(c["ports"], []any{map[string]any{"name": "http-metrics", "containerPort": 9918, "protocol": "TCP"}}) {
		t.Errorf("ports %v, want http-metrics 9918", c["ports"])
	}
	if !equalJSON(at(t, ds, "spec.template.spec.containers.0.readinessProbe.httpGet"), map[string]any{"path": "/-/ready", "port": "http-metrics", "scheme": "HTTP"}) {
		t.Errorf("readiness %v, want /-/ready", c["readinessProbe"])
	}
	if !equalJSON(at(t, ds, "spec.template.spec.containers.0.livenessProbe.httpGet"), map[string]any{"path": "/-/healthy", "port": "http-metrics", "scheme": "HTTP"}) {
		t.Errorf("liveness %v, want /-/healthy, whatever the watch", c["livenessProbe"])
	}
	if !equalJSON(c["securityContext"], exporter["securityContext"]) || !equalJSON(pod["securityContext"], at(t, deploy, "spec.template.spec.securityContext")) {
		t.Errorf("security contexts %v / %v, want the exporter's", pod["securityContext"], c["securityContext"])
	}
	if !equalJSON(pod["imagePullSecrets"], []any{map[string]any{"name": "regcred"}}) {
		t.Errorf("imagePullSecrets %v, want the exporter's", pod["imagePullSecrets"])
	}
	for path, want := range map[string]any{
		"spec.template.spec.containers.0.resources":       map[string]any{"requests": map[string]any{"cpu": "1m", "memory": "16Mi"}, "limits": map[string]any{"memory": "48Mi"}},
		"spec.template.spec.tolerations":                  []any{map[string]any{"operator": "Exists"}},
		"spec.updateStrategy":                             map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": "10%"}},
		"spec.template.spec.serviceAccountName":           "wp-watchprobe-agent",
		"spec.template.spec.automountServiceAccountToken": true,
	} {
		if got := at(t, ds, path); !equalJSON(got, want) {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if _, ok := pod["priorityClassName"]; ok {
		t.Errorf("priorityClassName %v by default, want the cluster's default", pod["priorityClassName"])
	}
	// The ServiceAccount gives no token to a pod that does not ask.
	sa := named(t, objs, "ServiceAccount", "wp-watchprobe-agent")
	if v, ok := sa.Object["automountServiceAccountToken"]; !ok || v != false {
		t.Errorf("agent ServiceAccount automountServiceAccountToken %v, want false", v)
	}
}

// The agents' pods and the exporter's never select each other: a Service
// endpoint, PDB or monitor that took an agent for a replica would scrape
// and count it as one.
func TestRenderAgentSelectorsApart(t *testing.T) {
	objs := renderValues(t, "agent: {enabled: true}\npodMonitor: {enabled: true}\nnetworkPolicy: {enabled: true, from: [{namespaceSelector: {}}]}\n")
	agentPod := labels.Set(toStrings(at(t, one(t, objs, "DaemonSet"), "spec.template.metadata.labels")))
	exporterPod := labels.Set(toStrings(at(t, one(t, objs, "Deployment"), "spec.template.metadata.labels")))
	selectors := map[string]any{
		"Deployment": at(t, one(t, objs, "Deployment"), "spec.selector.matchLabels"),
		"Service":    at(t, one(t, objs, "Service"), "spec.selector"),
		"PDB":        at(t, one(t, objs, "PodDisruptionBudget"), "spec.selector.matchLabels"),
	}
	for _, o := range find(objs, "PodMonitor") {
		selectors["PodMonitor "+o.GetName()] = at(t, o, "spec.selector.matchLabels")
	}
	for _, o := range find(objs, "NetworkPolicy") {
		selectors["NetworkPolicy "+o.GetName()] = at(t, o, "spec.podSelector.matchLabels")
	}
	selectors["DaemonSet"] = at(t, one(t, objs, "DaemonSet"), "spec.selector.matchLabels")
	agents := 0
	for what, sel := range selectors {
		s := labels.SelectorFromSet(toStrings(sel))
		isAgent := strings.Contains(what, "agent") || what == "DaemonSet"
		if isAgent {
			agents++
		}
		if s.Matches(agentPod) != isAgent || s.Matches(exporterPod) == isAgent {
			t.Errorf("%s selects the agent's pod: %v, the exporter's: %v; want only its own", what, s.Matches(agentPod), s.Matches(exporterPod))
		}
	}
	if agents != 3 {
		t.Errorf("%d agent selectors (DaemonSet, PodMonitor, NetworkPolicy), want 3: %v", agents, slices.Collect(maps.Keys(selectors)))
	}
}

func toStrings(m any) map[string]string {
	out := map[string]string{}
	for k, v := range m.(map[string]any) {
		out[k] = v.(string)
	}
	return out
}

// The agents' rights are their Leases in their namespace and, while their
// zone is read from their Node, get on Nodes: nothing else.
func TestRenderAgentRBAC(t *testing.T) {
	objs := renderValues(t, "agent: {enabled: true}\n")
	role := named(t, objs, "Role", "wp-watchprobe-agent")
	if role.GetNamespace() != "watchprobe-agents" {
		t.Errorf("agent Role in %q, want watchprobe-agents", role.GetNamespace())
	}
	if got := field(t, role, "rules"); !equalJSON(got, []any{map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": []any{"get", "list", "watch", "create", "patch"}}}) {
		t.Errorf("agent Role rules %v", got)
	}
	rb := named(t, objs, "RoleBinding", "wp-watchprobe-agent")
	if got := field(t, rb, "subjects"); rb.GetNamespace() != "watchprobe-agents" || !equalJSON(got, []any{map[string]any{"kind": "ServiceAccount", "name": "wp-watchprobe-agent", "namespace": "monitoring"}}) {
		t.Errorf("agent RoleBinding %s: subjects %v", rb.GetNamespace(), got)
	}
	cr := named(t, objs, "ClusterRole", "wp-watchprobe-agent")
	if got := field(t, cr, "rules"); !equalJSON(got, []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"nodes"}, "verbs": []any{"get"}}}) {
		t.Errorf("agent ClusterRole rules %v, want get on nodes only", got)
	}
	crb := named(t, objs, "ClusterRoleBinding", "wp-watchprobe-agent")
	if got := field(t, crb, "subjects"); !equalJSON(got, []any{map[string]any{"kind": "ServiceAccount", "name": "wp-watchprobe-agent", "namespace": "monitoring"}}) {
		t.Errorf("agent ClusterRoleBinding subjects %v", got)
	}
	// No Node read, no ClusterRole: turned off, and then the agent is
	// told not to try. A zone given still reads the Node, for its owner.
	if got := at(t, one(t, renderValues(t, "agent: {enabled: true, readNode: false}\n"), "DaemonSet"), "spec.template.spec.containers.0.args"); !slices.Contains(got.([]any), "--no-read-node") {
		t.Errorf("readNode false: args %v lack --no-read-node", got)
	}
	// With the zone given, the agents still read their Node for its UID.
	named(t, renderValues(t, "agent: {enabled: true, zone: z1}\n"), "ClusterRole", "wp-watchprobe-agent")
	for _, values := range []string{"agent: {enabled: true, readNode: false}\n"} {
		for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
			for _, o := range find(renderValues(t, values), kind) {
				if o.GetLabels()["app.kubernetes.io/component"] == "agent" {
					t.Errorf("%s: %s %s, want none", strings.TrimSpace(values), kind, o.GetName())
				}
			}
		}
	}
	// rbac.create false: the RBAC is yours, the agents' too.
	for _, o := range agentObjects(renderValues(t, "agent: {enabled: true}\nrbac: {create: false}\n")) {
		if strings.Contains(o.GetKind(), "Role") {
			t.Errorf("rbac.create false: %s %s rendered", o.GetKind(), o.GetName())
		}
	}
}

// The agents' namespace is the chart's as the marker namespaces are: the
// same labels (Pod Security's among them), unless it is listed as yours.
func TestRenderAgentNamespace(t *testing.T) {
	objs := renderValues(t, `
agent: {enabled: true, namespace: node-agents}
markerNamespaces:
  labels: {pod-security.kubernetes.io/enforce: restricted}
  annotations: {example.com/owner: sre}
`)
	ns := named(t, objs, "Namespace", "node-agents")
	for k, v := range map[string]string{"watchprobe.io/markers": "true", "pod-security.kubernetes.io/enforce": "restricted", "app.kubernetes.io/instance": "wp"} {
		if ns.GetLabels()[k] != v {
			t.Errorf("namespace node-agents label %s = %q, want %q (labels %v)", k, ns.GetLabels()[k], v, ns.GetLabels())
		}
	}
	if ns.GetAnnotations()["helm.sh/resource-policy"] != "keep" || ns.GetAnnotations()["example.com/owner"] != "sre" {
		t.Errorf("namespace node-agents annotations %v, want the marker namespaces'", ns.GetAnnotations())
	}
	if got := at(t, one(t, objs, "DaemonSet"), "spec.template.spec.containers.0.args.0"); got != "--namespace=node-agents" {
		t.Errorf("first arg %v, want --namespace=node-agents", got)
	}
	for _, values := range []string{
		"agent: {enabled: true}\nmarkerNamespaces: {existing: [watchprobe-agents]}\n",
		"agent: {enabled: true}\nmarkerNamespaces: {create: false}\n",
	} {
		objs := renderValues(t, values)
		for _, ns := range find(objs, "Namespace") {
			if ns.GetName() == "watchprobe-agents" {
				t.Errorf("%s: the chart renders the namespace it was told is yours", strings.TrimSpace(values))
			}
		}
		if named(t, objs, "Role", "wp-watchprobe-agent").GetNamespace() != "watchprobe-agents" {
			t.Errorf("%s: no agent Role in watchprobe-agents", values)
		}
	}
}

// The agents' PodMonitor is placed and reached as the exporter's monitor
// (namespace, labels, interval, TLS) but adds no node label and never the
// exporter's relabelings: each agent sets node and zone itself, and a
// target label node would rename its own to exported_node.
func TestRenderAgentPodMonitor(t *testing.T) {
	for _, monitor := range []string{"serviceMonitor", "podMonitor"} {
		objs := renderValues(t, monitor+`:
  enabled: true
  namespace: prometheus
  additionalLabels: {release: kps}
  interval: 15s
  tlsConfig: {insecureSkipVerify: true}
  relabelings: [{action: replace, sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node}]
  metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: go_.*}]
webConfig: {scheme: HTTPS}
agent:
  enabled: true
  scrapeJob: agents
  podMonitor:
    relabelings: [{action: replace, sourceLabels: [__meta_kubernetes_pod_label_team], targetLabel: team}]
`)
		pm := named(t, objs, "PodMonitor", "wp-watchprobe-agent")
		if pm.GetNamespace() != "prometheus" || pm.GetLabels()["release"] != "kps" {
			t.Errorf("%s: agent PodMonitor %s/%s labels %v, want the exporter monitor's place", monitor, pm.GetNamespace(), pm.GetName(), pm.GetLabels())
		}
		for path, want := range map[string]any{
			"spec.selector.matchLabels":              map[string]any{"app.kubernetes.io/name": "watchprobe-agent", "app.kubernetes.io/instance": "wp"},
			"spec.namespaceSelector.matchNames":      []any{"monitoring"},
			"spec.podMetricsEndpoints.0.port":        "http-metrics",
			"spec.podMetricsEndpoints.0.scheme":      "https",
			"spec.podMetricsEndpoints.0.interval":    "15s",
			"spec.podMetricsEndpoints.0.tlsConfig":   map[string]any{"insecureSkipVerify": true},
			"spec.podMetricsEndpoints.0.relabelings": []any{map[string]any{"action": "replace", "sourceLabels": []any{"__meta_kubernetes_pod_label_team"}, "targetLabel": "team"}, map[string]any{"action": "replace", "targetLabel": "job", "replacement": "agents"}},
		} {
			if got := at(t, pm, path); !equalJSON(got, want) {
				t.Errorf("%s: %s = %v, want %v", monitor, path, got, want)
			}
		}
		if _, ok := at(t, pm, "spec.podMetricsEndpoints.0").(map[string]any)["metricRelabelings"]; ok {
			t.Errorf("%s: the agents' PodMonitor took the exporter's metricRelabelings", monitor)
		}
	}
	// Without a monitor of the exporter's, or with the agents' turned off: none.
	for _, values := range []string{"agent: {enabled: true}\n", "agent: {enabled: true, podMonitor: {enabled: false}}\npodMonitor: {enabled: true}\n"} {
		for _, pm := range find(renderValues(t, values), "PodMonitor") {
			if pm.GetName() == "wp-watchprobe-agent" {
				t.Errorf("%s: an agent PodMonitor", strings.TrimSpace(values))
			}
		}
	}
}

// Under network policies the agents admit scrapes from the exporter's
// `from` and reach the apiserver only.
func TestRenderAgentNetworkPolicy(t *testing.T) {
	objs := renderValues(t, `
agent: {enabled: true}
networkPolicy:
  enabled: true
  from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: prometheus}}}]
  egress: {enabled: true, apiServer: {cidrs: [10.0.0.0/28], ports: [6443]}}
`)
	in := named(t, objs, "NetworkPolicy", "wp-watchprobe-agent")
	if got := at(t, in, "spec.ingress"); !equalJSON(got, []any{map[string]any{
		"ports": []any{map[string]any{"port": "http-metrics", "protocol": "TCP"}},
		"from":  []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "prometheus"}}}},
	}}) {
		t.Errorf("agent ingress %v", got)
	}
	out := named(t, objs, "NetworkPolicy", "wp-watchprobe-agent-egress")
	if got := at(t, out, "spec.egress"); !equalJSON(got, []any{map[string]any{
		"to":    []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.0.0.0/28"}}},
		"ports": []any{map[string]any{"port": 6443, "protocol": "TCP"}},
	}}) {
		t.Errorf("agent egress %v, want the apiserver only", got)
	}
}

// prometheusScrape annotates the agents' pods (they have no Service) with
// their own port.
func TestRenderAgentScrapeAnnotations(t *testing.T) {
	ds := one(t, renderValues(t, "agent: {enabled: true, port: 9100}\nprometheusScrape: true\n"), "DaemonSet")
	for k, v := range map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9100", "prometheus.io/path": "/metrics", "prometheus.io/scheme": "http"} {
		if got := at(t, ds, "spec.template.metadata.annotations").(map[string]any)[k]; got != v {
			t.Errorf("annotation %s = %v, want %s", k, got, v)
		}
	}
}

// Bad agent values are refused at install, naming the field.
func TestSchemaRejectsBadAgentValues(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"agent.enabeld=true"}, "at '/agent': additional properties 'enabeld' not allowed"},
		{[]string{"agent.namespace=Agents"}, "at '/agent/namespace'"},
		{[]string{"agent.writeBudget=0"}, "at '/agent/writeBudget': minimum: got 0, want 1"},
		{[]string{"agent.writeBudget=2.5"}, "at '/agent/writeBudget'"},
		{[]string{"agent.deadline=5"}, "at '/agent/deadline': got number, want string"},
		// Go durations: the agent's flags refuse Prometheus's d, w and y.
		{[]string{"agent.lostAfter=1d"}, "at '/agent/lostAfter': '1d' does not match pattern"},
		{[]string{"agent.minInterval=10 s"}, "at '/agent/minInterval'"},
		{[]string{"agent.zone=eu/west"}, "at '/agent/zone'"},
		{[]string{"agent.log.level=trace"}, "at '/agent/log/level': value must be one of 'debug', 'info', 'warn', 'error'"},
		{[]string{"agent.port=0"}, "at '/agent/port'"},
		{[]string{"agent.scrapeJob="}, "at '/agent/scrapeJob'"},
		{[]string{"agent.podMonitor.enable=true"}, "at '/agent/podMonitor': additional properties 'enable' not allowed"},
		{[]string{"agent.resources.request.cpu=1m"}, "at '/agent/resources': additional properties 'request' not allowed"},
		{[]string{"agent.updateStrategy.type=Rolling"}, "at '/agent/updateStrategy/type': value must be one of 'RollingUpdate', 'OnDelete'"},
		{[]string{"agent.updateStrategy.rollingUpdate.maxUnavailable=ten"}, "at '/agent/updateStrategy/rollingUpdate/maxUnavailable'"},
		{[]string{"agent.serviceAccount.nam=x"}, "at '/agent/serviceAccount': additional properties 'nam' not allowed"},
		{[]string{`agent.podLabels.app\.kubernetes\.io/name=x`}, "at '/agent/podLabels/app.kubernetes.io~1name': false schema"},
		{[]string{"agent.tolerations[0]=x"}, "at '/agent/tolerations/0'"},
		// Namespaces whose Leases are not only the agents'.
		{[]string{"agent.enabled=true", "agent.namespace=watchprobe"}, `agent.namespace: "watchprobe" is probe "default"'s marker namespace`},
		{[]string{"agent.enabled=true", "agent.namespace=default"}, `agent.namespace: "default" is the release's own namespace`},
		{[]string{"agent.enabled=true", "agent.serviceAccount.create=false"}, "agent.serviceAccount.name is required when agent.serviceAccount.create is false"},
	} {
		wantRenderError(t, tc.set, tc.want)
	}
}

// `helm test`'s check reads the agents' Leases when agents run, with list
// on them and nothing more, and is told no agents' namespace otherwise.
func TestAgentHelmTestReadsTheAgents(t *testing.T) {
	objs := renderValues(t, "agent: {enabled: true}\nhelmTest: {enabled: true}\n")
	role := named(t, objs, "Role", "wp-watchprobe-agent-check")
	if got := field(t, role, "rules"); !equalJSON(got, []any{map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": []any{"list"}}}) {
		t.Errorf("the check's Role rules %v, want list on leases only", got)
	}
	if ns := role.GetNamespace(); ns != "watchprobe-agents" {
		t.Errorf("the check's Role in %q, want the agents' namespace", ns)
	}
	binding := named(t, objs, "RoleBinding", "wp-watchprobe-agent-check")
	if got := field(t, binding, "subjects"); !equalJSON(got, []any{map[string]any{"kind": "ServiceAccount", "name": "wp-watchprobe", "namespace": "monitoring"}}) {
		t.Errorf("the check's RoleBinding subjects %v, want the exporter's ServiceAccount", got)
	}
	for values, want := range map[string]string{
		"agent: {enabled: true}\nhelmTest: {enabled: true}\n":  "--agents.namespace=watchprobe-agents",
		"agent: {enabled: false}\nhelmTest: {enabled: true}\n": "--agents.namespace=",
	} {
		args := at(t, one(t, renderValues(t, values), "Pod"), "spec.containers.0.args")
		if !slices.Contains(args.([]any), any(want)) {
			t.Errorf("%s: the test's args %v lack %s", strings.TrimSpace(values), args, want)
		}
	}
	for _, o := range find(renderValues(t, "agent: {enabled: true}\n"), "Role") {
		if o.GetName() == "wp-watchprobe-agent-check" {
			t.Errorf("without the test, a Role %s", o.GetName())
		}
	}
}

// The agents measure the kubelets' path when told to: the node's network,
// and the apiserver address the kubelets use instead of the Service.
func TestAgentKubeletsPath(t *testing.T) {
	ds := one(t, renderValues(t, "agent: {enabled: true, hostNetwork: true, apiServer: {host: api.example.com, port: 6443}}\n"), "DaemonSet")
	if at(t, ds, "spec.template.spec.hostNetwork") != true || at(t, ds, "spec.template.spec.dnsPolicy") != "ClusterFirstWithHostNet" {
		t.Errorf("hostNetwork %v, dnsPolicy %v; want the node's network", at(t, ds, "spec.template.spec.hostNetwork"), at(t, ds, "spec.template.spec.dnsPolicy"))
	}
	env := map[string]any{}
	for _, e := range at(t, ds, "spec.template.spec.containers.0.env").([]any) {
		e := e.(map[string]any)
		env[e["name"].(string)] = e["value"]
	}
	if env["KUBERNETES_SERVICE_HOST"] != "api.example.com" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("env %v, want the kubelets' apiserver in KUBERNETES_SERVICE_HOST and _PORT", env)
	}
	def := one(t, renderValues(t, "agent: {enabled: true}\n"), "DaemonSet")
	if h, ok, _ := unstructured.NestedBool(def.Object, "spec", "template", "spec", "hostNetwork"); ok || h {
		t.Errorf("by default hostNetwork %v, want the pod network", h)
	}
	for _, bad := range [][]string{
		{"agent.apiServer.host=https://api", "agent.apiServer.port=6443"},
		{"agent.apiServer.host=api"},
		{"agent.apiServer.host=api", "agent.apiServer.port=0"},
	} {
		wantRenderError(t, bad, "apiServer")
	}
}
