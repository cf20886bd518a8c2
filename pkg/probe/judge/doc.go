// Package judge turns what a probe wrote and what its paths received into
// verdicts: the ledger of writes, each path's health, the judging
// functions, and the tracker that holds them under one lock and one clock
// and hands every verdict, as an Outcome, to its sinks (metrics, log,
// traces, and whatever else the exporter adds). It is pure: it reads the
// metadata of the objects it is handed and the instants it is told, and
// talks to no apiserver, so that every verdict can be tested with made-up
// arrivals.
package judge
