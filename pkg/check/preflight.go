package check

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// Preflight makes sure that the check can run at all, so that a wrong
// kubeconfig, a missing namespace or a missing permission is an error that
// says so rather than a report full of failed writes. It writes nothing.
func (c *Check) Preflight(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rc, logger := c.opts.Config, c.opts.Logger
	client, err := kube.NewClient(rc)
	if err != nil {
		return err
	}
	v, err := client.ServerVersion(ctx)
	switch {
	case err != nil && !errors.Is(err, kube.ErrNoRelease):
		return fmt.Errorf("cannot reach the apiserver at %s: %w", rc.Host, err)
	case err != nil:
		// It answers; what it is decides nothing the check does.
		c.server = kube.ServerVersion{}
		logger.Warn("cannot tell the kube-apiserver's release; checking it all the same", "err", err)
	default:
		c.server = v
		if why := v.Untested(); why != "" {
			logger.Warn(why, "kube_apiserver", v.String())
		}
	}
	// A dry-run create proves that the namespace exists and that the
	// marker kind may be created there, and writes nothing; access reviews
	// prove the other verbs, which nothing can try without writing.
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	meta := metav1.ObjectMeta{Name: "watchprobe-preflight-" + c.opts.Replica}
	for _, cfg := range c.opts.Probes {
		group, resource := probe.MarkerResource(cfg.Kind)
		verbs := probe.MarkerVerbs
		switch missing, err := deniedVerbs(ctx, client, cfg.Namespace, group, resource, verbs); {
		case err != nil:
			logger.Warn("cannot review this identity's permissions; trying the check anyway", "err", err)
		case len(missing) > 0:
			return fmt.Errorf("probe %q may not %s its %s markers in namespace %q: grant %s and %s on %s there", cfg.Name, strings.Join(missing, " or "), cfg.Kind, cfg.Namespace, strings.Join(verbs[:len(verbs)-1], ", "), verbs[len(verbs)-1], resource)
		}
		for _, ctl := range cfg.Controllers {
			group, resource := probe.ControllerResource(ctl)
			verbs := probe.ControllerVerbs
			switch missing, err := deniedVerbs(ctx, client, cfg.Namespace, group, resource, verbs); {
			case err != nil:
				logger.Warn("cannot review this identity's permissions; trying the check anyway", "err", err)
			case len(missing) > 0:
				return fmt.Errorf("probe %q may not %s %s in namespace %q for its %s controller marker: grant %s and %s on %s.%s there", cfg.Name, strings.Join(missing, " or "), resource, cfg.Namespace, ctl, strings.Join(verbs[:len(verbs)-1], ", "), verbs[len(verbs)-1], resource, group)
			}
		}
		if cfg.APIServers.Discover {
			if err := preflightDiscovery(ctx, client, cfg.Name, logger); err != nil {
				return err
			}
		}
		if err := preflightFreshness(ctx, client, cfg, logger); err != nil {
			return err
		}
		if err := preflightWatchList(ctx, client, cfg, logger); err != nil {
			return err
		}
		meta.Namespace = cfg.Namespace
		var err error
		switch cfg.Kind {
		case config.KindLease:
			_, err = client.Leases(cfg.Namespace).Create(ctx, &coordinationv1.Lease{ObjectMeta: meta}, dryRun)
			if err == nil {
				_, err = client.Leases(cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
			}
		default:
			_, err = client.ConfigMaps(cfg.Namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta}, dryRun)
			if err == nil {
				_, err = client.ConfigMaps(cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
			}
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("probe %q cannot write its %s markers in namespace %q: %w", cfg.Name, cfg.Kind, cfg.Namespace, err)
		}
	}
	c.preflightAgents(ctx, client)
	return nil
}

// preflightDiscovery makes sure that `apiservers: discover` can follow the
// apiservers: without that, no per-apiserver path would ever start.
func preflightDiscovery(ctx context.Context, client *kube.Client, name string, logger *slog.Logger) error {
	switch missing, err := deniedVerbs(ctx, client, metav1.NamespaceDefault, "discovery.k8s.io", "endpointslices", probe.DiscoveryVerbs); {
	case err != nil:
		logger.Warn("cannot review this identity's permissions; trying the check anyway", "err", err)
	case len(missing) > 0:
		return fmt.Errorf("probe %q: apiservers: discover may not %s endpointslices in namespace default: grant list and watch on them there, or name the apiservers in apiservers.endpoints", name, strings.Join(missing, " or "))
	}
	_, err := client.EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes", Limit: 1})
	if err != nil {
		return fmt.Errorf("probe %q: apiservers: discover cannot list the kubernetes EndpointSlices in namespace default: %w", name, err)
	}
	return nil
}

// preflightFreshness makes sure that a probe's freshness checks may list
// what they list: each resource in the probe's namespace, each cluster
// resource cluster-wide, and the CRDs when they are to be found. Without
// it every check of that resource would be a forbidden error, reported
// but never a measurement.
func preflightFreshness(ctx context.Context, client *kube.Client, cfg config.Config, logger *slog.Logger) error {
	if !cfg.Freshness.Enabled() {
		return nil
	}
	needs := resourceNeeds(cfg.Namespace, "freshness", "list", cfg.Freshness.ParseResources())
	if len(cfg.Freshness.CRDs) > 0 {
		needs = append(needs, need{"", "apiextensions.k8s.io", "customresourcedefinitions", "list on customresourcedefinitions.apiextensions.k8s.io with a ClusterRole (the chart renders one when freshness.crds is set)"})
	}
	if err := preflightNeeds(ctx, client, cfg.Name, "freshness", "list", needs, logger); err != nil {
		return err
	}
	// What tells a resource served without a watch cache: without it such
	// a resource is checked as a cache, which the report should not hide.
	if missing, err := deniedVerbs(ctx, client, "", "apiregistration.k8s.io", "apiservices", []string{"list"}); err == nil && len(missing) > 0 {
		logger.Warn("freshness cannot list APIServices: a resource of an aggregated API is checked as if kube-apiserver cached it; grant list on apiservices.apiregistration.k8s.io (the chart does)", "probe", cfg.Name)
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}}
	if r, err := client.SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{}); err == nil && !r.Status.Allowed {
		logger.Warn("freshness cannot read the apiservers' /metrics: a resource stored without a watch cache is checked as a cache; grant get on the nonResourceURL /metrics (the chart does)", "probe", cfg.Name)
	}
	return nil
}

