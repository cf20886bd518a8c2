//go:build !series

package main

import "errors"

// newSeriesKeeper keeps no series in the bare client proper, which links
// none of the exporter's code: see series.go.
func newSeriesKeeper(_ int, addr string) (seriesKeeper, error) {
	if addr != "" {
		return nil, errors.New("-series.listen-address needs a build with the series tag")
	}
	return nil, nil
}
