// Command pause is the sandbox image of the local node (StartNode): it holds
// a pod's namespaces and does nothing else until SIGINT or SIGTERM ends it,
// as registry.k8s.io/pause does. It is built here, so the node pulls nothing.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of a pod that shares its process namespace, it inherits the
	// pod's orphans and must reap them.
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
