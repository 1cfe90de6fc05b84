// Command pause is the sandbox ("pause") container of the local cluster: it holds a pod's
// namespaces open, reaps zombies (it is PID 1 there) and exits on SIGINT or SIGTERM. It does what
// upstream's pause.c does, in Go, so that the image can be built here without a C toolchain in it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