// preflightWatchList makes sure that a probe's WatchList sync checks may
// watch what they watch: each resource in the probe's namespace, each
// cluster resource cluster-wide.
func preflightWatchList(ctx context.Context, client *kube.Client, cfg config.Config, logger *slog.Logger) error {
	if !cfg.WatchList.Enabled() {
		return nil
	}
	needs := resourceNeeds(cfg.Namespace, "watch_list", "watch", cfg.WatchList.ParseResources())
	return preflightNeeds(ctx, client, cfg.Name, "watch_list", "watch", needs, logger)
}

// need is a permission a check of section needs, and how to grant it.
type need struct {
	namespace, group, resource, grant string
}

// resourceNeeds are verb on each of resources: in namespace, or
// cluster-wide for a cluster-scoped one.
func resourceNeeds(namespace, section, verb string, resources []config.Resource) []need {
	var needs []need
	for _, r := range resources {
		if r.Cluster {
			needs = append(needs, need{"", r.Group, r.Resource, verb + " on " + r.String() + " with a ClusterRole (the chart renders one when " + section + ".cluster_resources is set)"})
		} else {
			needs = append(needs, need{namespace, r.Group, r.Resource, verb + " on " + r.String() + " in namespace " + namespace})
		}
	}
	return needs
}

// preflightNeeds fails on the first of needs the apiserver denies this
// identity, naming the grant.
func preflightNeeds(ctx context.Context, client *kube.Client, probe, section, verb string, needs []need, logger *slog.Logger) error {
	for _, n := range needs {
		switch missing, err := deniedVerbs(ctx, client, n.namespace, n.group, n.resource, []string{verb}); {
		case err != nil:
			logger.Warn("cannot review this identity's permissions; trying the check anyway", "err", err)
			return nil
		case len(missing) > 0:
			where := "in namespace " + n.namespace
			if n.namespace == "" {
				where = "cluster-wide"
			}
			return fmt.Errorf("probe %q: %s may not %s %s %s: grant %s, or take it out of %s", probe, section, verb, n.resource, where, n.grant, section)
		}
	}
	return nil
}

// deniedVerbs lists the verbs on resource in namespace that the apiserver
// does not allow this identity.
func deniedVerbs(ctx context.Context, client *kube.Client, namespace, group, resource string, verbs []string) ([]string, error) {
	var denied []string
	for _, verb := range verbs {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: resource},
		}}
		r, err := client.SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		if !r.Status.Allowed {
			denied = append(denied, verb)
		}
	}
	return denied, nil
}
