package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// logServerVersion logs the kube-apiserver's release once it first
// answers, as a warning when it is outside the range `make compat` tested
// (kube.Untested), and then returns: it decides nothing the probes do, so
// an upgrade beyond the range is measured, and said once, never refused.
// An apiserver that does not answer yet is asked again, less often each
// time, until ctx ends.
func logServerVersion(ctx context.Context, rc *rest.Config, logger *slog.Logger) {
	client, err := kube.NewClient(rc)
	if err != nil {
		logger.Warn("cannot tell the kube-apiserver's release", "err", err)
		return
	}
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		askCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := client.ServerVersion(askCtx)
		cancel()
		switch {
		case err == nil:
			if why := v.Untested(); why != "" {
				logger.Warn(why, "kube_apiserver", v.String())
			} else {
				logger.Info("kube-apiserver release", "kube_apiserver", v.String())
			}
			return
		case errors.Is(err, kube.ErrNoRelease):
			logger.Warn("cannot tell the kube-apiserver's release; measuring it all the same", "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
